"""The frozen split folder: `manifest.json` plus one JSONL of task records per split.

    <out>/manifest.json       the Manifest below (schema_version 1), written last
    <out>/train.jsonl         one Task record per line, in manifest order
    <out>/validation.jsonl
    <out>/test.jsonl

`sha256` is the semantic hash: SHA-256 of the canonical JSON (sorted keys, no whitespace) of
the manifest without `sha256` and `created_at`, so it changes with any content and never with
the time of the freeze. The folder is built in a hidden staging folder next to it
(`.<out>.staging-<pid>-*`, 0755, files 0644) and renamed into place; a freeze into the same
parent sweeps the staging folders a killed freeze left. An existing folder is never overwritten
(a frozen split is superseded by a new one).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_data._errors import DataError
from forge_data.freeze._freeze import CandidateStats, FreezePlan, FreezeSpec, Shortfall
from forge_data.tasks._harbor_tasks import copy_task_dir
from forge_data.tasks._models import SHA256_PATTERN, SPLITS, SplitName, Task
from forge_gates import (
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
    sha256_canonical,
    staging_dir,
    sweep_stale_staging,
)

MANIFEST_FORMAT = "forge-data/split-manifest"
MANIFEST_SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
_UNHASHED = ("sha256", "created_at")


class ManifestTask(BaseModel):
    """What the manifest pins for one frozen task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repository: str = Field(description="The task's repository.")
    split: SplitName = Field(description="The split it belongs to.")
    fingerprint: str = Field(pattern=SHA256_PATTERN, description="SHA-256 of the task's content.")
    record_sha256: str = Field(
        pattern=SHA256_PATTERN, description="SHA-256 of its canonical record in <split>.jsonl."
    )


class RepositoryEntry(BaseModel):
    """Where one repository went and how many of its tasks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    split: SplitName = Field(description="The one split holding this repository's tasks.")
    tasks: int = Field(ge=1, description="Number of its tasks in that split.")


class OracleProvenance(BaseModel):
    """Which oracle evidence admitted the tasks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["verdicts", "skipped"] = Field(
        description="'verdicts': only accepted tasks; 'skipped': no oracle filter (stated)."
    )
    verdicts_sha256: str | None = Field(
        default=None, description="SHA-256 of the decisions used (task, verdict, rewards)."
    )
    source: str = Field(default="", description="Where the verdicts came from, in words.")


class Manifest(BaseModel):
    """The manifest of a frozen split set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["forge-data/split-manifest"] = Field(description="File kind.")
    schema_version: Literal[1] = Field(description="Manifest schema version.")
    name: str = Field(description="Name of the split set.")
    created_at: str = Field(description="When it was frozen (not hashed).")
    spec: FreezeSpec = Field(description="The spec it was frozen with.")
    splits: dict[SplitName, tuple[str, ...]] = Field(description="Ordered task ids per split.")
    counts: dict[SplitName, int] = Field(description="Number of tasks per split.")
    shortfall: Shortfall = Field(description="What was missing against the spec.")
    tasks: dict[str, ManifestTask] = Field(description="Per-task repository, split, hashes.")
    repositories: dict[str, RepositoryEntry] = Field(description="Per-repository split, count.")
    oracle: OracleProvenance = Field(description="Oracle evidence used.")
    candidates: CandidateStats = Field(description="Candidate accounting.")
    sha256: str = Field(pattern=SHA256_PATTERN, description="Semantic hash (see module doc).")


def semantic_sha256(raw: dict[str, Any]) -> str:
    """The semantic hash of a manifest mapping: everything but `sha256` and `created_at`."""
    return sha256_canonical({k: v for k, v in raw.items() if k not in _UNHASHED})


def build_manifest(plan: FreezePlan, tasks: dict[str, Task], oracle: OracleProvenance) -> Manifest:
    """The manifest for a plan; `tasks` must hold every planned task id."""
    entries = {
        task_id: ManifestTask(
            repository=tasks[task_id].repository,
            split=split,
            fingerprint=tasks[task_id].fingerprint,
            record_sha256=tasks[task_id].record_sha256(),
        )
        for split in SPLITS
        for task_id in plan.splits[split]
    }
    counts: dict[str, int] = {}
    for entry in entries.values():
        counts[entry.repository] = counts.get(entry.repository, 0) + 1
    body: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "name": plan.spec.name,
        "spec": plan.spec.model_dump(mode="json"),
        "splits": {s: list(plan.splits[s]) for s in SPLITS},
        "counts": {s: len(plan.splits[s]) for s in SPLITS},
        "shortfall": plan.shortfall.model_dump(mode="json"),
        "tasks": {k: v.model_dump(mode="json") for k, v in sorted(entries.items())},
        "repositories": {
            repo: {"split": plan.repositories[repo], "tasks": n}
            for repo, n in sorted(counts.items())
        },
        "oracle": oracle.model_dump(mode="json"),
        "candidates": plan.candidates.model_dump(mode="json"),
    }
    body["sha256"] = semantic_sha256(body)
    body["created_at"] = datetime.now(UTC).isoformat()
    return Manifest.model_validate(body)


def _copy_task_dirs(
    root: Path, manifest: Manifest, tasks: dict[str, Task], task_dirs: Mapping[str, Path]
) -> None:
    missing = sorted(i for i in manifest.tasks if i not in task_dirs)
    if missing:
        raise DataError(
            "freeze",
            expected="a task folder for every frozen task (to copy into tasks/)",
            found=f"none for {missing[:5]}{' ...' if len(missing) > 5 else ''}",
            fix="pass --tasks (or --tasks-root) as the folder of Harbor task folders the "
            "tasks were read from",
        )
    for task_id in sorted(manifest.tasks):
        try:
            copy_task_dir(task_dirs[task_id], root / task_id, tasks[task_id].fingerprint)
        except ValueError as exc:
            raise DataError(
                "freeze", expected="unchanged task folders", found=str(exc), fix="rerun"
            ) from exc


def write_frozen(
    out_dir: str | os.PathLike[str],
    manifest: Manifest,
    tasks: dict[str, Task],
    task_dirs: Mapping[str, Path] | None = None,
) -> Path:
    """Write the frozen folder via a staging folder + rename; never overwrites `out_dir`.
    With `task_dirs`, every frozen task's folder is copied to `tasks/<id>/` (fingerprint
    checked)."""
    # 1. refuse an existing target before doing any work
    out = Path(out_dir)
    if out.exists():
        raise DataError(
            "freeze",
            expected=f"{out} not to exist (a frozen split is never changed)",
            found="it exists",
            fix="choose a new --out folder; supersede the old split instead of editing it",
        )
    # 2. stage: split files first, manifest last
    out.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_staging(out.parent, ".*.staging-*")  # what a killed freeze left behind
    staging = staging_dir(out.parent, f".{out.name}.staging-")
    try:
        for split in SPLITS:
            lines = [tasks[i].model_dump_json() + "\n" for i in manifest.splits[split]]
            atomic_write_text(staging / f"{split}.jsonl", "".join(lines))
        if task_dirs is not None:
            _copy_task_dirs(staging / "tasks", manifest, tasks, task_dirs)
        atomic_write_json(staging / MANIFEST_NAME, manifest.model_dump(mode="json"))
        # 3. publish (check again: another writer may have won meanwhile)
        if out.exists():
            raise DataError(
                "freeze",
                expected=f"{out} not to exist",
                found="it appeared while freezing",
                fix="choose a new --out folder",
            )
        os.rename(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def load_manifest(folder: str | os.PathLike[str]) -> Manifest:
    """Load and validate `<folder>/manifest.json` (no recomputation: see `verify_frozen`)."""
    path = Path(folder) / MANIFEST_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(
            "manifest",
            expected=f"a readable JSON manifest at {path}",
            found=exc,
            fix="point at a folder written by `forge-data freeze`",
        ) from exc
    return Manifest.model_validate(raw)


def read_split_tasks(folder: str | os.PathLike[str], split: SplitName) -> list[Task]:
    """The task records of one split of a frozen folder, in manifest order."""
    path = Path(folder) / f"{split}.jsonl"
    return [Task.model_validate(value) for value in read_jsonl(path)]
