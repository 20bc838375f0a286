"""The memory knobs the run spec does not carry yet: estimate inputs with the seed's defaults.

    actor.param_offload  actor.optimizer_offload  actor.gradient_checkpointing
    actor.fused_kernels  actor.dtype  critic.param_offload  critic.optimizer_offload
    critic.gradient_checkpointing  critic.dtype  resources.gpu_memory_gb

`forge-ppo estimate --set KEY=VALUE` sends each assignment to the spec when the spec has that
field and to the knobs otherwise: a field the spec carries (`[actor]` / `[critic]` tables) is
read from the spec, so the estimate prices what the run will do; the defaults here (the seed's,
for verl) fill in only what a spec does not carry. `actor.entropy_coeff` is the spec's
`ppo.entropy_coeff`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forge_gates import RunSpec

Dtype = Literal["fp32", "bf16"]
ALIASES = {"actor.entropy_coeff": "ppo.entropy_coeff"}
GPU_MEMORY_KEY = "resources.gpu_memory_gb"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RoleKnobs(_Frozen):
    """One trained model's memory settings (verl's `fsdp_config` / `model` names)."""

    param_offload: bool = Field(
        description="Parameters (and gradients) live on the CPU outside this model's own "
        "passes; reloaded for its update, so they free the GPU for the other model only."
    )
    optimizer_offload: bool = Field(
        description="AdamW moments live on the CPU outside this model's update."
    )
    gradient_checkpointing: bool = Field(
        description="Keep only each decoder layer's input; recompute the layer in backward."
    )
    dtype: Dtype = Field(
        description="Master weight dtype: fp32 = mixed precision (bf16 compute, fp32 master, "
        "fp32 gradients and AdamW moments); bf16 = everything in bf16."
    )


class ActorKnobs(RoleKnobs):
    """The actor's settings, plus the fused log-prob kernel (only the actor has an LM head)."""

    fused_kernels: bool = Field(
        description="Fused LM head + log-prob/entropy in 512-token chunks: no full-size logits."
    )


class Knobs(_Frozen):
    """Every estimate-only input, resolved (defaults, then spec fields, then --set)."""

    actor: ActorKnobs = Field(description="Actor (LoRA policy) settings.")
    critic: RoleKnobs = Field(description="Critic (value model, full fine-tuning) settings.")


ROLE_FIELDS = ("param_offload", "optimizer_offload", "gradient_checkpointing", "dtype")
KNOB_KEYS = tuple(
    [f"actor.{f}" for f in (*ROLE_FIELDS, "fused_kernels")] + [f"critic.{f}" for f in ROLE_FIELDS]
)

# (value, source) per knob and trainer backend: the seed's configuration for verl, what the
# code does for the local trainer
_VERL_SOURCES = {
    "param_offload": "seed runbook item 16: actor and critic parameter + optimizer CPU offload "
    "(kept for the 4+1 separated runs)",
    "optimizer_offload": "seed runbook item 16 (and the config table: critic optimizer offload "
    "from the first 4-GPU smoke)",
    "gradient_checkpointing": "seed runbook item 3 (critic gradient checkpointing) and verl's "
    "default model.enable_gradient_checkpointing=true",
    "dtype": "verl's FSDP default model_dtype=fp32 for trained models (fp32 master, bf16 "
    "compute); forge_ppo/verl/_config.py sets fp32 for both",
    "fused_kernels": "verl's default model.use_fused_kernels=false; the seed never enabled it",
}
_LOCAL_SOURCES = {
    "param_offload": "the local trainer has no offload",
    "optimizer_offload": "the local trainer has no offload",
    "gradient_checkpointing": "off unless the spec asks (actor|critic.gradient_checkpointing)",
    "dtype": "forge_ppo/policy/_build.py builds actor and critic in float32",
    "fused_kernels": "the local trainer has no fused kernel (forge_ppo/policy/_actor.py)",
}


def _defaults(trainer: str) -> dict[str, tuple[Any, str]]:
    verl = trainer == "verl"
    sources = _VERL_SOURCES if verl else _LOCAL_SOURCES
    value = {
        "param_offload": verl,
        "optimizer_offload": verl,
        "gradient_checkpointing": verl,
        "dtype": "fp32",
        "fused_kernels": False,
    }
    out = {}
    for key in KNOB_KEYS:
        field = key.split(".", 1)[1]
        out[key] = (value[field], f"default ({trainer} trainer): {sources[field]}")
    return out


def spec_has_field(key: str) -> bool:
    """Whether `a.b.c` names a field of RunSpec (walking nested models)."""
    model: type[BaseModel] | None = RunSpec
    for part in key.split("."):
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        candidates = getattr(annotation, "__args__", (annotation,))
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return True


def parse_value(raw: str) -> Any:
    """A --set value: JSON when it parses (true, 3, 0.5), else the text (bf16)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def split_sets(assignments: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(spec assignments, knob values) from `--set KEY=VALUE` items. Raises ValueError on a
    malformed item or an `actor.*` / `critic.*` key that is neither a spec field nor a knob."""
    spec_sets: list[str] = []
    knobs: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--set: expected KEY=VALUE; found {item!r}; fix: e.g. --set "
                "actor.param_offload=false"
            )
        if key in ALIASES and not spec_has_field(key):
            spec_sets.append(f"{ALIASES[key]}={raw}")
        elif spec_has_field(key):
            spec_sets.append(item)
        elif key in KNOB_KEYS or key == GPU_MEMORY_KEY:
            knobs[key] = parse_value(raw)
        elif key.split(".", 1)[0] in ("actor", "critic"):
            raise ValueError(
                f"--set: expected a run-spec field or an estimate knob ({', '.join(KNOB_KEYS)}, "
                f"{GPU_MEMORY_KEY}, actor.entropy_coeff); found {key!r}; fix: use one of those "
                "names"
            )
        else:
            spec_sets.append(item)  # the spec's own validation names an unknown field
    return spec_sets, knobs


def _from_spec(spec: RunSpec, key: str) -> Any:
    """A knob's value when the spec carries the field (once the lead adds it), else None."""
    node: Any = spec
    for part in key.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


def resolve_knobs(
    spec: RunSpec, values: dict[str, Any], *, set_keys: frozenset[str] = frozenset()
) -> tuple[Knobs, dict[str, str]]:
    """(knobs, source per knob): the trainer backend's defaults, then spec fields, then
    `values` (--set). `set_keys` names knobs --set changed through the spec (their source says
    so). Raises ValueError naming each bad value."""
    resolved = _defaults(spec.backends.trainer)
    for key in KNOB_KEYS:
        from_spec = _from_spec(spec, key)
        if from_spec is not None:
            resolved[key] = (from_spec, "--set (run spec field)" if key in set_keys else "run spec")
        if key in values:
            resolved[key] = (values[key], "--set")
    data: dict[str, dict[str, Any]] = {"actor": {}, "critic": {}}
    for key, (value, _source) in resolved.items():
        role, field = key.split(".", 1)
        data[role][field] = value
    try:
        knobs = Knobs.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: expected {e['msg'].lower()}, found "
            f"{e.get('input')!r}"
            for e in exc.errors()
        )
        raise ValueError(
            f"estimate knobs: {problems}; fix: true/false for offload, checkpointing and fused "
            "kernels, fp32 or bf16 for dtype"
        ) from exc
    return knobs, {key: source for key, (_value, source) in resolved.items()}
