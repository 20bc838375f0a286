"""Mutation testing of Forge's core modules with mutmut 3, one module at a time.

mutmut 3 mutates the files under its `source_paths`, copies them into `mutants/` and runs pytest
there. A workspace of several src-layout packages does not fit one configuration, so each module
gets its own scratch copy (`.mutants/<module>/`, ignored by git):

1. the module's package `src/`, `tests/` and README, plus the root `conftest.py` (hypothesis
   profiles);
2. a `pyproject.toml` whose `[tool.mutmut]` mutates that one file and selects only the test files
   that exercise it (mutmut then runs, per mutant, just the tests that call the mutated function);
3. `mutmut run`; then every mutant's status and its diff are read back.

A surviving mutant listed in `tools/mutants-equivalent.toml` (matched by module, function, the
original line and the mutated line, so renumbering does not matter) is equivalent: no test can
tell it from the original. score = detected / non-equivalent, detected = killed + timeout.
Writes `mutants-report.json` (schema forge/mutants-report@1) and a table; exits 1 when a module
scores below the threshold (90%) or mutmut fails.

Usage: `python tools/mutants.py [--only forge_ppo.algo._gae ...] [--out mutants-report.json]`
(normally through `nox -s mutants`, which installs mutmut==3.8.1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "forge/mutants-report@1"
EQUIVALENT_FILE = ROOT / "tools" / "mutants-equivalent.toml"
THRESHOLD = 0.90


@dataclass(frozen=True)
class Target:
    module: str  # dotted module, e.g. forge_ppo.algo._gae
    package: str  # folder under packages/
    tests: tuple[str, ...]  # test files under the package's tests/ that exercise the module
    # only these functions are mutated (`name`, or `Class.method`); empty: the whole module.
    # For a module whose other functions orchestrate (sandboxes, jobs): its pure core only
    functions: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return "src/" + self.module.replace(".", "/") + ".py"

    def patterns(self) -> list[str]:
        """mutmut's mutant-name globs for `functions` (mangled as mutmut does: `x_name`,
        `xǁClassǁmethod`); the glob also matches the function's own key, which selects its
        tests for mutmut's clean run."""
        mangled = [
            "x\u01c1" + name.replace(".", "\u01c1") if "." in name else "x_" + name
            for name in self.functions
        ]
        return [f"{self.module}.{name}*" for name in mangled]


TARGETS = (
    Target("forge_eval._stats", "forge-eval", ("test_stats.py", "test_stats_inputs.py")),
    Target(
        "forge_rollout.gateway._guard",
        "forge-rollout",
        ("test_guard.py", "test_traces.py", "test_gateway.py", "test_gateway_faults.py"),
    ),
    Target(
        "forge_ppo.algo._observability",
        "forge-ppo",
        ("test_observability.py", "test_observability_inputs.py"),
    ),
    Target(
        "forge_ppo.algo._losses",
        "forge-ppo",
        ("test_losses.py", "test_loss_inputs.py", "test_parity_fixture.py"),
    ),
    Target(
        "forge_ppo.algo._gae",
        "forge-ppo",
        (
            "test_gae.py",
            "test_gae_inputs.py",
            "test_masked_stats.py",
            "test_losses.py",
            "test_parity_fixture.py",
        ),
    ),
    Target("forge_data.freeze._freeze", "forge-data", ("test_freeze.py", "test_freeze_policy.py")),
    Target(
        "forge_gates.spec._rules",
        "forge-gates",
        ("test_spec_rules.py", "test_rule_messages.py", "test_backends.py", "test_p0_protocol.py"),
    ),
    # the Docker backend's exec wrapper and report, and a SandboxSpec's limits as the container's
    Target(
        "forge_sandbox.docker._exec",
        "forge-sandbox",
        ("test_docker_backend.py", "test_docker_exec.py"),
    ),
    Target(
        "forge_sandbox.docker._create",
        "forge-sandbox",
        ("test_docker_backend.py", "test_docker_create.py"),
    ),
    # an exec's report -> ExecResult (exit status, OOM, pids, SIGXFSZ, capped output), the
    # limits kill_processes reports, a timeout's kill (against a fake docker-py APIClient)
    Target(
        "forge_sandbox.docker._sandbox",
        "forge-sandbox",
        ("test_docker_sandbox_exec.py",),
        functions=(
            "DockerSandbox.exec",
            "DockerSandbox._run",
            "DockerSandbox._kill_marked",
            "DockerSandbox.kill_processes",
            "DockerSandbox._check_alive",
        ),
    ),
    # the verifier's reward: reward files, the run's checks, evidence, the listed tests. The
    # verifier's steps against a fake sandbox (the real-sandbox tests would run each of its
    # mutants through bubblewrap trials, and a mutated timeout waits out a test's sleep)
    Target("forge_sandbox.verify._verifier", "forge-sandbox", ("test_verify_units.py",)),
    Target(
        "forge_sandbox.verify._evidence",
        "forge-sandbox",
        ("test_evidence.py", "test_verify_units.py"),
    ),
    Target(
        "forge_sandbox.verify._testlist",
        "forge-sandbox",
        ("test_fresh_verifier.py", "test_verify_units.py"),
    ),
    # synthesis keeps a candidate that breaks passing tests, and a task only when NOP scores 0
    # and the oracle 1 (the rest of the module drives sandboxes)
    Target(
        "forge_data.synth._synth",
        "forge-data",
        ("test_synth_units.py", "test_synth_keep.py"),
        functions=("_State.decide", "_validate"),
    ),
    # the per-GPU memory estimate's formulas (the module every figure comes from)
    Target(
        "forge_ppo.estimate._formulas",
        "forge-ppo",
        ("test_estimate.py", "test_estimate_seed.py", "test_estimate_formulas.py"),
    ),
    # attribution: who caused a failure (the rest of the module runs the trial)
    Target(
        "forge_sandbox._trial",
        "forge-sandbox",
        ("test_trial_attribution.py", "test_trial_agents.py"),
        functions=(
            "reward_of",
            "_with_limits",
            "_limit_text",
            "_kill_agent_processes",
            "_agent_caused",
            "_caused_by_change",
            "_carry",
            "_verify",
        ),
    ),
)

# mutmut exit codes -> the report's buckets (mutmut.stats.status_by_exit_code)
KILLED = {1, 3, 37}  # a test failed / pytest errored / the type checker caught it
TIMEOUT = {36, -24, 24, 152, 255, -9, -11}  # CPU limit hit, killed after it, or crashed
NO_TESTS = {5, 33}  # no selected test calls the mutated function
SURVIVED = {0}

DIFF_SCRIPT = """\
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path = sys.argv[1]
with open(f"mutants/{path}.meta") as f:
    names = list(json.load(f)["exit_code_by_key"])
print(json.dumps({name: get_diff_for_mutant(name, path=path) for name in names}))
"""


def mutmut_config(target: Target, tests: list[str]) -> str:
    selection = json.dumps([f"tests/{name}" for name in tests])
    return f"""\
# written by tools/mutants.py for {target.module}
[tool.mutmut]
source_paths = ["src"]
only_mutate = [{json.dumps(target.source)}]
also_copy = ["conftest.py", "README.md"]
pytest_add_cli_args_test_selection = {selection}
pytest_add_cli_args = ["-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]
use_git_change_detection = false
track_dependencies = false

[tool.pytest.ini_options]
addopts = "--import-mode=importlib"
markers = ["slow: end-to-end checks that take more than a few seconds"]
"""


def prepare(target: Target, work: Path) -> list[str]:
    """A fresh scratch copy of the target's package; returns the selected test files."""
    package = ROOT / "packages" / target.package
    tests = [name for name in target.tests if (package / "tests" / name).is_file()]
    missing = sorted(set(target.tests) - set(tests))
    if missing:
        print(f"  note: {target.module}: test files not found, skipped: {missing}", flush=True)
    if not tests:
        raise SystemExit(f"{target.module}: none of its test files exist: {list(target.tests)}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    shutil.copytree(package / "src", work / "src", ignore=ignore)
    shutil.copytree(package / "tests", work / "tests", ignore=ignore)
    shutil.copy2(ROOT / "conftest.py", work / "conftest.py")
    if (package / "README.md").is_file():  # tests that hold the README to the code read it
        shutil.copy2(package / "README.md", work / "README.md")
    (work / "pyproject.toml").write_text(mutmut_config(target, tests))
    return tests


def selected(target: Target, codes: dict[str, int | None]) -> dict[str, int | None]:
    """The mutants of the target's functions (all of them for a whole-module target)."""
    if not target.functions:
        return codes
    return {name: code for name, code in codes.items() if function_of(name) in target.functions}


def watch(meta: Path, target: Target, stop: threading.Event) -> None:
    """Print the module's progress from mutmut's meta file when it changes (every 15 s)."""
    last = None
    while not stop.wait(15):
        try:
            codes = selected(target, json.loads(meta.read_text())["exit_code_by_key"]).values()
        except (OSError, ValueError, KeyError):
            continue
        done = sum(code is not None for code in codes)
        survived = sum(code in SURVIVED or code in NO_TESTS for code in codes)
        line = f"  {target.module}: {done}/{len(codes)} checked, {survived} not detected so far"
        if line != last:
            print(line, flush=True)
            last = line


def run_mutmut(target: Target, work: Path, max_children: int) -> tuple[int, str]:
    """`mutmut run` in the scratch copy; returns (exit code, log path)."""
    mutmut = Path(sys.executable).parent / "mutmut"
    log = work / "mutmut.log"
    stop = threading.Event()
    meta = work / "mutants" / (target.source + ".meta")
    watcher = threading.Thread(target=watch, args=(meta, target, stop), daemon=True)
    watcher.start()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("MUTANT_UNDER_TEST", None)
    with log.open("w") as out:
        code = subprocess.call(
            [str(mutmut), "run", "--max-children", str(max_children), *target.patterns()],
            cwd=work,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    stop.set()
    watcher.join()
    return code, str(log)


def changed_lines(diff: str) -> tuple[str, str]:
    """(original lines, mutated lines) of a unified diff, each stripped and joined by ' / '."""
    minus, plus = [], []
    for line in diff.splitlines():
        if line.startswith(("---", "+++", "@@")):
            continue
        if line.startswith("-"):
            minus.append(line[1:].strip())
        elif line.startswith("+"):
            plus.append(line[1:].strip())
    return " / ".join(minus), " / ".join(plus)


def function_of(name: str) -> str:
    """`forge_x._m.xǁClassǁmethod__mutmut_3` -> `Class.method`; `..x_func__mutmut_3` -> `func`."""
    mangled = name.rpartition(".")[2].partition("__mutmut_")[0]
    if mangled.startswith("x\u01c1"):
        _, cls, method = mangled.split("\u01c1")
        return f"{cls}.{method}"
    return mangled.removeprefix("x_")


def load_equivalents(path: Path) -> dict[str, list[dict[str, str]]]:
    """module -> [{function, original, mutant, why}] from the reviewed TOML file."""
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text())
    by_module: dict[str, list[dict[str, str]]] = {}
    for entry in data.get("equivalent", []):
        missing = {"module", "function", "original", "mutant", "why"} - set(entry)
        if missing:
            raise SystemExit(f"{path}: an [[equivalent]] entry lacks {sorted(missing)}: {entry}")
        by_module.setdefault(entry["module"], []).append(entry)
    return by_module


def collect(target: Target, work: Path, equivalents: list[dict[str, str]]) -> dict:
    """Per-mutant status and diff, classified against the reviewed equivalents."""
    meta = json.loads((work / "mutants" / (target.source + ".meta")).read_text())
    # a target's other functions' mutants were generated but never run
    codes = selected(target, meta["exit_code_by_key"])
    diffs = json.loads(
        subprocess.run(
            [sys.executable, "-c", DIFF_SCRIPT, target.source],
            cwd=work,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    keyed = {(e["function"], e["original"], e["mutant"]): e for e in equivalents}
    used: set[tuple[str, str, str]] = set()
    counts = {"killed": 0, "timeout": 0, "survived": 0, "no_tests": 0, "equivalent": 0, "other": 0}
    survivors, equivalent, wrongly_listed = [], [], []
    for name in sorted(codes, key=lambda n: (function_of(n), int(n.rpartition("_")[2]))):
        code = codes[name]
        original, mutant = changed_lines(diffs.get(name, ""))
        key = (function_of(name), original, mutant)
        row = {"mutant": name, "function": key[0], "original": original, "mutated": mutant}
        listed = keyed.get(key)
        if listed is not None:
            used.add(key)
        if code in KILLED or code in TIMEOUT:
            counts["killed" if code in KILLED else "timeout"] += 1
            if listed is not None:
                wrongly_listed.append({**row, "why_listed": listed["why"]})
        elif listed is not None and (code in SURVIVED or code in NO_TESTS):
            counts["equivalent"] += 1
            equivalent.append({**row, "why": listed["why"]})
        elif code in SURVIVED or code in NO_TESTS:
            counts["survived" if code in SURVIVED else "no_tests"] += 1
            survivors.append({**row, "status": "survived" if code in SURVIVED else "no tests"})
        else:  # not checked (None), suspicious, interrupted: the run is incomplete
            counts["other"] += 1
            survivors.append({**row, "status": f"exit code {code}"})
    total = len(codes)
    non_equivalent = total - counts["equivalent"]
    detected = counts["killed"] + counts["timeout"]
    stale = [{"function": f, "original": o, "mutant": m} for (f, o, m) in sorted(set(keyed) - used)]
    # an entry can match two mutants (the same change on two equal lines of one function): it
    # is wrongly listed only when none of them survives
    needed = {(e["function"], e["original"], e["mutated"]) for e in equivalent}
    wrongly_listed = [
        w for w in wrongly_listed if (w["function"], w["original"], w["mutated"]) not in needed
    ]
    return {
        "total": total,
        **counts,
        "non_equivalent": non_equivalent,
        "score": detected / non_equivalent if non_equivalent else 1.0,
        "survivors": survivors,
        "equivalents": equivalent,
        "listed_but_killed": wrongly_listed,
        "stale_equivalent_entries": stale,
    }


def table(modules: dict[str, dict], threshold: float) -> str:
    head = ("module", "total", "killed", "survived", "no tests", "equiv.", "timeout", "score", "")
    rows = [head]
    for module, r in modules.items():
        if "error" in r:
            rows.append((module, "-", "-", "-", "-", "-", "-", "error", r["error"]))
            continue
        flag = "ok" if r["score"] >= threshold else f"BELOW {threshold:.0%}"
        rows.append(
            (
                module,
                str(r["total"]),
                str(r["killed"]),
                str(r["survived"]),
                str(r["no_tests"]),
                str(r["equivalent"]),
                str(r["timeout"]),
                f"{r['score']:.1%}",
                flag,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("score = (killed + timeout) / (total - equivalent); no tests counts as survived")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="MODULE", help="e.g. forge_ppo.algo._gae")
    parser.add_argument("--out", default=str(ROOT / "mutants-report.json"), help="JSON report")
    parser.add_argument("--work-dir", default=str(ROOT / ".mutants"), help="scratch copies")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    args = parser.parse_args(argv)

    known = {t.module: t for t in TARGETS}
    unknown = sorted(set(args.only or ()) - set(known))
    if unknown:
        parser.error(f"unknown module(s) {unknown}; expected some of {sorted(known)}")
    targets = [known[m] for m in args.only] if args.only else list(TARGETS)
    equivalents = load_equivalents(EQUIVALENT_FILE)
    try:  # the session installs it; fail here, before any copy, when it is missing
        import mutmut
    except ImportError:
        raise SystemExit(
            "expected mutmut 3 (mutmut==3.8.1) in this Python; found none; "
            "fix: run `nox -s mutants`, or `uv pip install mutmut==3.8.1`"
        ) from None

    report: dict = {
        "schema": SCHEMA,
        "at": datetime.now(UTC).isoformat(),
        "mutmut": mutmut.__version__,
        "threshold": args.threshold,
        "equivalent_file": str(EQUIVALENT_FILE.relative_to(ROOT)),
        "modules": {},
    }
    started = time.perf_counter()
    for index, target in enumerate(targets, 1):
        work = Path(args.work_dir) / target.module
        print(f"[{index}/{len(targets)}] {target.module} ({target.package})", flush=True)
        began = time.perf_counter()
        tests = prepare(target, work)
        print(f"  tests: {', '.join(tests)}", flush=True)
        if target.functions:
            print(f"  functions: {', '.join(target.functions)}", flush=True)
        code, log = run_mutmut(target, work, args.max_children)
        seconds = round(time.perf_counter() - began, 1)
        if code != 0:
            tail = "\n".join(Path(log).read_text(errors="replace").splitlines()[-15:])
            print(f"  mutmut exited {code}; last lines of {log}:\n{tail}", flush=True)
            report["modules"][target.module] = {"error": f"mutmut exited {code}", "log": log}
            continue
        result = collect(target, work, equivalents.get(target.module, []))
        result.update(
            package=target.package,
            tests=tests,
            functions=list(target.functions) or "all",
            seconds=seconds,
            work_dir=str(work),
        )
        report["modules"][target.module] = result
        print(
            f"  {result['total']} mutants, score {result['score']:.1%} "
            f"({len(result['survivors'])} not detected, {result['equivalent']} equivalent) "
            f"in {seconds:.0f} s",
            flush=True,
        )
        for s in result["survivors"]:
            print(
                f"    {s['status']}: {s['mutant']}\n      - {s['original']}\n      + {s['mutated']}"
            )
        for w in result["listed_but_killed"]:
            print(f"    WARNING listed as equivalent but killed: {w['mutant']}: {w['mutated']}")
        for w in result["stale_equivalent_entries"]:
            print(f"    WARNING equivalent entry matches no mutant: {w}")
        if result["other"]:
            print(f"    WARNING {result['other']} mutant(s) not checked: see {log}")
    report["seconds"] = round(time.perf_counter() - started, 1)

    from forge_gates import atomic_write_json

    out = atomic_write_json(args.out, report)
    print(f"\nequivalent mutants ({report['equivalent_file']}):")
    for module, r in report["modules"].items():
        for e in r.get("equivalents", []):
            print(f"  {module} {e['function']}: {e['original']}")
            print(f"    -> {e['mutated']}\n    {e['why']}")
    print()
    print(table(report["modules"], args.threshold))
    print(f"report: {out} ({report['seconds']:.0f} s)")
    failed = [
        m for m, r in report["modules"].items() if "error" in r or r["score"] < args.threshold
    ]
    if failed:
        print(f"below {args.threshold:.0%} or failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
