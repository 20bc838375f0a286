"""Harbor task layout, as read by the verifier and the oracle/NOP agents.

TASK/task.toml                 any task.toml Harbor >= 0.25 reads (forge-gates' HarborTaskConfig)
TASK/instruction.md
TASK/environment/Dockerfile    (image-based backends)
TASK/environment/workspace/    repository files -> /workspace (directory-based backends)
TASK/tests/test.sh             uploaded to /tests; writes /logs/verifier/reward.{json,txt}
TASK/solution/solve.sh         the oracle; uploaded to /solution
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import HarborTaskConfig, TaskConfigError, read_task_config, tree_sha256
from forge_sandbox._errors import TaskLayoutError
from forge_sandbox._spec import SandboxSpec

DEFAULT_VERIFIER_TIMEOUT_S = 180.0
DEFAULT_AGENT_TIMEOUT_S = 600.0


class TaskConfigWarning(UserWarning):
    """A Harbor key of task.toml that Forge ignores (a feature a Forge trial does not use)."""


class HarborTask(BaseModel):
    """One task folder in Harbor's layout, with the settings forge-sandbox uses."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path = Field(description="The task folder (absolute).")
    name: str = Field(description="Task name: the folder name, as Harbor's LocalTaskId does.")
    verifier_timeout_s: float = Field(
        gt=0, description="[verifier] timeout_sec of task.toml, else 180 s."
    )
    agent_timeout_s: float = Field(gt=0, description="[agent] timeout_sec, else 600 s.")
    memory_mb: int | None = Field(default=None, description="[environment] memory_mb if set.")
    cpus: float | None = Field(default=None, description="[environment] cpus if set.")
    storage_mb: int | None = Field(
        default=None, description="[environment] storage_mb if set: the disk limit, enforced."
    )
    verifier_env: dict[str, str] = Field(
        default_factory=dict, description="[verifier] env: extra environment of test.sh."
    )
    solution_env: dict[str, str] = Field(
        default_factory=dict, description="[solution] env: extra environment of solve.sh."
    )
    config: HarborTaskConfig = Field(
        default_factory=HarborTaskConfig,
        description="Everything task.toml says, normalised (network, image, users, workdir...).",
    )
    problem: str | None = Field(
        default=None,
        description="Why the folder could not be read (discover_tasks(keep_unreadable=True)): "
        "its trial fails with TaskLayoutError naming it, and the other trials run.",
    )

    @property
    def workspace_dir(self) -> Path:
        return self.path / "environment" / "workspace"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    def instruction(self) -> str:
        return (self.path / "instruction.md").read_text(encoding="utf-8")

    @property
    def network(self) -> str:
        """The trial sandbox's run-time network: 'host' (egress) only when task.toml allows it
        ([environment] network_mode 'public' / 'allowlist' or allow_internet = true, or a
        phase's [agent] / [verifier] network_mode: one sandbox serves both phases, its network
        fixed at start), else 'none'. A task that says nothing gets no network. An allowlist
        is not filtered by host: it gets the backend's egress. Image builds are not affected."""
        modes = (
            self.config.network_mode,
            self.config.agent_network_mode,
            self.config.verifier_network_mode,
        )
        return "host" if any(m in ("public", "allowlist") for m in modes) else "none"

    def sandbox_spec(self, workspace: Path | None = None, **overrides: Any) -> SandboxSpec:
        """A SandboxSpec for this task: its workspace (or `workspace`), its resource hints,
        its network (`network`: none unless task.toml allows it), its `[environment] workdir`
        when it names one.

        A task without `environment/workspace/` (only an image) gets `workspace=None`: the
        image-based backends (Docker, Kubernetes) run it from its image, and the local backend
        refuses it at start (TaskLayoutError, an infrastructure error of the trial), since it
        would otherwise run the agent and the verifier on an empty /workspace and score it.
        """
        source = workspace if workspace is not None else self.workspace_dir
        fields: dict[str, Any] = {
            "workspace": source if workspace is not None or source.is_dir() else None,
            "task_name": self.name,
            "network": self.network,
        }
        if self.memory_mb is not None:
            fields["memory_mb"] = self.memory_mb
        if self.cpus is not None:
            fields["cpus"] = self.cpus
        if self.storage_mb is not None:
            fields["storage_mb"] = self.storage_mb
        if self.config.workdir is not None:  # else the image's WORKDIR (or /workspace locally)
            fields["workdir"] = self.config.workdir
        fields.update(_user_fields(self.config.agent_user))
        fields.update(overrides)
        return SandboxSpec(**fields)

    def verifier_spec(self, **overrides: Any) -> SandboxSpec:
        """The fresh verifier sandbox's spec: the agent's, run as `[verifier] user` when the
        task names one (Harbor's verifier user), else as the agent's user."""
        spec = self.sandbox_spec(**overrides)
        if self.config.verifier_user is None:
            return spec
        # model_copy keeps which fields were set (an unset workdir stays the image's WORKDIR)
        return spec.model_copy(update={"user": None} | _user_fields(self.config.verifier_user))


def _user_fields(user: str | None) -> dict[str, Any]:
    """task.toml's user as spec fields: `UID` or `UID:GID` (non-zero) sets uid/gid, which every
    backend honours; a name (or root) is the Docker backend's `user`."""
    if user is None:
        return {}
    match = re.fullmatch(r"(\d+)(?::(\d+))?", user.strip())
    if match and int(match[1]) > 0 and int(match[2] or match[1]) > 0:
        return {"uid": int(match[1]), "gid": int(match[2] or match[1])}
    return {"user": user.strip()}


def load_task(path: str | os.PathLike[str]) -> HarborTask:
    """Read one task folder; TaskLayoutError names the file, the key, the value and the fix."""
    folder = Path(path).resolve()
    toml_path = folder / "task.toml"
    if not toml_path.is_file():
        raise TaskLayoutError(
            f"task {folder}: expected task.toml; found none; fix: point at a Harbor task "
            "folder (task.toml, instruction.md, environment/, tests/test.sh, solution/solve.sh)"
        )
    try:
        config, warns = read_task_config(toml_path)
    except TaskConfigError as exc:
        raise TaskLayoutError(str(exc)) from None  # every problem with its fix; no traceback
    for warning in warns:
        warnings.warn(f"{toml_path}: {warning}", TaskConfigWarning, stacklevel=2)
    return HarborTask(
        path=folder,
        name=folder.name,
        verifier_timeout_s=config.verifier_timeout_s or DEFAULT_VERIFIER_TIMEOUT_S,
        agent_timeout_s=config.agent_timeout_s or DEFAULT_AGENT_TIMEOUT_S,
        memory_mb=config.memory_mb,
        cpus=config.cpus,
        storage_mb=config.storage_mb,
        verifier_env=config.verifier_env,
        solution_env=config.solution_env,
        config=config,
    )


def _load_or_keep(folder: Path, keep_unreadable: bool) -> HarborTask:
    """load_task, or (keep_unreadable) a task that carries why it could not be read."""
    try:
        return load_task(folder)
    except TaskLayoutError as exc:
        if not keep_unreadable:
            raise
        return HarborTask(
            path=folder.resolve(),
            name=folder.name,
            verifier_timeout_s=DEFAULT_VERIFIER_TIMEOUT_S,
            agent_timeout_s=DEFAULT_AGENT_TIMEOUT_S,
            problem=str(exc),
        )


def discover_tasks(
    tasks_dir: str | os.PathLike[str], *, keep_unreadable: bool = False
) -> list[HarborTask]:
    """The task itself when `tasks_dir` has a task.toml, else its sub-folders that do (sorted).

    A folder whose task.toml cannot be read raises TaskLayoutError, or with
    `keep_unreadable=True` is kept with its `problem` set: a job then fails that one trial,
    named, and runs the others.
    """
    root = Path(tasks_dir)
    if (root / "task.toml").is_file():
        return [_load_or_keep(root, keep_unreadable)]
    if not root.is_dir():
        raise TaskLayoutError(
            f"tasks: expected a folder of Harbor tasks; found no folder {root}; "
            "fix: pass the folder holding the task folders"
        )
    folders = [p for p in sorted(root.iterdir()) if (p / "task.toml").is_file()]
    tasks = [_load_or_keep(p, keep_unreadable) for p in folders]
    if not tasks:
        raise TaskLayoutError(
            f"tasks: expected sub-folders with task.toml in {root}; found none; "
            "fix: pass the folder holding the task folders"
        )
    return tasks


def task_checksum(folder: str | os.PathLike[str]) -> str:
    """The task folder's content hash (forge-gates' `tree_sha256`: the same hash forge-data
    records in a frozen split), so a task hashes the same wherever it is checked out.

    It is not Harbor's dirhash value (another algorithm).
    """
    return tree_sha256(folder)
