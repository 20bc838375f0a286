"""The image plan: per task, its rewritten Dockerfile, shard repository, unique tag, and the
tag quota projected per repository before anything is pushed."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import Violation, tree_sha256
from forge_sandbox._task import HarborTask
from forge_sandbox.images._config import ImagesConfig, ImagesError
from forge_sandbox.images._dockerfile import rewrite_dockerfile

PLAN_SCHEMA = "forge-sandbox/image-plan@1"


class ImageRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str = Field(description="Task name.")
    context: str = Field(description="Build context: the task's environment/ folder.")
    dockerfile: str = Field(description="The rewritten Dockerfile's text.")
    bases: list[tuple[str, str]] = Field(description="(base image, private rewrite) pairs.")
    repository: str = Field(description="<prefix>/task-XX, the task's shard repository.")
    tag: str = Field(description="<task>-<12 hex of the context + Dockerfile hash>: unique.")
    image: str = Field(description="registry/repository:tag.")
    exists: bool = Field(description="The tag was already in the registry (no push needed).")


class ImagePlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: str = Field(default=PLAN_SCHEMA, description="Plan file schema.")
    registry: str = Field(description="The registry host.")
    tag_quota: int = Field(description="Most tags per repository.")
    rows: list[ImageRow] = Field(description="One row per task, in task order.")
    projected: dict[str, dict[str, int]] = Field(
        description="repository -> {existing, new, projected} tag counts."
    )


def shard(task: str, shards: int) -> str:
    """task-XX: sha256 of the task name mod `shards` (stable wherever it is computed)."""
    return f"task-{int(hashlib.sha256(task.encode()).hexdigest()[:8], 16) % shards:02d}"


def tag_for(task: str, digest: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", task).strip(".-")[:100] or "task"
    return f"{readable}-{digest[:12]}"


def plan_images(
    tasks: list[HarborTask],
    config: ImagesConfig,
    existing_tags: Callable[[str], set[str]] | None = None,
) -> ImagePlan:
    """Plan every task's image; ImagesError lists every refusal (a base without a rewrite,
    a Dockerfile that cannot be read, a repository that would pass its tag quota)."""
    violations: list[Violation] = []
    rows: list[ImageRow] = []
    for task in tasks:
        dockerfile = task.path / "environment" / "Dockerfile"
        try:
            text = dockerfile.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            violations.append(
                Violation(
                    rule="images.dockerfile",
                    expected=f"{dockerfile} readable (UTF-8)",
                    found=f"{type(exc).__name__}: {exc}",
                    fix="add environment/Dockerfile to the task",
                )
            )
            continue
        rewritten, bases, problems = rewrite_dockerfile(text, config.rewrites, config.sandbox_uid)
        for problem in problems:
            violations.append(
                Violation(
                    rule="images.rewrite",
                    expected=f"task {task.name}: "
                    "every base image rewritten to the private registry",
                    found=problem,
                    fix="add the base to ImagesConfig.rewrites",
                )
            )
        if problems:
            continue
        digest = hashlib.sha256(
            (tree_sha256(task.path / "environment") + "\n" + rewritten).encode()
        ).hexdigest()
        repository = f"{config.repository_prefix}/{shard(task.name, config.shards)}"
        tag = tag_for(task.name, digest)
        rows.append(
            ImageRow(
                task=task.name,
                context=str(task.path / "environment"),
                dockerfile=rewritten,
                bases=bases,
                repository=repository,
                tag=tag,
                image=f"{config.registry}/{repository}:{tag}",
                exists=False,
            )
        )
    # project the quota per repository, before any push
    projected: dict[str, dict[str, int]] = {}
    final_rows = []
    existing_by_repo: dict[str, set[str]] = {}
    for row in rows:
        if row.repository not in existing_by_repo:
            existing_by_repo[row.repository] = (
                existing_tags(row.repository) if existing_tags else set()
            )
        exists = row.tag in existing_by_repo[row.repository]
        final_rows.append(row.model_copy(update={"exists": exists}))
    for repository, existing in existing_by_repo.items():
        new = {r.tag for r in final_rows if r.repository == repository and not r.exists}
        total = len(existing) + len(new)
        projected[repository] = {"existing": len(existing), "new": len(new), "projected": total}
        if total > config.tag_quota:
            violations.append(
                Violation(
                    rule="images.quota",
                    expected=f"{repository}: at most {config.tag_quota} tags",
                    found=f"{len(existing)} existing + {len(new)} new = {total}",
                    fix="delete old tags of the repository, raise tag_quota, or raise shards",
                )
            )
    if violations:
        raise ImagesError("IMAGES_PLAN", violations)
    return ImagePlan(
        registry=config.registry, tag_quota=config.tag_quota, rows=final_rows, projected=projected
    )
