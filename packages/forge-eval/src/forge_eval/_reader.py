"""Read a Harbor job directory (or Forge rollout output in the same layout) from disk.

Layout: `<job>/config.json` (JobConfig), `<job>/result.json` (JobResult, absent while the job
runs), one directory per trial holding `result.json` (TrialResult) and `config.json`, and
`<job>/hack-audit.json` when forge-rollout audited the job's commands (`_audit.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from forge_eval._audit import HackAudit, read_hack_audit
from forge_eval._errors import ForgeEvalError, read_json, validate_file
from forge_eval._harbor_models import JobConfig, JobResult, TrialResult
from forge_eval._outcomes import Outcome, classify

SOLVED_REWARD = 1.0
"""An attempt is solved when its valid reward is at least this (binary verifiers: 0 or 1)."""

STEP_KEYS = ("n_agent_steps", "agent_steps", "n_steps", "steps", "n_turns", "n_episodes")
"""`agent_result.metadata` keys read as the agent's step count, first match wins."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One trial, scored."""

    task_name: str
    trial_name: str
    trial_dir: Path
    panel: str
    task_checksum: str | None
    exception_type: str | None
    outcome: Outcome
    solved: bool
    n_input_tokens: int | None
    n_output_tokens: int | None
    n_cache_tokens: int | None
    agent_steps: int | None
    started_at: datetime | None


@dataclass(frozen=True, slots=True)
class Job:
    """A job directory, read and classified; `trials` keeps the raw results for the protocol."""

    path: Path
    name: str
    config: JobConfig | None
    attempts: tuple[Attempt, ...]
    trials: tuple[TrialResult, ...]
    warnings: tuple[str, ...]
    panel_from_folder: bool = False
    """True when no dataset name was recorded: the only panel is named after the job folder."""
    hack_audit: HackAudit | None = None
    """`<job>/hack-audit.json`, summarised; None when the job was not audited (no such file)."""


def read_job(path: str | Path, *, panel: str | None = None, allow_incomplete: bool = False) -> Job:
    """Read every trial of a job directory.

    panel: names the panel of a single-panel job (default: see `panel_of`); refused when
    the job holds several panels, which must never be merged.
    allow_incomplete: skip trial directories without result.json (with a warning) instead
    of refusing the job.
    """
    path = Path(path)
    if not path.is_dir():
        raise ForgeEvalError(
            str(path),
            expected="a Harbor job directory",
            found="no such directory",
            fix="pass the directory that holds the job's config.json and trial directories",
        )
    warnings: list[str] = []
    # 1. job-level files (optional: Forge rollout output or a running job may lack them)
    config = None
    if (path / "config.json").is_file():
        config = validate_file(JobConfig, read_json(path / "config.json"), path / "config.json")
    else:
        warnings.append(f"{path}/config.json missing: attempts and retries come from trials")
    job_result = None
    if (path / "result.json").is_file():
        job_result = validate_file(JobResult, read_json(path / "result.json"), path / "result.json")
    # 2. trial directories: result.json = finished, config.json only = unfinished
    finished, unfinished = [], []
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        if (child / "result.json").is_file():
            finished.append(child)
        elif (child / "config.json").is_file():
            unfinished.append(child)
    if unfinished and not allow_incomplete:
        names = ", ".join(p.name for p in unfinished[:5])
        raise ForgeEvalError(
            str(path),
            expected="every trial directory to hold result.json",
            found=f"{len(unfinished)} unfinished trial(s) without result.json: {names}",
            fix="wait for the job to finish, or pass --allow-incomplete to score the rest",
        )
    if unfinished:
        warnings.append(f"{len(unfinished)} unfinished trial(s) skipped (no result.json)")
    if not finished:
        raise ForgeEvalError(
            str(path),
            expected="at least one trial directory with result.json",
            found="an empty job (no finished trials)",
            fix="check the path points at a Harbor job directory, not at jobs/ or a trial",
        )
    # 3. trials -> attempts
    trials, attempts = [], []
    for trial_dir in finished:
        trial = validate_file(
            TrialResult, read_json(trial_dir / "result.json"), trial_dir / "result.json"
        )
        trials.append(trial)
        attempts.append(_attempt(trial, trial_dir, panel_of(trial, config, path), warnings))
    from_folder = panel is None and all(_dataset_of(t, config) is None for t in trials)
    # 4. consistency checks; the panel override renames one panel, never merges several
    if panel is not None:
        natural = sorted({a.panel for a in attempts})
        if len(natural) > 1:
            raise ForgeEvalError(
                f"--panel {panel}",
                expected="a job holding a single panel",
                found=f"{len(natural)} panels {natural}",
                fix="drop --panel: each panel is scored on its own, never merged",
            )
        attempts = [replace(a, panel=panel) for a in attempts]
    _check_unique(attempts, path)
    _check_single_agent(trials, path)
    if job_result and job_result.n_total_trials not in (None, len(trials)):
        warnings.append(
            f"result.json plans {job_result.n_total_trials} trials; "
            f"{len(trials)} finished trial(s) found"
        )
    attempts.sort(key=lambda a: (a.panel, a.task_name, _start_key(a.started_at), a.trial_name))
    # 5. the hack audit forge-rollout wrote beside the trials, when there is one
    hack_audit, audit_warnings = read_hack_audit(path, [p.name for p in finished])
    warnings += audit_warnings
    name = (config.job_name if config and config.job_name else None) or path.name
    return Job(
        path,
        name,
        config,
        tuple(attempts),
        tuple(trials),
        tuple(warnings),
        from_folder,
        hack_audit,
    )


def _start_key(started_at: datetime | None) -> float:
    """Sort key: start time in seconds (naive times read as UTC); unknown starts go last."""
    if started_at is None:
        return math.inf
    if started_at.tzinfo is None:
        started_at = started_at.replace(tzinfo=UTC)
    return started_at.timestamp()


def panel_of(trial: TrialResult, config: JobConfig | None, job_dir: Path) -> str:
    """The panel an attempt belongs to: its dataset.

    First match: the trial's `source` (Harbor's own dataset key), its `config.task.source`,
    the job's only dataset (`name`, else the `path` basename), else the job directory name.
    """
    return _dataset_of(trial, config) or job_dir.name


def _dataset_of(trial: TrialResult, config: JobConfig | None) -> str | None:
    """The dataset name recorded for a trial (see `panel_of`), or None when there is none."""
    if trial.source:
        return trial.source
    if trial.config and trial.config.task and trial.config.task.source:
        return trial.config.task.source
    if config and len(config.datasets) == 1:
        dataset = config.datasets[0]
        if dataset.name or dataset.path:
            return dataset.name or Path(str(dataset.path)).name
    return None


def _attempt(trial: TrialResult, trial_dir: Path, panel: str, warnings: list[str]) -> Attempt:
    reward = _reward(trial, trial_dir / "result.json")
    exception_type = trial.exception_info.exception_type if trial.exception_info else None
    verifier_started = bool(trial.verifier and trial.verifier.started_at)
    outcome = classify(exception_type, reward, verifier_started)
    agent = trial.agent_result
    return Attempt(
        task_name=trial.task_name,
        trial_name=trial.trial_name,
        trial_dir=trial_dir,
        panel=panel,
        task_checksum=trial.task_checksum,
        exception_type=exception_type,
        outcome=outcome,
        solved=outcome.reward is not None and outcome.reward >= SOLVED_REWARD,
        n_input_tokens=agent.n_input_tokens if agent else None,
        n_output_tokens=agent.n_output_tokens if agent else None,
        n_cache_tokens=agent.n_cache_tokens if agent else None,
        agent_steps=_agent_steps(trial, trial_dir, warnings),
        started_at=trial.started_at,
    )


def _reward(trial: TrialResult, path: Path) -> float | None:
    """The valid reward: `rewards['reward']`, or the only key; None when there is none."""
    rewards = trial.verifier_result.rewards if trial.verifier_result else None
    if not rewards:
        return None
    if "reward" in rewards:
        key = "reward"
    elif len(rewards) == 1:
        key = next(iter(rewards))
    else:
        raise ForgeEvalError(
            f"{path}: field verifier_result.rewards",
            expected="a 'reward' key",
            found=f"keys {sorted(rewards)}",
            fix="name the primary reward 'reward'",
        )
    value = float(rewards[key])
    if not math.isfinite(value):
        raise ForgeEvalError(
            f"{path}: field verifier_result.rewards.{key}",
            expected="a finite number",
            found=repr(value),
            fix="the verifier wrote a broken reward; re-run the trial",
        )
    return value


def _agent_steps(trial: TrialResult, trial_dir: Path, warnings: list[str]) -> int | None:
    """Steps from `agent_result.metadata`, else agent steps in `agent/trajectory.json` (ATIF)."""
    metadata = trial.agent_result.metadata if trial.agent_result else None
    for key in STEP_KEYS:
        value = (metadata or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    trajectory = trial_dir / "agent" / "trajectory.json"
    if not trajectory.is_file():
        return None
    try:
        steps = read_json(trajectory).get("steps")
        return sum(1 for s in steps if isinstance(s, dict) and s.get("source") == "agent")
    except (ForgeEvalError, AttributeError, TypeError):
        warnings.append(f"{trajectory}: unreadable trajectory; agent steps not counted")
        return None


def _check_unique(attempts: list[Attempt], path: Path) -> None:
    seen: dict[str, Path] = {}
    for attempt in attempts:
        if attempt.trial_name in seen:
            raise ForgeEvalError(
                f"{attempt.trial_dir}/result.json: field trial_name",
                expected="a trial name unique within the job",
                found=f"{attempt.trial_name!r}, also in {seen[attempt.trial_name]}",
                fix=f"remove the copied trial directory from {path}",
            )
        seen[attempt.trial_name] = attempt.trial_dir


def _check_single_agent(trials: list[TrialResult], path: Path) -> None:
    """A job holding several agents or models would mix runs inside a panel: refuse it."""
    combos = {_agent_model(t) for t in trials}
    if len(combos) > 1:
        raise ForgeEvalError(
            str(path),
            expected="one agent and model per job",
            found=f"{len(combos)} combinations: {sorted(map(str, combos))}",
            fix="split the trials into one job directory per agent/model and compare them",
        )


def _agent_model(trial: TrialResult) -> tuple[str | None, str | None]:
    agent = trial.config.agent if trial.config else None
    info = trial.agent_info
    name = ((agent.name or agent.import_path) if agent else None) or (info.name if info else None)
    model = agent.model_name if agent else None
    if model is None and info and info.model_info:
        model = info.model_info.name
    return name, model
