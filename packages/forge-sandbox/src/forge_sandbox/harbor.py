"""Harbor environment plugin: Harbor's BaseEnvironment on top of forge-sandbox's LocalSandbox.

    harbor run -p TASKS_DIR -a oracle --env forge_sandbox.harbor:LocalSandboxEnvironment \\
        -o jobs --ek network=none --ek pids_max=512

Optional: needs Python >= 3.12 and `pip install harbor==0.25.0`. Nothing else in forge_sandbox
imports this module, so the package works without Harbor. Each trial gets one pod-like local
sandbox (bubblewrap + cgroups): the task's `environment/workspace/` is /workspace, /logs/{agent,
verifier,artifacts} exist from the start, network is off unless `--ek network=host`.
Every command runs as the sandbox's single unprivileged user (Harbor's `user="root"` requests,
e.g. chmod of uploaded scripts, work because that user owns everything writable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from harbor.environments.base import BaseEnvironment, ExecResult
    from harbor.environments.capabilities import EnvironmentCapabilities
except ImportError as exc:  # pragma: no cover - exercised only without harbor
    raise ImportError(
        "forge_sandbox.harbor needs Harbor: expected `import harbor` to work; found "
        f"{exc}; fix: pip install 'harbor==0.25.0' (Python >= 3.12)"
    ) from exc

from forge_sandbox._spec import SandboxSpec
from forge_sandbox.local._sandbox import LocalSandbox

NO_TIMEOUT_S = 24 * 3600.0  # Harbor's timeout_sec=None: no limit of its own


class LocalSandboxEnvironment(BaseEnvironment):
    """A Harbor environment backed by one forge-sandbox LocalSandbox per trial.

    Environment kwargs (`--ek key=value`): network ('none' | 'host'), pids_max, memory_mb,
    cpus (the last two default to the task's [environment] values).
    """

    def __init__(
        self,
        *args: Any,
        network: str = "none",
        pids_max: int | str | None = None,
        memory_mb: int | str | None = None,
        cpus: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        self._options: dict[str, Any] = {"network": network}
        if pids_max is not None:
            self._options["pids_max"] = int(pids_max)
        self._memory_mb = int(memory_mb) if memory_mb is not None else None
        self._cpus = float(cpus) if cpus is not None else None
        self._sandbox: LocalSandbox | None = None
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "forge-local"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    @property
    def _workspace(self) -> Path:
        return Path(self.environment_dir) / "workspace"

    def _validate_definition(self) -> None:
        if not self._workspace.is_dir():
            raise FileNotFoundError(
                f"forge-local environment: expected {self._workspace} (the repository copied "
                "to /workspace); found none; fix: put the task's files in "
                "environment/workspace/, or use an image-based Harbor environment"
            )

    async def start(self, force_build: bool) -> None:
        config = self.task_env_config
        memory = self._memory_mb or config.memory_mb
        cpus = self._cpus or config.cpus
        spec = SandboxSpec(
            workspace=self._workspace,
            env=self._startup_env(),
            **self._options,
            **({"memory_mb": int(memory)} if memory else {}),
            **({"cpus": float(cpus)} if cpus else {}),
        )
        self._sandbox = LocalSandbox(spec)
        await self._sandbox.start()

    async def stop(self, delete: bool) -> None:
        if self._sandbox is not None:
            await self._sandbox.stop()

    def _running(self) -> LocalSandbox:
        if self._sandbox is None:
            raise RuntimeError("forge-local environment: expected start() before use")
        return self._sandbox

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        result = await self._running().exec(
            command,
            cwd=cwd or self.task_env_config.workdir,
            env=self._merge_env(env),
            timeout_s=float(timeout_sec) if timeout_sec else NO_TIMEOUT_S,
        )
        return ExecResult(stdout=result.stdout, stderr=result.stderr, return_code=result.exit_code)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._running().upload(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._running().upload(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await self._running().download(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        Path(target_dir).mkdir(parents=True, exist_ok=True)
        await self._running().download(source_dir, target_dir)
