"""Command lines of the local backend (pure functions, unit-tested without running anything).

Init (once per sandbox):
    sh JOIN(init leaf, rlimits) -> [setpriv: drop to the sandbox's host uid] -> bwrap
    --as-pid-1 ... INIT_DIR/sh (pid 1: reaps) -> sleep infinity (both execute-only: see _init)
Exec (per command):
    [spawned by the spawner, _seccomp_exec.py --serve: no_new_privs + the seccomp filter, once
    per host process; its child joins the exec leaf, sets the rlimits and enters bwrap's outer
    user namespace: exec_join] nsenter -t INIT (all namespaces, its root, cwd, uid/gid) ->
    env -i ENV... -> COMMAND

Both get the seccomp filter of forge_sandbox.seccomp (ptrace, process_vm_readv/writev,
pidfd_getfd and kcmp fail with EPERM): the init through bwrap's `--seccomp FD`, each exec
as children of the spawner that installed it (nsenter joins the init's namespaces, not its
filter).

Why each bwrap flag (see README): `--unshare-all` (pid, net, ipc, uts, cgroup, mount namespaces:
no network but a private loopback), `--unshare-user --uid/--gid` (an unprivileged user inside),
`--disable-userns` (no nested user namespace to regain capabilities), `--cap-drop ALL` (as
root, bwrap would otherwise keep every capability and could remount host files read-write),
`--die-with-parent` (nothing outlives the Python process), `--new-session` (no terminal
injection), `--clearenv`, `--tmpfs /` + read-only binds + `--remount-ro /` (only /workspace,
/tmp, /logs, /tests and /solution are writable, and only /workspace is a host folder; with
`storage_mb`, /workspace and /tmp are tmpfs of that size instead: see bwrap_argv).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_gates import Violation
from forge_sandbox._errors import INSTALL_BWRAP, SandboxUnavailableError
from forge_sandbox._spec import DEFAULT_PATH, SCRATCH_DIRS, SandboxSpec
from forge_sandbox.local._cgroup_detect import detect_limits
from forge_sandbox.local._init import INIT_DIR, init_script
from forge_sandbox.local._seccomp_exec import JOIN_FAILED
from forge_sandbox.seccomp import ptrace_filter

READY = "forge-sandbox-ready"
SEED = "/.forge-workspace-seed"  # storage_mb: the host copy, read-only, copied into the tmpfs
HOST_ENTRIES = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
ROOTFS_SKIP = frozenset(
    {"dev", "proc", "sys", "tmp", "run", "workspace", "logs", "tests", "solution", ".forge-init"}
)
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
FILTER_HEX = ptrace_filter().hex()  # what every exec installs (bwrap reads the same bytes)
# sh -c JOIN sh N PROCS... NOFILE FSIZE_BLOCKS OOM_ADJ CMD...: join the cgroup leaf, set rlimits
# and the OOM score (execs are killed before the init), then exec CMD. Exit 125 + marker if not.
JOIN_SCRIPT = (
    'fail() { echo "' + JOIN_FAILED + '" >&2; exit 125; }; '
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || fail; shift; n=$((n-1)); done; '
    'ulimit -c 0 && ulimit -n "$1" && ulimit -f "$2" && echo "$3" > /proc/self/oom_score_adj '
    '|| fail; shift 3; exec "$@"'
)


@dataclass(frozen=True)
class Tools:
    """Absolute paths of the host programs the local backend runs (python: the interpreter
    that installs each exec's seccomp filter, this one)."""

    bwrap: str
    nsenter: str
    setpriv: str
    sh: str
    python: str = sys.executable


def find_tools(bwrap: str | None = None) -> Tools:
    """Locate bwrap, nsenter, setpriv and sh; one error lists everything missing."""
    found = {
        "bwrap": shutil.which(bwrap or "bwrap"),
        "nsenter": shutil.which("nsenter"),
        "setpriv": shutil.which("setpriv"),
        "sh": shutil.which("sh") or ("/bin/sh" if os.path.exists("/bin/sh") else None),
    }
    fixes = {
        "bwrap": INSTALL_BWRAP,
        "nsenter": "apt-get install -y util-linux",
        "setpriv": "apt-get install -y util-linux",
        "sh": "apt-get install -y dash",
    }
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise SandboxUnavailableError(
            Violation(
                rule=f"tools.{name}",
                expected=f"an executable `{bwrap if name == 'bwrap' and bwrap else name}` "
                "(no unsandboxed fallback exists)",
                found="not found on PATH",
                fix=fixes[name],
            )
            for name in missing
        )
    return Tools(**{k: str(v) for k, v in found.items()})


def host_problems(bwrap: str | None = None) -> list[Violation]:
    """What this host lacks for the local backend (its programs; as root, writable cgroups),
    each with its fix; [] when sandboxes can run here (a user other than root without a
    writable cgroup gets rlimits: `_proctree`). The recipes' preflight and the test suites'
    isolation fixture ask this (`doctor` probes each piece itself)."""
    problems: list[Violation] = []
    for check in (lambda: find_tools(bwrap), detect_limits):
        try:
            check()
        except SandboxUnavailableError as exc:
            problems += exc.violations
    return problems


def root_binds(spec: SandboxSpec) -> list[str]:
    """Read-only binds (and links) that make up `/`: host /usr + /etc, or every rootfs entry."""
    root = spec.rootfs if spec.rootfs is not None else Path("/")
    names = (
        HOST_ENTRIES
        if spec.rootfs is None
        else sorted(n for n in os.listdir(root) if n not in ROOTFS_SKIP)
    )
    args: list[str] = []
    for name in names:
        path = root / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir() or path.is_file():
            args += ["--ro-bind", str(path), f"/{name}"]
    return args


def bwrap_argv(
    tools: Tools,
    spec: SandboxSpec,
    workspace: Path,
    info_fd: int,
    cgroup_view: Path | None = None,
    *,
    seccomp_fd: int | None = None,
    init_programs: Path | None = None,
) -> list[str]:
    """The bwrap command line of a sandbox's init (pid 1 prints READY, then reaps; see _init).

    cgroup_view: a host cgroup folder bound read-only at /sys/fs/cgroup (what a container
    runtime shows a pod: its own cgroup's counters, e.g. pids.events).
    seccomp_fd: a readable fd holding `ptrace_filter()` (bwrap applies it to pid 1, whose
    children inherit it). init_programs: the host folder of the execute-only sh and sleep
    (bound at INIT_DIR). LocalSandbox passes both; without the folder the init cannot start."""
    args = [tools.bwrap, "--info-fd", str(info_fd), "--die-with-parent", "--new-session"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--as-pid-1"]  # pid 1 is the non-dumpable init, not bwrap's (dumpable) reaper
    args += ["--unshare-all", "--unshare-user", "--disable-userns"]
    if spec.network == "host":
        args += ["--share-net"]
    args += ["--uid", str(spec.uid), "--gid", str(spec.gid), "--cap-drop", "ALL"]
    args += ["--clearenv", "--setenv", "PATH", DEFAULT_PATH, "--hostname", spec.hostname]
    args += ["--tmpfs", "/", *root_binds(spec), "--dev", "/dev", "--proc", "/proc"]
    size = [] if spec.storage_mb is None else ["--size", str(spec.storage_mb * 1024 * 1024)]
    for directory in SCRATCH_DIRS:
        args += [*(size if directory == "/tmp" else []), "--tmpfs", directory]
    for directory in LOG_DIRS:
        args += ["--dir", directory]
    if spec.storage_mb is None:
        args += ["--bind", str(workspace), "/workspace"]
        seed = None
    else:  # a size-limited tmpfs (ENOSPC past storage_mb), filled from the host copy
        args += [*size, "--tmpfs", "/workspace", "--ro-bind", str(workspace), SEED]
        seed = SEED
    if cgroup_view is not None:
        args += ["--ro-bind", str(cgroup_view), "/sys/fs/cgroup"]
    if init_programs is not None:
        args += ["--ro-bind", str(init_programs), INIT_DIR]
    args += ["--remount-ro", "/", "--chdir", "/workspace"]
    args += ["--", f"{INIT_DIR}/sh", "-c", init_script(READY, seed)]
    return args


def drop_to(tools: Tools, host_uid: int | None) -> list[str]:
    """Prefix that makes bwrap run as an unprivileged host uid (when we are root)."""
    if host_uid is None:
        return []
    ids = str(host_uid)
    return [tools.setpriv, "--reuid", ids, "--regid", ids, "--clear-groups", "--"]


def join_argv(
    tools: Tools,
    procs_files: Sequence[Path],
    spec: SandboxSpec,
    argv: Sequence[str],
    oom_score_adj: int = 0,
) -> list[str]:
    """Wrap `argv` so it starts inside the cgroup leaf, under the rlimits (core 0)."""
    fsize_blocks = spec.file_size_mb * 2048  # dash counts -f in 512-byte blocks
    return [
        tools.sh,
        "-c",
        JOIN_SCRIPT,
        "sh",
        str(len(procs_files)),
        *map(str, procs_files),
        str(spec.open_files),
        str(fsize_blocks),
        str(oom_score_adj),
        *argv,
    ]


def exec_join(
    spec: SandboxSpec,
    procs_files: Sequence[Path],
    init_pid: int,
    oom_score_adj: int = 0,
    *,
    root: bool,
    rlimits: bool = False,
) -> dict[str, Any]:
    """What the spawner's child does before it execs nsenter (`_seccomp_exec.join`): join the
    cgroup leaf, set the rlimits (core 0, open files, file size), the OOM score, and, as a
    user other than root, enter the user namespace that owns the init's mount namespace
    (bwrap's outer one, which that user made). `rlimits` (no cgroup: `_proctree`): the
    sandbox's limits as rlimits too, pids_max as RLIMIT_NPROC (counted per user namespace:
    per sandbox) and the memory limit as RLIMIT_DATA (per process)."""
    limits: list[list[str | int]] = [
        ["core", 0],
        ["nofile", spec.open_files],
        ["fsize", spec.file_size_mb * 1024 * 1024],
    ]
    if rlimits:
        limits += [["nproc", spec.pids_max], ["data", spec.memory_mb * 1024 * 1024]]
    return {
        "procs": [str(p) for p in procs_files],
        "rlimits": limits,
        "oom_score_adj": oom_score_adj,
        "userns_of": None if root else f"/proc/{init_pid}/ns/mnt",
    }


def exec_argv(
    tools: Tools,
    spec: SandboxSpec,
    init_pid: int,
    cwd: str,
    env: Mapping[str, str],
    command: Sequence[str],
    *,
    root: bool = True,
) -> list[str]:
    """Join the running sandbox's namespaces as its user, with exactly `env`, and run
    `command` (spawned under no_new_privs and the seccomp filter by _spawner).

    As root, nsenter becomes the sandbox's uid/gid and drops every supplementary group. As
    another user it keeps that user's ids (`--preserve-credentials`): bwrap maps exactly that
    user to the sandbox's uid/gid, and its user namespaces deny setgroups (nsenter's would
    fail), so the user's supplementary groups stay, as they stay on the sandbox's init."""
    namespaces = ["-U", "-m", "-u", "-i", "-n", "-p", "-C"]
    if not root and spec.network == "host":  # the host's own: this user may not setns to it
        namespaces.remove("-n")  # (it is in it already)
    ids = ["-S", str(spec.uid), "-G", str(spec.gid)] if root else ["--preserve-credentials"]
    return [
        tools.nsenter,
        "-t",
        str(init_pid),
        *namespaces,
        "-r",
        "-W",
        cwd,
        *ids,
        "--",
        "/usr/bin/env",
        "-i",
        "--",
        *(f"{key}={value}" for key, value in env.items()),
        *command,
    ]


def command_argv(spec: SandboxSpec, command: str | Sequence[str]) -> list[str]:
    """A string runs through `spec.shell -c`; a sequence is run as is."""
    if isinstance(command, str):
        return [spec.shell, "-c", command]
    argv = [str(part) for part in command]
    if not argv:
        raise ValueError("exec: expected a command; found an empty argument list")
    if "=" in argv[0]:
        raise ValueError(
            f"exec: the program name {argv[0]!r} contains '='; fix: use its absolute path"
        )
    return argv
