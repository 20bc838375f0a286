"""The test side of a task whose gold patch is known stays the task's: the agent's changes there
are not carried to the verifier.

The gold patch is known when the task's tests/config.json (as Harbor's adapters, `forge-data
import` and `forge-data synth` write it) holds the row: its gold `patch` (SWE-smith: the bug
patch, reversed by the oracle) and FAIL_TO_PASS; else when its solution/ folder holds the
patch itself (`*.patch`, `*.diff`: SWE-gen-JS's fix.patch, which its solve.sh applies).
SWE-bench's collection puts every path of a PR that names a test folder or file in the test
patch, never in the fix, so no fix of such a task needs them (SWE-gen-JS splits its PRs the
same way: 3,311 of the 3,312 test files its test.sh scripts copy in are on the side below);
yet the runner often lives there. On a Django row `./tests/runtests.py` imports the settings module
`tests/test_sqlite.py`, `django/test/runner.py` and each test package's `__init__`: changed, any
of them prints `test_x (app.tests.T) ... ok` for the listed tests. A test package's `__init__`
on a pytest row patches pytest's reports in its process. test.sh resets only the files its
test patch touches (the adapters' `get_test_commands`).

    test side    a folder named test, tests, testing or e2e, or JavaScript's __tests__,
                 __mocks__, __snapshots__, __fixtures__; a file test_*.py, *_test.py,
                 tests.py, conftest.py, *.test.* or *.spec.* (jest, vitest, mocha), *_test.go,
                 tests.rs; SymPy's runner (bin/test, sympy/utilities/runtests.py and
                 pytest.py, as swebench runs it)
    and          whatever takes the place of a Python module there: a package by its name
                 (app/test_views/__init__.py beside app/test_views.py), an extension or
                 bytecode (app/test_views.cpython-311-x86_64-linux-gnu.so); Python imports it
                 instead of the module, and Django's runner loads tests by module name
    less         every path the gold patch touches: the oracle's changes are the answer,
                 whatever their names

Changes there (added, edited, deleted) are left out like the harness's files (`kept` in
change-audit.json). A fix that also edits the test side is judged with the task's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from forge_sandbox.verify._gold import FileDiff, diff_paths, file_diffs

# forge-data's importer writes the same rule as git pathspecs (`importers/_layout.TEST_SIDE`);
# tools/tests/test_test_side_parity.py checks both against one list of paths
TEST_SIDE = re.compile(
    r"(^|/)(test|tests|testing|e2e|__tests__|__mocks__|__snapshots__|__fixtures__)/"
    r"|(^|/)(test_[^/]*|[^/]*_test|tests|conftest)\.py$"
    r"|(^|/)[^/]+\.(test|spec)\.[^/]+$|(^|/)[^/]*_test\.go$|(^|/)tests\.rs$"
)
# a module file's name: its module, then a source or bytecode suffix, or an extension's with an
# optional tag (cpython-311-x86_64-linux-gnu, abi3)
MODULE_FILE = re.compile(r"([^.]+)(?:\.(?:py|pyw|pyc|pyo)|(?:\.[\w-]+)?\.(?:so|pyd))")
RUNNER_FILES = {  # swebench runs SymPy's rows with bin/test, which loads these
    "sympy/sympy": frozenset(
        {"bin/test", "sympy/utilities/runtests.py", "sympy/utilities/pytest.py"}
    )
}
CONFIG_MAX_BYTES = 64 << 20  # a row's patches: larger is not a row
SOLUTION_PATCHES = ("*.patch", "*.diff")  # solution/'s own gold patch (SWE-gen-JS: fix.patch)


@dataclass(frozen=True)
class TestSide:
    """Whether a path (relative to the working tree) is on a task's test side."""

    __test__ = False  # not a pytest class

    gold: frozenset[str]
    runner: frozenset[str] = frozenset()
    # the gold patch's section per file (`_gold.py`): a harness file it changes is carried
    # when the agent's version is the gold's (`_harness.py`)
    diffs: Mapping[str, FileDiff] = field(default_factory=dict, compare=False, hash=False)

    def __call__(self, path: str) -> bool:
        if path in self.gold or any(g.startswith(path + "/") for g in self.gold):
            return False  # the gold's, or a folder holding the gold's
        if self._named(path):
            return True
        # in a module's place there: a package (app/test_views/ beside app/test_views.py), an
        # extension or bytecode by its name; Python imports it instead of the module
        parts = path.split("/")
        if any(self._named("/".join(parts[:end]) + ".py") for end in range(1, len(parts))):
            return True
        name = MODULE_FILE.fullmatch(parts[-1])
        return name is not None and self._named("/".join([*parts[:-1], name.group(1) + ".py"]))

    def _named(self, path: str) -> bool:
        return path not in self.gold and (path in self.runner or TEST_SIDE.search(path) is not None)


def _row_side(task_dir: Path) -> TestSide | None:
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
    diffs = file_diffs(patch)  # parsed once: the gold's paths are its sections'
    return TestSide(gold=diff_paths(diffs), runner=runner, diffs=diffs)


def _solution_side(task_dir: Path) -> TestSide | None:
    diffs: dict[str, FileDiff] = {}
    for pattern in SOLUTION_PATCHES:
        for path in sorted((task_dir / "solution").glob(pattern)):
            try:
                if path.is_file() and path.stat().st_size <= CONFIG_MAX_BYTES:
                    diffs.update(file_diffs(path.read_text(encoding="utf-8", errors="replace")))
            except OSError:
                continue
    gold = diff_paths(diffs)
    return TestSide(gold=gold, diffs=diffs) if gold else None


def task_test_side(task_dir: Path) -> TestSide | None:
    """The test side of the task at `task_dir`; None when its gold patch is not known (no
    tests/config.json holding a gold `patch` and FAIL_TO_PASS, no solution/*.patch or *.diff
    naming a path, or neither can be read), and None when every path the gold touches is on
    the test side: a task whose answer is tests (SWT-bench's shape) has no harness there."""
    side = _row_side(task_dir) or _solution_side(task_dir)
    if side is None or all(TEST_SIDE.search(path) for path in side.gold):
        return None
    return side
