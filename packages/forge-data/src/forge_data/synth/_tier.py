"""The real-repository tier (`realrepo`): tasks synthesized from real PyPI projects, curated by
Forge's own NOP / oracle and frozen with no repository in two splits; built on first use (or by
`forge-data realrepo build`, `nox -s synth`) into `forge_gates.realrepo_dir()` and reused while
the tier's spec is unchanged (its fingerprint in `tier.json`), as the demo policy is cached.

Building needs the package index (each project's sdist and test dependencies); using it never
does. Each project's synthesis is kept under `build/<project>/` and reused when it finished, and
curation resumes its batches, so a killed build goes on where it stopped.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from forge_data._errors import DataError
from forge_data.bulk._curate import curate
from forge_data.bulk._sandbox_jobs import SandboxRun
from forge_data.freeze._freeze import FreezeSpec, SplitTargets
from forge_data.synth._synth import REPORT_NAME, SynthConfig, synth
from forge_gates import REALREPO, atomic_write_json, realrepo_dir, sha256_canonical

# 2: test.sh prints pytest -rA (the harness grades listed tests); 3: tests/config.json holds
# the gold patch (the verifier's carry keeps the test side as the task's)
TIER_VERSION = 3


class TierSpec(BaseModel):
    """What the tier is built from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    projects: tuple[str, ...] = Field(description="PyPI releases, NAME==VERSION.")
    seed: int = Field(description="Every project's synthesis seed.")
    tasks_per_project: int = Field(ge=1, description="Kept bugs per project at most.")
    targets: SplitTargets = Field(description="Tasks per split.")
    per_repo_cap: int = Field(ge=1, description="Most tasks from one project.")
    min_repositories: int = Field(ge=1, description="Fewest projects over the splits.")

    def fingerprint(self) -> str:
        return sha256_canonical({"tier": TIER_VERSION, **self.model_dump(mode="json")})


REALREPO_TIER = TierSpec(
    # pure-Python releases whose sdists carry their tests and whose suites run offline in
    # seconds (boltons 24.1.0, tried first, needed pytest < 9 for its conftest: synthesis now
    # falls back to an older pytest, but the tier was frozen without it)
    projects=(
        "inflection==0.5.1",
        "toolz==1.0.0",
        "more-itertools==10.5.0",
        "six==1.16.0",
        "cachetools==5.5.0",
        "idna==3.10",
        "tabulate==0.9.0",
        "semver==3.0.2",
        "parse==1.20.2",
    ),
    seed=7,
    tasks_per_project=10,
    targets=SplitTargets(train=40, validation=12, test=12),
    per_repo_cap=10,
    min_repositories=6,
)


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"realrepo: {message}", file=sys.stderr, flush=True)


def realrepo_ready(tier: TierSpec = REALREPO_TIER, cache_dir: Path | None = None) -> bool:
    folder = realrepo_dir(cache_dir)
    try:
        built = json.loads((folder / "tier.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        built.get("fingerprint") == tier.fingerprint()
        and (folder / "split" / "manifest.json").is_file()
    )


def build_realrepo(
    tier: TierSpec = REALREPO_TIER,
    cache_dir: Path | None = None,
    *,
    concurrency: int = 2,
    quiet: bool = False,
) -> Path:
    """Synthesize every project, curate, freeze; the frozen split folder."""
    folder = realrepo_dir(cache_dir)
    build = folder / "build"
    tasks = build / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    reports = {}
    for number, source in enumerate(tier.projects, 1):
        name = source.split("==")[0]
        out = build / "synth" / name
        done = out / REPORT_NAME
        if not done.is_file():
            _say(f"[{number}/{len(tier.projects)}] synthesizing {source}", quiet)
            synth(
                SynthConfig(
                    source=source,
                    out=out,
                    seed=tier.seed,
                    concurrency=concurrency,
                    max_tasks=tier.tasks_per_project,
                    quiet=quiet,
                    validate_tasks=False,
                    cache=folder.parent,
                )
            )
        report = json.loads(done.read_text(encoding="utf-8"))
        reports[source] = report
        for task in report.get("tasks", []):
            if not (tasks / task["name"]).exists() and (out / task["name"]).is_dir():
                shutil.copytree(out / task["name"], tasks / task["name"], symlinks=True)
        _say(
            f"{source}: {len(report.get('tasks', []))} tasks"
            + (f" (refused: {report['refused']})" if report.get("refused") else ""),
            quiet,
        )
    spec = FreezeSpec(
        name="realrepo",
        targets=tier.targets,
        per_repo_cap=tier.per_repo_cap,
        min_repositories=tier.min_repositories,
        seed=tier.seed,
    )
    split = folder / "split"
    shutil.rmtree(split, ignore_errors=True)
    run = SandboxRun(backend="local", concurrency=concurrency, verifier_timeout_s=600, quiet=quiet)
    result = curate(tasks, build / "curate", spec, run, batch_size=40, freeze_to=split)
    if not result.ready or result.frozen is None:
        raise DataError(
            "realrepo",
            expected=f"a freeze of {tier.targets} from >= {tier.min_repositories} projects",
            found=f"curation stopped with verdicts {result.verdicts}",
            fix=f"see {build / 'curate'}; add projects to the tier or lower its targets",
        )
    atomic_write_json(
        folder / "tier.json",
        {
            "fingerprint": tier.fingerprint(),
            "tier": tier.model_dump(mode="json"),
            "verdicts": result.verdicts,
            "synth": {
                s: {k: r.get(k) for k in ("tasks", "refused", "baseline", "dropped", "seconds")}
                for s, r in reports.items()
            },
        },
    )
    return split


def ensure_realrepo(cache_dir: Path | None = None, *, quiet: bool = False) -> Path:
    """The tier's frozen split folder, built first when it is missing or stale."""
    if not realrepo_ready(REALREPO_TIER, cache_dir):
        _say(
            f"building the real-repository tier into {realrepo_dir(cache_dir)} (first use; "
            "needs the package index; minutes)",
            quiet,
        )
        build_realrepo(REALREPO_TIER, cache_dir, quiet=quiet)
    return realrepo_dir(cache_dir) / "split"


def ensure_task_set(tasks_ref: str, *, quiet: bool = False) -> str:
    """`tasks_ref` unchanged, after building the real-repository tier when it names it and the
    tier is missing or stale (every entry point calls this before verifying a task set)."""
    if tasks_ref == REALREPO:
        ensure_realrepo(quiet=quiet)
    return tasks_ref
