"""The test harness's files are not carried to the verifier (verify/_harness.py): by name, by
folder, and for shared config files by what pytest reads from them; and on the local backend,
every way of loading a report-rewriting pytest plugin from the repository scores 0 on a
SWE-bench-shaped task, while a real fix (also one that edits shared config) scores 1."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_sandbox import load_task, run_job
from forge_sandbox._errors import SandboxTransferError
from forge_sandbox.testing import red_team_js
from forge_sandbox.testing.red_team_pytest import (
    ATTACKS,
    FIX_WITH_CONFIG,
    FIX_WITH_CONFIG_CARRIED,
    FIX_WITH_CONFIG_KEPT,
    FORGED_IN_PROCESS,
    GOLD_CONFIG_FIX,
    GOLD_CONFIG_PLUGIN,
    GOLD_CONFIG_UNKNOWN,
    REAL_FIX,
    TEST_SIDE_ATTACKS,
    vendor_pytest,
    write_gold_config_tasks,
    write_pytest_attack_tasks,
)
from forge_sandbox.verify._audit import audit_change
from forge_sandbox.verify._harness import (
    is_harness_path,
    is_shared_config,
    keep_shared_config,
    runner_part,
    split_harness,
)
from forge_sandbox.verify._testside import TestSide, task_test_side
from forge_sandbox.verify._transfer import Change, Entry, Manifest

# -- which paths are the harness's -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "harness"),
    [
        ("conftest.py", True),
        ("tests/unit/conftest.py", True),
        ("pytest.ini", True),
        ("sub/.pytest.ini", True),
        ("pytest.toml", True),
        ("sitecustomize.py", True),
        ("src/usercustomize.py", True),
        ("evil.pth", True),
        (".venv/lib/python3.11/site-packages/_pytest/runner.py", True),
        ("usr/lib/python3/dist-packages/x.py", True),
        ("calc_report-0.dist-info/entry_points.txt", True),
        ("calc.egg-info", True),
        ("calc/__init__.py", False),
        ("calc/conftest_helpers.py", False),
        ("tests/test_calc.py", False),
        ("setup.cfg", False),  # shared: judged by content
        ("docs/pytest.md", False),
        ("node_modules/mocha/lib/runner.js", True),
        ("tests/node_modules/helper/index.js", True),
        (".mocharc.json", True),
        ("packages/a/.mocharc.yml", True),
        ("jest.config.ts", True),
        ("vitest.config.mts", True),
        ("vite.config.js", True),
        ("babel.config.cjs", True),
        (".babelrc", True),
        (".npmrc", True),
        (".yarnrc.yml", True),
        ("bunfig.toml", True),
        ("package.json", False),  # shared: judged by content
        ("src/jest.configure.js", False),
        ("lib/mocharc.js", False),
        # run by an install at verify time
        ("setup.py", True),
        ("astropy/io/setup_package.py", True),
        ("docs/setup_guide.py", False),
        # the package managers' code and maps in the tree
        (".yarn/releases/yarn-4.1.0.cjs", True),
        (".yarn/plugins/x.cjs", True),
        (".pnp.cjs", True),
        (".pnpmfile.cjs", True),
        ("bun.lockb", True),  # binary: its sources cannot be read
        ("bun.lock", False),  # text: judged by content
        ("src/yarn.js", False),
        # the setup files a runner loads into every test (jest's setupFiles, CRA's)
        ("src/setupTests.js", True),
        ("jest.setup.ts", True),
        ("config/jest-setup.js", True),
        ("vitest.setup.mts", True),
        ("test-setup.js", True),
        (".swcrc", True),
        ("src/setup.ts", False),
        ("src/setupTestsHelper.js", False),
    ],
)
def test_harness_paths(path: str, harness: bool) -> None:
    assert is_harness_path(path) is harness


def _manifest(paths: dict[str, str]) -> Manifest:
    return Manifest("/w", {p: Entry(kind, 0o644, "") for p, kind in paths.items()})


_paths = st.sampled_from(
    ["a.py", "conftest.py", "t/conftest.py", "t/test_a.py", "setup.cfg", "t/tox.ini",
     "x.pth", "m.dist-info/entry_points.txt", "v/site-packages/p.py", "pkg/mod.py"]
)  # fmt: skip


@given(st.lists(_paths, unique=True), st.lists(_paths, unique=True))
def test_no_harness_path_is_carried_and_every_other_path_is(copy, delete) -> None:
    change = Change(copy=tuple(sorted(copy)), delete=tuple(sorted(delete)))
    tree = _manifest({p: "f" for p in delete})
    carried, kept = split_harness(change, tree, tree)
    assert not any(is_harness_path(p) for p in carried.copy + carried.delete)
    assert not any(is_shared_config(p) for p in carried.delete)
    # a shared config file whose type changed (deleted, then copied) stays the task's whole
    retyped = {p for p in copy if p in delete and is_shared_config(p)}
    assert set(carried.copy) == {p for p in copy if not is_harness_path(p)} - retyped
    assert set(carried.delete) | set(kept) == set(delete) | {p for p in copy if p in kept}
    assert set(kept) <= set(copy) | set(delete)


def test_a_deleted_folder_holding_harness_files_keeps_them() -> None:
    before = _manifest({"tests": "d", "tests/conftest.py": "f", "tests/test_a.py": "f",
                        "tests/data": "d", "tests/data/x.txt": "f", "tests/tox.ini": "f",
                        "old": "d", "old/a.py": "f"})  # fmt: skip
    carried, kept = split_harness(Change(copy=(), delete=("old", "tests")), before, before)
    assert carried.delete == ("old", "tests/data/x.txt", "tests/test_a.py")
    assert kept == ("tests/conftest.py", "tests/tox.ini")


def test_a_new_module_named_as_the_runners_or_the_stdlibs_outside_a_package_is_kept() -> None:
    before = _manifest({"calc": "d", "calc/__init__.py": "f", "json.py": "f", "tests": "d"})
    new = ["pytest", "pytest/__main__.py", "argparse.py", "tests/re.py", "json.py",
           "calc/types.py", "calc/util.py", "nspkg", "nspkg/io.py", "nspkg/__init__.py",
           "test_calc2.py", "tests/test_io.py", "README", "inspect.so", "shlex.orig.py",
           "unittest.cpython-311-x86_64-linux-gnu.so", "calc.so"]  # fmt: skip
    after = _manifest({**{p: "f" for p in new}, "pytest": "d", "nspkg": "d", "calc": "d",
                       "calc/__init__.py": "f", "tests": "d"})  # fmt: skip
    carried, kept = split_harness(Change(copy=tuple(sorted(new)), delete=()), before, after)
    # json.py existed (changed, not new); calc/ and nspkg/ are packages in the agent's tree;
    # an extension by a stdlib module's name is imported before it (shlex.orig.py is no module)
    assert kept == ("argparse.py", "inspect.so", "pytest", "pytest/__main__.py", "tests/re.py",
                    "unittest.cpython-311-x86_64-linux-gnu.so")  # fmt: skip
    assert set(carried.copy) == set(new) - set(kept)


@pytest.mark.parametrize("name", ["distutils/__init__.py", "asyncore.py", "parser.py", "imp.py"])
def test_a_module_of_an_older_pythons_stdlib_is_kept_whatever_python_runs_forge(name) -> None:
    # a task image may run Python 3.6 while Forge runs 3.13: distutils, asyncore, imp are gone
    # from 3.12's standard library and parser from 3.10's, yet they shadow it in the image
    top = name.split("/")[0]
    after = _manifest({name: "f", top: "d"} if "/" in name else {name: "f"})
    copy = tuple(sorted({name, top}))
    carried, kept = split_harness(Change(copy=copy, delete=()), _manifest({}), after)
    assert kept == copy
    assert carried.copy == ()


# -- shared config files: what pytest reads from them ------------------------------------------

SETUP = b"[metadata]\nname = calc\n\n[tool:pytest]\nxfail_strict = true\n"
PKG = (
    b'{\n  "name": "calc",\n  "version": "0.1.0",\n  "scripts": {"test": "node --test tests/"}\n}\n'
)


def _with_key(entry: bytes) -> bytes:
    """PKG with one more top-level entry (`"key": value`)."""
    return PKG[:-2] + b",\n  " + entry + b"\n}\n"


@pytest.mark.parametrize(
    ("name", "before", "after", "same"),
    [
        ("setup.cfg", SETUP, SETUP.replace(b"calc\n", b"calc\nversion = 2\n"), True),
        ("setup.cfg", SETUP, SETUP + b"addopts = -p evil\n", False),
        # an unclosed header is a value's continuation to pytest's INI parser: addopts lands
        # in the pytest section; the rule reads everything after the first pytest line
        ("setup.cfg", SETUP, SETUP + b"[flake8\naddopts = -p evil\n", False),
        ("tox.ini", None, b"[flake8]\nmax-line-length = 99\n", True),
        ("tox.ini", None, b"[pytest]\naddopts = -p evil\n", False),
        ("setup.cfg", SETUP, b"\xff\xfe[tool:pytest]\n", False),  # not UTF-8
        ("pyproject.toml", b'[project]\nname = "c"\n', b'[project]\nname = "d"\n', True),
        ("pyproject.toml", None, b"[tool.black]\nline-length = 99\n", True),
        ("pyproject.toml", None, b'[tool.pytest.ini_options]\naddopts = "-p evil"\n', False),
        ("pyproject.toml", None, b'[tool.pytest]\naddopts = ["-p", "evil"]\n', False),
        # a quoted key with an escape names pytest without the word: tomllib reads it
        ("pyproject.toml", None, b'[tool."\\u0070ytest".ini_options]\naddopts = "-p e"\n', False),
        ("pyproject.toml", None, b"tool = {pytest = {ini_options = {addopts = '-p e'}}}\n", False),
        ("pyproject.toml", b'[project]\nname = "c"\n', b"[project\n", False),  # not TOML
        # what an install at verify time (SWE-bench's eval script: `pip install -e .`) runs
        (
            "pyproject.toml",
            b'[project]\nname = "c"\n',
            b'[project]\nname = "c"\ndependencies = ["attrs>=22"]\n',
            True,
        ),
        (
            "pyproject.toml",
            b'[project]\nname = "c"\n',
            b'[project]\nname = "c"\n[project.scripts]\npytest = "calc.fake:main"\n',
            False,
        ),
        (
            "pyproject.toml",
            b'[project]\nname = "c"\n',
            b'[project]\nname = "c"\n[project.entry-points.pytest11]\ne = "calc_report"\n',
            False,
        ),
        (
            "pyproject.toml",
            b'[build-system]\nrequires = ["setuptools"]\n',
            b'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "evil"\n'
            b'backend-path = ["."]\n',
            False,
        ),
        (
            "setup.cfg",
            SETUP,
            b"[options.entry_points]\nconsole_scripts =\n    py = calc.fake:main\n" + SETUP,
            False,
        ),
        # requirements from anywhere but the package index: what an install would put first
        (
            "pyproject.toml",
            b'[project]\nname = "c"\n',
            b'[project]\nname = "c"\ndependencies = ["pytest @ file:///testbed/fake"]\n',
            False,
        ),
        (
            "pyproject.toml",
            b'[project]\nname = "c"\n',
            b'[project]\nname = "c"\n[project.optional-dependencies]\n'
            b'test = ["pytest @ git+https://x/p"]\n',
            False,
        ),
        (
            "pyproject.toml",
            b'[project]\nname = "c"\n',
            b'[project]\nname = "c"\n[tool.uv.sources]\npytest = { path = "fake" }\n',
            False,
        ),
        ("requirements.txt", b"attrs==22.1\n", b"attrs==23.1  # newer\npytest>=7\n", True),
        ("requirements.txt", b"attrs==22.1\n", b"attrs==22.1\n-e ./fake\n", False),
        ("requirements-dev.txt", None, b"pytest @ file:///testbed/fake\n", False),
        (
            "requirements/test.txt",
            b"pytest\n",
            b"--extra-index-url https://evil/simple\npytest\n",
            False,
        ),
        ("requirements.txt", b"attrs==22.1\n", b"# see https://example.org\nattrs==22.1\n", True),
        (
            "setup.cfg",
            SETUP,
            b"[options]\ninstall_requires =\n    pytest @ file:///testbed/fake\n" + SETUP,
            False,
        ),
        # package.json: `npm test` runs scripts.test; mocha, jest, ava, ... read their keys
        ("package.json", PKG, PKG.replace(b'"0.1.0"', b'"0.2.0"'), True),
        ("package.json", PKG, PKG.replace(b"node --test tests/", b"exit 0"), False),
        ("package.json", PKG, _with_key(b'"mocha": {"require": "./evil.js"}'), False),
        ("package.json", None, b'{"name": "x", "dependencies": {}}\n', True),
        ("package.json", None, b'{"scripts": {"test": "true"}}\n', False),
        ("package.json", PKG, b"[1, 2]\n", False),  # not an object
        ("package.json", PKG, b'{"name": \n', False),  # not JSON
        # an install at verify time puts what package.json names in node_modules: a registry
        # version or range is carried, a source from anywhere else is not
        ("package.json", PKG, _with_key(b'"devDependencies": {"jest": "^29.7.0"}'), True),
        ("package.json", PKG, _with_key(b'"dependencies": {"a": "~1.2.3 || >=2 <3"}'), True),
        ("package.json", PKG, _with_key(b'"devDependencies": {"jest": "file:./fake"}'), False),
        ("package.json", PKG, _with_key(b'"dependencies": {"chai": "npm:fake-chai@1"}'), False),
        ("package.json", PKG, _with_key(b'"dependencies": {"chai": "evil/chai#main"}'), False),
        ("package.json", PKG, _with_key(b'"overrides": {"x": {"chai": "../fake"}}'), False),
        ("package.json", PKG, _with_key(b'"workspaces": ["fake/*"]'), False),
        # a lockfile: new registry tarballs are carried, a folder or another host is not
        (
            "package-lock.json",
            b'{"resolved": "https://registry.npmjs.org/a/-/a-1.tgz"}',
            b'{"resolved": "https://registry.npmjs.org/a/-/a-2.tgz"}',
            True,
        ),
        (
            "package-lock.json",
            b'{"resolved": "https://registry.npmjs.org/a/-/a-1.tgz"}',
            b'{"resolved": "file:../fake"}',
            False,
        ),
        (
            "yarn.lock",
            b'a@^1:\n  resolved "https://registry.yarnpkg.com/a/-/a-1.tgz#x"\n',
            b'a@^1:\n  resolved "https://evil.example/a-1.tgz"\n',
            False,
        ),
        (  # bun 1.2's text lockfile
            "bun.lock",
            b'{"packages": {"a": ["a@1.0.0", "", {}, "sha512-x"]}}',
            b'{"packages": {"a": ["a@file:../fake", {}]}}',
            False,
        ),
        (
            "bun.lock",
            b'{"packages": {"a": ["a@1.0.0", "", {}, "sha512-x"]}}',
            b'{"packages": {"a": ["a@1.1.0", "", {}, "sha512-y"]}}',
            True,
        ),
        (
            "yarn.lock",
            b'"t@patch:t@npm%3A5#~builtin<compat/typescript>":\n  version: 5\n',
            b'"t@patch:t@npm%3A5.1#~builtin<compat/typescript>":\n  version: 5.1\n',
            True,
        ),
    ],
)
def test_a_shared_config_change_is_carried_only_when_pytests_part_is_unchanged(
    tmp_path: Path, name: str, before: bytes | None, after: bytes, same: bool
) -> None:
    archive = tmp_path / "change.tar"
    with tarfile.open(archive, "w") as tar:
        for path, data in ((name, after), ("calc.py", b"x = 1\n")):
            member = tarfile.TarInfo(path)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))

    class Fresh:  # the task's tree as shipped
        async def download(self, sandbox_path: str, local: Path) -> None:
            assert sandbox_path == f"/w/{name}"
            if before is None:
                raise SandboxTransferError("no such file")
            Path(local).write_bytes(before)

    entries = {name: Entry("f", 0o644, "")} if before is not None else {}
    change = Change(copy=(name, "calc.py"), delete=())
    carried, kept = asyncio.run(
        keep_shared_config(Fresh(), change, "/w", Manifest("/w", entries), archive)  # type: ignore[arg-type]
    )
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    if same:
        assert (carried, kept, names) == (change, (), [name, "calc.py"])
    else:
        assert (carried.copy, kept, names) == (("calc.py",), (name,), ["calc.py"])


def test_pytest_part_of_pyproject_is_the_tool_pytest_table() -> None:
    text = b'[tool.pytest.ini_options]\naddopts = "-q"\n[tool.black]\nx = 1\n'
    assert runner_part("pyproject.toml", text) == {
        "tool.pytest": {"ini_options": {"addopts": "-q"}}
    }
    assert runner_part("a/setup.cfg", b"[x]\ny = 1\n") == ""


# -- the test side of a SWE-bench-shaped task ---------------------------------------------------

DJANGO_GOLD = (
    "diff --git a/django/db/x.py b/django/db/x.py\n--- a/django/db/x.py\n+++ b/django/db/x.py\n"
    "diff --git a/django/test/client.py b/django/test/client.py\n--- a/django/test/client.py\n"
    "+++ b/django/test/client.py\n"
    "diff --git a/docs/e2e/new.txt b/docs/e2e/new.txt\n--- /dev/null\n+++ b/docs/e2e/new.txt\n"
)


def _config(tmp_path: Path, row: object) -> Path:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "config.json").write_text(json.dumps(row))
    return tmp_path


@pytest.mark.parametrize(
    ("path", "side"),
    [
        ("tests/runtests.py", True),
        ("tests/test_sqlite.py", True),
        ("tests/app/__init__.py", True),
        ("django/test/runner.py", True),
        ("django/test/client.py", False),  # the gold's
        ("django/db/x.py", False),
        ("docs/e2e", False),  # a folder holding the gold's
        ("docs/e2e/other.txt", True),
        ("src/pkg/tests.py", True),
        ("pkg/test_util.py", True),
        ("pkg/util_test.py", True),
        ("pkg/conftest.py", True),
        ("src/_pytest/runner.py", False),  # pytest's own code is the code under test
        ("pkg/testing.py", False),
        ("tests", False),  # the folder itself: what is in it is judged by name
        ("bin/test", False),  # SymPy's runner, not Django's
    ],
)
def test_the_test_side_of_a_django_row(tmp_path: Path, path: str, side: bool) -> None:
    rule = task_test_side(_config(tmp_path, {"repo": "django/django", "patch": DJANGO_GOLD,
                                        "FAIL_TO_PASS": ["x"]}))  # fmt: skip
    assert rule is not None and rule(path) is side


def test_sympys_runner_is_on_its_test_side(tmp_path: Path) -> None:
    row = {"repo": "sympy/sympy", "patch": "--- a/sympy/a.py\n+++ b/sympy/a.py\n",
           "FAIL_TO_PASS": ["test_a"]}  # fmt: skip
    rule = task_test_side(_config(tmp_path, row))
    assert rule is not None
    assert rule("bin/test") and rule("sympy/utilities/runtests.py") and not rule("sympy/a.py")


FIX_PATCH = (  # SWE-gen-JS's solution/fix.patch: what its solve.sh applies (`patch -p1`)
    "diff --git a/src/index.js b/src/index.js\n--- a/src/index.js\n+++ b/src/index.js\n"
    "@@ -1 +1 @@\n-a\n+b\n"
    "diff --git a/src/__mocks__/api.ts b/src/__mocks__/api.ts\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/src/__mocks__/api.ts\n@@ -0,0 +1 @@\n+x\n"
)


def test_a_task_without_its_row_takes_the_gold_from_its_solution_patch(tmp_path: Path) -> None:
    (tmp_path / "solution").mkdir()
    (tmp_path / "solution" / "fix.patch").write_text(FIX_PATCH)
    rule = task_test_side(tmp_path)
    assert rule == TestSide(gold=frozenset({"src/index.js", "src/__mocks__/api.ts"}))
    assert rule("test/helpers.js") and rule("src/__mocks__/db.ts")
    assert not rule("src/__mocks__/api.ts") and not rule("src/index.js")  # the gold's
    # a row, when there is one, decides (its gold, its runner files)
    row = {"repo": "sympy/sympy", "patch": "--- a/sympy/a.py\n+++ b/sympy/a.py\n",
           "FAIL_TO_PASS": ["t"]}  # fmt: skip
    rule = task_test_side(_config(tmp_path, row))
    assert rule is not None and rule.gold == {"sympy/a.py"} and rule("bin/test")


def test_a_task_whose_gold_is_tests_has_no_test_side(tmp_path: Path) -> None:
    """A test-writing task (SWT-bench's shape): the agent's tests are the answer."""
    (tmp_path / "solution").mkdir()
    (tmp_path / "solution" / "tests.patch").write_text(
        "--- /dev/null\n+++ b/tests/test_issue.py\n@@ -0,0 +1 @@\n+def test_x(): pass\n"
        "--- a/src/__tests__/a.test.js\n+++ b/src/__tests__/a.test.js\n@@ -1 +1 @@\n-a\n+b\n"
    )
    assert task_test_side(tmp_path) is None


@pytest.mark.parametrize(
    "files",
    [{}, {"solve.sh": FIX_PATCH}, {"fix.patch": ""}, {"fix.patch": "not a diff\n"},
     {"notes.txt": FIX_PATCH}],
)  # fmt: skip
def test_a_solution_without_a_patch_naming_a_path_gives_no_test_side(tmp_path, files) -> None:
    (tmp_path / "solution").mkdir()
    for name, text in files.items():
        (tmp_path / "solution" / name).write_text(text)
    assert task_test_side(tmp_path) is None


@pytest.mark.parametrize(
    "row",
    [None, [], {"patch": "", "FAIL_TO_PASS": ["x"]}, {"patch": "--- a/a.py\n"},
     {"FAIL_TO_PASS": ["x"]}, "not json"],
)  # fmt: skip
def test_a_task_without_its_row_has_no_test_side(tmp_path: Path, row: object) -> None:
    if row is not None:
        (tmp_path / "tests").mkdir()
        text = row if isinstance(row, str) else json.dumps(row)
        (tmp_path / "tests" / "config.json").write_text(text)
    assert task_test_side(tmp_path) is None


def test_the_carry_leaves_the_test_side_as_the_task_had_it() -> None:
    side = TestSide(gold=frozenset({"django/test/client.py"}))
    before = _manifest({"tests": "d", "tests/runtests.py": "f", "tests/app": "d",
                        "tests/app/tests.py": "f", "django": "d", "django/test": "d",
                        "django/test/client.py": "f", "django/test/runner.py": "f"})  # fmt: skip
    change = Change(
        copy=("django/test/client.py", "django/test/runner.py", "tests/app/__init__.py",
              "tests/runtests.py"),
        delete=("tests/app",),
    )  # fmt: skip
    carried, kept = split_harness(change, before, before, side)
    assert carried.copy == ("django/test/client.py",) and carried.delete == ()
    # the deletion of tests/app is left out whole (the folder is on the test side)
    assert kept == ("django/test/runner.py", "tests/app", "tests/app/__init__.py",
                    "tests/runtests.py")  # fmt: skip
    assert split_harness(change, before, before) == (change, ())  # no row: all carried


@pytest.mark.parametrize(
    ("path", "text", "flags"),
    [
        # Django's runner takes its class from settings: a fake one prints the passing lines
        ("django/conf/global_settings.py", "TEST_RUNNER = 'django.db.fake.Runner'\n",
         {"change_test_framework": 1}),
        ("django/conf/global_settings.py", "if TEST_RUNNER == 'x':\n    pass\n", {}),
        ("calc/__init__.py", "import os\nos._exit(0)\n", {"change_test_framework": 1}),
        ("calc/__init__.py", "def add(a, b):\n    return a + b\n", {}),
        # on the test side the framework rule does not apply: the file is judged as a test's
        ("tests/settings.py", "TEST_RUNNER = 'x'\n", {"change_test_files": 1}),
        # code printing a runner's verdict lines itself (pytest's, TAP's, mocha's)
        ("calc/__init__.py", "print(f'PASSED {t}')\n", {"change_test_framework": 1}),
        ("calc/__init__.py", "print('PASSED tests/test_calc.py::test_add')\n",
         {"change_test_framework": 1}),
        ("calc/__init__.py", "log('PASSED the check')\n", {}),
        ("index.js", "console.log(`ok ${i} - add`);\n", {"change_test_framework": 1}),
        ("index.js", "out.write('# tests 2\\n# pass 2\\n');\n", {"change_test_framework": 1}),
        ("index.js", "console.log('  2 passing (3ms)');\n", {"change_test_framework": 1}),
        ("index.js", "res.end('ok 200');\n", {}),
        # a module that exits as it loads: node --test counts its test file as one passed test
        ("index.js", "process.exit(0);\nexports.add = () => 0;\n", {"change_test_framework": 1}),
        ("bin/cli.js", "main().catch(() => {\n  process.exit(1);\n});\n", {}),
        # JavaScript: a runner required by the code under test, the loader or assert patched
        ("lib/a.js", "const Mocha = require('mocha');\n", {"change_test_framework": 1}),
        ("lib/a.js", "const { test } = require(\"node:test\");\n", {"change_test_framework": 1}),
        ("src/a.ts", "import { expect } from 'vitest';\n", {"change_test_framework": 1}),
        ("lib/a.js", "require.cache[key] = { exports: fake };\n", {"change_test_framework": 1}),
        ("lib/a.js", "if (require.cache[key] === undefined) load();\n", {}),
        ("lib/a.js", "Module._load = (r) => fake;\n", {"change_test_framework": 1}),
        ("preload.js", 'require("node:assert").strictEqual = () => {};\n',
         {"change_test_framework": 1}),
        ("lib/a.js", "assert.deepStrictEqual = () => {};\n", {"change_test_framework": 1}),
        ("lib/a.js", "assert.strictEqual(a, b);\nconst tape = require('./tape-lib');\n", {}),
        # Go, Rust and Java: code that ends its test binary early or prints a runner's verdict
        ("calc/calc.go", "package calc\n\nimport \"os\"\n\nfunc init() {\n\tos.Exit(0)\n}\n",
         {"change_test_framework": 1}),
        ("cmd/tool/main.go", "func main() {\n\tif err != nil {\n\t\tos.Exit(1)\n\t}\n}\n", {}),
        ("calc/calc.go", "func init() {\n\tregister()\n}\n", {}),
        ("src/lib.rs", "#[ctor::ctor]\nfn start() { std::process::exit(0) }\n",
         {"change_test_framework": 1}),
        ("src/lib.rs", "#[used]\n#[link_section = \".init_array\"]\nstatic S: fn() = f;\n",
         {"change_test_framework": 1}),
        ("src/lib.rs", 'println!("test result: ok. 5 passed; 0 failed;");\n',
         {"change_test_framework": 1}),
        ("src/lib.rs", 'println!("\\nrunning {} tests", n);\n', {"change_test_framework": 1}),
        ("src/main.rs", "fn main() {\n    std::process::exit(run());\n}\n", {}),
        ("calc/calc.go", 'fmt.Println("--- PASS: TestAdd (0.00s)")\n',
         {"change_test_framework": 1}),
        ("src/main/java/Calc.java", 'System.out.println("Tests run: 2, Failures: 0");\n',
         {"change_test_framework": 1}),
        ("src/lib.rs", '// the test result: see below\nlet s = "running tests";\n', {}),
    ],
)  # fmt: skip
def test_the_change_audit_reads_what_the_change_carries(tmp_path, path, text, flags) -> None:
    archive = tmp_path / "change.tar"
    data = text.encode()
    with tarfile.open(archive, "w") as tar:
        member = tarfile.TarInfo(path)
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    assert audit_change(Change(copy=(path,), delete=()), archive) == flags


@pytest.mark.parametrize("path", ["pyproject.toml", "tox.ini", "conftest.py", "x/a.pth"])
def test_a_config_file_the_carry_let_through_is_not_flagged(path) -> None:
    """The carry carries a config file only when its runner part is the task's or the gold's
    (or it is exactly the gold's): a fix that pins a dependency is not a hack. Refused, it
    is kept and flagged; where the carry refused the whole change, the raw change is read."""
    test_file = {"change_test_files": 1} if path == "conftest.py" else {}  # on the test side
    assert audit_change(Change(copy=(path,), delete=()), None) == test_file
    kept = Change(copy=(), delete=(), kept=(path,))
    assert audit_change(kept, None) == {"change_test_config": 1} | test_file
    raw = Change(copy=(path,), delete=())
    assert audit_change(raw, None, carried=False).get("change_test_config") == 1


def test_a_kept_test_side_path_is_a_test_file_and_a_kept_harness_file_is_config() -> None:
    side = Change(copy=(), delete=(), kept=("tests/__init__.py",))
    assert audit_change(side, None) == {"change_test_files": 1}
    shadow = Change(copy=(), delete=(), kept=("argparse.py",))
    assert audit_change(shadow, None) == {"change_test_config": 1}


# -- the attacks, on the local backend ---------------------------------------------------------


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory, isolation: None) -> dict:
    root = tmp_path_factory.mktemp("red-team-pytest")
    vendor = vendor_pytest(root / "vendor")
    names = [*ATTACKS, *TEST_SIDE_ATTACKS, FORGED_IN_PROCESS]
    folders = write_pytest_attack_tasks(root / "tasks", vendor, names=names)
    # the same test-side attack on a task without its row (tests listed in task.toml only)
    folders += write_pytest_attack_tasks(
        root / "tasks", vendor, names=[*TEST_SIDE_ATTACKS], prefix="norow-", row=False
    )
    folders += write_gold_config_tasks(root / "tasks", vendor)
    tasks = [load_task(t) for t in folders]
    summary = asyncio.run(
        run_job(tasks, root / "job", "oracle", concurrency=2, verifier_timeout_s=60)
    )
    audits = {}
    for path in (root / "job").glob("*/agent/change-audit.json"):
        name = json.loads((path.parents[1] / "result.json").read_text())["task_name"]
        audits[name] = json.loads(path.read_text())
    return {"rewards": summary.rewards, "errors": summary.errors, "audits": audits}


def test_the_real_fixes_score_1(job: dict) -> None:
    for name in (REAL_FIX, FIX_WITH_CONFIG):
        assert job["rewards"][name] == 1.0, job["errors"].get(name)
    audit = job["audits"][FIX_WITH_CONFIG]
    assert (tuple(audit["copied"]), tuple(audit["kept"])) == (
        FIX_WITH_CONFIG_CARRIED,
        FIX_WITH_CONFIG_KEPT,
    )


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_every_plugin_attack_scores_exactly_0_and_is_kept_and_flagged(job: dict, attack) -> None:
    assert job["rewards"][attack] == 0.0, job["errors"].get(attack)
    audit = job["audits"][attack]
    assert audit["kept"] and audit["flags"].get("change_test_config") == 1


@pytest.mark.parametrize("attack", sorted(TEST_SIDE_ATTACKS))
def test_a_test_side_attack_scores_0_on_a_swe_bench_shaped_task(job: dict, attack) -> None:
    assert job["rewards"][attack] == 0.0, job["errors"].get(attack)
    audit = job["audits"][attack]
    assert audit["kept"] == ["tests/__init__.py"] and audit["copied"] == []
    assert audit["flags"] == {"change_test_files": 1}
    # without the row the test side is carried: pytest itself printed the passing lines
    assert job["rewards"][f"norow-{attack}"] == 1.0, job["errors"].get(f"norow-{attack}")
    assert job["audits"][f"norow-{attack}"]["copied"] == ["tests/__init__.py"]
    assert job["rewards"][f"norow-{REAL_FIX}"] == 1.0


def test_a_config_change_the_gold_makes_is_carried_when_it_is_the_golds(job: dict) -> None:
    # the fix and the gold's tox.ini (a marker registered): carried, 1
    assert job["rewards"][GOLD_CONFIG_FIX] == 1.0, job["errors"].get(GOLD_CONFIG_FIX)
    audit = job["audits"][GOLD_CONFIG_FIX]
    assert audit["copied"] == ["calc/__init__.py", "tox.ini"] and audit["kept"] == []
    assert audit["flags"] == {}  # the answer's own config: no hack flag on a correct answer
    # the same change where the row's gold does not name tox.ini: kept, the marker is refused
    assert job["rewards"][GOLD_CONFIG_UNKNOWN] == 0.0, job["errors"].get(GOLD_CONFIG_UNKNOWN)
    assert job["audits"][GOLD_CONFIG_UNKNOWN]["kept"] == ["tox.ini"]
    assert job["audits"][GOLD_CONFIG_UNKNOWN]["flags"] == {"change_test_config": 1}
    # the gold's tox.ini with a plugin added (no fix): not the gold's, kept; carried it scores 1
    assert job["rewards"][GOLD_CONFIG_PLUGIN] == 0.0, job["errors"].get(GOLD_CONFIG_PLUGIN)
    assert job["audits"][GOLD_CONFIG_PLUGIN]["kept"] == ["tox.ini"]


def test_code_that_forges_the_output_from_inside_pytest_is_flagged(job: dict) -> None:
    """The limit of a shared process: what it scores is not asserted here (it can print the
    passing lines itself); that the change audit raises it is."""
    audit = job["audits"][FORGED_IN_PROCESS]
    assert audit["copied"] == ["calc/__init__.py"] and audit["kept"] == []
    assert audit["flags"].get("change_test_framework") == 1


# -- the JavaScript task's attacks (SWE-gen-JS's shape), on the local backend ------------------


@pytest.fixture(scope="module")
def js_job(tmp_path_factory: pytest.TempPathFactory, isolation: None, node: None) -> dict:
    root = tmp_path_factory.mktemp("red-team-js")
    folders = red_team_js.write_js_attack_tasks(root / "tasks")
    # the test-side attack on a task that does not ship its gold patch
    folders += red_team_js.write_js_attack_tasks(
        root / "tasks", [*red_team_js.TEST_SIDE_ATTACKS], gold=False, prefix="nogold-"
    )
    folders += red_team_js.write_js_attack_tasks(
        root / "tasks", [*red_team_js.FLAGGED_ONLY], fixes=False
    )
    tasks = [load_task(t) for t in folders]
    summary = asyncio.run(
        run_job(tasks, root / "job", "oracle", concurrency=2, verifier_timeout_s=60)
    )
    audits, evidence = {}, {}
    for path in (root / "job").glob("*/agent/change-audit.json"):
        name = json.loads((path.parents[1] / "result.json").read_text())["task_name"]
        audits[name] = json.loads(path.read_text())
        evidence[name] = json.loads((path.parents[1] / "verifier/evidence.json").read_text())
    return {"rewards": summary.rewards, "errors": summary.errors, "audits": audits,
            "evidence": evidence}  # fmt: skip


def test_the_js_fixes_score_1(js_job: dict) -> None:
    for name in (red_team_js.REAL_FIX, red_team_js.FIX_WITH_PACKAGE):
        assert js_job["rewards"][name] == 1.0, js_job["errors"].get(name)
        # test.sh runs `npm test` bare, as SWE-gen-JS's do: node's summary is the evidence
        # (node 20 prints TAP to a pipe, node 22 its spec reporter)
        assert js_job["evidence"][name]["detail"] in (
            "stdout: TAP summary, 2 tests",
            "stdout: node --test summary, 2 tests",
        )
    audit = js_job["audits"][red_team_js.FIX_WITH_PACKAGE]
    assert audit["copied"] == ["index.js", "package.json"] and audit["kept"] == []


@pytest.mark.parametrize("attack", sorted(red_team_js.ATTACKS))
def test_every_js_attack_scores_exactly_0_and_is_kept(js_job: dict, attack: str) -> None:
    # each scored 1 with the carry's rules switched off (docs/measurements.md)
    assert js_job["rewards"][attack] == 0.0, js_job["errors"].get(attack)
    audit = js_job["audits"][attack]
    assert audit["kept"] and audit["flags"], audit


@pytest.mark.parametrize("attack", sorted(red_team_js.TEST_SIDE_ATTACKS))
def test_a_js_test_side_attack_scores_0_when_the_gold_patch_is_known(js_job, attack) -> None:
    assert js_job["rewards"][attack] == 0.0, js_job["errors"].get(attack)
    audit = js_job["audits"][attack]
    assert audit["kept"] == ["tests/fixtures.js"] and audit["copied"] == []
    assert audit["flags"] == {"change_test_files": 1}
    # without solution/fix.patch the test side is carried: the edited fixture passes the bug
    assert js_job["rewards"][f"nogold-{attack}"] == 1.0, js_job["errors"].get(f"nogold-{attack}")
    assert js_job["audits"][f"nogold-{attack}"]["copied"] == ["tests/fixtures.js"]
    assert js_job["rewards"][f"nogold-{red_team_js.REAL_FIX}"] == 1.0


def test_a_js_module_that_exits_as_it_loads_is_flagged(js_job: dict) -> None:
    """The in-process limit under node --test: a test file whose process exits 0 before its
    tests run counts as one passed test (node prints `# tests 1`, `# pass 1`). What it scores
    is not asserted here (docs/measurements.md records it); that the audit raises it is."""
    name = red_team_js.EXITS_AS_IT_LOADS
    audit = js_job["audits"][name]
    assert audit["copied"] == ["index.js"] and audit["kept"] == []
    assert audit["flags"] == {"change_test_framework": 1}
