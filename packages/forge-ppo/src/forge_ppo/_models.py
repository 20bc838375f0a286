"""Actor and critic for a run: fresh (LoRA B = 0, new value head) or strictly warm-started."""

from __future__ import annotations

from pathlib import Path

import torch

from forge_gates import Gate, RunSpec, gate
from forge_ppo._actor import Actor
from forge_ppo._summary import ParentCheckpoint
from forge_ppo._value_model import ValueModel
from forge_ppo._warm_start import check_warm_start_checkpoint

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def critic_base(spec: RunSpec, model_dir: Path) -> str:
    """The critic's base model folder: `model.critic_path`, else the actor's base model."""
    return spec.model.critic_path or str(model_dir)


def check_parent(spec: RunSpec, model_dir: Path) -> None:
    """Refuse a bad `checkpoint.warm_start` before any run folder, server or gateway exists:
    files, summary, adapter config, base models, finite tensors (GateError listing them all).
    Passing prints nothing: PPO_WARM_START_CONFIG_PASSED is recorded by the full check later."""
    if spec.checkpoint.warm_start is None:
        return
    _, problems = check_warm_start_checkpoint(
        spec.checkpoint.warm_start,
        base_model=str(model_dir),
        lora_spec=spec.lora,
        critic_base_model=critic_base(spec, model_dir),
    )
    if problems:
        gate(None, Gate.PPO_WARM_START_CONFIG_PASSED, problems)


def build_models(
    spec: RunSpec, model_dir: Path, run_dir: Path
) -> tuple[Actor, ValueModel, ParentCheckpoint | None]:
    """(actor, critic, parent checkpoint record or None). The critic trains in float32 on CPU
    (bf16 matmuls are slow and lossy there); checkpoints store it in `model.critic_dtype`."""
    torch.manual_seed(spec.seed)
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
    return actor, loaded.critic, loaded.parent
