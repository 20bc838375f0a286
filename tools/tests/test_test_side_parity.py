"""The test side is one rule written twice, in two packages that do not depend on each other:
forge-sandbox's carry reads it as a regex (`verify/_testside.TEST_SIDE`), forge-data's imported
test.sh as git pathspecs (`importers/_layout.TEST_SIDE`, run by `git ls-files` in the image
build). Both must pick the same paths: Python's, JavaScript's, Rust's and Go's test names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_data.importers._layout import SIDE_PY, side_pathspecs, side_rule
from forge_sandbox.verify._testside import RUNNER_FILES, TestSide

CASES = {
    "tests/runtests.py": True, "django/test/runner.py": True, "pkg/tests.py": True,
    "pkg/test_util.py": True, "pkg/util_test.py": True, "pkg/conftest.py": True,
    "docs/e2e/x.txt": True, "src/__tests__/base.js": True, "src/__mocks__/api.ts": True,
    "src/__snapshots__/a.js.snap": True, "src/__fixtures__/a.json": True,
    "src/a.test.ts": True, "src/b.spec.jsx": True, "cli/client_test.go": True,
    "crates/lexer/src/tests.rs": True,
    "src/_pytest/runner.py": False, "pkg/testing.py": False, "src/app.py": False,
    "src/latest.js": False, "src/contest.ts": False, "jest.config.js": False,
    "src/spec/a.js": False, "cli/client.go": False, "crates/lexer/src/lib.rs": False,
}  # fmt: skip
# in a module's place on the side: a package, an extension, bytecode by its name (Python imports
# them instead); not the importers' pathspecs (git names files), both packages' Python rules
IN_PLACE = {
    "app/test_views/__init__.py": True, "app/test_views/deep/x.py": True,
    "app/test_views.cpython-311-x86_64-linux-gnu.so": True, "app/tests.pyc": True,
    "app/conftest/__init__.py": True, "src/app/views/__init__.py": False,
    "app/test_views.txt": False, "app/tests.orig.py": False,
    "app/views.cpython-311-x86_64-linux-gnu.so": False,
}  # fmt: skip
GOLD = "--- a/src/__tests__/base.js\n+++ b/src/__tests__/base.js\n"  # the gold's: never the side's
EXPECTED = {path for path, side in CASES.items() if side} - {"src/__tests__/base.js"}


def test_the_carrys_regex_picks_the_test_side() -> None:
    rule = TestSide(gold=frozenset({"src/__tests__/base.js"}))
    assert {path for path in CASES if rule(path)} == EXPECTED
    assert {path for path in IN_PLACE if rule(path)} == {p for p, side in IN_PLACE.items() if side}


def test_the_restore_in_test_sh_picks_the_same_paths() -> None:
    """test.sh's restore (`SIDE_PY`, run by the image's Python) reads the pathspecs as a regex,
    with the same rule for whatever takes a module's place."""
    space: dict[str, Any] = {}
    exec(compile(SIDE_PY, "SIDE_PY", "exec"), space)
    rule = space["side_rule"](side_rule("swebench", {"repo": "o/p", "patch": GOLD}))
    assert {path for path in CASES if rule(path)} == EXPECTED
    assert {path for path in IN_PLACE if rule(path)} == {p for p, side in IN_PLACE.items() if side}
    sympy = space["side_rule"](side_rule("swebench", {"repo": "sympy/sympy", "patch": ""}))
    carry = TestSide(gold=frozenset(), runner=RUNNER_FILES["sympy/sympy"])
    for path in ("bin/test", "sympy/utilities/runtests/__init__.py", "sympy/utilities/x.py",
                 "sympy/utilities/runtests.cpython-39-x86_64-linux-gnu.so"):  # fmt: skip
        assert sympy(path) == carry(path) == (path != "sympy/utilities/x.py"), path


def test_the_importers_pathspecs_pick_the_same_paths_through_git(tmp_path: Path) -> None:
    git = shutil.which("git")
    if git is None:
        pytest.fail("expected git on PATH (the image build runs these pathspecs with it)")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    for path in CASES:
        (tmp_path / "repo" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / path).write_text("x\n")
    repo = ["-C", str(tmp_path / "repo")]
    subprocess.run([git, *repo, "init", "-q"], env=env, check=True)
    subprocess.run([git, *repo, "add", "-A"], env=env, check=True)
    specs = side_pathspecs("swebench", {"repo": "o/p", "patch": GOLD})
    listed = subprocess.run([git, *repo, "ls-files", "--", *specs], env=env, check=True,
                            capture_output=True, text=True).stdout.split()  # fmt: skip
    assert set(listed) == EXPECTED


def _git_diff(tmp_path: Path) -> str:
    """A real `git diff` over the names git writes differently: a space (a tab ends it), a
    quote and a non-ASCII byte (C-quoted), a new and a removed file, a rename with a change,
    sections without a `---`/`+++` pair (a pure rename, a mode change, a binary file, an empty
    new file: the adapters read none of them), and a hunk whose removed line reads `--- x` and
    added line `+++ y`."""
    git = shutil.which("git")
    if git is None:
        pytest.fail("expected git on PATH (the patches compared here are git's)")

    def run(*args: str) -> str:
        env = {"GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
        done = subprocess.run([git, *args], cwd=tmp_path, env=env, check=True,
                              capture_output=True, text=True)  # fmt: skip
        return done.stdout

    (tmp_path / "Nx Cloud").mkdir()
    files = {"Nx Cloud/a b.ts": "a\n", "naïve.py": "x\n", 'q"t.py': "q\n", "gone.py": "g\n",
             "old_name.py": "same\n" * 5, "trap.txt": "-- x\nkeep\n",
             "pure old.py": "kept\n" * 5, "script.sh": "echo\n"}  # fmt: skip
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "logo.bin").write_bytes(b"\0\1\2")
    run("init", "-q")
    run("add", "-A")
    run("-c", "user.email=a@b", "-c", "user.name=n", "commit", "-qm", "start")
    for name in ("Nx Cloud/a b.ts", "naïve.py", 'q"t.py'):
        with (tmp_path / name).open("a", encoding="utf-8") as handle:
            handle.write("more\n")
    (tmp_path / "gone.py").unlink()
    (tmp_path / "new file.py").write_text("n\n", encoding="utf-8")
    (tmp_path / "old_name.py").rename(tmp_path / "new_name.py")  # a rename with a change
    with (tmp_path / "new_name.py").open("a", encoding="utf-8") as handle:
        handle.write("changed\n")
    (tmp_path / "trap.txt").write_text("++ y\nkeep\n", encoding="utf-8")
    # sections without a ---/+++ pair: a pure rename, a mode change, a binary file, an empty
    # new file (named by their `diff --git` and `rename` lines only)
    (tmp_path / "pure old.py").rename(tmp_path / "pure new.py")
    (tmp_path / "script.sh").chmod(0o755)
    (tmp_path / "logo.bin").write_bytes(b"\0\3\4")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    run("add", "-A")
    return run("diff", "--cached", "-M")


def test_both_packages_read_the_same_paths_from_a_git_diff(tmp_path: Path) -> None:
    from forge_data.importers._layout import patch_paths as importer_paths
    from forge_sandbox.verify._gold import patch_paths as carry_paths

    patch = _git_diff(tmp_path)
    assert '"a/na\\303\\257ve.py"' in patch and "--- a/Nx Cloud/a b.ts\t" in patch
    assert "\n--- x\n" in patch and "\n+++ y\n" in patch  # the trap's hunk lines
    before, touched = importer_paths(patch)
    assert "rename from pure old.py" in patch and "Binary files a/logo.bin" in patch
    expected = {"Nx Cloud/a b.ts", "naïve.py", 'q"t.py', "gone.py", "new file.py",
                "old_name.py", "new_name.py", "trap.txt", "pure old.py", "pure new.py",
                "script.sh", "logo.bin", "empty.txt"}  # fmt: skip
    assert set(touched) == expected == set(carry_paths(patch))
    new = {"new file.py", "new_name.py", "pure new.py", "empty.txt"}
    assert set(before) == expected - new  # the pre-images


# names that sit on either side of each rule: folders, test files, look-alikes
_PART = st.sampled_from([
    "test", "tests", "testing", "e2e", "__tests__", "__mocks__", "src", "pkg", "testsuite",
    "test_a.py", "a_test.py", "tests.py", "conftest.py", "x.test.js", "y.spec.ts", "z_test.go",
    "tests.rs", "lib.rs", "contest.py", "a.py", "test_.py", ".hidden", "sp ace.py", "ünï.py",
    "spec", "a.test", "test.py", "atest_b.py",
])  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(paths=st.lists(st.lists(_PART, min_size=1, max_size=4).map("/".join), min_size=1,
                      max_size=12, unique=True),
       gold_index=st.integers(min_value=0, max_value=11))  # fmt: skip
def test_the_restores_regex_picks_what_git_picks(paths: list[str], gold_index: int) -> None:
    """test.sh's restore reads the pathspecs the image build gave `git ls-files` as one regex
    (`side_rule`): for any tree, the same paths, the gold's excluded."""
    import tempfile

    git = shutil.which("git")
    if git is None:
        pytest.fail("expected git on PATH (the image build runs these pathspecs with it)")
    paths = [p for p in paths if not any(o.startswith(p + "/") for o in paths)]  # files only
    gold = paths[gold_index % len(paths)]
    row = {"repo": "o/p", "patch": f"--- a/{gold}\n+++ b/{gold}\n"}
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch)
        for path in paths:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text("x\n")
        env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "GIT_CONFIG_NOSYSTEM": "1"}
        subprocess.run([git, "-C", scratch, "init", "-q"], env=env, check=True)
        listed = subprocess.run([git, "-C", scratch, "-c", "core.quotePath=false", "ls-files",
                                 "-z", "--others", "--", *side_pathspecs("swebench", row)],
                                env=env, check=True, capture_output=True).stdout  # fmt: skip
    picked = {name.decode() for name in listed.split(b"\0") if name}
    rule = side_rule("swebench", row)
    pattern = re.compile(rule["side"])
    assert {p for p in paths if p not in rule["gold"] and pattern.match(p)} == picked
