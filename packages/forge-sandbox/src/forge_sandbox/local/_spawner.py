"""The local backend's exec spawner: one filtered process per host process spawns every exec.

An exec enters a running sandbox with nsenter, so it must get the seccomp filter and
no_new_privs itself. Starting a Python for each exec to install them (`_seccomp_exec.py`)
cost 15-25 ms of CPU per command, about a fifth of a demo episode's CPU at concurrency 8 on 2
cores. The spawner (`_seccomp_exec.py --serve`) installs them once and spawns every exec as its
child, so each exec inherits both, as before; the command line of an exec is otherwise the
nsenter -> env -i -> COMMAND, and the spawner's child joins the exec's cgroup leaf, sets its
rlimits and OOM score and enters the user namespace owning the sandbox's namespaces before it
execs nsenter (`_seccomp_exec.join`; a shell did the first three before).

Started on first use, one per (interpreter, filter) and per host process; started again after
it died, when the execs it was waiting on fail as SandboxError (infrastructure, never the
agent's). Thread-safe, usable from any event loop. It exits when the host closes its socket
(the host process exits).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_sandbox._errors import SandboxError
from forge_sandbox._spec import DEFAULT_PATH
from forge_sandbox.local._seccomp_exec import JOIN_FAILED

SCRIPT = str(Path(__file__).with_name("_seccomp_exec.py"))
READY_TIMEOUT_S = 30.0
FIX = "fix: run `forge-sandbox doctor`; the sandbox's other execs are unaffected once it restarts"


@dataclass
class Spawned:
    """An exec's process, as far as run_in_leaf needs one (asyncio.subprocess.Process's pid,
    wait() and returncode: negative for a signal)."""

    pid: int
    exited: concurrent.futures.Future[int]
    returncode: int | None = None

    async def wait(self) -> int:
        status = await asyncio.wrap_future(self.exited)
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


@dataclass
class _Spawner:
    python: str
    program_hex: str
    process: subprocess.Popen[bytes] = field(init=False)
    sock: socket.socket = field(init=False)
    owner: int = field(default_factory=os.getpid)
    dead: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 0
    _spawns: dict[int, tuple[concurrent.futures.Future[int], concurrent.futures.Future[int]]] = (
        field(default_factory=dict)
    )
    _exits: dict[int, concurrent.futures.Future[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [self.python, "-I", "-S", SCRIPT, self.program_hex, "--serve"],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                env={"PATH": DEFAULT_PATH},
                start_new_session=True,  # a terminal's Ctrl-C goes to the host, which stops it
            )
        finally:
            theirs.close()
        self.sock = ours
        try:
            ours.settimeout(READY_TIMEOUT_S)
            hello = json.loads(ours.recv(1 << 16) or b'{"error": "it exited at start"}')
            ours.settimeout(None)
        except (OSError, ValueError) as exc:
            hello = {"error": f"{type(exc).__name__}: {exc}"}
        if not hello.get("ready"):
            self.close()
            raise SandboxError(
                f"exec: expected the exec spawner ({self.python} {SCRIPT} --serve) to install "
                f"the seccomp filter and answer; found {hello.get('error')!r}; {FIX}"
            )
        threading.Thread(target=self._read, name="forge-sandbox-spawner", daemon=True).start()

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        fds: Sequence[int],
        join: Mapping[str, Any] | None = None,
    ) -> tuple[concurrent.futures.Future[int], concurrent.futures.Future[int]]:
        """Ask for one spawn: (its pid, its raw wait status), both futures."""
        started: concurrent.futures.Future[int] = concurrent.futures.Future()
        exited: concurrent.futures.Future[int] = concurrent.futures.Future()
        for future in (started, exited):  # running: a waiter's cancellation cannot cancel it
            future.set_running_or_notify_cancel()
        request = {"argv": list(argv), "env": dict(env), **({"join": dict(join)} if join else {})}
        with self._lock:
            if self.dead is not None:
                raise SandboxError(f"exec: expected the exec spawner; found {self.dead}; {FIX}")
            self._next += 1
            self._spawns[self._next] = (started, exited)
            try:
                socket.send_fds(
                    self.sock, [json.dumps({"id": self._next, **request}).encode()], fds
                )
            except OSError as exc:
                del self._spawns[self._next]
                raise SandboxError(
                    f"exec: expected the exec spawner to take the request; found {exc!r}; {FIX}"
                ) from exc
        return started, exited

    def _read(self) -> None:
        """Answers, in order: a spawn's pid comes before its exit, so the exit has its future."""
        reason = "its socket closed (the spawner exited)"
        try:
            while data := self.sock.recv(1 << 16):
                message = json.loads(data)
                with self._lock:
                    if "status" in message:
                        waiting = self._exits.pop(message["pid"], None)
                        if waiting is not None:
                            waiting.set_result(message["status"])
                        continue
                    started, exited = self._spawns.pop(message["id"])
                    if "pid" in message:
                        self._exits[message["pid"]] = exited
                        started.set_result(message["pid"])
                    else:
                        started.set_exception(_start_failed(message["error"]))
        except (OSError, ValueError, KeyError) as exc:
            reason = f"its answers broke off ({type(exc).__name__}: {exc})"
        self._fail_all(f"the exec spawner (pid {self.process.pid}) is gone: {reason}")

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            self.dead = self.dead or reason
            waiting = [f for pair in self._spawns.values() for f in pair]
            waiting += self._exits.values()
            self._spawns.clear()
            self._exits.clear()
        for future in waiting:
            if not future.done():
                future.set_exception(
                    SandboxError(f"exec: expected its exit status; found {reason}; {FIX}")
                )

    def close(self) -> None:
        with self._lock:
            self.dead = self.dead or "closed"
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _start_failed(said: str) -> SandboxError:
    if said.startswith(JOIN_FAILED):
        return SandboxError(
            f"exec: expected the exec's cgroup leaf, rlimits and user namespace entered; "
            f"found {said!r}; fix: run `forge-sandbox doctor`"
        )
    return SandboxError(
        f"exec: expected the command to start; found {said}; fix: check the host's nsenter "
        "(`forge-sandbox doctor`)"
    )


_lock = threading.Lock()
_spawners: dict[tuple[str, str], _Spawner] = {}


def _current(python: str, program_hex: str) -> _Spawner | None:
    spawner = _spawners.get((python, program_hex))
    if spawner is None or spawner.dead is not None or spawner.owner != os.getpid():
        return None
    return spawner


def _start(python: str, program_hex: str) -> _Spawner:
    with _lock:
        spawner = _current(python, program_hex)
        if spawner is None:
            old = _spawners.pop((python, program_hex), None)
            if old is not None and old.owner == os.getpid():
                old.close()
            spawner = _spawners[(python, program_hex)] = _Spawner(python, program_hex)
        return spawner


async def spawn(
    python: str,
    program_hex: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    fds: Sequence[int],
    join: Mapping[str, Any] | None = None,
) -> Spawned:
    """Spawn `argv` (stdin, stdout, stderr = `fds`) under no_new_privs and the filter, having
    done `join` first (`_seccomp_exec.join`: cgroup leaf, rlimits, OOM score, user namespace)."""
    spawner = _current(python, program_hex)
    if spawner is None:  # the first exec of this process, or its spawner died: start one
        spawner = await asyncio.to_thread(_start, python, program_hex)
    started, exited = spawner.spawn(argv, env, fds, join)
    return Spawned(await asyncio.wrap_future(started), exited)
