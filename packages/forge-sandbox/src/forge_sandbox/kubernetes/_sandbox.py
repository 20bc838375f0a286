"""KubernetesSandbox: the Sandbox protocol on one pod per trial (official client).

start(): the trial's manifests (validated) -> NetworkPolicy -> Pod -> wait for Ready (pull
failures, eviction, OOM and the timeout are typed infrastructure errors) -> a probe that the pod
shows its pids counter (a pids limit the backend cannot observe is refused, never reported as
not hit). exec/upload/download go over the exec websocket (see _exec). stop() deletes what
start() created, also when cancelled again meanwhile (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from forge_sandbox._errors import (
    SandboxError,
    SandboxStartError,
    SandboxStateError,
    SandboxTransferError,
    TaskLayoutError,
)
from forge_sandbox._lifecycle import SandboxLifecycle, kill_in_one_process
from forge_sandbox._spec import ExecResult, KillReport, SandboxSpec
from forge_sandbox._tar import check_sandbox_path, pack, unpack
from forge_sandbox.kubernetes import _exec
from forge_sandbox.kubernetes._api import KubeApi
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._errors import (
    ExecProtocolError,
    ExecStreamLostError,
    ImagePullBackOffError,
    KubernetesAPIError,
    PodEvictedError,
    PodFailedError,
    PodOOMKilledError,
    PodPendingTimeoutError,
    SeccompProfileError,
)
from forge_sandbox.kubernetes._manifests import CONTAINER, render
from forge_sandbox.kubernetes._seccomp import INSTALL_COMMAND
from forge_sandbox.seccomp import LOCALHOST_PROFILE

PULL_FAILURES = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}
)
# the kubelet cannot create the container (e.g. runAsNonRoot and an image whose user is root):
# it would wait forever, so the trial fails at once (an infrastructure error, never reward 0)
CONFIG_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError"})
# sh -c KILL_SCRIPT, the exec's only process: SIGKILL every process but pid 1, itself and the
# pod's main process (the oldest `sleep infinity`; `read` drops a cmdline's NULs), zombies
# skipped, in rounds (a fork bomb respawns); prints the count and the pids counter after. Shell
# built-ins only: it runs where the agent's processes hold every pid but one
KILL_SCRIPT = (
    _exec.PIDS_FUNCTION + "; "
    "main=; for d in /proc/[0-9]*; do p=${d#/proc/}; l=; "
    'read -r l < "$d/cmdline" 2>/dev/null; [ "$l" = sleepinfinity ] && '
    '{ [ -z "$main" ] || [ "$p" -lt "$main" ]; } && main=$p; done; '
    'keep=" 1 $main $$ "; '
    "n=0; for r in 1 2 3 4 5 6 7 8 9 10; do k=0; for d in /proc/[0-9]*; do p=${d#/proc/}; "
    'case "$keep" in *" $p "*) continue;; esac; '
    'z=; read -r a b z c 2>/dev/null < "$d/stat"; [ "$z" = Z ] && continue; '
    'kill -9 "$p" 2>/dev/null && k=$((k+1)); done; n=$((n+k)); [ "$k" = 0 ] && break; done; '
    'printf "%s " "$n"; pids'
)


class KubernetesSandbox(SandboxLifecycle):
    """The Kubernetes backend of the Sandbox protocol (one pod per trial).

    `image` is the pod's image (from the images report; see `open_backend`). `api` may be
    shared by the sandboxes of one job (its exec client is separate from plain calls).
    """

    def __init__(
        self,
        spec: SandboxSpec,
        config: KubernetesConfig,
        image: str,
        *,
        api: KubeApi | None = None,
    ) -> None:
        self.spec = spec
        self.config = config
        self.image = image
        self._api = api
        self._own_api = api is None
        self._pod: str | None = None
        self._policy: str | None = None
        self._dead: str | None = None  # why the pod can no longer run commands
        self._hits: set[str] = set()
        self._pids_baseline: int | None = None
        self.manifests = render(spec, config, image)
        self.pod_name = self.manifests[0]["metadata"]["name"]

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(self.config)
        return self._api

    # -- lifecycle -------------------------------------------------------------------------

    async def _start(self) -> None:
        """Create the NetworkPolicy and the pod, wait until Ready; typed errors on failure."""
        if self.spec.user is not None:  # runAsUser takes a number; the kubelet resolves no names
            raise TaskLayoutError(
                f"task {self.spec.task_name}: expected a numeric non-root user (UID or UID:GID) "
                f"for a pod's runAsUser; found user {self.spec.user!r}; fix: give [agent] user as "
                "a UID in task.toml, or run it on the Docker backend (--backend docker)"
            )
        ns = self.config.namespace
        pod, *policy = self.manifests
        # 1. the egress-denying policy first, so the pod never runs without it
        if policy:
            await self.api.call(
                f"create NetworkPolicy {self.pod_name}",
                self.api.networking.create_namespaced_network_policy,
                ns,
                policy[0],
            )
            self._policy = self.pod_name
        # 2. the pod (409: a leftover of an earlier run holds the name)
        await self.api.call(
            f"create pod {self.pod_name}", self.api.core.create_namespaced_pod, ns, pod
        )
        self._pod = self.pod_name
        # 3. Ready, or a typed reason why not
        await self._wait_ready()
        # 4. the pids counter must be observable (else pids_limit_hit would be a guess)
        result = await self._exec_argv(
            ["/bin/sh", "-c", _exec.PIDS_FUNCTION + "; pids"],
            "/",
            self.spec.base_env(),
            30.0,
            None,
            None,
        )
        value = result.stdout.strip()
        if result.exit_code != 0 or not value.isdigit():
            raise SandboxStartError(
                f"pod {self.pod_name}: expected its pids cgroup counter readable at "
                f"/sys/fs/cgroup/pids.events; found {value or result.stderr.strip()!r}; fix: run "
                "on nodes with cgroup v2 (the backend cannot tell a fork refused at the pids "
                "limit from a failure otherwise, and never reports an unchecked limit as not hit)"
            )
        self._pids_baseline = int(value)

    async def _wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.start_timeout_s
        last = "no status yet"
        while True:
            pod = await self.api.call(
                f"read pod {self.pod_name}",
                self.api.core.read_namespaced_pod,
                self.pod_name,
                self.config.namespace,
            )
            status = pod.status
            self._raise_if_dead(status, starting=True)
            waiting = _waiting(status)
            if waiting is not None and waiting[0] in PULL_FAILURES:
                raise ImagePullBackOffError(
                    f"pod {self.pod_name}: expected image {self.image} to be pulled; found "
                    f"{waiting[0]}: {waiting[1]}; fix: check the image exists (`forge-sandbox "
                    f"images check`) and the pull secret {self.config.image_pull_secret!r} "
                    "grants it"
                )
            if waiting is not None and waiting[0] in CONFIG_FAILURES:
                self._dead = waiting[0]
                if "seccomp" in waiting[1].lower():
                    raise SeccompProfileError(
                        f"pod {self.pod_name}: expected the node to hold Forge's seccomp "
                        f"profile ({LOCALHOST_PROFILE} under the kubelet's seccomp root); found "
                        f"{waiting[0]}: {waiting[1]}; fix: install it on every node: "
                        f"`{INSTALL_COMMAND}` (or set seccomp_profile = 'runtime-default', "
                        "weaker: ptrace allowed)"
                    )
                raise PodFailedError(
                    f"pod {self.pod_name}: expected its container created from {self.image}; "
                    f"found {waiting[0]}: {waiting[1]}; fix: pods run non-root "
                    "(runAsNonRoot): give the image a numeric non-root USER (`forge-sandbox "
                    "images build` appends the sandbox uid) or set the task's user"
                )
            if status is not None and status.phase == "Running" and _ready(status):
                return
            last = _describe(status)
            if loop.time() >= deadline:
                raise PodPendingTimeoutError(
                    f"pod {self.pod_name}: expected Ready within {self.config.start_timeout_s} "
                    f"s; found {last}; fix: check the namespace's capacity and quota "
                    "(`kubectl describe pod`), or raise start_timeout_s"
                )
            await asyncio.sleep(self.config.poll_interval_s)

    def _raise_if_dead(self, status: Any, starting: bool = False) -> None:
        """Typed errors for a pod that cannot run commands any more."""
        if status is None:
            return
        reason = status.reason or ""
        if reason == "Evicted" or (status.phase == "Failed" and "evict" in reason.lower()):
            self._dead = "Evicted"
            raise PodEvictedError(
                f"pod {self.pod_name}: expected it running; found it Evicted "
                f"({status.message or 'no message'}); fix: the node ran short of memory or "
                "disk; give the task more resources or the nodes more room; not scored"
            )
        terminated = _terminated(status)
        if terminated is not None:
            if terminated.reason == "OOMKilled" or (terminated.exit_code == 137 and starting):
                self._dead = "OOMKilled"
                raise PodOOMKilledError(
                    f"pod {self.pod_name}: expected it within its memory limit "
                    f"({self.manifests[0]['spec']['containers'][0]['resources']['limits']['memory']}"
                    f"); found the container OOMKilled (exit {terminated.exit_code}); fix: "
                    "raise the task's memory_mb ([environment] in task.toml)"
                )
            self._dead = terminated.reason or "Terminated"
            raise PodFailedError(
                f"pod {self.pod_name}: expected its container running; found it terminated "
                f"({terminated.reason}, exit {terminated.exit_code}); fix: the image's "
                "`sleep infinity` must keep running (check the image has coreutils)"
            )
        if status.phase in ("Failed", "Succeeded"):
            self._dead = status.phase
            raise PodFailedError(
                f"pod {self.pod_name}: expected phase Running; found {status.phase} "
                f"({reason or 'no reason'}); fix: `kubectl describe pod {self.pod_name}`"
            )

    async def _cleanup(self) -> None:
        """Delete the pod and its NetworkPolicy (only what this sandbox created)."""
        errors = []
        for kind, name, fn in (
            ("pod", self._pod, self.api.core.delete_namespaced_pod if self._pod else None),
            (
                "NetworkPolicy",
                self._policy,
                self.api.networking.delete_namespaced_network_policy if self._policy else None,
            ),
        ):
            if name is None or fn is None:
                continue
            try:
                await self.api.call(
                    f"delete {kind} {name}", fn, name, self.config.namespace, grace_period_seconds=0
                )
            except KubernetesAPIError as exc:
                if exc.status != 404:
                    errors.append(str(exc))
        self._pod = self._policy = None
        if self._own_api and self._api is not None:
            self._api.close()
            self._api = None
        if errors:
            raise SandboxError(
                "stop: expected the trial's objects deleted; found "
                + "; ".join(errors)
                + "; fix: `forge-sandbox k8s gc` sweeps them by label"
            )

    # -- exec ------------------------------------------------------------------------------

    async def check_alive(self) -> None:
        """SandboxStateError before start() or after stop(); PodFailedError / PodOOMKilledError
        when the pod's status says it ended; KubernetesAPIError when it cannot be read."""
        self._require_running()
        self._raise_if_dead(await self._read_status())

    def _require_running(self) -> None:
        if self._state not in ("running", "starting") or self._pod is None:
            raise SandboxStateError(
                f"expected a running sandbox; found state {self._state!r}; fix: call start() "
                "(or use `async with`) before exec/upload/download"
            )
        if self._dead == "OOMKilled":
            raise PodOOMKilledError(
                f"pod {self.pod_name}: expected it running; found it OOMKilled earlier; fix: "
                "raise the task's memory_mb"
            )
        if self._dead is not None:
            raise PodFailedError(
                f"pod {self.pod_name}: expected it running; found it {self._dead}; fix: the "
                "trial cannot continue (not scored)"
            )

    async def exec(
        self,
        command: str | Sequence[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run `command` in the pod (a string runs via `spec.shell -c`), in `cwd` (None: the
        container's working directory: the spec's workdir or the image's WORKDIR)."""
        if isinstance(command, str):
            argv = [self.spec.shell, "-c", command]
        else:
            argv = [str(part) for part in command]
            if not argv or "=" in argv[0]:
                raise ValueError(
                    f"exec: expected a program name without '='; found {argv[:1]!r}; fix: use "
                    "its absolute path"
                )
        # cwd None: the pod's workingDir (the image's WORKDIR when the manifest names none)
        workdir = check_sandbox_path(cwd, allow_root=True) if cwd is not None else ""
        bad = [k for k in (env or {}) if not k or "=" in k or "\0" in k]
        if bad:
            raise ValueError(f"exec env: expected names without '=' or NUL; found {bad!r}")
        merged = {**self.spec.base_env(), **(env or {})}
        timeout = timeout_s or self.spec.exec_timeout_s
        return await self._exec_argv(
            argv, workdir, merged, timeout, None, self.spec.max_output_bytes
        )

    async def _exec_argv(
        self,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        stdin: bytes | None,
        max_output: int | None,
        raw_stdout: bool = False,
    ) -> ExecResult:
        nonce = _exec.new_nonce()
        wrapped = _exec.wrap(argv, cwd, env, timeout_s, nonce)
        deadline = timeout_s + _exec.KILL_AFTER_S + self.config.exec_grace_s
        try:
            streamed = await self._stream(wrapped, stdin, deadline, max_output)
        except (ExecStreamLostError, ExecProtocolError):
            await self._check_alive()  # an OOM kill or eviction is the better explanation
            raise
        code = _exec.exit_code_of(streamed.status)
        stderr, trailer = _exec.split_trailer(streamed.stderr, nonce)
        if trailer is not None:
            code = trailer.exit_code
        timed_out = code in (124, 137) and streamed.duration_s >= timeout_s
        oom = False
        if code == 137 and not timed_out:
            oom = await self._oom_killed()
        pids_hit = (
            trailer is None
            or trailer.pids_after is None
            or (trailer.pids_before is not None and trailer.pids_after > trailer.pids_before)
        )
        file_size = code == 128 + 25  # SIGXFSZ
        for name, hit in (
            ("memory", oom),
            ("pids", pids_hit and not oom),
            ("file_size", file_size),
        ):
            if hit:
                self._hits.add(name)
        self.last_stdout_bytes = streamed.stdout if raw_stdout else b""
        return ExecResult(
            stdout=streamed.stdout.decode("utf-8", "replace") if not raw_stdout else "",
            stderr=stderr.decode("utf-8", "replace"),
            exit_code=124 if timed_out else code,
            timed_out=timed_out,
            oom_killed=oom,
            pids_limit_hit=pids_hit and not oom,
            file_size_limit_hit=file_size,
            duration_s=streamed.duration_s,
            output_truncated=streamed.truncated,
        )

    async def _stream(
        self, argv: list[str], stdin: bytes | None, deadline_s: float, max_output: int | None
    ) -> _exec.Streamed:
        """`argv` in the pod's container over its own websocket (in a thread)."""
        self._require_running()
        assert self._pod is not None
        return await asyncio.to_thread(
            _exec.stream_exec,
            self.api,
            self.config.namespace,
            self._pod,
            CONTAINER,
            argv,
            stdin,
            deadline_s,
            max_output,
        )

    async def _read_status(self) -> Any:
        pod = await self.api.call(
            f"read pod {self.pod_name}",
            self.api.core.read_namespaced_pod,
            self.pod_name,
            self.config.namespace,
        )
        return pod.status

    async def _oom_killed(self) -> bool:
        """After an exit 137: was the container OOMKilled? (on cgroup v2 an OOM kill inside an
        exec kills the container: pod Failed, OOMKilled, exit 137)."""
        try:
            self._raise_if_dead(await self._read_status())
        except PodOOMKilledError:
            return True
        except PodFailedError:
            return False
        return False

    async def _check_alive(self) -> None:
        with contextlib.suppress(KubernetesAPIError):
            self._raise_if_dead(await self._read_status())

    async def kill_processes(self) -> KillReport:
        """Kill every process in the pod but its main one; report the limits hit since start."""
        if self._dead == "OOMKilled":
            return KillReport(
                killed=0,
                oom_killed=True,
                pids_limit_hit="pids" in self._hits,
                file_size_limit_hit="file_size" in self._hits,
            )
        words = await kill_in_one_process(
            self._kill_once, self.pod_name, self.spec.pids_max, self._check_alive
        )
        baseline, after = self._pids_baseline, words[1] if len(words) > 1 else ""
        if baseline is not None and after.isdigit() and int(after) > baseline:
            self._hits.add("pids")
        return KillReport(
            killed=int(words[0]),
            oom_killed="memory" in self._hits,
            pids_limit_hit="pids" in self._hits,
            file_size_limit_hit="file_size" in self._hits,
        )

    async def _kill_once(self) -> tuple[int | None, bytes, bytes]:
        """KILL_SCRIPT as the exec's only process (no wrapper: one pid); (exit, out, err)."""
        argv = ["/bin/sh", "-c", KILL_SCRIPT]
        try:
            streamed = await self._stream(argv, None, 60.0 + self.config.exec_grace_s, None)
        except ExecStreamLostError:
            await self._check_alive()  # an OOM kill or eviction is the better explanation
            raise
        try:
            code: int | None = _exec.exit_code_of(streamed.status)
        except ExecProtocolError:  # the kubelet could not start it (no free pid)
            code = None
        return code, streamed.stdout, streamed.stderr

    # -- files -----------------------------------------------------------------------------

    async def upload(self, local_path: str | os.PathLike[str], sandbox_path: str) -> None:
        """Copy a host file or folder to `sandbox_path` as a tar over exec (checked)."""
        target = check_sandbox_path(sandbox_path)
        parent, name = os.path.split(target)
        with tempfile.TemporaryFile() as archive:
            await asyncio.to_thread(pack, Path(local_path), name, archive)
            data = archive.read()
        untar = 'mkdir -p -- "$1" && head -c "$2" | tar -x -f - -C "$1" --no-overwrite-dir'
        result = await self._untar(untar, parent or "/", data)
        if result.exit_code != 0:
            raise SandboxTransferError(
                f"upload {local_path} -> {target}: expected tar to succeed in pod "
                f"{self.pod_name}; found exit {result.exit_code}: {result.stderr.strip()[:300]!r}; "
                "fix: upload below a writable folder (/workspace, /tmp, /logs, /tests, /solution)"
            )

    async def extract(self, archive: str | os.PathLike[str], sandbox_dir: str) -> None:
        """Unpack a host tar into the folder `sandbox_dir` over exec, as the exec user, modes
        kept."""
        target = check_sandbox_path(sandbox_dir, allow_root=True)
        data = await asyncio.to_thread(Path(archive).read_bytes)
        result = await self._untar('head -c "$2" | tar -x -p -f - -C "$1"', target, data)
        if result.exit_code != 0:
            raise SandboxTransferError(
                f"extract {archive} -> {target}: expected tar to unpack it in pod "
                f"{self.pod_name}; found exit {result.exit_code}: {result.stderr.strip()[:300]!r}; "
                "fix: extract into an existing, writable folder (the workdir, /tmp)"
            )

    async def _untar(self, script: str, folder: str, data: bytes) -> ExecResult:
        """`script` (sh: $1 the folder, $2 the archive's size) with the archive on stdin, as
        the exec user, owners never taken from the archive."""
        return await self._exec_argv(
            ["/bin/sh", "-c", f"{script} --no-same-owner", "sh", folder, str(len(data))],
            "/",
            self.spec.base_env(),
            self.spec.exec_timeout_s,
            data,
            64 * 1024,
        )

    async def download(self, sandbox_path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a pod file or folder to `local_path` (binary-safe tar; members checked)."""
        source = check_sandbox_path(sandbox_path)
        parent, name = os.path.split(source)
        result = await self._exec_argv(
            ["tar", "-c", "-f", "-", "-C", parent or "/", "--", name],
            "/",
            self.spec.base_env(),
            self.spec.exec_timeout_s,
            None,
            None,
            raw_stdout=True,
        )
        data, self.last_stdout_bytes = self.last_stdout_bytes, b""
        if result.exit_code != 0:
            raise SandboxTransferError(
                f"download {source}: expected tar to succeed in pod {self.pod_name}; found exit "
                f"{result.exit_code}: {result.stderr.strip()[:300]!r}; fix: check the path exists"
            )
        with tempfile.TemporaryFile() as archive:
            archive.write(data)
            archive.seek(0)
            await asyncio.to_thread(unpack, archive, name, Path(local_path))


def _container_status(status: Any) -> Any:
    for cs in (status.container_statuses or []) if status is not None else []:
        if cs.name == CONTAINER:
            return cs
    return None


def _waiting(status: Any) -> tuple[str, str] | None:
    cs = _container_status(status)
    waiting = cs.state.waiting if cs is not None and cs.state is not None else None
    return (waiting.reason or "", waiting.message or "") if waiting is not None else None


def _terminated(status: Any) -> Any:
    cs = _container_status(status)
    if cs is None:
        return None
    if cs.state is not None and cs.state.terminated is not None:
        return cs.state.terminated
    return None


def _ready(status: Any) -> bool:
    cs = _container_status(status)
    return bool(cs is not None and cs.ready)


def _describe(status: Any) -> str:
    if status is None:
        return "no status"
    parts = [f"phase {status.phase}"]
    for condition in status.conditions or []:
        if condition.status != "True" and (condition.reason or condition.message):
            parts.append(
                f"{condition.type}={condition.status} {condition.reason}: {condition.message}"
            )
    waiting = _waiting(status)
    if waiting is not None:
        parts.append(f"waiting {waiting[0]}: {waiting[1]}")
    return "; ".join(parts)
