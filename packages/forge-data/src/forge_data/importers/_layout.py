"""The files of one Harbor task folder made from one SWE-bench / SWE-smith / SWE-Gym row, in the
layout Harbor's adapters write (pure: text in, text out).

    <instance_id>/task.toml           old schema, timeouts 3000 s, memory '4G', storage '10G'
    <instance_id>/instruction.md      the problem statement
    <instance_id>/environment/Dockerfile   FROM the published image, WORKDIR /testbed
    <instance_id>/tests/config.json   the row (as the adapters write it)
    <instance_id>/tests/test.sh       tests as of the task, run, graded by tests/grade.py
    <instance_id>/tests/grade.py      every FAIL_TO_PASS and PASS_TO_PASS test must pass
    <instance_id>/solution/solve.sh   the gold patch applied (SWE-smith: its bug patch reversed)

Published images (the name mangling of each project, since Docker Hub names allow no `__`):
SWE-bench `swebench/sweb.eval.x86_64.<id, lower case, "__" -> "_1776_">:latest` (swebench's
`TestSpec.instance_image_key`); SWE-Gym `xingyaoww/sweb.eval.x86_64.<id, lower case, "__" ->
"_s_">:latest` (the SWE-Gym team's images, harbor-framework/adapters `src/swegym/README.md`);
SWE-smith the row's `image_name` (namespace `jyangballin/`, `"__" -> "_1776_"`, lower case, as
swesmith's `RepoProfile.image_name`), else from its `repo`.

test.sh activates the images' `testbed` conda env (PATH holds only conda's base env; the
adapters' test commands `source /opt/miniconda3/bin/activate; conda activate testbed` too) and
runs the tests with the project's runner, as swebench 4.0.3's `MAP_REPO_VERSION_TO_SPECS`
`test_cmd` and `get_test_directives` name it: Django (`django/django`, ids `test_x
(module.Class)`) through `./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1`
on the test patch's modules, SymPy (`sympy/sympy`, bare `test_x` ids) through `bin/test -C
--verbose` on the test patch's files, every other project pytest on `path::name` ids. A row whose
tests its runner cannot select gets a test.sh that exits 2 without a reward: an infrastructure
error of the verifier, never a reward 0. SWE-bench / SWE-Gym: as the adapters'
`get_test_commands`, the files the test patch touches are reset to `base_commit` (the ones it
creates removed) before it is applied; SWE-smith: the test files are reset to the instance
branch's parent (the adapter's `git checkout HEAD~1`).

The agent never sees the repository's history: the fix of a SWE-bench row sits in commits after
`base_commit` that the published images keep (`git log --all`), and a SWE-smith branch's parent
holds the clean code. The Dockerfile's last step (`cut_history_sh`) keeps the test files as of
the task in `/opt/forge/pristine`, then replaces the history by one root commit of the checked-out
tree and prunes every other object; test.sh restores the test files from there, not from git.

The test side stays the task's: the build also saves every file of the test side as the image
has it, tracked or not (`TEST_SIDE`, `RUNNER_FILES`, less the gold patch's paths) in
PRISTINE/side and lists every path of the tree (`tree.list`); test.sh first removes every
bytecode cache of the tree and every path the image lacked on the test side or in a test
module's place (a package, an extension or bytecode by its name: `SIDE_PY`), then puts each
saved file back (`RESTORE_PY`). A changed runner (Django's `tests/runtests.py`,
`django/test/runner.py`), settings module or test package `__init__`, a package
`tests/app/tests/` beside `tests/app/tests.py`, or bytecode for the runner stamped with its
source's size and time otherwise prints the passing lines. An image built before this has no
`side.list` or `tree.list`: test.sh exits 2 (rebuild it).
"""

from __future__ import annotations

import codecs
import json
import re
import shlex
from typing import Any, Literal

Kind = Literal["swebench", "swesmith", "swegym"]
KINDS: tuple[Kind, ...] = ("swebench", "swesmith", "swegym")
PATCH_END = "FORGE_PATCH_END"
PRISTINE = "/opt/forge/pristine"  # tree/<path>: test files as of the task; absent: paths it lacked
_FIXED_IDENTITY = (  # one tree, one root commit id: the images stay deterministic
    "GIT_AUTHOR_NAME=Forge GIT_AUTHOR_EMAIL=forge@localhost GIT_AUTHOR_DATE='@946684800 +0000' "
    "GIT_COMMITTER_NAME=Forge GIT_COMMITTER_EMAIL=forge@localhost "
    "GIT_COMMITTER_DATE='@946684800 +0000'"
)
_GIT_LEFTOVERS = (  # what in .git names or keeps commits besides refs, reflogs and packs
    "ORIG_HEAD FETCH_HEAD MERGE_HEAD MERGE_MSG MERGE_MODE AUTO_MERGE CHERRY_PICK_HEAD REVERT_HEAD "
    "REBASE_HEAD BISECT_HEAD BISECT_LOG BISECT_START BISECT_EXPECTED_REV BISECT_NAMES BISECT_TERMS "
    "BISECT_ANCESTORS_OK COMMIT_EDITMSG SQUASH_MSG TAG_EDITMSG rebase-merge rebase-apply sequencer "
    "rr-cache worktrees remotes branches packed-refs logs shallow info/grafts info/refs "
    "objects/info/commit-graph objects/info/commit-graphs objects/pack/multi-pack-index"
)
TASK_TOML = """\
version = "1.0"

[metadata]
benchmark = {benchmark}
instance_id = {instance_id}
repository = {repository}
difficulty = {difficulty}
category = "debugging"
tags = {tags}
source = "forge-data import {kind}"

[verifier]
timeout_sec = 3000.0

[agent]
timeout_sec = 3000.0

[environment]
build_timeout_sec = 1800.0
cpus = 1
memory = '4G'
storage = '10G'
"""
GRADE_PY = '''\
"""Grade a test run: reward 1 when every FAIL_TO_PASS and PASS_TO_PASS test passed.

Written by `forge-data import`. Reads the three runners' per-test lines (pytest -rA's summary
`PASSED id`, Django's verbose `id ... ok`, SymPy's verbose `test_x ok`). No test result in the
output at all (the tests never ran) is no verdict: exit 2 without a reward file, an
infrastructure error, never a reward 0.
"""

import json
import re
import sys

output = open(sys.argv[1], encoding="utf-8", errors="replace").read()
row = json.load(open(sys.argv[2], encoding="utf-8"))


def tests(key):
    value = row.get(key) or []
    return json.loads(value) if isinstance(value, str) else value


PYTEST = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\\S+)", re.M)
DJANGO = re.compile(  # a docstring's first line may sit between the id and its status
    r"^(\\w+ \\([\\w.]+\\))(?:\\n[^\\n]*?)? \\.\\.\\. "
    r"(ok|FAIL|ERROR|skipped|expected failure|unexpected success)",
    re.M,
)
SYMPY = re.compile(r"^(_*test_\\w+) +(ok|F|E|f|s|w|X)\\s*$", re.M)
PASS = {"PASSED", "XFAIL", "ok", "expected failure", "f"}
status = {name: state for state, name in PYTEST.findall(output)}
status.update(DJANGO.findall(output))
status.update(SYMPY.findall(output))
if not status:
    print("grade: no test result in the output: the tests did not run", file=sys.stderr)
    sys.exit(2)
wanted = tests("FAIL_TO_PASS") + tests("PASS_TO_PASS")
failed = [name for name in wanted if status.get(name) not in PASS]
for name in failed:
    print(f"grade: {name}: {status.get(name, 'not run')}", file=sys.stderr)
with open(sys.argv[3], "w") as reward:
    reward.write("0\\n" if failed else "1\\n")
'''

# The test side of a repository: what SWE-bench's collection puts in a PR's test patch, never in
# its fix (a path naming test, tests, testing or e2e), as folders and file names; and a project's
# runner where it lives apart (SymPy's bin/test and its older runner module). test.sh puts it back
# as the image had it, but for the gold patch's own paths: a changed runner, settings module or
# test package's __init__ otherwise prints the passing lines (Django's tests/runtests.py,
# django/test/runner.py).
# (forge-sandbox's carry holds the same rule as a regex, `verify/_testside.TEST_SIDE`; both are
# checked against one list of paths in tools/tests/test_test_side_parity.py)
TEST_SIDE = ("**/test/**", "**/tests/**", "**/testing/**", "**/e2e/**", "**/__tests__/**",
             "**/__mocks__/**", "**/__snapshots__/**", "**/__fixtures__/**", "**/test_*.py",
             "**/*_test.py", "**/tests.py", "**/conftest.py", "**/*.test.*", "**/*.spec.*",
             "**/*_test.go", "**/tests.rs")  # fmt: skip
RUNNER_FILES = {"sympy/sympy": ("bin/test", "sympy/utilities/runtests.py",
                                "sympy/utilities/pytest.py")}  # fmt: skip
RESTORE_END = "FORGE_RESTORE_END"
_NO_CACHES = shlex.quote(":(exclude,glob)**/__pycache__/**")  # test.sh removes them all
SIDE_PY = """\
import os, re, shutil, sys

# a module file's name: its module, then a source or bytecode suffix, or an extension's with an
# optional tag (cpython-311-x86_64-linux-gnu, abi3)
MODULE = re.compile(r"([^.]+)(?:\\.(?:py|pyw|pyc|pyo)|(?:\\.[\\w-]+)?\\.(?:so|pyd))")


def side_rule(rule):
    \"\"\"(path -> bool): the path is on the test side or takes the place of a module there (a
    package, an extension or bytecode by a test module's name), the gold patch's paths never.\"\"\"
    pattern, gold = re.compile(rule["side"]), frozenset(rule["gold"])

    def on_side(rel):
        return rel not in gold and pattern.match(rel) is not None

    def shadows(rel):
        if on_side(rel):
            return True
        parts = rel.split("/")
        for end in range(1, len(parts)):  # a package in a module's place
            if on_side("/".join(parts[:end]) + ".py"):
                return True
        name = MODULE.fullmatch(parts[-1])
        return name is not None and on_side("/".join(parts[:-1] + [name.group(1) + ".py"]))

    return shadows
"""
RESTORE_PY = (
    """\
# forge-data import: the test side back as the image had it (Python 3.6+; argv: pristine, tree,
# the side's rule as JSON)
import json
"""
    + SIDE_PY
    + """
pristine, tree, shadows = sys.argv[1], sys.argv[2], side_rule(json.loads(sys.argv[3]))
listed, present_list = os.path.join(pristine, "side.list"), os.path.join(pristine, "tree.list")
if not (os.path.isfile(listed) and os.path.isfile(present_list)):
    sys.exit("forge-data import: expected the test side as of the task in %s (saved by the "
             "image build); found none; fix: build the image from this task's "
             "environment/Dockerfile: no reward (an infrastructure error, not a score)" % listed)


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def same(saved, path):
    if os.path.islink(saved) or os.path.islink(path) or not os.path.isfile(path):
        return os.path.islink(saved) and os.path.islink(path) and \\
            os.readlink(saved) == os.readlink(path)
    a, b = os.stat(saved), os.stat(path)
    if a.st_size != b.st_size or (a.st_mode & 0o111) != (b.st_mode & 0o111):  # a+rX'd
        return False
    with open(saved, "rb") as x, open(path, "rb") as y:
        return x.read() == y.read()


def nul_list(path):
    return [os.fsdecode(n) for n in open(path, "rb").read().split(b"\\0") if n]


# what the agent added there goes: a path the image lacked on the test side or in a test
# module's place (a package tests/app/tests/ beside tests/app/tests.py is imported instead), and
# every bytecode cache of the tree (one written for a test module with its source's size and
# time is run instead of the source put back)
present = frozenset(nul_list(present_list))
added = caches = 0
for root, folders, files in os.walk(tree):
    base = os.path.relpath(root, tree)
    base = "" if base == "." else base + "/"
    for folder in list(folders):
        path = os.path.join(root, folder)
        if folder == ".git" or base + folder in present or base + folder + "/" in present:
            # a submodule or a nested repository: not the tree's files
            folders.remove(folder)
        elif folder == "__pycache__" and not os.path.islink(path):
            shutil.rmtree(path)
            folders.remove(folder)
            caches += 1
        elif os.path.islink(path):
            folders.remove(folder)
            files.append(folder)
    for name in files:
        if name != ".git" and base + name not in present and shadows(base + name):
            os.unlink(os.path.join(root, name))
            added += 1

names = nul_list(listed)
put = 0
for rel in names:
    parts = rel.split("/")
    if rel.startswith("/") or ".." in parts:
        continue
    saved, path = os.path.join(pristine, "side", rel), os.path.join(tree, rel)
    if os.path.isdir(saved) and not os.path.islink(saved):
        continue  # a submodule: not a file of the tree
    parent = tree
    for part in parts[:-1]:  # each parent a real folder, never a link put in its place
        parent = os.path.join(parent, part)
        if os.path.islink(parent) or (os.path.lexists(parent) and not os.path.isdir(parent)):
            os.unlink(parent)
        if not os.path.lexists(parent):
            os.mkdir(parent)
    if not os.path.lexists(saved):  # tracked, yet not in the image: absent it stays
        if os.path.lexists(path):
            remove(path)
            put += 1
    elif not same(saved, path):
        remove(path)
        if os.path.islink(saved):
            os.symlink(os.readlink(saved), path)
        else:
            shutil.copy2(saved, path)
        put += 1
print("forge-data import: %d of %d test-side files put back as the task had them; %d added "
      "there removed; %d bytecode caches removed" % (put, len(names), added, caches),
      file=sys.stderr)
"""
)


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def published_image(kind: Kind, row: dict[str, Any]) -> str:
    """The image Harbor's adapter would build FROM, with the project's name mangling."""
    instance_id = str(row["instance_id"])
    if kind == "swebench":
        return f"swebench/sweb.eval.x86_64.{instance_id.lower().replace('__', '_1776_')}:latest"
    if kind == "swegym":
        return f"xingyaoww/sweb.eval.x86_64.{instance_id.lower().replace('__', '_s_')}:latest"
    name = row.get("image_name") or f"swesmith.x86_64.{str(row['repo']).split('/')[-1]}"
    if "/" not in name:
        name = f"jyangballin/{name}"
    return name.replace("__", "_1776_").lower()


def test_files(ids: list[str]) -> list[str] | None:
    """The files of pytest-style test ids, sorted; None when an id is not `path::name`."""
    files = set()
    for test_id in ids:
        path, sep, _name = test_id.partition("::")
        if not sep or not re.fullmatch(r"[\w./-]+", path):
            return None
        files.add(path)
    return sorted(files)


_HUNK_HEAD = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _unquoted(quoted: str) -> str:
    """A C-quoted git name decoded (C escapes; octal escapes are UTF-8 bytes)."""
    body = quoted.rstrip("\t")[1:].removesuffix('"')
    decoded: bytes = codecs.escape_decode(body.encode("utf-8"))[0]
    return decoded.decode("utf-8", "surrogateescape")


def _diff_name(header: str) -> str | None:
    """The path of a `--- a/x` / `+++ b/x` line; None for /dev/null. git ends a name holding
    a space with a tab and C-quotes one holding a quote, backslash, control or non-ASCII
    byte (forge-sandbox's `verify/_gold._name` reads them alike: tools/tests checks both)."""
    raw = header[4:]
    name = _unquoted(raw) if raw.startswith('"') else raw.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


_GIT_HEADER = "diff --git "


def _git_header_name(line: str) -> str | None:
    """The one name of a `diff --git a/x b/x` line whose two names are equal; None when they
    differ or are quoted (forge-sandbox's `verify/_gold` reads them alike)."""
    rest = line[len(_GIT_HEADER) :]
    half = (len(rest) - 1) // 2
    old, new = rest[:half], rest[half + 1 :]
    if len(rest) % 2 and old[:2] == "a/" and new[:2] == "b/" and old[2:] == new[2:]:
        return old[2:] or None
    return None


def _section_paths(lines: list[str], at: int) -> tuple[list[str], list[str], int]:
    """(pre-images, post-images) of the `diff --git` section at lines[at] when no `---`/`+++`
    pair names it (a pure rename or copy, a mode change, a binary file), and the index after
    its headers."""
    i = at + 1
    while i < len(lines) and not lines[i].startswith((_GIT_HEADER, "--- ")):
        i += 1
    if i < len(lines) and lines[i].startswith("--- "):
        return [], [], i
    heads = lines[at + 1 : i]

    def named(key: str) -> str | None:
        for line in heads:
            if line.startswith(key):
                raw = line[len(key) :]
                return _unquoted(raw) if raw.startswith('"') else raw
        return None

    target = named("rename to ") or named("copy to ")
    if target:
        source = named("rename from ")  # a copy's source is not changed
        return ([source] if source else []), [target], i
    name = _git_header_name(lines[at])
    if name is None:
        return [], [], i
    new = any(line.startswith("new file mode ") for line in heads)
    return ([] if new else [name]), [name], i


def patch_paths(patch: str) -> tuple[list[str], list[str]]:
    """(paths the patch changes that exist before it, every path it touches), in diff order.

    The adapters' rule (`--- a/` pre-images, `+++ b/` post-images; `/dev/null` skipped), read
    from each file's header pair: a hunk's lines are skipped by its counts (a removed line
    `-- x` reads `--- x`), a name with a space ends at git's tab, a quoted name is decoded. A
    section without the pair (a pure rename or copy, a mode change, a binary file) is read from
    its `diff --git` and `rename`/`copy` lines.
    """
    lines = patch.splitlines()
    before: list[str] = []
    after: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith(_GIT_HEADER):
            pre, post, i = _section_paths(lines, i)
            before += pre
            after += post
            continue
        head = _HUNK_HEAD.match(lines[i])
        if head:  # skip the hunk: its old and new line counts
            old, new = int(head.group(1) or 1), int(head.group(2) or 1)
            i += 1
            while i < len(lines) and (old > 0 or new > 0):
                mark = lines[i][:1]
                old -= mark in (" ", "-", "")
                new -= mark in (" ", "+", "")
                i += 1
            continue
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old_name, new_name = _diff_name(lines[i]), _diff_name(lines[i + 1])
            before += [old_name] if old_name else []
            after += [new_name] if new_name else []
            i += 2
            continue
        i += 1
    return list(dict.fromkeys(before)), list(dict.fromkeys(before + after))


def _quoted(paths: list[str]) -> str:
    return " ".join(shlex.quote(path) for path in paths)


def _test_patch_files(row: dict[str, Any]) -> list[str]:
    """The .py files the test patch leaves in place (post-images), in diff order."""
    after = re.findall(r"^\+\+\+ b/(\S+\.py)$", str(row.get("test_patch") or ""), re.M)
    return list(dict.fromkeys(after))


def test_command(row: dict[str, Any], tests: list[str]) -> str | None:
    """The command that runs the row's tests with its project's runner; None when it cannot
    select them (swebench 4.0.3's `test_cmd` and `get_test_directives`)."""
    repo = str(row.get("repo") or "").lower()
    if repo in ("django/django", "sympy/sympy"):
        files = [path for path in _test_patch_files(row) if re.fullmatch(r"[\w./-]+", path)]
        if not files:
            return None
        if repo == "sympy/sympy":
            warnings = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning'"
            return f"{warnings} bin/test -C --verbose {' '.join(files)}"
        modules = [
            path.removesuffix(".py").removeprefix("tests/").replace("/", ".") for path in files
        ]
        return "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 " + " ".join(
            modules
        )
    paths = test_files(tests)
    return None if paths is None else f"python -m pytest -rA {' '.join(paths)}"


def _patch_block(command: str, patch: str) -> str:
    text = patch if patch.endswith("\n") else patch + "\n"
    return f"{command} <<'{PATCH_END}'\n{text}{PATCH_END}\n"


def test_sh(kind: Kind, row: dict[str, Any], tests: list[str]) -> str:
    """tests/test.sh: the tests as of the task, run by the project's runner, then graded."""
    lines = ["#!/bin/bash", f"# Written by forge-data import {kind}: run and grade the tests.",
             "set -uo pipefail", "mkdir -p /logs/verifier", "cd /testbed || exit 2"]  # fmt: skip
    command = test_command(row, tests)
    if command is None:
        lines += [
            "echo 'forge-data import: the tests cannot be selected (pytest ids are path::name; "
            "Django and SymPy tests need the test patch's files); this test.sh cannot run them: "
            "no reward (an infrastructure error, not a score)' >&2",
            "exit 2",
        ]
        return "\n".join(lines) + "\n"
    lines.append(
        "source /opt/miniconda3/bin/activate && conda activate testbed || { echo 'forge-data "
        "import: no testbed conda env in the image: no reward (an infrastructure error, not a "
        "score)' >&2; exit 2; }"
    )
    lines.append(  # the interpreter that grades (CONDA_PYTHON_EXE: the base env's); -I: the
        # working tree (the current folder) is not on its sys.path, a shutil.py there not imported
        f'"${{CONDA_PYTHON_EXE:-python3}}" -I - {shlex.quote(PRISTINE)} /testbed '
        f"{shlex.quote(json.dumps(side_rule(kind, row)))} "
        f"<<'{RESTORE_END}' || exit 2\n{RESTORE_PY}{RESTORE_END}"
    )
    lines += restore_sh(pristine_paths(kind, row, tests)).splitlines()
    test_patch = str(row.get("test_patch") or "")
    if kind != "swesmith" and test_patch:  # the adapters' get_test_commands: then apply it
        lines.append(_patch_block("git apply -v -", test_patch).rstrip("\n"))
    lines += [
        'echo ">>>>> Start Test Output"',
        f"{command} 2>&1 | tee /logs/verifier/test-output.txt",
        'echo ">>>>> End Test Output"',
        # conda's base python grades: a testbed env may predate grade.py's Python (3.6+)
        '"${CONDA_PYTHON_EXE:-python3}" /tests/grade.py /logs/verifier/test-output.txt '
        "/tests/config.json /logs/verifier/reward.txt",
    ]
    return "\n".join(lines) + "\n"


def solve_sh(kind: Kind, row: dict[str, Any]) -> str:
    """solution/solve.sh: the gold patch applied in /testbed (SWE-smith: its bug reversed)."""
    command = "git apply -v -R -" if kind == "swesmith" else "git apply -v -"
    head = "#!/bin/bash\nset -euo pipefail\ncd /testbed\n"
    return head + _patch_block(command, str(row["patch"]))


def dockerfile(kind: Kind, row: dict[str, Any], tests: list[str]) -> str:
    """environment/Dockerfile: the published image, then its history cut (`cut_history_sh`, one
    RUN: each of its lines is a whole command, joined by `;` across continuation lines)."""
    lines = [f"FROM {published_image(kind, row)}", "WORKDIR /testbed"]
    if kind == "swesmith":  # the adapter's: the instance's branch holds the bug
        lines.append(f"RUN git fetch && git checkout {row['instance_id']}")
    lines.append(f"# forge-data import: test files as of the task to {PRISTINE}, history cut")
    lines.append("RUN " + "; \\\n    ".join(cut_history_sh(kind, row, tests).splitlines()))
    return "\n".join(lines) + "\n"


def pristine_paths(kind: Kind, row: dict[str, Any], tests: list[str]) -> list[str]:
    """The files test.sh resets to the task's start: every path the test patch touches
    (SWE-bench / SWE-Gym, as the adapters' get_test_commands), else the tests' files."""
    test_patch = str(row.get("test_patch") or "")
    if kind != "swesmith" and test_patch:
        return patch_paths(test_patch)[1]
    return test_files(tests) or _test_patch_files(row)


def side_pathspecs(kind: Kind, row: dict[str, Any]) -> list[str]:
    """git pathspecs of the test side that test.sh puts back (TEST_SIDE, the project's runner
    files), less every path the gold patch touches (SWE-smith: its bug patch): the oracle's
    changes are the task's answer, whatever their names."""
    repo = str(row.get("repo") or "").lower()
    gold = patch_paths(str(row.get("patch") or ""))[1]
    return ([f":(glob){glob}" for glob in TEST_SIDE]
            + [f":(literal){path}" for path in RUNNER_FILES.get(repo, ())]
            + [f":(exclude,literal){path}" for path in gold])  # fmt: skip


def _glob_regex(glob: str) -> str:
    """A git `:(glob)` pathspec as a regex over a whole path: `**/` any folders (none
    included), a trailing `/**` everything inside, `*` and `?` within one name."""
    out, rest = [], glob
    while rest:
        if rest.startswith("**/"):
            out.append("(?:.*/)?")
            rest = rest[3:]
        elif rest == "/**":
            out.append("/.*")
            rest = ""
        elif rest[0] == "*":
            out.append("[^/]*")
            rest = rest[1:]
        elif rest[0] == "?":
            out.append("[^/]")
            rest = rest[1:]
        else:
            out.append(re.escape(rest[0]))
            rest = rest[1:]
    return "".join(out)


def side_rule(kind: Kind, row: dict[str, Any]) -> dict[str, Any]:
    """The test side as test.sh's restore reads it (`SIDE_PY`): `side`, a regex of the paths
    `side_pathspecs` names, `gold`, the gold patch's paths (never the side's)."""
    del kind  # one rule for every kind: the row's repository names its runner files
    repo = str(row.get("repo") or "").lower()
    alternatives = [_glob_regex(glob) for glob in TEST_SIDE]
    alternatives += [re.escape(path) for path in RUNNER_FILES.get(repo, ())]
    gold = patch_paths(str(row.get("patch") or ""))[1]
    return {"side": "(?s)(?:" + "|".join(alternatives) + r")\Z", "gold": gold}


def _fail(expected: str, found: str, fix: str) -> str:
    """A shell group that explains the failure on stderr and fails the image build."""
    message = f"forge-data import: expected {expected}; found {found}; fix: {fix}"
    return f'{{ echo "{message}" >&2; exit 1; }}'


def _start(kind: Kind, row: dict[str, Any]) -> list[str]:
    """Lines setting $source (the commit the test files come from) and $branch, checked."""
    if kind == "swesmith":  # the instance branch's parent holds the tests (and the clean code)
        check = _fail(
            "the row's instance branch checked out, its parent (HEAD~1) holding the tests",
            "no HEAD~1",
            "check out the instance branch (git checkout INSTANCE_ID) before this step",
        )
        return [
            "source=$(git rev-parse -q --verify 'HEAD~1^{commit}' || true)",
            f'[ -n "$source" ] || {check}',
            "branch=main",  # the instance branch's own name names the kind of bug
        ]
    base = str(row["base_commit"])
    check = _fail(
        f"$(pwd) checked out at base_commit {base}",
        "HEAD ${head:-missing}",
        "build FROM the image published for this row (its repository sits at base_commit)",
    )
    return [
        f"source={shlex.quote(base)}",
        "head=$(git rev-parse -q --verify 'HEAD^{commit}' || true)",
        f'[ "$head" = "$source" ] || {check}',
        "branch=$(git symbolic-ref -q --short HEAD || echo main)",
    ]


def cut_history_sh(kind: Kind, row: dict[str, Any], tests: list[str]) -> str:
    """POSIX sh, run as root in /testbed when the image is built, one whole command a line.

    Keeps the test files as of the task under PRISTINE (`tree/<path>`; `absent` lists those it
    lacked), then leaves one root commit of HEAD's tree (fixed identity and date: one tree, one
    commit id), no other ref, reflog, remote, leftover state file or object. The working tree
    and the index stay as they are (the root commit's tree is HEAD's: `git status` is unchanged).
    """
    paths, side = pristine_paths(kind, row, tests), side_pathspecs(kind, row)
    save = (  # through a scratch index: the repository's own index is never touched
        f'for path in {_quoted(paths)}; do if git cat-file -e "$source:$path" 2>/dev/null; '
        'then GIT_INDEX_FILE="$pristine/index" git --work-tree="$pristine/tree" checkout -q '
        '"$source" -- "$path"; else printf \'%s\\n\' "$path" >>"$pristine/absent"; fi; done'
    )
    not_cut = _fail(
        "1 commit, 1 ref and no unreachable object once the history is cut",
        "$commits commits, $refs refs, unreachable: ${left:-none}",
        "report it: this repository keeps objects the cut does not reach",
    )
    lines = [
        "set -eu",
        "git rev-parse --is-inside-work-tree >/dev/null 2>&1 || "
        + _fail("a git repository in $(pwd)", "none", "build FROM the row's published image"),
        "gitdir=$(git rev-parse --absolute-git-dir)",
        *_start(kind, row),
        # 1. the test files as of the task, outside the repository
        f"pristine={shlex.quote(PRISTINE)}",
        'rm -rf "$pristine"; mkdir -p "$pristine/tree"; : >"$pristine/absent"',
        *([save] if paths else []),
        # the test side as the image has it (install steps' edits included), for test.sh
        # (every path of the tree too: test.sh removes what the agent adds on the test side)
        f'git ls-files -z --cached --others -- {_NO_CACHES} >"$pristine/tree.list"',
        f'mkdir "$pristine/side"; git ls-files -z --cached --others -- {_quoted(side)} '
        f'{_NO_CACHES} >"$pristine/side.list"',
        "tar --null --verbatim-files-from --no-unquote --no-recursion --ignore-failed-read "
        '-T "$pristine/side.list" -cf - | tar -xpf - -C "$pristine/side"',
        'rm -f "$pristine/index"; chmod -R a+rX "$pristine"',
        # 2. one root commit of HEAD's tree; every ref, reflog, remote and leftover gone
        f"commit=$({_FIXED_IDENTITY} git -c commit.gpgSign=false commit-tree -m 'Start of the "
        "task (earlier history removed)' \"$(git rev-parse 'HEAD^{tree}')\")",
        "git for-each-ref --format='delete %(refname)' | git update-ref --no-deref --stdin",
        'git remote | while IFS= read -r name; do git config --remove-section "remote.$name"; done',
        "git config --name-only --get-regexp '^branch\\.' | sed 's/\\.[^.]*$//' | sort -u | "
        'while IFS= read -r section; do git config --remove-section "$section"; done',
        "git reflog expire --expire=now --expire-unreachable=now --all",
        "rm -rf -- " + " ".join(f'"$gitdir"/{name}' for name in _GIT_LEFTOVERS.split()),
        'git -c core.logAllRefUpdates=false update-ref "refs/heads/$branch" "$commit"',
        'git -c core.logAllRefUpdates=false symbolic-ref HEAD "refs/heads/$branch"',
        # 3. every object that neither the commit nor the index needs, pruned
        'rm -f -- "$gitdir"/objects/pack/*.keep',
        "git repack -a -d -f -q",  # without -l: objects borrowed through alternates come in
        'rm -f -- "$gitdir/objects/info/alternates" "$gitdir/objects/info/http-alternates"',
        "git prune --expire=now",
        "git gc -q --prune=now",
        # 4. measured: one commit object, one ref, nothing unreachable
        "commits=$(git cat-file --batch-all-objects --batch-check='%(objecttype)' "
        "| grep -c '^commit$' || true)",
        "refs=$(git for-each-ref | wc -l)",
        "left=$(git fsck --connectivity-only --unreachable --no-reflogs --no-progress "
        "2>/dev/null) || left='git fsck failed'",
        f'[ "$commits" -eq 1 ] && [ "$refs" -eq 1 ] && [ -z "$left" ] || {not_cut}',
    ]
    return "\n".join(lines) + "\n"


def restore_sh(paths: list[str]) -> str:
    """test.sh's reset (bash, in /testbed): each path back as of the task from PRISTINE, or
    removed where the task's start lacked it. No saved copies: exit 2, no reward (not a 0)."""
    if not paths:
        return ""
    rebuild = "build the image from this task's environment/Dockerfile: no reward (an "
    rebuild += "infrastructure error, not a score)"
    return "\n".join([
        f"pristine={shlex.quote(PRISTINE)}",
        '[ -f "$pristine/absent" ] || { echo "forge-data import: expected the test files as of '
        f'the task in $pristine (saved by the image build); found none; fix: {rebuild}" >&2; '
        "exit 2; }",
        f'for path in {_quoted(paths)}; do rm -rf -- "$path"; if [ -e "$pristine/tree/$path" ] '
        '|| [ -L "$pristine/tree/$path" ]; then mkdir -p -- "$(dirname -- "$path")" && cp -a -- '
        '"$pristine/tree/$path" "$path" || exit 2; elif ! grep -qxF -- "$path" '
        '"$pristine/absent"; then echo "forge-data import: expected $path saved or recorded '
        f'absent in $pristine; found neither; fix: {rebuild}" >&2; exit 2; fi; done',
    ]) + "\n"  # fmt: skip


def task_toml(kind: Kind, row: dict[str, Any], repository: str) -> str:
    benchmark = {"swebench": "SWE-bench", "swesmith": "SWE-smith", "swegym": "SWE-Gym"}[kind]
    return TASK_TOML.format(
        benchmark=_toml_str(benchmark),
        instance_id=_toml_str(str(row["instance_id"])),
        repository=_toml_str(repository),
        difficulty=_toml_str(str(row.get("difficulty") or "hard")),
        tags=json.dumps(["debugging", "swe-bench"] + (["swe-smith"] if kind == "swesmith" else [])),
        kind=kind,
    )


def instruction_md(row: dict[str, Any]) -> str:
    text = str(row.get("problem_statement") or "").strip()
    return text + "\n"
