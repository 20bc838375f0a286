"""A RunSpec -> verl 0.9.1's own config (`ppo_trainer.yaml`, composed by Hydra with overrides).

Only what Forge's PPO means is set; every field is named by its verl path, so a reader can
look it up in verl's `trainer/config/_generated_ppo_trainer.yaml`. The critic's token budgets are
set on its *engine* config explicitly (verl #7462: the v1 trainer gives both budgets the
inference value, and neither trainer passes them to the engine); the budget gates read them
back from the built workers.

The spec's `[actor]` / `[critic]` knobs (forge_gates `_memory`) map one to one (`knob_values`):

    actor.param_offload / optimizer_offload   actor_rollout_ref.actor.fsdp_config.*
    critic.param_offload / optimizer_offload  critic.fsdp.*
    actor.gradient_checkpointing              actor_rollout_ref.model.enable_gradient_checkpointing
    critic.gradient_checkpointing             critic.model.enable_gradient_checkpointing
    actor.fused_kernels                       actor_rollout_ref.model.use_fused_kernels
    actor|critic.dtype                        <fsdp>.model_dtype (master weights)
    actor|critic.mixed_precision              <fsdp>.mixed_precision {param,reduce,buffer}_dtype
                                              and <fsdp>.dtype (the param dtype, verl's name)
    ppo.entropy_coeff                         actor_rollout_ref.actor.entropy_coeff

This module imports neither verl nor Hydra (`_compose` composes the config), so the mapping
is testable without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_gates import RunSpec
from forge_ppo._protocol import TrainerSettings

KL_LOSS_TYPES = {"k1": "kl", "k3": "low_var_kl"}  # Forge's estimator -> verl's kl_loss_type
TORCH_NAMES = {"fp32": "float32", "bf16": "bfloat16"}  # verl's EngineConfig.dtype spelling


@dataclass(frozen=True)
class VerlTopology:
    """Where the workers run: `world_size` ranks of `device` (`cpu` ranks with gloo when
    VERL_PLATFORM=cpu, else GPUs), in one colocated resource pool."""

    world_size: int
    device: str  # "cpu" | "cuda"

    @classmethod
    def from_spec(cls, spec: RunSpec) -> VerlTopology:
        res = spec.resources
        if res.trainer_gpus > 0:
            return cls(world_size=res.trainer_gpus, device="cuda")
        return cls(world_size=max(res.trainer_cpu_ranks, 1), device="cpu")


def overrides(spec: RunSpec, model_dir: Path, critic_dir: str, topology: VerlTopology) -> list[str]:
    """Hydra overrides of verl's `ppo_trainer` config for `spec`."""
    assert spec.ppo is not None, "a PPO spec (smoke, soak, formal)"
    ppo, lora, ctx = spec.ppo, spec.lora, spec.context
    targets = "[" + ",".join(lora.target_modules) + "]"
    arr, actor, critic = "actor_rollout_ref", "actor_rollout_ref.actor", "critic"
    values: dict[str, Any] = {
        # the model: LoRA on the actor (PEFT LoraConfig from these), sdpa attention
        f"{arr}.model.path": str(model_dir),
        f"{arr}.model.lora_rank": lora.rank,
        f"{arr}.model.lora_alpha": lora.alpha,
        f"{arr}.model.target_modules": targets,
        f"{arr}.model.use_remove_padding": False,
        f"+{arr}.model.override_config.attn_implementation": "sdpa",
        # the actor: FSDP2 (FSDP1 cannot run on CPU ranks), Forge's PPO settings
        f"{actor}.strategy": "fsdp2",
        f"{actor}.use_torch_compile": False,
        f"{actor}.optim.lr": ppo.actor_lr,
        f"{actor}.optim.weight_decay": 0.01,
        f"{actor}.optim.lr_warmup_steps_ratio": 0.0,
        f"{actor}.clip_ratio": ppo.clip_ratio,
        f"{actor}.clip_ratio_low": ppo.clip_ratio,
        f"{actor}.clip_ratio_high": ppo.clip_ratio,
        f"{actor}.clip_ratio_c": ppo.dual_clip if ppo.dual_clip is not None else 1e9,
        f"{actor}.loss_agg_mode": ppo.loss_agg_mode,
        f"{actor}.use_kl_loss": ppo.kl_beta > 0,
        f"{actor}.kl_loss_coef": ppo.kl_beta,
        f"{actor}.kl_loss_type": KL_LOSS_TYPES[ppo.kl_estimator],
        f"{actor}.ppo_epochs": ppo.ppo_epochs,
        f"{actor}.grad_clip": ppo.grad_clip,
        f"{actor}.shuffle": False,
        f"{actor}.use_dynamic_bsz": True,
        f"{actor}.ppo_max_token_len_per_gpu": ctx.actor_train_tokens,
        f"{actor}.ppo_mini_batch_size": ppo.actor_mini_batch_size,
        f"{actor}.checkpoint.save_contents": "[model]",
        # the log-prob passes (old / reference) share the actor's budget
        f"{arr}.rollout.log_prob_use_dynamic_bsz": True,
        f"{arr}.rollout.log_prob_max_token_len_per_gpu": ctx.actor_train_tokens,
        f"{arr}.rollout.n": 1,
        f"{arr}.ref.log_prob_use_dynamic_bsz": True,
        f"{arr}.ref.log_prob_max_token_len_per_gpu": ctx.actor_train_tokens,
        # the critic: a value model from its own base, FSDP2, its own two budgets
        f"{critic}.strategy": "fsdp2",
        f"{critic}.model.path": critic_dir,
        f"{critic}.model.use_remove_padding": False,
        f"+{critic}.model.override_config.attn_implementation": "sdpa",
        f"{critic}.optim.lr": ppo.critic_lr,
        f"{critic}.optim.weight_decay": 0.01,
        f"{critic}.optim.lr_warmup_steps_ratio": 0.0,
        f"{critic}.cliprange_value": ppo.value_clip,
        f"{critic}.loss_agg_mode": ppo.loss_agg_mode,
        f"{critic}.grad_clip": ppo.grad_clip,
        f"{critic}.ppo_epochs": ppo.ppo_epochs,
        f"{critic}.ppo_mini_batch_size": ppo.critic_mini_batch_size,
        f"{critic}.use_dynamic_bsz": True,
        f"{critic}.ppo_max_token_len_per_gpu": ctx.critic_train_tokens,
        f"{critic}.forward_max_token_len_per_gpu": ctx.critic_infer_tokens,
        f"{critic}.checkpoint.save_contents": "[model]",
        # algorithm: Forge computes GAE itself (vectorised; verl's is a Python loop per token)
        "algorithm.adv_estimator": "gae",
        "algorithm.gamma": ppo.gamma,
        "algorithm.lam": ppo.gae_lambda,
        # trainer / placement
        "trainer.device": topology.device,
        "trainer.n_gpus_per_node": topology.world_size,
        "trainer.nnodes": 1,
        "trainer.logger": "[console]",
    }
    values |= knob_values(spec)
    return [f"{k}={_value(v)}" for k, v in values.items()]


def knob_values(spec: RunSpec) -> dict[str, Any]:
    """The `[actor]` / `[critic]` knobs and the entropy term as verl config paths -> values,
    resolved by `TrainerSettings.from_spec` (the same resolution the settings gate holds the
    built workers to). Unset fused kernels: on for CPU ranks, where log-probs and entropy then
    come from verl's chunked torch kernel (`utils/experimental/torch_functional.py`; unfused,
    verl takes one logsumexp per token in a Python loop there, `logprobs_from_logits_v2`); off
    on GPUs, verl's default (flash-attn's cross entropy, which `nox -s verl_gpu` checks)."""
    arr = "actor_rollout_ref"
    wanted = TrainerSettings.from_spec(spec)
    values: dict[str, Any] = {
        f"{arr}.model.use_fused_kernels": wanted.actor.fused_kernels,
        f"{arr}.actor.entropy_coeff": wanted.entropy_coeff,
    }
    for settings, model, fsdp in (
        (wanted.actor, f"{arr}.model", f"{arr}.actor.fsdp_config"),
        (wanted.critic, "critic.model", "critic.fsdp"),
    ):
        values |= {
            f"{model}.enable_gradient_checkpointing": settings.gradient_checkpointing,
            f"{fsdp}.param_offload": settings.param_offload,
            f"{fsdp}.optimizer_offload": settings.optimizer_offload,
            f"{fsdp}.model_dtype": settings.dtype,  # master weights
            f"{fsdp}.use_torch_compile": False,
            f"{fsdp}.dtype": TORCH_NAMES[settings.param_dtype],
            f"+{fsdp}.mixed_precision": (
                f"{{param_dtype:{settings.param_dtype},reduce_dtype:{settings.reduce_dtype},"
                f"buffer_dtype:{settings.buffer_dtype}}}"
            ),
        }
    return values


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
