"""Actor and critic for a run: fresh (LoRA B = 0, new value head) or strictly warm-started."""

from __future__ import annotations

from pathlib import Path

import torch

from forge_gates import RunSpec
from forge_ppo._protocol import critic_base
from forge_ppo.checkpoint._summary import ParentCheckpoint
from forge_ppo.local._actor import Actor
from forge_ppo.local._trainer import PPOTrainer
from forge_ppo.local._value_model import ValueModel

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def build_models(
    spec: RunSpec, model_dir: Path, run_dir: Path
) -> tuple[Actor, ValueModel, ParentCheckpoint | None]:
    """(actor, critic, parent checkpoint record or None). The critic trains in float32 on CPU
    (bf16 matmuls are slow and lossy there); checkpoints store it in `model.critic_dtype`."""
    torch.manual_seed(spec.seed)
    reference = spec.ppo.reference if spec.ppo is not None else "base"
    if reference == "warm_start" and spec.checkpoint.warm_start is None:
        raise ValueError(
            "expected checkpoint.warm_start with ppo.reference = 'warm_start' (KL to the policy "
            "the run starts from); found no warm start; fix: set checkpoint.warm_start or "
            "ppo.reference = 'base'"
        )
    critic = ValueModel.from_pretrained(critic_base(spec, model_dir), dtype=torch.float32)
    if spec.checkpoint.warm_start is None:
        return Actor.from_pretrained(model_dir, spec.lora), critic, None
    # warm start: PPO_WARM_START_CONFIG_PASSED, PPO_ACTOR_LORA_LOAD_PASSED, then
    # PPO_WARM_START_LOAD_PASSED (optimizer, scheduler and step restart at 0)
    actor, loaded = Actor.from_checkpoint(
        spec.checkpoint.warm_start,
        base_model=str(model_dir),
        lora=spec.lora,
        critic=critic,
        run_dir=run_dir,
    )
    if reference == "warm_start":
        actor.freeze_reference()  # KL pulls toward the loaded policy, not the bare base model
    return actor, loaded.critic, loaded.parent


def build_local_trainer(spec: RunSpec, model_dir: Path, run_dir: Path) -> PPOTrainer:
    """The local trainer for `spec`: fresh, or strictly warm-started (its gates recorded)."""
    actor, critic, parent = build_models(spec, model_dir, run_dir)
    return PPOTrainer(actor, critic, spec, parent=parent)
