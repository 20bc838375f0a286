"""Rows (JSONL, or Parquet with the `parquet` extra) -> Harbor task folders, one per row.

Deterministic: the same rows give byte-identical folders (file contents and modes), whatever
the column order. A row that cannot be imported is a `Problem` at `path:line` (or `row N`) and
the others are still written; a task folder that already exists is refused unless
`overwrite=True` (then it is replaced).

    summary = import_rows("swebench", "verified.jsonl", "tasks/")
    summary.written, summary.problems
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forge_data._errors import DataError
from forge_data.importers._layout import (
    GRADE_PY,
    KINDS,
    PATCH_END,
    Kind,
    dockerfile,
    instruction_md,
    solve_sh,
    task_toml,
    test_sh,
)
from forge_data.tasks import Problem, repository_from_id
from forge_gates import atomic_write_text, iter_jsonl

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REQUIRED: dict[Kind, tuple[str, ...]] = {
    "swebench": ("instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS"),
    "swegym": ("instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS"),
    "swesmith": ("instance_id", "repo", "patch", "FAIL_TO_PASS"),
}
Progress = Callable[[int], None]


class ImportSummary(BaseModel):
    """What an import wrote and what it could not."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(description="swebench, swesmith or swegym.")
    out: Path = Field(description="The folder the task folders were written into.")
    read: int = Field(ge=0, description="Rows read (bad ones included).")
    written: tuple[str, ...] = Field(description="Task folders written, by instance id.")
    problems: tuple[Problem, ...] = Field(description="Rows not imported, each located.")


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(location, row or Problem) for a JSONL or Parquet file."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise DataError(
                "parquet reader",
                expected="pyarrow installed",
                found="it is not importable",
                fix="pip install 'forge-data[parquet]' (or import a JSONL export instead)",
            ) from exc
        for index, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield f"{path}:row {index}", row
        return
    for line in iter_jsonl(path):
        if line.error is None:
            yield line.where, line.value
        else:
            reason = f"not valid {line.error.removeprefix('not ')}"
            yield line.where, Problem(location=line.where, reason=reason)


def _tests(row: dict[str, Any], key: str) -> list[str]:
    value = row.get(key) or []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValueError(
            f"{key}: expected a list of test ids (or a JSON string of one); found "
            f"{str(row.get(key))[:60]!r}; fix: export the column as a list"
        )
    return value


def _check(kind: Kind, row: Any) -> list[str]:
    """The row's tests (FAIL_TO_PASS + PASS_TO_PASS); ValueError naming what is wrong."""
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object per row; found {type(row).__name__}")
    missing = [k for k in _REQUIRED[kind] if not row.get(k)]
    if missing:
        raise ValueError(
            f"expected the {kind} columns {list(_REQUIRED[kind])}; found {missing} missing or "
            f"empty; fix: export complete {kind} rows"
        )
    if not isinstance(row["instance_id"], str) or not _SAFE_ID.match(row["instance_id"]):
        raise ValueError(
            f"instance_id: expected a folder-safe id ([A-Za-z0-9._-]); found "
            f"{row['instance_id']!r}; fix: correct the row"
        )
    if any(PATCH_END in str(row.get(k) or "") for k in ("patch", "test_patch")):
        raise ValueError(f"patch: contains the line {PATCH_END!r} this importer ends patches with")
    return _tests(row, "FAIL_TO_PASS") + _tests(row, "PASS_TO_PASS")


def task_files(kind: Kind, row: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Relative path -> (text, mode) of one task folder (pure; raises ValueError on a bad row)."""
    tests = _check(kind, row)
    repo = str(row["repo"])
    if kind == "swesmith":  # SWE-smith's repo column is its mirror: swesmith/owner__repo.commit8
        repo = repository_from_id(repo.split("/")[-1].split(".")[0] + "-0") or repo
    return {
        "task.toml": (task_toml(kind, row, repo), 0o644),
        "instruction.md": (instruction_md(row), 0o644),
        "environment/Dockerfile": (dockerfile(kind, row, tests), 0o644),
        "tests/config.json": (json.dumps(row, indent=2, sort_keys=True, default=str) + "\n", 0o644),
        "tests/test.sh": (test_sh(kind, row, tests), 0o755),
        "tests/grade.py": (GRADE_PY, 0o644),
        "solution/solve.sh": (solve_sh(kind, row), 0o755),
    }


def _write(folder: Path, files: dict[str, tuple[str, int]]) -> None:
    for rel, (text, mode) in sorted(files.items()):
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        os.chmod(path, mode)
    for part in sorted({folder, *(p.parent for p in folder.rglob("*"))}):
        os.chmod(part, 0o755)


def import_rows(
    kind: str,
    rows_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> ImportSummary:
    """Write one Harbor task folder per row of `rows_path` under `out`."""
    if kind not in KINDS:
        raise DataError("import", expected=f"one of {list(KINDS)}", found=kind, fix="pick one")
    source, root = Path(rows_path), Path(out)
    if not source.is_file():
        raise DataError(
            "import", expected="a .jsonl or .parquet rows file", found=f"no file {source}",
            fix="check the ROWS path",
        )  # fmt: skip
    written: list[str] = []
    problems: list[Problem] = []
    count = 0
    for count, (where, row) in enumerate(_rows(source), start=1):
        if progress is not None:
            progress(count)
        if isinstance(row, Problem):
            problems.append(row)
            continue
        try:
            files = task_files(kind, row)
        except ValueError as exc:
            problems.append(Problem(location=where, reason=str(exc)))
            continue
        folder = root / row["instance_id"]
        if row["instance_id"] in written or (folder.exists() and not overwrite):
            again = "an earlier row" if row["instance_id"] in written else "the folder exists"
            problems.append(Problem(location=where, reason=(
                f"instance_id {row['instance_id']!r}: expected a new task folder; found {again}; "
                "fix: pass --overwrite, or a new --out")))  # fmt: skip
            continue
        shutil.rmtree(folder, ignore_errors=True)
        _write(folder, files)
        written.append(row["instance_id"])
    return ImportSummary(
        kind=kind, out=root, read=count, written=tuple(written), problems=tuple(problems)
    )
