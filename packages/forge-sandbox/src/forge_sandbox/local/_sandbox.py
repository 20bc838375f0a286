"""LocalSandbox: a pod-like bubblewrap sandbox with cgroup limits (the local backend).

One init (pid 1, a reaping shell, and its `sleep`, both non-dumpable, under the seccomp filter:
see _init) holds the namespaces; every exec joins them with nsenter, under the same filter, and
starts inside its own cgroup leaf under the sandbox's limits. check_init() reads the init back.
stop() kills the whole cgroup (which holds every process of the sandbox, bwrap included) and
removes what start() created.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from forge_gates import Violation
from forge_sandbox._errors import (
    EnvironmentStartTimeoutError,
    SandboxError,
    SandboxStartError,
    SandboxStateError,
    SandboxTransferError,
    SandboxUnavailableError,
    TaskLayoutError,
)
from forge_sandbox._lifecycle import SandboxLifecycle
from forge_sandbox._spec import DEFAULT_PATH, ExecResult, KillReport, SandboxSpec
from forge_sandbox._tar import check_sandbox_path, pack, unpack
from forge_sandbox.local import _bwrap
from forge_sandbox.local._cgroup_detect import detect_limits, limits_kind, sweep_stale
from forge_sandbox.local._cgroups import Cgroup, CgroupDriver, CgroupLimits
from forge_sandbox.local._exec import Leaf, kill_leaf, run_in_leaf
from forge_sandbox.local._hostside import (
    STATE_PREFIX,
    log_tail,
    prepare_workspace,
    remove_tree,
    state_root,
    sweep_stale_folders,
)
from forge_sandbox.local._init import (
    InitCheck,
    ProcessMark,
    SandboxInitChangedError,
    check_marks,
    install_init_programs,
    mark_init,
    read_init,
)
from forge_sandbox.local._proctree import RlimitDriver, SandboxTree, adopt, zombie_children
from forge_sandbox.seccomp import ptrace_filter

DEFAULT_HOST_UID = 100_000
WRITABLE_FIX = "upload below a writable folder (/workspace, /tmp, /logs, /tests, /solution)"
EXEC_OOM_SCORE_ADJ = 500  # the OOM killer takes an exec's process before the sandbox's init
USERNS_HINT = (
    "fix: allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; Ubuntu >= "
    "23.10: sysctl kernel.apparmor_restrict_unprivileged_userns=0) and check `forge-sandbox doctor`"
)


def start_fix(said: str, host_uid: int | None) -> str:
    """The fix for what bubblewrap said, not a guess: a bind source the sandbox uid cannot
    reach is a folder's mode (a 0700 home), not user namespaces."""
    who = f"the sandbox's host uid {host_uid}" if host_uid is not None else "your uid"
    if "Can't find source path" in said or "Permission denied" in said:
        return (
            f"fix: {who} cannot reach a folder bwrap binds (a parent folder's mode, e.g. a "
            "0700 home holding the clone or TMPDIR): set TMPDIR under /tmp, or give the "
            "folder in the way o+x; `forge-sandbox doctor` names it"
        )
    if "No space left" in said:
        return "fix: free disk space in the temp folder (or set TMPDIR elsewhere)"
    return USERNS_HINT


def seccomp_pipe() -> int:
    """A pipe's read end holding the seccomp program (bwrap's `--seccomp FD` reads to EOF)."""
    program = ptrace_filter()
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, program)  # 36 instructions: far below a pipe's buffer
    finally:
        os.close(write_fd)
    return read_fd


class LocalSandbox(SandboxLifecycle):
    """The local backend of the Sandbox protocol (bubblewrap + cgroups + nsenter).

    host_uid: the unprivileged host uid the sandbox runs as when started by root (default
    100000; sandbox uid `spec.uid` maps onto it). Ignored (your own uid) when not root.
    cgroup_view: bind the sandbox's pids cgroup read-only at /sys/fs/cgroup, as a container
    runtime shows a pod its cgroup (the in-process Kubernetes API server's pods use it).
    """

    def __init__(
        self,
        spec: SandboxSpec | None = None,
        *,
        bwrap: str | None = None,
        cgroup_parent: str = "forge-sandbox",
        host_uid: int | None = DEFAULT_HOST_UID,
        state_root: str | os.PathLike[str] | None = None,
        mountinfo: str | None = None,
        cgroup_view: bool = False,
    ) -> None:
        self.spec = spec or SandboxSpec()
        self._bwrap_name = bwrap
        self._cgroup_parent = cgroup_parent
        self._host_uid = host_uid if os.geteuid() == 0 else None
        self._state_root = state_root
        self._mountinfo = mountinfo
        self._cgroup_view = cgroup_view
        self._dir: Path | None = None
        self._cgroup: Cgroup | SandboxTree | None = None
        self._init: asyncio.subprocess.Process | None = None
        self._tools: _bwrap.Tools | None = None
        self._execs = 0
        self._leaves: list[Leaf] = []  # exec leaves that may still hold processes
        self._idle: list[Leaf] = []  # empty exec leaves, for the next execs
        self._hits: set[str] = set()  # limits any exec ran into since start
        self._init_marks: list[ProcessMark] = []  # the init as start() left it (check_init)
        self._limits = ""  # what bounds it: "cgroup v1" | "cgroup v2" | "rlimits"
        self.info: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def _start(self) -> None:
        """Create the sandbox. Fails closed: SandboxUnavailableError / SandboxStartError."""
        spec = self.spec
        # 1. refuse what this backend cannot honour; find bwrap and the cgroups (fail closed)
        if spec.image is not None and spec.rootfs is None:
            raise SandboxError(
                f"local backend: expected `rootfs` (a directory) or no image; found image "
                f"{spec.image!r}; fix: export the image to a folder and pass rootfs=..., "
                "or use an image-based backend"
            )
        if spec.workspace is None and spec.task_name is not None:  # a task with only an image
            raise TaskLayoutError(
                f"task {spec.task_name}: expected the repository in environment/workspace/ (the "
                "local backend copies it to /workspace); found no such folder (the task has only "
                "an image?); fix: add environment/workspace/, or run it on an image-based "
                "backend (--backend docker or kubernetes)"
            )
        if spec.user is not None:
            raise TaskLayoutError(
                f"task {spec.task_name}: expected a numeric user (UID or UID:GID, not 0) for the "
                f"local backend; found user {spec.user!r}; fix: give [agent] user as a UID in "
                "task.toml, or run it on the Docker backend (--backend docker)"
            )
        tools = self._tools = _bwrap.find_tools(self._bwrap_name)
        driver = self._limits_driver()
        await asyncio.to_thread(sweep_stale, driver)
        root = state_root(self._state_root, self._host_uid)  # one the sandbox uid can reach
        await asyncio.to_thread(sweep_stale_folders, root)
        # 2. a private state folder (named after its owner pid, so a kill -9'd owner's folder
        #    is swept by the next start) and workspace copy, owned by the sandbox's host uid
        self._dir = Path(tempfile.mkdtemp(prefix=f"{STATE_PREFIX}{os.getpid()}-", dir=root))
        workspace = self._dir / "workspace"
        await asyncio.to_thread(prepare_workspace, spec.workspace, workspace, self._host_uid)
        if self._host_uid is not None:
            os.chown(self._dir, self._host_uid, self._host_uid)
        init_programs = await asyncio.to_thread(
            install_init_programs, spec.rootfs or Path("/"), self._dir / "init"
        )
        # 3. the sandbox's cgroup (its limits; or, without one, its process trees) and the
        #    init leaf
        limits = CgroupLimits(
            memory_bytes=(spec.memory_mb + (spec.storage_mb or 0)) * 1024 * 1024,  # + tmpfs
            pids_max=spec.pids_max,
            cpu_quota_us=max(1000, int(spec.cpus * 100_000)),
        )
        self._cgroup = driver.create(f"sbx-{os.getpid()}-{secrets.token_hex(4)}", limits)
        self._limits = limits_kind(driver)
        init_leaf = self._cgroup.child("init")
        # 4. bwrap, started inside the leaf as the unprivileged host uid, its command under the
        #    seccomp filter (read from a pipe); wait for READY
        read_fd, write_fd = os.pipe()
        seccomp_fd = seccomp_pipe()
        view = self._cgroup.pids_folder if self._cgroup_view else None
        inner = _bwrap.bwrap_argv(
            tools,
            spec,
            workspace,
            write_fd,
            view,
            seccomp_fd=seccomp_fd,
            init_programs=init_programs,
        )
        argv = _bwrap.join_argv(
            tools, init_leaf.procs_files, spec, [*_bwrap.drop_to(tools, self._host_uid), *inner]
        )
        log_path = self._dir / "bwrap.log"
        try:
            with open(log_path, "wb") as log:
                self._init = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log,
                    pass_fds=(write_fd, seccomp_fd),
                    env={"PATH": DEFAULT_PATH},
                    start_new_session=True,
                )
        finally:
            os.close(write_fd)
            os.close(seccomp_fd)
        adopt(init_leaf, self._init.pid)
        try:
            self.info = await asyncio.wait_for(
                self._await_ready(read_fd, log_path), spec.start_timeout_s
            )
        except TimeoutError:
            raise EnvironmentStartTimeoutError(
                f"sandbox start: expected ready within {spec.start_timeout_s} s; found no "
                f"answer; bwrap said: {log_tail(log_path)!r}; fix: raise start_timeout_s or run "
                "`forge-sandbox doctor`"
            ) from None
        self.info["limits"] = self._limits
        if isinstance(self._cgroup, SandboxTree):
            self._cgroup.bind(self.init_pid)
        if spec.storage_mb is not None:  # copied into the tmpfs: no host copy stays behind
            await asyncio.to_thread(shutil.rmtree, workspace, True)
        # 5. what check_init() compares against: the init, once its sleep runs (a gate: an
        #    init that is traced, dumpable or unfiltered is refused here)
        self._init_marks = await mark_init(init_leaf.pids, self._pidns())

    def _limits_driver(self) -> CgroupDriver | RlimitDriver:
        """What bounds this sandbox (cgroups, or rlimits for a user with none writable)."""
        driver = detect_limits(self._mountinfo, self._cgroup_parent)
        if self._cgroup_view and isinstance(driver, RlimitDriver):
            raise SandboxUnavailableError(
                [
                    Violation(
                        rule="cgroups.view",
                        expected="a cgroup to bind at /sys/fs/cgroup (cgroup_view=True)",
                        found=f"none writable by uid {os.geteuid()} (limits are rlimits)",
                        fix="run as root, or start the sandbox without cgroup_view",
                    )
                ]
            )
        return driver

    async def check_init(self) -> InitCheck:
        """The init's processes are still the ones start() left: same pids and start times,
        same programs and code mappings, none traced, none dumpable, all filtered, no process
        added among them. Raises SandboxInitChangedError listing every difference."""
        self._require_running()
        assert self._cgroup is not None
        leaf = self._cgroup.child("init")
        now = await asyncio.to_thread(read_init, leaf.pids(), self._pidns())
        problems = check_marks(self._init_marks, now)
        if problems:
            raise SandboxInitChangedError(
                "sandbox init: expected the processes start() left "
                f"{[(m.pid, m.comm) for m in self._init_marks]} unchanged, untraced, "
                f"non-dumpable and filtered; found {'; '.join(problems)}; fix: the trial's "
                "commands reached the init: do not score this sandbox's state, start a new one"
            )
        return InitCheck(pids=tuple(m.pid for m in now), programs=tuple(m.exe for m in now))

    def _pidns(self) -> str:
        return f"pid:[{self.info['pid-namespace']}]"

    async def _await_ready(self, read_fd: int, log_path: Path) -> dict[str, Any]:
        assert self._init is not None and self._init.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
        )
        data = b""
        try:
            while True:
                chunk = await reader.read(4096)
                if not chunk:
                    break
                data += chunk
                try:
                    info = json.loads(data)
                    break
                except ValueError:
                    continue
        finally:
            transport.close()
        line = await self._init.stdout.readline()
        if not data or line.decode(errors="replace").strip() != _bwrap.READY:
            await self._init.wait()
            said = log_tail(log_path)
            raise SandboxStartError(
                f"sandbox start: expected bwrap to start; found exit code "
                f"{self._init.returncode}, bwrap said: {said!r}; {start_fix(said, self._host_uid)}"
                + (
                    f"; or the workspace is larger than storage_mb={self.spec.storage_mb}"
                    if self.spec.storage_mb is not None
                    else ""
                )
            )
        return info

    def _cleanup_cancelled(self) -> None:
        """Last resort (a stop cancelled meanwhile): kill the cgroup, remove it and the state
        folder, synchronously."""
        if self._cgroup is not None:
            with contextlib.suppress(OSError, SandboxError):
                self._cgroup.kill()
            with contextlib.suppress(OSError, SandboxError):
                self._cgroup.remove()
            self._cgroup = None
        if self._dir is not None:
            remove_tree(self._dir)
            self._dir = None

    async def _cleanup(self) -> None:
        """Kill every process of the sandbox, remove its cgroups and files."""
        # 1. kill the sandbox's pid 1: the kernel kills every process of its pid namespace,
        #    and bwrap (our child) reaps it, so no zombie is left to the host's init
        alive = self._init is not None and self._init.returncode is None
        if alive and "child-pid" in self.info:
            assert self._init is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._init.wait(), 5)
        # 2. kill whatever is left in the cgroup (exec wrappers on the host side), reap bwrap
        if self._cgroup is not None:
            await asyncio.to_thread(self._cgroup.kill)
        if self._init is not None and self._init.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._init.kill()
            await asyncio.wait_for(self._init.wait(), 10)
        # 3. remove the cgroups (the exec leaves with them) and the private folder
        self._leaves, self._idle = [], []
        if self._cgroup is not None:
            await asyncio.to_thread(self._cgroup.remove)
            self._cgroup = None
        if self._dir is not None:
            await asyncio.to_thread(remove_tree, self._dir)
            self._dir = None

    # -- introspection (tests, doctor, bench) ---------------------------------------------

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def init_pid(self) -> int:
        """Host pid of the sandbox's pid 1 (bwrap's reaper)."""
        return int(self.info["child-pid"])

    @property
    def cgroup(self) -> Cgroup | SandboxTree:
        if self._cgroup is None:
            raise SandboxStateError("cgroup: expected a started sandbox; found none")
        return self._cgroup

    def host_pids(self) -> set[int]:
        """Host pids of every process in the sandbox (its cgroup), init included."""
        return self._cgroup.pids() if self._cgroup is not None else set()

    # -- exec ------------------------------------------------------------------------------

    async def exec(
        self,
        command: str | Sequence[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run `command` in the sandbox (a string runs via `spec.shell -c`)."""
        argv = _bwrap.command_argv(self.spec, command)
        workdir = check_sandbox_path(cwd, allow_root=True) if cwd is not None else self.spec.workdir
        bad = [k for k in (env or {}) if not k or "=" in k or "\0" in k]
        if bad:
            raise ValueError(f"exec env: expected names without '=' or NUL; found {bad!r}")
        merged = {**self.spec.base_env(), **(env or {})}
        return await self._run(argv, workdir, merged, timeout_s or self.spec.exec_timeout_s)

    async def _run(
        self,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        stdin: IO[bytes] | None = None,
        stdout_sink: IO[bytes] | None = None,
    ) -> ExecResult:
        self._require_running()
        assert self._tools is not None and self._cgroup is not None
        if self._idle:  # an earlier exec's leaf, empty (see _exec)
            leaf = self._idle.pop()
        else:
            self._execs += 1
            leaf = Leaf(self._cgroup.child(f"exec-{self._execs}"))
        root = os.geteuid() == 0
        inner = _bwrap.exec_argv(self._tools, self.spec, self.init_pid, cwd, env, argv, root=root)
        join = _bwrap.exec_join(
            self.spec,
            leaf.group.procs_files,
            self.init_pid,
            EXEC_OOM_SCORE_ADJ,
            root=root,
            rlimits=isinstance(self._cgroup, SandboxTree),
        )
        self._leaves.append(leaf)
        result = await run_in_leaf(
            inner,
            leaf,
            timeout_s,
            self.spec.max_output_bytes,
            stdin,
            stdout_sink,
            filtered=(self._tools.python, _bwrap.FILTER_HEX),
            join=join,
        )
        self._record(result.oom_killed, result.pids_limit_hit, result.file_size_limit_hit)
        # nothing of it left running, and not taken by kill_processes meanwhile (which
        # removes the leaves it kills): the next exec's leaf
        if any(held is leaf for held in self._leaves) and not leaf.group.pids():
            self._leaves = [held for held in self._leaves if held is not leaf]
            self._idle.append(leaf)
        return result

    def _record(self, oom: bool, pids: bool, file_size: bool) -> None:
        for name, hit in (("memory", oom), ("pids", pids), ("file_size", file_size)):
            if hit:
                self._hits.add(name)

    async def kill_processes(self) -> KillReport:
        """Kill every exec's leaf (its leftover and in-flight processes), keep the init and
        the files; report the processes killed and the limits hit since start()."""
        self._require_running()
        killed = 0
        leaves, self._leaves = self._leaves, []
        for leaf in leaves:
            if not leaf.group.exists():
                continue  # retired: its exec failed and took what it started with it
            self._record(*leaf.hits(), False)
            killed += await asyncio.to_thread(kill_leaf, leaf.group)
        if isinstance(self._cgroup, SandboxTree):  # what left its exec's tree (a daemon)
            killed += await asyncio.to_thread(_kill_strays, self._cgroup)
            await _reaped(self.init_pid)
        return KillReport(
            killed=killed,
            oom_killed="memory" in self._hits,
            pids_limit_hit="pids" in self._hits,
            file_size_limit_hit="file_size" in self._hits,
        )

    async def check_alive(self) -> None:
        """SandboxStateError unless started, not stopped, and its init process still running
        (read from /proc: not gone, not a zombie)."""
        self._require_running()
        state = _process_state(self.init_pid)
        if state in ("", "Z", "X"):
            raise SandboxStateError(
                f"expected the sandbox's init (pid {self.init_pid}) alive; found it "
                f"{'gone' if not state else 'exited'}; fix: stop() and start a new sandbox"
            )

    def _require_running(self) -> None:
        if self._state != "running":
            raise SandboxStateError(
                f"expected a running sandbox; found state {self._state!r}; "
                "fix: call start() (or use `async with`) before exec/upload/download"
            )
        if self._init is not None and self._init.returncode is not None:
            raise SandboxStateError(
                f"expected the sandbox's init alive; found it exited "
                f"({self._init.returncode}); fix: stop() and start a new sandbox"
            )

    # -- files -----------------------------------------------------------------------------

    async def upload(self, local_path: str | os.PathLike[str], sandbox_path: str) -> None:
        """Copy a host file or folder to `sandbox_path` (created; folders are merged)."""
        target = check_sandbox_path(sandbox_path)
        parent, name = os.path.split(target)
        with tempfile.TemporaryFile() as archive:
            await asyncio.to_thread(pack, Path(local_path), name, archive)
            untar = 'mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-overwrite-dir'
            result = await self._untar(untar, parent or "/", archive)
        if result.exit_code != 0:
            raise SandboxTransferError(
                f"upload {local_path} -> {target}: expected tar to succeed; found exit "
                f"{result.exit_code}: {result.stderr.strip()!r}; fix: "
                + (_limit_fix(result, self.spec) or WRITABLE_FIX)
            )

    async def extract(self, archive: str | os.PathLike[str], sandbox_dir: str) -> None:
        """Unpack a host tar into the folder `sandbox_dir` as the exec user, modes kept."""
        target = check_sandbox_path(sandbox_dir, allow_root=True)
        with open(archive, "rb") as data:
            result = await self._untar('exec tar -x -p -f - -C "$1"', target, data)
        if result.exit_code != 0:
            raise SandboxTransferError(
                f"extract {archive} -> {target}: expected tar to unpack it; found exit "
                f"{result.exit_code}: {result.stderr.strip()[-300:]!r}; fix: "
                + (_limit_fix(result, self.spec) or WRITABLE_FIX)
            )

    async def _untar(self, script: str, folder: str, archive: IO[bytes]) -> ExecResult:
        """`script` (sh: $1 the folder) with the archive on stdin, as the exec user, owners
        never taken from the archive."""
        return await self._run(
            ["/bin/sh", "-c", f"{script} --no-same-owner", "sh", folder],
            "/",
            self.spec.base_env(),
            self.spec.exec_timeout_s,
            stdin=archive,
        )

    async def download(self, sandbox_path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a sandbox file or folder to `local_path`, refusing escaping entries."""
        source = check_sandbox_path(sandbox_path)
        parent, name = os.path.split(source)
        with tempfile.TemporaryFile() as archive:
            result = await self._run(
                ["tar", "-c", "-f", "-", "-C", parent or "/", "--", name],
                "/",
                self.spec.base_env(),
                self.spec.exec_timeout_s,
                stdout_sink=archive,
            )
            if result.exit_code != 0:
                raise SandboxTransferError(
                    f"download {source}: expected tar to succeed; found exit "
                    f"{result.exit_code}: {result.stderr.strip()!r}; fix: "
                    + (_limit_fix(result, self.spec) or "check the path exists")
                )
            archive.seek(0)
            await asyncio.to_thread(unpack, archive, name, Path(local_path))


def _kill_strays(sandbox: SandboxTree) -> int:
    """Kill the sandbox's processes that are not its init's (rlimits: no cgroup keeps a
    daemonized process in its exec's leaf); the number killed."""
    init = sandbox.child("init")
    strays = sandbox.pids() - init.pids()
    if strays:
        sandbox.kill(10.0, frozenset(init.pids()))
    return len(strays)


async def _reaped(init_pid: int, timeout_s: float = 5.0) -> None:
    """Wait until the sandbox's pid 1 has reaped what was killed: its zombies still count
    against RLIMIT_NPROC, and the next exec's fork would be refused (rlimits only)."""
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(zombie_children, init_pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def _process_state(pid: int) -> str:
    """The state letter /proc/PID/stat shows (R, S, Z, ...), or '' when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def _limit_fix(result: ExecResult, spec: SandboxSpec) -> str | None:
    """The fix for a transfer that failed because the sandbox was at a limit, else None."""
    fixes = {
        "pids": f"the sandbox is at pids_max={spec.pids_max} (forks refused): kill what runs "
        "in it first (Sandbox.kill_processes(), as run_trial does before the verifier)",
        "memory": f"the sandbox is at its memory limit ({spec.memory_mb} MiB, /tmp included): "
        "kill what runs in it (Sandbox.kill_processes()) or raise memory_mb",
        "file_size": f"a file passed file_size_mb={spec.file_size_mb}: raise file_size_mb",
    }
    hit = result.limit_hit
    return fixes[hit] if hit is not None else None
