"""Process groups without cgroups: the local backend for a user with no writable cgroup.

Root gets cgroups (`_cgroups`): the kernel keeps every process of an exec in its leaf and
enforces the sandbox's limits on the whole sandbox. A user other than root on a host that
delegates no cgroup to it (this VM's v1 hierarchies are root's) gets this instead:

- **Limits are rlimits** set on every exec (`_seccomp_exec.join`): `RLIMIT_NPROC` = pids_max,
  counted by the kernel per user namespace, i.e. per sandbox (each has its own); `RLIMIT_DATA`
  = the memory limit, per process (a process past it gets ENOMEM, not an OOM kill); no CPU
  quota. The execs' OOM score (+500) makes the host's OOM killer take them first.
- **An exec's processes** are the tree under its host-side process (found by parent pids in
  /proc, each root checked by its start time so a reused pid is never taken for it). A
  process that leaves the tree (a daemon, reparented to the sandbox's pid 1) is still the
  sandbox's: `SandboxTree.pids()` is every process in the sandbox's mount namespace, and
  `kill_processes` kills all of those but the init's.
- **No counters**: OOM kills and refused forks read 0 (`LocalSandbox.info["limits"]` says
  which kind of limits a sandbox has).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from forge_sandbox._errors import SandboxError
from forge_sandbox.local._cgroups import Cgroup, CgroupLimits, _kill_loop

INIT_SLEEP = "/.forge-init/sleep"  # _init.INIT_DIR's sleep, as the sandbox names it


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, session id, start ticks) of `pid`, or None when it is gone (or a zombie:
    nothing to kill)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[3]), int(fields[19])


def _processes() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, session id, start ticks), over every live process this user can see."""
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                found[int(entry.name)] = stat
    return found


def _children(processes: dict[int, tuple[int, int, int]]) -> dict[int, list[int]]:
    """ppid -> its children, from `_processes()`."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _sid, _ticks) in processes.items():
        children.setdefault(ppid, []).append(pid)
    return children


def _tree(roots: set[int], processes: dict[int, tuple[int, int, int]]) -> set[int]:
    """`roots` and all their descendants, alive."""
    children = _children(processes)
    found, todo = set(), [r for r in roots if r in processes]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def zombie_children(pid: int) -> int:
    """How many zombies `pid` has not reaped yet (they still count against RLIMIT_NPROC)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            count += fields[0] == "Z" and int(fields[1]) == pid
    return count


def _namespace(pid: int, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


class TreeLeaf:
    """An exec's processes: the trees under the host-side processes it adopted, and every
    process still in their sessions (each exec's spawner child starts a session of its own:
    a background process reparented to the sandbox's pid 1 keeps it unless it calls setsid)."""

    version = 0
    procs_files: tuple[Path, ...] = ()  # nothing to join: the process is adopted once spawned

    def __init__(self) -> None:
        self._roots: dict[int, int] = {}  # pid -> start ticks
        self._sessions: set[int] = set()  # the roots' session ids (their pids)
        self._removed = False

    def adopt(self, pid: int) -> None:
        """`pid` (a spawned exec's host-side process) and what it starts belong to this leaf."""
        stat = _stat(pid)
        if stat is not None:
            self._roots[pid] = stat[2]
            if stat[1] == pid:
                self._sessions.add(pid)

    def pids(self) -> set[int]:
        if not self._roots and not self._sessions:
            return set()
        processes = _processes()
        for pid, ticks in list(self._roots.items()):
            if pid not in processes or processes[pid][2] != ticks:  # exited (maybe reused)
                del self._roots[pid]
        members = {pid for pid, (_p, sid, _t) in processes.items() if sid in self._sessions}
        # a session id stays taken while the session has members; once empty it may be reused
        self._sessions = {sid for sid in self._sessions if sid in self._roots} | {
            processes[pid][1] for pid in members
        }
        return _tree(set(self._roots), processes) | members

    def kill(self, timeout_s: float = 10.0, spare: frozenset[int] = frozenset()) -> None:
        _kill_loop(lambda: self.pids() - spare, timeout_s)

    def remove(self) -> None:
        self.kill()
        self._removed = True

    def exists(self) -> bool:
        return not self._removed

    def oom_kills(self) -> int:
        return 0  # no counter without a memory cgroup (see the module's docstring)

    def pids_limit_hits(self) -> int:
        return 0


class InitLeaf(TreeLeaf):
    """The init's processes: bwrap's host-side process, the sandbox's pid 1, and pid 1's
    children running the init's sleep (an orphan pid 1 adopted is not the init's)."""

    def pids(self) -> set[int]:
        roots = {
            pid for pid, ticks in self._roots.items() if (_stat(pid) or (0, 0, -1))[2] == ticks
        }
        if not roots:
            return set()
        children = _children(_processes())
        init = {pid for root in roots for pid in (root, *children.get(root, []))}
        for pid in list(init - roots):  # pid 1: its sleeps
            for child in children.get(pid, []):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{child}/exe") == INIT_SLEEP:
                        init.add(child)
        return init


class SandboxTree:
    """A sandbox's processes: its leaves' trees and every process in its mount namespace."""

    version = 0
    procs_files: tuple[Path, ...] = ()

    def __init__(self, limits: CgroupLimits) -> None:
        self.limits = limits
        self._leaves: list[TreeLeaf] = []
        self._init: InitLeaf | None = None
        self._mnt: str | None = None
        self._mnt_fd: int | None = None
        self._removed = False

    def child(self, name: str) -> TreeLeaf:
        if name == "init":
            if self._init is None:
                self._init = InitLeaf()
                self._leaves.append(self._init)
            return self._init
        leaf = TreeLeaf()
        self._leaves.append(leaf)
        return leaf

    def bind(self, init_pid: int) -> None:
        """The sandbox's pid 1 is `init_pid`: its mount namespace is the sandbox's. Held open
        until remove(): a namespace's number is reused once it is freed (the sandbox's pid 1
        killed), and this sandbox's kill loop would then take another's processes."""
        self._mnt_fd = os.open(f"/proc/{init_pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        self._mnt = f"mnt:[{os.fstat(self._mnt_fd).st_ino}]"

    def pids(self) -> set[int]:
        found = set().union(*(leaf.pids() for leaf in self._leaves)) if self._leaves else set()
        if self._mnt is not None and self._mnt != _namespace(os.getpid(), "mnt"):
            for entry in os.scandir("/proc"):
                if entry.name.isdigit() and _namespace(int(entry.name), "mnt") == self._mnt:
                    found.add(int(entry.name))
        return found

    @property
    def pids_folder(self) -> Path:
        raise SandboxError(
            "cgroup_view: expected a cgroup to show the sandbox; found none (this user has no "
            "writable cgroup: limits are rlimits); fix: run as root"
        )

    def kill(self, timeout_s: float = 10.0, spare: frozenset[int] = frozenset()) -> None:
        _kill_loop(lambda: self.pids() - spare, timeout_s)

    def remove(self) -> None:
        try:
            self.kill()
        finally:
            if self._mnt_fd is not None:
                os.close(self._mnt_fd)
                self._mnt_fd, self._mnt = None, None
            self._removed = True

    def exists(self) -> bool:
        return not self._removed

    def oom_kills(self) -> int:
        return 0

    def pids_limit_hits(self) -> int:
        return 0


class RlimitDriver:
    """The driver when no cgroup is writable by this (non-root) user: see the module."""

    version = 0

    def create(self, name: str, limits: CgroupLimits) -> SandboxTree:
        return SandboxTree(limits)

    def names(self) -> list[str]:
        return []  # nothing outlives its process: bwrap dies with its parent, and its pid 1

    def existing(self, name: str) -> SandboxTree:
        raise SandboxError(f"rlimits: no sandbox {name!r} to find (nothing is kept on disk)")


Group = Cgroup | SandboxTree | TreeLeaf  # what holds a sandbox's or an exec's processes


def adopt(group: Group, pid: int) -> None:
    """A spawned process (and its tree) joins `group`: a process tree's, not a cgroup's
    (a cgroup's process joined it itself, before it exec'd)."""
    if isinstance(group, TreeLeaf):
        group.adopt(pid)
