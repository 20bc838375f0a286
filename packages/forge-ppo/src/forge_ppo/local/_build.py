"""The local trainer for a run: its models built (fresh or warm-started) in the spec's dtypes,
activation checkpointing on where the spec asks, then `PPOTrainer`.

The local trainer is one process without FSDP: it honours `actor|critic.gradient_checkpointing`
(Hugging Face's, non-reentrant, so the frozen LoRA base needs no input gradients), the dtypes
and `ppo.entropy_coeff`; the spec rules refuse offload, fused kernels and FSDP mixed precision
for it before anything runs, and `build_local_trainer` refuses them again for a spec built
without its rules.
"""

from __future__ import annotations

from pathlib import Path

import torch

from forge_gates import RunSpec
from forge_ppo.local._trainer import PPOTrainer
from forge_ppo.policy._build import build_models


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Hugging Face activation checkpointing on `model` or the first pretrained model inside
    it (the critic's backbone), non-reentrant."""
    for module in model.modules():
        enable = getattr(module, "gradient_checkpointing_enable", None)
        if enable is not None and getattr(module, "supports_gradient_checkpointing", False):
            enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            return
    raise ValueError(
        f"gradient_checkpointing: expected a Hugging Face model that supports it; found "
        f"{type(model).__name__} without one; fix: set gradient_checkpointing = false"
    )


def _refuse_unhonoured(spec: RunSpec) -> None:
    asked = [
        f"{role}.{name}"
        for role, knobs in (("actor", spec.actor), ("critic", spec.critic))
        for name in ("param_offload", "optimizer_offload", "mixed_precision")
        if getattr(knobs, name) not in (False, None)
    ] + (["actor.fused_kernels"] if spec.actor.fused_kernels else [])
    if asked:
        raise ValueError(
            f"local trainer: expected none of offload, FSDP mixed precision or fused kernels "
            f"(one process without FSDP); found {', '.join(asked)}; fix: remove them, or train "
            "with backends.trainer = 'verl'"
        )


def build_local_trainer(spec: RunSpec, model_dir: Path, run_dir: Path) -> PPOTrainer:
    """The local trainer for `spec`: fresh, or strictly warm-started (its gates recorded)."""
    _refuse_unhonoured(spec)
    actor, critic, parent = build_models(spec, model_dir, run_dir)
    if spec.actor.gradient_checkpointing:
        enable_gradient_checkpointing(actor.model)
    if spec.critic.gradient_checkpointing:
        enable_gradient_checkpointing(critic)
    return PPOTrainer(actor, critic, spec, parent=parent)
