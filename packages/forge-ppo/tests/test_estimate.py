"""forge_ppo.estimate: the parts against hand-computed numbers, monotonicity properties, the
exact (`refused`) checks, the command line's JSON shape and its errors."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_gates import load_spec
from forge_ppo import cli
from forge_ppo.estimate import (
    SHAPES,
    ModelConfigError,
    ModelShape,
    RoleEstimate,
    estimate,
    largest_budget_that_fits,
    load_model_shape,
    resolve_knobs,
    shape_from_config,
    with_budget,
)
from forge_ppo.estimate import cli as estimate_cli
from forge_ppo.estimate._estimate import role_estimates
from forge_ppo.estimate._formulas import (
    GIB,
    LoRAShape,
    activation_bytes,
    fsdp_buffer_bytes,
    kv_bytes_per_token,
    layer_activation_bytes,
    logits_bytes,
    state_bytes,
)
from forge_ppo.estimate._roles import FITS_FRACTION
from forge_ppo.estimate._shape import param_counts

TINY = ModelShape(
    name="tiny",
    hidden_size=8,
    num_hidden_layers=2,
    intermediate_size=16,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    vocab_size=32,
    tie_word_embeddings=False,
)
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
Q8B = load_model_shape("qwen3-8b")


# -- parts against hand-computed numbers (tiny: h=8 L=2 i=16 n=2 kv=1 d=4 V=32, untied) ---------


def test_parameter_counts_by_hand() -> None:
    c = param_counts(TINY, lora_rank=2, lora_targets=ALL)
    # q 8x8 + k 8x4 + v 8x4 + o 8x8 + 3 x 8x16 = 576; norms 2h = 16; q/k norms 2d = 8
    assert c.layer == 600
    assert (c.embedding, c.lm_head) == (256, 256)
    assert c.total == 256 + 2 * 600 + 8 + 256  # + final norm, + untied head
    assert c.backbone == 256 + 2 * 600 + 8 + 8 + 1  # no head; value head h + 1
    # LoRA r=2: q 2(8+8) + k 2(8+4) + v 2(8+4) + o 2(8+8) + gate/up/down 3 x 2(8+16) = 256
    assert (c.lora_layer, c.lora) == (256, 512)
    assert param_counts(TINY, lora_rank=2, lora_targets=("q_proj", "nope")).lora_layer == 32


def test_activation_parts_by_hand() -> None:
    # norms: fp32 inputs 4 x (2h + nd + kv d) = 112 and rstd 4 x (2 + n + kv) = 20; attention
    # keeps q, k, v, out 2 x (2 nd + 2 kv d) = 48 and lse 4n = 8; SwiGLU 2 x 3i = 96
    common = 112 + 20 + 48 + 8 + 96
    # full fine-tuning: normalised norm inputs 2 x 28 = 56, projection inputs 2 x (2h + i) = 64
    assert layer_activation_bytes(TINY, compute_bytes=2, lora=None) == common + 56 + 64 == 404
    # LoRA r=2 on all seven, adapters in bf16: shared inputs 2 x (2h + i) = 64, A outputs
    # 2 x 2 x 7 = 28
    bf16 = LoRAShape(2, ALL, 2)
    assert layer_activation_bytes(TINY, compute_bytes=2, lora=bf16) == common + 64 + 28 == 376
    # adapters in fp32 on a bf16 model (PEFT): each adapted projection keeps an fp32 copy of its
    # input, 4 x (6 x 8 + 16) = 256, A outputs 4 x 2 x 7 = 56
    fp32 = LoRAShape(2, ALL, 4)
    assert layer_activation_bytes(TINY, compute_bytes=2, lora=fp32) == common + 256 + 56 == 596
    # only q and v adapted (bf16): their shared input once, 2 x 8, A outputs 2 x 2 x 2
    qv = LoRAShape(2, ("q_proj", "v_proj"), 2)
    assert layer_activation_bytes(TINY, compute_bytes=2, lora=qv) == common + 16 + 8
    # backward working set 2 (2i + 2h) = 96; final norm 4h + 4, its output 2h, cos/sin 2 x 2d:
    # 68 (full fine-tuning also keeps the normalised output and the token ids: + 16 + 8)
    full = activation_bytes(TINY, 10, compute_bytes=2, lora=bf16, checkpointing=False)
    assert full == 10 * (2 * 376 + 96 + 68) == 9160
    ckpt = activation_bytes(TINY, 10, compute_bytes=2, lora=bf16, checkpointing=True)
    assert ckpt == 10 * (2 * 2 * 8 + 376 + 96 + 68) == 5720
    critic = activation_bytes(TINY, 10, compute_bytes=2, lora=None, checkpointing=False)
    assert critic == 10 * (2 * 404 + 96 + 68 + 16 + 8)


def _saved_bytes(model: Any, tokens: int) -> int:
    """Bytes of every tensor a forward keeps for backward that is not a parameter, once per
    storage (torch.autograd.graph.saved_tensors_hooks)."""
    import torch

    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=torch.randint(100, (1, tokens)), attention_mask=torch.ones(1, tokens))
    return sum(saved.values())


@pytest.mark.parametrize(
    ("case", "dtype_name"),
    [("full", "bf16"), ("lora", "bf16"), ("lora", "fp32"), ("full", "fp32")],
)
def test_activation_formula_is_what_a_real_qwen3_layer_saves(case: str, dtype_name: str) -> None:
    """Per decoder layer (the difference of a 3- and a 1-layer model), the bytes transformers'
    Qwen3 keeps for backward on the CPU's flash SDPA kernel equal the formula: a critic-like
    fully trained model, and the actor's decoder with PEFT LoRA r=4 on the seven projections
    (PEFT keeps a bf16 model's adapters in fp32)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    from forge_gates import LoRASpec
    from forge_ppo import Actor

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    fields = {
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 100,
        "tie_word_embeddings": False,
    }
    shape = shape_from_config({"model_type": "qwen3", "num_hidden_layers": 1, **fields}, source="t")

    def saved(layers: int) -> int:
        torch.manual_seed(0)
        config = AutoConfig.for_model("qwen3", num_hidden_layers=layers, **fields)
        if case == "full":
            return _saved_bytes(AutoModel.from_config(config).to(dtype), 256)
        lm = AutoModelForCausalLM.from_config(config).to(dtype)
        actor = Actor.from_model(lm, LoRASpec(rank=4, alpha=8), base_model="tiny")
        base: Any = actor.model.get_base_model()  # peft types it as a Module or Tensor
        return _saved_bytes(base.get_decoder(), 256)

    b = 2 if dtype_name == "bf16" else 4
    lora = None if case == "full" else LoRAShape(4, ALL, b)  # adapters in the base's dtype
    per_layer = (saved(3) - saved(1)) // 2
    assert per_layer == 256 * layer_activation_bytes(shape, compute_bytes=b, lora=lora)


def test_logits_states_buffers_and_kv_by_hand() -> None:
    def logits(trainer: str, fused: bool, entropy: bool) -> int:
        return logits_bytes(
            TINY, 10, trainer=trainer, fused=fused, entropy=entropy, compute_bytes=2
        )

    assert logits("verl", False, False) == 10 * 32 * 6
    assert logits("verl", False, True) == 10 * 32 * 8
    assert logits("local", False, False) == 10 * 32 * 12
    assert logits("local", False, True) == 10 * 32 * 28  # measured on an H200
    assert logits("verl", True, True) == 10 * 32 * 16 + 10 * 2 * 2 * 8  # a chunk + hidden, grad
    assert state_bytes(2232, 512, master_bytes=4, shards=2) == (4464, 1024, 2048)
    c = param_counts(TINY, lora_rank=2, lora_targets=ALL)
    assert fsdp_buffer_bytes(c, TINY, lm_head=True, full_grads=False, compute_bytes=2) == (
        (2 * 600 + 256) * 2
    )
    assert fsdp_buffer_bytes(c, TINY, lm_head=False, full_grads=True, compute_bytes=2) == (
        2 * 600 * 2 + 600 * 6
    )
    assert kv_bytes_per_token(TINY) == 2 * 2 * 1 * 4 * 2


def test_qwen3_8b_matches_the_seed_figures() -> None:
    """FACTS.md: 8.19B parameters, LoRA r32 on the 7 projections = 333 MiB in fp32, bf16 KV
    cache 147,456 bytes per token = 9.0 GiB at 64K."""
    c = param_counts(Q8B, lora_rank=32, lora_targets=ALL)
    assert c.total == 8_190_735_360
    assert c.lora * 4 / 2**20 == pytest.approx(333.0, abs=0.1)
    assert kv_bytes_per_token(Q8B) == 147_456
    assert 65_536 * kv_bytes_per_token(Q8B) / GIB == 9.0


def test_verl_actor_parts_for_soak_5gpu_by_hand() -> None:
    spec = load_spec("soak-5gpu")  # 4 trainer GPUs, 40960 tokens, LoRA r32, the seed's knobs
    actor = estimate(spec, Q8B, gpu_memory_gb=80).roles[0]
    c = param_counts(Q8B, lora_rank=32, lora_targets=ALL)
    t = 40_960
    # one layer: fp32 norm inputs 4 (2h + nd + kv d) + rstd 4 (2 + 32 + 8), q k v out
    # 2 (2 nd + 2 kv d) + lse 4 x 32, SwiGLU 2 x 3i, bf16 adapter inputs 2 (2h + i), A outputs
    # 2 x 32 x 7
    layer = 4 * (8192 + 4096 + 1024) + 4 * 42 + 2 * (8192 + 2048) + 128 + 6 * 12_288
    layer += 2 * (8192 + 12_288) + 2 * 32 * 7
    final = 4 * 4096 + 4 + 2 * 4096 + 2 * 2 * 128  # final norm, head input, cos/sin
    expected = {
        "parameters": (c.total + c.lora) * 4 / 4,  # fp32 master, 4 shards
        "gradients": c.lora * 4 / 4,
        "optimizer_states": 2 * c.lora * 4 / 4,
        "fsdp_buffers": (2 * c.layer + c.lm_head) * 2,
        "colocated_model": 0,  # the critic is offloaded during the actor's update
        "activations": t * (36 * 2 * 4096 + layer + 2 * (2 * 12_288 + 2 * 4096) + final),
        "logits": t * 151_936 * 6,
        "runtime": GIB,
    }
    assert actor.role == "actor" and actor.gpus == 4
    assert actor.parts == {k: round(v / GIB, 3) for k, v in expected.items()}
    assert actor.peak_gb == pytest.approx(sum(expected.values()) / GIB, abs=1e-3)


# -- properties ----------------------------------------------------------------------------------

shapes = st.builds(
    lambda h, layers, i, heads, kv, v, tied: ModelShape(
        name="h",
        hidden_size=h * heads,
        num_hidden_layers=layers,
        intermediate_size=i,
        num_attention_heads=heads * kv,
        num_key_value_heads=kv,
        head_dim=h,
        vocab_size=v,
        tie_word_embeddings=tied,
    ),
    st.sampled_from([16, 64, 128]),
    st.integers(1, 48),
    st.integers(16, 20_000),
    st.integers(1, 8),
    st.sampled_from([1, 2, 8]),
    st.integers(64, 200_000),
    st.booleans(),
)
knob_sets = st.fixed_dictionaries(
    {
        f"{role}.{name}": st.booleans()
        for role in ("actor", "critic")
        for name in ("param_offload", "optimizer_offload", "gradient_checkpointing")
    }
    | {
        "actor.fused_kernels": st.booleans(),
        "actor.dtype": st.sampled_from(["fp32", "bf16"]),
        "critic.dtype": st.sampled_from(["fp32", "bf16"]),
    }
)
SPECS = {
    "soak-5gpu": load_spec("soak-5gpu"),
    "smoke-4gpu": load_spec("smoke-4gpu"),
    "smoke-local": load_spec("smoke-local"),
}


def _peaks(spec, shape, values) -> dict[str, float]:
    knobs, _ = resolve_knobs(spec, values)
    return {r.role: r.peak_gb for r in role_estimates(spec, shape, knobs, 80.0)}


@given(
    shapes, knob_sets, st.sampled_from(sorted(SPECS)), st.integers(1, 2**17), st.integers(0, 2**17)
)
def test_more_tokens_never_less_memory(shape, values, name, tokens, more) -> None:
    spec = SPECS[name]
    low = _peaks(with_budget(spec, tokens), shape, values)
    high = _peaks(with_budget(spec, tokens + more), shape, values)
    assert all(high[role] >= low[role] for role in low), (low, high)


@given(shapes, knob_sets, st.sampled_from(sorted(SPECS)), st.integers(1, 2**17))
def test_offload_never_more_gpu_memory(shape, values, name, tokens) -> None:
    spec = with_budget(SPECS[name], tokens)
    for knob in ("param_offload", "optimizer_offload"):
        for role in ("actor", "critic"):
            key = f"{role}.{knob}"
            on = _peaks(spec, shape, values | {key: True})
            off = _peaks(spec, shape, values | {key: False})
            assert all(on[r] <= off[r] for r in on), (key, on, off)


@given(shapes.filter(lambda s: s.num_hidden_layers >= 2), knob_sets, st.integers(1, 2**17))
def test_checkpointing_never_more(shape, values, tokens) -> None:
    """With two or more layers; a one-layer model checkpoints its only layer, whose saved input
    is then extra (it is recomputed anyway)."""
    spec = with_budget(SPECS["soak-5gpu"], tokens)
    for role in ("actor", "critic"):
        key = f"{role}.gradient_checkpointing"
        on = _peaks(spec, shape, values | {key: True})
        off = _peaks(spec, shape, values | {key: False})
        assert on[role] <= off[role], (key, on, off)


def test_largest_budget_that_fits_is_the_edge() -> None:
    spec = load_spec("soak-5gpu")
    knobs, _ = resolve_knobs(spec, {})
    best = largest_budget_that_fits(spec, Q8B, knobs, 80.0)
    assert best is not None

    def verdicts(tokens: int) -> set[str]:
        roles = role_estimates(with_budget(spec, tokens), Q8B, knobs, 80.0)
        return {r.verdict for r in roles if r.role != "inference"}

    assert verdicts(best) == {"fits"}
    assert verdicts(best + 1) != {"fits"}
    # states alone beyond the card: no budget fits
    assert largest_budget_that_fits(spec, Q8B, knobs, 10.0) is None


# -- the exact checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "role"),
    [
        ("actor_train_tokens", "actor"),
        ("critic_train_tokens", "critic"),
        ("critic_infer_tokens", "critic"),
    ],
)
def test_a_budget_below_the_window_is_refused(field: str, role: str) -> None:
    spec = load_spec("soak-5gpu")  # window 40960
    for budget, refused in ((40_959, True), (40_960, False)):
        context = spec.context.model_copy(update={field: budget})
        probe = spec.model_copy(update={"context": context})
        roles: dict[str, RoleEstimate] = {r.role: r for r in estimate(probe, Q8B).roles}
        assert (roles[role].verdict == "refused") is refused, roles[role].reasons
        if refused:
            assert (
                f"context.{field} = {budget} < the longest sequence, 40960"
                in roles[role].reasons[0]
            )
            assert "fix: set" in roles[role].reasons[0]


def test_a_kv_cache_below_one_window_is_refused() -> None:
    spec = load_spec("soak-5gpu")
    c = param_counts(Q8B, lora_rank=32, lora_targets=ALL)
    fixed = (c.total + c.lora) * 2 + 1.3 * GIB  # weights (+ one LoRA slot) + vLLM's runtime
    needed = (fixed + 40_960 * 147_456) / (80 * GIB)  # one window of KV

    def inference(util: float):
        served = spec.model_copy(
            update={"inference": spec.inference.model_copy(update={"gpu_memory_utilization": util})}
        )
        return estimate(served, Q8B, gpu_memory_gb=80).roles[-1]

    below, above = inference(needed - 0.001), inference(needed + 0.001)
    assert below.verdict == "refused" and "less than one sequence of the window" in below.reasons[0]
    assert f"inference.gpu_memory_utilization >= {needed:.3f}" in below.reasons[0]
    assert above.verdict == "fits" and above.peak_gb == pytest.approx(
        (needed + 0.001) * 80, abs=1e-3
    )


# -- the command line ----------------------------------------------------------------------------


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_has_exactly_the_documented_fields(capsys, monkeypatch) -> None:
    monkeypatch.setattr(estimate_cli, "machine_gpu_memory_gb", lambda: None)
    code, out, _ = _main(
        capsys, "estimate", "--config", "soak-5gpu", "--model-config", "qwen3-8b", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"roles", "gpu_memory_gb", "largest_budget_that_fits", "assumptions"}
    assert data["gpu_memory_gb"] == 80.0  # no GPU here: the seed's cards
    assert [r["role"] for r in data["roles"]] == ["actor", "critic", "inference"]
    for role in data["roles"]:
        assert set(role) == {"role", "gpus", "peak_gb", "parts", "verdict", "reasons"}
        assert role["verdict"] in {"fits", "at_risk", "oom", "refused"}
        assert sum(role["parts"].values()) == pytest.approx(role["peak_gb"], abs=0.01)
        assert role["reasons"] and all(isinstance(r, str) for r in role["reasons"])
    assert isinstance(data["largest_budget_that_fits"], int)
    assert all(set(a) == {"name", "value", "source"} and a["source"] for a in data["assumptions"])
    names = {a["name"] for a in data["assumptions"]}
    assert {"gpu_memory_gb", "fits_fraction", "actor.param_offload", "ppo.entropy_coeff"} <= names


def test_cli_routes_knobs_and_spec_fields(capsys) -> None:
    args = [
        "estimate",
        "--config",
        "soak-5gpu",
        "--model-config",
        "qwen3-8b",
        "--json",
        "--gpu-memory-gb",
        "80",
    ]
    _, base, _ = _main(capsys, *args)
    _, kept, _ = _main(
        capsys, *args, "--set", "critic.param_offload=false", "--set", "actor.entropy_coeff=0.01"
    )
    base_actor, kept_actor = json.loads(base)["roles"][0], json.loads(kept)["roles"][0]
    assert kept_actor["parts"]["colocated_model"] > base_actor["parts"]["colocated_model"] == 0
    assert kept_actor["parts"]["logits"] > base_actor["parts"]["logits"]  # entropy in the loss
    sources = {a["name"]: a["source"] for a in json.loads(kept)["assumptions"]}
    assert sources["critic.param_offload"].startswith("--set")
    code, _, err = _main(capsys, *args, "--set", "actor.offload=true")
    assert code == 1 and "expected a run-spec field or an estimate knob" in err and "fix" in err
    code, _, err = _main(capsys, *args, "--set", "actor.dtype=fp16")
    assert code == 1 and "actor.dtype" in err and "found 'fp16'" in err


def test_cli_table_and_resources_gpu_memory(capsys) -> None:
    code, out, _ = _main(
        capsys,
        "estimate",
        "--config",
        "soak-5gpu",
        "--model-config",
        "qwen3-8b",
        "--set",
        "resources.gpu_memory_gb=141",
    )
    assert code == 0
    assert "GPU memory 141.00 GB per card" in out
    assert "largest token budget per GPU" in out and "actor" in out and "inference" in out


def test_cli_prices_a_spec_the_budget_rules_refuse(capsys) -> None:
    code, out, err = _main(
        capsys,
        "estimate",
        "--config",
        "soak-5gpu",
        "--model-config",
        "qwen3-8b",
        "--json",
        "--set",
        "context.actor_train_tokens=32768",
    )
    assert code == 0 and err == ""
    assert json.loads(out)["roles"][0]["verdict"] == "refused"


def test_cli_without_a_model_config_says_what_to_do(capsys) -> None:
    code, _, err = _main(capsys, "estimate", "--config", "soak-5gpu")
    assert code == 1
    assert "expected model.path to be a local model folder" in err
    assert "/models/Klear-AgentForge-8B-SFT" in err and "--model-config" in err


# -- config.json errors and the shipped shapes ---------------------------------------------------


def test_bad_config_json_lists_expected_found_fix(tmp_path, capsys) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(
        json.dumps(
            {
                "hidden_size": "4096",
                "num_hidden_layers": 0,
                "vocab_size": 10,
                "num_attention_heads": 32,
                "num_key_value_heads": 5,
            }
        )
    )
    with pytest.raises(ModelConfigError) as info:
        load_model_shape(tmp_path)
    text = str(info.value)
    assert "hidden_size: expected a positive integer; found '4096'" in text
    assert "num_hidden_layers: expected a positive integer; found 0" in text
    assert "intermediate_size: expected a positive integer; found None" in text
    assert "num_key_value_heads: expected a divisor of num_attention_heads (32); found 5" in text
    assert "fix:" in text
    code, _, err = _main(capsys, "estimate", "--config", "soak-5gpu", "--model-config", str(bad))
    assert code == 1 and "expected a positive integer" in err and "fix:" in err
    bad.write_text("{not json")
    with pytest.raises(ModelConfigError, match="expected a JSON object.*found"):
        load_model_shape(bad)
    with pytest.raises(ModelConfigError, match="found no such file or folder"):
        load_model_shape(tmp_path / "missing")
    with pytest.raises(
        ModelConfigError, match="expected a JSON object at the top level; found list"
    ):
        shape_from_config([], source="x")


@pytest.mark.parametrize(
    ("name", "hidden", "layers", "intermediate", "heads", "tied", "billions"),
    [
        ("qwen3-0.6b", 1024, 28, 3072, 16, True, 0.596),
        ("qwen3-1.7b", 2048, 28, 6144, 16, True, 1.721),
        ("qwen3-8b", 4096, 36, 12288, 32, False, 8.191),
    ],
)
def test_shipped_shapes_are_the_published_qwen3_configs(
    name, hidden, layers, intermediate, heads, tied, billions
) -> None:
    assert name in SHAPES
    raw = json.loads(
        (resources.files("forge_ppo.estimate") / "shapes" / f"{name}.json").read_text()
    )
    assert raw["model_type"] == "qwen3" and raw["vocab_size"] == 151_936
    shape = load_model_shape(name)
    assert (shape.hidden_size, shape.num_hidden_layers, shape.intermediate_size) == (
        hidden,
        layers,
        intermediate,
    )
    assert (shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim) == (heads, 8, 128)
    assert shape.tie_word_embeddings is tied
    total = param_counts(shape, lora_rank=32, lora_targets=ALL).total
    assert total / 1e9 == pytest.approx(billions, abs=0.001)


def test_fits_fraction_is_the_documented_one() -> None:
    assert FITS_FRACTION == 0.85


@pytest.mark.parametrize("name", SHAPES)
def test_parameter_counts_equal_transformers_qwen3(name: str) -> None:
    """The shipped configs build transformers' Qwen3 (on the meta device: no memory) with as
    many parameters as `param_counts` says; the LoRA count equals PEFT's."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from forge_gates import LoRASpec
    from forge_ppo import Actor

    raw = json.loads(
        (resources.files("forge_ppo.estimate") / "shapes" / f"{name}.json").read_text()
    )
    fields = {k: v for k, v in raw.items() if k not in ("architectures", "torch_dtype")}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
        counts = param_counts(load_model_shape(name), lora_rank=32, lora_targets=ALL)
        assert sum(p.numel() for p in model.parameters()) == counts.total
        actor = Actor.from_model(model, LoRASpec(rank=32, alpha=16), base_model=name)
    assert sum(p.numel() for p in actor.trainable_parameters()) == counts.lora
