"""The spec's `[actor]` / `[critic]` knobs and `ppo.entropy_coeff` in verl's own config objects:
the Hydra overrides composed with verl's `ppo_trainer.yaml` and turned into verl's dataclasses
(`FSDPActorConfig`, `FSDPCriticConfig`, `FSDPEngineConfig`, `HFModelConfig`) the way the
trainer builds its workers (`omega_conf_to_dataclass`). No Ray, no worker: seconds."""

from __future__ import annotations

from typing import Any

import pytest
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.torch_dtypes import PrecisionType

from forge_gates import load_spec, read_config
from forge_ppo.verl._compose import compose
from forge_ppo.verl._config import VerlTopology


def verl_objects(tiny_model, data: dict[str, Any]) -> dict[str, Any]:
    data["model"]["path"] = str(tiny_model)
    spec = load_spec(data)
    cfg = compose(spec, tiny_model, str(tiny_model), VerlTopology.from_spec(spec))
    return {
        "actor": omega_conf_to_dataclass(cfg.actor_rollout_ref.actor),
        "model": omega_conf_to_dataclass(cfg.actor_rollout_ref.model),
        "critic": omega_conf_to_dataclass(cfg.critic),
    }


@pytest.mark.parametrize("name", ["smoke-4gpu", "soak-5gpu", "formal-5gpu"])
def test_the_seeds_values_reach_verls_config_objects(tiny_model, name):
    verl = verl_objects(tiny_model, read_config(name))
    actor, critic = verl["actor"], verl["critic"]
    assert type(actor).__name__ == "FSDPActorConfig" and type(critic).__name__ == "FSDPCriticConfig"
    for engine in (actor.engine, critic.engine):
        assert type(engine).__name__ == "FSDPEngineConfig" and engine.strategy == "fsdp2"
        assert engine.param_offload is True and engine.optimizer_offload is True
        assert engine.model_dtype == "fp32" and engine.dtype == "bfloat16"
        mp = engine.mixed_precision
        assert [PrecisionType.to_dtype(mp[k]) for k in ("param_dtype", "reduce_dtype")] == [
            PrecisionType.to_dtype("bf16"),
            PrecisionType.to_dtype("fp32"),
        ]
    assert verl["model"].enable_gradient_checkpointing is True
    assert critic.model.enable_gradient_checkpointing is True
    assert verl["model"].use_fused_kernels is False
    assert actor.entropy_coeff == 0.0


def test_cpu_ranks_keep_the_values_of_before(tiny_model):
    verl = verl_objects(tiny_model, read_config("smoke-verl-cpu"))
    for engine in (verl["actor"].engine, verl["critic"].engine):
        assert engine.param_offload is False and engine.optimizer_offload is False
        assert engine.dtype == "float32" and engine.model_dtype == "fp32"
        assert dict(engine.mixed_precision) == {
            "param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"
        }  # fmt: skip
    assert verl["model"].use_fused_kernels is True
    assert verl["model"].enable_gradient_checkpointing is False
    assert verl["critic"].model.enable_gradient_checkpointing is False


def test_each_knob_lands_in_its_verl_field(tiny_model):
    data = read_config("smoke-verl-cpu")
    data["actor"] = {"optimizer_offload": True, "gradient_checkpointing": True,
                     "fused_kernels": False, "dtype": "bf16",
                     "mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32",
                                         "buffer_dtype": "bf16"}}  # fmt: skip
    data["critic"] = {"param_offload": True}
    data["ppo"]["entropy_coeff"] = 0.01
    verl = verl_objects(tiny_model, data)
    actor, critic = verl["actor"], verl["critic"]
    assert actor.engine.optimizer_offload is True and actor.engine.param_offload is False
    assert critic.engine.param_offload is True and critic.engine.optimizer_offload is False
    assert verl["model"].enable_gradient_checkpointing is True
    assert critic.model.enable_gradient_checkpointing is False
    assert verl["model"].use_fused_kernels is False
    assert actor.engine.model_dtype == "bf16" and actor.engine.dtype == "bfloat16"
    assert actor.engine.mixed_precision["buffer_dtype"] == "bf16"
    assert critic.engine.model_dtype == "fp32"
    assert actor.entropy_coeff == 0.01
