"""The gold patch, file by file (verify/_gold.py): each file's section parsed and applied to the
task's version; and the carry's use of it (a harness file the gold changes is carried only as
the gold's version)."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_sandbox.verify._gold import GoldPatchError, apply_file_diff, file_diffs, patch_paths
from forge_sandbox.verify._harness import _carried, split_harness
from forge_sandbox.verify._testside import TestSide
from forge_sandbox.verify._transfer import Change, Entry, Manifest

# what `git diff --no-index` printed here (git 2.39) for an edit, a last line without a
# newline, a new file and a removed one
GIT_DIFF = """\
diff --git a/jest.config.js b/jest.config.js
index 71ac1b5..c5128cc 100644
--- a/jest.config.js
+++ b/jest.config.js
@@ -1,8 +1,9 @@
 a
-b
+B
 c
 d
 e
 f
 g
 h
+added
\\ No newline at end of file
diff --git a/.mocharc.yml b/.mocharc.yml
new file mode 100644
index 0000000..3b18e51
--- /dev/null
+++ b/.mocharc.yml
@@ -0,0 +1 @@
+spec: test/**/*.js
diff --git a/karma.conf.js b/karma.conf.js
deleted file mode 100644
index 7898192..0000000
--- a/karma.conf.js
+++ /dev/null
@@ -1 +0,0 @@
-a
"""
BEFORE = b"a\nb\nc\nd\ne\nf\ng\nh\n"


def test_a_git_diff_applies_file_by_file() -> None:
    diffs = file_diffs(GIT_DIFF)
    assert sorted(diffs) == [".mocharc.yml", "jest.config.js", "karma.conf.js"]
    assert apply_file_diff(BEFORE, diffs["jest.config.js"]) == b"a\nB\nc\nd\ne\nf\ng\nh\nadded"
    assert apply_file_diff(None, diffs[".mocharc.yml"]) == b"spec: test/**/*.js\n"
    assert (
        diffs["karma.conf.js"].deletes and apply_file_diff(b"a\n", diffs["karma.conf.js"]) is None
    )


def test_a_hunk_applies_at_the_nearest_offset_and_never_with_fuzz() -> None:
    diff = file_diffs(GIT_DIFF)["jest.config.js"]
    moved = b"x\ny\n" + BEFORE  # two lines above: the hunk applies two lines down
    assert apply_file_diff(moved, diff) == b"x\ny\na\nB\nc\nd\ne\nf\ng\nh\nadded"
    with pytest.raises(GoldPatchError, match="found no place where its context"):
        apply_file_diff(BEFORE.replace(b"e\n", b"E\n"), diff)  # one context line differs
    with pytest.raises(GoldPatchError, match="the task has no such file"):
        apply_file_diff(None, diff)
    with pytest.raises(GoldPatchError, match="expected UTF-8 text"):
        apply_file_diff(b"\xff\xfe", diff)


def test_the_paths_a_patch_touches_are_its_header_names() -> None:
    spaced = "--- a/docs/Nx Cloud/a.md\t\n+++ b/docs/Nx Cloud/a.md\t\n@@ -1 +1 @@\n-a\n+b\n"
    renamed = "--- a/old.js\n+++ b/new.js\n@@ -1 +1 @@\n-a\n+b\n"
    assert patch_paths(spaced + renamed) == {"docs/Nx Cloud/a.md", "old.js", "new.js"}
    # a removed line that reads like a header is a hunk's line, not a path
    tricky = "--- a/x.sql\n+++ b/x.sql\n@@ -1,2 +1,2 @@\n--- a/y\n-z\n+++ b/y\n+z\n"
    assert patch_paths(tricky) == {"x.sql"}


def test_a_patch_without_a_file_header_names_nothing() -> None:
    assert file_diffs("") == {} and file_diffs("not a diff\n@@ -1 +1 @@\n-a\n+b\n") == {}
    differ = "diff --git a/x.png b/y.png\nindex 1..2 100644\n"  # two names, neither read
    assert file_diffs(differ) == {}


# what git 2.39 printed for sections without a ---/+++ pair
PURE_RENAME = (
    "diff --git a/tests/old helper.py b/tests/new helper.py\nsimilarity index 100%\n"
    "rename from tests/old helper.py\nrename to tests/new helper.py\n"
)
BINARY = "diff --git a/x.png b/x.png\nindex 1..2 100644\nBinary files a/x.png and b/x.png differ\n"
MODE = "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"


def test_a_section_without_a_header_pair_is_named_by_its_git_lines() -> None:
    diffs = file_diffs(PURE_RENAME + BINARY + MODE + GIT_DIFF)
    assert sorted(diffs) == [".mocharc.yml", "jest.config.js", "karma.conf.js", "run.sh",
                             "tests/new helper.py", "x.png"]  # fmt: skip
    assert diffs["tests/new helper.py"].source == "tests/old helper.py"
    assert diffs["x.png"].binary and not diffs["run.sh"].binary and not diffs["run.sh"].hunks
    assert apply_file_diff(b"a\n", diffs["run.sh"]) == b"a\n"  # a mode change: same content
    for name in ("tests/new helper.py", "x.png"):  # their content is not in the patch
        with pytest.raises(GoldPatchError, match="binary or pure rename"):
            apply_file_diff(b"a\n", diffs[name])
    assert patch_paths(PURE_RENAME) == {"tests/old helper.py", "tests/new helper.py"}
    # the gold's rename is the task's answer: both names are off the test side, the carry
    # takes the agent's same rename (it left both as the task's before)
    side = TestSide(gold=patch_paths(PURE_RENAME))
    assert not side("tests/old helper.py") and not side("tests/new helper.py")
    assert side("tests/other.py")


_TEXTS = ["a\n", "b\n", "c\n", "\n", "  x = 1\n", "é\n", "d\n", "}\n", "e", "f\n"]
_LINES = st.lists(st.sampled_from(_TEXTS), max_size=30)


@given(old=_LINES, new=_LINES)
def test_any_difflib_diff_applies_back_to_its_target(old, new) -> None:
    """Property: a unified diff of old -> new applies to old and gives new (a line without a
    newline only last, as in a file)."""
    old = [line for line in old if line.endswith("\n")] + [line for line in old[-1:] if line == "e"]
    new = [line for line in new if line.endswith("\n")] + [line for line in new[-1:] if line == "e"]
    patch = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff(old, new, "a/f.txt", "b/f.txt")
    )
    if not patch:
        return
    diff = file_diffs(patch)["f.txt"]
    assert apply_file_diff("".join(old).encode(), diff) == "".join(new).encode()


@given(old=st.lists(st.sampled_from(_TEXTS[:-2]), min_size=1, unique=True), new=_LINES,
       above=st.lists(st.just("pad\n"), max_size=3))  # fmt: skip
def test_a_diff_finds_its_lines_moved_down(old, new, above) -> None:
    """Property: with lines above the file the gold was made on (unique lines, so that the
    context has one place), each hunk applies at its offset."""
    new = [line for line in new if line.endswith("\n")]
    patch = "".join(difflib.unified_diff(old, new, "a/f.txt", "b/f.txt"))
    if not patch:
        return
    diff = file_diffs(patch)["f.txt"]
    assert apply_file_diff("".join(above + old).encode(), diff) == "".join(above + new).encode()


def _manifest(paths: dict[str, str]) -> Manifest:
    return Manifest("/w", {p: Entry(kind, 0o644, "") for p, kind in paths.items()})


def test_the_split_leaves_a_harness_file_the_gold_changes_to_the_content_check() -> None:
    gold = file_diffs(GIT_DIFF)
    before = _manifest({"jest.config.js": "f", "karma.conf.js": "f", "src": "d"})
    change = Change(copy=("jest.config.js", ".npmrc"), delete=("karma.conf.js",))
    carried, kept = split_harness(change, before, before, None, gold)
    # jest.config.js stays in the change (judged by its bytes later); karma.conf.js's deletion
    # is the gold's and is carried; .npmrc, which the gold does not touch, stays the task's
    assert carried.copy == ("jest.config.js",) and carried.delete == ("karma.conf.js",)
    assert kept == (".npmrc",)
    assert split_harness(change, before, before)[1] == (".npmrc", "jest.config.js", "karma.conf.js")


@pytest.mark.parametrize(
    ("path", "original", "after", "gold", "carried"),
    [
        # a harness file the gold changes: the gold's bytes exactly, nothing else
        ("jest.config.js", b"a", b"gold", (True, b"gold"), True),
        ("jest.config.js", b"a", b"gold\n", (True, b"gold"), False),
        ("jest.config.js", b"a", b"gold", (False, None), False),  # the gold did not apply
        ("jest.config.js", None, b"gold", (True, None), False),  # the gold removes it
        # a shared config file: the runner's part as the task's, or as the gold's
        ("tox.ini", b"[pytest]\nx = 1\n", b"[flake8]\n[pytest]\nx = 1\n", (False, None), True),
        ("tox.ini", b"[pytest]\nx = 1\n", b"[pytest]\nx = 2\n", (True, b"[pytest]\nx = 2\n"), True),
        ("tox.ini", b"[pytest]\nx = 1\n", b"[pytest]\nx=3\n", (True, b"[pytest]\nx = 2\n"), False),
        ("tox.ini", b"[pytest]\nx = 1\n", b"[pytest]\nx = 2\n", (True, None), False),
    ],
)  # fmt: skip
def test_what_the_content_check_carries(path, original, after, gold, carried) -> None:
    assert _carried(path, original, after, gold) is carried
