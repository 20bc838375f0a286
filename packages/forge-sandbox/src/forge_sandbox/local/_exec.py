"""One exec of the local backend: spawn inside a cgroup leaf, time out, drain, count limit hits.

A timeout (or a cancelled exec) kills the leaf's whole process tree. The host-side wrapper,
nsenter's waiting half, is spared until it has reaped its child inside the sandbox, so no
zombie is handed to the host's init; then it goes too. A leaf that still holds background
processes after its command exited stays until the sandbox stops (like `cmd &` in a pod).

A leaf that is empty once its exec is over serves the sandbox's next exec (`Leaf`): a leaf
made and removed per exec cost four mkdir and four rmdir across the v1 hierarchies, and walks
of each, on the event loop's thread, about a third of that thread's busy time in a rollout
batch at concurrency 8 (docs/measurements.md). Its OOM kills and refused forks are counted as
the difference from what the leaf had counted when its exec began.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from forge_sandbox._errors import SandboxError
from forge_sandbox._spec import DEFAULT_PATH, ExecResult
from forge_sandbox.local._bwrap import JOIN_FAILED
from forge_sandbox.local._io import OutputPipe, drain
from forge_sandbox.local._proctree import Group, adopt
from forge_sandbox.local._spawner import Spawned, spawn

DRAIN_GRACE_S = 0.5  # output still arriving after the command exited (background writers)


@dataclass(eq=False)
class Leaf:
    """An exec's cgroup leaf and its counters as its current exec found them."""

    group: Group
    oom_kills: int = 0
    pids_limit_hits: int = 0

    def hits(self) -> tuple[bool, bool]:
        """(an OOM kill, a refused fork) since the last call (or since the leaf was made),
        read from the leaf's counters, which become the next exec's baseline."""
        oom, pids = self.group.oom_kills(), self.group.pids_limit_hits()
        hit = (oom > self.oom_kills, pids > self.pids_limit_hits)
        self.oom_kills, self.pids_limit_hits = oom, pids
        return hit


async def run_in_leaf(
    argv: Sequence[str],
    leaf: Leaf,
    timeout_s: float,
    max_output_bytes: int,
    stdin: IO[bytes] | None = None,
    stdout_sink: IO[bytes] | None = None,
    filtered: tuple[str, str] | None = None,
    join: Mapping[str, Any] | None = None,
) -> ExecResult:
    """Run `argv` and report it as an ExecResult; `argv` joins `leaf` before anything else,
    or the spawner's child does (`join`, see _seccomp_exec.join).

    The leaf stays: the caller reuses it once empty. A failed or cancelled exec kills what it
    started and removes the leaf. `filtered`: (interpreter, filter hex) of the spawner that
    runs it under no_new_privs and that seccomp filter (_spawner); None: a plain child of
    this process (without `join`)."""
    out = OutputPipe(max_output_bytes) if stdout_sink is None else None
    err = OutputPipe(max_output_bytes)
    started = time.monotonic()
    timed_out = False
    try:
        # 1. spawn; the wrapper joins the leaf, so every descendant is inside the limits
        sink = out.write_fd if out is not None else stdout_sink
        assert sink is not None  # a pipe is made exactly when no sink is given
        proc = await _spawn(argv, stdin, sink, err, filtered, join)
        adopt(leaf.group, proc.pid)  # without a cgroup, its process tree is the leaf
        pipes = [p for p in (out, err) if p is not None]
        for pipe in pipes:
            await pipe.start_reading()
        # 2. wait, or kill the whole tree at the timeout
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
            await _kill_tree(leaf.group, proc)
        duration = time.monotonic() - started
        # 3. the rest of the output, and the OOM kills counted in this exec's own leaf
        await drain(pipes, DRAIN_GRACE_S)
        oom, pids_hit = leaf.hits()
    except BaseException:
        _kill_tree_now(leaf.group)  # cancelled or failed: leave nothing of this exec running
        _retire(leaf.group)
        raise
    finally:
        for open_pipe in (out, err):
            if open_pipe is not None:
                open_pipe.close()
    stderr = err.text()
    code = proc.returncode if proc.returncode is not None else -9
    if code == 125 and JOIN_FAILED in stderr:
        raise SandboxError(
            f"exec: expected the exec's cgroup, rlimits and seccomp filter set; found "
            f"{stderr.strip()!r}; fix: run `forge-sandbox doctor`"
        )
    exit_code = 124 if timed_out else (128 - code if code < 0 else code)
    return ExecResult(
        stdout=out.text() if out is not None else "",
        stderr=stderr,
        exit_code=exit_code,
        timed_out=timed_out,
        oom_killed=oom,
        pids_limit_hit=pids_hit,
        file_size_limit_hit=exit_code == 128 + signal.SIGXFSZ,  # killed, or its shell's status
        duration_s=duration,
        output_truncated=err.truncated or (out is not None and out.truncated),
    )


async def _spawn(
    argv: Sequence[str],
    stdin: IO[bytes] | None,
    stdout: IO[bytes] | int,
    err: OutputPipe,
    filtered: tuple[str, str] | None,
    join: Mapping[str, Any] | None,
) -> asyncio.subprocess.Process | Spawned:
    env = {"PATH": DEFAULT_PATH}
    if filtered is None:
        if join:
            raise ValueError("exec: a join needs the spawner (filtered); found a plain child")
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=stdout,
            stderr=err.write_fd,
            env=env,
            start_new_session=True,
        )
    with contextlib.ExitStack() as stack:
        if stdin is None:
            stdin = stack.enter_context(open(os.devnull, "rb"))
        out_fd = stdout if isinstance(stdout, int) else stdout.fileno()
        return await spawn(*filtered, argv, env, [stdin.fileno(), out_fd, err.write_fd], join)


async def _kill_tree(leaf: Group, proc: asyncio.subprocess.Process | Spawned) -> None:
    await asyncio.to_thread(leaf.kill, 10.0, frozenset({proc.pid}))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), 2)
    await asyncio.to_thread(leaf.kill)
    await proc.wait()


def kill_leaf(leaf: Group) -> int:
    """Kill every process of an exec's leaf (sandbox side first, then the host-side wrappers,
    which reap their children) and remove it; the number of processes it held."""
    held = len(leaf.pids())
    _kill_tree_now(leaf)
    _retire(leaf)
    return held


def _kill_tree_now(leaf: Group) -> None:
    """Synchronous variant for a cancelled exec: the sandbox side first, then the wrappers."""
    with contextlib.suppress(OSError, SandboxError):
        host_side = frozenset(p for p in leaf.pids() if not _in_sandbox_pidns(p))
        leaf.kill(10.0, host_side)
        time.sleep(0.05)  # the wrappers reap their children and exit
        leaf.kill()


def _in_sandbox_pidns(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    except OSError:
        return False


def _retire(leaf: Group) -> None:
    """Remove an exec's leaf once empty; one with background processes waits for stop()."""
    try:
        if not leaf.pids():
            leaf.remove()
    except (OSError, SandboxError):
        pass  # removed with the sandbox's cgroup at stop()
