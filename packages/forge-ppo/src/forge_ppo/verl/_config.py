"""A RunSpec -> verl 0.9.1's own config (`ppo_trainer.yaml`, composed by Hydra with overrides).

Only what Forge's PPO means is set; every field is named by its verl path, so a reader can
look it up in verl's `trainer/config/_generated_ppo_trainer.yaml`. The critic's token budgets are
set on its *engine* config explicitly (verl #7462: the v1 trainer gives both budgets the
inference value, and neither trainer passes them to the engine); the budget gates read them
back from the built workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import verl
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from forge_gates import RunSpec

KL_LOSS_TYPES = {"k1": "kl", "k3": "low_var_kl"}  # Forge's estimator -> verl's kl_loss_type


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
    cpu = topology.device == "cpu"
    values: dict[str, Any] = {
        # the model: LoRA on the actor (PEFT LoraConfig from these), sdpa attention
        f"{arr}.model.path": str(model_dir),
        f"{arr}.model.lora_rank": lora.rank,
        f"{arr}.model.lora_alpha": lora.alpha,
        f"{arr}.model.target_modules": targets,
        f"{arr}.model.use_remove_padding": False,
        f"{arr}.model.enable_gradient_checkpointing": False,
        # on CPU, log-probs and entropy from verl's chunked torch kernel (`utils/experimental/
        # torch_functional.py`); unfused, verl takes one logsumexp per token in a Python loop
        # there (`logprobs_from_logits_v2`: no flash-attn cross entropy); GPUs keep verl's
        # default (flash-attn's cross entropy, which `nox -s verl_gpu` checks is installed)
        f"{arr}.model.use_fused_kernels": cpu,
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
        f"{actor}.entropy_coeff": ppo.entropy_coeff,
        f"{actor}.use_kl_loss": ppo.kl_beta > 0,
        f"{actor}.kl_loss_coef": ppo.kl_beta,
        f"{actor}.kl_loss_type": KL_LOSS_TYPES[ppo.kl_estimator],
        f"{actor}.ppo_epochs": ppo.ppo_epochs,
        f"{actor}.grad_clip": ppo.grad_clip,
        f"{actor}.shuffle": False,
        f"{actor}.use_dynamic_bsz": True,
        f"{actor}.ppo_max_token_len_per_gpu": ctx.actor_train_tokens,
        f"{actor}.ppo_mini_batch_size": ppo.actor_mini_batch_size,
        f"{actor}.fsdp_config.param_offload": False,
        f"{actor}.fsdp_config.optimizer_offload": False,
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
        f"{critic}.model.enable_gradient_checkpointing": False,
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
    for fsdp in (f"{actor}.fsdp_config", f"{critic}.fsdp"):
        values[f"{fsdp}.model_dtype"] = "fp32"  # master weights
        values[f"{fsdp}.use_torch_compile"] = False
        if cpu:  # bf16 matmuls are slow and lossy on CPU (the local trainer computes in fp32);
            # verl's FSDP mixed precision defaults to bf16 params when none is given
            values[f"{fsdp}.dtype"] = "float32"
            values[f"+{fsdp}.mixed_precision"] = (
                "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
            )
    return [f"{k}={_value(v)}" for k, v in values.items()]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def compose(spec: RunSpec, model_dir: Path, critic_dir: str, topology: VerlTopology) -> Any:
    """verl's `ppo_trainer` config (an omegaconf DictConfig) with Forge's overrides."""
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose(
            "ppo_trainer", overrides=overrides(spec, model_dir, critic_dir, topology)
        )
