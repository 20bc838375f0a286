"""The local PPO trainer: one `update(rows, step)` = one PPO update of actor (LoRA) and critic.

    trainer = PPOTrainer(Actor.from_pretrained(path, spec.lora), ValueModel.from_pretrained(path),
                         spec)
    result = trainer.update(rows, step=1)      # rows: forge_rollout SampleRows
    result.metrics["critic/observability/ev"], result.record   # UpdateRecord for save_checkpoint

Steps of an update (DESIGN §3.5): rows -> no-grad passes -> GAE -> PPO epochs -> metrics ->
the UpdateRecord proving actor AND critic changed. Everything fails closed: no valid row, a
non-finite loss / gradient / metric, or an unchanged model raises and no record is produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from time import perf_counter

import torch

from forge_gates import RunSpec
from forge_ppo._protocol import ModelSettings, TokenBudgets, TrainerSettings, UpdateResult
from forge_ppo.algo._batch import Batch, assert_finite_metrics, collate, split_rows
from forge_ppo.algo._errors import PPOInputError
from forge_ppo.algo._gae import compute_gae, masked_whiten
from forge_ppo.algo._losses import check_loss_inputs
from forge_ppo.algo._metrics import PhaseTimer, masked_entropy_mean
from forge_ppo.algo._observability import EpisodeOutcome
from forge_ppo.checkpoint._save import save_run_checkpoint
from forge_ppo.checkpoint._summary import ParentCheckpoint
from forge_ppo.checkpoint._update import UpdateRecord, UpdateTracker
from forge_ppo.local._ppo_steps import (
    UpdateData,
    actor_backward,
    critic_backward,
    optimizer_step,
)
from forge_ppo.models._value_model import ValueModel
from forge_ppo.policy._actor import Actor
from forge_ppo.policy._passes import critic_values, infer, micro_batches, task_mini_batches
from forge_ppo.policy._update_metrics import (
    batch_metrics,
    critic_metrics,
    episode_outcomes,
    mean_over_steps,
    rollout_drift,
)
from forge_rollout.rows import SampleRow


class PPOTrainer:
    """Holds the actor, the critic and their AdamW optimizers across updates (optimizer state is
    never checkpointed: a warm start restarts it)."""

    def __init__(
        self,
        actor: Actor,
        critic: ValueModel,
        spec: RunSpec,
        *,
        success_reward: float = 1.0,
        weight_decay: float = 0.01,
        parent: ParentCheckpoint | None = None,
    ) -> None:
        if spec.ppo is None:
            raise PPOInputError(
                "spec.ppo",
                expected="PPO settings ([ppo] table)",
                found=f"none in config {spec.name!r} (phase {spec.phase})",
                fix="train with a smoke / soak / formal config",
            )
        self.actor, self.critic, self.spec, self.ppo = actor, critic, spec, spec.ppo
        self.parent = parent
        self.budgets = TokenBudgets.from_spec(spec)
        self.peak_padded_tokens = {name: 0 for name in TokenBudgets.model_fields}
        self.success_reward = success_reward
        self._actor_model = actor.model
        self.actor_parameters = actor.trainable_parameters()
        self.critic_parameters = [p for p in critic.parameters() if p.requires_grad]
        self.actor_optimizer = torch.optim.AdamW(
            self.actor_parameters, lr=self.ppo.actor_lr, weight_decay=weight_decay
        )
        self.critic_optimizer = torch.optim.AdamW(
            self.critic_parameters, lr=self.ppo.critic_lr, weight_decay=weight_decay
        )

    # -- the Trainer protocol besides update ------------------------------------------------

    @property
    def settings(self) -> TrainerSettings:
        """Read back from the models this trainer steps (`_model_settings`); the entropy
        coefficient is the one `actor_backward` applies (`ppo.entropy_coeff`)."""
        return TrainerSettings(
            actor=_model_settings(self.actor.model),
            critic=_model_settings(self.critic),
            entropy_coeff=self.ppo.entropy_coeff,
        )

    def export_adapter(self, folder: Path) -> None:
        """The actor's adapter in PEFT format for the inference server (atomic files)."""
        self.actor.save_adapter(folder)

    def save(self, root: Path, *, step: int, record: UpdateRecord, run_dir: Path) -> Path:
        """`root/global_step_<step>` in Forge's layout (PPO_COMPACT_CHECKPOINT_PASSED)."""
        return save_run_checkpoint(
            root,
            self.spec,
            step=step,
            actor=self.actor.model,
            base_model=self.actor.base_model,
            critic=self.critic,
            record=record,
            parent=self.parent,
            run_dir=run_dir,
        )

    def close(self) -> None:
        """Nothing to release: one process, no workers."""

    def update(
        self,
        rows: Sequence[SampleRow],
        step: int,
        *,
        episodes: Sequence[EpisodeOutcome] | None = None,
    ) -> UpdateResult:
        """One PPO update on `rows`; `step` is the global step it produces (1-based).
        `episodes` (optional) are the rollout's outcomes for the per-task rollout metrics
        (timeouts, errors); by default they are derived from the rows' headers."""
        ppo, actor, critic = self.ppo, self.actor, self.critic
        self._check_actor()
        timer = PhaseTimer()

        # 1. rows: drop the empty ones (counted); no valid row -> fail closed
        kept, dropped = _valid_rows(rows)
        full = collate(kept)  # whole-batch response-aligned tensors, on the CPU
        mask = full.response_mask
        timer.lap("collate")

        # 2. no-grad passes: old log-probs + entropy, reference log-probs (KL on), values
        old_log_probs, entropy, ref_log_probs, values, passes = self._no_grad_passes(
            kept, full.response_width, timer
        )

        # 3. GAE advantages and returns over action tokens, optional whitening
        advantages, returns = compute_gae(
            full.token_level_rewards, values, mask, ppo.gamma, ppo.gae_lambda
        )
        data = UpdateData(
            rows=kept,
            response_mask=mask,
            old_log_probs=old_log_probs,
            ref_log_probs=ref_log_probs,
            values=values,
            advantages=masked_whiten(advantages, mask) if ppo.whiten_advantages else advantages,
            returns=returns,
        )
        timer.lap("advantages")

        # 4. PPO epochs over task mini-batches (actor, then critic), one step per mini-batch;
        #    the loss inputs are checked once here, so the micro-batch loops never sync on them
        check_loss_inputs(mask, old_log_probs=old_log_probs, advantages=data.advantages,
                          values=values, returns=returns)  # fmt: skip
        tracker = UpdateTracker(actor.model, critic)
        actor_steps, critic_steps, throughput = self._ppo_epochs(data, full.task_ids, timer)

        # 5. metrics (canonical names; every one finite or the update fails)
        outcomes = list(episodes) if episodes is not None else None
        if outcomes is None:
            outcomes = episode_outcomes(rows, success_reward=self.success_reward)
        tokens = full.tokens
        metrics = {
            **batch_metrics(rows=rows, kept=kept, dropped=dropped, episodes=outcomes),
            **mean_over_steps(actor_steps),
            **mean_over_steps(critic_steps),
            **critic_metrics(full.task_ids, values, returns, advantages, mask),
            **rollout_drift(full.rollout_log_probs, old_log_probs, mask),
            "actor/entropy": masked_entropy_mean(entropy, mask),
            "actor/lr": self.actor_optimizer.param_groups[0]["lr"],
            "critic/lr": self.critic_optimizer.param_groups[0]["lr"],
            **({"actor/kl_coef": ppo.kl_beta} if ppo.kl_beta > 0 else {}),
            **passes,
            **throughput,
            **timer.metrics(),
        }
        metrics["perf/tokens_per_s"] = tokens / max(metrics["timing_s/update"], 1e-9)
        for budget, peak in self.peak_padded_tokens.items():  # measured, against the budget
            metrics[f"perf/peak_padded_tokens/{budget}"] = float(peak)
        assert_finite_metrics(metrics)

        # 6. the proof that actor AND critic changed (raises GateError PPO_UPDATE otherwise)
        action_tokens = int(mask.sum())
        record = tracker.finish(
            step=step,
            actor_optimizer_steps=len(actor_steps),
            critic_optimizer_steps=len(critic_steps),
            actor_loss=actor_steps[-1]["actor/loss"],
            critic_loss=critic_steps[-1]["critic/vf_loss"],
            action_tokens=action_tokens,
        )
        return UpdateResult(
            step=step,
            metrics=metrics,
            record=record,
            rows=len(kept),
            dropped_rows=dropped,
            episodes=len(outcomes),
            action_tokens=action_tokens,
            tokens=tokens,
            actor_optimizer_steps=len(actor_steps),
            critic_optimizer_steps=len(critic_steps),
        )

    def _check_actor(self) -> None:
        if self.actor.model is not self._actor_model:
            raise PPOInputError(
                "actor.model",
                expected="the model this trainer's optimizer was built on",
                found="a replaced model (load_adapter after PPOTrainer was built)",
                fix="warm start the actor before building the PPOTrainer",
            )

    def _no_grad_passes(
        self, rows: list[SampleRow], width: int, timer: PhaseTimer
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, dict[str, float]]:
        """(old_log_probs, entropy, ref_log_probs or None, values, micro-batch counts), each
        (N, width) float32 on the CPU; the actor's budget is actor_train_tokens, the critic's
        critic_infer_tokens."""
        actor, critic = self.actor, self.critic
        actor.model.eval()
        critic.eval()
        everything = range(len(rows))
        actor_groups = self._micro_batches("actor_infer", rows, everything)
        device = actor.device

        def log_probs_and_entropy(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
            out = actor.forward(batch, entropy=True)
            assert out.entropy is not None, "forward(entropy=True) returns the entropy"
            return out.log_probs, out.entropy

        old_log_probs, entropy = infer(rows, actor_groups, log_probs_and_entropy, width, device)
        timer.lap("old_log_probs")
        ref_log_probs = None
        if self.ppo.kl_beta > 0:
            (ref_log_probs,) = infer(
                rows, actor_groups, lambda b: (actor.reference_log_probs(b),), width, device
            )
            timer.lap("ref_log_probs")
        value_groups = self._micro_batches("critic_infer", rows, everything)
        critic_device = next(critic.parameters()).device
        (values,) = infer(
            rows, value_groups, lambda b: (critic_values(critic, b),), width, critic_device
        )
        timer.lap("values")
        counts = {
            "perf/micro_batches/actor_infer": float(len(actor_groups)),
            "perf/micro_batches/critic_infer": float(len(value_groups)),
        }
        return old_log_probs, entropy, ref_log_probs, values, counts

    def _micro_batches(
        self, budget: str, rows: Sequence[SampleRow], indices: Sequence[int]
    ) -> list[list[int]]:
        """Micro-batches under this trainer's `budget`; the largest padded size is kept."""
        limit = getattr(self.budgets, budget)
        groups = micro_batches(rows, indices, limit)
        for group in groups:
            longest = max(len(rows[i].prompt_ids) + len(rows[i].response_ids) for i in group)
            padded = len(group) * longest
            self.peak_padded_tokens[budget] = max(self.peak_padded_tokens[budget], padded)
        return groups

    def _ppo_epochs(
        self, data: UpdateData, task_ids: Sequence[str], timer: PhaseTimer
    ) -> tuple[list[dict[str, float]], list[dict[str, float]], dict[str, float]]:
        """ppo_epochs passes; per epoch every actor mini-batch, then every critic mini-batch
        (tasks in order, `*_mini_batch_size` tasks each), each split into micro-batches under
        the train token budget. Returns per-step metrics (actor, critic) and throughput."""
        ppo, rows = self.ppo, data.rows
        plans = {
            "actor": [
                self._micro_batches("actor_train", rows, mini)
                for mini in task_mini_batches(task_ids, ppo.actor_mini_batch_size)
            ],
            "critic": [
                self._micro_batches("critic_train", rows, mini)
                for mini in task_mini_batches(task_ids, ppo.critic_mini_batch_size)
            ],
        }
        steps: dict[str, list[dict[str, float]]] = {"actor": [], "critic": []}
        tokens = {"actor": 0, "critic": 0}
        seconds = {"actor": 0.0, "critic": 0.0}
        self.actor.model.train()
        self.critic.train()
        for _epoch in range(ppo.ppo_epochs):
            for name in ("actor", "critic"):
                started = perf_counter()
                for groups in plans[name]:
                    if name == "actor":
                        stats = actor_backward(self.actor, data, groups, ppo)
                        params, optimizer = self.actor_parameters, self.actor_optimizer
                    else:
                        stats = critic_backward(self.critic, data, groups, ppo)
                        params, optimizer = self.critic_parameters, self.critic_optimizer
                    norm = optimizer_step(name, params, optimizer, ppo.grad_clip)
                    steps[name].append({**stats.metrics, f"{name}/grad_norm": norm})
                    tokens[name] += stats.tokens
                seconds[name] += perf_counter() - started
        self.actor.model.eval()
        self.critic.eval()
        timer.lap("ppo_epochs")
        throughput = {}
        for name in ("actor", "critic"):
            throughput[f"timing_s/update_{name}"] = seconds[name]
            throughput[f"perf/{name}_tokens_per_s"] = tokens[name] / max(seconds[name], 1e-9)
            micro = sum(map(len, plans[name])) * ppo.ppo_epochs
            throughput[f"perf/micro_batches/{name}_train"] = float(micro)
        return steps["actor"], steps["critic"], throughput


def _model_settings(model: torch.nn.Module) -> ModelSettings:
    """One process: nothing offloaded or fused; activation checkpointing as the Hugging Face
    modules hold it; the parameters' dtype is the compute dtype, the trainable ones' that of
    the gradients (no reduce)."""
    names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}

    def dtype_of(params: list[torch.nn.Parameter]) -> str:
        return "+".join(sorted({names.get(p.dtype, str(p.dtype)) for p in params})) or "none"

    params = list(model.parameters())
    return ModelSettings(
        param_offload=False,
        optimizer_offload=False,
        gradient_checkpointing=any(
            getattr(m, "gradient_checkpointing", False) is True for m in model.modules()
        ),
        fused_kernels=False,
        dtype=dtype_of(params),
        param_dtype=dtype_of(params),
        reduce_dtype=dtype_of([p for p in params if p.requires_grad]),
        buffer_dtype=None,  # Hugging Face keeps rotary frequencies in fp32: no setting here
    )


def _valid_rows(rows: Sequence[SampleRow]) -> tuple[list[SampleRow], dict[str, int]]:
    """(kept, dropped per reason) of `split_rows`; no valid row left raises (fail closed)."""
    kept, dropped = split_rows(rows)
    if not kept:
        raise PPOInputError(
            "rows",
            expected="at least one row with a prompt and an action token",
            found=f"0 of {len(rows)} rows (dropped: {dropped})",
            fix="no valid trajectory in this batch: check the rollout; the update fails",
        )
    return kept, dropped
