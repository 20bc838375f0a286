"""The one seam between the recipes and a trainer: `Trainer`, its `UpdateResult` and the
`TokenBudgets` the budget gates read back from it. Both trainers (`local/`, `verl/`) implement
it from below; the factory (`_trainers.build_trainer`) and the recipes use it from above.

    trainer = build_trainer(spec, model_dir, run_dir)   # local or verl, by backends.trainer
    trainer.budgets                                     # what the built engine uses
    trainer.settings                                    # offload, checkpointing, dtypes as built
    trainer.export_adapter(served)                      # PEFT adapter for the inference server
    result = trainer.update(rows, step, episodes=...)   # canonical metrics + UpdateRecord
    trainer.save(root, step=step, record=result.record) # Forge's LoRA-only layout
    trainer.close()

A warm start happens when the trainer is built (`spec.checkpoint.warm_start`), with the same
strict checks for every backend; `trainer.parent` records it. A recipe never asks which
trainer it drives.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import MixedPrecisionSpec, RunSpec, TrainedModelSpec
from forge_ppo.algo._observability import EpisodeOutcome
from forge_ppo.checkpoint._summary import ParentCheckpoint
from forge_ppo.checkpoint._update import UpdateRecord
from forge_rollout.rows import SampleRow


class UpdateResult(BaseModel):
    """What one PPO update did: finite metrics, the update proof and the counts."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    step: int = Field(gt=0, description="Global step this update produced (1-based).")
    metrics: dict[str, float] = Field(description="Every metric of the update (all finite).")
    record: UpdateRecord = Field(description="Proof that actor AND critic changed (for saves).")
    rows: int = Field(gt=0, description="Rows trained on.")
    dropped_rows: dict[str, int] = Field(description="Rows dropped before training, per reason.")
    episodes: int = Field(ge=0, description="Episodes the rows came from.")
    action_tokens: int = Field(gt=0, description="Action tokens trained on.")
    tokens: int = Field(gt=0, description="Real tokens (prompt + response) in the batch.")
    actor_optimizer_steps: int = Field(gt=0, description="Actor optimizer steps.")
    critic_optimizer_steps: int = Field(gt=0, description="Critic optimizer steps.")


class TokenBudgets(BaseModel):
    """The token budgets (padded tokens per micro-batch) a trainer uses, per pass; the
    budget gates read them back from the built trainer, never from the spec."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    actor_train: int = Field(gt=0, description="Actor forward+backward micro-batches.")
    actor_infer: int = Field(gt=0, description="Actor no-grad passes (old / reference log-probs).")
    critic_train: int = Field(gt=0, description="Critic forward+backward micro-batches.")
    critic_infer: int = Field(gt=0, description="Critic no-grad value pass.")

    @classmethod
    def from_spec(cls, spec: RunSpec) -> TokenBudgets:
        """Each budget set explicitly from its own spec field (never one for another: verl
        #7462 gave both critic budgets the inference value)."""
        ctx = spec.context
        return cls(
            actor_train=ctx.actor_train_tokens,
            actor_infer=ctx.actor_train_tokens,
            critic_train=ctx.critic_train_tokens,
            critic_infer=ctx.critic_infer_tokens,
        )


# verl's FSDP mixed precision when none is given (`workers/engine/fsdp/transformer_impl.py:
# 397-399`): what a GPU run got before the knobs existed; CPU ranks compute in fp32 (bf16
# matmuls are slow and lossy on CPU, and the local trainer computes in fp32)
VERL_GPU_MIXED_PRECISION = MixedPrecisionSpec(
    param_dtype="bf16", reduce_dtype="fp32", buffer_dtype="fp32"
)
CPU_MIXED_PRECISION = MixedPrecisionSpec(
    param_dtype="fp32", reduce_dtype="fp32", buffer_dtype="fp32"
)


class ModelSettings(BaseModel):
    """How one trained model is held and computed, as its engine runs it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    param_offload: bool = Field(description="Parameters and gradients offloaded to the CPU.")
    optimizer_offload: bool = Field(description="Optimizer states offloaded to the CPU.")
    gradient_checkpointing: bool = Field(description="Activation checkpointing on.")
    fused_kernels: bool = Field(description="Log-probs without full-size logits (actor).")
    dtype: str = Field(description="Dtype of the parameters (master weights).")
    param_dtype: str = Field(description="Dtype the forward/backward computes in.")
    reduce_dtype: str = Field(description="Dtype gradients are reduced in.")
    buffer_dtype: str | None = Field(
        description="Dtype of the floating-point buffers (verl); None where buffers are no "
        "setting (the local trainer: Hugging Face keeps its rotary frequencies in fp32)."
    )


class TrainerSettings(BaseModel):
    """The memory and precision settings of both models and the entropy term of the actor loss:
    `from_spec` resolves what a spec asks of its backend; a trainer's `settings` are read back
    from what it built (`PPO_TRAINER_SETTINGS_GATE_PASSED` compares the two)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    actor: ModelSettings = Field(description="The actor (LoRA policy).")
    critic: ModelSettings = Field(description="The critic (value model).")
    entropy_coeff: float = Field(description="Entropy coefficient of the actor loss (0 = off).")

    @classmethod
    def from_spec(cls, spec: RunSpec) -> TrainerSettings:
        """What `spec` asks for, resolved for its trainer: unset fused kernels and mixed
        precision take the backend's default (verl: fused on CPU ranks, verl's mixed precision
        on GPUs); the local trainer computes every part in the model's dtype. FSDP2 casts no
        buffer, so the buffers stay in the master dtype unless the spec names another."""
        verl, cpu = spec.backends.trainer == "verl", spec.resources.trainer_gpus == 0

        def model(knobs: TrainedModelSpec, fused: bool) -> ModelSettings:
            buffers: str | None = knobs.dtype
            if not verl:  # one process: the model's own dtype throughout, nothing offloaded
                d, buffers = knobs.dtype, None
                mp = MixedPrecisionSpec(param_dtype=d, reduce_dtype=d, buffer_dtype=d)
            elif knobs.mixed_precision is not None:
                mp = knobs.mixed_precision
                buffers = mp.buffer_dtype
            else:
                mp = CPU_MIXED_PRECISION if cpu else VERL_GPU_MIXED_PRECISION
            return ModelSettings(
                param_offload=knobs.param_offload,
                optimizer_offload=knobs.optimizer_offload,
                gradient_checkpointing=knobs.gradient_checkpointing,
                fused_kernels=fused,
                dtype=knobs.dtype,
                param_dtype=mp.param_dtype,
                reduce_dtype=mp.reduce_dtype,
                buffer_dtype=buffers,
            )

        chosen = spec.actor.fused_kernels
        fused = (verl and cpu) if chosen is None else chosen
        return cls(
            actor=model(spec.actor, fused),
            critic=model(spec.critic, False),  # no LM head: nothing to fuse
            entropy_coeff=spec.ppo.entropy_coeff if spec.ppo is not None else 0.0,
        )

    def fields(self) -> dict[str, Any]:
        """Flat `actor.param_offload`-style keys (the gate's ledger fields)."""
        out: dict[str, Any] = {"entropy_coeff": self.entropy_coeff}
        for role in ("actor", "critic"):
            for key, value in getattr(self, role).model_dump().items():
                out[f"{role}.{key}"] = value
        return out


class Trainer(Protocol):
    """A PPO trainer of a LoRA actor and a critic, behind which the engine may be one process
    (`forge_ppo.local`) or verl worker groups on Ray (`forge_ppo.verl`)."""

    @property
    def budgets(self) -> TokenBudgets:
        """The budgets as built (read back from the engine, for the budget gates)."""
        ...

    @property
    def settings(self) -> TrainerSettings:
        """Offload, checkpointing, fused kernels, dtypes and the entropy coefficient as built
        (read back from the engine, for PPO_TRAINER_SETTINGS_GATE_PASSED)."""
        ...

    @property
    def parent(self) -> ParentCheckpoint | None:
        """The checkpoint this run warm-started from (None: fresh adapter, new value head)."""
        ...

    def update(
        self, rows: Sequence[SampleRow], step: int, *, episodes: Sequence[EpisodeOutcome] | None
    ) -> UpdateResult:
        """One PPO update (old log-probs, values, GAE, critic and actor updates); fails closed.
        Its metrics carry, per budget, the largest micro-batch the engine formed:
        `perf/peak_padded_tokens/<budget>` (tokens as computed: sequences x the longest when
        padded), which the update gate holds to the budget."""
        ...

    def export_adapter(self, folder: Path) -> None:
        """Write the actor's current PEFT adapter for the inference server (files replaced
        atomically, vLLM's LoRA rules checked)."""
        ...

    def save(self, root: Path, *, step: int, record: UpdateRecord, run_dir: Path) -> Path:
        """A checkpoint `root/global_step_<step>` in Forge's layout; returns its folder."""
        ...

    def close(self) -> None:
        """Release the engine (processes, Ray workers); idempotent."""
        ...
