"""The test side of a SWE-bench-shaped task stays the task's: the agent's changes there are not
carried to the verifier.

A task is SWE-bench-shaped when its tests/config.json (as Harbor's adapters and `forge-data
import` write it) holds the row: its gold `patch` (SWE-smith: the bug patch, reversed by the
oracle) and FAIL_TO_PASS. SWE-bench's collection puts every path of a PR that names a test
folder or file in the test patch, never in the fix, so no fix of such a task needs them; yet
the runner often lives there. On a Django row `./tests/runtests.py` imports the settings module
`tests/test_sqlite.py`, `django/test/runner.py` and each test package's `__init__`: changed, any
of them prints `test_x (app.tests.T) ... ok` for the listed tests. A test package's `__init__`
on a pytest row patches pytest's reports in its process. test.sh resets only the files its
test patch touches (the adapters' `get_test_commands`).

    test side    a folder named test, tests, testing or e2e; a file test_*.py, *_test.py,
                 tests.py or conftest.py; SymPy's runner (bin/test, sympy/utilities/runtests.py
                 and pytest.py, as swebench runs it)
    less         every path the gold patch touches: the oracle's changes are the answer,
                 whatever their names

Changes there (added, edited, deleted) are left out like the harness's files (`kept` in
change-audit.json). A fix that also edits the test side is judged with the task's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

# forge-data's importer writes the same rule as git pathspecs (`importers/_layout.TEST_SIDE`)
TEST_SIDE = re.compile(
    r"(^|/)(test|tests|testing|e2e)/|(^|/)(test_[^/]*|[^/]*_test|tests|conftest)\.py$"
)
RUNNER_FILES = {  # swebench runs SymPy's rows with bin/test, which loads these
    "sympy/sympy": frozenset(
        {"bin/test", "sympy/utilities/runtests.py", "sympy/utilities/pytest.py"}
    )
}
_PATCH_PATH = re.compile(r"^(?:--- a/|\+\+\+ b/)(\S+)", re.M)
CONFIG_MAX_BYTES = 64 << 20  # a row's patches: larger is not a row


@dataclass(frozen=True)
class TestSide:
    """Whether a path (relative to the working tree) is on a task's test side."""

    __test__ = False  # not a pytest class

    gold: frozenset[str]
    runner: frozenset[str] = frozenset()

    def __call__(self, path: str) -> bool:
        if path in self.gold or any(g.startswith(path + "/") for g in self.gold):
            return False  # the gold's, or a folder holding the gold's
        return path in self.runner or TEST_SIDE.search(path) is not None


def gold_paths(patch: str) -> frozenset[str]:
    """Every path a unified diff touches (`--- a/` and `+++ b/`; /dev/null is not a path)."""
    return frozenset(_PATCH_PATH.findall(patch))


def task_test_side(task_dir: Path) -> TestSide | None:
    """The test side of the task at `task_dir`; None when it is not SWE-bench-shaped (no
    tests/config.json holding a gold `patch` and FAIL_TO_PASS, or one that cannot be read)."""
    path = task_dir / "tests" / "config.json"
    try:
        if path.stat().st_size > CONFIG_MAX_BYTES:
            return None
        row = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(row, dict):
        return None
    patch = row.get("patch")
    if not isinstance(patch, str) or not patch.strip() or not row.get("FAIL_TO_PASS"):
        return None
    runner = RUNNER_FILES.get(str(row.get("repo") or "").lower(), frozenset())
    return TestSide(gold=gold_paths(patch), runner=runner)
