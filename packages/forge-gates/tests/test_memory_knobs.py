"""The `[actor]` / `[critic]` memory knobs: defaults that keep every existing config as it was,
the seed's values in the production configs, and the rules on the combinations no engine
honours (each with its exact violation)."""

from __future__ import annotations

from typing import Any

import pytest

from forge_gates import (
    ActorSpec,
    CriticSpec,
    MixedPrecisionSpec,
    load_spec,
    read_config,
    shipped_configs,
    validate_config,
)

PRODUCTION = ("smoke-4gpu", "soak-5gpu", "formal-5gpu")
# run by `nox -s production_cpu` on the merged demo model, whose own lm_head verl's FSDP2 shards
# apart from the fused kernel's reach: fused kernels off, every other knob the default
UNFUSED = ("smoke-production-cpu", "soak-production-cpu")


def _rules(data: dict[str, Any]) -> dict[str, Any]:
    spec, violations = validate_config(data)
    assert spec is None, "expected the spec to be refused"
    return {v.rule: v for v in violations}


def test_every_other_shipped_config_keeps_the_defaults_of_before():
    """No knob named: offload off, no checkpointing, fused kernels by device, fp32 master,
    mixed precision by device (what `forge_ppo.verl._config` hard-coded before)."""
    others = [n for n in shipped_configs() if n not in PRODUCTION]
    assert "smoke-local" in others and "smoke-verl-cpu" in others
    for name in others:
        spec = load_spec(name)
        actor = ActorSpec(fused_kernels=False) if name in UNFUSED else ActorSpec()
        assert spec.actor == actor and spec.critic == CriticSpec(), name
        assert ActorSpec().fused_kernels is None and ActorSpec().mixed_precision is None
        assert not ActorSpec().param_offload and not ActorSpec().gradient_checkpointing
        assert ActorSpec().dtype == CriticSpec().dtype == "fp32"


@pytest.mark.parametrize("name", PRODUCTION)
def test_the_production_configs_carry_the_seeds_values(name: str):
    spec = load_spec(name)
    bf16_compute = MixedPrecisionSpec(param_dtype="bf16", reduce_dtype="fp32", buffer_dtype="fp32")
    for knobs in (spec.actor, spec.critic):
        assert knobs.param_offload and knobs.optimizer_offload  # runbook line 93 (item 16)
        assert knobs.gradient_checkpointing  # line 80 (item 3); verl's actor default
        assert knobs.dtype == "fp32" and knobs.mixed_precision == bf16_compute
    assert spec.actor.fused_kernels is False
    assert spec.ppo is not None and spec.ppo.entropy_coeff == 0.0


@pytest.mark.parametrize("knob", ["param_offload", "optimizer_offload"])
@pytest.mark.parametrize("role", ["actor", "critic"])
def test_the_local_trainer_refuses_offload(role: str, knob: str):
    data = read_config("smoke-local")
    data[role] = {knob: True}
    found = _rules(data)
    assert list(found) == [f"{role}.{knob}.local"]
    v = found[f"{role}.{knob}.local"]
    assert v.expected == (
        f"{role}.{knob} = false with backends.trainer = 'local' (one process without FSDP: "
        "nothing is sharded or offloaded)"
    )
    assert v.found == f"{role}.{knob} = true"
    assert v.fix == (
        f"set {role}.{knob} = false, or backends.trainer = 'verl' (FSDP2 on Ray) for a run "
        "that needs it"
    )


def test_the_local_trainer_refuses_fused_kernels_and_mixed_precision():
    data = read_config("smoke-local")
    data["actor"] = {"fused_kernels": True, "mixed_precision": {"param_dtype": "bf16"}}
    found = _rules(data)
    assert set(found) == {"actor.fused_kernels.local", "actor.mixed_precision.local"}
    assert found["actor.fused_kernels.local"].found == "actor.fused_kernels = true"
    assert "set actor.dtype = 'bf16'" in found["actor.mixed_precision.local"].fix


def test_the_local_trainer_takes_what_it_honours():
    data = read_config("smoke-local")
    data["actor"] = {"gradient_checkpointing": True, "dtype": "bf16", "fused_kernels": False}
    data["critic"] = {"gradient_checkpointing": True, "dtype": "bf16"}
    data["ppo"]["entropy_coeff"] = 0.01
    spec = load_spec(data)
    assert spec.actor.gradient_checkpointing and spec.critic.dtype == "bf16"


def test_verl_refuses_a_buffer_dtype_fsdp2_cannot_apply():
    data = read_config("soak-5gpu")
    data["critic"]["mixed_precision"]["buffer_dtype"] = "bf16"
    found = _rules(data)
    assert list(found) == ["critic.mixed_precision.buffer_dtype"]
    v = found["critic.mixed_precision.buffer_dtype"]
    assert v.expected == (
        "critic.mixed_precision.buffer_dtype = critic.dtype (fp32): verl's FSDP2 keeps buffers "
        "in the master dtype"
    )
    assert (
        v.found == "buffer_dtype = 'bf16'"
        and v.fix == "set critic.mixed_precision.buffer_dtype = 'fp32'"
    )


def test_unknown_knobs_and_dtypes_are_refused_by_the_schema():
    data = read_config("soak-5gpu")
    data["critic"]["fused_kernels"] = True  # the critic has no LM head
    data["actor"]["dtype"] = "fp16"
    found = _rules(data)
    assert set(found) == {"schema.critic.fused_kernels", "schema.actor.dtype"}
