"""Per-GPU peaks of the three GPU roles (actor update, critic update, vLLM inference), each
with its named parts, the exact checks (`refused`) and the verdict.

The trainer roles share their GPUs (verl's one colocated resource pool; the local trainer's
one process): a role's peak is its own update plus whatever else stays on those GPUs then (the
other model's states unless offloaded, a colocated vLLM's reservation). A trainer role's peak is
the larger of its backward (states, gradients, one micro-batch's activations, logits and, in
fp32, attention matrices) and its optimizer step (states, gradients and AdamW's
parameter-sized temporary): the part `optimizer_step` is the step's excess where it is larger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import RunSpec
from forge_ppo.estimate._formulas import (
    DTYPE_BYTES,
    GIB,
    LOCAL_WORKSPACE_GIB,
    TRAINER_RUNTIME_GIB,
    VLLM_RUNTIME_GIB,
    LoRAShape,
    activation_bytes,
    attention_matrix_bytes,
    fsdp_buffer_bytes,
    kv_bytes_per_token,
    logits_bytes,
    state_bytes,
    vllm_kv_capacity,
)
from forge_ppo.estimate._knobs import Knobs, RoleKnobs
from forge_ppo.estimate._shape import ModelShape, ParamCounts, param_counts

Verdict = Literal["fits", "at_risk", "oom", "refused"]
Role = Literal["actor", "critic", "inference"]
# fits = peak <= 0.85 x GPU memory: the caching allocator's reserved-but-unused blocks (the
# seed saw 2.47 GiB at an OOM), transient buffers no formula names (NCCL, grad-norm
# temporaries, the old-log-prob pass) and this estimate's own error need the other 15%
FITS_FRACTION = 0.85


class RoleEstimate(BaseModel):
    """One GPU role's per-GPU peak, its parts (GB), verdict and the reasons for it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role = Field(description="actor | critic | inference.")
    gpus: int = Field(ge=0, description="GPUs this role runs on.")
    peak_gb: float = Field(description="Per-GPU peak, GB (GiB, 2^30 bytes).")
    parts: dict[str, float] = Field(description="Named parts of the peak, GB.")
    verdict: Verdict = Field(description="fits | at_risk | oom | refused.")
    reasons: list[str] = Field(description="Why this verdict, and what was assumed.")


@dataclass(frozen=True)
class Topology:
    """Where the roles run, read from the spec."""

    trainer: str  # "local" | "verl"
    shards: int  # FSDP2 shards of the trainer roles (1 for the local trainer)
    trainer_gpus: int
    vllm: bool
    colocated: bool  # vLLM shares the trainer GPUs (no separate rollout GPU)
    inference_gpus: int
    notes: tuple[str, ...]


def topology(spec: RunSpec) -> Topology:
    res = spec.resources
    verl = spec.backends.trainer == "verl"
    notes = []
    if verl and res.trainer_gpus == 0:
        notes.append(
            f"resources.trainer_gpus = 0: priced as {res.trainer_world_size} GPU rank(s) "
            "(the CPU ranks of resources.trainer_cpu_ranks)"
        )
    if not verl and res.trainer_gpus != 1:
        notes.append(
            f"the local trainer is one process: priced on one GPU (resources.trainer_gpus = "
            f"{res.trainer_gpus})"
        )
    vllm = spec.backends.inference == "vllm"
    colocated = vllm and res.rollout_gpus == 0
    return Topology(
        trainer=spec.backends.trainer,
        shards=res.trainer_world_size if verl else 1,
        trainer_gpus=res.trainer_world_size if verl else 1,
        vllm=vllm,
        colocated=colocated,
        inference_gpus=res.rollout_gpus if res.rollout_gpus > 0 else res.rollout_replicas,
        notes=tuple(notes),
    )


def longest_sequence(spec: RunSpec) -> int:
    """The longest sequence a run can produce: prompt + response = the window."""
    return max(spec.model.max_model_len, spec.context.window)


def judge(peak_gb: float, gpu_gb: float) -> tuple[Verdict, str]:
    """The memory verdict of a peak on a GPU of `gpu_gb`."""
    limit = FITS_FRACTION * gpu_gb
    if peak_gb > gpu_gb:
        return "oom", f"peak {peak_gb:.2f} GB > the GPU's {gpu_gb:.2f} GB"
    if peak_gb > limit:
        return "at_risk", (
            f"peak {peak_gb:.2f} GB fits the GPU's {gpu_gb:.2f} GB but not {FITS_FRACTION} x = "
            f"{limit:.2f} GB (the margin for allocator fragmentation, unnamed transient buffers "
            "and this estimate's error)"
        )
    return "fits", f"peak {peak_gb:.2f} GB <= {FITS_FRACTION} x {gpu_gb:.2f} GB = {limit:.2f} GB"


def _budget_refusals(spec: RunSpec, role: Role) -> list[str]:
    names = (
        ["actor_train_tokens"]
        if role == "actor"
        else ["critic_train_tokens", "critic_infer_tokens"]
    )
    longest = longest_sequence(spec)
    out = []
    for name in names:
        budget = getattr(spec.context, name)
        if budget < longest:
            out.append(
                f"refused: context.{name} = {budget} < the longest sequence, {longest} tokens "
                "(prompt + response window, model.max_model_len): such a sequence fits no "
                "micro-batch (verl asserts max_token_len >= max_seq_len; the seed's runbook "
                f"items 14 and 18); fix: set context.{name} >= {longest} or lower the window"
            )
    return out


def _other_resident(
    topo: Topology, other: RoleKnobs, params: int, trainable: int, name: str
) -> tuple[int, str]:
    """Bytes the other trained model keeps on these GPUs during this role's update."""
    p, g, o = state_bytes(
        params, trainable, master_bytes=DTYPE_BYTES[other.dtype], shards=topo.shards
    )
    if topo.trainer == "local":
        return p + o, f"{name} parameters and AdamW moments stay on the GPU (one process)"
    kept = (0 if other.param_offload else p + g) + (0 if other.optimizer_offload else o)
    where = []
    where.append("parameters offloaded" if other.param_offload else "parameters + gradients kept")
    where.append("AdamW moments offloaded" if other.optimizer_offload else "AdamW moments kept")
    return kept, f"{name} during this update: {', '.join(where)} ({name}.*_offload)"


def _own_params(role: Role, counts: ParamCounts) -> tuple[int, int]:
    """(stored, trainable) parameters: the actor is the LM + its LoRA adapter (only the adapter
    trains: spec.lora); the critic is the backbone + value head, fully fine-tuned."""
    if role == "actor":
        return counts.total + counts.lora, counts.lora
    return counts.backbone, counts.backbone


def compute_bytes(spec: RunSpec, role: str, knobs: RoleKnobs, trainer: str) -> int:
    """Bytes of the dtype a trained model computes in: verl casts parameters to its FSDP
    mixed-precision param_dtype (the spec's `<role>.mixed_precision`, bf16 by default on GPUs);
    the local trainer computes in the model's dtype (`<role>.dtype`)."""
    if trainer != "verl":
        return DTYPE_BYTES[knobs.dtype]
    precision = getattr(getattr(spec, role, None), "mixed_precision", None)
    return DTYPE_BYTES[precision.param_dtype] if precision is not None else 2


def actor_lora(spec: RunSpec, trainer: str, compute: int) -> LoRAShape:
    """The actor's adapters and their compute dtype: verl's FSDP2 casts them like every
    parameter, and the local trainer's actor makes them in the base model's dtype (policy
    `Actor.from_model`), so both compute in `compute`."""
    del trainer  # both trainers alike since the adapters take the base model's dtype
    return LoRAShape(spec.lora.rank, spec.lora.target_modules, compute)


def _local_ignored(mine: RoleKnobs, role: Role) -> list[str]:
    asked = [f for f in ("param_offload", "optimizer_offload") if getattr(mine, f)]
    if role == "actor" and getattr(mine, "fused_kernels", False):
        asked.append("fused_kernels")
    return [f"the local trainer has no {role}.{f}: priced without it" for f in asked]


def trainer_role(
    role: Role, spec: RunSpec, shape: ModelShape, knobs: Knobs, gpu_gb: float
) -> RoleEstimate:
    """The actor or critic update's per-GPU peak (see the module docstring)."""
    assert spec.ppo is not None and role != "inference", "a training spec and a trainer role"
    topo = topology(spec)
    verl = topo.trainer == "verl"
    mine: RoleKnobs = knobs.actor if role == "actor" else knobs.critic
    other = knobs.critic if role == "actor" else knobs.actor
    counts = param_counts(shape, lora_rank=spec.lora.rank, lora_targets=spec.lora.target_modules)
    compute = compute_bytes(spec, role, mine, topo.trainer)
    reasons = list(topo.notes) + ([] if verl else _local_ignored(mine, role))
    # 1. this model's states (FSDP2-sharded; reloaded for its own update even when offloaded)
    stored, trainable = _own_params(role, counts)
    p, g, o = state_bytes(
        stored, trainable, master_bytes=DTYPE_BYTES[mine.dtype], shards=topo.shards
    )
    parts = {"parameters": p, "gradients": g, "optimizer_states": o}
    if verl:
        parts["fsdp_buffers"] = fsdp_buffer_bytes(
            counts,
            shape,
            lm_head=role == "actor",
            full_grads=role == "critic",
            compute_bytes=compute,
        )
    # 2. what else stays on these GPUs: the other model, a colocated vLLM
    other_params, other_trainable = _own_params("critic" if role == "actor" else "actor", counts)
    name = "critic" if role == "actor" else "actor"
    parts["colocated_model"], note = _other_resident(
        topo, other, other_params, other_trainable, name
    )
    reasons.append(note)
    if topo.colocated:
        util = spec.inference.gpu_memory_utilization
        parts["colocated_inference"] = int(util * gpu_gb * GIB)
        reasons.append(
            f"vLLM shares these GPUs (resources.rollout_gpus = 0) and holds its {util} x "
            f"{gpu_gb:.2f} GB reservation through the update"
        )
    # 3. one micro-batch filled to its token budget
    tokens = (
        spec.context.actor_train_tokens if role == "actor" else spec.context.critic_train_tokens
    )
    checkpointing = mine.gradient_checkpointing
    parts["activations"] = activation_bytes(
        shape,
        tokens,
        compute_bytes=compute,
        lora=actor_lora(spec, topo.trainer, compute) if role == "actor" else None,
        checkpointing=checkpointing,
    )
    if role == "actor":
        entropy = spec.ppo.entropy_coeff > 0
        fused = knobs.actor.fused_kernels and verl
        parts["logits"] = logits_bytes(
            shape, tokens, trainer=topo.trainer, fused=fused, entropy=entropy, compute_bytes=compute
        )
        reasons.append(
            f"{tokens} tokens per micro-batch; entropy {'in' if entropy else 'not in'} the loss "
            f"(ppo.entropy_coeff = {spec.ppo.entropy_coeff}); "
            f"{'fused' if fused else 'full-size'} logits"
        )
    else:
        reasons.append(f"{tokens} tokens per micro-batch")
    attention = attention_matrix_bytes(
        shape, tokens, longest_sequence(spec), compute_bytes=compute, checkpointing=checkpointing
    )
    if attention:
        parts["attention_scores"] = attention
        reasons.append(
            "fp32 compute: PyTorch's attention runs its math path for grouped-query attention "
            "and keeps each layer's attention probabilities (quadratic in a row's length)"
        )
    # 4. the optimizer step: states, gradients and AdamW's parameter-sized temporary (the
    #    foreach sqrt of its second moments) where that outgrows the backward's working set
    backward = sum(parts.get(k, 0) for k in ("activations", "logits", "fsdp_buffers"))
    step = trainable * DTYPE_BYTES[mine.dtype] // topo.shards
    if step > backward + attention:
        parts["optimizer_step"] = step - backward - attention
        reasons.append(
            "the optimizer step outgrows the backward: AdamW's parameter-sized temporary "
            f"({step / GIB:.2f} GB) beside the gradients"
        )
    if not verl:
        parts["workspaces"] = int(LOCAL_WORKSPACE_GIB * GIB)
    parts["runtime"] = int(TRAINER_RUNTIME_GIB[topo.trainer] * GIB)
    return _finish(role, topo.trainer_gpus, parts, gpu_gb, _budget_refusals(spec, role), reasons)


def _finish(
    role: Role,
    gpus: int,
    parts: dict[str, int],
    gpu_gb: float,
    refusals: list[str],
    notes: list[str],
) -> RoleEstimate:
    peak_gb = round(sum(parts.values()) / GIB, 3)  # judged as shown
    verdict, why = judge(peak_gb, gpu_gb)
    return RoleEstimate(
        role=role,
        gpus=gpus,
        peak_gb=peak_gb,
        parts={k: round(v / GIB, 3) for k, v in parts.items()},
        verdict="refused" if refusals else verdict,
        reasons=[*refusals, why, *notes],
    )


def inference_role(spec: RunSpec, shape: ModelShape, gpu_gb: float) -> RoleEstimate:
    """vLLM: bf16 weights (+ one LoRA slot) + the KV cache it sizes to its reservation."""
    topo = topology(spec)
    counts = param_counts(shape, lora_rank=spec.lora.rank, lora_targets=spec.lora.target_modules)
    served = spec.inference.dtype if spec.inference.dtype != "auto" else shape.torch_dtype
    weight_bytes = DTYPE_BYTES.get(str(served), 2)
    weights = (counts.total + counts.lora) * weight_bytes
    runtime = int(VLLM_RUNTIME_GIB * GIB)
    util = spec.inference.gpu_memory_utilization
    capacity = vllm_kv_capacity(int(gpu_gb * GIB), util, weights, runtime)
    kv = max(capacity, 0)
    window = longest_sequence(spec)
    per_sequence = window * kv_bytes_per_token(shape, kv_bytes=weight_bytes)
    sequences = kv / per_sequence
    reasons = [
        f"vLLM reserves gpu_memory_utilization x GPU memory = {util} x {gpu_gb:.2f} GB itself and "
        "sizes its KV cache to it: the 0.85 margin of the trainer roles does not apply"
    ]
    refusals = []
    if sequences < 1:
        needed = (weights + runtime + per_sequence) / (gpu_gb * GIB)
        refusals.append(
            f"refused: the KV cache gets {capacity / GIB:.2f} GB ({util} x {gpu_gb:.2f} GB - "
            f"weights {weights / GIB:.2f} GB - runtime {runtime / GIB:.2f} GB), less than one "
            f"sequence of the window ({window} tokens = {per_sequence / GIB:.2f} GB): vLLM "
            "refuses to start (the seed's item 16: 7.26 GiB < 9.0 GiB at 0.30); fix: set "
            f"inference.gpu_memory_utilization >= {needed:.3f} or lower the window"
        )
    else:
        queue = " (vLLM queues the rest)" if sequences < spec.resources.max_num_seqs else ""
        reasons.append(
            f"KV cache {kv / GIB:.2f} GB holds {sequences:.2f} sequences of the {window}-token "
            f"window; max_num_seqs = {spec.resources.max_num_seqs}{queue}"
        )
    parts = {"weights": weights, "kv_cache": kv, "runtime": runtime}
    peak_gb = sum(parts.values()) / GIB
    verdict: Verdict = "refused" if refusals else ("oom" if peak_gb > gpu_gb else "fits")
    return RoleEstimate(
        role="inference",
        gpus=topo.inference_gpus,
        peak_gb=round(peak_gb, 3),
        parts={k: round(v / GIB, 3) for k, v in parts.items()},
        verdict=verdict,
        reasons=[*refusals, *reasons],
    )
