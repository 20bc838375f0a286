"""One command in the container over the Engine API's exec (multiplexed stdout / stderr).

Every command runs under a small POSIX wrapper: `cd`, then the command, with the pids
cgroup's `max` counter and the memory cgroup's `oom_kill` counter read before and after (cgroup
v1 or v2, read with shell builtins only, so a full pids limit cannot stop the read), reported on
stderr after a random nonce and removed from the output. The exec's environment carries
`FORGE_SANDBOX_EXEC=<nonce>`, inherited by every descendant (setsid and double forks included):
at a timeout, KILL_MARKED kills every process carrying it, and nothing else.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MARKER = "FORGE_SANDBOX_EXEC"
PIDS_FILES = "/sys/fs/cgroup/pids.events /sys/fs/cgroup/pids/pids.events"
OOM_FILES = "/sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control"
# cnt KEY FILE...: sum of KEY's values over the readable files into $s ('-': none readable)
COUNT_FUNCTION = (
    'cnt() { k=$1; shift; s=-; for f; do [ -r "$f" ] || continue; [ "$s" = - ] && s=0; '
    'while read -r a b; do [ "$a" = "$k" ] && s=$((s+b)); done < "$f"; done; }'
)
# sh -c WRAPPER sh NONCE CWD CMD...
WRAPPER = (
    COUNT_FUNCTION + "; "
    "n=$1; d=$2; shift 2; "
    'cd "$d" 2>/dev/null || { echo "forge-sandbox: no folder $d" >&2; '
    'printf "%s 125 - - - -\\n" "$n" >&2; exit 125; }; '
    f"cnt max {PIDS_FILES}; p0=$s; cnt oom_kill {OOM_FILES}; o0=$s; "
    '"$@"; rc=$?; '
    f"cnt max {PIDS_FILES}; p1=$s; cnt oom_kill {OOM_FILES}; o1=$s; "
    'printf "%s %s %s %s %s %s\\n" "$n" "$rc" "$p0" "$p1" "$o0" "$o1" >&2; exit $rc'
)
# sh -c KILL_MARKED sh NONCE: SIGKILL every process whose environment holds the marker (dash
# and bash `read` drop the NULs of /proc/PID/environ, which ends without a newline), in
# rounds until none is left; prints the count
KILL_MARKED = (
    "n=$1; c=0; for r in 1 2 3 4 5 6 7 8; do k=0; for p in /proc/[0-9]*; do "
    '[ "${p#/proc/}" = $$ ] && continue; '
    'l=; while read -r l || [ -n "$l" ]; do case "$l" in *'
    + MARKER
    + '="$n"*) kill -9 "${p#/proc/}" 2>/dev/null '
    '&& k=$((k+1)); break;; esac; done 2>/dev/null < "$p/environ"; done; c=$((c+k)); '
    '[ "$k" = 0 ] && break; done; echo "$c"'
)
# sh -c KILL_ALL sh KEEP...: SIGKILL every process but pid 1, the KEEP pids, itself and its
# wrapper (zombies skipped), in rounds (a fork bomb respawns); prints the count and the pids
# counter after
KILL_ALL = (
    COUNT_FUNCTION + "; "
    "c=0; for r in 1 2 3 4 5 6 7 8 9 10; do k=0; for p in /proc/[0-9]*; do q=${p#/proc/}; "
    'case " 1 $$ $PPID $* " in *" $q "*) continue;; esac; '
    'z=; read -r a b z r 2>/dev/null < "$p/stat"; [ "$z" = Z ] && continue; '
    'kill -9 "$q" 2>/dev/null && k=$((k+1)); '
    'done; c=$((c+k)); [ "$k" = 0 ] && break; done; '
    f'cnt max {PIDS_FILES}; echo "$c $s"'
)
# the children of pid 1 at start: the main process (`sleep infinity`), never killed
MAIN_PIDS = (
    'for f in /proc/[0-9]*/stat; do read -r a b c d e 2>/dev/null < "$f" || continue; '
    '[ "$d" = 1 ] && printf "%s " "$a"; done; echo; id -u; id -g'
)
TRAILER = re.compile(
    rb"(?P<nonce>[0-9a-f]{32}) (?P<rc>\d+) (?P<p0>-|\d*) (?P<p1>-|\d*) (?P<o0>-|\d*) "
    rb"(?P<o1>-|\d*)\n?$"
)
STDOUT, STDERR = 1, 2


@dataclass
class Trailer:
    """The wrapper's report: the command's exit code, the counters around it (None: unread)."""

    exit_code: int
    pids_before: int | None
    pids_after: int | None
    oom_before: int | None
    oom_after: int | None

    @property
    def pids_hit(self) -> bool:
        """A fork refused at pids_max during the command; unread counters count as hit."""
        if self.pids_before is None or self.pids_after is None:
            return True
        return self.pids_after > self.pids_before

    @property
    def oom_killed(self) -> bool:
        """The memory cgroup's OOM killer ran during the command (unread: no claim here)."""
        if self.oom_before is None or self.oom_after is None:
            return False
        return self.oom_after > self.oom_before


def new_nonce() -> str:
    return secrets.token_hex(16)


def wrap(command: list[str], cwd: str, nonce: str) -> list[str]:
    """The argv that runs `command` in `cwd` under the wrapper."""
    return ["/bin/sh", "-c", WRAPPER, "sh", nonce, cwd, *command]


def split_trailer(stderr: bytes, nonce: str) -> tuple[bytes, Trailer | None]:
    """stderr without the wrapper's last line, and that line parsed (None: missing)."""
    at = stderr.rfind(nonce.encode())
    match = TRAILER.match(stderr[at:]) if at >= 0 else None
    if match is None:
        return stderr, None

    def number(raw: bytes) -> int | None:
        return int(raw) if raw not in (b"", b"-") else None

    return stderr[:at], Trailer(
        int(match["rc"]),
        number(match["p0"]),
        number(match["p1"]),
        number(match["o0"]),
        number(match["o1"]),
    )


def exec_env(env: dict[str, str], nonce: str) -> list[str]:
    """The exec's environment (laid over the image's): the call's, plus the marker."""
    return [f"{k}={v}" for k, v in env.items()] + [f"{MARKER}={nonce}"]


@dataclass
class Streamed:
    """What one exec stream carried, as it is read (a thread fills it)."""

    max_bytes: int | None
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    on_done: Callable[[], None] | None = None

    def add(self, stream: int, data: bytes) -> None:
        buffer = self.stdout if stream == STDOUT else self.stderr
        if self.max_bytes is not None and stream == STDOUT:
            room = self.max_bytes - len(buffer)
            if len(data) > room:
                self.truncated = True
                data = data[: max(room, 0)]
        buffer.extend(data)


def stream_reader(sock: Any) -> Callable[[int], bytes]:
    """What an exec's stream is read with: the HTTP response's buffered reader when there is
    one, else the socket. Reading the socket under it loses what the reader took in with the
    response's headers: a short command's first frames, or all of them (docker-py#3332)."""
    response = getattr(sock, "_response", None)
    buffered = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if buffered is not None and hasattr(buffered, "read1"):
        read1: Callable[[int], bytes] = buffered.read1
        return read1
    raw = getattr(sock, "_sock", sock)
    recv: Callable[[int], bytes] = raw.recv
    return recv


def read_frames(sock: Any, out: Streamed) -> None:
    """Read the multiplexed stream (8-byte headers: stream, 0, 0, 0, size big-endian) to EOF."""
    read = stream_reader(sock)
    try:
        pending = b""
        while True:
            chunk = read(65536)
            if not chunk:
                break
            pending += chunk
            while len(pending) >= 8:
                size = int.from_bytes(pending[4:8], "big")
                if len(pending) < 8 + size:
                    break
                out.add(pending[0], pending[8 : 8 + size])
                pending = pending[8 + size :]
    except OSError as exc:  # the socket was shut down after a timeout, or the daemon went
        out.error = exc
    finally:
        out.done.set()
        if out.on_done is not None:
            out.on_done()


def abort(sock: Any) -> None:
    """Unblock a reader stuck on a stream a detached process still holds open."""
    raw = getattr(sock, "_sock", sock)
    with contextlib.suppress(OSError):
        raw.shutdown(socket.SHUT_RDWR)


def wait_exit_code(api: Any, exec_id: str, tries: int = 50) -> int | None:
    """The exec's exit code once the daemon has it (a short race after the stream's EOF)."""
    for _ in range(tries):
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        time.sleep(0.02)
    return None
