"""forge_ppo: exact, fast PPO math over agent trajectories, critic observability, token-budget
micro-batches, LoRA-only checkpoints and strict warm start.

GAE over action tokens (observation tokens skipped), then the PPO losses::

    from forge_ppo import compute_gae, masked_whiten, policy_loss, value_loss

    advantages, returns = compute_gae(token_level_rewards, values, response_mask, 1.0, 0.95)
    advantages = masked_whiten(advantages, response_mask)
    actor = policy_loss(log_probs, old_log_probs, advantages, response_mask, clip_ratio=0.2)
    critic = value_loss(vpreds, values, returns, response_mask, value_clip=0.2)
    metrics = {**actor.metrics(), **critic.metrics(),
               **critic_observability(values, returns, advantages, response_mask)}

Micro-batches and checkpoints::

    plan = plan_micro_batches(lengths, token_budget=65536, world_size=4, equal_counts=True)
    tracker = UpdateTracker(actor_model, critic_model)   # before the optimizer steps
    record = tracker.finish(step=1, actor_optimizer_steps=1, critic_optimizer_steps=1,
                            actor_loss=0.1, critic_loss=0.2, action_tokens=4096)
    save_checkpoint(run_dir / "checkpoints", step=1, actor=actor_model, critic=critic_model,
                    update=record, base_model=path, lora_spec=spec.lora,
                    checkpoint_spec=spec.checkpoint, run_dir=run_dir)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below resolve lazily (see __getattr__)
    from forge_ppo._actor import Actor, ActorOutput
    from forge_ppo._adapter import (
        DEFAULT_MAX_LORA_RANK,
        adapter_config_dict,
        adapter_state_dict,
        check_adapter_rules,
        lora_config,
        tensor_fingerprint,
    )
    from forge_ppo._batch import Batch, collate, gather_response, split_rows
    from forge_ppo._checkpoint import save_checkpoint
    from forge_ppo._errors import PPOInputError
    from forge_ppo._gae import (
        compute_gae,
        masked_mean,
        masked_var,
        masked_whiten,
        reverse_discounted_scan,
    )
    from forge_ppo._losses import (
        LOSS_AGG_MODES,
        PolicyLossOutput,
        ValueLossOutput,
        aggregate_loss,
        entropy_from_logits,
        kl_penalty,
        loss_normaliser,
        policy_loss,
        value_loss,
    )
    from forge_ppo._metrics import grad_norm, masked_entropy_mean
    from forge_ppo._microbatch import MicroBatchPlan, lower_bound, plan_micro_batches
    from forge_ppo._observability import (
        EpisodeOutcome,
        critic_observability,
        decode_task_id,
        encode_task_id,
        task_critic_metrics,
        task_rollout_metrics,
    )
    from forge_ppo._passes import micro_batches, task_mini_batches
    from forge_ppo._summary import CheckpointSummary, FileRecord, ParentCheckpoint
    from forge_ppo._trainer import PPOTrainer, UpdateResult
    from forge_ppo._update import UpdateRecord, UpdateTracker
    from forge_ppo._update_metrics import episode_outcomes
    from forge_ppo._value_model import ValueModel
    from forge_ppo._verify import check_checkpoint_files, verify_checkpoint
    from forge_ppo._warm_start import (
        WarmStart,
        check_warm_start_checkpoint,
        check_warm_start_config,
        warm_start,
    )

_LAZY: dict[str, str] = {
    "Actor": "forge_ppo._actor",
    "ActorOutput": "forge_ppo._actor",
    "Batch": "forge_ppo._batch",
    "CheckpointSummary": "forge_ppo._summary",
    "DEFAULT_MAX_LORA_RANK": "forge_ppo._adapter",
    "EpisodeOutcome": "forge_ppo._observability",
    "FileRecord": "forge_ppo._summary",
    "LOSS_AGG_MODES": "forge_ppo._losses",
    "MicroBatchPlan": "forge_ppo._microbatch",
    "PPOInputError": "forge_ppo._errors",
    "PPOTrainer": "forge_ppo._trainer",
    "ParentCheckpoint": "forge_ppo._summary",
    "PolicyLossOutput": "forge_ppo._losses",
    "UpdateRecord": "forge_ppo._update",
    "UpdateResult": "forge_ppo._trainer",
    "UpdateTracker": "forge_ppo._update",
    "ValueLossOutput": "forge_ppo._losses",
    "ValueModel": "forge_ppo._value_model",
    "WarmStart": "forge_ppo._warm_start",
    "adapter_config_dict": "forge_ppo._adapter",
    "adapter_state_dict": "forge_ppo._adapter",
    "aggregate_loss": "forge_ppo._losses",
    "check_adapter_rules": "forge_ppo._adapter",
    "check_checkpoint_files": "forge_ppo._verify",
    "check_warm_start_checkpoint": "forge_ppo._warm_start",
    "check_warm_start_config": "forge_ppo._warm_start",
    "collate": "forge_ppo._batch",
    "compute_gae": "forge_ppo._gae",
    "critic_observability": "forge_ppo._observability",
    "decode_task_id": "forge_ppo._observability",
    "encode_task_id": "forge_ppo._observability",
    "entropy_from_logits": "forge_ppo._losses",
    "episode_outcomes": "forge_ppo._update_metrics",
    "gather_response": "forge_ppo._batch",
    "grad_norm": "forge_ppo._metrics",
    "kl_penalty": "forge_ppo._losses",
    "lora_config": "forge_ppo._adapter",
    "loss_normaliser": "forge_ppo._losses",
    "lower_bound": "forge_ppo._microbatch",
    "masked_entropy_mean": "forge_ppo._metrics",
    "masked_mean": "forge_ppo._gae",
    "masked_var": "forge_ppo._gae",
    "masked_whiten": "forge_ppo._gae",
    "micro_batches": "forge_ppo._passes",
    "plan_micro_batches": "forge_ppo._microbatch",
    "policy_loss": "forge_ppo._losses",
    "reverse_discounted_scan": "forge_ppo._gae",
    "save_checkpoint": "forge_ppo._checkpoint",
    "split_rows": "forge_ppo._batch",
    "task_critic_metrics": "forge_ppo._observability",
    "task_mini_batches": "forge_ppo._passes",
    "task_rollout_metrics": "forge_ppo._observability",
    "tensor_fingerprint": "forge_ppo._adapter",
    "value_loss": "forge_ppo._losses",
    "verify_checkpoint": "forge_ppo._verify",
    "warm_start": "forge_ppo._warm_start",
}

__all__ = [
    "DEFAULT_MAX_LORA_RANK",
    "LOSS_AGG_MODES",
    "Actor",
    "ActorOutput",
    "Batch",
    "CheckpointSummary",
    "EpisodeOutcome",
    "FileRecord",
    "MicroBatchPlan",
    "PPOInputError",
    "PPOTrainer",
    "ParentCheckpoint",
    "PolicyLossOutput",
    "UpdateRecord",
    "UpdateResult",
    "UpdateTracker",
    "ValueLossOutput",
    "ValueModel",
    "WarmStart",
    "adapter_config_dict",
    "adapter_state_dict",
    "aggregate_loss",
    "check_adapter_rules",
    "check_checkpoint_files",
    "check_warm_start_checkpoint",
    "check_warm_start_config",
    "collate",
    "compute_gae",
    "critic_observability",
    "decode_task_id",
    "encode_task_id",
    "entropy_from_logits",
    "episode_outcomes",
    "gather_response",
    "grad_norm",
    "kl_penalty",
    "lora_config",
    "loss_normaliser",
    "lower_bound",
    "masked_entropy_mean",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "micro_batches",
    "plan_micro_batches",
    "policy_loss",
    "reverse_discounted_scan",
    "save_checkpoint",
    "split_rows",
    "task_critic_metrics",
    "task_mini_batches",
    "task_rollout_metrics",
    "tensor_fingerprint",
    "value_loss",
    "verify_checkpoint",
    "warm_start",
]


def __getattr__(name: str) -> Any:
    """Import on first use, so `import forge_ppo` (and the CLI) does not load torch / peft /
    transformers until a name that needs them is touched."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'forge_ppo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
