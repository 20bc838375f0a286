"""cgroup drivers: v1 (one hierarchy per controller) and v2 (unified), detected at run time.

Layout, the same in both: `<parent>/<sandbox>/` holds the limits; processes live only in leaves
below it (`init`, `exec-1`, `exec-2`, ...), so one exec's process tree can be killed alone and
its OOM kills counted alone, while the limits bound the whole sandbox.

v1 (this machine): memory.limit_in_bytes + memory.memsw.limit_in_bytes (no swap escape),
pids.max, cpu.cfs_quota_us / cpu.cfs_period_us; freezer (when mounted) makes a kill race-free.
v2: memory.max + memory.swap.max, pids.max, cpu.max, cgroup.kill (else cgroup.freeze + kill).
A process joins by writing its own pid to every hierarchy's `cgroup.procs` before it execs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from forge_sandbox._errors import SandboxError

V1_REQUIRED = ("memory", "pids", "cpu")
V2_REQUIRED = ("memory", "pids", "cpu")
_rmdir = os.rmdir  # a seam: the fake-cgroupfs tests swap in shutil.rmtree


@dataclass(frozen=True)
class CgroupLimits:
    """The limits written once on a sandbox's cgroup."""

    memory_bytes: int
    pids_max: int
    cpu_quota_us: int
    cpu_period_us: int = 100_000


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(value)
    except OSError as exc:
        raise SandboxError(
            f"cgroup write failed: expected to write {value!r} to {path}; found {exc}; "
            "fix: run as root (or in a delegated cgroup), check `forge-sandbox doctor`"
        ) from exc


def _counter(path: Path, key: str) -> int:
    for line in _read(path).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return int(parts[1])
    return 0


def _procs(root: Path) -> set[int]:
    pids: set[int] = set()
    for directory, _dirs, _files in os.walk(root):
        pids.update(int(p) for p in _read(Path(directory) / "cgroup.procs").split())
    return pids


def _remove_tree(root: Path) -> None:
    if not root.exists():
        return
    for directory, _dirs, _files in os.walk(root, topdown=False):
        _rmdir(directory)


def _kill_loop(list_pids, timeout_s: float, freeze=None, thaw=None) -> None:
    """SIGKILL every listed pid until none is left (freezing first when possible)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = list_pids()
        if not pids:
            return
        if freeze is not None:
            freeze()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if thaw is not None:
            thaw()
        if time.monotonic() > deadline:
            raise SandboxError(
                f"cgroup kill: expected no process left after {timeout_s:.0f} s; "
                f"found {sorted(list_pids())}; fix: check for processes stuck in D state"
            )
        time.sleep(0.005)


class CgroupV1:
    """One logical cgroup across the v1 hierarchies (memory, pids, cpu, freezer)."""

    version = 1

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    def _unique(self) -> list[Path]:
        return list(dict.fromkeys(self.paths.values()))

    @property
    def procs_files(self) -> list[Path]:
        return [p / "cgroup.procs" for p in self._unique()]

    def child(self, name: str) -> CgroupV1:
        child = CgroupV1({c: p / name for c, p in self.paths.items()})
        for path in child._unique():
            path.mkdir(exist_ok=True)
        return child

    def pids(self) -> set[int]:
        return _procs(self.paths["pids"])

    @property
    def pids_folder(self) -> Path:
        """The folder holding this cgroup's pids.* files."""
        return self.paths["pids"]

    def oom_kills(self) -> int:
        return _counter(self.paths["memory"] / "memory.oom_control", "oom_kill")

    def pids_limit_hits(self) -> int:
        """Forks refused in this cgroup at pids.max (v1 counts them in the forking cgroup)."""
        return _counter(self.paths["pids"] / "pids.events", "max")

    def memory_peak_bytes(self) -> int:
        text = _read(self.paths["memory"] / "memory.max_usage_in_bytes").strip()
        return int(text) if text else 0

    def kill(self, timeout_s: float = 10.0, spare: frozenset[int] = frozenset()) -> None:
        """SIGKILL every process (but `spare`) until none is left; frozen first if possible."""
        state = self.paths.get("freezer")
        if state is None:
            _kill_loop(lambda: self.pids() - spare, timeout_s)
            return

        def freeze() -> None:
            _write(state / "freezer.state", "FROZEN")

        def thaw() -> None:
            _write(state / "freezer.state", "THAWED")

        _kill_loop(lambda: self.pids() - spare, timeout_s, freeze, thaw)

    def remove(self) -> None:
        self.kill()
        for path in self._unique():
            _remove_tree(path)

    def exists(self) -> bool:
        return any(p.exists() for p in self._unique())


class CgroupV2:
    """One cgroup of the unified (v2) hierarchy."""

    version = 2

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def procs_files(self) -> list[Path]:
        return [self.path / "cgroup.procs"]

    def child(self, name: str) -> CgroupV2:
        child = CgroupV2(self.path / name)
        child.path.mkdir(exist_ok=True)
        return child

    def pids(self) -> set[int]:
        return _procs(self.path)

    @property
    def pids_folder(self) -> Path:
        """The folder holding this cgroup's pids.* files."""
        return self.path

    def oom_kills(self) -> int:
        return _counter(self.path / "memory.events", "oom_kill")

    def pids_limit_hits(self) -> int:
        """Forks refused in this cgroup at a pids.max (its own or an ancestor's).

        Linux >= 6.15 counts `pids.events` hierarchically where the limit sits, and the forks
        refused in the forking cgroup itself in `pids.events.local`; older kernels count them
        in `pids.events` of the forking cgroup.
        """
        local = self.path / "pids.events.local"
        return _counter(local if local.exists() else self.path / "pids.events", "max")

    def memory_peak_bytes(self) -> int:
        text = _read(self.path / "memory.peak").strip()
        return int(text) if text else 0

    def kill(self, timeout_s: float = 10.0, spare: frozenset[int] = frozenset()) -> None:
        """SIGKILL every process (but `spare`): cgroup.kill, else freeze + kill each."""
        if not spare and (self.path / "cgroup.kill").exists():
            _write(self.path / "cgroup.kill", "1")
            _kill_loop(self.pids, timeout_s)  # waits; kills stragglers of an old kernel
            return

        def freeze() -> None:
            _write(self.path / "cgroup.freeze", "1")

        def thaw() -> None:
            _write(self.path / "cgroup.freeze", "0")

        _kill_loop(lambda: self.pids() - spare, timeout_s, freeze, thaw)

    def remove(self) -> None:
        self.kill()
        _remove_tree(self.path)

    def exists(self) -> bool:
        return self.path.exists()


Cgroup = CgroupV1 | CgroupV2


class V1Driver:
    """cgroup v1: a `<parent>` folder in each controller's hierarchy."""

    version = 1

    def __init__(self, mounts: dict[str, Path], parent: str) -> None:
        names = [*V1_REQUIRED, *(["freezer"] if "freezer" in mounts else [])]
        self.root = CgroupV1({c: mounts[c] / parent for c in names})

    def create(self, name: str, limits: CgroupLimits) -> CgroupV1:
        for path in self.root._unique():
            path.mkdir(parents=True, exist_ok=True)
        group = self.root.child(name)
        memory = group.paths["memory"]
        if _read(memory / "memory.use_hierarchy").strip() == "0":
            _write(memory / "memory.use_hierarchy", "1")
        _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():
            _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        _write(group.paths["pids"] / "pids.max", str(limits.pids_max))
        _write(group.paths["cpu"] / "cpu.cfs_period_us", str(limits.cpu_period_us))
        _write(group.paths["cpu"] / "cpu.cfs_quota_us", str(limits.cpu_quota_us))
        return group

    def existing(self, name: str) -> CgroupV1:
        return CgroupV1({c: p / name for c, p in self.root.paths.items()})

    def names(self) -> list[str]:
        pids_root = self.root.paths["pids"]
        return (
            sorted(p.name for p in pids_root.iterdir() if p.is_dir()) if pids_root.is_dir() else []
        )


class V2Driver:
    """cgroup v2: `<mount>/<parent>/<sandbox>` with memory, pids and cpu enabled downwards."""

    version = 2

    def __init__(self, mount: Path, parent: str) -> None:
        self.mount = mount
        self.root = CgroupV2(mount / parent)

    def _enable(self, path: Path, controllers: tuple[str, ...]) -> None:
        enabled = set(_read(path / "cgroup.subtree_control").split())
        missing = [c for c in controllers if c not in enabled]
        if missing:
            _write(path / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))

    def create(self, name: str, limits: CgroupLimits) -> CgroupV2:
        self._enable(self.mount, V2_REQUIRED)
        self.root.path.mkdir(exist_ok=True)
        self._enable(self.root.path, V2_REQUIRED)
        group = self.root.child(name)
        _write(group.path / "memory.max", str(limits.memory_bytes))
        if (group.path / "memory.swap.max").exists():
            _write(group.path / "memory.swap.max", "0")
        _write(group.path / "pids.max", str(limits.pids_max))
        _write(group.path / "cpu.max", f"{limits.cpu_quota_us} {limits.cpu_period_us}")
        self._enable(group.path, ("memory", "pids"))  # leaves get memory.events, pids.events
        return group

    def existing(self, name: str) -> CgroupV2:
        return CgroupV2(self.root.path / name)

    def names(self) -> list[str]:
        root = self.root.path
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


CgroupDriver = V1Driver | V2Driver
