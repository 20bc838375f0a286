"""Every assumption an estimate rests on, with its value for this spec and shape and its source."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import RunSpec
from forge_ppo.estimate._formulas import (
    FSDP_PREFETCH_LAYERS,
    FUSED_CHUNK_TOKENS,
    LOCAL_LOGITS_BYTES,
    TRAINER_RUNTIME_GIB,
    VERL_LOGITS_BYTES,
    VLLM_RUNTIME_GIB,
    kv_bytes_per_token,
    layer_activation_bytes,
)
from forge_ppo.estimate._knobs import Knobs
from forge_ppo.estimate._roles import FITS_FRACTION, actor_lora, compute_bytes
from forge_ppo.estimate._shape import ModelShape, param_counts


class Assumption(BaseModel):
    """One input or modelling choice, its value here and where it comes from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="What is assumed.")
    value: str = Field(description="Its value for this estimate.")
    source: str = Field(description="Where the value comes from (code, paper, record).")


def _a(name: str, value: object, source: str) -> Assumption:
    return Assumption(name=name, value=str(value), source=source)


def _model_assumptions(spec: RunSpec, shape: ModelShape, knobs: Knobs) -> list[Assumption]:
    counts = param_counts(shape, lora_rank=spec.lora.rank, lora_targets=spec.lora.target_modules)
    trainer = spec.backends.trainer
    compute = {r: compute_bytes(spec, r, getattr(knobs, r), trainer) for r in ("actor", "critic")}
    actor_layer = layer_activation_bytes(
        shape, compute_bytes=compute["actor"], lora=actor_lora(spec, trainer, compute["actor"])
    )
    critic_layer = layer_activation_bytes(shape, compute_bytes=compute["critic"], lora=None)
    return [
        _a(
            "model_shape",
            f"{shape.name}: h={shape.hidden_size} L={shape.num_hidden_layers} "
            f"i={shape.intermediate_size} heads={shape.num_attention_heads}/"
            f"{shape.num_key_value_heads} d={shape.head_dim} V={shape.vocab_size} "
            f"tied={shape.tie_word_embeddings}; {counts.total / 1e9:.3f}B parameters, LoRA "
            f"{counts.lora / 1e6:.1f}M",
            "the model's config.json (no weights read)",
        ),
        _a(
            "activation_bytes_per_token_per_layer",
            f"actor {actor_layer}, critic {critic_layer} (compute bytes: actor "
            f"{compute['actor']}, critic {compute['critic']})",
            "Korthikanti et al. 2022 Sec. 4.1 redone for Hugging Face Qwen2/3 layers "
            "(transformers modeling_qwen3.py: fp32 RMSNorm inputs, GQA flash/SDPA attention, "
            "SwiGLU); formula in forge_ppo/estimate/_formulas.py",
        ),
        _a(
            "checkpointed_bytes_per_token",
            f"L x b x h = {shape.num_hidden_layers * 2 * shape.hidden_size} (each layer's "
            "input) + one layer recomputed",
            "torch.utils.checkpoint per decoder layer (HF gradient_checkpointing_enable)",
        ),
        _a(
            "kv_bytes_per_token",
            kv_bytes_per_token(shape),
            "2 x layers x kv heads x head_dim x 2 bytes (bf16 KV cache; PagedAttention)",
        ),
    ]


def assumptions(
    spec: RunSpec,
    shape: ModelShape,
    knobs: Knobs,
    knob_sources: dict[str, str],
    gpu_memory_gb: float,
    gpu_memory_source: str,
) -> list[Assumption]:
    """The assumptions of one estimate, each with its source."""
    entropy = spec.ppo is not None and spec.ppo.entropy_coeff > 0
    trainer = spec.backends.trainer
    table = VERL_LOGITS_BYTES if trainer == "verl" else LOCAL_LOGITS_BYTES
    out = [
        _a(
            "unit",
            "GB = GiB = 2^30 bytes",
            "what torch.cuda and nvidia-smi report; the seed's 80 GB A800 cards hold 80 GiB",
        ),
        _a("gpu_memory_gb", gpu_memory_gb, gpu_memory_source),
        _a(
            "fits_fraction",
            FITS_FRACTION,
            "headroom for the caching allocator's reserved-but-unused blocks (2.47 GiB at the "
            "seed's item-20 OOM), transient buffers no formula names (NCCL, grad-norm "
            "temporaries, the no-grad passes) and this estimate's error",
        ),
        _a(
            "micro_batch_tokens",
            "each role's token budget, filled (actor_train_tokens, critic_train_tokens)",
            "verl's dynamic batch size packs up to ppo_max_token_len_per_gpu; its balancer can "
            "overfill by 1.12-1.27x (FACTS.md), which the budget read-back gate must stop",
        ),
        *_model_assumptions(spec, shape, knobs),
        _a(
            "logits_bytes_per_token_x_vocab",
            f"{table[entropy]} ({trainer} trainer, entropy {'on' if entropy else 'off'}); fused "
            f"kernels: {FUSED_CHUNK_TOKENS}-token chunks",
            "forge_ppo/policy/_actor.py (local) and verl's prepare_model_outputs (verl); the "
            "verl count is bounded by the seed's record (tests/test_estimate_seed.py)",
        ),
        _a(
            "model_states",
            "master dtype x (parameters + trainable gradients + 2 AdamW moments) / FSDP2 shards",
            "Rajbhandari et al. 2020 (ZeRO) Sec. 3.1; torch.optim.AdamW keeps moments in the "
            "parameter dtype; verl's FSDP model_dtype",
        ),
        _a(
            "fsdp2_unsharded",
            f"{FSDP_PREFETCH_LAYERS} decoder layers + the root (LM head or tied embedding) in "
            "bf16; + one layer's gradients (bf16 + fp32) when fully fine-tuned",
            "PyTorch fully_shard: the root is not resharded after forward, one layer is "
            "prefetched; verl apply_fsdp2 wraps each decoder layer",
        ),
        _a(
            "offload",
            "a model's offloaded states are reloaded for its own update: offload frees the GPU "
            "for the other model (and vLLM), not its own peak",
            "verl fsdp_workers: load_fsdp_model_to_gpu / load_fsdp_optimizer before "
            "update_actor / update_critic (FACTS.md, memory at the seed's scale)",
        ),
        _a(
            "trainer_runtime_gb",
            TRAINER_RUNTIME_GIB[trainer],
            "CUDA context, cuBLAS workspaces, NCCL buffers: outside torch's allocator (the "
            "seed's cards show 79.2 of 80 GiB as used + free)",
        ),
        _a(
            "vllm_runtime_gb",
            VLLM_RUNTIME_GIB,
            "vLLM's profiled non-KV peak, calibrated on the seed's item 16: 0.30 x 80 GB - "
            "15.4 GB weights (+ a LoRA slot) - 1.3 GB = 7.3 GB KV (recorded 7.26 GiB)",
        ),
        _a(
            "not_priced",
            "padding: verl without remove-padding (forge_ppo/verl/_config.py sets "
            "use_remove_padding=false) pads a micro-batch to rows x longest and builds a T^2 "
            "attention mask per row, priced here as the seed's remove-padding path (real "
            "tokens); the no-grad log-prob/value passes (no activations kept); sequence "
            "parallelism",
            "the update dominates those passes; Forge runs no sequence parallelism",
        ),
    ]
    for key, source in knob_sources.items():
        role, field = key.split(".", 1)
        out.append(_a(key, getattr(getattr(knobs, role), field), source))
    entropy_value = spec.ppo.entropy_coeff if spec.ppo is not None else "no [ppo] table"
    out.append(_a("ppo.entropy_coeff", entropy_value, "run spec (0 removes entropy from the loss)"))
    return out
