"""`forge-ppo train`: a PPO run (smoke, soak, formal), read top to bottom as numbered steps.

Per update: roll out the batch with forge-rollout (server + gateway + sandboxes), turn traces
into rows, PPO-update actor (LoRA) and critic, push the adapter to the server, log metrics,
validate and save on schedule. Every phase's gates go to `<run_dir>/gates.jsonl`; the run is
judged by `forge-gates verify` at the end, never by exit code 0 alone.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import forge_data
from forge_eval import select_checkpoint
from forge_gates import (
    Check,
    Gate,
    GateError,
    RunSpec,
    Violation,
    gate,
    new_run_dir,
    preflight,
    record_gate,
    spec_sha256,
    verify_run,
    write_config_summary,
)
from forge_ppo._protocol import Trainer
from forge_ppo.algo._observability import EpisodeOutcome
from forge_ppo.checkpoint._update import UpdateRecord
from forge_ppo.pipeline._placement import (
    GpuPlan,
    assign_gpus,
    prepare_trainer_env,
    separated_rollout_gate,
)
from forge_ppo.pipeline._plan import RunPlan, plan_run, rounds
from forge_ppo.pipeline._rollouts import (
    episode_outcomes,
    failure_reasons,
    rollout_batch,
    rollout_metrics,
    validate,
)
from forge_ppo.pipeline._runlog import Curves, RunLog, all_finite, check_curves, update_file_name
from forge_ppo.pipeline._trainers import BACKENDS, build_trainer, check_parent
from forge_ppo.sft import resolve_warm_start
from forge_rollout import (
    InferenceStack,
    VLLMError,
    agent_config_from_spec,
    open_inference_stack,
    resolve_model,
)
from forge_rollout.rows import ConversionStats, SampleRow, rows_from_job


def budget_gates(spec: RunSpec, trainer: Trainer, run_dir: Path) -> None:
    """The token budgets read back from the built trainer: each >= the max model length and
    equal to its own spec field (an engine that ignored or swapped one fails here)."""
    length, ctx, built = spec.model.max_model_len, spec.context, trainer.budgets
    wanted = {
        "actor_train": ctx.actor_train_tokens,
        "critic_train": ctx.critic_train_tokens,
        "critic_infer": ctx.critic_infer_tokens,
    }

    def check_budgets(name: str, keys: tuple[str, ...]) -> Check:
        check = Check(name)
        for key in keys:
            value = getattr(built, key)
            check.require(
                value >= length,
                rule=f"budget.{key}.window",
                expected=f">= max_model_len {length}",
                found=f"{value} (built by the trainer)",
                fix=f"raise context.{key}_tokens",
            )
            check.require(
                value == wanted[key],
                rule=f"budget.{key}.spec",
                expected=f"context.{key}_tokens = {wanted[key]}",
                found=f"{value} built by the trainer",
                fix="the trainer did not take this budget from its own spec field; fix the engine",
            )
        return check

    if spec.phase in ("smoke", "soak"):
        check = check_budgets(Gate.PPO_SMOKE_TOKEN_BUDGET_GATE_PASSED, tuple(wanted))
        fields = {"required": length, "actor_train": built.actor_train,
                  "critic_train": built.critic_train, "infer": built.critic_infer}  # fmt: skip
        gate(run_dir, check.gate, check.violations, fields)
    check = check_budgets(
        Gate.PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED, ("critic_infer", "critic_train")
    )
    fields = {"required": length, "infer": built.critic_infer, "train": built.critic_train}
    gate(run_dir, check.gate, check.violations, fields)


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
            *preflight(spec, runs_root, executables=["bwrap"], implemented=BACKENDS),
            *check_curves(curves),
        ],
        {"phase": spec.phase},
    )
    model_dir = resolve_model(spec, cache_dir)
    spec = resolve_warm_start(spec, model_dir, cache_dir)  # "demo-policy": the cached SFT start
    check_parent(spec, model_dir)  # a warm start's checkpoint, refused here and not 14 s in
    # the frozen split as frozen (tamper check): a changed task file stops here, named
    split = forge_data.verify_task_set(spec.data.tasks)
    gate(None, Gate.DATA_SPLIT_VERIFIED, split.violations, split.fields())
    # 2. the run folder: resolved spec + hash, the spec gate, the verified split
    run_dir = new_run_dir(spec, run_dir, runs_root)
    write_config_summary(run_dir, spec)
    record_gate(
        run_dir,
        Gate.RUN_SPEC_GATE_PASSED,
        {"phase": spec.phase, "name": spec.name, "sha256": spec_sha256(spec)},
    )
    record_gate(run_dir, Gate.DATA_SPLIT_VERIFIED, split.fields())
    # 3. data plan (formal data gates), then the token budgets
    plan = plan_run(spec, run_dir)
    # 4. inference: server (backends.inference; vLLM pinned to the rollout GPUs) + gateway
    #    (the gateway records PPO_CONTEXT_GUARD_PASSED); the trainer's GPUs and allocator set
    gpus = assign_gpus(spec)
    prepare_trainer_env(gpus.trainer)
    log = RunLog(run_dir, spec.phase, curves)
    try:
        with open_inference_stack(spec, model_dir, run_dir, gpus.rollout) as live:
            _updates(spec, plan, model_dir, run_dir, live, log, gpus)
    finally:
        log.close()
        log.plot()
    # 5. the whole run, judged from its ledger
    problems = verify_run(run_dir, spec.phase)
    if problems:
        raise GateError(f"{spec.phase.upper()}_LEDGER", problems)
    print(f"RUN_DIR {run_dir}", flush=True)
    return run_dir


def _updates(
    spec: RunSpec,
    plan: RunPlan,
    model_dir: Path,
    run_dir: Path,
    live: InferenceStack,
    log: RunLog,
    gpus: GpuPlan,
) -> None:
    assert spec.ppo is not None
    # 1. the trainer (backends.trainer; strict warm start when asked), then the topology as
    #    launched (a vLLM run); the trainer is closed (its workers stopped) whatever happens
    trainer = build_trainer(spec, model_dir, run_dir)
    try:
        if spec.backends.inference == "vllm" or spec.resources.rollout_gpus > 0:
            separated_rollout_gate(spec, trainer, live, run_dir, gpus)
        _train_steps(spec, plan, run_dir, live, log, trainer)
    finally:
        trainer.close()


def _train_steps(
    spec: RunSpec,
    plan: RunPlan,
    run_dir: Path,
    live: InferenceStack,
    log: RunLog,
    trainer: Trainer,
) -> None:
    budget_gates(spec, trainer, run_dir)  # read back from what will train
    mask_truncated = spec.ppo.mask_truncated if spec.ppo is not None else False
    served = run_dir / "served-adapter"  # rewritten in place each update (atomic files)
    trainer.export_adapter(served)
    live.push_adapter(served, 0)
    config = agent_config_from_spec(spec, "train")
    summaries: list[dict[str, Any]] = []
    exposures: dict[int, list[forge_data.Exposure]] = {}
    if 0 in plan.validation_steps:
        validate(spec, plan, live, run_dir, 0, log)
    for step in range(1, plan.total_steps + 1):
        started = time.perf_counter()
        # 2. roll out this step's batch (a padded tail runs in rounds of distinct tasks), only
        #    once the server is proven to serve the previous update's adapter (async off)
        _require_served(live, run_dir, step)
        job_dirs = [
            rollout_batch(
                spec,
                plan,
                live,
                run_dir / "episodes" / f"step_{step:04d}" / f"round_{k}",
                ids,
                config,
            )
            for k, ids in enumerate(rounds(plan.batches[step - 1]))
        ]
        _require_alive(live, run_dir, step)  # a server that died mid-rollout: no update
        rows, rollout_metrics, episodes = _rows_and_metrics(job_dirs, mask_truncated=mask_truncated)
        # 3. the update: fail closed without a valid trajectory
        check = Check(Gate.PPO_SMOKE_UPDATE_PASSED)
        check.require(
            bool(rows),
            rule="update.rows",
            expected=">= 1 valid trajectory",
            found=f"0 rows ({rollout_metrics.get('rollout/errors', 0):.0f} errored episodes, "
            f"{rollout_metrics.get('rollout/conversion/dropped_truncated_rows', 0):.0f} rows "
            "dropped: every action cut at max_tokens, ppo.mask_truncated)",
            fix="see the episodes' exception_info; fix the cause (for dropped rows: raise "
            "agent.max_tokens or turn ppo.mask_truncated off)",
        )
        if spec.phase == "formal":  # soak judges its ratios over the whole run (_final_gate)
            _check_rollout_health(spec, check, rollout_metrics, "update")
        if not check.ok:
            gate(run_dir, check.gate, check.violations, {"step": step})
        # per-task rollout metrics from the episodes themselves (timeouts, infra errors), never
        # re-derived from the rows (a row exists only for an episode that had a reward)
        result = trainer.update(rows, step, episodes=episodes)
        metrics = {
            **rollout_metrics,
            **result.metrics,
            "timing/step_s": time.perf_counter() - started,
        }
        finite = all_finite(metrics)
        entry = {
            "step": step,
            "actor_updated": result.record.actor_optimizer_steps > 0,
            "critic_updated": result.record.critic_optimizer_steps > 0,
            "metrics_finite": finite,
            "valid_trajectories": len(rows),
            "errors": int(rollout_metrics.get("rollout/errors", 0)),
            "timeouts": int(rollout_metrics.get("rollout/timeouts", 0)),
            "episodes": int(rollout_metrics.get("rollout/episodes", 0)),
        }
        log.update(entry)
        summaries.append(entry | {"metrics": metrics})
        for budget, limit in trainer.budgets.model_dump().items():
            peak = metrics.get(f"perf/peak_padded_tokens/{budget}", 0)
            check.require(
                peak <= limit,
                rule=f"update.budget.{budget}",
                expected=f"every {budget} micro-batch <= {limit} padded tokens",
                found=f"{peak:.0f}",
                fix="the micro-batcher broke its budget: see forge_ppo.local._passes",
            )
        if spec.phase in ("smoke", "soak"):
            check.require(
                finite,
                rule="update.finite",
                expected="every metric finite",
                found=[k for k, v in metrics.items() if not all_finite({k: v})][:5],
                fix="inspect metrics.jsonl; lower the learning rates",
            )
            gate(
                run_dir,
                check.gate,
                check.violations,
                {
                    k: entry[k]
                    for k in (
                        "step",
                        "actor_updated",
                        "critic_updated",
                        "valid_trajectories",
                        "metrics_finite",
                    )
                },
            )
        elif not check.ok:  # formal: the same budget proof, recorded only when it fails
            gate(run_dir, check.gate, check.violations, {"step": step})
        # 4. the new adapter on the server, proven by its fingerprint served back
        trainer.export_adapter(served)
        live.push_adapter(served, step)
        log.metrics(step, metrics)
        print(log.train_line(step, plan.total_steps, metrics), file=sys.stderr, flush=True)
        # 5. validation and checkpoints on schedule; epoch coverage as each epoch ends
        if step in plan.validation_steps:
            validate(spec, plan, live, run_dir, step, log)
        if step in plan.save_steps:
            _save(spec, trainer, result.record, run_dir, step)
        # which planned slots trained (rows), and why the others did not
        counts = Counter(row.header.task_id for row in rows)
        reasons = failure_reasons(job_dirs)
        exposures.setdefault(plan.epoch_of_step[step - 1], []).extend(
            forge_data.Exposure(
                task_id=task,
                step=step,
                rows=counts[task],
                reason=None if counts[task] else reasons.get(task, "no valid trajectory"),
            )
            for task in plan.batches[step - 1]
        )
        _epoch_end(spec, plan, run_dir, step, exposures)
    # 6. the phase's verdict
    _final_gate(spec, plan, run_dir, summaries)


def _require_served(live: InferenceStack, run_dir: Path, step: int) -> None:
    """Step `step` rolls out with the adapter of update `step - 1`, proven served (sync)."""
    if live.served_step != step - 1:
        problem = Violation(
            rule="update.adapter_served",
            expected=f"the server proven to serve the adapter of update {step - 1} before "
            f"rollout {step} (async = false)",
            found=f"last proven push: update {live.served_step}",
            fix="push the adapter (and wait for PPO_ADAPTER_PUSH_PASSED) before rolling out",
        )
        gate(run_dir, Gate.PPO_SMOKE_UPDATE_PASSED, [problem], {"step": step})


def _require_alive(live: InferenceStack, run_dir: Path, step: int) -> None:
    """Fail the update closed (nothing trained, no checkpoint) when the server died."""
    try:
        live.check_alive()
    except VLLMError as error:
        problem = Violation(
            rule="update.inference_server",
            expected="the inference server alive through the rollout",
            found=str(error)[-3000:],
            fix="read the server's log tail above (memory, GPU, a crash), fix it and rerun",
        )
        gate(run_dir, Gate.PPO_SMOKE_UPDATE_PASSED, [problem], {"step": step})


def _check_rollout_health(
    spec: RunSpec, check: Check, metrics: dict[str, float], what: str
) -> None:
    """Fail closed when too many of a batch's episodes hit infrastructure errors or time out
    (the spec's ratios): a handful of valid rows must not make an update look healthy."""
    episodes = max(metrics.get("rollout/episodes", 0.0), 1.0)
    for kind, limit in (
        ("errors", spec.agent.max_infra_error_ratio),
        ("timeouts", spec.agent.max_timeout_ratio),
    ):
        ratio = metrics.get(f"rollout/{kind}", 0.0) / episodes
        check.require(
            ratio <= limit,
            rule=f"{what}.{kind}_ratio",
            expected=f"<= {limit} of the episodes with {kind} (agent.max_"
            f"{'infra_error' if kind == 'errors' else 'timeout'}_ratio)",
            found=f"{metrics.get(f'rollout/{kind}', 0.0):.0f} of {episodes:.0f} ({ratio:.2f})",
            fix="see the trials' exception_info; fix the infrastructure or the limits",
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
    return rows, rollout_metrics(episodes) | counts, episodes


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


def _epoch_end(
    spec: RunSpec,
    plan: RunPlan,
    run_dir: Path,
    step: int,
    exposures: dict[int, list[forge_data.Exposure]],
) -> None:
    """At the last step of an epoch: coverage measured from the tasks that trained; a planned
    task that never produced a training row fails the gate (with the trials' reason)."""
    if spec.phase != "formal":
        return
    epoch = plan.epoch_of_step[step - 1]
    last_of_epoch = step == plan.total_steps or plan.epoch_of_step[step] != epoch
    if last_of_epoch:
        fields, violations = forge_data.trained_coverage(exposures[epoch], plan.repositories)
        gate(run_dir, Gate.TRAIN_EPOCH_COVERAGE, violations, {"epoch": epoch, **fields})


def _final_gate(
    spec: RunSpec, plan: RunPlan, run_dir: Path, summaries: list[dict[str, Any]]
) -> None:
    final = run_dir / "checkpoints" / f"global_step_{plan.total_steps}"
    parts = [
        final / "lora_adapter" / "adapter_model.safetensors",
        final / "lora_adapter" / "adapter_config.json",
        final / "checkpoint-summary.json",
    ]
    check = Check(
        {
            "smoke": Gate.PPO_SMOKE_PASSED,
            "soak": Gate.PPO_SOAK_PASSED,
            "formal": Gate.PPO_FINAL_CHECKPOINT_PASSED,
        }[spec.phase]
    )
    missing = [str(p.relative_to(run_dir)) for p in parts if not p.is_file()]
    check.require(
        not missing and any(final.glob("critic/*.safetensors")),
        rule="checkpoint.parts",
        expected="actor adapter, critic weights and summary",
        found=f"missing {missing or 'critic weights'}",
        fix="the final save failed; see PPO_COMPACT_CHECKPOINT_FAILED",
    )
    for s in summaries:
        check.require(
            s["actor_updated"] and s["critic_updated"] and s["metrics_finite"],
            rule=f"update.{s['step']}",
            expected="actor and critic stepped, finite",
            found={k: s[k] for k in ("actor_updated", "critic_updated", "metrics_finite")},
            fix=f"inspect {update_file_name(spec.phase)} and metrics.jsonl",
        )
        for key in (
            "critic/observability/values_std",
            "critic/observability/returns_std",
            "critic/observability/advantages_std",
        ):
            check.require(
                key in s["metrics"],
                rule=f"update.{s['step']}.{key}",
                expected=f"{key} present",
                found="absent",
                fix="values/returns/advantages were not computed",
            )
    if spec.phase == "soak":
        episodes = sum(s["episodes"] for s in summaries)
        errors = sum(s["errors"] for s in summaries)
        ratio = sum(s["timeouts"] for s in summaries) / max(episodes, 1)
        check.require(
            errors == 0,
            rule="soak.errors",
            expected="no errored episode",
            found=errors,
            fix="see the episodes' exception_info",
        )
        check.require(
            ratio <= spec.agent.max_timeout_ratio,
            rule="soak.timeouts",
            expected=f"timeout ratio <= {spec.agent.max_timeout_ratio}",
            found=round(ratio, 4),
            fix="raise agent limits or lower the ratio",
        )
    fields = {
        "updates": len(summaries),
        "step": plan.total_steps,
        "checkpoint": str(final.relative_to(run_dir)),
    }
    gate(run_dir, check.gate, check.violations, fields)
