"""Evidence that a verifier's tests ran: without it, a reward is no verdict.

A task's tests/test.sh may write reward 0 on *any* failure (SWE-smith's and SWE-bench Pro's
do), so a broken environment (no conda, a missing interpreter, a failed checkout) looks like a
failing patch. A reward counts only when the run shows its tests ran, by one of:

    swebench-markers  `>>>>> Start Test Output` then `>>>>> End Test Output` in one stream
                      (what SWE-bench's eval script prints around the test command)
    pytest            `-rA` short-summary lines (`PASSED path::test`, `FAILED ...`) or the final
                      `N passed|failed|errors in Xs` line
    unittest          `Ran N tests in Xs` with N >= 1 (Forge's demo and easy tasks: `-v`)
    js-runner         a JavaScript runner's summary counting at least one test (SWE-gen-JS's
                      test.sh runs them bare): mocha `N passing` / `N failing`, jest `Tests:
                      ... N total`, vitest `Tests  ... (N)`, ava `N tests passed|failed`, tap
                      `# { total: N, ... }`, uvu `Total: N` then `Passed:`, node --test's spec
                      `ℹ tests N`, any TAP producer's `# tests N` (node --test, tape, ava
                      --tap); colour codes ignored
    cargo-test        Rust's libtest: `test result: ok|FAILED. P passed; F failed; ...` with
                      P + F >= 1 over the run's test binaries (a filter that matched nothing
                      prints `0 passed; 0 failed`: not evidence), and every binary that began
                      (`running N tests`) printed its result: a binary that exits 0 part-way
                      (the code under test calling `std::process::exit(0)`) is a success to
                      cargo, and its tests never ran
    go-test           Go's `--- PASS: T` / `--- FAIL: T` lines (`go test -v`, and every
                      failure), and in a verbose run every package's `ok  <pkg>` line after
                      testing's own `PASS`: a test binary that exits 0 before its tests (an
                      `os.Exit(0)` in a package's `init`) prints `ok  <pkg>  <time>` and nothing
                      else, so a package's `ok` line alone (go test without -v) is not evidence
    surefire          Maven's test summary `Tests run: N, Failures: F, Errors: E, Skipped: S`
                      (surefire; JUnit under Maven) with N - S >= 1 (Gradle prints no counts:
                      its junit XML copied to /logs/verifier is its evidence)
    junit             a `*.xml` under /logs/verifier with at least one `<testcase>`
    ctrf              a `*.json` under /logs/verifier with a non-empty `results.tests` list

Pure: reads the two streams and the copied /logs/verifier folder; writes nothing.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EvidenceKind = Literal[
    "swebench-markers",
    "pytest",
    "unittest",
    "js-runner",
    "cargo-test",
    "go-test",
    "surefire",
    "junit",
    "ctrf",
]

START_MARKER = ">>>>> Start Test Output"
END_MARKER = ">>>>> End Test Output"
REPORT_MAX_BYTES = 64 << 20  # a report file larger than this is not parsed (not evidence)

_PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) \S", re.MULTILINE)
_PYTEST_SUMMARY = re.compile(
    r"^=+ .*?\b(\d+) (passed|failed|errors?|xfailed|xpassed)\b.* in [\d.]+s.*=+\s*$", re.MULTILINE
)
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s\s*$", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_JS_SUMMARIES = (  # (runner, its summary line; group 1 counts tests)
    ("mocha", re.compile(r"^ +(\d+) (?:passing|failing|pending)\b", re.MULTILINE)),
    ("jest", re.compile(r"^Tests: +(?:.*?, )?(\d+) total\s*$", re.MULTILINE)),
    ("vitest", re.compile(r"^ *Tests {2,}.*\((\d+)\)\s*$", re.MULTILINE)),
    ("ava", re.compile(r"^ +(\d+) (?:tests? (?:passed|failed)|known failures?)\s*$", re.M)),
    ("tap", re.compile(r"^# \{ total: (\d+)\b", re.MULTILINE)),
    ("uvu", re.compile(r"^ +Total: +(\d+)\s*\n +Passed: +\d+", re.MULTILINE)),
    ("node --test", re.compile(r"^\u2139 tests (\d+)\s*$", re.MULTILINE)),
    ("TAP", re.compile(r"^# tests (\d+)\s*$", re.MULTILINE)),  # node --test, tape, ava --tap
)
# libtest's line per test binary (group 1 passed, group 2 failed), after its header
_CARGO_RESULT = re.compile(r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed;", re.M)
_CARGO_RUNNING = re.compile(r"^running \d+ tests?$", re.MULTILINE)
# go test: a test's verdict line (-v, and every failure); a package's `ok` line and the line
# before it (testing's `PASS` in a verbose run)
_GO_VERDICT = re.compile(r"^ *--- (?:PASS|FAIL): \S", re.MULTILINE)
_GO_VERBOSE = re.compile(r"^=== RUN ", re.MULTILINE)
# Maven's summary per module, and its line per test class (`, Time elapsed: ...` after it)
_SUREFIRE = re.compile(
    r"^(?:\[\w+\] )?Tests run: (\d+), Failures: \d+, Errors: \d+, Skipped: (\d+)"
    r"(, Time elapsed)?",
    re.MULTILINE,
)

EVIDENCE_FIX = (
    "make tests/test.sh show that its tests ran: print SWE-bench's markers "
    f"('{START_MARKER}' / '{END_MARKER}') around the test command, run pytest with -rA, "
    "unittest with -v, a JavaScript runner with its summary (mocha, jest, vitest, ava, tap, "
    "uvu, node --test, TAP), cargo test, go test -v or Maven, or write a junit XML or CTRF JSON "
    "report under /logs/verifier/"
)


class Evidence(BaseModel):
    """How a verifier run showed that its tests ran."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EvidenceKind = Field(description="Which kind of evidence was found (the first).")
    detail: str = Field(description="Where it was found and what it says, for a reader.")


def _markers(stream: str) -> bool:
    start = stream.find(START_MARKER)
    return start >= 0 and stream.find(END_MARKER, start + len(START_MARKER)) >= 0


def _cargo_binary_cut(plain: str) -> bool:
    """A libtest binary began (`running N tests`) and printed no result before the next one
    began or the stream ended: it exited part-way (cargo counts an exit 0 as a success)."""
    events = sorted(
        [(m.start(), True) for m in _CARGO_RUNNING.finditer(plain)]
        + [(m.start(), False) for m in _CARGO_RESULT.finditer(plain)]
    )
    began = False
    for _start, header in events:
        if header and began:
            return True
        began = header
    return began


def _go_package_cut(plain: str) -> bool:
    """In a verbose run, a package's `ok` line not right after testing's `PASS` (and its
    `coverage:` line under -cover): its test binary exited 0 before its tests ran (go test -v
    prints `PASS` before every `ok`, the `[no tests to run]` packages' included; a cached
    package replays both). Without -v a passing package prints its `ok` line alone, and the
    verdict lines that make evidence there are failures'."""
    if not _GO_VERBOSE.search(plain):
        return False
    lines = plain.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith("ok  \t"):
            continue
        before = index - 1
        while before >= 0 and lines[before].startswith("coverage: "):
            before -= 1
        if before < 0 or lines[before].strip() != "PASS":
            return True
    return False


def _stream_evidence(name: str, stream: str) -> Evidence | None:
    """Evidence printed on one stream (stdout or stderr) of test.sh."""
    if _markers(stream):
        return Evidence(kind="swebench-markers", detail=f"{name}: both test-output markers")
    if lines := _PYTEST_LINE.findall(stream):
        return Evidence(kind="pytest", detail=f"{name}: {len(lines)} pytest -rA result lines")
    if match := _PYTEST_SUMMARY.search(stream):
        return Evidence(kind="pytest", detail=f"{name}: pytest summary {match.group(0).strip()}")
    ran = [int(n) for n in _UNITTEST_RAN.findall(stream)]
    if ran and max(ran) >= 1:
        return Evidence(kind="unittest", detail=f"{name}: unittest ran {max(ran)} tests")
    plain = _ANSI.sub("", stream) if "\x1b[" in stream else stream
    for runner, summary in _JS_SUMMARIES:
        counted = sum(int(n) for n in summary.findall(plain))
        if counted >= 1:
            return Evidence(kind="js-runner", detail=f"{name}: {runner} summary, {counted} tests")
    libtest = sum(int(p) + int(f) for p, f in _CARGO_RESULT.findall(plain))
    if libtest >= 1 and not _cargo_binary_cut(plain):
        return Evidence(kind="cargo-test", detail=f"{name}: libtest results, {libtest} tests ran")
    verdicts = _GO_VERDICT.findall(plain)
    if verdicts and not _go_package_cut(plain):
        return Evidence(kind="go-test", detail=f"{name}: {len(verdicts)} go test verdict lines")
    found = _SUREFIRE.findall(plain)
    summaries = [(n, s) for n, s, per_class in found if not per_class]
    lines = summaries or [(n, s) for n, s, _ in found]  # a run cut before its summary
    if (surefire := sum(int(n) - int(s) for n, s in lines)) >= 1:
        return Evidence(kind="surefire", detail=f"{name}: Maven test summary, {surefire} ran")
    return None


def _junit_cases(path: Path) -> int:
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError, ValueError):
        return 0
    return sum(1 for _ in root.iter("testcase"))


def _ctrf_tests(path: Path) -> int:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return 0
    results = report.get("results") if isinstance(report, dict) else None
    tests = results.get("tests") if isinstance(results, dict) else None
    return len(tests) if isinstance(tests, list) else 0


def _report_evidence(verifier_dir: Path) -> Evidence | None:
    """A junit XML or CTRF JSON report in the copied /logs/verifier folder."""
    if not verifier_dir.is_dir():
        return None
    for path in sorted(verifier_dir.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > REPORT_MAX_BYTES:
            continue
        where = path.relative_to(verifier_dir).as_posix()
        if path.suffix == ".xml" and (cases := _junit_cases(path)):
            return Evidence(kind="junit", detail=f"{where}: {cases} junit test cases")
        if path.suffix == ".json" and path.name != "reward.json" and (tests := _ctrf_tests(path)):
            return Evidence(kind="ctrf", detail=f"{where}: {tests} CTRF tests")
    return None


def find_evidence(stdout: str, stderr: str, verifier_dir: Path | None = None) -> Evidence | None:
    """The first evidence that the tests ran (streams first, then report files), else None."""
    for name, stream in (("stdout", stdout), ("stderr", stderr)):
        if (found := _stream_evidence(name, stream)) is not None:
            return found
    return _report_evidence(verifier_dir) if verifier_dir is not None else None
