"""A clone in a 0700 home (the usual case as root on servers): nox puts TMPDIR inside it, which
the sandbox's host uid (100000) cannot traverse. Sandbox state then goes to /tmp, an explicit
unreachable state root is refused naming the folder in the way, the doctor says so, and a start
failure's fix follows what bubblewrap said."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from forge_sandbox import LocalSandbox, SandboxError, SandboxSpec
from forge_sandbox.local._hostside import state_root, unreachable_folder
from forge_sandbox.local._sandbox import USERNS_HINT, start_fix

UID = 100_000


@pytest.fixture
def open_tmp():
    """A folder under /tmp that every uid can traverse (pytest's tmp_path sits in a 0700
    /tmp/pytest-of-root)."""
    folder = Path(tempfile.mkdtemp(prefix="forge-reach-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_unreachable_folder_names_the_first_closed_folder(open_tmp: Path) -> None:
    home = open_tmp / "home"
    (home / "clone" / "tmp").mkdir(parents=True)
    home.chmod(0o700)
    assert unreachable_folder(home / "clone" / "tmp", UID) == home
    home.chmod(0o701)
    assert unreachable_folder(home / "clone" / "tmp", UID) is None
    assert unreachable_folder(Path("/tmp"), UID) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands sandboxes to another uid")
def test_a_closed_temp_folder_falls_back_to_tmp_and_an_explicit_one_is_refused(
    open_tmp: Path,
) -> None:
    closed = open_tmp / "home"
    closed.mkdir(mode=0o700)
    old = tempfile.tempdir
    tempfile.tempdir = str(closed)
    try:
        assert state_root(None, UID) == Path("/tmp")
    finally:
        tempfile.tempdir = old
    with pytest.raises(SandboxError, match=rf"{closed} is closed to it .*fix: set TMPDIR"):
        state_root(closed, UID)
    assert state_root(closed, None) == closed  # not root: the sandbox runs as this uid


@pytest.mark.usefixtures("isolation")
@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands sandboxes to another uid")
def test_a_sandbox_starts_when_tmpdir_is_in_a_0700_home(tmp_path: Path) -> None:
    closed = tmp_path / "home" / "clone" / ".nox" / "tmp"
    closed.mkdir(parents=True)
    (tmp_path / "home").chmod(0o700)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "hello.txt").write_text("hi\n")

    async def main() -> tuple[str, Path]:
        async with LocalSandbox(SandboxSpec(workspace=workspace)) as sandbox:
            result = await sandbox.exec("cat hello.txt")
            assert sandbox._dir is not None
            return result.stdout, sandbox._dir

    old = tempfile.tempdir
    tempfile.tempdir = str(closed)
    try:
        out, state = asyncio.run(main())
    finally:
        tempfile.tempdir = old
    assert out == "hi\n" and state.parent == Path("/tmp") and not state.exists()


def test_the_start_fix_follows_what_bwrap_said() -> None:
    said = (
        "bwrap: Can't find source path /root/clone/.nox/tmp/forge-sbx-1-x/workspace: "
        "Permission denied"
    )
    fix = start_fix(said, UID)
    assert "uid 100000 cannot reach a folder bwrap binds" in fix and "0700 home" in fix
    assert "namespaces" not in fix
    assert start_fix("bwrap: No permissions to creating new namespace", UID) == USERNS_HINT
