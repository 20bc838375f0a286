"""The reward of a task that lists its tests: every FAIL_TO_PASS and PASS_TO_PASS id must be
seen passing in the test run's own output, read here on the host.

The code under test runs inside the test process, so it can write any file that process can:
a reward file, a CTRF or junit report, a planted `reward.json`. It cannot take back what the
test runner already printed on the pipe the harness reads. So where task.toml's `[metadata]`
(or tests/config.json, as Harbor's adapters write it) lists the task's tests, the reward is 1
only when test.sh's reward says 1 *and* every listed id has a passing result line in its stdout
or stderr, and none a failing one; a run in which the listed tests did not run (an `os._exit(0)`
at import, a crash, a runner that prints nothing) scores 0.

Result lines read (the runners Forge's tasks use):

    pytest -rA     `PASSED tests/a.py::test_b`, `FAILED tests/a.py::test_b - msg`, `ERROR ...`
    pytest -v      `tests/a.py::test_b PASSED [ 50%]`
    unittest -v    `test_b (pkg.mod.Class.test_b) ... ok` (Django's runner alike; a docstring
                   line may stand between the name and its status)
    SymPy          `test_b ok` / `test_b F` / `test_b E` (bin/test --verbose)
    go test -v     `--- PASS: TestB (0.00s)`, `--- FAIL: TestB/sub (0.01s)` (SWE-bench's ids)
    cargo test     `test mod::tests::b ... ok` / `... FAILED` / `... ignored`

A runner whose per-test lines none of these read (jest's `✓ title`, Maven) gives no result line
at all (`TestReport.result_lines` 0): the verifier makes that no verdict rather than a 0.

Pure: ids and text in, outcomes out.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

PASSING = {"PASSED", "XFAIL", "ok", "expected failure"}
_RA = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (.+?)(?: - .*)?$")
_VERBOSE = re.compile(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)(?:\s+\[.*\])?$")
_UNIT_NAME = re.compile(r"^(\w+) \(([\w.]+)\)")
_UNIT_STATUS = re.compile(
    r"\.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)\s*$"
)
_SYMPY = re.compile(r"^(test_\w+) (ok|F|E|f|X|s|Skipped)\s*$")
_GO = re.compile(r"^--- (PASS|FAIL|SKIP): (.+) \((.+)\)$")  # read stripped, as SWE-bench does
_CARGO = re.compile(r"^test\s+(\S+)\s+\.\.\.\s+(\w+)$")
_GO_STATUS = {"PASS": "PASSED", "FAIL": "FAILED", "SKIP": "SKIPPED"}
_CARGO_STATUS = {"ok": "PASSED", "FAILED": "FAILED", "ignored": "SKIPPED"}


class TestReport(BaseModel):
    """How the listed tests fared in one run, as the harness read them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __test__ = False  # not a pytest class

    listed: int = Field(ge=0, description="FAIL_TO_PASS + PASS_TO_PASS ids the task lists.")
    result_lines: int = Field(
        default=0, ge=0, description="Tests with a result line in the run, listed or not."
    )
    passed: tuple[str, ...] = Field(description="Listed ids with a passing line and no failing.")
    failed: tuple[str, ...] = Field(description="Listed ids with a failing line.")
    missing: tuple[str, ...] = Field(description="Listed ids with no result line at all.")

    @property
    def all_passed(self) -> bool:
        return self.listed > 0 and len(self.passed) == self.listed


def _list(value: object) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [str(value)] if value else []
    return [str(v) for v in value] if isinstance(value, list) else []


def listed_tests(task_dir: Path) -> tuple[str, ...]:
    """The ids a task lists: task.toml `[metadata] fail_to_pass` + `pass_to_pass`, else
    tests/config.json's FAIL_TO_PASS + PASS_TO_PASS; () when it lists none."""
    try:
        metadata = tomllib.loads((task_dir / "task.toml").read_text()).get("metadata") or {}
    except (OSError, tomllib.TOMLDecodeError):
        metadata = {}
    ids = _list(metadata.get("fail_to_pass")) + _list(metadata.get("pass_to_pass"))
    if not ids:
        try:
            row = json.loads((task_dir / "tests" / "config.json").read_text())
        except (OSError, ValueError):
            row = {}
        if isinstance(row, dict):
            ids = _list(row.get("FAIL_TO_PASS")) + _list(row.get("PASS_TO_PASS"))
    return tuple(dict.fromkeys(ids))


def _unit_keys(name: str, dotted: str) -> list[str]:
    """The ids a unittest line answers to: `name (dotted)`, the dotted id, and both with the
    method name added or dropped (Python < 3.11 prints `name (mod.Class)`)."""
    keys = [f"{name} ({dotted})", dotted]
    if dotted.endswith("." + name):
        short = dotted[: -len(name) - 1]
        keys += [f"{name} ({short})", short + "." + name]
    else:
        keys += [f"{dotted}.{name}", f"{name} ({dotted}.{name})"]
    return keys


def result_lines(text: str) -> dict[str, set[str]]:
    """Every test id with a result line in `text`, and the statuses seen for it."""
    seen: dict[str, set[str]] = {}

    def add(keys: list[str], status: str) -> None:
        for key in keys:
            seen.setdefault(key.strip(), set()).add(status)

    pending: tuple[str, str] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if match := _RA.match(line):
            add([match.group(2)], match.group(1))
        elif match := _VERBOSE.match(line):
            add([match.group(1)], match.group(2))
        elif match := _SYMPY.match(line):
            status = {"ok": "ok", "f": "expected failure"}.get(match.group(2), "FAIL")
            add([match.group(1)], status)
        elif match := _GO.match(line.strip()):
            add([match.group(2)], _GO_STATUS[match.group(1)])
        elif (match := _CARGO.match(line.strip())) and match.group(2) in _CARGO_STATUS:
            add([match.group(1)], _CARGO_STATUS[match.group(2)])
        if match := _UNIT_NAME.match(line):
            pending = (match.group(1), match.group(2))
        if pending is not None and (status_match := _UNIT_STATUS.search(line)):
            status = status_match.group(1)
            add(_unit_keys(*pending), "skipped" if status.startswith("skipped") else status)
            pending = None
    return seen


def _id_keys(test: str) -> list[str]:
    """An id and how a runner may print it: a test module run as a script (`python3
    tests/test_hidden.py -v`, Forge's demo tasks) prints `__main__.Class.test`."""
    module, dot, rest = test.partition(".")
    unittest_like = dot and "::" not in test and " " not in test and rest.count(".") >= 1
    return [test, f"__main__.{rest}"] if unittest_like and module != "__main__" else [test]


def check_listed(ids: tuple[str, ...], stdout: str, stderr: str) -> TestReport:
    """How each listed id fared in the two streams: a failing line anywhere wins."""
    seen = result_lines(stdout)
    for key, statuses in result_lines(stderr).items():
        seen.setdefault(key, set()).update(statuses)
    passed, failed, missing = [], [], []
    for test in ids:
        statuses = set().union(*(seen.get(key, set()) for key in _id_keys(test.strip())))
        if not statuses:
            missing.append(test)
        elif statuses <= PASSING:
            passed.append(test)
        else:
            failed.append(test)
    return TestReport(
        listed=len(ids),
        result_lines=len(seen),
        passed=tuple(passed),
        failed=tuple(failed),
        missing=tuple(missing),
    )
