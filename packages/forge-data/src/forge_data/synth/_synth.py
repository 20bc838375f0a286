"""`forge-data synth`: a project -> validated Harbor tasks with procedural bugs, as SWE-smith
makes them, every test run in the sandbox (`forge-sandbox nop` over probe tasks):

1. the project (a PyPI sdist, cached, or a local folder / git repository) is copied to a
   workspace; a project without tests or source, or with compiled extensions, is refused;
2. its runtime and test dependencies go into the workspace's `.venv` (network now, never after);
3. baseline: the whole suite runs twice in the sandbox with a per-test (CTRF) report; the tests
   that pass both times are kept (the others are flaky or failing); no passing test: refused;
4. candidates (swesmith's modifiers, seeded) run the suite in batches, in the seeded order: a
   candidate is kept when a baseline-passing test now fails (FAIL_TO_PASS; PASS_TO_PASS = those
   still passing), dropped when nothing fails, when it breaks collection or the suite, times
   out, or fails the same set as a kept one; until `max_tasks` are kept;
5. each kept bug becomes a Harbor task folder (problem statement from the failing tests);
6. curation: NOP (reward 0) and oracle (reward 1) in the sandbox; a task that fails either is
   dropped with its reason; the rest move to `--out`, with `synth-report.json`.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forge_data._errors import DataError
from forge_data.bulk._sandbox_jobs import Backend, SandboxRun, run_sandbox_job
from forge_data.curation._harbor_jobs import JobRead
from forge_data.synth._bugs import Candidate, candidates, is_test_path, source_files
from forge_data.synth._env import build_env
from forge_data.synth._report_plugin import ReportedTest, collection_errors, passed, read_ctrf
from forge_data.synth._source import Project, fetch_project
from forge_data.synth._statement import problem_statement
from forge_data.synth._task import task_name, write_probe, write_task
from forge_gates import atomic_write_json

REPORT_NAME = "synth-report.json"
# a suite that cannot start under the newest pytest (an old conftest hook signature, a removed
# API) is tried under older ones before the project is refused
PYTEST_ERAS = ("pytest", "pytest<8", "pytest<7")


class SuiteDidNotStartError(DataError):
    """The suite gave no per-test report (not a hang): another pytest may run it."""


DROP_REASONS = ("no_failure", "breaks_collection", "breaks_suite", "timeout", "same_failures")


def default_python() -> str:
    """The Python the local sandbox finds first on its PATH (/usr/local/bin, then /usr/bin)
    whose real file sits under /usr (the sandbox binds only /usr: a link into a home folder, a
    pyenv shim, would not run there)."""
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if Path(candidate).is_file() and Path(candidate).resolve().is_relative_to("/usr"):
            return candidate
    return "/usr/bin/python3"


class SynthConfig(BaseModel):
    """One synthesis run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="NAME==VERSION (a PyPI sdist) or a project folder.")
    out: Path = Field(description="Where the validated task folders and the report go.")
    seed: int = Field(default=0, description="Orders the candidates and seeds the modifiers.")
    max_tasks: int = Field(default=6, ge=1, description="Stop after this many kept bugs.")
    max_candidates: int | None = Field(
        default=None, ge=1, description="Candidates evaluated at most (None: 15 x max_tasks + 30)."
    )
    python: str = Field(default_factory=default_python, description="The sandbox's Python.")
    cache: Path = Field(default=Path(".cache/forge"), description="sdist cache root.")
    backend: Backend = Field(default="local", description="The sandbox of every test run.")
    concurrency: int = Field(default=2, ge=1, description="Sandboxes at once.")
    batch: int = Field(default=8, ge=1, description="Candidates per sandbox job.")
    baseline_timeout_s: int = Field(
        default=600, ge=5, description="The whole suite's limit at baseline (a hang: refused)."
    )
    validate_tasks: bool = Field(default=True, description="Run NOP and oracle on every task.")
    quiet: bool = Field(default=False, description="No progress on stderr.")


class ModifierCounts(BaseModel):
    """What happened to one swesmith modifier's rewrites."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    candidates: int = Field(default=0, description="Rewrites that became candidates.")
    no_change: int = Field(default=0, description="Pairs it left unchanged.")
    syntax_error: int = Field(default=0, description="Rewrites that did not compile.")
    duplicate: int = Field(default=0, description="Rewrites repeating an earlier file text.")
    modifier_error: int = Field(default=0, description="Pairs where the modifier raised.")
    evaluated: int = Field(default=0, description="Candidates whose suite ran.")
    kept: int = Field(default=0, description="Candidates kept as tasks.")
    dropped: dict[str, int] = Field(default_factory=dict, description="Evaluated, dropped why.")


class SynthReport(BaseModel):
    """What a synthesis run did (written as `synth-report.json`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="NAME==VERSION or the project folder asked for.")
    project: str = Field(default="", description="The distribution name found.")
    version: str = Field(default="", description="The release (or the local tree's version).")
    repository: str = Field(default="", description="`pypi/<name>` or `local/<name>`.")
    seed: int = Field(description="The seed of the candidates' order and the modifiers.")
    max_tasks: int = Field(description="The most tasks asked for.")
    refused: str | None = Field(default=None, description="Why the project gave no task.")
    baseline: dict[str, Any] = Field(default_factory=dict, description="The suite at baseline.")
    modifiers: dict[str, ModifierCounts] = Field(
        default_factory=dict, description="Per swesmith modifier, what its rewrites became."
    )
    dropped: dict[str, int] = Field(default_factory=dict, description="Candidates, by reason.")
    validation_failed: dict[str, str] = Field(
        default_factory=dict, description="Tasks dropped by NOP / oracle, with the reason."
    )
    tasks: list[dict[str, Any]] = Field(default_factory=list, description="The tasks kept.")
    pins: list[str] = Field(default_factory=list, description="The venv's installed versions.")
    seconds: dict[str, float] = Field(default_factory=dict, description="Wall time per stage.")


class _Counts(ModifierCounts):
    """ModifierCounts while the run goes (mutable)."""

    model_config = ConfigDict(frozen=False, extra="forbid")


class _Draft(SynthReport):
    """SynthReport while the run goes (mutable); frozen by `synth` at the end."""

    model_config = ConfigDict(frozen=False, extra="forbid")

    modifiers: dict[str, _Counts] = Field(default_factory=dict)  # type: ignore[assignment]


def _say(config: SynthConfig, message: str) -> None:
    if not config.quiet:
        print(f"synth: {message}", file=sys.stderr, flush=True)


def _refuse(project: Project, workspace: Path) -> str | None:
    """Why this project cannot give tasks, before anything is installed; None when it can."""
    tests = [
        p for p in workspace.rglob("*.py") if is_test_path(p.relative_to(workspace).as_posix())
    ]
    if not tests:
        return (
            f"{project.source}: no test files (test_*.py, *_test.py or a tests/ folder); an sdist "
            "without its tests cannot be synthesized: give a checkout of the repository"
        )
    if not source_files(workspace):
        return f"{project.source}: no Python source files outside the tests"
    compiled = sorted(
        p.relative_to(workspace).as_posix()
        for pattern in ("*.pyx", "*.pxd")
        for p in workspace.rglob(pattern)
    )
    setup_py = workspace / "setup.py"
    setup_text = (
        setup_py.read_text(encoding="utf-8", errors="replace") if setup_py.is_file() else ""
    )
    if not compiled and re.search(r"\bExtension\s*\(", setup_text):
        compiled = ["setup.py: Extension(...)"]
    if compiled:
        return (
            f"{project.source}: compiled extensions ({', '.join(compiled[:3])}): pure Python only"
        )
    return None


class _Probe(BaseModel):
    tests: list[ReportedTest] | None
    exit_code: str
    output: str
    seconds: float | None


def _read_probes(job: JobRead) -> dict[str, _Probe]:
    probes: dict[str, _Probe] = {}
    for trial in job.trials:
        verifier = Path(trial.location).parent / "verifier"
        exit_file, output = verifier / "pytest-exit.txt", verifier / "pytest-output.txt"
        probes[trial.task_name] = _Probe(
            tests=read_ctrf(verifier / "ctrf.json"),
            exit_code=exit_file.read_text().strip() if exit_file.is_file() else "",
            output=output.read_text(errors="replace")[-3000:] if output.is_file() else "",
            seconds=trial.verifier_seconds,
        )
    return probes


def _run_probes(tasks: Path, job: Path, run: SandboxRun) -> dict[str, _Probe]:
    return _read_probes(run_sandbox_job("nop", tasks, job, run))


class _State:
    """The candidates' outcomes as they are decided, in the seeded order."""

    def __init__(self, baseline: set[str], base_errors: set[str]) -> None:
        self.baseline, self.base_errors = baseline, base_errors
        self.kept: list[tuple[Candidate, list[ReportedTest], list[str]]] = []
        self.failing_sets: set[frozenset[str]] = set()
        self.dropped: Counter[str] = Counter()

    def decide(self, candidate: Candidate, probe: _Probe | None) -> str:
        """'kept' or the reason it was dropped."""
        if probe is None or probe.tests is None:
            return (
                "timeout"
                if probe is not None and probe.exit_code in ("124", "137")
                else ("breaks_suite")
            )
        if set(collection_errors(probe.tests)) - self.base_errors:
            return "breaks_collection"
        failing = [t for t in probe.tests if t.status == "failed" and t.name in self.baseline]
        if not failing:
            return "no_failure"
        names = frozenset(t.name for t in failing)
        if names in self.failing_sets:
            return "same_failures"
        self.failing_sets.add(names)
        still = sorted(self.baseline & passed(probe.tests))
        self.kept.append((candidate, sorted(failing, key=lambda t: t.name), still))
        return "kept"


def _baseline(config: SynthConfig, work: Path, workspace: Path, report: _Draft) -> _State:
    probes = work / "probes-baseline"
    limit = config.baseline_timeout_s
    for name in ("baseline-a", "baseline-b"):
        write_probe(probes / name, workspace, None, timeout_s=limit)
    run = SandboxRun(
        backend=config.backend, concurrency=2, verifier_timeout_s=limit + 60, quiet=True
    )
    results = _run_probes(probes, work / "jobs" / "baseline", run)
    runs = [results.get(name) for name in ("baseline-a", "baseline-b")]
    if any(r is None or r.tests is None for r in runs):
        broken = next((r for r in runs if r is not None and r.tests is None), None)
        output = broken.output if broken is not None else ""
        tail = "\n".join(output.strip().splitlines()[-15:]) or "(no output: see the job folder)"
        hung = broken is not None and broken.exit_code in ("124", "137")
        if hung:
            tail = f"the suite did not finish within {limit} s (a hanging test?)\n{tail}"
        raise (DataError if hung else SuiteDidNotStartError)(
            "synth",
            expected=f"{report.source}'s test suite to run in the sandbox (a per-test report)",
            found=f"no report; pytest said:\n{tail}",
            fix="a project whose suite cannot run offline in the sandbox cannot be synthesized",
        )
    first, second = (r.tests or [] for r in runs)  # type: ignore[union-attr]
    stable = passed(first) & passed(second)
    flaky = passed(first) ^ passed(second)
    seconds = max(r.seconds or 0.0 for r in runs)  # type: ignore[union-attr]
    report.baseline = {
        "tests": len(first),
        "passing": len(stable),
        "flaky": len(flaky),
        "failing_or_skipped": len(first) - len(passed(first)),
        "collection_errors": sorted(collection_errors(first)),
        "seconds": round(seconds, 2),
    }
    if not stable:
        raise DataError(
            "synth",
            expected=f"tests of {report.source} that pass at baseline",
            found=f"{len(first)} tests, none passing twice",
            fix="a project whose suite fails at baseline cannot be synthesized",
        )
    return _State(stable, set(collection_errors(first)))


def _environment_and_baseline(
    config: SynthConfig, project: Project, work: Path, workspace: Path, report: _Draft
) -> _State:
    """The venv and the baseline, under the newest pytest, else older ones (PYTEST_ERAS)."""
    for number, pytest in enumerate(PYTEST_ERAS, 1):
        report.pins = build_env(project, workspace, config.python, pytest)
        try:
            return _baseline(config, work, workspace, report)
        except SuiteDidNotStartError:
            if number == len(PYTEST_ERAS):
                raise
            used = next((p for p in report.pins if p.startswith("pytest==")), pytest)
            _say(config, f"the suite gave no report under {used}; trying {PYTEST_ERAS[number]}")
            shutil.rmtree(workspace / ".venv", ignore_errors=True)
            shutil.rmtree(work / "probes-baseline", ignore_errors=True)
            shutil.rmtree(work / "jobs" / "baseline", ignore_errors=True)
    raise AssertionError("unreachable")


TIMEOUT_RUNGS = (45, 90, 180, 300)  # a suite's limit, s: the tasks' verifier timeout too


def suite_timeout(baseline_s: float) -> int:
    """The limit of a candidate's suite and of its task's verifier: 5x the baseline's time
    + 20 s, up to the next rung (at most 300 s). A rung, not the figure itself: the same seed
    must write the same tasks on a loaded machine (a baseline of 2.4 s against 1.9 s changed
    task.toml and tests/test.sh when it was 5x + 20 s with a 30 s floor)."""
    need = 5 * baseline_s + 20
    return next((rung for rung in TIMEOUT_RUNGS if rung >= need), TIMEOUT_RUNGS[-1])


def _evaluate(
    config: SynthConfig, work: Path, workspace: Path, report: _Draft, state: _State
) -> _State:
    _say(
        config,
        f"baseline: {report.baseline['tests']} tests, {len(state.baseline)} pass twice "
        f"({report.baseline['seconds']} s)",
    )
    timeout_s = suite_timeout(report.baseline["seconds"])
    counts: dict[str, Counter[str]] = {}
    limit = config.max_candidates or 15 * config.max_tasks + 30
    stream = candidates(workspace, config.seed, max_pairs=40 * limit, counts=counts)
    evaluated, number = 0, 0
    while len(state.kept) < config.max_tasks and evaluated < limit:
        batch: list[Candidate] = []
        for candidate in stream:
            batch.append(candidate)
            if len(batch) >= min(config.batch, limit - evaluated):
                break
        if not batch:
            break
        number += 1
        probes = work / f"probes-{number:04d}"
        for candidate in batch:
            write_probe(probes / f"cand-{candidate.index:05d}", workspace, candidate, timeout_s)
        run = SandboxRun(
            backend=config.backend,
            concurrency=config.concurrency,
            verifier_timeout_s=timeout_s + 60,
            quiet=True,
        )
        results = _run_probes(probes, work / "jobs" / f"batch-{number:04d}", run)
        shutil.rmtree(probes, ignore_errors=True)
        for candidate in batch:
            if len(state.kept) >= config.max_tasks:
                break
            evaluated += 1
            verdict = state.decide(candidate, results.get(f"cand-{candidate.index:05d}"))
            tally = report.modifiers.setdefault(candidate.modifier, _Counts())
            tally.evaluated += 1
            if verdict == "kept":
                tally.kept += 1
            else:
                tally.dropped[verdict] = tally.dropped.get(verdict, 0) + 1
                state.dropped[verdict] += 1
        _say(
            config, f"candidates: {evaluated} evaluated, {len(state.kept)}/{config.max_tasks} kept"
        )
    for name, made in counts.items():
        entry = report.modifiers.setdefault(name, _Counts())
        entry.candidates = made["candidate"]
        entry.no_change, entry.syntax_error = made["no_change"], made["syntax_error"]
        entry.duplicate, entry.modifier_error = made["duplicate"], made["modifier_error"]
    report.dropped = dict(sorted(state.dropped.items()))
    report.baseline["timeout_s"] = timeout_s
    return state


def _validate(config: SynthConfig, work: Path, final: Path, report: _Draft) -> set[str]:
    """The task names whose NOP scored 0 and oracle 1 in the sandbox (with evidence)."""
    run = SandboxRun(
        backend=config.backend, concurrency=config.concurrency, verifier_timeout_s=600, quiet=True
    )
    nop = {t.task_name: t for t in run_sandbox_job("nop", final, work / "jobs" / "nop", run).trials}
    oracle = {
        t.task_name: t
        for t in run_sandbox_job("oracle", final, work / "jobs" / "oracle", run).trials
    }
    good = set()
    for name in sorted(p.name for p in final.iterdir() if p.is_dir()):
        a, b = nop.get(name), oracle.get(name)
        if a is None or b is None:
            report.validation_failed[name] = "no NOP or oracle trial"
        elif a.exception_type or b.exception_type:
            report.validation_failed[name] = (
                f"infrastructure: {a.exception_type or b.exception_type}"
            )
        elif a.reward != 0.0:
            report.validation_failed[name] = f"NOP scored {a.reward} (expected 0)"
        elif b.reward != 1.0:
            report.validation_failed[name] = f"oracle scored {b.reward} (expected 1)"
        else:
            good.add(name)
    return good


def synth(config: SynthConfig) -> SynthReport:
    """Run one synthesis; the report is also written to `<out>/synth-report.json`."""
    started = time.monotonic()
    report = _Draft(source=config.source, seed=config.seed, max_tasks=config.max_tasks)
    out = config.out.absolute()  # every path the installers and sandboxes see is absolute
    work = out / ".synth-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        tick = time.monotonic()
        project = fetch_project(config.source, work, config.cache)
        report.project, report.version = project.name, project.version
        report.repository = project.repository
        workspace = work / "workspace"
        report.refused = _refuse(project, project.root)
        report.seconds["fetch"] = round(time.monotonic() - tick, 2)
        if report.refused is None:
            _synthesize(config, project, work, workspace, report)
    except DataError as exc:
        report.refused = str(exc)
    finally:
        report.seconds["total"] = round(time.monotonic() - started, 2)
        atomic_write_json(out / REPORT_NAME, report.model_dump(mode="json"))
    if report.refused is None:
        shutil.rmtree(work, ignore_errors=True)
    return SynthReport.model_validate(report.model_dump())


def _synthesize(
    config: SynthConfig, project: Project, work: Path, workspace: Path, report: _Draft
) -> None:
    tick = time.monotonic()
    shutil.copytree(project.root, workspace, symlinks=True)
    _say(config, f"{project.repository} {project.version}: installing its test dependencies")
    state = _environment_and_baseline(config, project, work, workspace, report)
    pins = report.pins
    report.seconds["environment_and_baseline"] = round(time.monotonic() - tick, 2)
    tick = time.monotonic()
    state = _evaluate(config, work, workspace, report, state)
    report.seconds["candidates"] = round(time.monotonic() - tick, 2)
    tick = time.monotonic()
    final = work / "final"
    final.mkdir()
    meta = {
        "repository": project.repository,
        "source": project.source,
        "version": project.version,
        "pins": "\n".join(pins) + "\n",
    }
    timeout_s = int(report.baseline["timeout_s"])
    for candidate, failing, still in state.kept:
        name = task_name(project.name, candidate)
        original = (workspace / candidate.path).read_text(encoding="utf-8")
        statement = problem_statement(project.name, failing)
        tests = ([t.name for t in failing], still)
        write_task(final, name, workspace, candidate, original, meta, tests, statement, timeout_s)
        report.tasks.append(
            {
                "name": name,
                "modifier": candidate.modifier,
                "path": candidate.path,
                "entity": candidate.entity,
                "fail_to_pass": len(failing),
                "pass_to_pass": len(still),
            }
        )
    report.seconds["write"] = round(time.monotonic() - tick, 2)
    tick = time.monotonic()
    good = {t["name"] for t in report.tasks}
    if config.validate_tasks and report.tasks:
        _say(config, f"validating {len(report.tasks)} tasks: NOP and oracle in the sandbox")
        good = _validate(config, work, final, report)
    report.seconds["validate"] = round(time.monotonic() - tick, 2)
    report.tasks = [t for t in report.tasks if t["name"] in good]
    out = config.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    for task in report.tasks:
        shutil.rmtree(out / task["name"], ignore_errors=True)
        shutil.move(str(final / task["name"]), out / task["name"])
    if not report.tasks:
        report.refused = "no candidate bug was kept and validated (see `dropped`)"
