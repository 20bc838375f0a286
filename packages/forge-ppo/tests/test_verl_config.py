"""The run spec's `[actor]` / `[critic]` knobs and `ppo.entropy_coeff` -> the Hydra overrides
verl's `ppo_trainer` config receives (`forge_ppo.verl._config.overrides`; no verl needed here;
`verl_tests/test_config_objects.py` composes them into verl's own config objects). Each knob
moves its own verl path and nothing else; a spec that names no knob gets what was hard-coded
before the knobs existed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forge_gates import load_spec, read_config
from forge_ppo.verl._config import VerlTopology, overrides

ARR = "actor_rollout_ref"
A_FSDP, C_FSDP = f"{ARR}.actor.fsdp_config", "critic.fsdp"


def verl_values(data: dict[str, Any]) -> dict[str, str]:
    spec = load_spec(data)
    pairs = overrides(spec, Path("/m"), "/c", VerlTopology.from_spec(spec))
    return dict(item.split("=", 1) for item in pairs)


def knobs_removed(name: str) -> dict[str, Any]:
    data = read_config(name)
    data.pop("actor", None), data.pop("critic", None)
    return data


def test_cpu_ranks_without_knobs_get_what_was_hard_coded():
    values = verl_values(read_config("smoke-verl-cpu"))
    assert {k: values[k] for k in (
        f"{ARR}.model.enable_gradient_checkpointing", "critic.model.enable_gradient_checkpointing",
        f"{ARR}.model.use_fused_kernels", f"{A_FSDP}.param_offload", f"{A_FSDP}.optimizer_offload",
        f"{C_FSDP}.param_offload", f"{C_FSDP}.optimizer_offload", f"{A_FSDP}.model_dtype",
        f"{C_FSDP}.model_dtype", f"{A_FSDP}.dtype", f"{C_FSDP}.dtype",
        f"+{A_FSDP}.mixed_precision", f"+{C_FSDP}.mixed_precision", f"{ARR}.actor.entropy_coeff",
    )} == {
        f"{ARR}.model.enable_gradient_checkpointing": "false",
        "critic.model.enable_gradient_checkpointing": "false",
        f"{ARR}.model.use_fused_kernels": "true",  # verl's chunked torch kernel on CPU
        f"{A_FSDP}.param_offload": "false", f"{A_FSDP}.optimizer_offload": "false",
        f"{C_FSDP}.param_offload": "false", f"{C_FSDP}.optimizer_offload": "false",
        f"{A_FSDP}.model_dtype": "fp32", f"{C_FSDP}.model_dtype": "fp32",
        f"{A_FSDP}.dtype": "float32", f"{C_FSDP}.dtype": "float32",
        f"+{A_FSDP}.mixed_precision": "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        f"+{C_FSDP}.mixed_precision": "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        f"{ARR}.actor.entropy_coeff": "0.0",
    }  # fmt: skip


def test_gpus_without_knobs_get_verls_own_defaults():
    values = verl_values(knobs_removed("smoke-4gpu"))
    assert values[f"{ARR}.model.use_fused_kernels"] == "false"
    assert values[f"{ARR}.model.enable_gradient_checkpointing"] == "false"
    for fsdp in (A_FSDP, C_FSDP):  # verl's MixedPrecision when none is given
        assert values[f"+{fsdp}.mixed_precision"] == (
            "{param_dtype:bf16,reduce_dtype:fp32,buffer_dtype:fp32}"
        )
        assert values[f"{fsdp}.dtype"] == "bfloat16" and values[f"{fsdp}.model_dtype"] == "fp32"
        assert values[f"{fsdp}.param_offload"] == values[f"{fsdp}.optimizer_offload"] == "false"


@pytest.mark.parametrize("name", ["smoke-4gpu", "soak-5gpu", "formal-5gpu"])
def test_the_production_configs_reach_verl_with_the_seeds_values(name):
    values = verl_values(read_config(name))
    for fsdp in (A_FSDP, C_FSDP):
        assert values[f"{fsdp}.param_offload"] == values[f"{fsdp}.optimizer_offload"] == "true"
    assert values[f"{ARR}.model.enable_gradient_checkpointing"] == "true"
    assert values["critic.model.enable_gradient_checkpointing"] == "true"
    assert values[f"{ARR}.model.use_fused_kernels"] == "false"
    assert values[f"{ARR}.actor.entropy_coeff"] == "0.0"


# (spec path, value) -> the verl paths it must change, with their new values
KNOBS = [
    (("actor", "param_offload", True), {f"{A_FSDP}.param_offload": "true"}),
    (("actor", "optimizer_offload", True), {f"{A_FSDP}.optimizer_offload": "true"}),
    (("critic", "param_offload", True), {f"{C_FSDP}.param_offload": "true"}),
    (("critic", "optimizer_offload", True), {f"{C_FSDP}.optimizer_offload": "true"}),
    (("actor", "gradient_checkpointing", True),
     {f"{ARR}.model.enable_gradient_checkpointing": "true"}),
    (("critic", "gradient_checkpointing", True),
     {"critic.model.enable_gradient_checkpointing": "true"}),
    (("actor", "fused_kernels", False), {f"{ARR}.model.use_fused_kernels": "false"}),
    (("actor", "dtype", "bf16"), {f"{A_FSDP}.model_dtype": "bf16"}),
    (("critic", "dtype", "bf16"), {f"{C_FSDP}.model_dtype": "bf16"}),
    (("critic", "mixed_precision", {"param_dtype": "bf16", "reduce_dtype": "bf16",
                                    "buffer_dtype": "fp32"}),
     {f"+{C_FSDP}.mixed_precision": "{param_dtype:bf16,reduce_dtype:bf16,buffer_dtype:fp32}",
      f"{C_FSDP}.dtype": "bfloat16"}),
    (("ppo", "entropy_coeff", 0.01), {f"{ARR}.actor.entropy_coeff": "0.01"}),
]  # fmt: skip


@pytest.mark.parametrize(("knob", "moved"), KNOBS, ids=[".".join(k[:2]) for k, _ in KNOBS])
def test_each_knob_moves_its_own_verl_path_only(knob, moved):
    before = verl_values(read_config("smoke-verl-cpu"))
    data = read_config("smoke-verl-cpu")
    table, field, value = knob
    data.setdefault(table, {})[field] = value
    if field == "dtype":  # FSDP2 keeps buffers in the master dtype (a spec rule)
        data[table]["mixed_precision"] = {"param_dtype": "fp32", "reduce_dtype": "fp32",
                                          "buffer_dtype": value}  # fmt: skip
        fsdp = A_FSDP if table == "actor" else C_FSDP
        moved = moved | {f"+{fsdp}.mixed_precision": f"{{param_dtype:fp32,reduce_dtype:fp32,"
                         f"buffer_dtype:{value}}}"}  # fmt: skip
    after = verl_values(data)
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    assert changed == moved
