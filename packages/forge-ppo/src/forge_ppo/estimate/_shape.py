"""A model's shape from its Hugging Face `config.json` alone (no weights), and its parameter counts.

Only the fields that size memory are read: `hidden_size`, `num_hidden_layers`,
`intermediate_size`, `num_attention_heads`, `num_key_value_heads` (default: the attention heads),
`head_dim` (default: hidden / heads), `vocab_size`, `tie_word_embeddings` (default false),
`attention_bias` (default false) and `torch_dtype` / `dtype` (vLLM's `--dtype auto`). The
shipped shapes (`SHAPES`) are the public Qwen3 configs, usable by name (`qwen3-8b`).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SHAPES = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-8b")
REQUIRED = (
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
    "vocab_size",
)
OPTIONAL_INTS = ("num_key_value_heads", "head_dim")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ModelConfigError(ValueError):
    """A config.json the estimate cannot read: what was expected, what was found, the fix."""

    def __init__(self, source: str, problems: list[str], fix: str) -> None:
        self.source, self.problems, self.fix = source, problems, fix
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"model config {source}:\n{lines}\n  fix: {fix}")


class ModelShape(BaseModel):
    """The architecture numbers that size memory (a decoder-only transformer, Qwen2/3-style:
    RMSNorm, GQA attention, SwiGLU MLP; Qwen3 adds per-head q/k RMSNorms)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Where the shape came from (a shipped name or a path).")
    hidden_size: int = Field(gt=0, description="h: hidden size.")
    num_hidden_layers: int = Field(gt=0, description="L: decoder layers.")
    intermediate_size: int = Field(gt=0, description="i: MLP intermediate size.")
    num_attention_heads: int = Field(gt=0, description="n: query heads.")
    num_key_value_heads: int = Field(gt=0, description="kv: key/value heads (GQA).")
    head_dim: int = Field(gt=0, description="d: per-head dimension.")
    vocab_size: int = Field(gt=0, description="V: vocabulary (rows of the LM head).")
    tie_word_embeddings: bool = Field(description="The LM head shares the embedding matrix.")
    attention_bias: bool = Field(default=False, description="q/k/v projections carry a bias.")
    qk_norm: bool = Field(default=True, description="Per-head q/k RMSNorms (Qwen3).")
    torch_dtype: str | None = Field(default=None, description="Saved weights' dtype, if given.")


def shipped_shape_path(name: str) -> Path:
    """The package-data config.json of a shipped shape (`qwen3-8b`, ...)."""
    return Path(str(resources.files("forge_ppo.estimate") / "shapes" / f"{name}.json"))


def resolve_model_config(name_or_path: str | Path) -> Path:
    """A config.json path: a shipped shape name, a model folder holding config.json, or a
    file. Raises ModelConfigError naming every place it looked."""
    if str(name_or_path) in SHAPES:
        return shipped_shape_path(str(name_or_path))
    path = Path(name_or_path)
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    if path.is_file():
        return path
    raise ModelConfigError(
        str(name_or_path),
        [
            "expected a config.json file, a model folder holding one, or a shipped shape name "
            f"{list(SHAPES)}; found no such file or folder"
        ],
        "pass --model-config PATH (a Hugging Face model folder or its config.json) or a "
        "shipped name, e.g. --model-config qwen3-8b",
    )


def load_model_shape(name_or_path: str | Path) -> ModelShape:
    """The shape of a shipped name, a model folder or a config.json (never loads weights)."""
    path = resolve_model_config(name_or_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(
            str(path),
            [f"expected a JSON object (a Hugging Face config.json); found {exc}"],
            "point --model-config at the model's own config.json",
        ) from exc
    name = str(name_or_path) if str(name_or_path) in SHAPES else str(path)
    return shape_from_config(data, source=name)


def _int_field(data: dict[str, Any], key: str, problems: list[str]) -> int | None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problems.append(f"{key}: expected a positive integer; found {value!r}")
        return None
    return value


def shape_from_config(data: Any, *, source: str) -> ModelShape:
    """A ModelShape from a parsed config.json; every problem is listed at once."""
    if not isinstance(data, dict):
        raise ModelConfigError(
            source,
            [f"expected a JSON object at the top level; found {type(data).__name__}"],
            "point --model-config at the model's own config.json",
        )
    if "hidden_size" not in data and isinstance(data.get("text_config"), dict):
        data = data["text_config"]  # multimodal configs nest the language model's
    problems: list[str] = []
    values = {key: _int_field(data, key, problems) for key in REQUIRED}
    for key in OPTIONAL_INTS:
        if data.get(key) is not None:
            values[key] = _int_field(data, key, problems)
    for key in ("tie_word_embeddings", "attention_bias"):
        if not isinstance(data.get(key, False), bool):
            problems.append(f"{key}: expected true or false; found {data[key]!r}")
    heads, hidden = values["num_attention_heads"], values["hidden_size"]
    kv_heads = values.get("num_key_value_heads") or heads
    if heads and kv_heads and heads % kv_heads:
        problems.append(
            f"num_key_value_heads: expected a divisor of num_attention_heads ({heads}); found "
            f"{kv_heads}"
        )
    if problems:
        raise ModelConfigError(
            source,
            problems,
            f"fix the config.json fields above (the estimate reads {', '.join(REQUIRED)} and "
            "optionally num_key_value_heads, head_dim, tie_word_embeddings), or pass a shipped "
            f"shape: {', '.join(SHAPES)}",
        )
    assert heads is not None and hidden is not None and kv_heads is not None  # checked above
    dtype = data.get("torch_dtype") or data.get("dtype")
    return ModelShape(
        name=source,
        hidden_size=hidden,
        num_hidden_layers=values["num_hidden_layers"] or 0,
        intermediate_size=values["intermediate_size"] or 0,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=values.get("head_dim") or hidden // heads,
        vocab_size=values["vocab_size"] or 0,
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
        attention_bias=bool(data.get("attention_bias", False)),
        qk_norm=str(data.get("model_type", "qwen3")).startswith("qwen3"),
        torch_dtype=str(dtype) if dtype is not None else None,
    )


class ParamCounts(BaseModel):
    """Parameter counts (elements, not bytes) of the causal LM and of the critic's backbone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embedding: int = Field(description="V x h.")
    lm_head: int = Field(description="V x h when untied, else 0 (it is the embedding).")
    layer: int = Field(description="One decoder layer: projections + norms (+ biases).")
    total: int = Field(description="The causal LM: embedding + L layers + final norm + head.")
    backbone: int = Field(description="The critic: the LM without its head + the value head.")
    lora_layer: int = Field(description="LoRA A and B of one layer (rank r, the targets).")
    lora: int = Field(description="LoRA A and B over all layers.")


def projection_shapes(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each projection of one decoder layer."""
    h, i = shape.hidden_size, shape.intermediate_size
    q, kv = shape.num_attention_heads * shape.head_dim, shape.num_key_value_heads * shape.head_dim
    return {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def param_counts(
    shape: ModelShape, *, lora_rank: int, lora_targets: tuple[str, ...]
) -> ParamCounts:
    """Counts from the shape; LoRA on the named projections (others are ignored)."""
    h, d = shape.hidden_size, shape.head_dim
    projections = projection_shapes(shape)
    layer = sum(n_in * n_out for n_in, n_out in projections.values()) + 2 * h  # + two RMSNorms
    if shape.qk_norm:
        layer += 2 * d  # q_norm, k_norm weights
    if shape.attention_bias:
        layer += projections["q_proj"][1] + 2 * projections["k_proj"][1]
    embedding = shape.vocab_size * h
    lm_head = 0 if shape.tie_word_embeddings else embedding
    body = embedding + shape.num_hidden_layers * layer + h  # + the final norm
    targets = [t for t in lora_targets if t in projections]
    lora_layer = sum(lora_rank * (projections[t][0] + projections[t][1]) for t in targets)
    return ParamCounts(
        embedding=embedding,
        lm_head=lm_head,
        layer=layer,
        total=body + lm_head,
        backbone=body + h + 1,
        lora_layer=lora_layer,
        lora=lora_layer * shape.num_hidden_layers,
    )
