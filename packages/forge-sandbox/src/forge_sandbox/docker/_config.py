"""DockerConfig: how the Docker backend names, labels, resolves and limits its containers.

Read from TOML (`DockerConfig.load(path)`, or the file `$FORGE_DOCKER_CONFIG` names); every field
has a default, so a bare `--backend docker` works against any daemon DOCKER_HOST points at.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forge_gates import Violation
from forge_sandbox.docker._errors import DockerUnavailableError

CONFIG_ENV = "FORGE_DOCKER_CONFIG"
OWNER_LABEL = "forge-sandbox.owner"
TASK_LABEL = "forge-sandbox.task"
TRIAL_LABEL = "forge-sandbox.trial"


class DockerConfig(BaseModel):
    """The Docker backend's settings (frozen; unknown keys refused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    owner: str = Field(
        default="forge-sandbox",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$",
        description=f"Value of the `{OWNER_LABEL}` label on every container; `docker gc` "
        "removes exactly the containers carrying it.",
    )
    images: dict[str, str] = Field(
        default_factory=dict,
        description="Task name -> image reference: used as is (before docker_image or a build).",
    )
    rewrites: dict[str, str] = Field(
        default_factory=dict,
        description="Base image -> private mirror (forge_sandbox.images' rules: a key ending in "
        "'/' or ':' rewrites that prefix), applied to every FROM and to a task's docker_image.",
    )
    require_rewrite: bool = Field(
        default=False,
        description="True: a base image (or docker_image) without a rewrite is refused "
        "(ImageNotAllowedError), as on Kubernetes: no public registry is ever reached.",
    )
    pull: bool = Field(
        default=True, description="Pull a named image missing on the daemon (False: refuse)."
    )
    build_network: str | None = Field(
        default=None,
        description="Network of build steps (None: the daemon's default; 'none' for offline).",
    )
    build_timeout_s: float = Field(default=3600.0, gt=0, description="Most seconds per build.")
    user: str | None = Field(
        default=None, description="User of every exec; None: the image's USER (else root)."
    )
    main_user: str | None = Field(
        default="65533:65533",
        pattern=r"^\d+:\d+$",
        description="uid:gid of the container's pid 1 (tini) and `sleep infinity`, a uid no "
        "command runs as, so a command can neither ptrace them nor write their memory through "
        "/proc/PID/mem (both need CAP_SYS_PTRACE across uids). None: the commands' user, as a "
        "Kubernetes pod runs (the in-process API server's pods use it).",
    )
    cap_add: list[str] = Field(
        default_factory=list,
        description="Capabilities added back after dropping ALL (e.g. CHOWN for tasks that "
        "chown as root). Empty by default: least privilege.",
    )
    storage: Literal["best_effort", "enforce"] = Field(
        default="best_effort",
        description="storage_mb: 'enforce' refuses a daemon whose storage driver cannot cap a "
        "container's writable layer (overlay2 needs xfs + pquota); 'best_effort' runs without "
        "the cap there and warns (DockerStorageWarning).",
    )
    stop_timeout_s: float = Field(default=30.0, gt=0, description="Most seconds to remove.")
    exec_grace_s: float = Field(
        default=10.0, gt=0, description="After a timeout kill, seconds to wait for the stream."
    )

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> DockerConfig:
        """From `path`, else $FORGE_DOCKER_CONFIG, else the defaults."""
        path = path if path is not None else os.environ.get(CONFIG_ENV)
        if path is None:
            return cls()
        try:
            return cls.model_validate(tomllib.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
            raise DockerUnavailableError(
                [
                    Violation(
                        rule="docker.config",
                        expected=f"a readable TOML DockerConfig at {path}",
                        found=f"{type(exc).__name__}: {exc}",
                        fix="fix the file (fields: owner, images, rewrites, require_rewrite, "
                        "pull, build_network, user, main_user, cap_add, storage)",
                    )
                ]
            ) from None
