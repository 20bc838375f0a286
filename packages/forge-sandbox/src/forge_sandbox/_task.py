"""Harbor task layout, as read by the verifier and the oracle/NOP agents.

TASK/task.toml                 [verifier] timeout_sec, [agent] timeout_sec, [environment] ...
TASK/instruction.md
TASK/environment/Dockerfile    (image-based backends)
TASK/environment/workspace/    repository files -> /workspace (directory-based backends)
TASK/tests/test.sh             uploaded to /tests; writes /logs/verifier/reward.{json,txt}
TASK/solution/solve.sh         the oracle; uploaded to /solution
"""

from __future__ import annotations

import os
import tomllib
import warnings
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import check_task_config, tree_sha256
from forge_sandbox._errors import TaskLayoutError
from forge_sandbox._spec import SandboxSpec

DEFAULT_VERIFIER_TIMEOUT_S = 180.0
DEFAULT_AGENT_TIMEOUT_S = 600.0


class TaskConfigWarning(UserWarning):
    """A foreign Harbor key of task.toml that Forge ignores (known to be harmless)."""


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

    def sandbox_spec(self, workspace: Path | None = None, **overrides: Any) -> SandboxSpec:
        """A SandboxSpec for this task: its workspace (or `workspace`), its resource hints.

        A task without `environment/workspace/` (only an image) is refused with
        TaskLayoutError, an infrastructure error of the trial: a directory-based sandbox would
        otherwise run the agent and the verifier on an empty /workspace and score it.
        """
        source = workspace if workspace is not None else self.workspace_dir
        if not source.is_dir():
            raise TaskLayoutError(
                f"task {self.name}: expected the repository in {source} (the local backend "
                "copies it to /workspace); found no such folder (the task has only an image?); "
                "fix: add environment/workspace/, or run it on an image-based backend"
            )
        fields: dict[str, Any] = {"workspace": source, "task_name": self.name}
        if self.memory_mb is not None:
            fields["memory_mb"] = self.memory_mb
        if self.cpus is not None:
            fields["cpus"] = self.cpus
        if self.storage_mb is not None:
            fields["storage_mb"] = self.storage_mb
        fields.update(overrides)
        return SandboxSpec(**fields)


def _table(config: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise TaskLayoutError(
            f"{path}: expected [{key}] to be a table; found {type(value).__name__}; "
            "fix: write it as a TOML table"
        )
    return value


def load_task(path: str | os.PathLike[str]) -> HarborTask:
    """Read one task folder; TaskLayoutError names what is missing and how to fix it."""
    folder = Path(path).resolve()
    toml_path = folder / "task.toml"
    if not toml_path.is_file():
        raise TaskLayoutError(
            f"task {folder}: expected task.toml; found none; fix: point at a Harbor task "
            "folder (task.toml, instruction.md, environment/, tests/test.sh, solution/solve.sh)"
        )
    try:
        config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskLayoutError(f"{toml_path}: expected valid TOML; found {exc}") from exc
    errors, warns = check_task_config(config)
    if errors:
        raise TaskLayoutError(
            f"{toml_path}: expected only the task.toml keys Forge reads; found "
            + "; ".join(errors)
            + "; fix: correct the key (a typo would run the task on defaults)"
        )
    for warning in warns:
        warnings.warn(f"{toml_path}: {warning}", TaskConfigWarning, stacklevel=2)
    verifier = _table(config, "verifier", toml_path)
    agent = _table(config, "agent", toml_path)
    environment = _table(config, "environment", toml_path)
    solution = _table(config, "solution", toml_path)
    return HarborTask(
        path=folder,
        name=folder.name,
        verifier_timeout_s=float(verifier.get("timeout_sec") or DEFAULT_VERIFIER_TIMEOUT_S),
        agent_timeout_s=float(agent.get("timeout_sec") or DEFAULT_AGENT_TIMEOUT_S),
        memory_mb=environment.get("memory_mb"),
        cpus=environment.get("cpus"),
        storage_mb=environment.get("storage_mb"),
        verifier_env={str(k): str(v) for k, v in verifier.get("env", {}).items()},
        solution_env={str(k): str(v) for k, v in solution.get("env", {}).items()},
    )


def discover_tasks(tasks_dir: str | os.PathLike[str]) -> list[HarborTask]:
    """The task itself when `tasks_dir` has a task.toml, else its sub-folders that do (sorted)."""
    root = Path(tasks_dir)
    if (root / "task.toml").is_file():
        return [load_task(root)]
    if not root.is_dir():
        raise TaskLayoutError(
            f"tasks: expected a folder of Harbor tasks; found no folder {root}; "
            "fix: pass the folder holding the task folders"
        )
    tasks = [load_task(p) for p in sorted(root.iterdir()) if (p / "task.toml").is_file()]
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
