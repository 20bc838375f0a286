"""The imported tasks' images cut git history at the task's start: the Dockerfile's cut step
(`cut_history_sh`) run for real with git and sh on throwaway repositories shaped like the
published images (SWE-bench: later commits still reachable; SWE-smith: the clean code in the
instance branch's parent), then test.sh's reset from the saved copies, as the verifier runs it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

import forge_data as fd
from forge_data.importers._layout import (
    PRISTINE,
    pristine_paths,
    restore_sh,
    side_pathspecs,
)

GIT = "/usr/bin/git"
BASE_TEST = "old = 1\n"
FIX_CODE = "def name():\n    return 'fixed: 5b0c7e1d'\n"  # unique: only the fix commit has it
TEST_PATCH = (
    "diff --git a/tests/test_app.py b/tests/test_app.py\n"
    "--- a/tests/test_app.py\n+++ b/tests/test_app.py\n@@ -1 +1,2 @@\n old = 1\n+new = 2\n"
    "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/tests/test_new.py\n@@ -0,0 +1 @@\n+added = 3\n"
)
SWE_BENCH_ROW = {
    "repo": "pallets/flask",
    "instance_id": "pallets__flask-5014",
    "patch": "diff --git a/src/app.py b/src/app.py\n",
    "test_patch": TEST_PATCH,
    "FAIL_TO_PASS": ["tests/test_app.py::test_name"],
    "PASS_TO_PASS": [],
}
INSTANCE = "owner__proj.3d1bf184.func_pm_remove_cond__x1"
CLEAN_CODE = "def name():\n    return 'clean: 9e4a2f60'\n"  # unique: only the clean commit
SWE_SMITH_ROW = {
    "instance_id": INSTANCE,
    "repo": "swesmith/owner__proj.3d1bf184",
    "patch": "diff --git a/src/app.py b/src/app.py\n",
    "FAIL_TO_PASS": ["tests/test_app.py::test_name"],
    "PASS_TO_PASS": [],
}


def _env(tmp_path: Path, date: str = "@1700000000 +0000") -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
            "LC_ALL": "C", "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}  # fmt: skip


def _git(repo: Path, env: dict[str, str], *args: str) -> str:
    command = [GIT, "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args]
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    assert run.returncode == 0, f"git {' '.join(args)}: {run.stderr}"
    return run.stdout


def _write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)


def _commit(repo: Path, env: dict[str, str], message: str, files: dict[str, str]) -> str:
    _write(repo, files)
    _git(repo, env, "add", "-A")
    _git(repo, env, "commit", "-qm", message)
    return _git(repo, env, "rev-parse", "HEAD").strip()


def _swe_bench_image(tmp_path: Path, *, shared: bool, date: str) -> tuple[Path, dict[str, str]]:
    """/testbed as a SWE-bench image leaves it: cloned, reset to base_commit, the fix still in
    the object store (tag, remote branch, reflog, stash, a second branch, a note), packed; an
    install step's edit, a staged file and an untracked one in the working tree. Returns the
    repository and the ids the agent must not reach (`fix_blob`, commits) with `base`."""
    env = _env(tmp_path, date)
    upstream = tmp_path / "upstream"
    _git(tmp_path, env, "init", "-q", "-b", "main", str(upstream))
    files = {"src/app.py": "def name():\n    return ''\n", "tests/test_app.py": BASE_TEST}
    base = _commit(upstream, env, "base", {**files, "setup.cfg": "[metadata]\n"})
    fix = _commit(upstream, env, "fix", {"src/app.py": FIX_CODE, "tests/test_new.py": "x\n"})
    _git(upstream, env, "tag", "-a", "v2", "-m", "release with the fix")
    _git(upstream, env, "gc", "-q")  # the fix in a pack, refs in packed-refs
    repo = tmp_path / "testbed"
    _git(tmp_path, env, "clone", "-q", *(["--shared"] if shared else []), str(upstream), str(repo))
    _git(repo, env, "reset", "-q", "--hard", base)  # swebench's setup_repo: fix in the reflog
    _git(repo, env, "checkout", "-q", "-b", "feature", fix)
    feature = _commit(repo, env, "feature", {"src/extra.py": "later = 1\n"})
    _git(repo, env, "checkout", "-q", "main")
    _git(repo, env, "notes", "add", "-m", "note on the fix", fix)
    _write(repo, {"src/app.py": FIX_CODE})
    _git(repo, env, "stash", "-q")  # refs/stash keeps a tree holding the fix blob
    _git(repo, env, "fetch", "-q", "origin")  # FETCH_HEAD names the fix
    _write(repo, {"setup.cfg": "[metadata]\nedited = by install\n", "build/x.so": "binary\n"})
    _write(repo, {"staged.txt": "staged\n"})
    _git(repo, env, "add", "staged.txt")
    ids = {
        "base": base,
        "fix": fix,
        "feature": feature,
        "fix_blob": _git(upstream, env, "rev-parse", f"{fix}:src/app.py").strip(),
    }
    return repo, ids


def _swe_smith_image(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """/testbed as SWE-smith's Dockerfile leaves it: the instance branch checked out, its parent
    the clean code and the tests, its commit the bug with the failing tests' file removed."""
    env = _env(tmp_path)
    repo = tmp_path / "testbed"
    _git(tmp_path, env, "init", "-q", "-b", "main", str(repo))
    clean = _commit(repo, env, "clean", {"src/app.py": CLEAN_CODE, "tests/test_app.py": BASE_TEST})
    _git(repo, env, "remote", "add", "origin", "https://github.com/swesmith/owner__proj")
    _git(repo, env, "update-ref", "refs/remotes/origin/main", clean)
    _git(repo, env, "checkout", "-q", "-b", "other_instance")
    other = _commit(repo, env, "other bug", {"src/app.py": "other bug\n"})
    _git(repo, env, "checkout", "-q", "-b", INSTANCE, clean)
    (repo / "tests" / "test_app.py").unlink()
    bug = _commit(repo, env, "bug", {"src/app.py": "def name():\n    return None\n"})
    ids = {"clean": clean, "other": other, "bug": bug}
    ids["clean_blob"] = _git(repo, env, "rev-parse", f"{clean}:src/app.py").strip()
    return repo, ids


def _cut_step(kind: str, row: dict, pristine: Path) -> str:
    """The Dockerfile's cut RUN as Docker hands it to /bin/sh (continuation lines joined)."""
    text = fd.task_files(kind, row)["environment/Dockerfile"][0]  # type: ignore[arg-type]
    runs = [line[4:] for line in text.replace("\\\n", "").splitlines() if line.startswith("RUN ")]
    assert runs[-1].startswith("set -eu;"), text
    return runs[-1].replace(PRISTINE, shlex.quote(str(pristine)))


def _sh(repo: Path, env: dict[str, str], script: str, shell: str = "/bin/sh"):
    return subprocess.run([shell, "-c", script], cwd=repo, env=env, capture_output=True, text=True)


def _worktree(repo: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }


def _leaks(repo: Path, env: dict[str, str], hidden: list[str]) -> list[str]:
    """Everything in .git that keeps history the agent must not see (empty: cut)."""
    objects = _git(repo, env, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    found = [f"object {oid}" for oid in hidden if oid in objects.split()]
    if len(lines := _git(repo, env, "log", "--all", "--oneline").splitlines()) != 1:
        found.append(f"{len(lines)} commits in git log --all")
    for what in ("reflog", "stash list", "remote", "fsck --unreachable --no-reflogs"):
        if out := _git(repo, env, *what.split()).strip():
            found.append(f"git {what}: {out[:200]}")
    if len(refs := _git(repo, env, "for-each-ref", "--format=%(refname)").split()) != 1:
        found.append(f"refs {refs}")
    gitdir = repo / ".git"
    for name in ("ORIG_HEAD", "FETCH_HEAD", "objects/info/alternates", "shallow", "logs"):
        if (gitdir / name).exists():
            found.append(f".git/{name}")
    return found


@pytest.mark.parametrize("shared", [False, True], ids=["clone", "clone --shared"])
def test_swe_bench_image_keeps_one_commit_and_nothing_of_the_fix(
    tmp_path: Path, shared: bool
) -> None:
    repo, ids = _swe_bench_image(tmp_path, shared=shared, date="@1700000000 +0000")
    env = _env(tmp_path)
    hidden = [ids["fix"], ids["feature"], ids["fix_blob"], ids["base"]]
    assert len(_leaks(repo, env, hidden)) >= 8  # the check sees every leak of an uncut image
    base_tree = _git(repo, env, "rev-parse", f"{ids['base']}^{{tree}}")
    status, worktree = _git(repo, env, "status", "--porcelain"), _worktree(repo)
    pristine = tmp_path / "pristine"
    row = dict(SWE_BENCH_ROW, base_commit=ids["base"])
    run = _sh(repo, env, _cut_step("swebench", row, pristine))
    assert run.returncode == 0, run.stderr
    if shared:  # the objects borrowed from the clone's source came in: it can go
        (tmp_path / "upstream").rename(tmp_path / "gone")
    assert _leaks(repo, env, hidden) == []
    assert _git(repo, env, "for-each-ref", "--format=%(refname)") == "refs/heads/main\n"
    assert _git(repo, env, "rev-parse", "HEAD^{tree}") == base_tree
    assert _git(repo, env, "status", "--porcelain") == status and _worktree(repo) == worktree
    config = (repo / ".git" / "config").read_text()
    assert "[remote" not in config and "[branch" not in config, config
    _git(repo, env, "fsck", "--full", "--strict")
    assert (pristine / "tree/tests/test_app.py").read_text() == BASE_TEST
    assert (pristine / "absent").read_text() == "tests/test_new.py\n"  # not at base


def test_the_cut_commit_is_the_same_for_the_same_tree(tmp_path: Path) -> None:
    heads = []
    for date in ("@1700000000 +0000", "@1800000000 +0000"):  # other base ids, one tree
        root = tmp_path / date[1:5]
        root.mkdir()
        repo, ids = _swe_bench_image(root, shared=False, date=date)
        row = dict(SWE_BENCH_ROW, base_commit=ids["base"])
        run = _sh(repo, _env(root), _cut_step("swebench", row, root / "pristine"))
        assert run.returncode == 0, run.stderr
        heads.append((ids["base"], _git(repo, _env(root), "rev-parse", "HEAD")))
    assert heads[0][0] != heads[1][0] and heads[0][1] == heads[1][1]


def test_an_image_not_at_base_commit_fails_the_build_untouched(tmp_path: Path) -> None:
    repo, ids = _swe_bench_image(tmp_path, shared=False, date="@1700000000 +0000")
    env = _env(tmp_path)
    _git(repo, env, "checkout", "-q", "feature")
    row = dict(SWE_BENCH_ROW, base_commit=ids["base"])
    run = _sh(repo, env, _cut_step("swebench", row, tmp_path / "pristine"))
    assert run.returncode == 1
    assert f"expected {repo} checked out at base_commit {ids['base']}; found HEAD" in run.stderr
    assert "fix: build FROM the image published for this row" in run.stderr
    assert ids["fix"] in _git(repo, env, "log", "--all", "--format=%H")  # nothing cut


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
def test_swe_smith_image_keeps_neither_the_clean_code_nor_the_instance_branch(
    tmp_path: Path, shell: str
) -> None:
    repo, ids = _swe_smith_image(tmp_path)
    env = _env(tmp_path)
    hidden = [ids["clean"], ids["other"], ids["bug"], ids["clean_blob"]]
    assert _leaks(repo, env, hidden) != []
    status, worktree = _git(repo, env, "status", "--porcelain"), _worktree(repo)
    run = _sh(repo, env, _cut_step("swesmith", SWE_SMITH_ROW, tmp_path / "pristine"), shell)
    assert run.returncode == 0, run.stderr
    assert _leaks(repo, env, hidden) == []
    # the instance branch's name names the kind of bug: the one branch left is main
    assert _git(repo, env, "for-each-ref", "--format=%(refname)") == "refs/heads/main\n"
    assert _git(repo, env, "status", "--porcelain") == status and _worktree(repo) == worktree
    assert (tmp_path / "pristine/tree/tests/test_app.py").read_text() == BASE_TEST
    assert (tmp_path / "pristine/absent").read_text() == ""


def _verifier_setup(kind: str, row: dict, pristine: Path, repo: Path) -> str:
    """test.sh up to the test run, pointed at the scratch paths, the conda step left out."""
    script = fd.task_files(kind, row)["tests/test.sh"][0]  # type: ignore[arg-type]
    setup = script.split('echo ">>>>> Start Test Output"')[0]
    setup = setup.replace("/testbed", str(repo)).replace(PRISTINE, shlex.quote(str(pristine)))
    return "\n".join(line for line in setup.splitlines() if "conda" not in line)


def test_test_sh_resets_the_test_files_from_the_saved_copies(tmp_path: Path) -> None:
    repo, ids = _swe_bench_image(tmp_path, shared=False, date="@1700000000 +0000")
    env, pristine = _env(tmp_path), tmp_path / "pristine"
    row = dict(SWE_BENCH_ROW, base_commit=ids["base"])
    assert _sh(repo, env, _cut_step("swebench", row, pristine)).returncode == 0
    # the agent edits the tests and adds (and stages) a file the task's start did not have
    _write(repo, {"tests/test_app.py": "assert True  # agent\n", "tests/test_new.py": "mine\n"})
    _git(repo, env, "add", "tests/test_new.py")
    restore = restore_sh(pristine_paths("swebench", row, []))
    run = _sh(repo, env, restore.replace(PRISTINE, shlex.quote(str(pristine))), "/bin/bash")
    assert run.returncode == 0, run.stderr
    assert (repo / "tests/test_app.py").read_text() == BASE_TEST
    assert not (repo / "tests/test_new.py").exists()  # absent at base: removed
    _write(repo, {"tests/test_app.py": "agent again\n", "tests/test_new.py": "mine\n"})
    run = _sh(repo, env, _verifier_setup("swebench", row, pristine, repo), "/bin/bash")
    assert run.returncode == 0, run.stderr  # then the test patch applies, as the adapters'
    assert (repo / "tests/test_app.py").read_text() == BASE_TEST + "new = 2\n"
    assert (repo / "tests/test_new.py").read_text() == "added = 3\n"


def test_swe_smith_test_sh_brings_back_the_hidden_tests(tmp_path: Path) -> None:
    repo, _ids = _swe_smith_image(tmp_path)
    env, pristine = _env(tmp_path), tmp_path / "pristine"
    assert _sh(repo, env, _cut_step("swesmith", SWE_SMITH_ROW, pristine)).returncode == 0
    assert not (repo / "tests/test_app.py").exists()
    run = _sh(repo, env, _verifier_setup("swesmith", SWE_SMITH_ROW, pristine, repo), "/bin/bash")
    assert run.returncode == 0, run.stderr
    assert (repo / "tests/test_app.py").read_text() == BASE_TEST


def test_test_sh_without_saved_copies_gives_no_reward_not_a_zero(tmp_path: Path) -> None:
    repo, ids = _swe_bench_image(tmp_path, shared=False, date="@1700000000 +0000")
    row = dict(SWE_BENCH_ROW, base_commit=ids["base"])
    setup = _verifier_setup("swebench", row, tmp_path / "never-built", repo)
    run = _sh(repo, _env(tmp_path), setup, "/bin/bash")
    assert run.returncode == 2
    assert "expected the test side as of the task in" in run.stderr
    assert "fix: build the image from this task's environment/Dockerfile" in run.stderr
    # an image built before the test side was saved: rebuilt, not run without the reset
    pristine = tmp_path / "older"
    assert _sh(repo, _env(tmp_path), _cut_step("swebench", row, pristine)).returncode == 0
    for saved in ("side.list", "tree.list"):  # before the reset removed what the agent added
        (pristine / saved).rename(pristine / "held")
        setup = _verifier_setup("swebench", row, pristine, repo)
        run = _sh(repo, _env(tmp_path), setup, "/bin/bash")
        assert run.returncode == 2 and "expected the test side as of the task in" in run.stderr
        (pristine / "held").rename(pristine / saved)
    run = _sh(repo, _env(tmp_path), _verifier_setup("swebench", row, pristine, repo), "/bin/bash")
    assert run.returncode == 0, run.stderr


def test_every_kind_of_dockerfile_cuts_the_history_last() -> None:
    rows = {"swebench": dict(SWE_BENCH_ROW, base_commit="0" * 40), "swesmith": SWE_SMITH_ROW}
    rows["swegym"] = rows["swebench"]
    for kind, row in rows.items():
        text = fd.task_files(kind, row)["environment/Dockerfile"][0]  # type: ignore[arg-type]
        steps = [line.split()[0] for line in text.replace("\\\n", "").splitlines()]
        assert steps[:2] == ["FROM", "WORKDIR"] and steps[-2:] == ["#", "RUN"], text
        assert text.count("RUN set -eu; \\\n") == 1 and "git gc -q --prune=now" in text


# -- the test side stays the task's: a Django-shaped image, its runner and its test packages ----

RUNNER = """\
import importlib
import unittest


def run(labels):
    failed = 0
    for label in labels:
        module = importlib.import_module(label)
        for cname in sorted(vars(module)):
            cls = getattr(module, cname)
            if isinstance(cls, type) and issubclass(cls, unittest.TestCase):
                for name in sorted(n for n in dir(cls) if n.startswith("test")):
                    result = unittest.TestResult()
                    cls(name).run(result)
                    ok = result.wasSuccessful() and result.testsRun == 1
                    failed += not ok
                    print(f"{name} ({label}.{cname}) ... {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0
"""
RUNTESTS = """\
#!/usr/bin/env python3
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(here), here]
from django.test.runner import run

sys.exit(run([a for a in sys.argv[1:] if "." in a and not a.startswith("-")]))
"""
DJANGO_TESTS = "import unittest\n\nfrom django.db.x import value\n\n\nclass T(unittest.TestCase):\n"
DJANGO_TESTS += "    def test_y(self):\n        self.assertEqual(1, 1)\n"
FORGED = "print('test_x (app.tests.T) ... ok')\nprint('test_y (app.tests.T) ... ok')\n"


def _diff(path: str, old: str, new: str) -> str:
    minus = "".join(f"-{line}\n" for line in old.splitlines())
    plus = "".join(f"+{line}\n" for line in new.splitlines())
    head = f"@@ -1,{len(old.splitlines())} +1,{len(new.splitlines())} @@\n"
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{head}{minus}{plus}"


DJANGO_ROW = {
    "repo": "django/django",
    "instance_id": "django__django-99999",
    # the fix changes the module's size: a NOP run in the same second as the image's write left
    # bytecode that Python's mtime+size check would take for a same-size source (CI saw it)
    "patch": _diff(
        "django/db/x.py", "def value():\n    return 1\n", "def value():\n    return 1 + 1\n"
    )
    + _diff("django/test/utils.py", "HELPER = 1\n", "HELPER = 2\n")  # gold touches the test side
    + "diff --git a/django/test/added.py b/django/test/added.py\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/django/test/added.py\n@@ -0,0 +1 @@\n+ADDED = 1\n",  # and adds to it
    "test_patch": _diff(
        "tests/app/tests.py",
        DJANGO_TESTS,
        DJANGO_TESTS + "\n    def test_x(self):\n        self.assertEqual(value(), 2)\n",
    ),
    "FAIL_TO_PASS": ["test_x (app.tests.T)"],
    "PASS_TO_PASS": ["test_y (app.tests.T)"],
}
ATTACKS_ON_THE_TEST_SIDE = {  # each printed the passing lines (reward 1) before test.sh's reset
    "the runner script": {"tests/runtests.py": f"#!/usr/bin/env python3\n{FORGED}"},
    "the project's runner module": {
        "django/test/runner.py": f"def run(labels):\n    exec({FORGED!r})\n    return 0\n"
    },
    "a test package's __init__": {
        "tests/app/__init__.py": "import unittest\n\n\ndef _run(self, result=None):\n"
        "    result.startTest(self)\n    result.stopTest(self)\n\n\nunittest.TestCase.run = _run\n"
    },
    "the runner as a link, the settings as a folder": {
        "tests/runtests.py": "-> forged.py",
        "tests/test_sqlite.py/x": "a folder in a module's place\n",
    },
    "the runner's folder as a link": {"django/test": "-> ../forged_test"},
    # the reset's own Python must not import the working tree's modules (it runs in /testbed)
    "the reset's shutil in the working tree": {
        "shutil.py": "import sys\n\nsys.exit(0)\n",
        "tests/runtests.py": f"#!/usr/bin/env python3\n{FORGED}",
    },
    # a new package by the test module's name is imported instead of tests/app/tests.py (the
    # reset put back only the files the image had; this one it lacked)
    "a package in the test module's place": {
        "tests/app/tests/__init__.py": "import unittest\n\n\nclass T(unittest.TestCase):\n"
        "    def test_x(self):\n        pass\n\n    def test_y(self):\n        pass\n",
        "tests/app/built.txt": "an artefact of the image's install step, changed\n",
    },
}
BUILT = "an artefact of the image's install step (untracked)\n"


def _django_image(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """/testbed as a Django image leaves it (an install step edited the settings module after
    checkout), cut by the Dockerfile's step; returns the repository, its saved copies, env."""
    env, repo, pristine = _env(tmp_path), tmp_path / "testbed", tmp_path / "pristine"
    _git(tmp_path, env, "init", "-q", "-b", "main", str(repo))
    files = {"django/__init__.py": "", "django/db/__init__.py": "", "django/test/__init__.py": "",
             "django/db/x.py": "def value():\n    return 1\n", "django/test/runner.py": RUNNER,
             "django/test/utils.py": "HELPER = 1\n", "tests/runtests.py": RUNTESTS,
             "tests/test_sqlite.py": "SETTINGS = 'committed'\n", "tests/app/__init__.py": "",
             "tests/app/tests.py": DJANGO_TESTS}  # fmt: skip
    _write(repo, files)
    (repo / "tests/runtests.py").chmod(0o755)
    base = _commit(repo, env, "base", {})
    _write(repo, {"tests/test_sqlite.py": "SETTINGS = 'installed'\n", "tests/app/built.txt": BUILT})
    row = dict(DJANGO_ROW, base_commit=base)
    run = _sh(repo, env, _cut_step("swebench", row, pristine))
    assert run.returncode == 0, run.stderr
    return repo, pristine, env


def _test_sh_run(kind: str, row: dict, repo: Path, pristine: Path, env: dict, reset: bool) -> str:
    """The whole test.sh against the scratch tree (conda left out); the reward it wrote. With
    `reset=False` the test side's reset is cut out: what a change scored before it."""
    files = fd.task_files(kind, row)  # type: ignore[arg-type]
    script = files["tests/test.sh"][0]
    if not reset:
        head, _, rest = script.partition('"${CONDA_PYTHON_EXE:-python3}" -I - ')
        script = head + rest.partition("\nFORGE_RESTORE_END\n")[2]
    logs, tests = repo.parent / "logs", repo.parent / "task-tests"
    tests.mkdir(exist_ok=True)
    for name in ("grade.py", "config.json"):
        (tests / name).write_text(files[f"tests/{name}"][0])
    script = script.replace("/logs/verifier", str(logs))
    for name in ("grade.py", "config.json"):
        script = script.replace(f"/tests/{name}", str(tests / name))
    script = script.replace("/testbed", str(repo)).replace(PRISTINE, shlex.quote(str(pristine)))
    script = "\n".join(line for line in script.splitlines() if "conda" not in line)
    run = _sh(repo, env, script, "/bin/bash")
    reward = logs / "reward.txt"
    assert reward.exists(), run.stdout + run.stderr
    return reward.read_text().strip()


def _change(repo: Path, files: dict[str, str]) -> None:
    """The agent's change as the carry leaves it in the fresh tree ('-> target': a link)."""
    for rel, text in files.items():
        path = repo / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.parent.is_file():
            path.parent.unlink()
        elif path.is_file() or path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("-> "):
            path.symlink_to(text[3:])
        else:
            path.write_text(text)
            path.chmod(0o755 if text.startswith("#!") else 0o644)
    forged = repo / "forged_test"  # where the folder link points: a forged runner module
    forged.mkdir(exist_ok=True)
    (forged / "__init__.py").write_text("")
    (forged / "runner.py").write_text(f"def run(labels):\n    exec({FORGED!r})\n    return 0\n")
    (repo / "tests" / "forged.py").write_text(f"#!/usr/bin/env python3\n{FORGED}")
    (repo / "tests" / "forged.py").chmod(0o755)


def _fresh(image: tuple[Path, Path, dict[str, str]], where: Path) -> tuple[Path, Path]:
    repo, pristine = image[0], image[1]
    shutil.copytree(repo, where / "testbed", symlinks=True)
    shutil.copytree(pristine, where / "pristine", symlinks=True)
    return where / "testbed", where / "pristine"


@pytest.fixture(scope="module")
def django_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    return _django_image(tmp_path_factory.mktemp("django-image"))


@pytest.mark.parametrize("attack", sorted(ATTACKS_ON_THE_TEST_SIDE))
def test_a_change_to_the_test_side_scored_1_before_and_0_now(
    django_image, tmp_path: Path, attack: str
) -> None:
    env = django_image[2]
    row = dict(DJANGO_ROW, base_commit="0" * 40)
    for reset, expected in ((False, "1"), (True, "0")):
        where = tmp_path / str(reset)
        where.mkdir()
        repo, pristine = _fresh(django_image, where)
        _change(repo, ATTACKS_ON_THE_TEST_SIDE[attack])
        assert _test_sh_run("swebench", row, repo, pristine, env, reset) == expected, reset
    # the task's test side is back: as the image had it (the install step's edit included)
    assert (repo / "tests/runtests.py").read_text() == RUNTESTS
    assert os.access(repo / "tests/runtests.py", os.X_OK)
    assert (repo / "tests/test_sqlite.py").read_text() == "SETTINGS = 'installed'\n"
    assert (repo / "django/test/runner.py").read_text() == RUNNER
    assert not (repo / "django/test").is_symlink()
    assert (repo / "tests/app/__init__.py").read_text() == ""
    assert (repo / "tests/app/built.txt").read_text() == BUILT  # untracked, the image's: kept
    assert not (repo / "tests/app/tests/__init__.py").exists()


# written by the runner's own interpreter: bytecode for django/test/runner.py stamped with the
# source's size and time, so Python runs it instead of the source (the reset finds the source
# unchanged); the carry never takes bytecode, Harbor's own runs verify in the agent's tree
FORGE_BYTECODE = """\
import importlib.util, os, sys
from importlib._bootstrap_external import _code_to_timestamp_pyc
source, text = sys.argv[1], sys.argv[2]
stat = os.stat(source)
out = importlib.util.cache_from_source(source)
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "wb") as handle:
    handle.write(_code_to_timestamp_pyc(compile(text, source, "exec"), stat.st_mtime, stat.st_size))
"""


def test_bytecode_for_the_runner_scored_1_before_and_0_now(django_image, tmp_path) -> None:
    env, row = django_image[2], dict(DJANGO_ROW, base_commit="0" * 40)
    forged_runner = f"def run(labels):\n    exec({FORGED!r})\n    return 0\n"
    for reset, expected in ((False, "1"), (True, "0")):
        (tmp_path / str(reset)).mkdir()
        repo, pristine = _fresh(django_image, tmp_path / str(reset))
        source = repo / "django/test/runner.py"
        run = _sh(
            repo, env, shlex.join(["python3", "-c", FORGE_BYTECODE, str(source), forged_runner])
        )
        assert run.returncode == 0, run.stderr
        assert _test_sh_run("swebench", row, repo, pristine, env, reset) == expected, reset
        assert source.read_text() == RUNNER  # the source itself never changed


def test_the_gold_fix_scores_1_with_its_own_test_side_paths_kept(django_image, tmp_path) -> None:
    repo, pristine = _fresh(django_image, tmp_path)
    env, row = django_image[2], dict(DJANGO_ROW, base_commit="0" * 40)
    assert _test_sh_run("swebench", row, repo, pristine, env, True) == "0"  # NOP
    run = _sh(repo, env, fd.task_files("swebench", row)["solution/solve.sh"][0].replace(
        "/testbed", str(repo)), "/bin/bash")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert _test_sh_run("swebench", row, repo, pristine, env, True) == "1"
    assert (repo / "django/test/utils.py").read_text() == "HELPER = 2\n"  # the gold's: not reset
    assert (repo / "django/test/added.py").read_text() == "ADDED = 1\n"  # new, the gold's: kept


def test_the_test_side_names_the_runner_and_leaves_out_the_gold_patchs_paths() -> None:
    specs = side_pathspecs("swebench", DJANGO_ROW)
    assert ":(glob)**/tests/**" in specs and ":(glob)**/test/**" in specs
    assert specs[-3:] == [
        ":(exclude,literal)django/db/x.py",
        ":(exclude,literal)django/test/utils.py",
        ":(exclude,literal)django/test/added.py",
    ]
    sympy = side_pathspecs("swebench", {"repo": "sympy/sympy", "patch": ""})
    assert ":(literal)bin/test" in sympy and not any("exclude" in s for s in sympy)
