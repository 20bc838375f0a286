"""What a kill -9'd owner leaves (its sandboxes' state folders and cgroups) is swept by the next
sandbox start; what a live owner has is left alone."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from forge_sandbox import CgroupLimits, LocalSandbox, SandboxSpec, detect_cgroups
from forge_sandbox.local._hostside import state_root

LIMITS = CgroupLimits(memory_bytes=64 * 1024 * 1024, pids_max=16, cpu_quota_us=50_000)


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped): an owner killed with -9."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.usefixtures("cgroups")
def test_next_start_sweeps_a_dead_owners_folder_and_cgroup() -> None:
    # a state root the sandbox's host uid can traverse (pytest's tmp_path is root-only, and
    # TMPDIR may sit in a 0700 home: the fallback the sandbox itself would use)
    tmp_path = Path(tempfile.mkdtemp(prefix="forge-leftovers-", dir=state_root(None, 100_000)))
    tmp_path.chmod(0o755)
    try:
        _sweep_case(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _sweep_case(tmp_path: Path) -> None:
    dead = _dead_pid()
    stale = tmp_path / f"forge-sbx-{dead}-k9x_1abc"
    (stale / "workspace" / "src").mkdir(parents=True)
    (stale / "workspace" / "src" / "big.py").write_text("x = 1\n")
    live = tmp_path / f"forge-sbx-{os.getpid()}-alive123"  # a live owner's: kept
    live.mkdir()
    unowned = tmp_path / "forge-sbx-noowner"  # no owner pid in the name: never guessed at
    unowned.mkdir()
    driver = detect_cgroups()
    driver.create(f"sbx-{dead}-deadbeef", LIMITS)

    async def one() -> str:
        async with LocalSandbox(SandboxSpec(), state_root=tmp_path) as sandbox:
            assert sandbox._dir is not None
            return sandbox._dir.name

    own = asyncio.run(one())
    assert own.startswith(f"forge-sbx-{os.getpid()}-"), own  # its owner is in its name
    assert not stale.exists()
    assert f"sbx-{dead}-deadbeef" not in driver.names()
    assert live.is_dir() and unowned.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, unowned.name])
