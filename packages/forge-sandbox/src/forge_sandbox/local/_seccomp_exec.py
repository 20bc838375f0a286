"""Install a seccomp filter, then exec a program: the first step of every local exec.

    python -I -S _seccomp_exec.py PROGRAM_HEX -- /usr/bin/nsenter -t PID ... -- COMMAND

Execs enter a running sandbox with nsenter, not through bwrap, so they do not inherit the
filter bwrap gave the sandbox's init; this script gives it to them. It sets no_new_privs
(as `setpriv --no-new-privs` did), installs the filter (seccomp(2), SECCOMP_MODE_FILTER), and
execs the rest (SIGPIPE and SIGXFSZ back to their default actions, which Python's startup
ignores): nsenter and everything the command starts inherit both, across fork and exec, for
good. The host's own Python runs it (`-I -S`: no site, no environment), so it imports the
standard library only. Exit 125 with FILTER_FAILED on stderr when the kernel refuses.
"""

from __future__ import annotations

import ctypes
import os
import signal
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


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(f"{FILTER_FAILED}: usage: PROGRAM_HEX -- PROGRAM [ARGS...]", file=sys.stderr)
        return 125
    try:
        install(bytes.fromhex(argv[1]))
    except (OSError, ValueError) as exc:
        print(f"{FILTER_FAILED}: {exc}", file=sys.stderr)
        return 125
    # Python ignores SIGPIPE and SIGXFSZ at startup, and an ignored signal stays ignored
    # across exec: give the command the default actions a shell would have given it
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_DFL)
    try:
        os.execv(argv[3], argv[3:])
    except OSError as exc:
        print(f"forge-sandbox: cannot run {argv[3]}: {exc}", file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv))
