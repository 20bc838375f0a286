"""The per-test report: a pytest plugin (shipped in every synthesized task's tests/ folder)
that writes a CTRF report (https://ctrf.io: `results.tests[]` with name, status, message,
trace), and the reader of such reports.

The plugin's text is `PLUGIN`; it runs inside the sandbox under the task's own Python, so it
uses the standard library only. Status per pytest node id: `failed` when any phase (setup,
call, teardown) failed, else `skipped` when one was skipped (xfail included), else `passed`
when the call ran and passed; `other` when the call never ran. A collection error is a test
named after the collected file with status `failed` and `"type": "collection"`.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

PLUGIN_MODULE = "forge_report"
PLUGIN = '''\
"""pytest plugin written by forge-data synth: a CTRF report of every test (standard library).

Written to $FORGE_CTRF (default /logs/verifier/ctrf.json) when the session ends, atomically.
"""

import json
import os
import re
import time

_TESTS = {}
_START = int(time.time() * 1000)
_TRACE_LINES = 12


def _test_file(path):
    words = re.split(r"[/_.\\-]", str(path).replace("\\\\", "/").lower())
    return any(word.startswith("test") or word == "conftest" for word in words)


def _failure(report):
    """(message, trace): the crash message and the test files' own traceback lines."""
    longrepr = report.longrepr
    message = ""
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        message = str(crash.message)
    elif longrepr is not None:
        message = str(longrepr).strip().splitlines()[-1:][0] if str(longrepr).strip() else ""
    lines = []
    entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", None) or []
    for entry in entries:
        where = getattr(entry, "reprfileloc", None)
        if where is None or not _test_file(where.path):
            continue
        lines.append(f"{where.path}:{where.lineno}")
        lines.extend(str(line) for line in (getattr(entry, "lines", None) or []))
    return message[:2000], "\\n".join(lines[-_TRACE_LINES:])


def pytest_runtest_logreport(report):
    fresh = {"name": report.nodeid, "status": "other", "duration": 0}
    test = _TESTS.setdefault(report.nodeid, fresh)
    test["duration"] += int(report.duration * 1000)
    if report.failed:
        if test["status"] != "failed":
            test["status"] = "failed"
            test["message"], test["trace"] = _failure(report)
    elif report.skipped:
        if test["status"] in ("other", "passed"):
            test["status"] = "skipped"
    elif report.when == "call" and test["status"] == "other":
        test["status"] = "passed"


def pytest_collectreport(report):
    if report.failed:
        message, trace = _failure(report)
        _TESTS[report.nodeid or "<collection>"] = {
            "name": report.nodeid or "<collection>", "status": "failed", "duration": 0,
            "type": "collection", "message": message, "trace": trace,
        }


def pytest_sessionfinish(session, exitstatus):
    tests = list(_TESTS.values())
    summary = {"tests": len(tests), "start": _START, "stop": int(time.time() * 1000)}
    for status in ("passed", "failed", "skipped", "pending", "other"):
        summary[status] = sum(1 for test in tests if test["status"] == status)
    report = {"results": {"tool": {"name": "pytest"}, "summary": summary, "tests": tests}}
    path = os.environ.get("FORGE_CTRF", "/logs/verifier/ctrf.json")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        json.dump(report, out)
    os.replace(path + ".tmp", path)
'''


class ReportedTest(BaseModel):
    """One test of a CTRF report."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(description="The pytest node id (or the file, for a collection error).")
    status: str = Field(description="passed, failed, skipped, pending or other.")
    message: str = Field(default="", description="The crash message of a failure.")
    trace: str = Field(default="", description="The test files' traceback lines of a failure.")
    type: str = Field(default="", description="'collection' for a collection error.")


def read_ctrf(path: Path) -> list[ReportedTest] | None:
    """The tests of a CTRF report; None when the file is missing, unreadable or has none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        tests = data["results"]["tests"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(tests, list) or not tests:
        return None
    try:
        return [ReportedTest.model_validate(test) for test in tests]
    except ValueError:
        return None


def passed(tests: list[ReportedTest]) -> set[str]:
    return {test.name for test in tests if test.status == "passed"}


def collection_errors(tests: list[ReportedTest]) -> list[str]:
    return [test.name for test in tests if test.type == "collection"]
