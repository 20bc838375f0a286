"""The train recipe's gates, one named check each (every one collects all its violations and
fails once through `forge_gates.gate`): token budgets and memory settings read back from the
built trainer, the served adapter and a live server before each update, the batch's rows and
rollout health, the update's micro-batches (the largest the engine formed, against each budget)
and finite metrics, an epoch's trained coverage, the phase's verdict.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import forge_data
from forge_gates import Check, Gate, RunSpec, Violation, gate
from forge_ppo._protocol import TokenBudgets, Trainer, TrainerSettings
from forge_ppo.recipes.train._plan import RunPlan
from forge_ppo.recipes.train._runlog import all_finite, update_file_name
from forge_rollout import InferenceStack, VLLMError
from forge_rollout.rows import SampleRow

# what `<phase>-update.json` and PPO_SMOKE_UPDATE_PASSED record of each update
UPDATE_FIELDS = ("step", "actor_updated", "critic_updated", "valid_trajectories", "metrics_finite")


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


def settings_gate(spec: RunSpec, trainer: Trainer, run_dir: Path) -> None:
    """PPO_TRAINER_SETTINGS_GATE_PASSED: offload, gradient checkpointing, fused kernels, dtypes
    and the entropy coefficient read back from the built trainer (verl: its workers' engines and
    loss) equal the spec's `[actor]` / `[critic]` / `ppo.entropy_coeff`, resolved for its
    backend; every difference is one violation, the read-back values are the gate's fields."""
    wanted = TrainerSettings.from_spec(spec).fields()
    built = trainer.settings.fields()
    check = Check(Gate.PPO_TRAINER_SETTINGS_GATE_PASSED)
    for key, value in wanted.items():
        check.require(
            built.get(key) == value,
            rule=f"settings.{key}",
            expected=f"{key} = {value!r} (the spec, resolved for backends.trainer = "
            f"{spec.backends.trainer!r})",
            found=f"{built.get(key, 'absent')!r} read back from the built trainer",
            fix="the engine did not apply the spec's setting (or overrode it): see the "
            "trainer's mapping (forge_ppo/verl/_config.py, forge_ppo/local/_build.py) and the "
            "engine's log",
        )
    gate(run_dir, check.gate, check.violations, {"backend": spec.backends.trainer, **built})


def check_micro_batches(budgets: TokenBudgets, metrics: dict[str, float]) -> list[Violation]:
    """The largest micro-batch the trainer's engine formed, per budget, within that budget:
    its real tokens (`perf/peak_real_tokens/<budget>`, else the padded count
    `perf/peak_padded_tokens/<budget>` where the engine reports only that); a budget with no
    read-back is a violation too (never a pass by absence). A padded size past the budget
    (verl without use_remove_padding pads a micro-batch to sequences x the longest: 1.22x
    measured on the verl CPU smoke) is printed as a warning, and priced by `forge-ppo
    estimate`. Where the engine reports the budget it batched under
    (`perf/micro_batch_budget/<budget>`, verl), that must be the trainer's."""
    out = []
    for budget, limit in budgets.model_dump().items():
        peak = metrics.get(f"perf/peak_padded_tokens/{budget}")
        real = metrics.get(f"perf/peak_real_tokens/{budget}")
        measured = real if real is not None else peak
        if measured is not None and measured <= limit and peak is not None and peak > limit:
            print(
                f"warning: {budget} micro-batch padded to {peak:.0f} tokens ({peak / limit:.2f}x "
                f"the {limit} budget; {measured:.0f} real): memory holds the padded size "
                "(use_remove_padding packs it on GPUs)",
                file=sys.stderr,
            )
        if measured is None or measured > limit:
            out.append(
                Violation(
                    rule=f"update.budget.{budget}",
                    expected=f"every {budget} micro-batch <= {limit} tokens",
                    found="no micro-batch size read back from the trainer"
                    if measured is None
                    else f"{measured:.0f} tokens"
                    + (f" ({peak:.0f} padded)" if real is not None and peak is not None else "")
                    + f", {measured / limit:.2f}x the budget",
                    fix="the engine's micro-batches broke the budget: see its batcher (verl's "
                    "rearrange_micro_batches, the local trainer's forge_ppo.policy._passes) "
                    "and the budget it was given",
                )
            )
        used = metrics.get(f"perf/micro_batch_budget/{budget}")
        if used is not None and used != limit:
            out.append(
                Violation(
                    rule=f"update.budget.{budget}.engine",
                    expected=f"{budget} micro-batches formed under the trainer's {limit} tokens",
                    found=f"the engine batched under {used:.0f} tokens",
                    fix="the engine took its budget from another field; fix the trainer's "
                    "config mapping",
                )
            )
    return out


def check_served(live: InferenceStack, run_dir: Path, step: int) -> None:
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


def check_alive(live: InferenceStack, run_dir: Path, step: int) -> None:
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


def check_rollout_health(spec: RunSpec, check: Check, metrics: dict[str, float], what: str) -> None:
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
    flagged = metrics.get("train/hack_audit/flagged", 0.0)
    limit = spec.agent.max_hack_flagged_ratio
    check.require(
        flagged / episodes <= limit,
        rule=f"{what}.hack_audit_ratio",
        expected=f"<= {limit} of the episodes flagged by the hack audit "
        "(agent.max_hack_flagged_ratio)",
        found=f"{flagged:.0f} of {episodes:.0f} ({flagged / episodes:.2f})",
        fix="read the jobs' hack-audit.json: the policy reaches for the verifier's folders, "
        "the tests or git history; stop and inspect before training on it",
    )


def check_rows(
    spec: RunSpec, run_dir: Path, step: int, rows: list[SampleRow], metrics: dict[str, float]
) -> None:
    """Before the update: >= 1 valid trajectory (else why: errors, rows cut at max_tokens) and,
    in the formal phase, the rollout's health (soak judges its ratios over the whole run, in
    `check_verdict`); recorded only when it fails."""
    check = Check(Gate.PPO_SMOKE_UPDATE_PASSED)
    check.require(
        bool(rows),
        rule="update.rows",
        expected=">= 1 valid trajectory",
        found=f"0 rows ({metrics.get('rollout/errors', 0):.0f} errored episodes, "
        f"{metrics.get('rollout/conversion/dropped_truncated_rows', 0):.0f} rows "
        "dropped: every action cut at max_tokens, ppo.mask_truncated)",
        fix="see the episodes' exception_info; fix the cause (for dropped rows: raise "
        "agent.max_tokens or turn ppo.mask_truncated off)",
    )
    if spec.phase == "formal":
        check_rollout_health(spec, check, metrics, "update")
    if not check.ok:
        gate(run_dir, check.gate, check.violations, {"step": step})


def check_update(
    spec: RunSpec,
    budgets: TokenBudgets,
    run_dir: Path,
    entry: dict[str, Any],
    metrics: dict[str, float],
) -> None:
    """After the update: every micro-batch within its budget (the peaks the trainer measured)
    and, in smoke and soak, every metric finite; PPO_SMOKE_UPDATE_PASSED is recorded in smoke
    and soak, and in the formal phase only when it fails."""
    check = Check(Gate.PPO_SMOKE_UPDATE_PASSED)
    for violation in check_micro_batches(budgets, metrics):
        check.add(violation)
    if spec.phase in ("smoke", "soak"):
        check.require(
            entry["metrics_finite"],
            rule="update.finite",
            expected="every metric finite",
            found=[k for k, v in metrics.items() if not all_finite({k: v})][:5],
            fix="inspect metrics.jsonl; lower the learning rates",
        )
        fields = {k: entry[k] for k in UPDATE_FIELDS}
        for budget in budgets.model_dump():  # the largest micro-batch read back, per budget
            fields[f"peak_tokens.{budget}"] = metrics.get(f"perf/peak_padded_tokens/{budget}")
        gate(run_dir, check.gate, check.violations, fields)
    elif not check.ok:  # formal: the same budget proof, recorded only when it fails
        gate(run_dir, check.gate, check.violations, {"step": entry["step"]})


def check_epoch_coverage(
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


def check_verdict(
    spec: RunSpec, plan: RunPlan, run_dir: Path, summaries: list[dict[str, Any]]
) -> None:
    """The phase's verdict (PPO_SMOKE_PASSED, PPO_SOAK_PASSED or PPO_FINAL_CHECKPOINT_PASSED):
    the final checkpoint's parts on disk; every update stepped actor and critic, finite, with
    values / returns / advantages; in soak, no errored episode and the timeout ratio kept."""
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
