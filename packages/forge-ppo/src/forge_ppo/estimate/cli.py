"""`forge-ppo estimate`: the per-GPU memory estimate of a run spec before launch (a CLI face; the
math is in the room's private modules).

    forge-ppo estimate --config soak-5gpu --model-config qwen3-8b
    forge-ppo estimate --config soak-5gpu --model-config qwen3-8b --json \\
        --set model.max_model_len=49152 --set context.window=49152 \\
        --set context.actor_train_tokens=49152 --set actor.param_offload=false

Exit status: 0 with the estimate printed (an oom or refused verdict is an answer, not an
error); 1 when the spec or the model's config.json cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_gates import GateError, RunSpec, read_config, validate_config
from forge_ppo.estimate._estimate import DEFAULT_GPU_MEMORY_GB, estimate
from forge_ppo.estimate._formulas import GIB
from forge_ppo.estimate._knobs import GPU_MEMORY_KEY, KNOB_KEYS, resolve_knobs, split_sets
from forge_ppo.estimate._report import render_table
from forge_ppo.estimate._shape import SHAPES, ModelConfigError, ModelShape, load_model_shape

# the context key forge_gates' own `validate_config` uses to build a spec before its rules run
# (forge_gates.spec._spec.SKIP_RULES); the estimate prices specs the rules refuse (budgets below
# the window are its `refused` verdicts)
_SKIP_RULES = "forge_gates.skip_rules"
Overrides = Callable[[dict, list[str]], dict]


def machine_gpu_memory_gb() -> tuple[float, str] | None:
    """(GB, description) of this machine's GPU 0 via torch.cuda, or None without one."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return props.total_memory / GIB, f"this machine's GPU 0 ({props.name}, torch.cuda)"


def gpu_memory(flag: float | None, spec: RunSpec, knob: Any) -> tuple[float, str]:
    """GPU memory per card and where it came from: --gpu-memory-gb, the spec's
    resources.gpu_memory_gb, --set resources.gpu_memory_gb, this machine's GPU, else the seed's
    80 GB."""
    if flag is not None:
        return float(flag), "--gpu-memory-gb"
    field = spec.resources.gpu_memory_gb
    if field is not None:
        return float(field), "run spec resources.gpu_memory_gb"
    if knob is not None:
        return float(knob), f"--set {GPU_MEMORY_KEY}"
    machine = machine_gpu_memory_gb()
    if machine is not None:
        return machine
    return DEFAULT_GPU_MEMORY_GB, "default: the seed's 80 GB A800 cards (no GPU on this machine)"


def load_estimate_spec(data: dict) -> tuple[RunSpec | None, list[str]]:
    """(spec, problems): a spec whose schema holds. Rule violations do not stop an estimate
    (its exact checks price the budget rules; the others are returned as notes)."""
    spec, violations = validate_config(data)
    if spec is not None:
        return spec, []
    if any(v.rule.startswith(("schema.", "config.")) for v in violations):
        return None, [str(v) for v in violations]
    unchecked = RunSpec.model_validate(data, context={_SKIP_RULES: True})
    notes = [str(v) for v in violations if not v.rule.startswith("budget.")]
    return unchecked, [f"note (not priced): {n}" for n in notes]


def model_shape(flag: str | None, spec: RunSpec) -> ModelShape:
    """--model-config, else model.path when it is a local folder holding config.json."""
    if flag:
        return load_model_shape(flag)
    if (Path(spec.model.path) / "config.json").is_file():
        return load_model_shape(spec.model.path)
    raise ModelConfigError(
        spec.model.path,
        [
            f"expected model.path to be a local model folder holding config.json, or "
            f"--model-config; found model.path = {spec.model.path!r} without one"
        ],
        f"pass --model-config PATH (a model folder or its config.json) or a shipped shape: "
        f"{', '.join(SHAPES)}",
    )


def run_estimate(args: argparse.Namespace, overrides: Overrides) -> int:
    # 1. the spec (forge-gates' loader with --set) and the estimate-only knobs
    try:
        spec_sets, knob_values = split_sets(args.set)
        data = overrides(read_config(args.config), spec_sets)
    except (GateError, ValueError) as error:
        print(str(error), file=sys.stderr)
        return 1
    spec, problems = load_estimate_spec(data)
    for problem in problems:
        print(problem if spec is not None else f"  - {problem}", file=sys.stderr)
    if spec is None:
        print(f"INVALID {args.config}: fix the spec fields above", file=sys.stderr)
        return 1
    # 2. the model's shape, the knobs, the GPU's memory; 3. the estimate
    try:
        shape = model_shape(args.model_config, spec)
        set_keys = frozenset(item.partition("=")[0] for item in args.set) & set(KNOB_KEYS)
        values = {k: knob_values[k] for k in KNOB_KEYS if k in knob_values}
        knobs, sources = resolve_knobs(spec, values, set_keys=set_keys)
        gb, gb_source = gpu_memory(args.gpu_memory_gb, spec, knob_values.get(GPU_MEMORY_KEY))
        result = estimate(
            spec,
            shape,
            knobs=knobs,
            knob_sources=sources,
            gpu_memory_gb=gb,
            gpu_memory_source=gb_source,
        )
    except (ModelConfigError, ValueError) as error:
        print(str(error), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        print(render_table(result, title=f"forge-ppo estimate  {spec.name}  model {shape.name}"))
    return 0


def add_estimate_command(sub: Any, overrides: Overrides) -> None:
    """Register `estimate` on the forge-ppo subparsers (`overrides` applies --set to a spec)."""
    p = sub.add_parser(
        "estimate",
        help="per-GPU memory of the actor update, critic update and vLLM before launch",
        description=__doc__,
    )
    p.add_argument("--config", required=True, help="shipped config name or spec file")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec field or an estimate knob (repeatable, JSON values): "
        + ", ".join(KNOB_KEYS)
        + f", {GPU_MEMORY_KEY}; actor.entropy_coeff = ppo.entropy_coeff",
    )
    p.add_argument(
        "--model-config",
        help="the model's config.json, its folder, or a shipped shape "
        f"({', '.join(SHAPES)}); default: model.path when it is a local folder",
    )
    p.add_argument(
        "--gpu-memory-gb",
        type=float,
        help="memory of one GPU in GB (GiB); default: the spec's, else this machine's GPU 0, "
        "else 80 (the seed's cards)",
    )
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.set_defaults(run=lambda args: run_estimate(args, overrides))
