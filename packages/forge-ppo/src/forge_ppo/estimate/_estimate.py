"""The estimate of one run spec: every GPU role, the largest token budget that fits, the
assumptions. Pure: a spec, a shape, knobs and the GPU's memory in; an `Estimate` out."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import RunSpec
from forge_ppo.estimate._assumptions import Assumption, assumptions
from forge_ppo.estimate._knobs import Knobs, resolve_knobs
from forge_ppo.estimate._roles import RoleEstimate, inference_role, judge, topology, trainer_role
from forge_ppo.estimate._shape import ModelShape

MAX_BUDGET = 2**24  # tokens; the bisection reports this cap when even it fits
DEFAULT_GPU_MEMORY_GB = 80.0  # the seed's A800 80 GB cards


class Estimate(BaseModel):
    """`forge-ppo estimate --json`: exactly these fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    roles: list[RoleEstimate] = Field(
        description="actor, critic (training specs), inference (vLLM)."
    )
    gpu_memory_gb: float = Field(description="Memory of one GPU, GB (GiB).")
    largest_budget_that_fits: int | None = Field(
        description="Largest token budget per GPU (all three budgets set to it) for which the "
        "actor and critic verdicts are fits, by memory alone; None when none does or there is "
        "no trainer role."
    )
    assumptions: list[Assumption] = Field(description="Every assumption with its source.")


def with_budget(spec: RunSpec, tokens: int) -> RunSpec:
    """`spec` with all three token budgets set to `tokens` (no rules re-run: estimate only)."""
    context = spec.context.model_copy(
        update={
            "actor_train_tokens": tokens,
            "critic_train_tokens": tokens,
            "critic_infer_tokens": tokens,
        }
    )
    return spec.model_copy(update={"context": context})


def role_estimates(
    spec: RunSpec, shape: ModelShape, knobs: Knobs, gpu_memory_gb: float
) -> list[RoleEstimate]:
    """actor and critic (when the spec trains), then inference (when it is vLLM)."""
    roles = []
    if spec.ppo is not None:
        roles += [trainer_role(r, spec, shape, knobs, gpu_memory_gb) for r in ("actor", "critic")]
    if topology(spec).vllm:
        roles.append(inference_role(spec, shape, gpu_memory_gb))
    return roles


def _fits(spec: RunSpec, shape: ModelShape, knobs: Knobs, gpu_gb: float, tokens: int) -> bool:
    probe = with_budget(spec, tokens)
    return all(
        judge(trainer_role(r, probe, shape, knobs, gpu_gb).peak_gb, gpu_gb)[0] == "fits"
        for r in ("actor", "critic")
    )


def largest_budget_that_fits(
    spec: RunSpec, shape: ModelShape, knobs: Knobs, gpu_memory_gb: float
) -> int | None:
    """The largest per-GPU token budget whose actor and critic memory verdicts are `fits`, by
    bisection (peaks grow with tokens). Memory alone: a budget below the window is still
    refused by the exact check. None without a trainer role or when even 1 token does not fit."""
    if spec.ppo is None or not _fits(spec, shape, knobs, gpu_memory_gb, 1):
        return None
    low, high = 1, 2
    while _fits(spec, shape, knobs, gpu_memory_gb, high):  # low fits, high does not
        if high >= MAX_BUDGET:
            return MAX_BUDGET
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if _fits(spec, shape, knobs, gpu_memory_gb, middle):
            low = middle
        else:
            high = middle
    return low


def estimate(
    spec: RunSpec,
    shape: ModelShape,
    *,
    knobs: Knobs | None = None,
    knob_sources: dict[str, str] | None = None,
    gpu_memory_gb: float = DEFAULT_GPU_MEMORY_GB,
    gpu_memory_source: str = "default: the seed's 80 GB A800 cards",
) -> Estimate:
    """The per-GPU memory estimate of `spec` on a model of `shape`.

    `knobs` default to the trainer backend's (the seed's for verl; see `_knobs`)."""
    if gpu_memory_gb <= 0:
        raise ValueError(
            f"gpu_memory_gb: expected > 0 GB; found {gpu_memory_gb}; fix: pass the card's "
            "memory, e.g. --gpu-memory-gb 80"
        )
    if knobs is None:
        knobs, knob_sources = resolve_knobs(spec, {})
    return Estimate(
        roles=role_estimates(spec, shape, knobs, gpu_memory_gb),
        gpu_memory_gb=gpu_memory_gb,
        largest_budget_that_fits=largest_budget_that_fits(spec, shape, knobs, gpu_memory_gb),
        assumptions=assumptions(
            spec, shape, knobs, knob_sources or {}, gpu_memory_gb, gpu_memory_source
        ),
    )
