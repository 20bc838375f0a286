"""Checkpoint selection from `validation-metrics.jsonl`.

One JSON object per line: `step` (int), `success_rate_all` (number in [0, 1]) and `solved`
(list of task ids). Every other key (critic metrics included) is ignored on purpose, and
nothing is ever deleted: this only reads and recommends.

Only a step with a checkpoint can be chosen. The steps that have one are the
`checkpoints/global_step_N` folders beside the metrics file when that folder exists (or the
steps given), else every step but 0: step 0 validates the base model before any update, and
has no checkpoint. When the best validation of all is a step without a checkpoint (training has
not beaten the base model), the selection says so in `note`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forge_eval._errors import ForgeEvalError
from forge_eval._stats import jaccard
from forge_gates import iter_jsonl

SELECT_SCHEMA = "forge-eval/select@1"
DEFAULT_PATIENCE = 3
TIE_TOLERANCE = 1e-12
_OUT = ConfigDict(frozen=True, extra="forbid", defer_build=True, populate_by_name=True)


class Checkpoint(BaseModel):
    """One validation step."""

    model_config = _OUT
    step: int = Field(description="Training step of the validation.")
    success_rate_all: float = Field(description="Validation success rate.")
    n_solved: int = Field(description="Tasks solved.")
    jaccard_prev: float | None = Field(
        description="Jaccard overlap of solved sets with the previous step (1 when both empty)."
    )
    gained: list[str] = Field(description="Tasks solved now but not at the previous step.")
    lost: list[str] = Field(description="Tasks solved at the previous step but not now.")
    has_checkpoint: bool = Field(description="A checkpoint of this step exists (selectable).")


class Selection(BaseModel):
    """`forge-eval select --json` output."""

    model_config = _OUT
    schema_id: str = Field(default=SELECT_SCHEMA, alias="schema", description="Schema id.")
    source: str = Field(description="The validation-metrics.jsonl that was read.")
    best_step: int = Field(
        description="Highest success rate among steps with a checkpoint; ties to the earlier."
    )
    best_success_rate: float = Field(description="Success rate at best_step.")
    best_validation_step: int = Field(
        description="Highest success rate of all validations (may lack a checkpoint, e.g. 0)."
    )
    checkpoint_steps: list[int] = Field(description="Validated steps that have a checkpoint.")
    note: str | None = Field(
        default=None, description="Set when the best validation has no checkpoint."
    )
    patience: int = Field(description="Validations without improvement before stopping.")
    rounds_since_best: int = Field(description="Validations after best_step.")
    patience_exhausted: bool = Field(description="rounds_since_best >= patience.")
    hint: str = Field(description="Plain-language patience hint.")
    checkpoints: list[Checkpoint] = Field(description="All validation steps, by step.")


def checkpoint_steps_in(folder: Path) -> set[int]:
    """Steps N of the `global_step_N` folders in a run's checkpoints folder."""
    return {
        int(m.group(1))
        for p in folder.iterdir()
        if p.is_dir() and (m := re.fullmatch(r"global_step_(\d+)", p.name))
    }


def _best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Max success rate; ties go to the earlier step (rows are sorted by step)."""
    best = rows[0]
    for row in rows[1:]:
        if row["success_rate_all"] > best["success_rate_all"] + TIE_TOLERANCE:
            best = row
    return best


def select_checkpoint(
    path: Path,
    *,
    patience: int = DEFAULT_PATIENCE,
    checkpoints: Path | Collection[int] | None = None,
) -> Selection:
    """Pick the best validation step that has a checkpoint, and describe how the solved sets
    moved. `checkpoints`: a run's checkpoints folder or the steps that have one (default: the
    `checkpoints/` folder beside `path` if it exists, else every step but 0)."""
    if patience < 1:
        raise ForgeEvalError(
            "--patience",
            expected="an integer >= 1",
            found=str(patience),
            fix="pass e.g. --patience 3",
        )
    rows = read_metrics(Path(path))
    # 1. which steps can be chosen, then the best of them and the best of all
    if checkpoints is None:
        beside = Path(path).parent / "checkpoints"
        checkpoints = beside if beside.is_dir() else {r["step"] for r in rows if r["step"] > 0}
    saved = checkpoint_steps_in(checkpoints) if isinstance(checkpoints, Path) else set(checkpoints)
    selectable = [row for row in rows if row["step"] in saved]
    if not selectable:
        raise ForgeEvalError(
            str(path),
            expected="a validated step with a checkpoint",
            found=f"validated steps {[r['step'] for r in rows]}, checkpoints {sorted(saved)}",
            fix="validate at save steps (test_freq a multiple of save_freq), or pass "
            "--checkpoints RUN/checkpoints",
        )
    best, overall = _best(selectable), _best(rows)
    note = None
    if overall["success_rate_all"] > best["success_rate_all"] + TIE_TOLERANCE:
        what = "the base model, before any update" if overall["step"] == 0 else "no checkpoint"
        note = (
            f"the best validation is step {overall['step']} ({what}; success "
            f"{overall['success_rate_all']:.3f}): no checkpoint beats it; the best checkpoint "
            f"is step {best['step']} (success {best['success_rate_all']:.3f})"
        )
    # 2. adjacent overlaps
    history: list[Checkpoint] = []
    previous = None
    for row in rows:
        solved = row["solved"]
        history.append(
            Checkpoint(
                step=row["step"],
                success_rate_all=row["success_rate_all"],
                n_solved=len(solved),
                jaccard_prev=None if previous is None else jaccard(previous, solved),
                gained=sorted(solved - previous) if previous is not None else [],
                lost=sorted(previous - solved) if previous is not None else [],
                has_checkpoint=row["step"] in saved,
            )
        )
        previous = solved
    # 3. patience
    since = sum(1 for row in rows if row["step"] > best["step"])
    exhausted = since >= patience
    if exhausted:
        hint = (
            f"no improvement in the {since} validation(s) after step {best['step']} "
            f"(patience {patience}): stopping is reasonable; keep step {best['step']}"
        )
    else:
        hint = (
            f"{since} of {patience} validation(s) without improvement since step "
            f"{best['step']}: keep training"
        )
    return Selection(
        source=str(path),
        best_step=best["step"],
        best_success_rate=best["success_rate_all"],
        best_validation_step=overall["step"],
        checkpoint_steps=sorted(r["step"] for r in selectable),
        note=note,
        patience=patience,
        rounds_since_best=since,
        patience_exhausted=exhausted,
        hint=hint,
        checkpoints=history,
    )


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Parse and check the three keys of every line; blank lines are skipped."""
    if not path.is_file():
        raise ForgeEvalError(
            str(path),
            expected="a validation-metrics.jsonl file",
            found="no such file",
            fix="pass the run's validation-metrics.jsonl",
        )
    rows: dict[int, dict[str, Any]] = {}
    for line in iter_jsonl(path):
        where = f"{path} line {line.number}"
        if line.error is not None:
            raise ForgeEvalError(
                where,
                expected="one JSON object per line",
                found=line.error,
                fix="repair or drop the truncated line",
            )
        record = line.value
        row = _check_row(record, where)
        if row["step"] in rows:
            raise ForgeEvalError(
                f"{where}: field step",
                expected="each step once",
                found=f"step {row['step']} again",
                fix="drop the duplicate line (a resumed run appends again)",
            )
        rows[row["step"]] = row
    if not rows:
        raise ForgeEvalError(
            str(path),
            expected="at least one validation line",
            found="an empty file",
            fix="run validation at least once",
        )
    return [rows[step] for step in sorted(rows)]


def _check_row(record: Any, where: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise ForgeEvalError(
            where,
            expected="a JSON object",
            found=type(record).__name__,
            fix="write one object per line",
        )
    step, rate, solved = record.get("step"), record.get("success_rate_all"), record.get("solved")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ForgeEvalError(
            f"{where}: field step",
            expected="an integer >= 0",
            found=repr(step),
            fix="write the training step as an integer",
        )
    if (
        not isinstance(rate, int | float)
        or isinstance(rate, bool)
        or not math.isfinite(rate)
        or not 0 <= rate <= 1
    ):
        raise ForgeEvalError(
            f"{where}: field success_rate_all",
            expected="a number in [0, 1]",
            found=repr(rate),
            fix="write the fraction of tasks solved",
        )
    if not isinstance(solved, list) or not all(isinstance(t, str) for t in solved):
        raise ForgeEvalError(
            f"{where}: field solved",
            expected="a list of task id strings",
            found=repr(solved)[:80],
            fix="write the solved task ids",
        )
    return {"step": step, "success_rate_all": float(rate), "solved": frozenset(solved)}
