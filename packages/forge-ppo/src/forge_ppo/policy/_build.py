"""Actor and critic for a run: fresh (LoRA B = 0, new value head) or strictly warm-started.
Both trainers build their models here (the verl trainer as its host mirror)."""

from __future__ import annotations

from pathlib import Path

import torch

from forge_gates import RunSpec
from forge_ppo.checkpoint._summary import ParentCheckpoint
from forge_ppo.models._value_model import DTYPES, ValueModel, critic_base
from forge_ppo.policy._actor import Actor


def build_models(
    spec: RunSpec, model_dir: Path, run_dir: Path
) -> tuple[Actor, ValueModel, ParentCheckpoint | None]:
    """(actor, critic, parent checkpoint record or None), each in its spec dtype (`actor.dtype`,
    `critic.dtype`: fp32 unless a spec says bf16; bf16 matmuls are slow and lossy on CPU);
    checkpoints store the critic in `model.critic_dtype`."""
    torch.manual_seed(spec.seed)
    reference = spec.ppo.reference if spec.ppo is not None else "base"
    if reference == "warm_start" and spec.checkpoint.warm_start is None:
        raise ValueError(
            "expected checkpoint.warm_start with ppo.reference = 'warm_start' (KL to the policy "
            "the run starts from); found no warm start; fix: set checkpoint.warm_start or "
            "ppo.reference = 'base'"
        )
    actor_dtype = DTYPES[spec.actor.dtype]
    critic = ValueModel.from_pretrained(
        critic_base(spec, model_dir), dtype=DTYPES[spec.critic.dtype]
    )
    if spec.checkpoint.warm_start is None:
        return Actor.from_pretrained(model_dir, spec.lora, dtype=actor_dtype), critic, None
    # warm start: PPO_WARM_START_CONFIG_PASSED, PPO_ACTOR_LORA_LOAD_PASSED, then
    # PPO_WARM_START_LOAD_PASSED (optimizer, scheduler and step restart at 0)
    actor, loaded = Actor.from_checkpoint(
        spec.checkpoint.warm_start,
        base_model=str(model_dir),
        lora=spec.lora,
        critic=critic,
        run_dir=run_dir,
        dtype=actor_dtype,
    )
    if reference == "warm_start":
        actor.freeze_reference()  # KL pulls toward the loaded policy, not the bare base model
    return actor, loaded.critic, loaded.parent
