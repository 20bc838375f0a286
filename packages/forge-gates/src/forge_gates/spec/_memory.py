"""How each trained model is held and computed: offload, activation checkpointing, fused
kernels, dtypes (`[actor]` and `[critic]` of a run spec), and the rules on them.

The defaults are what Forge did before these knobs existed, so every config that does not name
them trains as before; the production configs carry the seed system's values (with the line of
the runbook each comes from). The verl trainer maps each field onto verl's own config
(`forge_ppo.verl._config`) and the built workers are read back (`PPO_TRAINER_SETTINGS_GATE_PASSED`);
the local trainer honours gradient checkpointing and the dtype, and the rules below refuse what
it has no engine for (offload, fused kernels, FSDP mixed precision).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_gates._checks import Check

if TYPE_CHECKING:
    from forge_gates.spec._spec import RunSpec

Dtype = Literal["fp32", "bf16"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MixedPrecisionSpec(_Frozen):
    """FSDP mixed precision (verl's `fsdp_config.mixed_precision`; torch's
    `MixedPrecisionPolicy`): the dtype each part of a forward/backward runs in."""

    param_dtype: Dtype = Field(
        default="bf16", description="Dtype the sharded parameters are cast to for compute."
    )
    reduce_dtype: Dtype = Field(
        default="fp32", description="Dtype gradients are reduced (all-reduce / scatter) in."
    )
    buffer_dtype: Dtype = Field(default="fp32", description="Dtype of module buffers.")


class TrainedModelSpec(_Frozen):
    """One trained model's memory and precision settings (verl's `fsdp_config` / `model`)."""

    param_offload: bool = Field(
        default=False,
        description="verl: parameters and gradients live on the CPU outside this model's own "
        "passes (reloaded for them; frees the GPU for the other model and vLLM). Local "
        "trainer: refused (no FSDP).",
    )
    optimizer_offload: bool = Field(
        default=False,
        description="verl: AdamW moments live on the CPU outside this model's optimizer step. "
        "Local trainer: refused (no FSDP).",
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="Keep only each decoder layer's input and recompute the layer in backward "
        "(verl's model.enable_gradient_checkpointing; the local trainer's HF model).",
    )
    dtype: Dtype = Field(
        default="fp32",
        description="Master weights (and so gradients and AdamW moments): verl's "
        "fsdp model_dtype; the local trainer loads and computes in it.",
    )
    mixed_precision: MixedPrecisionSpec | None = Field(
        default=None,
        description="verl only: FSDP compute/reduce/buffer dtypes. None: fp32 throughout on CPU "
        "ranks, verl's own default on GPUs (bf16 parameters, fp32 reduce and buffers).",
    )


class ActorSpec(TrainedModelSpec):
    """The actor (the LoRA policy): the trained-model settings plus the fused log-prob kernel."""

    fused_kernels: bool | None = Field(
        default=None,
        description="verl's model.use_fused_kernels: log-probs and entropy from the hidden "
        "states in chunks, never the full (tokens x vocabulary) logits. None: on for CPU ranks "
        "(verl's unfused CPU path is a Python loop per token), off on GPUs (verl's default). "
        "Local trainer: refused when true.",
    )


class CriticSpec(TrainedModelSpec):
    """The critic (the value model, fully fine-tuned)."""


def check_memory_knobs(spec: RunSpec, check: Check) -> None:
    """The local trainer is one process without FSDP: offload, fused kernels and FSDP mixed
    precision would be ignored there, so they are refused (never a silent no-op). verl's FSDP2
    casts no buffer (torch's `MixedPrecisionPolicy` has no buffer dtype): its buffers stay in
    the master dtype, so another `buffer_dtype` is refused too."""
    if spec.backends.trainer == "verl":
        for role, knobs in (("actor", spec.actor), ("critic", spec.critic)):
            mp = knobs.mixed_precision
            check.require(
                mp is None or mp.buffer_dtype == knobs.dtype,
                rule=f"{role}.mixed_precision.buffer_dtype",
                expected=f"{role}.mixed_precision.buffer_dtype = {role}.dtype ({knobs.dtype}): "
                "verl's FSDP2 keeps buffers in the master dtype",
                found=f"buffer_dtype = {mp.buffer_dtype if mp else None!r}",
                fix=f"set {role}.mixed_precision.buffer_dtype = {knobs.dtype!r}",
            )
        return
    fix_backend = "or backends.trainer = 'verl' (FSDP2 on Ray) for a run that needs it"
    for role, knobs in (("actor", spec.actor), ("critic", spec.critic)):
        for name in ("param_offload", "optimizer_offload"):
            check.require(
                not getattr(knobs, name),
                rule=f"{role}.{name}.local",
                expected=f"{role}.{name} = false with backends.trainer = 'local' (one process "
                "without FSDP: nothing is sharded or offloaded)",
                found=f"{role}.{name} = true",
                fix=f"set {role}.{name} = false, {fix_backend}",
            )
        check.require(
            knobs.mixed_precision is None,
            rule=f"{role}.mixed_precision.local",
            expected=f"no {role}.mixed_precision with backends.trainer = 'local' (it computes in "
            f"{role}.dtype)",
            found=f"{role}.mixed_precision = {knobs.mixed_precision!r}",
            fix=f"remove {role}.mixed_precision and set {role}.dtype = 'bf16' to compute in "
            f"bf16, {fix_backend}",
        )
    check.require(
        not spec.actor.fused_kernels,
        rule="actor.fused_kernels.local",
        expected="actor.fused_kernels unset or false with backends.trainer = 'local' (it has "
        "no fused log-prob kernel)",
        found="actor.fused_kernels = true",
        fix=f"remove actor.fused_kernels, {fix_backend}",
    )
