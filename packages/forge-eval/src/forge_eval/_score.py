"""Per-panel scoring of one job: Pass@1 (benchmark and scoreable) with Wilson intervals,
exceptions, token and step means, pass@k and pass^k. Never a score mixed across panels."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from forge_eval._audit import HackAudit
from forge_eval._outcomes import NO_REWARD_AFTER_AGENT_ERROR
from forge_eval._protocol import Protocol, protocol_of, protocol_sha256
from forge_eval._reader import Attempt, Job, read_job
from forge_eval._stats import clustered_mean, mean_or_none, pass_at_k, pass_hat_k, wilson_interval

REPORT_SCHEMA = "forge-eval/report@1"
K_GRID = (1, 2, 3, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100)
"""k values reported for pass@k / pass^k (those <= the fewest attempts on any task)."""

_OUT = ConfigDict(frozen=True, extra="forbid", defer_build=True, populate_by_name=True)


class Rate(BaseModel):
    """A Pass@1 with its Wilson 95% interval (all None when there is nothing to score)."""

    model_config = _OUT
    pass_at_1: float | None = Field(description="Solved / attempts.")
    wilson_low: float | None = Field(description="Wilson 95% lower bound.")
    wilson_high: float | None = Field(description="Wilson 95% upper bound.")


class ScoreableRate(Rate):
    """Pass@1 over the attempts without an infrastructure error."""

    n: int = Field(description="Attempts without an infrastructure error.")


class PanelScore(BaseModel):
    """Scores of one panel (dataset) of one run."""

    model_config = _OUT
    panel: str = Field(description="Panel (dataset) name.")
    n_tasks: int = Field(description="Distinct tasks.")
    n_attempts: int = Field(description="Attempts (trials), all of them.")
    solved: int = Field(description="Attempts with reward >= 1.")
    benchmark: Rate = Field(description="Solved / all attempts; infra errors count as failures.")
    scoreable: ScoreableRate = Field(description="Solved / attempts without infra errors.")
    infra_errors: int = Field(description="Attempts whose reward is invalid (infrastructure).")
    agent_errors: int = Field(description="Attempts with an agent-side exception.")
    exceptions: dict[str, int] = Field(description="Attempts per counted exception type.")
    timeouts: int = Field(description="Attempts that ended in a timeout of any kind.")
    mean_input_tokens: float | None = Field(description="Mean n_input_tokens where reported.")
    mean_output_tokens: float | None = Field(description="Mean n_output_tokens where reported.")
    mean_agent_steps: float | None = Field(description="Mean agent steps where known.")
    pass_at_k: dict[str, float] = Field(description="Unbiased pass@k (Chen et al. 2021).")
    pass_at_k_se: dict[str, float | None] = Field(description="Task-clustered SE of pass@k.")
    pass_hat_k: dict[str, float] = Field(description="pass^k: all k attempts succeed.")
    pass_hat_k_se: dict[str, float | None] = Field(description="Task-clustered SE of pass^k.")
    min_attempts_per_task: int = Field(description="Fewest attempts on any task.")


class Report(BaseModel):
    """`forge-eval score --json` output."""

    model_config = _OUT
    schema_id: str = Field(default=REPORT_SCHEMA, alias="schema", description="Schema id.")
    protocol_sha256: str = Field(description="SHA-256 of the canonical protocol JSON.")
    job: str = Field(description="Job directory that was scored.")
    job_name: str = Field(description="Job name (config job_name, else directory name).")
    protocol: Protocol = Field(description="The protocol that was hashed.")
    panels: list[PanelScore] = Field(description="One entry per panel, sorted by name.")
    hack_audit: HackAudit | None = Field(
        description="The job's hack audit (hack-audit.json); None: the job was not audited."
    )
    warnings: list[str] = Field(description="Things a reviewer should know about this run.")


def score_path(path: Path, *, panel: str | None = None, allow_incomplete: bool = False) -> Report:
    """Read a job directory and score it."""
    return score_job(read_job(path, panel=panel, allow_incomplete=allow_incomplete))


def score_job(job: Job) -> Report:
    """Score every panel of a job."""
    protocol = protocol_of(job)
    warnings = list(job.warnings)
    panels = []
    for name in protocol.dataset:
        attempts = [a for a in job.attempts if a.panel == name]
        panels.append(score_panel(name, attempts))
        warnings.extend(_panel_warnings(name, attempts, protocol.attempts))
    return Report(
        protocol_sha256=protocol_sha256(protocol),
        job=str(job.path),
        job_name=job.name,
        protocol=protocol,
        panels=panels,
        hack_audit=job.hack_audit,
        warnings=warnings,
    )


def score_panel(panel: str, attempts: list[Attempt]) -> PanelScore:
    """Score one panel's attempts (at least one)."""
    # 1. counts
    n = len(attempts)
    solved = sum(a.solved for a in attempts)
    infra = [a for a in attempts if a.outcome.category == "infra"]
    scoreable_n = n - len(infra)
    # 2. Pass@1 with Wilson intervals
    benchmark = Rate(**_rate(solved, n))
    scoreable = ScoreableRate(n=scoreable_n, **_rate(solved, scoreable_n))
    # 3. pass@k and pass^k over tasks (clustered by task)
    per_task: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        per_task.setdefault(attempt.task_name, []).append(attempt)
    counts = [(len(ts), sum(t.solved for t in ts)) for ts in per_task.values()]
    n_min = min(size for size, _ in counts)
    ks = sorted({k for k in K_GRID if k <= n_min} | {n_min})
    at_k, at_k_se, hat_k, hat_k_se = {}, {}, {}, {}
    for k in ks:
        at_k[str(k)], at_k_se[str(k)] = clustered_mean([pass_at_k(m, c, k) for m, c in counts])
        hat_k[str(k)], hat_k_se[str(k)] = clustered_mean([pass_hat_k(m, c, k) for m, c in counts])
    exceptions = Counter(a.outcome.counted_type for a in attempts if a.outcome.counted_type)
    return PanelScore(
        panel=panel,
        n_tasks=len(per_task),
        n_attempts=n,
        solved=solved,
        benchmark=benchmark,
        scoreable=scoreable,
        infra_errors=len(infra),
        agent_errors=sum(a.outcome.category == "agent" for a in attempts),
        exceptions=dict(sorted(exceptions.items())),
        timeouts=sum(a.outcome.timeout for a in attempts),
        mean_input_tokens=mean_or_none([a.n_input_tokens for a in attempts]),
        mean_output_tokens=mean_or_none([a.n_output_tokens for a in attempts]),
        mean_agent_steps=mean_or_none([a.agent_steps for a in attempts]),
        pass_at_k=at_k,
        pass_at_k_se=at_k_se,
        pass_hat_k=hat_k,
        pass_hat_k_se=hat_k_se,
        min_attempts_per_task=n_min,
    )


def _rate(x: int, n: int) -> dict[str, float | None]:
    if n == 0:
        return {"pass_at_1": None, "wilson_low": None, "wilson_high": None}
    low, high = wilson_interval(x, n)
    return {"pass_at_1": x / n, "wilson_low": low, "wilson_high": high}


def _panel_warnings(panel: str, attempts: list[Attempt], planned: int) -> list[str]:
    out = []
    infra = sum(a.outcome.category == "infra" for a in attempts)
    if infra:
        out.append(
            f"[{panel}] {infra} infrastructure error(s): benchmark Pass@1 counts them as "
            "failures, scoreable Pass@1 leaves them out; re-run them for a clean score"
        )
    unmapped = sorted(
        {a.exception_type for a in attempts if a.exception_type and not a.outcome.mapped}
    )
    if unmapped:
        out.append(
            f"[{panel}] exception type(s) not in the error table: {unmapped}; scored as "
            "reward kept when the verifier gave one, else infrastructure; add them to "
            "forge_eval._outcomes.ERROR_TABLE"
        )
    lost = sorted(
        {
            a.exception_type or ""
            for a in attempts
            if a.outcome.counted_type == NO_REWARD_AFTER_AGENT_ERROR
        }
    )
    if lost:
        out.append(
            f"[{panel}] agent error(s) {lost} followed by a verifier that gave no reward: "
            f"counted as {NO_REWARD_AFTER_AGENT_ERROR} (infrastructure)"
        )
    sizes = Counter(a.task_name for a in attempts)
    if len(set(sizes.values())) > 1 or set(sizes.values()) != {planned}:
        out.append(
            f"[{panel}] attempts per task range {min(sizes.values())}-"
            f"{max(sizes.values())}, protocol says {planned}"
        )
    return out
