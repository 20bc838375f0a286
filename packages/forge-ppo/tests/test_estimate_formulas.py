"""The memory estimate's formulas on a toy shape small enough to add up by hand (each expected
byte count is derived in the comment beside it): FSDP2 state and buffers, one layer's
activations for full fine-tuning and LoRA (adapter dtype equal to the compute dtype or not),
checkpointing, the LM head's logits fused and unfused, the KV cache and vLLM's KV capacity."""

from __future__ import annotations

import pytest

from forge_ppo.estimate._formulas import (
    LoRAShape,
    activation_bytes,
    attention_matrix_bytes,
    fsdp_buffer_bytes,
    kv_bytes_per_token,
    layer_activation_bytes,
    logits_bytes,
    state_bytes,
    vllm_kv_capacity,
)
from forge_ppo.estimate._shape import ModelShape, ParamCounts

# h 8, L 3, i 20, n 4 heads, kv 2 heads, d 3: q = n d = 12, k = v = kv d = 6; V 50
TOY = ModelShape(
    name="toy",
    hidden_size=8,
    num_hidden_layers=3,
    intermediate_size=20,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=3,
    vocab_size=50,
    tie_word_embeddings=False,
)
NO_QK_NORM = TOY.model_copy(update={"qk_norm": False})
LORA = LoRAShape(rank=4, targets=("q_proj", "v_proj", "down_proj"), dtype_bytes=2)


def test_fsdp_state_is_floored_per_shard() -> None:
    # fp32 master: params 1000 x 4 // 3 = 1333; grads 11 x 4 // 3 = 14; moments 88 // 3 = 29
    assert state_bytes(1000, 11, master_bytes=4, shards=3) == (1333, 14, 29)
    assert state_bytes(1000, 11, master_bytes=2, shards=1) == (2000, 22, 44)


def _counts(embedding: int = 300, lm_head: int = 500, layer: int = 1000) -> ParamCounts:
    return ParamCounts(
        embedding=embedding, lm_head=lm_head, layer=layer, total=0, backbone=0, lora_layer=0, lora=0
    )


@pytest.mark.parametrize(
    ("tied", "lm_head", "full_grads", "expected"),
    [
        (False, True, False, (2 * 1000 + 500) * 2),  # two layers + the untied head, bf16
        (False, False, False, 2 * 1000 * 2),  # the critic: no head at the root
        (True, True, False, (2 * 1000 + 300) * 2),  # tied: the shared embedding is the root
        (True, False, False, (2 * 1000 + 300) * 2),
        (False, True, True, (2 * 1000 + 500) * 2 + 1000 * (2 + 4)),  # + a layer's bf16 + fp32 grad
    ],
)
def test_fsdp_buffers_gather_two_layers_and_the_root(tied, lm_head, full_grads, expected) -> None:
    shape = TOY.model_copy(update={"tie_word_embeddings": tied})
    got = fsdp_buffer_bytes(
        _counts(), shape, lm_head=lm_head, full_grads=full_grads, compute_bytes=2
    )
    assert got == expected


# one layer, bf16 (b = 2), q/k norms: norm dims 2h + q + k = 16 + 18 = 34, their heads 4 + 2
#   norms' fp32 inputs and rstd        4 x 34 + 4 x (2 + 6)   = 168
#   attention q, k, v, out + lse        2 x (24 + 12) + 4 x 4  =  88
#   SwiGLU gate, silu, up              2 x 3 x 20             = 120
BASE = 168 + 88 + 120


@pytest.mark.parametrize(
    ("lora", "compute_bytes", "expected"),
    [
        # full: trainable norms keep 2 x 34 = 68; projection inputs 2 x (8 + 8 + 20) = 72
        (None, 2, BASE + 68 + 72),
        # LoRA in bf16 on q, v, down: A outputs 2 x 4 x 3 = 24; shared inputs attn_in (8) and
        # mlp_mid (20) once each: 2 x 28 = 56
        (LORA, 2, BASE + 24 + 56),
        # LoRA in fp32 on a bf16 model: A outputs 4 x 4 x 3 = 48; each adapted input copied in
        # fp32: 4 x (8 + 8 + 20) = 144
        (LORA._replace(dtype_bytes=4), 2, BASE + 48 + 144),
        # o_proj reads attention's output, already kept: its A output only (2 x 4)
        (LORA._replace(targets=("o_proj",)), 2, BASE + 8),
        # gate and up share one input: 2 x 4 x 2 + 2 x 8; an unknown target is ignored
        (LORA._replace(targets=("gate_proj", "up_proj", "lm_head")), 2, BASE + 16 + 16),
        (LORA._replace(targets=()), 2, BASE),
    ],
)
def test_one_layers_activations_by_hand(lora, compute_bytes, expected) -> None:
    assert layer_activation_bytes(TOY, compute_bytes=compute_bytes, lora=lora) == expected


def test_one_layers_activations_without_qk_norms_and_in_fp32() -> None:
    # norms: 4 x 16 + 4 x 2 = 72; trainable 2 x 16 = 32; attention 88; SwiGLU 120; inputs 72
    assert layer_activation_bytes(NO_QK_NORM, compute_bytes=2, lora=None) == 72 + 32 + 88 + 120 + 72
    # fp32 compute: norms 168 + trainable 4 x 34 = 136; attention 4 x 36 + 16 = 160;
    # SwiGLU 4 x 60 = 240; inputs 4 x 36 = 144
    assert layer_activation_bytes(TOY, compute_bytes=4, lora=None) == 168 + 136 + 160 + 240 + 144


# per token, bf16: working set 2 x (2 x 20 + 2 x 8) = 112; final norm 4 x 8 + 4 + 2 x 8 and the
# rotary cos/sin 2 x 2 x 3: 64; full fine-tuning adds the norm's trainable copy 2 x 8 and the
# int64 ids 8: 24
@pytest.mark.parametrize(
    ("lora", "checkpointing", "per_token"),
    [
        (None, False, 3 * 516 + 112 + 64 + 24),
        (None, True, 3 * 2 * 8 + 516 + 112 + 64 + 24),  # each layer's input + one recomputed
        (LORA, False, 3 * 456 + 112 + 64),
        (LORA, True, 3 * 2 * 8 + 456 + 112 + 64),
    ],
)
def test_activations_of_a_micro_batch(lora, checkpointing, per_token) -> None:
    got = activation_bytes(TOY, 10, compute_bytes=2, lora=lora, checkpointing=checkpointing)
    assert got == 10 * per_token


@pytest.mark.parametrize(
    ("tokens", "trainer", "fused", "entropy", "expected"),
    [
        (10, "verl", False, False, 10 * 50 * 6),
        (10, "verl", False, True, 10 * 50 * 8),
        (10, "local", False, False, 10 * 50 * 12),
        (10, "local", False, True, 10 * 50 * 28),  # measured on CUDA (H200)
        (10, "other", False, False, 10 * 50 * 12),  # anything but verl: the local trainer's
        # fused: one chunk of min(T, 512) x V x 16 + the hidden states and their grad 2 b h
        (10, "verl", True, False, 10 * 50 * 16 + 10 * 2 * 2 * 8),
        (512, "verl", True, True, 512 * 50 * 16 + 512 * 32),
        (600, "local", True, False, 512 * 50 * 16 + 600 * 32),
    ],
)
def test_logits_at_the_update_peak(tokens, trainer, fused, entropy, expected) -> None:
    got = logits_bytes(TOY, tokens, trainer=trainer, fused=fused, entropy=entropy, compute_bytes=2)
    assert got == expected


def test_the_kv_cache_per_token_and_vllms_share_of_the_gpu() -> None:
    assert kv_bytes_per_token(TOY) == 2 * 3 * 2 * 3 * 2  # K and V x L x kv heads x d x bf16
    assert kv_bytes_per_token(TOY, kv_bytes=1) == 36
    # int(0.9 x 1000) - 300 - 50; the reservation is truncated, then the rest subtracted
    assert vllm_kv_capacity(1000, 0.9, 300, 50) == 550
    assert vllm_kv_capacity(1001, 0.85, 300, 50) == 850 - 350  # int(850.85) = 850
    assert vllm_kv_capacity(1000, 0.5, 600, 100) == -200  # the weights do not fit


@pytest.mark.parametrize(
    ("tokens", "longest", "compute", "checkpointing", "expected"),
    [
        (10, 4, 2, False, 0),  # bf16: flash-attention keeps no matrix
        # fp32: rows of <= 4 tokens filling 10: 10 x 4 query-key pairs; (n + 1) planes of
        # 4 B per layer (3 layers), plus one layer's gradient (n planes)
        (10, 4, 4, False, 3 * 5 * 4 * 40 + 4 * 4 * 40),
        (10, 4, 4, True, 1 * 5 * 4 * 40 + 4 * 4 * 40),  # one layer recomputed at a time
        (10, 64, 4, False, 3 * 5 * 4 * 100 + 4 * 4 * 100),  # a row no longer than the batch
    ],
)
def test_attention_matrices_in_fp32(tokens, longest, compute, checkpointing, expected) -> None:
    got = attention_matrix_bytes(
        TOY, tokens, longest, compute_bytes=compute, checkpointing=checkpointing
    )
    assert got == expected
