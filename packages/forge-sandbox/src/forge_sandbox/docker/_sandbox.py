"""DockerSandbox: the Sandbox protocol on one container per trial (the Docker SDK, in threads).

start: resolve / build the image, create the container (`_create.create_body`: no privileges,
every capability dropped, no-new-privileges, limits, network none, labels), start it, make the
scratch folders (/logs/{agent,verifier,artifacts}, /tests, /solution) owned by the exec user,
read the main process's pid and check the cgroup counters are readable (an unobservable limit
is never reported as not hit). exec: `_exec`'s wrapper; at the timeout every process of the
exec is killed by its marker. Files: the daemon's archive API (binary tar), members checked
on the way out (`_tar`). stop: the container is removed (force), also on error and Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import tarfile
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from forge_sandbox._errors import SandboxStateError, SandboxTransferError
from forge_sandbox._lifecycle import SandboxLifecycle, kill_in_one_process
from forge_sandbox._spec import ExecResult, KillReport, SandboxSpec
from forge_sandbox._tar import check_sandbox_path, pack, unpack
from forge_sandbox.docker import _exec
from forge_sandbox.docker._config import DockerConfig
from forge_sandbox.docker._create import container_name, create_body, exec_user, workdir
from forge_sandbox.docker._errors import (
    ContainerDiedError,
    ContainerOOMKilledError,
    ContainerStartError,
    DockerDaemonError,
    DockerError,
    map_docker_error,
)
from forge_sandbox.docker._images import ImageResolver

SCRATCH = ("logs", "logs/agent", "logs/verifier", "logs/artifacts", "tests", "solution")
SIGXFSZ_STATUS = 128 + 25


def scratch_tar(uid: int, gid: int) -> bytes:
    """Empty scratch folders owned by the exec user, for the archive API."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in SCRATCH:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, uid, gid
            info.mtime = int(time.time())
            tar.addfile(info)
    return buffer.getvalue()


def owned_by(archive: bytes, uid: int, gid: int) -> bytes:
    """The archive with every member owned by uid:gid (the daemon keeps the archive's owner)."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive)) as source,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as target,
    ):
        for member in source.getmembers():
            member.uid, member.gid, member.uname, member.gname = uid, gid, "", ""
            target.addfile(member, source.extractfile(member) if member.isfile() else None)
    return out.getvalue()


class DockerSandbox(SandboxLifecycle):
    """The Docker backend of the Sandbox protocol (one container per trial).

    `api` is a docker.APIClient (shared by a job's sandboxes: DockerBackend passes it);
    `resolver` finds or builds the trial's image.
    """

    def __init__(
        self,
        spec: SandboxSpec,
        config: DockerConfig,
        api: Any,
        resolver: ImageResolver,
        *,
        storage_opt: bool = False,
    ) -> None:
        self.spec, self.config, self.api, self.resolver = spec, config, api, resolver
        self.storage_opt = storage_opt
        self.name = container_name(spec)
        self.image: str | None = None
        self.workdir = spec.workdir
        self._id: str | None = None
        self._keep: list[str] = []
        self._uid_gid = (0, 0)
        self._user = "0"
        self._hits: set[str] = set()
        self._pids_baseline: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def _start(self) -> None:
        """Image, container, scratch folders, counters; typed errors."""
        # 1. the image: named or built (once per content), on the daemon
        image, image_config = await asyncio.to_thread(self.resolver.ensure, self.api, self.spec)
        self.image = image
        self.workdir = workdir(image_config, self.spec)
        self._user = exec_user(image_config, self.spec, self.config)
        body = create_body(
            self.spec, self.config, image, image_config, storage_opt=self.storage_opt
        )
        # 2. the container, labelled; started
        created = await self._call(
            "create container", self.api.create_container_from_config, body, self.name
        )
        self._id = str(created["Id"])
        await self._call("start container", self.api.start, self._id)
        # 3. the main process's pid (never killed), the exec user's ids, readable counters
        probe = await self._run(["/bin/sh", "-c", _exec.MAIN_PIDS], "/", {}, 30.0, None)
        lines = probe.stdout.splitlines()
        if probe.exit_code != 0 or len(lines) < 3 or probe.pids_limit_hit:
            raise ContainerStartError(
                f"container {self.name}: expected /bin/sh, /proc and readable pids and memory "
                f"cgroup counters in image {self.image}; found exit {probe.exit_code}, "
                f"{probe.stdout.strip()[:200]!r} {probe.stderr.strip()[:300]!r}; fix: an image "
                "with a POSIX sh, on a daemon that mounts the container's cgroup (cgroupns)"
            )
        self._keep = lines[0].split()
        self._uid_gid = (int(lines[1]), int(lines[2]))
        await self._call(
            "make scratch folders", self.api.put_archive, self._id, "/", scratch_tar(*self._uid_gid)
        )

    async def _cleanup(self) -> None:
        """Remove the container (force: its processes die with it) and its scratch folders."""
        if self._id is None:
            with contextlib.suppress(Exception):  # a create that failed after the daemon made it
                await asyncio.to_thread(self.api.remove_container, self.name, force=True, v=True)
            return
        try:
            await asyncio.to_thread(self.api.remove_container, self._id, force=True, v=True)
        except Exception as exc:
            if type(exc).__name__ != "NotFound":
                raise map_docker_error(exc, f"remove container {self.name}") from exc
        self._id = None

    async def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except DockerError:
            raise
        except Exception as exc:
            raise map_docker_error(exc, f"{what} {self.name}", image=self.image) from exc

    async def _check_alive(self, what: str) -> None:
        """Raise the typed error when the container is no longer running."""
        try:
            state = (await asyncio.to_thread(self.api.inspect_container, self._id))["State"]
        except Exception as exc:
            raise map_docker_error(exc, f"{what}: inspect {self.name}") from exc
        if state.get("Running"):
            return
        if state.get("OOMKilled"):
            raise ContainerOOMKilledError(
                f"container {self.name}: expected it running; found it OOMKilled (exit "
                f"{state.get('ExitCode')}) at {self.spec.memory_mb} MiB; fix: raise the task's "
                "memory_mb ([environment] in task.toml)"
            )
        error = state.get("Error") or "no error"
        raise ContainerDiedError(
            f"container {self.name}: expected it running for {what}; found status "
            f"{state.get('Status')!r} (exit {state.get('ExitCode')}, {error}); fix: the trial "
            "cannot continue (not scored); something killed its init"
        )

    async def check_alive(self) -> None:
        """SandboxStateError before start() or after stop(); ContainerDiedError /
        ContainerOOMKilledError when the daemon says the container is not running."""
        self._require_running()
        await self._check_alive("use")

    def _require_running(self) -> None:
        if self._state not in ("running", "starting") or self._id is None:
            raise SandboxStateError(
                f"expected a running sandbox; found state {self._state!r}; fix: call start() "
                "(or use `async with`) before exec/upload/download"
            )

    # -- exec ------------------------------------------------------------------------------

    async def exec(
        self,
        command: str | Sequence[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run `command` in the container (a string runs via `spec.shell -c`), in `cwd` (None:
        the image's WORKDIR), with the image's environment + spec.env + `env`."""
        if isinstance(command, str):
            argv = [self.spec.shell, "-c", command]
        else:
            argv = [str(part) for part in command]
            if not argv:
                raise ValueError("exec: expected a command; found an empty argv")
        where = check_sandbox_path(cwd, allow_root=True) if cwd is not None else self.workdir
        bad = [k for k in (env or {}) if not k or "=" in k or "\0" in k]
        if bad:
            raise ValueError(f"exec env: expected names without '=' or NUL; found {bad!r}")
        merged = {**self.spec.env, **(env or {})}
        timeout = timeout_s or self.spec.exec_timeout_s
        return await self._run(argv, where, merged, timeout, self.spec.max_output_bytes)

    async def _run(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        timeout_s: float,
        max_output: int | None,
    ) -> ExecResult:
        nonce = _exec.new_nonce()
        started = time.monotonic()
        streamed, code, timed_out = await self._stream(
            _exec.wrap(argv, cwd, nonce), env, nonce, timeout_s, max_output
        )
        duration = time.monotonic() - started
        stderr, trailer = _exec.split_trailer(bytes(streamed.stderr), nonce)
        if trailer is None and not timed_out:
            await self._check_alive("exec")  # a dead container is the better explanation
            if streamed.error is not None or code == 0:
                # the wrapper exits 0 only after its report: the stream lost output, and an
                # exec read from part of its output (a verifier's test lines) must not count
                raise DockerDaemonError(
                    f"exec in {self.name}: expected its whole output and the wrapper's report; "
                    f"found the stream ended without it ({streamed.error!r}, exit {code}, "
                    f"{len(streamed.stdout)} stdout bytes); fix: check the Docker daemon (its "
                    "log, a full disk); the trial is infrastructure, not scored"
                )
        if trailer is not None:
            code = trailer.exit_code
        code = 137 if code is None else code
        # no report line: the container killed it (137), unless the kill was ours (a timeout:
        # the wrapper died with the command; 124 says what happened, never "memory")
        oom = trailer.oom_killed if trailer is not None else code == 137 and not timed_out
        pids_hit = (trailer is None or trailer.pids_hit) and not oom and not timed_out
        file_size = code == SIGXFSZ_STATUS
        for name, hit in (("memory", oom), ("pids", pids_hit), ("file_size", file_size)):
            if hit:
                self._hits.add(name)
        self.last_stdout_bytes = bytes(streamed.stdout)
        return ExecResult(
            stdout=streamed.stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            exit_code=124 if timed_out else code,
            timed_out=timed_out,
            oom_killed=oom,
            pids_limit_hit=pids_hit,
            file_size_limit_hit=file_size,
            duration_s=duration,
            output_truncated=streamed.truncated,
        )

    async def _stream(
        self,
        argv: list[str],
        env: dict[str, str],
        nonce: str,
        timeout_s: float,
        max_output: int | None,
    ) -> tuple[_exec.Streamed, int | None, bool]:
        """Run `argv` as the exec's process: what it streamed, its exit code (None: the
        daemon never had one) and whether it timed out (then its tree was killed by marker)."""
        self._require_running()
        exec_id, sock = await self._open_exec(argv, env, nonce)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        def notify() -> None:  # runs in the reader thread
            loop.call_soon_threadsafe(finished)

        streamed = _exec.Streamed(max_output, on_done=notify)
        threading.Thread(target=_exec.read_frames, args=(sock, streamed), daemon=True).start()
        timed_out = not await _wait(done, timeout_s)
        if timed_out:  # kill the exec's whole tree by its marker, then let the stream end
            await self._kill_marked(nonce)
            if not await _wait(done, self.config.exec_grace_s):
                _exec.abort(sock)
                await _wait(done, 5.0)
        code = await self._call("inspect exec", _exec.wait_exit_code, self.api, exec_id)
        return streamed, code, timed_out

    async def _open_exec(self, argv: list[str], env: dict[str, str], nonce: str) -> Any:
        def create_and_start() -> tuple[str, Any]:
            created = self.api.exec_create(
                self._id,
                argv,
                stdout=True,
                stderr=True,
                stdin=False,
                tty=False,
                environment=_exec.exec_env(env, nonce),
                user=self._user,
            )
            return created["Id"], self.api.exec_start(created["Id"], socket=True)

        try:
            return await asyncio.to_thread(create_and_start)
        except Exception as exc:
            error = map_docker_error(exc, f"exec in {self.name}")
            if isinstance(error, ContainerDiedError):
                await self._check_alive("exec")  # OOMKilled is the better explanation
            raise error from exc

    async def _kill_marked(self, nonce: str) -> int:
        """SIGKILL the processes of the exec marked `nonce` (the kill is one process)."""
        argv = ["/bin/sh", "-c", _exec.KILL_MARKED, "sh", nonce]
        streamed, _, _ = await self._stream(argv, {}, _exec.new_nonce(), 60.0, None)
        words = streamed.stdout.split()
        return int(words[0]) if words and words[0].isdigit() else 0

    async def kill_processes(self) -> KillReport:
        """Kill every process but the init and the main one; report the limits hit so far.

        The kill is the exec's only process (shell built-ins: it needs one free pid), tried
        again while the pids limit leaves it no room; when it never runs, the sandbox's own
        processes hold every pid (a fork bomb that respawns): SandboxStateError, which a trial
        scores 0 when its agent had the sandbox."""
        argv = ["/bin/sh", "-c", _exec.KILL_ALL, "sh", *self._keep]

        async def once() -> tuple[int | None, bytes, bytes]:
            streamed, code, _ = await self._stream(argv, {}, _exec.new_nonce(), 60.0, None)
            return code, bytes(streamed.stdout), bytes(streamed.stderr)

        async def alive() -> None:
            self._hits.add("pids")  # no room for one more process: the limit is hit
            await self._check_alive("kill")

        words = await kill_in_one_process(once, self.name, self.spec.pids_max, alive)
        return KillReport(
            killed=int(words[0]),
            oom_killed="memory" in self._hits,
            pids_limit_hit="pids" in self._hits,
            file_size_limit_hit="file_size" in self._hits,
        )

    # -- files -----------------------------------------------------------------------------

    async def upload(self, local_path: str | os.PathLike[str], sandbox_path: str) -> None:
        """Copy a host file or folder to `sandbox_path` (the archive API, owned by the exec
        user); the parent folder must exist."""
        self._require_running()
        target = check_sandbox_path(sandbox_path)
        parent, name = os.path.split(target)
        with tempfile.TemporaryFile() as archive:
            await asyncio.to_thread(pack, Path(local_path), name, archive)
            data = owned_by(archive.read(), *self._uid_gid)
        try:
            await asyncio.to_thread(self.api.put_archive, self._id, parent or "/", data)
        except Exception as exc:
            await self._check_alive("upload")
            raise SandboxTransferError(
                f"upload {local_path} -> {target}: expected the daemon to extract it in "
                f"{self.name}; found {type(exc).__name__}: {str(exc)[:300]}; fix: upload below "
                "an existing folder (/tmp, /logs, /tests, /solution, the workdir)"
            ) from exc

    async def extract(self, archive: str | os.PathLike[str], sandbox_dir: str) -> None:
        """Unpack a host tar into the folder `sandbox_dir` (the archive API: the daemon keeps
        the members' modes; every member owned by the exec user)."""
        self._require_running()
        target = check_sandbox_path(sandbox_dir, allow_root=True)
        data = await asyncio.to_thread(lambda: owned_by(Path(archive).read_bytes(), *self._uid_gid))
        try:
            await asyncio.to_thread(self.api.put_archive, self._id, target, data)
        except Exception as exc:
            await self._check_alive("extract")
            raise SandboxTransferError(
                f"extract {archive} -> {target}: expected the daemon to unpack it in "
                f"{self.name}; found {type(exc).__name__}: {str(exc)[:300]}; fix: extract into "
                "an existing folder (the workdir, /tmp)"
            ) from exc

    async def download(self, sandbox_path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a container file or folder to `local_path` (binary tar; members checked)."""
        self._require_running()
        source = check_sandbox_path(sandbox_path)
        name = os.path.basename(source)

        def fetch(out: Any) -> None:
            stream, _ = self.api.get_archive(self._id, source)
            for chunk in stream:
                out.write(chunk)
            out.seek(0)

        with tempfile.TemporaryFile() as archive:
            try:
                await asyncio.to_thread(fetch, archive)
            except Exception as exc:
                await self._check_alive("download")
                raise SandboxTransferError(
                    f"download {source}: expected it in {self.name}; found "
                    f"{type(exc).__name__}: {str(exc)[:300]}; fix: check the path exists"
                ) from exc
            await asyncio.to_thread(unpack, archive, name, Path(local_path))


async def _wait(done: asyncio.Future[None], timeout_s: float) -> bool:
    """Wait for the reader thread's end (True), at most timeout_s (False)."""
    try:
        await asyncio.wait_for(asyncio.shield(done), timeout_s)
    except TimeoutError:
        return False
    return True
