"""The test suites' `isolation` fixture: real local sandboxes, or the reason there are none."""

from __future__ import annotations

import os

from forge_sandbox.local._bwrap import host_problems
from forge_sandbox.local._cgroup_detect import detect_limits
from forge_sandbox.local._proctree import RlimitDriver


def local_sandbox_problem(cgroups: bool = False) -> str | None:
    """None when this host can run local sandboxes (bwrap and its helpers; as root, writable
    cgroups; with `cgroups`, also for a user other than root: cgroups, not rlimits); else
    each missing piece and its fix, for the fixture to skip with (or to fail
    with under CI=true: CI provides them all, so a skip there would hide a broken machine)."""
    problems = host_problems()
    if not problems:
        if cgroups and isinstance(detect_limits(), RlimitDriver):
            return (
                f"limits here are rlimits (uid {os.geteuid()}, no writable cgroup), and this test "
                "pins what only cgroups give (OOM kills and refused forks counted, one exec's "
                "processes killed whatever they did, a pod's cgroup view); fix: run as root, "
                "or delegate the cgroup parent folders to this user"
            )
        return None
    return "no local sandboxes here: " + "; ".join(
        f"[{v.rule}] {v.found} (fix: {v.fix})" for v in problems
    )


def is_sandbox_process(pid: int | str, uid: int | str) -> bool:
    """Whether host process `pid` (of host uid `uid`) is a local sandbox's: root runs them as
    host uid 100000, another user as itself, so there it is one in a pid namespace other than
    this process's. For the tests that watch sandboxes come and go."""
    if os.geteuid() == 0:
        return str(uid) == "100000"
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    except OSError:
        return False
