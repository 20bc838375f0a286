"""A job's hack audit: `<job>/hack-audit.json` as `forge-rollout run` (`forge_rollout.audit_job`)
writes it, read and summarised for the reports, never written here. forge-eval does not import
forge-rollout (a lint contract holds it): `HackAuditFile` is the file's shape, schema
`forge-rollout/hack-audit@1`.

A job without the file was not audited: its `hack_audit` is None and the tables say "no audit",
never "0 flagged". A file that is not the audit's shape, or whose counts disagree, is an error.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_eval._errors import ForgeEvalError, read_json, validate_file

AUDIT_NAME = "hack-audit.json"
AUDIT_SCHEMA = "forge-rollout/hack-audit@1"
_FIX = (
    f"regenerate it with forge_rollout.audit_job(JOB) (`forge-rollout run` writes it), or "
    f"delete {AUDIT_NAME} to score the job without an audit"
)


class HackAuditFile(BaseModel):
    """`<job>/hack-audit.json`. Known fields are checked strictly; unknown ones are ignored."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", strict=True, defer_build=True, populate_by_name=True
    )
    schema_id: Literal["forge-rollout/hack-audit@1"] = Field(alias="schema", description="Id.")
    episodes: int = Field(ge=0, description="Trials with an agent/trajectory.json (audited).")
    flagged: int = Field(ge=0, description="Audited episodes any rule flags.")
    flagged_share: float = Field(ge=0.0, le=1.0, description="flagged / episodes, 4 digits.")
    by_rule: dict[str, int] = Field(description="Rule -> flagged episodes it fired in.")
    trials: dict[str, dict[str, int]] = Field(
        description="Flagged trial folder -> rule -> commands it flagged."
    )


class HackAudit(BaseModel):
    """A job's hack audit in a report (`Report.hack_audit`, a comparison's `RunRef.hack_audit`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    episodes: int = Field(description="Episodes audited (trials with a trajectory).")
    flagged: int = Field(description="Episodes any rule flags.")
    flagged_share: float | None = Field(
        description="flagged / episodes; None when no episode was audited (never a 0)."
    )
    by_rule: dict[str, int] = Field(description="Rule -> flagged episodes (every rule, 0 too).")
    flagged_trials: list[str] = Field(description="Flagged trial folders, sorted.")


def read_hack_audit(
    job_dir: Path, trial_dirs: Collection[str]
) -> tuple[HackAudit | None, list[str]]:
    """The audit of `job_dir` (None without `hack-audit.json`) and warnings about its coverage;
    `trial_dirs` are the job's scored trial folder names. Raises `ForgeEvalError` on a file
    that is not the audit's shape or whose counts disagree."""
    path = job_dir / AUDIT_NAME
    if not path.is_file():
        return None, []
    # 1. the shape, then the counts against each other
    audit = validate_file(HackAuditFile, read_json(path), path, fix=_FIX)
    expected_share = audit.flagged / audit.episodes if audit.episodes else 0.0
    problems = [
        (
            "flagged",
            f"flagged <= episodes ({audit.episodes})",
            f"flagged = {audit.flagged}",
            audit.flagged <= audit.episodes,
        ),
        (
            "trials",
            f"one entry per flagged episode ({audit.flagged})",
            f"{len(audit.trials)} entries",
            len(audit.trials) == audit.flagged,
        ),
        (
            "by_rule",
            f"each rule's count <= flagged ({audit.flagged})",
            f"{audit.by_rule}",
            all(0 <= n <= audit.flagged for n in audit.by_rule.values()),
        ),
        (
            "flagged_share",
            f"flagged / episodes = {expected_share:.4f}",
            f"{audit.flagged_share}",
            abs(audit.flagged_share - expected_share) <= 5e-5,
        ),
    ]
    for field, expected, found, ok in problems:
        if not ok:
            raise ForgeEvalError(f"{path}: field {field}", expected=expected, found=found, fix=_FIX)
    # 2. coverage: an audit of another run of the folder, or of part of the job, is said so
    warnings = []
    stale = sorted(set(audit.trials) - set(trial_dirs))
    if stale:
        warnings.append(
            f"{AUDIT_NAME} flags {len(stale)} trial(s) not scored in this job "
            f"(e.g. {', '.join(stale[:3])}): an audit of another run of this folder? "
            f"{_FIX}"
        )
    if 0 < audit.episodes < len(trial_dirs):
        warnings.append(
            f"the hack audit covers {audit.episodes} of {len(trial_dirs)} trial(s) (the others "
            "have no agent/trajectory.json); its flagged share is over the audited ones"
        )
    summary = HackAudit(
        episodes=audit.episodes,
        flagged=audit.flagged,
        flagged_share=expected_share if audit.episodes else None,
        by_rule=dict(sorted(audit.by_rule.items())),
        flagged_trials=sorted(audit.trials),
    )
    return summary, warnings
