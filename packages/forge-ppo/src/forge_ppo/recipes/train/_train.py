"""`forge-ppo train`: a PPO run (smoke, soak, formal), read top to bottom as numbered steps.

Per update: roll out the batch with forge-rollout (server + gateway + sandboxes), turn traces
into rows, PPO-update actor (LoRA) and critic, push the adapter to the server, log metrics,
validate and save on schedule. Every phase's gates go to `<run_dir>/gates.jsonl` (the checks
are `_checks`); the run is judged by `forge-gates verify` at the end, never by exit code 0 alone.
`provenance.json` (forge-gates `recorded_run`) records the code, packages, machine, peaks and
disk growth from the folder's creation to the end, a failure included.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import forge_data
from forge_eval import select_checkpoint
from forge_gates import (
    Gate,
    GateError,
    RunProvenance,
    RunSpec,
    gate,
    new_run_dir,
    preflight,
    record_gate,
    recorded_run,
    run_spec_gate,
    verify_run,
    write_config_summary,
)
from forge_ppo._protocol import Trainer
from forge_ppo._trainers import BACKENDS, build_trainer, check_parent
from forge_ppo.algo._observability import EpisodeOutcome
from forge_ppo.checkpoint._update import UpdateRecord
from forge_ppo.recipes._sandboxes import sandbox_problems
from forge_ppo.recipes._warm_starts import resolve_warm_start
from forge_ppo.recipes.train._checks import (
    budget_gates,
    check_alive,
    check_epoch_coverage,
    check_rows,
    check_served,
    check_update,
    check_verdict,
    settings_gate,
)
from forge_ppo.recipes.train._memory import memory_violations
from forge_ppo.recipes.train._placement import (
    assign_gpus,
    prepare_trainer_env,
    separated_rollout_gate,
)
from forge_ppo.recipes.train._plan import RunPlan, plan_run, rounds
from forge_ppo.recipes.train._rollouts import (
    episode_outcomes,
    failure_reasons,
    hack_audit_metrics,
    rollout_batch,
    rollout_metrics,
    validate,
)
from forge_ppo.recipes.train._runlog import Curves, RunLog, all_finite, check_curves
from forge_rollout import (
    AgentConfig,
    InferenceStack,
    agent_config_from_spec,
    open_inference_stack,
    resolve_model,
)
from forge_rollout.rows import ConversionStats, SampleRow, rows_from_job


@dataclass
class Run:
    """One run's live parts, carried through its steps: what it trains (spec, plan), where it
    writes (run folder, log), what serves and trains (inference stack, trainer), and what the
    verdicts read at the end (per-update summaries, per-epoch task exposures)."""

    spec: RunSpec
    plan: RunPlan
    run_dir: Path
    live: InferenceStack
    log: RunLog
    trainer: Trainer
    config: AgentConfig  # the agent's train settings (no seed: independent samples)
    provenance: RunProvenance  # provenance.json: the largest micro-batches noted per update
    summaries: list[dict[str, Any]] = field(default_factory=list)
    exposures: dict[int, list[forge_data.Exposure]] = field(default_factory=dict)

    @property
    def served(self) -> Path:
        """The adapter folder the server loads, rewritten in place each update (atomic files)."""
        return self.run_dir / "served-adapter"


def train(
    spec: RunSpec,
    *,
    run_dir: Path | None = None,
    runs_root: Path = Path("runs"),
    cache_dir: Path = Path(".cache/forge"),
    curves: Curves = "auto",
) -> Path:
    """Run `spec` (smoke, soak or formal) and return its verified run folder.

    `curves`: TensorBoard events + curves.png ("auto": when the `curves` extra is installed).
    """
    # 1. machine preflight and the model folder, before any run folder exists
    gate(
        None,
        Gate.PPO_PREFLIGHT_PASSED,
        [
            *preflight(spec, runs_root, implemented=BACKENDS),
            *sandbox_problems(spec),
            *check_curves(curves),
        ],
        {"phase": spec.phase},
    )
    # the frozen split as frozen (tamper check), before anything reads its tasks (the demo
    # policy is built from the demo train split): a changed task file stops here, named
    split = forge_data.verify_task_set(forge_data.ensure_task_set(spec.data.tasks))
    gate(None, Gate.DATA_SPLIT_VERIFIED, split.violations, split.fields())
    model_dir = resolve_model(spec, cache_dir)
    # a GPU spec's memory estimate (forge-ppo estimate): an OOM foretold stops here, not at run time
    if memory := memory_violations(spec, model_dir):
        gate(None, Gate.PPO_PREFLIGHT_PASSED, memory, {"phase": spec.phase})
    spec = resolve_warm_start(spec, model_dir, cache_dir)  # "demo-policy": the cached SFT start
    check_parent(spec, model_dir)  # a warm start's checkpoint, refused here and not 14 s in
    # 2. the run folder: its provenance (completed at the end, a failure included), resolved
    #    spec + hash, the spec gate, the verified split; steps 3-12 inside
    run_dir = new_run_dir(spec, run_dir, runs_root)
    with recorded_run(run_dir, "train", spec) as provenance:
        write_config_summary(run_dir, spec)
        run_spec_gate(run_dir, spec)  # the summary read back: this spec, every rule holding
        record_gate(run_dir, Gate.DATA_SPLIT_VERIFIED, split.fields())
        _run(spec, model_dir, run_dir, curves, provenance)
    print(f"RUN_DIR {run_dir}", flush=True)
    return run_dir


def _run(
    spec: RunSpec, model_dir: Path, run_dir: Path, curves: Curves, provenance: RunProvenance
) -> None:
    # 3. data plan (formal data gates)
    plan = plan_run(spec, run_dir)
    # 4. inference: server (backends.inference; vLLM pinned to the rollout GPUs) + gateway
    #    (the gateway records PPO_CONTEXT_GUARD_PASSED); the trainer's GPUs and allocator set
    gpus = assign_gpus(spec)
    prepare_trainer_env(gpus.trainer)
    log = RunLog(run_dir, spec.phase, curves)
    try:
        with open_inference_stack(spec, model_dir, run_dir, gpus.rollout) as live:
            # 5. the trainer (backends.trainer; strict warm start when asked), then the topology
            #    as launched (a vLLM run); closed (its workers stopped) whatever happens
            assert spec.ppo is not None
            trainer = build_trainer(spec, model_dir, run_dir)
            try:
                if spec.backends.inference == "vllm" or spec.resources.rollout_gpus > 0:
                    separated_rollout_gate(spec, trainer, live, run_dir, gpus)
                config = agent_config_from_spec(spec, "train")
                run = Run(spec, plan, run_dir, live, log, trainer, config, provenance)
                _updates(run)  # steps 6-11
            finally:
                trainer.close()
    finally:
        log.close()
        log.plot()
    # 12. the whole run, judged from its ledger
    problems = verify_run(run_dir, spec.phase)
    if problems:
        raise GateError(f"{spec.phase.upper()}_LEDGER", problems)


def _updates(run: Run) -> None:
    # 6. the token budgets and memory settings read back from what will train; the initial
    #    adapter served (and validated first when the plan says so)
    budget_gates(run.spec, run.trainer, run.run_dir)
    settings_gate(run.spec, run.trainer, run.run_dir)
    run.trainer.export_adapter(run.served)
    run.live.push_adapter(run.served, 0)
    if 0 in run.plan.validation_steps:
        validate(run.spec, run.plan, run.live, run.run_dir, 0, run.log)
    for step in range(1, run.plan.total_steps + 1):
        _update(run, step)  # steps 7-10
    # 11. the phase's verdict
    check_verdict(run.spec, run.plan, run.run_dir, run.summaries)


def _update(run: Run, step: int) -> None:
    spec, plan, trainer = run.spec, run.plan, run.trainer
    started = time.perf_counter()
    # 7. roll out this step's batch (a padded tail runs in rounds of distinct tasks), only
    #    once the server is proven to serve the previous update's adapter (async off)
    check_served(run.live, run.run_dir, step)
    job_dirs = [
        rollout_batch(
            spec,
            plan,
            run.live,
            run.run_dir / "episodes" / f"step_{step:04d}" / f"round_{k}",
            ids,
            run.config,
        )
        for k, ids in enumerate(rounds(plan.batches[step - 1]))
    ]
    check_alive(run.live, run.run_dir, step)  # a server that died mid-rollout: no update
    laps = {"timing_s/step/rollout": time.perf_counter() - started}
    mask_truncated = spec.ppo.mask_truncated if spec.ppo is not None else False
    rows, rollout_metrics, episodes = _rows_and_metrics(job_dirs, mask_truncated=mask_truncated)
    laps["timing_s/step/rows"] = time.perf_counter() - started - sum(laps.values())
    # 8. the update: fail closed without a valid trajectory; per-task rollout metrics from the
    #    episodes themselves (timeouts, infra errors), never re-derived from the rows (a row
    #    exists only for an episode that had a reward); then its budgets and finite metrics
    check_rows(spec, run.run_dir, step, rows, rollout_metrics)
    result = trainer.update(rows, step, episodes=episodes)
    laps["timing_s/step/update"] = time.perf_counter() - started - sum(laps.values())
    metrics = {
        **rollout_metrics,
        **result.metrics,
        **laps,
        "timing/step_s": time.perf_counter() - started,
    }
    entry = {
        "step": step,
        "actor_updated": result.record.actor_optimizer_steps > 0,
        "critic_updated": result.record.critic_optimizer_steps > 0,
        "metrics_finite": all_finite(metrics),
        "valid_trajectories": len(rows),
        "errors": int(rollout_metrics.get("rollout/errors", 0)),
        "timeouts": int(rollout_metrics.get("rollout/timeouts", 0)),
        "episodes": int(rollout_metrics.get("rollout/episodes", 0)),
    }
    run.log.update(entry)
    run.summaries.append(entry | {"metrics": metrics})
    run.provenance.largest_micro_batch(
        {b: metrics.get(f"perf/peak_padded_tokens/{b}") for b in trainer.budgets.model_dump()}
    )
    check_update(spec, trainer.budgets, run.run_dir, entry, metrics)
    # 9. the new adapter on the server, proven by its fingerprint served back
    published = time.perf_counter()
    trainer.export_adapter(run.served)
    run.live.push_adapter(run.served, step)
    metrics["timing_s/step/publish"] = time.perf_counter() - published  # after timing/step_s
    run.log.metrics(step, metrics)
    print(run.log.train_line(step, plan.total_steps, metrics), file=sys.stderr, flush=True)
    # 10. validation and checkpoints on schedule; epoch coverage as each epoch ends
    if step in plan.validation_steps:
        validate(spec, plan, run.live, run.run_dir, step, run.log)
    if step in plan.save_steps:
        _save(spec, trainer, result.record, run.run_dir, step)
    _record_exposures(run, step, rows, job_dirs)
    check_epoch_coverage(spec, plan, run.run_dir, step, run.exposures)


def _record_exposures(run: Run, step: int, rows: list[SampleRow], job_dirs: list[Path]) -> None:
    """Which planned slots of `step` trained (rows), and why the others did not."""
    counts = Counter(row.header.task_id for row in rows)
    reasons = failure_reasons(job_dirs)
    run.exposures.setdefault(run.plan.epoch_of_step[step - 1], []).extend(
        forge_data.Exposure(
            task_id=task,
            step=step,
            rows=counts[task],
            reason=None if counts[task] else reasons.get(task, "no valid trajectory"),
        )
        for task in run.plan.batches[step - 1]
    )


def _rows_and_metrics(
    job_dirs: list[Path], *, mask_truncated: bool = False
) -> tuple[list[SampleRow], dict[str, float], list[EpisodeOutcome]]:
    """Training rows of the step's jobs, with rollout metrics and the conversion counts
    (`rollout/conversion/*`: calls, rows, dropped empty prompts/completions, episodes without
    a valid reward, prefix breaks), and the episodes' outcomes (read once)."""
    rows: list[SampleRow] = []
    stats = ConversionStats()
    for job in job_dirs:
        job_rows, job_stats = rows_from_job(job, mask_truncated=mask_truncated)
        rows += job_rows
        stats.add(job_stats)
    counts = {f"rollout/conversion/{k}": float(v) for k, v in stats.model_dump().items()}
    episodes = episode_outcomes(job_dirs)
    return rows, rollout_metrics(episodes) | counts | hack_audit_metrics(job_dirs), episodes


def _save(spec: RunSpec, trainer: Trainer, record: UpdateRecord, run_dir: Path, step: int) -> None:
    root = run_dir / "checkpoints"
    trainer.save(root, step=step, record=record, run_dir=run_dir)
    steps = [int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*")]
    for old in retired_checkpoints(steps, spec.schedule.checkpoints_kept, _best_step(run_dir)):
        shutil.rmtree(root / f"global_step_{old}")


def retired_checkpoints(steps: list[int], kept: int, protected: int | None) -> list[int]:
    """Steps to delete: all but the last `kept`, never the best-validated one (`protected`)."""
    ordered = sorted(steps)
    return [s for s in ordered[: max(len(ordered) - kept, 0)] if s != protected]


def _best_step(run_dir: Path) -> int | None:
    """The best validation step so far (forge-eval's rule: ties go to the earlier step)."""
    metrics = run_dir / "validation-metrics.jsonl"
    if not metrics.is_file():
        return None
    return select_checkpoint(metrics).best_step
