"""The memory formulas: pure functions of a model's shape, in bytes (no I/O, no state).

Notation: h hidden, L layers, i intermediate, n query heads, kv key/value heads, d head dim,
V vocabulary, T tokens in one micro-batch, b = bytes of the compute dtype (2 in bf16), N the
FSDP2 shards (the role's GPUs). Sources are named on each function; `_assumptions` lists them
for the report.
"""

from __future__ import annotations

from typing import NamedTuple

from forge_ppo.estimate._shape import ModelShape, ParamCounts, projection_shapes

GIB = 2**30
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "float32": 4, "bfloat16": 2, "float16": 2}
FSDP_PREFETCH_LAYERS = 2  # the layer computing + the one FSDP2 prefetches
FUSED_CHUNK_TOKENS = 512  # verl FusedLinearForPPO's chunk_size default
FUSED_BYTES_PER_ENTRY = 16  # fp32 chunk logits, probabilities, their gradient, a temporary
# bytes per (token x vocabulary entry) live at the actor update's peak, unfused, by entropy in
# the loss (False/True); see `logits_bytes`
VERL_LOGITS_BYTES = {False: 6, True: 8}
LOCAL_LOGITS_BYTES = {False: 12, True: 28}  # True: measured on an H200 (see `logits_bytes`)
VLLM_RUNTIME_GIB = (
    1.3  # vLLM's profiled non-KV peak (activations, CUDA graphs, non-torch), seed item 16
)
# outside torch's allocator: CUDA context, cuBLAS workspaces (+ NCCL for verl); the local
# trainer's 0.753-0.755 GiB was read on an H200 (torch 2.11, CUDA 13.0; tools/gpu_acceptance.py)
TRAINER_RUNTIME_GIB = {"verl": 1.0, "local": 0.8}
# inside torch's allocator besides the states: cuBLAS / cuBLASLt workspaces (the caching
# allocator holds them) and the optimizer step's small temporaries; read on an H200 as 0.09 GiB
# before every update (three shapes) and up to 0.05 GiB more at the step (local trainer)
LOCAL_WORKSPACE_GIB = 0.25


def state_bytes(
    params: int, trainable: int, *, master_bytes: int, shards: int
) -> tuple[int, int, int]:
    """(parameters, gradients, AdamW moments) per GPU under FSDP2 full sharding over `shards`.

    Parameters are stored in the master dtype (fp32 under mixed precision: the fp32 master IS
    the stored parameter; bf16 compute copies are `fsdp_buffer_bytes`); gradients and both
    AdamW moments (exp_avg, exp_avg_sq) exist for the trainable parameters only (LoRA: the
    adapter) in the same dtype (torch.optim.AdamW keeps moments in the parameter's dtype;
    FSDP2 reduces gradients in fp32 under mixed precision). Rajbhandari et al. 2020 (ZeRO),
    Sec. 3.1: 2 + 2 + 12 bytes per parameter for mixed-precision Adam, here 4 + 4 + 8.
    """
    return (
        params * master_bytes // shards,
        trainable * master_bytes // shards,
        2 * trainable * master_bytes // shards,
    )


def fsdp_buffer_bytes(
    counts: ParamCounts, shape: ModelShape, *, lm_head: bool, full_grads: bool, compute_bytes: int
) -> int:
    """Unsharded compute copies FSDP2 all-gathers (bf16 under mixed precision): two decoder
    layers (the one computing and the prefetched next) and the root module, which FSDP2 keeps
    unsharded from forward to backward (PyTorch `fully_shard` docs: the root's
    reshard_after_forward is False): the LM head (untied) or the shared embedding (tied; verl's
    `apply_fsdp2` wraps an untied embedding separately). Full fine-tuning adds one layer's
    unsharded gradient in the compute dtype and its fp32 copy for the reduce-scatter."""
    root = 0
    if shape.tie_word_embeddings:
        root = counts.embedding
    elif lm_head:
        root = counts.lm_head
    gathered = (FSDP_PREFETCH_LAYERS * counts.layer + root) * compute_bytes
    if full_grads:
        gathered += counts.layer * (compute_bytes + 4)
    return gathered


class LoRAShape(NamedTuple):
    """A LoRA actor's adapters: rank, adapted projections, and the bytes of the dtype the
    adapters compute in (verl: bf16, FSDP2 casts them; PEFT on a bf16 model: fp32, its
    `autocast_adapter_dtype` default)."""

    rank: int
    targets: tuple[str, ...]
    dtype_bytes: int


# which tensor each projection reads: q/k/v share the normed hidden state, gate/up the second
# one; o_proj reads the attention output (attention keeps it anyway), down_proj the SwiGLU product
_INPUT_GROUP = {
    "q_proj": "attn_in",
    "k_proj": "attn_in",
    "v_proj": "attn_in",
    "o_proj": "attn_out",
    "gate_proj": "mlp_in",
    "up_proj": "mlp_in",
    "down_proj": "mlp_mid",
}


def _linear_inputs(shape: ModelShape, compute_bytes: int, lora: LoRAShape | None) -> int:
    """Bytes per token the projections keep as their inputs (for their weight gradients)."""
    projections = projection_shapes(shape)
    dims = {
        "attn_in": shape.hidden_size,
        "mlp_in": shape.hidden_size,
        "mlp_mid": shape.intermediate_size,
    }
    if lora is None:  # full fine-tuning: each shared input once; o_proj's is attention's output
        return compute_bytes * sum(dims.values())
    adapted = [t for t in lora.targets if t in projections]
    kept = lora.dtype_bytes * lora.rank * len(adapted)  # each adapter's A output
    if lora.dtype_bytes != compute_bytes:  # PEFT casts the input to the adapter's dtype: a copy
        return kept + lora.dtype_bytes * sum(projections[t][0] for t in adapted)
    groups = {_INPUT_GROUP[t] for t in adapted} - {"attn_out"}
    return kept + compute_bytes * sum(dims[g] for g in groups)


def layer_activation_bytes(shape: ModelShape, *, compute_bytes: int, lora: LoRAShape | None) -> int:
    """Bytes per token one decoder layer keeps for its backward (no checkpointing); `lora` None
    means full fine-tuning (trainable norms and projections), else a frozen base with adapters.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
    Sec. 4.1: 34h + 5as/h bytes for GPT) redone for Hugging Face's Qwen2/Qwen3 layer with a
    flash/SDPA attention kernel (no s^2 term) and no dropout:
      RMSNorm upcasts its input to fp32 and keeps it and its fp32 rstd per row:
        4 x (2h [+ n d + kv d with q/k norms]) + 4 x (2 [+ n + kv]);
      a trainable norm weight also keeps the normalised input: b x (norm dims);
      attention keeps q, k, v and its output: b x (2 n d + 2 kv d), plus the fp32 log-sum-exp 4n;
      SwiGLU keeps gate, silu(gate) and up: b x 3 i;
      the projections' inputs (`_linear_inputs`): full fine-tuning b x (2h + i) (the two normed
        states, the SwiGLU product; o_proj reads attention's output); a frozen projection keeps
        none; an adapted one its input (shared, or a copy in the adapter's dtype) and its A
        output (r).
    Checked against the tensors a real transformers Qwen3 layer saves (saved_tensors_hooks,
    tests/test_estimate.py).
    """
    q = shape.num_attention_heads * shape.head_dim
    kv = shape.num_key_value_heads * shape.head_dim
    heads = shape.num_attention_heads + shape.num_key_value_heads if shape.qk_norm else 0
    norm_dims = 2 * shape.hidden_size + (q + kv if shape.qk_norm else 0)
    keep = 4 * norm_dims + 4 * (2 + heads)
    if lora is None:
        keep += compute_bytes * norm_dims
    keep += compute_bytes * (2 * q + 2 * kv) + 4 * shape.num_attention_heads
    keep += compute_bytes * 3 * shape.intermediate_size
    return keep + _linear_inputs(shape, compute_bytes, lora)


def activation_bytes(
    shape: ModelShape,
    tokens: int,
    *,
    compute_bytes: int,
    lora: LoRAShape | None,
    checkpointing: bool,
) -> int:
    """Activation memory of one micro-batch of `tokens` at the backward's peak.

    Without checkpointing every layer keeps `layer_activation_bytes`; with it (HF
    `gradient_checkpointing_enable`, torch.utils.checkpoint per decoder layer) each layer keeps
    its input (b h) and one layer is recomputed at a time (+ one layer's worth). Both add the
    gradient working set of one layer's backward (the gate/up gradients and the incoming and
    outgoing hidden gradients: b (2 i + 2 h)), the final norm (fp32 input and rstd 4 h + 4, its
    output b h kept for the head; + b h when its weight trains), the rotary cos/sin the layers
    share (2 b d) and, when the embedding trains, its int64 token ids (8)."""
    h, layers = shape.hidden_size, shape.num_hidden_layers
    layer = layer_activation_bytes(shape, compute_bytes=compute_bytes, lora=lora)
    kept = layers * compute_bytes * h + layer if checkpointing else layers * layer
    working = compute_bytes * (2 * shape.intermediate_size + 2 * h)
    final = 4 * h + 4 + compute_bytes * h + 2 * compute_bytes * shape.head_dim
    if lora is None:
        final += compute_bytes * h + 8
    return tokens * (kept + working + final)


def attention_matrix_bytes(
    shape: ModelShape,
    tokens: int,
    longest: int,
    *,
    compute_bytes: int,
    checkpointing: bool,
) -> int:
    """The attention matrices an fp32 update keeps (0 in bf16 / fp16).

    PyTorch's scaled_dot_product_attention has no fused fp32 kernel for grouped-query
    attention (flash-attention takes fp16 / bf16 only; the memory-efficient kernel has no
    `enable_gqa`), so in fp32 it runs its math path, which keeps each layer's softmax
    probabilities for the backward: (query x key) planes per head. Rows of at most `longest`
    tokens filling `tokens`: their query-key pairs sum to at most tokens x min(longest, tokens).
    Priced as (n + 1) fp32 planes per layer (the heads' probabilities and the expanded mask),
    every layer (one with checkpointing), plus one layer's gradient of them in its backward.
    Measured on an H200 (fp32 Qwen3-0.6B and 1.7B, two rows per micro-batch, 2K and 8K tokens):
    1,941 B per query-key pair beyond the linear terms, (n + 1) x 4 x L = 1,904 B here; the
    bf16 runs of the same shapes show no such term (flash-attention)."""
    if compute_bytes < 4:
        return 0
    pairs = tokens * min(longest, tokens)
    heads = shape.num_attention_heads
    layers = 1 if checkpointing else shape.num_hidden_layers
    return layers * (heads + 1) * 4 * pairs + heads * 4 * pairs


def logits_bytes(
    shape: ModelShape,
    tokens: int,
    *,
    trainer: str,
    fused: bool,
    entropy: bool,
    compute_bytes: int,
) -> int:
    """The LM head's output and its backward for `tokens` positions at the actor update's peak.

    Unfused, (token x vocabulary) buffers dominate:
      local trainer (`Actor.forward`): fp32 logits -> log_softmax (kept, 4 B) -> gather; at the
        log_softmax backward its output, the scattered gradient and the input gradient coexist:
        12 B per entry. Entropy in the loss (`entropy_from_logits`) also keeps the fp32 logits
        and softmax (8 B) and adds their gradients: 24 B by that count (and on the CPU), but
        28 B measured on CUDA (H200, torch 2.11: 15.9 B per entry over the same update without
        entropy at 8K and 16K tokens, Qwen3-0.6B and 1.7B shapes; docs/gpu/*.json), where the
        backward of logsumexp and softmax holds full-size fp32 temporaries of its own.
      verl (remove-padding path, flash-attn cross entropy): the bf16 logits, a second full-size
        copy (verl 0.8's out-of-place temperature scaling; 0.9.1's unpadded concatenation) and
        their gradient: 6 B; with entropy the softmax probabilities kept for its backward: 8 B.
        The count is bounded by the seed's record (2.5 to 4.4 bf16 buffers at 40-48K tokens;
        `tests/test_estimate_seed.py`) and matches its failing requests, each one buffer of
        T x 151936 x 2 bytes (FACTS.md, memory at the seed's scale).
    Fused (verl `use_fused_kernels`): the head runs in 512-token chunks (fp32 logits,
    probabilities, gradient, a temporary: 16 B per chunk entry) plus the hidden states it keeps
    and their gradient (2 b h per token)."""
    if fused:
        chunk = min(tokens, FUSED_CHUNK_TOKENS) * shape.vocab_size * FUSED_BYTES_PER_ENTRY
        return chunk + tokens * 2 * compute_bytes * shape.hidden_size
    table = VERL_LOGITS_BYTES if trainer == "verl" else LOCAL_LOGITS_BYTES
    return tokens * shape.vocab_size * table[entropy]


def kv_bytes_per_token(shape: ModelShape, *, kv_bytes: int = 2) -> int:
    """vLLM's paged KV cache per token: 2 (K and V) x L x kv heads x d x dtype bytes
    (Kwon et al. 2023, PagedAttention; 147,456 B for Qwen3-8B in bf16, FACTS.md)."""
    return 2 * shape.num_hidden_layers * shape.num_key_value_heads * shape.head_dim * kv_bytes


def vllm_kv_capacity(
    gpu_bytes: int, utilization: float, weight_bytes: int, runtime_bytes: int
) -> int:
    """Bytes vLLM gives its KV cache: utilization x GPU memory - weights - runtime (vLLM's
    `determine_available_memory`: the reservation minus the profiled non-KV peak). Negative when
    the weights do not fit in the reservation."""
    return int(utilization * gpu_bytes) - weight_bytes - runtime_bytes
