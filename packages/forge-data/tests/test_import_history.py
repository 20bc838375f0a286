"""The imported tasks' images cut git history at the task's start: the Dockerfile's cut step
(`cut_history_sh`) run for real with git and sh on throwaway repositories shaped like the
published images (SWE-bench: later commits still reachable; SWE-smith: the clean code in the
instance branch's parent), then test.sh's reset from the saved copies, as the verifier runs it."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

import forge_data as fd
from forge_data.importers._layout import PRISTINE, pristine_paths, restore_sh

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
    assert "expected the test files as of the task in" in run.stderr
    assert "fix: build the image from this task's environment/Dockerfile" in run.stderr


def test_every_kind_of_dockerfile_cuts_the_history_last() -> None:
    rows = {"swebench": dict(SWE_BENCH_ROW, base_commit="0" * 40), "swesmith": SWE_SMITH_ROW}
    rows["swegym"] = rows["swebench"]
    for kind, row in rows.items():
        text = fd.task_files(kind, row)["environment/Dockerfile"][0]  # type: ignore[arg-type]
        steps = [line.split()[0] for line in text.replace("\\\n", "").splitlines()]
        assert steps[:2] == ["FROM", "WORKDIR"] and steps[-2:] == ["#", "RUN"], text
        assert text.count("RUN set -eu; \\\n") == 1 and "git gc -q --prune=now" in text
