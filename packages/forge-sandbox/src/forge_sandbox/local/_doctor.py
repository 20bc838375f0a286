"""`forge-sandbox doctor` for the local backend: what isolation is available here, and why not
when it is not (bubblewrap and its helpers, cgroups, user namespaces, a live sandbox)."""

from __future__ import annotations

import asyncio
import os
import platform
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from forge_sandbox._errors import INSTALL_BWRAP, SandboxError, SandboxUnavailableError
from forge_sandbox._probe import Probe
from forge_sandbox._spec import SandboxSpec
from forge_sandbox.local._bwrap import find_tools
from forge_sandbox.local._cgroup_detect import detect_limits
from forge_sandbox.local._cgroups import V1Driver
from forge_sandbox.local._hostside import state_root, unreachable_folder
from forge_sandbox.local._proctree import RlimitDriver
from forge_sandbox.local._sandbox import DEFAULT_HOST_UID, LocalSandbox


def _tools_probes(bwrap: str | None) -> list[Probe]:
    try:
        tools = find_tools(bwrap)
    except SandboxUnavailableError as exc:
        return [
            Probe(
                name=v.rule.removeprefix("tools."),
                ok=False,
                required=True,
                found=v.found,
                fix=v.fix,
            )
            for v in exc.violations
        ]
    version = subprocess.run(
        [tools.bwrap, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return [
        Probe(name="bwrap", ok=True, required=True, found=f"{tools.bwrap} ({version})"),
        Probe(name="nsenter", ok=True, required=True, found=tools.nsenter),
        Probe(name="setpriv", ok=True, required=True, found=tools.setpriv),
    ]


def _cgroup_probe() -> Probe:
    try:
        driver = detect_limits()
    except SandboxUnavailableError as exc:
        v = exc.violations[0]
        return Probe(name="cgroups", ok=False, required=True, found=v.found, fix=v.fix)
    if isinstance(driver, RlimitDriver):
        return Probe(
            name="cgroups",
            ok=True,
            required=True,
            found=f"none writable by uid {os.geteuid()}: limits are rlimits (pids_max per "
            "sandbox as RLIMIT_NPROC, memory per process as RLIMIT_DATA, no CPU quota, no OOM "
            "or refused-fork counts)",
            fix="for cgroup limits: run as root, or delegate the cgroup parent folders to this "
            "user",
        )
    if isinstance(driver, V1Driver):
        controllers = ", ".join(sorted(driver.root.paths))
        extra = "freezer: race-free kill" if "freezer" in driver.root.paths else "no freezer"
        found = f"v1 ({controllers}) under {driver.root.paths['memory'].parent.parent}; {extra}"
    else:
        found = f"v2 at {driver.mount} (memory, pids, cpu)"
    return Probe(name="cgroups", ok=True, required=True, found=found + ", writable")


def _userns_probe() -> Probe:
    path = Path("/proc/sys/user/max_user_namespaces")
    value = path.read_text().strip() if path.exists() else "unknown"
    ok = value != "0"
    return Probe(
        name="user-namespaces",
        ok=ok,
        required=True,
        found=f"user.max_user_namespaces = {value}",
        fix="" if ok else "sysctl -w user.max_user_namespaces=15000",
    )


def _python_probe() -> Probe:
    python = Path("/usr/bin/python3")
    ok = python.exists()
    return Probe(
        name="usr-bin-python3",
        ok=ok,
        required=False,
        found=f"{python} -> {os.path.realpath(python)}" if ok else "missing",
        fix="" if ok else "apt-get install -y python3 (demo tasks run /usr/bin/python3)",
    )


async def _live_probe() -> Probe:
    spec = SandboxSpec(memory_mb=256, pids_max=64, start_timeout_s=15)
    try:
        started = time.monotonic()
        async with LocalSandbox(spec) as sandbox:
            start_ms = (time.monotonic() - started) * 1000
            result = await sandbox.exec(
                "id -u; grep CapEff /proc/self/status; "
                "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' '; echo; "
                "grep '^Seccomp:' /proc/self/status"
            )
    except (SandboxError, OSError) as exc:
        return Probe(
            name="live-sandbox",
            ok=False,
            required=True,
            found=f"{type(exc).__name__}: {exc}",
            fix=f"{INSTALL_BWRAP}; see the probes above",
        )
    lines = result.stdout.split("\n")
    found = (
        f"started in {start_ms:.0f} ms; exec {result.duration_s * 1000:.0f} ms; uid {lines[0]}; "
        f"{lines[1].replace(chr(9), ' ') if len(lines) > 1 else ''}; "
        f"network interfaces: {lines[2].strip() if len(lines) > 2 else '?'}; "
        f"{lines[3].replace(chr(9), ' ') if len(lines) > 3 else 'Seccomp: ?'}"
    )
    filtered = len(lines) > 3 and lines[3].split() == ["Seccomp:", "2"]
    return Probe(
        name="live-sandbox",
        ok=result.exit_code == 0 and filtered,
        required=True,
        found=found,
        fix="" if filtered else "the exec ran without the seccomp filter: check bwrap >= 0.5",
    )


def _reach_probe() -> Probe:
    """What the sandbox's host uid can reach: the temp folder its state goes to (bwrap binds
    the workspace copy from there), and the fallback when TMPDIR sits in a closed folder."""
    if os.geteuid() != 0:
        return Probe(
            name="state-folder",
            ok=True,
            required=True,
            found=f"{tempfile.gettempdir()} (sandboxes run as your own uid)",
        )
    uid = DEFAULT_HOST_UID
    temp = Path(tempfile.gettempdir())
    try:
        root = state_root(None, uid)
    except SandboxError as exc:
        return Probe(
            name="state-folder",
            ok=False,
            required=True,
            found=str(exc),
            fix="set TMPDIR to a folder under /tmp",
        )
    blocked = unreachable_folder(temp, uid)
    found = f"{root}, reachable by uid {uid}"
    if blocked is not None:
        found += (
            f" (TMPDIR {temp} is not: {blocked} is {stat.filemode(os.stat(blocked).st_mode)};"
            " state folders go to the fallback)"
        )
    cwd_blocked = unreachable_folder(Path.cwd(), uid)
    if cwd_blocked is not None:
        found += f"; this folder is closed to uid {uid} at {cwd_blocked} (fine: nothing binds it)"
    return Probe(name="state-folder", ok=True, required=True, found=found)


def run_doctor(bwrap: str | None = None, live: bool = True) -> list[Probe]:
    """Every probe, in order; the live one starts and stops a real sandbox."""
    probes = [
        Probe(
            name="host",
            ok=True,
            required=False,
            found=f"{platform.system()} {platform.release()}, euid {os.geteuid()}"
            + (" (sandboxes run as host uid 100000)" if os.geteuid() == 0 else ""),
        ),
        *_tools_probes(bwrap),
        _cgroup_probe(),
        _userns_probe(),
        _python_probe(),
        _reach_probe(),
    ]
    if live and all(p.ok for p in probes if p.required):
        probes.append(asyncio.run(_live_probe()))
    return probes
