"""Rollouts for training and validation through forge-rollout, and their metrics."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from forge_gates import Check, Gate, RunSpec, append_jsonl, gate
from forge_ppo.algo._observability import EpisodeOutcome, task_rollout_metrics
from forge_ppo.recipes._sandboxes import close_sandboxes, open_sandboxes
from forge_ppo.recipes.train._plan import RunPlan, validation_decoding
from forge_ppo.recipes.train._runlog import RunLog
from forge_rollout import (
    POLICY_NAME,
    AgentConfig,
    InferenceStack,
    agent_config_from_spec,
    audit_job,
    run_rollouts,
)
from forge_rollout.rows import read_traces
from forge_sandbox import reward_of

VALIDATION_SCHEMA = "forge-ppo/validation-metrics@1"


def progress_label(job_dir: Path, total_steps: int) -> str:
    """What a job folder is, for progress lines: `train step 3/8 round 0` for
    `episodes/step_0003/round_0`, `validation step 10` for `validation/step_0010`."""

    def number(name: str) -> int | None:
        head, _, digits = name.rpartition("_")
        return int(digits) if head and digits.isdigit() else None

    step, parent = number(job_dir.parent.name), job_dir.parent.parent.name
    if parent == "episodes" and step is not None and number(job_dir.name) is not None:
        return f"train step {step}/{total_steps} round {number(job_dir.name)}"
    if job_dir.parent.name == "validation" and number(job_dir.name) is not None:
        return f"validation step {number(job_dir.name)}"
    return job_dir.name


def _progress(label: str):
    def show(done: int, total: int, result: dict[str, Any]) -> None:
        reward = reward_of((result.get("verifier_result") or {}).get("rewards"))
        error = (result.get("exception_info") or {}).get("exception_type")
        print(
            f"[{label}] episode {done}/{total} {result['task_name']} reward={reward} "
            f"{error or ''}".rstrip(),
            file=sys.stderr,
            flush=True,
        )

    return show


def rollout_batch(
    spec: RunSpec,
    plan: RunPlan,
    live: InferenceStack,
    job_dir: Path,
    task_ids: list[str],
    config: AgentConfig,
    attempts: int | None = None,
) -> Path:
    """Episodes of `task_ids` (each `rollouts_per_task` times) into `job_dir`."""
    if attempts is None:
        assert spec.ppo is not None, "a training spec has [ppo]; pass `attempts` otherwise"
        attempts = spec.ppo.rollouts_per_task
    tasks = [plan.tasks[i] for i in task_ids]
    make_sandbox = open_sandboxes(spec, tasks)
    try:
        asyncio.run(
            run_rollouts(
                tasks,
                job_dir,
                endpoint=live.gateway_url,
                model=POLICY_NAME,
                config=config,
                attempts=attempts,
                concurrency=spec.resources.concurrency,
                warm=spec.resources.warm_sandboxes,
                traces_dir=live.traces_dir,
                verifier_timeout_s=spec.agent.verifier_timeout_s,
                make_sandbox=make_sandbox,
                progress=_progress(progress_label(job_dir, plan.total_steps)),
            )
        )
    finally:
        close_sandboxes(make_sandbox)
    return job_dir


def _trials(job_dirs: list[Path]) -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text()) for job in job_dirs for p in sorted(job.glob("*/result.json"))
    ]


def failure_reasons(job_dirs: list[Path]) -> dict[str, str]:
    """Per task, why its episodes gave no reward: the trials' exception types (infra errors)."""
    reasons: dict[str, set[str]] = {}
    for trial in _trials(job_dirs):
        kind = (trial.get("exception_info") or {}).get("exception_type")
        if kind and reward_of((trial.get("verifier_result") or {}).get("rewards")) is None:
            reasons.setdefault(trial["task_name"], set()).add(kind)
    return {task: "infrastructure error: " + ", ".join(sorted(k)) for task, k in reasons.items()}


def episode_outcomes(job_dirs: list[Path]) -> list[EpisodeOutcome]:
    outcomes = []
    for trial in _trials(job_dirs):
        reward = reward_of((trial.get("verifier_result") or {}).get("rewards"))
        kind = (trial.get("exception_info") or {}).get("exception_type") or ""
        meta = (trial.get("agent_result") or {}).get("metadata") or {}
        outcomes.append(
            EpisodeOutcome(
                task_id=trial["task_name"],
                reward=reward,
                success=reward is not None and reward >= 1,
                timed_out="Timeout" in kind or meta.get("exit_status") == "LimitsExceeded",
                error=reward is None,
                agent_caused=reward is not None and kind in AGENT_CAUSED,
                action_tokens=int((trial.get("agent_result") or {}).get("n_output_tokens") or 0),
                agent_steps=int(meta.get("n_steps") or 0),
            )
        )
    return outcomes


AGENT_CAUSED = ("AgentCausedFailure", "AgentResourceLimitError")
"""Exception types of failures the agent's own actions caused (forge-sandbox scores them 0)."""


def rollout_metrics(episodes: list[EpisodeOutcome]) -> dict[str, float]:
    """Batch-level rollout metrics plus the per-task ones (`train/task/<id>/rollout/*`)."""
    rewards = [e.reward for e in episodes if e.reward is not None]
    metrics = {
        "rollout/episodes": float(len(episodes)),
        "rollout/errors": float(sum(e.error for e in episodes)),
        "rollout/infra_error_rate": sum(e.error for e in episodes) / max(len(episodes), 1),
        "rollout/agent_caused_failures": float(sum(e.agent_caused for e in episodes)),
        "rollout/timeouts": float(sum(e.timed_out for e in episodes)),
        "rollout/success_rate": sum(e.success for e in episodes) / max(len(episodes), 1),
        "rollout/agent_steps_mean": sum(e.agent_steps for e in episodes) / max(len(episodes), 1),
    }
    if rewards:
        metrics["rollout/reward_mean"] = sum(rewards) / len(rewards)
    return metrics | task_rollout_metrics(episodes)


def hack_audit_metrics(job_dirs: list[Path]) -> dict[str, float]:
    """`train/hack_audit/*` of a step's jobs (each job's hack-audit.json written too): the
    flagged episodes, their share, and the episodes each rule flagged."""
    episodes = flagged = 0
    by_rule: dict[str, float] = {}
    for job in job_dirs:
        report = audit_job(job)
        episodes += report["episodes"]
        flagged += report["flagged"]
        for rule, count in report["by_rule"].items():
            by_rule[f"train/hack_audit/{rule}"] = (
                by_rule.get(f"train/hack_audit/{rule}", 0.0) + count
            )
    return {
        "train/hack_audit/flagged": float(flagged),
        "train/hack_audit/flagged_share": flagged / episodes if episodes else 0.0,
        **by_rule,
    }


def sent_decoding(job_dir: Path, decoding: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """(calls recorded in the job's traces, the sampling params of those that differ from
    `decoding`); `n` absent means 1."""
    calls, wrong = 0, []
    for folder in sorted(p.parent for p in job_dir.glob("*/agent/traces.jsonl")):
        for trace in read_traces(folder):
            calls += 1
            sent = {k: trace.params.get(k, 1 if k == "n" else None) for k in decoding}
            if sent != decoding:
                wrong.append(sent)
    return calls, wrong


def validate(
    spec: RunSpec, plan: RunPlan, live: InferenceStack, run_dir: Path, step: int, log: RunLog
) -> dict[str, Any]:
    """Greedy rollouts of the validation subset; one line of validation-metrics.jsonl."""
    job = run_dir / "validation" / f"step_{step:04d}"
    rollout_batch(
        spec,
        plan,
        live,
        job,
        list(plan.validation_ids),
        agent_config_from_spec(spec, "validation"),
        attempts=1,
    )
    episodes = episode_outcomes([job])
    solved = sorted(e.task_id for e in episodes if e.success)
    n_tasks = len(plan.validation_ids)
    success_rate = len(solved) / max(n_tasks, 1)
    errors = sum(e.error for e in episodes)
    timeouts = sum(e.timed_out for e in episodes)
    scoreable = n_tasks - errors
    line: dict[str, Any] = {
        "schema": VALIDATION_SCHEMA,
        "step": step,
        # benchmark rate: an infrastructure error counts as a failure (it picks checkpoints)
        "success_rate_all": success_rate,
        # scoreable rate: over the attempts that ran without an infrastructure error
        "success_rate_scoreable": len(solved) / scoreable if scoreable else None,
        "solved": solved,
        "n_tasks": n_tasks,
        "errors": errors,
        "timeouts": timeouts,
        "task_order": list(plan.validation_ids),
    }
    append_jsonl(run_dir / "validation-metrics.jsonl", line, fsync=True)
    # the decoding the server actually received (from the recorded calls), against the contract
    decoding = validation_decoding(spec)
    calls, wrong = sent_decoding(job, decoding)
    check = Check(Gate.PPO_VALIDATION_PASSED)
    for kind, count, limit in (
        ("errors", errors, spec.agent.max_infra_error_ratio),
        ("timeouts", timeouts, spec.agent.max_timeout_ratio),
    ):
        check.require(
            count <= limit * max(n_tasks, 1),
            rule=f"validation.{kind}_ratio",
            expected=f"<= {limit} of {n_tasks} validation tasks with {kind}",
            found=f"{count} ({count / max(n_tasks, 1):.2f})",
            fix="a validation this broken cannot pick a checkpoint; see the trials' "
            "exception_info and fix the infrastructure or the limits",
        )
    check.require(
        not wrong,
        rule="validation.decoding",
        expected=f"every validation call sent {decoding} (validation-contract.json)",
        found=f"{len(wrong)} of {calls} calls differ, e.g. {wrong[:2]}",
        fix="validation must be greedy with one sample; see forge_rollout.agent_config_from_spec",
    )
    gate(
        run_dir,
        check.gate,
        check.violations,
        {
            "step": step,
            "tasks": line["n_tasks"],
            "solved": len(solved),
            "errors": errors,
            "timeouts": timeouts,
            "success_rate_all": line["success_rate_all"],
            "calls": calls,
        },
    )
    log.metrics(step, {"val/success_rate_all": success_rate})
    return line
