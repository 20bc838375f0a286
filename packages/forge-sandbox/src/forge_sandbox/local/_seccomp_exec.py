"""The spawner of local execs: installs a seccomp filter once, then spawns every exec under it.

    python -I -S _seccomp_exec.py PROGRAM_HEX --serve     (fd 0: a SOCK_SEQPACKET socket)

forge_sandbox.local._spawner starts one per host process. Execs enter a running sandbox with
nsenter, not through bwrap, so they do not inherit the filter bwrap gave the sandbox's init;
as the spawner's children they inherit its filter and no_new_privs (as `setpriv
--no-new-privs` did), across fork and exec, for good; one Python start in all instead of one
per exec. Each request is a JSON `{"id", "argv", "env"}` with three file descriptors
(stdin, stdout, stderr) attached; the answer is `{"id", "pid"}` (or `{"id", "error"}`), and
once the child exited `{"pid", "status"}` (its raw wait status: the spawner reaps every child).
Its first message is `{"ready": true}`, or `{"error": FILTER_FAILED ...}` when the kernel
refused the filter. It exits when the host closes the socket. Children get SIGPIPE and
SIGXFSZ back at their default actions (Python's startup ignores both, and an ignored signal
stays ignored across exec) and a session of their own. The host's own Python runs it (`-I -S`:
no site, no environment), so it imports the standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import socket
import sys

FILTER_FAILED = "forge-sandbox: installing the seccomp filter failed"
PR_SET_NO_NEW_PRIVS = 38  # <linux/prctl.h>
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2  # <linux/seccomp.h>


class _SockFprog(ctypes.Structure):
    """struct sock_fprog { unsigned short len; struct sock_filter *filter; }"""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes) -> None:
    """no_new_privs + the filter on the calling thread (and everything it starts later)."""
    if not program or len(program) % 8:
        raise ValueError(f"expected a cBPF program (8-byte instructions); found {len(program)} B")
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    for step, args in (
        ("prctl(PR_SET_NO_NEW_PRIVS)", (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)),
        ("prctl(PR_SET_SECCOMP)", (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)),
    ):
        if libc.prctl(*args) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{step}: {os.strerror(errno)}")


def _send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def _spawn(sock: socket.socket) -> bool:
    """One request: spawn its argv on its three descriptors; False when the host has gone."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
    except ConnectionError:
        return False
    for fd in fds:  # recv_fds does not pass MSG_CMSG_CLOEXEC on: no copy may reach the exec
        os.set_inheritable(fd, False)
    if not data:
        return False
    request: object = None
    try:
        request = json.loads(data)
        if len(fds) != 3 or not isinstance(request, dict):
            raise ValueError(f"expected a request and 3 file descriptors; found {len(fds)}")
        pid = _fork_exec(request["argv"], request["env"], fds)
        _send(sock, {"id": request.get("id"), "pid": pid})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _send(sock, {"id": request.get("id") if isinstance(request, dict) else None,
                     "error": f"{type(exc).__name__}: {exc}"})  # fmt: skip
    finally:
        for fd in fds:
            os.close(fd)
    return True


def _fork_exec(argv: list[str], env: dict[str, str], fds: list[int]) -> int:
    """Fork, and in the child: a session of its own, the three descriptors, a shell's signal
    defaults, exec. An exec that fails is reported through a pipe and raised here."""
    if not argv:
        raise ValueError("expected a command; found an empty argv")
    errors_read, errors_write = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: nothing here returns
        try:
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
                signal.signal(number, signal.SIG_DFL)
            os.execve(argv[0], argv, env)
        except BaseException as exc:  # reported to the parent, whatever it is
            os.write(errors_write, f"{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(127)
    os.close(errors_write)
    try:
        failed = os.read(errors_read, 4096)  # empty: the exec closed it (close-on-exec)
    finally:
        os.close(errors_read)
    if failed:
        os.waitpid(pid, 0)
        raise OSError(f"cannot run {argv[0]}: {failed.decode(errors='replace')}")
    return pid


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"pid": pid, "status": status})


def serve(program_hex: str) -> int:
    """The spawner's loop (see the module's docstring)."""
    sock = socket.socket(fileno=0)
    try:
        install(bytes.fromhex(program_hex))
    except (OSError, ValueError) as exc:
        _send(sock, {"error": f"{FILTER_FAILED}: {exc}"})
        return 125
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the pipe
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    _send(sock, {"ready": True})
    while True:
        for key, _events in selector.select():
            if key.fileobj is sock:
                if not _spawn(sock):
                    return 0
            else:
                while True:
                    try:
                        if not os.read(wake_read, 512):
                            break
                    except BlockingIOError:
                        break
        _reap(sock)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[2] != "--serve":
        print(f"{FILTER_FAILED}: usage: PROGRAM_HEX --serve", file=sys.stderr)
        return 125
    try:
        return serve(argv[1])
    except (BrokenPipeError, ConnectionResetError):  # the host went away mid-answer
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
