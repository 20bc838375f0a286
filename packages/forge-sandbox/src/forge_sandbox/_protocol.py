"""The Sandbox protocol every backend implements (local bubblewrap, Kubernetes pods), and the
SandboxFactory a job is given to make one per trial (`open_backend` returns one)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from forge_sandbox._spec import ExecResult, KillReport, SandboxSpec


@runtime_checkable
class Sandbox(Protocol):
    """A pod-like sandbox: one long-lived environment, many commands, then a clean kill.

    State written in /workspace and /tmp persists between `exec` calls until `stop()`.
    Every backend enforces the spec's limits (memory_mb, pids_max, cpus, file_size_mb, and
    storage_mb: a write past it fails with ENOSPC, nothing reaches the host's disk unbounded)
    or refuses the spec at start(); it never runs a sandbox with a limit silently dropped.
    Use it as an async context manager::

        async with LocalSandbox(SandboxSpec(workspace=repo)) as sandbox:
            result = await sandbox.exec("python3 -m pytest -q", timeout_s=60)
    """

    spec: SandboxSpec

    async def start(self) -> None:
        """Create the sandbox; raises SandboxUnavailableError / SandboxStartError."""
        ...

    async def exec(
        self,
        command: str | Sequence[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run a command (a string goes through `spec.shell -c`) inside the limits.

        The result says which limit the exec's own processes ran into: `oom_killed` (memory),
        `pids_limit_hit` (a fork or thread refused at `pids_max`), `file_size_limit_hit`
        (SIGXFSZ status); a backend that cannot observe one must fail closed, never report
        False for a limit it did not check.
        """
        ...

    async def check_alive(self) -> None:
        """Raise SandboxStateError (or the backend's typed subclass of SandboxError: the
        container or pod died, was OOM-killed, or cannot be read) unless the sandbox is running
        and its init alive. Cheap (no exec): a sandbox started ahead of its trial is checked
        with it before use, and replaced when it fails."""
        ...

    async def upload(self, local_path: str | os.PathLike[str], sandbox_path: str) -> None:
        """Copy a host file or directory to `sandbox_path` (absolute, no `..`)."""
        ...

    async def extract(self, archive: str | os.PathLike[str], sandbox_dir: str) -> None:
        """Unpack a host tar archive into the existing folder `sandbox_dir` (absolute), its
        members' modes kept, owned by the exec user: one round trip (the agent's change into
        the fresh verifier sandbox). The caller has checked the members; a failure raises
        SandboxTransferError."""
        ...

    async def download(self, sandbox_path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy a sandbox file or directory to `local_path`, refusing escaping entries."""
        ...

    async def kill_processes(self) -> KillReport:
        """Kill every process of the sandbox but its init (what an agent left running, e.g. a
        fork bomb filling pids_max; in-flight execs included), keeping its files, so the
        verifier starts on a sandbox with its whole limits free. Report how many were killed
        and which limits the sandbox's processes ran into since start()."""
        ...

    async def stop(self) -> None:
        """Kill every process of the sandbox and remove what it created; idempotent."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


SandboxFactory = Callable[[SandboxSpec], Sandbox]
