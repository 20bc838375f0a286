"""Which cgroup driver this machine gets, found at run time from /proc/self/mountinfo.

v2 when the unified hierarchy has memory, pids and cpu (a pure-v2 host); else v1 when those
three are mounted as v1 hierarchies (hybrid hosts like this one: the v2 mount has no
controllers; legacy hosts). Nothing usable, or not writable: SandboxUnavailableError.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from forge_gates import Violation
from forge_sandbox._errors import SandboxError, SandboxUnavailableError
from forge_sandbox.local._cgroups import (
    V1_REQUIRED,
    V2_REQUIRED,
    CgroupDriver,
    V1Driver,
    V2Driver,
    _read,
)
from forge_sandbox.local._proctree import RlimitDriver


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> tuple[dict[str, Path], list[Path]]:
    """(v1 controller -> mount point, v2 mount points) from /proc/self/mountinfo text."""
    v1: dict[str, Path] = {}
    v2: list[Path] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        mount_point = Path(_unescape(fields[4]))
        if tail[0] == "cgroup2":
            v2.append(mount_point)
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                v1.setdefault(option, mount_point)
    return v1, v2


def detect_cgroups(mountinfo: str | None = None, parent: str = "forge-sandbox") -> CgroupDriver:
    """The driver for this machine: v2 when its unified hierarchy has memory, pids and cpu,
    else v1 when those three are mounted as v1 hierarchies (hybrid or legacy).

    Raises SandboxUnavailableError (expected / found / fix) when neither works or the hierarchy
    is not writable.
    """
    text = mountinfo if mountinfo is not None else _read(Path("/proc/self/mountinfo"))
    v1, v2 = parse_mountinfo(text)
    found_v2: list[str] = []
    for mount in v2:
        controllers = set(_read(mount / "cgroup.controllers").split())
        found_v2.append(f"{mount} [{' '.join(sorted(controllers)) or 'no controllers'}]")
        if set(V2_REQUIRED) <= controllers:
            return _writable(V2Driver(mount, parent), mount)
    if all(c in v1 for c in V1_REQUIRED):
        return _writable(V1Driver(v1, parent), v1["memory"])
    raise SandboxUnavailableError(
        [
            Violation(
                rule="cgroups.controllers",
                expected=f"cgroup v2 with {'+'.join(V2_REQUIRED)} enabled, or v1 hierarchies "
                f"for {', '.join(V1_REQUIRED)}",
                found=f"v1: {sorted(c for c in v1 if c in (*V1_REQUIRED, 'freezer')) or 'none'}; "
                f"v2: {found_v2 or 'none'}",
                fix="run on a host (or a privileged container) with cgroups mounted read-write; "
                "see `forge-sandbox doctor`",
            )
        ]
    )


def _writable(driver: CgroupDriver, mount: Path) -> CgroupDriver:
    """`driver` when its hierarchy is writable, or its parent folder(s) exist writable (a
    cgroup delegated to this user); else SandboxUnavailableError (cgroups.writable)."""
    roots = driver.root._unique() if isinstance(driver, V1Driver) else [driver.root.path]
    delegated = all(r.is_dir() and os.access(r, os.W_OK) for r in roots)
    if not (os.access(mount, os.W_OK) or delegated):
        raise SandboxUnavailableError(
            [
                Violation(
                    rule="cgroups.writable",
                    expected=f"a writable cgroup hierarchy at {mount}, or its sandbox parent "
                    f"{roots[0]} delegated to uid {os.geteuid()}",
                    found=f"neither writable by uid {os.geteuid()}",
                    fix="run as root; or delegate the parent folders (as root: mkdir and chown "
                    "them to this user); a user other than root without either gets rlimits "
                    "instead (LocalSandbox.info['limits'])",
                )
            ]
        )
    return driver


def detect_limits(
    mountinfo: str | None = None, parent: str = "forge-sandbox"
) -> CgroupDriver | RlimitDriver:
    """What bounds the local backend's sandboxes here: cgroups (detect_cgroups), or, for a
    user other than root that no cgroup is writable for, rlimits (`_proctree`). Root without
    writable cgroups fails closed (SandboxUnavailableError)."""
    try:
        return detect_cgroups(mountinfo, parent)
    except SandboxUnavailableError as exc:
        if os.geteuid() == 0 or [v.rule for v in exc.violations] != ["cgroups.writable"]:
            raise
    return RlimitDriver()


def limits_kind(driver: CgroupDriver | RlimitDriver) -> str:
    """'cgroup v1', 'cgroup v2' or 'rlimits' (what LocalSandbox.info['limits'] says)."""
    return "rlimits" if isinstance(driver, RlimitDriver) else f"cgroup v{driver.version}"


def sweep_stale(driver: CgroupDriver | RlimitDriver) -> list[str]:
    """Remove sandbox cgroups `sbx-<pid>-*` whose owning process is gone; their names."""
    removed = []
    for name in driver.names():
        match = re.fullmatch(r"sbx-(\d+)-[0-9a-f]+", name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            driver.existing(name).remove()
            removed.append(name)
        except (OSError, SandboxError):
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
