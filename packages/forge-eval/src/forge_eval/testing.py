"""Harbor-shaped job folders for tests, written with Harbor's own field names.

`write_job` writes `<job>/config.json`, `<job>/result.json` and one folder per trial holding
`config.json` and `result.json`, as Harbor 0.25 lays them out (models/job/config.py,
models/job/result.py, models/trial/config.py, models/trial/result.py); `trial_result` and
`job_config` make their JSON; `write_hack_audit` adds the `hack-audit.json` forge-rollout writes
beside the trials. forge-eval's tests and those of packages that score Harbor jobs (the P0
recipe's) build their inputs with it:

    from forge_eval.testing import panel_trials, write_hack_audit, write_job

    job = write_job(tmp_path, "run-a", panel_trials({"t1"}, ["t1", "t2"]))
    write_hack_audit(job, {"t1__t000": {"git_history": 2}})  # 1 of 2 episodes flagged
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "AGENT_KWARGS",
    "AUDIT_RULES",
    "T0",
    "job_config",
    "panel_trials",
    "trial_result",
    "write_hack_audit",
    "write_job",
]

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
AGENT_KWARGS = {"step_limit": 200, "context_window": 65536, "temperature": 1.0, "seed": 20260822}
AUDIT_RULES = ("verifier_paths", "test_files", "test_config", "git_history", "other_processes")
"""The hack audit's rules, as `forge_rollout.episodes._audit.RULES` names them."""


def trial_result(
    task: str,
    *,
    reward: float | None = 1.0,
    exception: str | None = None,
    index: int = 0,
    source: str | None = "test38",
    checksum: str | None = None,
    model: str = "forge-sft",
    agent_kwargs: dict[str, Any] | None = None,
    tokens: tuple[int | None, int | None] = (12000, 800),
    metadata: dict[str, Any] | None = None,
    verifier_started: bool = True,
) -> dict[str, Any]:
    """One Harbor TrialResult as JSON-ready data."""
    name = f"{task[:32]}__t{index:03d}"
    start = T0 + timedelta(minutes=index)
    kwargs = dict(AGENT_KWARGS if agent_kwargs is None else agent_kwargs)
    config = {
        "task": {"path": f"datasets/{source or 'adhoc'}/{task}", "git_url": None,
                 "git_commit_id": None, "overwrite": False, "download_dir": None,
                 "source": source},
        "trial_name": name,
        "trials_dir": "jobs/run",
        "timeout_multiplier": 1.0,
        "agent": {"name": "mini-swe-agent", "import_path": None, "model_name": model,
                  "override_timeout_sec": None, "override_setup_timeout_sec": None,
                  "max_timeout_sec": None, "kwargs": kwargs, "env": {}},
        "environment": {"type": "docker", "import_path": None, "force_build": False,
                        "delete": True, "kwargs": {}},
        "verifier": {"override_timeout_sec": 180.0, "max_timeout_sec": None, "disable": False},
        "job_id": "6f1c2c9e-2b1d-4a43-9f43-2f7d7b0c9a11",
    }  # fmt: skip
    return {
        "id": f"00000000-0000-0000-0000-{index:012d}",
        "task_name": task,
        "trial_name": name,
        "trial_uri": f"file:///jobs/run/{name}",
        "task_id": {"path": f"datasets/{source or 'adhoc'}/{task}"},
        "source": source,
        "task_checksum": checksum or f"sha256-{task}",
        "config": config,
        "agent_info": {"name": "mini-swe-agent", "version": "2.4.6",
                       "model_info": {"name": model, "provider": "hosted_vllm"}},
        "agent_result": {"n_input_tokens": tokens[0], "n_cache_tokens": 0,
                         "n_output_tokens": tokens[1], "cost_usd": None,
                         "rollout_details": None, "metadata": metadata},
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "exception_info": None if exception is None else {
            "exception_type": exception, "exception_message": f"{exception} raised",
            "exception_traceback": "Traceback (most recent call last): ...",
            "occurred_at": (start + timedelta(seconds=30)).isoformat()},
        "started_at": start.isoformat(),
        "finished_at": (start + timedelta(minutes=1)).isoformat(),
        "environment_setup": {"started_at": start.isoformat(), "finished_at": start.isoformat()},
        "agent_setup": None,
        "agent_execution": {"started_at": start.isoformat(), "finished_at": start.isoformat()},
        "verifier": {"started_at": start.isoformat(), "finished_at": start.isoformat()}
        if verifier_started else None,
    }  # fmt: skip


def job_config(name: str, *, n_attempts: int = 1, dataset: str = "test38") -> dict[str, Any]:
    """A Harbor JobConfig as JSON-ready data."""
    return {
        "job_name": name, "jobs_dir": "jobs", "n_attempts": n_attempts,
        "timeout_multiplier": 1.0, "debug": False, "n_concurrent_trials": 8, "quiet": False,
        "retry": {"max_retries": 0, "include_exceptions": None,
                  "exclude_exceptions": ["AgentTimeoutError", "VerifierTimeoutError"],
                  "wait_multiplier": 1.0, "min_wait_sec": 1.0, "max_wait_sec": 60.0},
        "environment": {"type": "docker", "force_build": False, "delete": True},
        "verifier": {"override_timeout_sec": 180.0, "disable": False},
        "metrics": [],
        "agents": [{"name": "mini-swe-agent", "model_name": "forge-sft",
                    "kwargs": dict(AGENT_KWARGS)}],
        "datasets": [{"path": f"datasets/{dataset}", "name": None, "task_names": None}],
        "tasks": [],
    }  # fmt: skip


def write_job(
    root: Path,
    name: str,
    trials: list[dict[str, Any]],
    *,
    config: dict[str, Any] | bool | None = True,
    job_result: bool = True,
) -> Path:
    """Write a job directory; `config=True` writes the default job config, None/False none."""
    job = root / name
    job.mkdir(parents=True)
    if config is True:
        config = job_config(name)
    if config:
        (job / "config.json").write_text(json.dumps(config, indent=4))
    for trial in trials:
        # the directory is named like Harbor's TrialConfig.trial_name (tests may break the result)
        trial_dir = job / str((trial.get("config") or {}).get("trial_name") or trial["trial_name"])
        trial_dir.mkdir()
        (trial_dir / "config.json").write_text(json.dumps(trial.get("config") or {}, indent=4))
        (trial_dir / "result.json").write_text(json.dumps(trial, indent=4))
    if job_result:
        errored = sum(1 for t in trials if t.get("exception_info"))
        result = {
            "id": "6f1c2c9e-2b1d-4a43-9f43-2f7d7b0c9a11",
            "started_at": T0.isoformat(),
            "updated_at": T0.isoformat(),
            "finished_at": (T0 + timedelta(hours=1)).isoformat(),
            "n_total_trials": len(trials),
            "stats": {"n_completed_trials": len(trials), "n_errored_trials": errored,
                      "evals": {}},
        }  # fmt: skip
        (job / "result.json").write_text(json.dumps(result, indent=4))
    return job


def panel_trials(
    solved: set[str] | list[str], tasks: list[str], **kwargs: Any
) -> list[dict[str, Any]]:
    """One attempt per task; reward 1 for tasks in `solved`, else 0."""
    return [
        trial_result(task, reward=1.0 if task in solved else 0.0, index=i, **kwargs)
        for i, task in enumerate(tasks)
    ]


def write_hack_audit(
    job: Path, flagged: dict[str, dict[str, int]], *, episodes: int | None = None
) -> dict[str, Any]:
    """Write `<job>/hack-audit.json` as `forge_rollout.audit_job` does: `flagged` maps trial
    folders to rule -> flagged commands; `episodes` defaults to the job's trial folders."""
    if episodes is None:
        episodes = sum(1 for p in job.iterdir() if (p / "result.json").is_file())
    by_rule = Counter(rule for flags in flagged.values() for rule in flags)
    audit = {
        "schema": "forge-rollout/hack-audit@1",
        "episodes": episodes,
        "flagged": len(flagged),
        "flagged_share": round(len(flagged) / episodes, 4) if episodes else 0.0,
        "by_rule": {rule: by_rule.get(rule, 0) for rule in AUDIT_RULES},
        "trials": flagged,
    }
    (job / "hack-audit.json").write_text(json.dumps(audit, indent=2))
    return audit
