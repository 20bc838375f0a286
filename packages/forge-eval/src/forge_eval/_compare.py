"""Paired comparison of two runs on the same tasks: win/tie/loss, exact McNemar, Newcombe.

Run A is the baseline, run B the candidate. On each task the first attempt of each run is
paired (by start time); an infrastructure error counts as a failure (benchmark basis).
2x2 table: `both` = both solved, b = only A solved, c = only B solved, `neither`.
wins = c, losses = b (from B's side), delta = Pass@1(B) - Pass@1(A) = (c - b) / n.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_eval._audit import HackAudit
from forge_eval._errors import NotComparableError
from forge_eval._protocol import SUBJECT_FIELDS, Protocol, protocol_differences, protocol_of
from forge_eval._protocol import protocol_sha256 as _sha
from forge_eval._reader import Attempt, Job
from forge_eval._stats import mcnemar_exact_p, newcombe_paired_interval

COMPARE_SCHEMA = "forge-eval/compare@1"
MIN_DISCORDANT = 6
"""Below 6 discordant tasks even a 0-vs-all split gives exact McNemar p >= 0.0625."""

Label = Literal["solved", "failed", "infra"]
_OUT = ConfigDict(frozen=True, extra="forbid", defer_build=True, populate_by_name=True)


class TaskPair(BaseModel):
    """One task's paired outcome."""

    model_config = _OUT
    task: str = Field(description="Task name.")
    outcome_a: Label = Field(description="Run A's first attempt.")
    outcome_b: Label = Field(description="Run B's first attempt.")
    result: Literal["win", "tie", "loss"] = Field(description="For B against A.")


class PanelComparison(BaseModel):
    """Paired comparison on one panel."""

    model_config = _OUT
    panel: str = Field(description="Panel (dataset) name.")
    n_tasks: int = Field(description="Tasks paired.")
    pass_at_1_a: float = Field(description="Run A: solved / tasks (first attempts).")
    pass_at_1_b: float = Field(description="Run B: solved / tasks (first attempts).")
    wins: int = Field(description="Tasks only B solved (= c).")
    ties: int = Field(description="Tasks both or neither solved.")
    losses: int = Field(description="Tasks only A solved (= b).")
    b: int = Field(description="Discordant: A solved, B failed.")
    c: int = Field(description="Discordant: A failed, B solved.")
    mcnemar_p: float = Field(description="Exact two-sided McNemar p (1 when b + c = 0).")
    delta: float = Field(description="Pass@1(B) - Pass@1(A).")
    delta_low: float = Field(description="Newcombe (method 10) 95% lower bound of delta.")
    delta_high: float = Field(description="Newcombe (method 10) 95% upper bound of delta.")
    per_task: list[TaskPair] = Field(description="Paired outcomes, sorted by task.")
    warnings: list[str] = Field(description="Caveats for this panel.")


class RunRef(BaseModel):
    """A run taking part in a comparison."""

    model_config = _OUT
    name: str = Field(description="Label given on the command line (A, B, ...).")
    job: str = Field(description="Job directory.")
    protocol_sha256: str = Field(description="Full protocol hash of the run.")
    hack_audit: HackAudit | None = Field(
        description="The run's hack audit (hack-audit.json); None: the run was not audited."
    )


class Comparison(BaseModel):
    """`forge-eval compare --json` output."""

    model_config = _OUT
    schema_id: str = Field(default=COMPARE_SCHEMA, alias="schema", description="Schema id.")
    runs: list[RunRef] = Field(description="Run A (baseline) then run B (candidate).")
    comparison_protocol_sha256: str = Field(
        description="Protocol hash without the subject fields: equal for both runs."
    )
    subject: dict[str, list[str | None]] = Field(description="Subject fields: [A, B].")
    panels: list[PanelComparison] = Field(description="One entry per panel.")


def compare_jobs(
    job_a: Job,
    job_b: Job,
    *,
    names: tuple[str, str] = ("A", "B"),
    allow_diff: tuple[str, ...] = (),
) -> Comparison:
    """Compare two runs; raise `NotComparableError` listing every difference if they differ.

    A panel named after its job folder (no dataset recorded, e.g. `forge-rollout run` output)
    says nothing about the tasks: two single-panel jobs pair on it, and the task set and task
    content checks decide whether they are like for like."""
    # 1. like for like: protocol (minus the subject), panels, task sets and digests
    job_a, job_b, folder_note = _align_folder_panels(job_a, job_b)
    prot_a, prot_b = protocol_of(job_a), protocol_of(job_b)
    exempt = (*SUBJECT_FIELDS, *allow_diff)
    differences = protocol_differences(prot_a, prot_b, exclude=(*exempt, "task_digests", "dataset"))
    differences += _task_differences(job_a, job_b)
    if differences:
        raise NotComparableError(
            f"{job_a.path} (A) vs {job_b.path} (B)",
            differences,
            fix=_refusal_fix(differences),
        )
    # 2. one paired comparison per panel
    panels = [
        compare_panel(
            name,
            [x for x in job_a.attempts if x.panel == name],
            [x for x in job_b.attempts if x.panel == name],
        )
        for name in prot_a.dataset
    ]
    if folder_note:
        panels = [p.model_copy(update={"warnings": [*p.warnings, folder_note]}) for p in panels]
    return Comparison(
        runs=[
            RunRef(
                name=names[0],
                job=str(job_a.path),
                protocol_sha256=_sha(prot_a),
                hack_audit=job_a.hack_audit,
            ),
            RunRef(
                name=names[1],
                job=str(job_b.path),
                protocol_sha256=_sha(prot_b),
                hack_audit=job_b.hack_audit,
            ),
        ],
        comparison_protocol_sha256=_sha(prot_a, exclude=exempt),
        subject={f: [_get(prot_a, f), _get(prot_b, f)] for f in exempt},
        panels=panels,
    )


def _align_folder_panels(job_a: Job, job_b: Job) -> tuple[Job, Job, str | None]:
    """Give two single-panel jobs one panel name when a name only came from a job folder."""
    panels_a = {x.panel for x in job_a.attempts}
    panels_b = {x.panel for x in job_b.attempts}
    if panels_a == panels_b or len(panels_a) != 1 or len(panels_b) != 1:
        return job_a, job_b, None
    if not (job_a.panel_from_folder or job_b.panel_from_folder):
        return job_a, job_b, None  # two recorded datasets that differ: never paired
    (name_a,), (name_b,) = panels_a, panels_b
    name = name_b if job_a.panel_from_folder and not job_b.panel_from_folder else name_a

    def renamed(job: Job) -> Job:
        return replace(job, attempts=tuple(replace(x, panel=name) for x in job.attempts))

    note = (
        f"panel names came from job folders (A: {name_a}, B: {name_b}): paired as "
        f"{name!r} because the task sets match"
    )
    return renamed(job_a), renamed(job_b), note


def _refusal_fix(differences: list[str]) -> str:
    """The fix for a refusal: what to re-run, or the option that names the difference."""
    fixes = ["compare runs made with one protocol on one frozen task set; re-run the odd one out"]
    if any(line.startswith("panels:") for line in differences):
        fixes.append(
            "if both runs hold the same tasks under different panel names, name the panel "
            "with --panel NAME (forge-eval compare --panel NAME --run A=... --run B=...)"
        )
    fields = [line.split(":", 1)[0] for line in differences]
    protocol = [f for f in fields if f in Protocol.model_fields]
    if protocol:
        fixes.append(
            "if a protocol difference is the point, allow it with "
            + " ".join(f"--allow-diff {f}" for f in protocol)
        )
    return "; ".join(fixes)


def compare_panel(
    panel: str, attempts_a: list[Attempt], attempts_b: list[Attempt]
) -> PanelComparison:
    """Pair the first attempt of each task of the same panel in two runs (same task set)."""
    first_a, first_b = _first_attempts(attempts_a), _first_attempts(attempts_b)
    pairs, both, b, c, neither = [], 0, 0, 0, 0
    for task in sorted(first_a):
        x, y = first_a[task], first_b[task]
        both += x.solved and y.solved
        b += x.solved and not y.solved
        c += y.solved and not x.solved
        neither += not x.solved and not y.solved
        result = "win" if y.solved > x.solved else "loss" if x.solved > y.solved else "tie"
        pairs.append(TaskPair(task=task, outcome_a=_label(x), outcome_b=_label(y), result=result))
    n = len(pairs)
    delta, low, high = newcombe_paired_interval(both, c, b, neither)  # first margin = B
    return PanelComparison(
        panel=panel,
        n_tasks=n,
        pass_at_1_a=(both + b) / n,
        pass_at_1_b=(both + c) / n,
        wins=c,
        ties=both + neither,
        losses=b,
        b=b,
        c=c,
        mcnemar_p=mcnemar_exact_p(b, c),
        delta=delta,
        delta_low=low,
        delta_high=high,
        per_task=pairs,
        warnings=_warnings(attempts_a, attempts_b, b + c, n),
    )


def _first_attempts(attempts: list[Attempt]) -> dict[str, Attempt]:
    first: dict[str, Attempt] = {}
    for attempt in attempts:  # read_job sorts by (task, started_at, trial_name)
        first.setdefault(attempt.task_name, attempt)
    return first


def _label(attempt: Attempt) -> Label:
    if attempt.solved:
        return "solved"
    return "infra" if attempt.outcome.category == "infra" else "failed"


def _warnings(
    attempts_a: list[Attempt], attempts_b: list[Attempt], discordant: int, n: int
) -> list[str]:
    out = []
    if discordant < MIN_DISCORDANT:
        out.append(
            f"only {discordant} discordant task(s): with fewer than {MIN_DISCORDANT}, "
            "p < 0.05 is impossible whatever the split; this panel cannot show a "
            "difference"
        )
    infra = [sum(x.outcome.category == "infra" for x in run) for run in (attempts_a, attempts_b)]
    if any(infra):
        out.append(
            f"infrastructure errors A={infra[0]} B={infra[1]} counted as failures; "
            "re-run them for a clean comparison"
        )
    if len(attempts_a) > n or len(attempts_b) > n:
        out.append(
            "several attempts per task: only the first attempt of each task is paired; "
            "see `forge-eval score` for pass@k"
        )
    return out


def _task_differences(job_a: Job, job_b: Job) -> list[str]:
    tasks_a = {(x.panel, x.task_name): x.task_checksum for x in job_a.attempts}
    tasks_b = {(x.panel, x.task_name): x.task_checksum for x in job_b.attempts}
    out = []
    panels_a, panels_b = {p for p, _ in tasks_a}, {p for p, _ in tasks_b}
    if panels_a != panels_b:
        out.append(f"panels: A={sorted(panels_a)} B={sorted(panels_b)}")
    for panel in sorted(panels_a & panels_b):
        names_a = {t for p, t in tasks_a if p == panel}
        names_b = {t for p, t in tasks_b if p == panel}
        if names_a != names_b:
            out.append(
                f"[{panel}] task set: only in A {_list(names_a - names_b)}; "
                f"only in B {_list(names_b - names_a)}"
            )
        changed = sorted(
            t
            for t in names_a & names_b
            if tasks_a[panel, t] and tasks_b[panel, t] and tasks_a[panel, t] != tasks_b[panel, t]
        )
        if changed:
            out.append(f"[{panel}] task content differs (task_checksum): {_list(set(changed))}")
    return out


def _list(items: set[str], limit: int = 10) -> str:
    ordered = sorted(items)
    more = f", ... ({len(ordered)} in all)" if len(ordered) > limit else ""
    return "[" + ", ".join(ordered[:limit]) + more + "]"


def _get(protocol: Protocol, field: str) -> str | None:
    value = getattr(protocol, field)
    return None if value is None else str(value)
