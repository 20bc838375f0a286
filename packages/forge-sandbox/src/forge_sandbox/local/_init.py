"""The sandbox's init, out of the agent's reach, and the check that it is unchanged.

The seccomp filter stops `ptrace` and `process_vm_writev`, but a process may also write
another's memory through `/proc/PID/mem`, which the kernel allows for the same uid when the
target is *dumpable*. So the init's two processes (pid 1, a shell that reaps orphans, and its
`sleep infinity`) run from execute-only copies of the sandbox's own `sh` and `sleep` (mode
0111 at INIT_DIR): the kernel marks a process exec'd from a file its user cannot read
non-dumpable, and a non-dumpable process's memory, like its ptrace, needs CAP_SYS_PTRACE, which
no sandbox process has. bwrap's own reaper (dumpable) is not used (`--as-pid-1`).

`check_marks` then reads the init back from the host: the same processes (pid + start time),
the same executables and code mappings, nobody tracing them, still non-dumpable and filtered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forge_sandbox._errors import SandboxError, SandboxStartError

INIT_DIR = "/.forge-init"  # inside the sandbox: the execute-only sh and sleep
INIT_PROGRAMS = ("sh", "sleep")
MARK_TIMEOUT_S = 5.0  # READY is said before the init's sleep has exec'd and loaded
_LINK_HOPS = 40


class SandboxInitChangedError(SandboxError):
    """The sandbox's init processes are not the ones start() left (replaced, traced, new
    processes among them, their code or their protection changed)."""


def _inside(root: Path, path: str) -> Path:
    """`path` as the sandbox rooted at `root` resolves it: every component's symlink is followed
    inside `root` (an absolute target restarts at `root`, `..` stops there)."""
    parts = [p for p in path.split("/") if p]
    done: list[str] = []
    for _ in range(_LINK_HOPS * 8):
        if not parts:
            return root.joinpath(*done)
        part = parts.pop(0)
        if part == "..":
            done = done[:-1]
            continue
        if part == ".":
            continue
        host = root.joinpath(*done, part)
        if host.is_symlink():
            target = os.readlink(host)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
        else:
            done.append(part)
    raise SandboxError(f"sandbox init: too many links resolving {path} in {root}")


def resolve_in_root(root: Path, name: str) -> Path:
    """The host path of `/usr/bin/NAME` (else `/bin/NAME`) as the sandbox rooted at `root`
    sees it: symlinks are followed inside `root` (an image's `/bin/sh -> dash`, or busybox)."""
    for folder in ("usr/bin", "bin"):
        host = _inside(root, f"/{folder}/{name}")
        if host.is_file():
            return host
    raise SandboxError(
        f"sandbox init: expected /usr/bin/{name} or /bin/{name} in {root}; found neither; fix: "
        f"give the rootfs coreutils and a shell (the init runs `{name}`)"
    )


def install_init_programs(root: Path, target: Path) -> Path:
    """Execute-only (0111) copies of the sandbox's sh and sleep in `target`; returns it."""
    target.mkdir(mode=0o755)
    for name in INIT_PROGRAMS:
        copy = target / name
        shutil.copyfile(resolve_in_root(root, name), copy)
        os.chmod(copy, 0o111)
    return target


def init_script(ready: str, seed: str | None) -> str:
    """pid 1's script: (fill the workspace,) start `sleep infinity`, say `ready`, then reap
    every orphan (`wait` collects any child) and restart the sleep should it die."""
    fill = f"cp -a {seed}/. /workspace/ || exit 1; " if seed is not None else ""
    return (
        f"{fill}PATH={INIT_DIR}; sleep infinity & echo {ready}; "
        "while :; do wait; sleep infinity & done"
    )


@dataclass(frozen=True)
class ProcessMark:
    """What identifies one init process: read from /proc on the host."""

    pid: int
    start_ticks: int  # /proc/PID/stat field 22: start time after boot, in clock ticks
    comm: str
    exe: str
    code: tuple[str, ...]  # executable mappings: "start-end perms path"
    in_sandbox: bool  # in the sandbox's pid namespace (bwrap's host-side process is not)
    tracer: int  # TracerPid
    seccomp: int  # 0 none, 2 filter
    dumpable: bool  # /proc/PID/mem owned by the process's uid (root-owned: non-dumpable)
    wchan: str = ""  # where it waits in the kernel (not compared): `__do_sys_pause`
    # (coreutils' `sleep infinity`) or `hrtimer_nanosleep` once the sleep sleeps

    @property
    def settled(self) -> bool:
        """The init's sleep sleeps (pause or nanosleep): its code mappings are final."""
        return self.comm == "sleep" and ("pause" in self.wchan or "nanosleep" in self.wchan)


def read_mark(pid: int, sandbox_pidns: str) -> ProcessMark:
    """A ProcessMark of `pid` (OSError when it is gone)."""
    proc = Path(f"/proc/{pid}")
    stat = (proc / "stat").read_text()
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    status = dict(
        line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line
    )
    code = tuple(
        " ".join([parts[0], parts[1], *parts[5:]])
        for parts in (line.split() for line in (proc / "maps").read_text().splitlines())
        if len(parts) >= 2 and "x" in parts[1]
    )
    real_uid = int(status["Uid"].split()[0])
    try:
        wchan = (proc / "wchan").read_text().strip()
    except OSError:
        wchan = ""
    return ProcessMark(
        pid=pid,
        start_ticks=int(fields[19]),
        comm=comm,
        exe=os.readlink(proc / "exe"),
        code=code,
        in_sandbox=os.readlink(proc / "ns" / "pid") == sandbox_pidns,
        tracer=int(status["TracerPid"]),
        seccomp=int(status.get("Seccomp", "0")),
        dumpable=(proc / "mem").stat().st_uid == real_uid and real_uid != 0,
        wchan=wchan,
    )


def protection_problems(mark: ProcessMark) -> list[str]:
    """What is wrong with one init process on its own (traced, dumpable, unfiltered)."""
    problems = []
    if mark.tracer != 0:
        problems.append(f"pid {mark.pid} ({mark.comm}) is traced by pid {mark.tracer}")
    if mark.in_sandbox and mark.dumpable:
        problems.append(f"pid {mark.pid} ({mark.comm}) is dumpable (its memory is writable)")
    if mark.in_sandbox and mark.seccomp != 2:
        problems.append(f"pid {mark.pid} ({mark.comm}) has seccomp mode {mark.seccomp}, not 2")
    return problems


def check_marks(baseline: list[ProcessMark], now: list[ProcessMark]) -> list[str]:
    """Every difference between the init start() left and the one found now."""
    before = {(m.pid, m.start_ticks): m for m in baseline}
    after = {(m.pid, m.start_ticks): m for m in now}
    problems = [
        f"pid {m.pid} ({m.comm}) is gone (or replaced)" for k, m in before.items() if k not in after
    ]
    problems += [f"pid {m.pid} ({m.comm}) is new" for k, m in after.items() if k not in before]
    for key, mark in after.items():
        old = before.get(key)
        if old is None:
            continue
        if (old.exe, old.comm) != (mark.exe, mark.comm):
            problems.append(
                f"pid {mark.pid} runs {mark.exe} ({mark.comm}); it ran {old.exe} ({old.comm})"
            )
        if old.code != mark.code:
            added = sorted(set(mark.code) - set(old.code))
            problems.append(f"pid {mark.pid} ({mark.comm}) has new code mappings: {added}")
        problems += protection_problems(mark)
    return problems


def _maps_own_program(mark: ProcessMark) -> bool:
    """Its executable is among its code mappings (the exec has loaded it)."""
    return any(line.endswith(" " + mark.exe) for line in mark.code)


def read_init(pids: set[int], sandbox_pidns: str) -> list[ProcessMark]:
    """The marks of `pids` (the init leaf's processes); one gone meanwhile is left out."""
    marks = []
    for pid in sorted(pids):
        with contextlib.suppress(OSError):
            marks.append(read_mark(pid, sandbox_pidns))
    return marks


async def mark_init(leaf_pids: Callable[[], set[int]], sandbox_pidns: str) -> list[ProcessMark]:
    """The init as start() leaves it, once its sleep sleeps (its libraries mapped: the code
    check_init compares); a gate: an init traced, dumpable or unfiltered fails the start."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + MARK_TIMEOUT_S
    seen: list[ProcessMark] = []
    while True:
        marks = await asyncio.to_thread(read_init, leaf_pids(), sandbox_pidns)
        sleeping = [m for m in marks if m.in_sandbox and m.comm == "sleep"]
        # settled, its own program mapped, and the same in two reads in a row (a read in the
        # middle of its exec can show the new name before the new code: seen under load)
        if any(m.settled and _maps_own_program(m) for m in sleeping) and marks == seen:
            break
        seen = marks
        if sleeping and loop.time() >= deadline:
            break  # a kernel that shows no wait channel: the sleep has had its time
        if loop.time() >= deadline:
            raise SandboxStartError(
                f"sandbox start: expected the init's `sleep infinity` within {MARK_TIMEOUT_S} "
                f"s; found {[(m.pid, m.comm) for m in marks]}; fix: check the sandbox's "
                "/usr/bin/sleep runs (`forge-sandbox doctor`)"
            )
        await asyncio.sleep(0.005)
    problems = [p for m in marks for p in protection_problems(m)]
    if problems:
        raise SandboxStartError(
            "sandbox start: expected the init's processes untraced, non-dumpable and under the "
            f"seccomp filter; found {'; '.join(problems)}; fix: run `forge-sandbox doctor` "
            "(bwrap >= 0.5 for --seccomp and --as-pid-1)"
        )
    return marks


@dataclass(frozen=True)
class InitCheck:
    """What `LocalSandbox.check_init()` read: the init's processes, all as start() left them."""

    pids: tuple[int, ...]
    programs: tuple[str, ...]
