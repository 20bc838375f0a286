"""What Forge reads back from a built verl engine, in the worker process: the settings the engine
actually runs with (after verl's own defaults and overrides) and the micro-batches it actually
formed.

Micro-batches: verl's FSDP engine forms them in `forward_backward_batch` through
`prepare_micro_batches` -> `seqlen_balancing.rearrange_micro_batches` (`workers/engine/utils.py:
92`), which keeps each micro-batch's real tokens (the sum of its sequences) within the budget
(`utils/seqlen_balancing.py:440-458` adds micro-batches until they fit); without
`use_remove_padding` the engine then pads each to sequences x the longest
(`prepare_model_inputs`), and that padded tensor is what the memory sees. `watch_engine` wraps
one engine's `forward_backward_batch` so that, while it runs, the module-level
`prepare_micro_batches` the engine calls records every micro-batch it returned; nothing of
verl's result is changed. One Ray worker process runs one call at a time, so a module global
names the engine and pass being recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch

from forge_ppo.verl._patches import check_version

PASSES = ("train", "infer")
DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_CURRENT: list[tuple[str, str]] = []  # (role, pass) of the forward_backward_batch running
RECORDS: dict[tuple[str, str], dict[str, int]] = {}
_INSTALLED: list[bool] = []


def micro_batch_tokens(lengths: list[int], packed: bool) -> dict[str, int]:
    """One micro-batch's size: `tokens` as it is computed (the sum of its sequences when packed,
    `use_remove_padding`; else sequences x the longest, the padded tensor verl builds in
    `prepare_model_inputs`) and `real` (the sum: what verl's budget counts)."""
    real = sum(lengths)
    return {"tokens": real if packed else len(lengths) * max(lengths, default=0), "real": real}


def _record(role: str, pass_: str, micro_batches: list[Any], budget: int, packed: bool) -> None:
    entry = RECORDS.setdefault(
        (role, pass_), {"tokens": 0, "real": 0, "micro_batches": 0, "budget": budget}
    )
    for micro_batch in micro_batches:
        input_ids = micro_batch["input_ids"]
        if input_ids.is_nested:
            lengths = [int(n) for n in input_ids.offsets().diff().tolist()]
        else:
            lengths = [int(n) for n in micro_batch["attention_mask"].sum(dim=-1).tolist()]
        size = micro_batch_tokens(lengths, packed)
        entry["tokens"] = max(entry["tokens"], size["tokens"])
        entry["real"] = max(entry["real"], size["real"])
        entry["micro_batches"] += 1
    entry["budget"] = budget


def _install() -> None:
    """Wrap the `prepare_micro_batches` verl's FSDP engine module calls (once per process)."""
    if _INSTALLED:
        return
    check_version()  # the engine path below is verl 0.9.1's
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.fsdp import transformer_impl

    original: Callable[..., Any] = transformer_impl.prepare_micro_batches

    def prepare_micro_batches(data: Any, *args: Any, **kwargs: Any) -> Any:
        micro_batches, indices = original(data, *args, **kwargs)
        if _CURRENT and tu.get_non_tensor_data(data=data, key="use_dynamic_bsz", default=True):
            role, pass_ = _CURRENT[-1]
            sp = int(tu.get_non_tensor_data(data=data, key="sp_size", default=1))
            budget = int(data["max_token_len_per_gpu"]) * sp
            packed = bool(tu.get_non_tensor_data(data=data, key="use_remove_padding", default=True))
            _record(role, pass_, list(micro_batches), budget, packed)
        return micro_batches, indices

    transformer_impl.prepare_micro_batches = prepare_micro_batches
    _INSTALLED.append(True)


@contextmanager
def _recording(role: str, pass_: str):
    _CURRENT.append((role, pass_))
    try:
        yield
    finally:
        _CURRENT.pop()


def watch_engine(engine: Any, role: str) -> None:
    """Record the micro-batches `engine` forms from now on, under `role` (actor / critic)."""
    _install()
    if getattr(engine, "_forge_watched", False):
        return
    original = engine.forward_backward_batch

    def forward_backward_batch(data: Any, loss_function: Any, forward_only: bool = False) -> Any:
        with _recording(role, "infer" if forward_only else "train"):
            return original(data, loss_function, forward_only=forward_only)

    engine.forward_backward_batch = forward_backward_batch  # an instance attribute: this engine
    engine._forge_watched = True


def take_records(role: str) -> dict[str, dict[str, int]]:
    """pass -> the largest micro-batch since the last call (tokens, real, micro_batches,
    budget); the records are cleared."""
    out = {}
    for pass_ in PASSES:
        entry = RECORDS.pop((role, pass_), None)
        if entry is not None:
            out[pass_] = entry
    return out


def _dtype_name(dtypes: set[torch.dtype]) -> str:
    names = sorted(DTYPES.get(d, str(d)) for d in dtypes)
    return "+".join(names) if names else "none"


def _mixed_precision(module: torch.nn.Module) -> tuple[str, str]:
    """(param_dtype, reduce_dtype) of the FSDP2 policies the module's shards run with (torch's
    private `_get_fsdp_state()._fsdp_param_group.mp_policy`: FSDP2 has no public getter;
    'unknown' when that moves). A dtype None in the policy means the parameter's own."""
    from torch.distributed.fsdp import FSDPModule

    params: set[torch.dtype] = set()
    reduces: set[torch.dtype] = set()
    for sub in module.modules():
        if not isinstance(sub, FSDPModule):
            continue
        group = getattr(sub._get_fsdp_state(), "_fsdp_param_group", None)
        policy = getattr(group, "mp_policy", None)
        if policy is None:
            continue
        own = {p.dtype for p in sub.parameters()}
        params |= {policy.param_dtype} if policy.param_dtype is not None else own
        reduces |= {policy.reduce_dtype} if policy.reduce_dtype is not None else own
    if not params:
        return "unknown", "unknown"
    return _dtype_name(params), _dtype_name(reduces)


def engine_settings(engine: Any) -> dict[str, Any]:
    """The settings a built FSDP engine runs with, read from the engine and its module."""
    module = engine.module
    param_dtype, reduce_dtype = _mixed_precision(module)
    floats = [b for b in module.buffers() if b.is_floating_point()]
    return {
        "param_offload": bool(engine.is_param_offload_enabled),
        "optimizer_offload": bool(engine.is_optimizer_offload_enabled),
        "gradient_checkpointing": any(
            getattr(m, "gradient_checkpointing", False) is True for m in module.modules()
        ),
        "fused_kernels": bool(getattr(engine.engine_config, "use_fused_kernels", False)),
        "dtype": _dtype_name({p.dtype for p in module.parameters()}),
        "param_dtype": param_dtype,
        "reduce_dtype": reduce_dtype,
        "buffer_dtype": _dtype_name({b.dtype for b in floats}),
    }
