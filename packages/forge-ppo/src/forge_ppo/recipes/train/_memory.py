"""The memory estimate in preflight: a GPU spec whose estimated per-GPU peak does not fit, or
whose exact checks fail (a token budget below the longest sequence, a KV cache that cannot hold
one sequence of the window), is refused before any run folder exists, with the estimate's parts
(`forge-ppo estimate` prints the same table). `at_risk` is printed, not refused."""

from __future__ import annotations

import sys
from pathlib import Path

from forge_gates import RunSpec, Violation
from forge_ppo.estimate import estimate, load_model_shape
from forge_ppo.estimate.cli import gpu_memory

REFUSED_VERDICTS = ("oom", "refused")


def memory_violations(spec: RunSpec, model_dir: Path) -> list[Violation]:
    """The estimate's refusals for a GPU spec (none for a CPU spec or a model without a
    config.json the estimate can read: that model's own loading fails with its reason)."""
    if spec.resources.trainer_gpus == 0 and spec.resources.rollout_gpus == 0:
        return []
    try:
        shape = load_model_shape(model_dir)
    except (OSError, ValueError) as exc:
        print(f"memory estimate: skipped ({exc})", file=sys.stderr)
        return []
    gb, source = gpu_memory(None, spec, None)
    result = estimate(spec, shape, gpu_memory_gb=gb, gpu_memory_source=source)
    violations = []
    for role in result.roles:
        line = f"memory estimate: {role.role} {role.verdict} {role.peak_gb:.1f}/{gb:.0f} GB"
        print(line, file=sys.stderr)
        if role.verdict in REFUSED_VERDICTS:
            parts = ", ".join(f"{name} {value:.1f}" for name, value in role.parts.items())
            violations.append(
                Violation(
                    rule=f"preflight.memory.{role.role}",
                    expected=f"the {role.role}'s estimated per-GPU peak to fit {gb:.0f} GB "
                    f"({source}) and its exact checks to hold",
                    found=f"{role.verdict}: {role.peak_gb:.1f} GB ({parts}); "
                    + "; ".join(role.reasons),
                    fix=_bf16_first(role.parts) + "lower the token budgets (largest that fits: "
                    f"{result.largest_budget_that_fits}), turn on offload or gradient "
                    "checkpointing, or add GPUs; see `forge-ppo estimate --config ...`",
                )
            )
    return violations


def _bf16_first(parts: dict[str, float]) -> str:
    """The first fix where the models compute in fp32 on a GPU: their attention keeps every
    layer's attention matrices there (`attention_scores`), which bf16 does not."""
    if not parts.get("attention_scores"):
        return ""
    return (
        f"set actor.dtype and critic.dtype to bf16 (in fp32 attention keeps every layer's "
        f"attention matrices: {parts['attention_scores']:.1f} GB of this peak), or "
    )
