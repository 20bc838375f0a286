"""ImagesConfig: the private registry, its base-image rewrites, shards, quota and BuildKit."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forge_gates import GateError, Violation


class ImagesError(GateError):
    """A plan, build or check of task images failed (every violation listed)."""

    def __init__(self, gate: str, violations: list[Violation]) -> None:
        super().__init__(gate, violations)


class BuildKitConfig(BaseModel):
    """A remote BuildKit daemon over mTLS (buildctl's --addr/--tlscacert/--tlscert/--tlskey)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    addr: str = Field(default="tcp://buildkitd:1234", description="buildkitd address.")
    ca: Path | None = Field(default=None, description="CA certificate file (PEM).")
    cert: Path | None = Field(default=None, description="Client certificate file (PEM).")
    key: Path | None = Field(default=None, description="Client key file (PEM); never logged.")
    server_name: str | None = Field(default=None, description="TLS server name to verify.")
    buildctl: str = Field(default="buildctl", description="The buildctl executable.")
    timeout_s: float = Field(default=3600.0, gt=0, description="Most seconds per build.")


class ImagesConfig(BaseModel):
    """Where task images go and how they are built (frozen; unknown keys refused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    registry: str = Field(
        default="registry.forge.internal", description="Registry host[:port] of task images."
    )
    registry_scheme: str = Field(
        default="https", pattern="^https?$", description="'https', or 'http' for a local one."
    )
    repository_prefix: str = Field(
        default="forge", description="Repositories are <registry>/<prefix>/task-XX."
    )
    shards: int = Field(default=100, ge=1, le=100, description="Shard repositories task-00...")
    tag_quota: int = Field(default=100, ge=1, description="Most tags per repository (seed: 100).")
    rewrites: dict[str, str] = Field(
        default_factory=dict,
        description="Base image -> private mirror. A key ending in '/' or ':' rewrites that "
        "prefix; other keys match the whole reference. A base without a rewrite is refused.",
    )
    username: str | None = Field(default=None, description="Registry user (None: anonymous).")
    password_env: str = Field(
        default="FORGE_REGISTRY_PASSWORD",
        description="Environment variable holding the registry password (never in files).",
    )
    sandbox_uid: int = Field(default=1000, ge=1, description="Owner of /workspace in the image.")
    buildkit: BuildKitConfig = Field(default_factory=BuildKitConfig, description="BuildKit.")

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> ImagesConfig:
        if path is None:
            return cls()
        try:
            return cls.model_validate(tomllib.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
            raise ImagesError(
                "IMAGES_CONFIG",
                [
                    Violation(
                        rule="images.config",
                        expected=f"a readable TOML ImagesConfig at {path}",
                        found=f"{type(exc).__name__}: {exc}",
                        fix="fix the file (fields: registry, rewrites, shards, tag_quota, "
                        "buildkit.addr/ca/cert/key/server_name)",
                    )
                ],
            ) from None

    def password(self) -> str | None:
        return os.environ.get(self.password_env) if self.username else None
