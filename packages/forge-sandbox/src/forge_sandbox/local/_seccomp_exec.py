"""The spawner of local execs: installs a seccomp filter once, then spawns every exec under it.

    python -I -S _seccomp_exec.py PROGRAM_HEX --serve     (fd 0: a SOCK_SEQPACKET socket)

forge_sandbox.local._spawner starts one per host process. Execs enter a running sandbox with
nsenter, not through bwrap, so they do not inherit the filter bwrap gave the sandbox's init;
as the spawner's children they inherit its filter and no_new_privs (as `setpriv
--no-new-privs` did), across fork and exec, for good; one Python start in all instead of one
per exec. Each request is a JSON `{"id", "argv", "env"}` with three file descriptors
(stdin, stdout, stderr) attached; the answer is `{"id", "pid"}` (or `{"id", "error"}`), and
once the child exited `{"pid", "status"}` (its raw wait status: the spawner reaps every child).
A request may carry `"join"`: what the child does before it execs, in this order (a failure is
answered as `{"id", "error": JOIN_FAILED ...}` and nothing runs): write its pid to each of
`procs` (a cgroup leaf's `cgroup.procs` files), set `rlimits` ([name, value]: soft = hard),
write `oom_score_adj`, and (a user other than root) enter `userns_of`'s owning user namespace
(NS_GET_USERNS of a namespace file: the sandbox init's /proc/PID/ns/mnt). bwrap's outer user
namespace owns the sandbox's other namespaces, the init runs in one nested in it, and nsenter
(util-linux < 2.39) joins only the init's: without root's capabilities it cannot join the
others. The outer one maps its root to the user that ran bwrap, who keeps every capability
there across the exec of nsenter, which then joins the other namespaces and the nested one.
Root needs none of it (nsenter joins the others first, with root's capabilities), and cannot
take this path: the init's mm belongs to the host's user namespace (its programs are root's,
execute-only: see _init), so only root may open its namespace files.
Its first message is `{"ready": true}`, or `{"error": FILTER_FAILED ...}` when the kernel
refused the filter. It exits when the host closes the socket. Children get every signal
back at its default action (Python's startup ignores SIGPIPE and SIGXFSZ, a background job of
a shell SIGINT and SIGQUIT, and an ignored signal stays ignored across exec) and a session of
their own. The host's own Python runs it (`-I -S`:
no site, no environment), so it imports the standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import json
import os
import resource
import selectors
import signal
import socket
import sys

FILTER_FAILED = "forge-sandbox: installing the seccomp filter failed"
JOIN_FAILED = "forge-sandbox: joining the cgroup / setting rlimits failed"  # as _bwrap's
NS_GET_USERNS = 0xB701  # <linux/nsfs.h>: _IO(0xb7, 0x1), the user namespace owning a namespace
CLONE_NEWUSER = 0x10000000
RLIMITS = {"core": "RLIMIT_CORE", "nofile": "RLIMIT_NOFILE", "fsize": "RLIMIT_FSIZE",
           "nproc": "RLIMIT_NPROC", "data": "RLIMIT_DATA"}  # fmt: skip
PR_SET_NO_NEW_PRIVS = 38  # <linux/prctl.h>
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2  # <linux/seccomp.h>


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    """struct sock_fprog { unsigned short len; struct sock_filter *filter; }"""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes) -> None:
    """no_new_privs + the filter on the calling thread (and everything it starts later)."""
    if not program or len(program) % 8:
        raise ValueError(f"expected a cBPF program (8-byte instructions); found {len(program)} B")
    libc = _libc()
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
        pid = _fork_exec(request["argv"], request["env"], fds, request.get("join"))
        _send(sock, {"id": request.get("id"), "pid": pid})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        said = str(exc) if str(exc).startswith(JOIN_FAILED) else f"{type(exc).__name__}: {exc}"
        _send(sock, {"id": request.get("id") if isinstance(request, dict) else None,
                     "error": said})  # fmt: skip
    finally:
        for fd in fds:
            os.close(fd)
    return True


def join(spec: dict) -> None:
    """In the child, before it execs: the cgroup leaf, the rlimits, the OOM score, the user
    namespace owning the sandbox's namespaces (see the module's docstring)."""
    try:
        for path in spec.get("procs", ()):
            with open(path, "w") as handle:
                handle.write(str(os.getpid()))
        for name, value in spec.get("rlimits", ()):
            limit = getattr(resource, RLIMITS[name])
            resource.setrlimit(limit, (value, value))
        if "oom_score_adj" in spec:
            with open("/proc/self/oom_score_adj", "w") as handle:
                handle.write(str(spec["oom_score_adj"]))
        if spec.get("userns_of"):
            namespace = os.open(spec["userns_of"], os.O_RDONLY | os.O_CLOEXEC)
            owner = fcntl.ioctl(namespace, NS_GET_USERNS)
            os.close(namespace)
            if _libc().setns(owner, CLONE_NEWUSER) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns(the owner of {spec['userns_of']}): "
                              f"{os.strerror(errno)}")  # fmt: skip
            os.close(owner)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OSError(f"{JOIN_FAILED}: {type(exc).__name__}: {exc}") from exc


def _fork_exec(
    argv: list[str], env: dict[str, str], fds: list[int], joining: dict | None = None
) -> int:
    """Fork, and in the child: a session of its own, the three descriptors, a shell's signal
    defaults, `joining` (see join), exec. A child that fails is reported through a pipe and
    raised here."""
    if not argv:
        raise ValueError("expected a command; found an empty argv")
    errors_read, errors_write = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the child: nothing here returns
        try:
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for number in signal.valid_signals():  # every disposition back to its default
                with contextlib.suppress(OSError, ValueError):  # SIGKILL, SIGSTOP, libc's own
                    signal.signal(number, signal.SIG_DFL)
            if joining:
                join(joining)
            os.execve(argv[0], argv, env)
        except BaseException as exc:  # reported to the parent, whatever it is
            said = str(exc) if str(exc).startswith(JOIN_FAILED) else f"{type(exc).__name__}: {exc}"
            os.write(errors_write, said.encode())
        finally:
            os._exit(127)
    os.close(errors_write)
    try:
        failed = os.read(errors_read, 4096)  # empty: the exec closed it (close-on-exec)
    finally:
        os.close(errors_read)
    if failed:
        os.waitpid(pid, 0)
        said = failed.decode(errors="replace")
        raise OSError(said if said.startswith(JOIN_FAILED) else f"cannot run {argv[0]}: {said}")
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
