"""Process groups without cgroups (`_proctree`): what a sandbox of a user other than root
holds. The sandboxes themselves run in test_rootless.py; these pin the bookkeeping."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from forge_sandbox.local._cgroups import CgroupLimits
from forge_sandbox.local._proctree import SandboxTree, TreeLeaf

LIMITS = CgroupLimits(memory_bytes=1 << 28, pids_max=16, cpu_quota_us=100_000)


def _in_new_mount_namespace() -> subprocess.Popen[bytes]:
    if os.geteuid() != 0:
        pytest.skip("unshare -m needs root")
    proc = subprocess.Popen(["unshare", "-m", "sleep", "60"])
    for _ in range(200):  # until it runs sleep in its own namespace
        if os.readlink(f"/proc/{proc.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
            return proc
        time.sleep(0.01)
    raise AssertionError("unshare -m did not take")


def test_a_sandbox_never_takes_a_later_namespace_with_its_old_number() -> None:
    """A freed namespace's number is given to the next one: holding the sandbox's mount
    namespace until remove() keeps another sandbox's processes out of its kill loop (rootless
    nop jobs at concurrency 2 had bwrap of one sandbox SIGKILLed by another's stop)."""
    first = _in_new_mount_namespace()
    tree = SandboxTree(LIMITS)
    tree.bind(first.pid)
    assert first.pid in tree.pids()
    first.kill()
    first.wait()
    later = [_in_new_mount_namespace() for _ in range(3)]
    try:
        assert not {p.pid for p in later} & tree.pids()
        tree.remove()
        assert all(p.poll() is None for p in later)  # its kill loop left them alone
    finally:
        for proc in later:
            proc.kill()
            proc.wait()


def test_a_leaf_forgets_a_root_whose_pid_was_reused() -> None:
    """A leaf's roots are (pid, start time): an exited root's pid, taken by another process,
    is not that leaf's."""
    leaf = TreeLeaf()
    child = subprocess.Popen(["sleep", "60"])
    leaf.adopt(child.pid)
    # the parent outlives its child's kill (`exec`: no shell whose `wait` returns and exits 0
    # before its own SIGKILL lands, as `sleep 60 & wait` did once in CI)
    grandchild_parent = subprocess.Popen(["sh", "-c", "sleep 60 & exec sleep 61"])
    assert leaf.pids() == {child.pid}
    leaf._roots[grandchild_parent.pid] = 1  # its pid, with another process's start time
    try:
        assert grandchild_parent.pid not in leaf.pids()
        leaf._roots.pop(grandchild_parent.pid, None)
        leaf.adopt(grandchild_parent.pid)
        time.sleep(0.1)
        assert len(leaf.pids() - {child.pid, grandchild_parent.pid}) == 1  # its sleep too
        leaf.remove()
        assert child.wait(5) == -9 and grandchild_parent.wait(5) == -9
    finally:
        for proc in (child, grandchild_parent):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
