"""forge_ppo.estimate: the per-GPU memory of a run before launch, from the model's config.json
alone (no weights) and the run spec.

For each GPU role (the actor update, the critic update, vLLM inference) a peak with its named
parts (parameters, gradients, AdamW moments under FSDP2 sharding and offload; activations with
or without checkpointing at the micro-batch's tokens; the logits and their backward at the
vocabulary; vLLM's weights and KV cache), a verdict (`fits` <= 0.85 x the GPU, `at_risk` <= the
GPU, `oom`, `refused` when an exact check fails) and the largest token budget that fits::

    from forge_gates import load_spec
    from forge_ppo.estimate import estimate, load_model_shape

    result = estimate(load_spec("soak-5gpu"), load_model_shape("qwen3-8b"), gpu_memory_gb=80)
    [(r.role, r.peak_gb, r.verdict) for r in result.roles], result.largest_budget_that_fits

Knobs the spec does not carry yet (offload, checkpointing, fused kernels, dtypes) are
`Knobs`, defaulted to the seed's configuration (`resolve_knobs`). Command line:
`forge-ppo estimate --config X [--set k=v] [--model-config PATH] [--gpu-memory-gb N] [--json]`.
"""

from forge_ppo.estimate._assumptions import Assumption
from forge_ppo.estimate._estimate import (
    DEFAULT_GPU_MEMORY_GB,
    Estimate,
    estimate,
    largest_budget_that_fits,
    with_budget,
)
from forge_ppo.estimate._knobs import KNOB_KEYS, ActorKnobs, Knobs, RoleKnobs, resolve_knobs
from forge_ppo.estimate._roles import FITS_FRACTION, RoleEstimate
from forge_ppo.estimate._shape import (
    SHAPES,
    ModelConfigError,
    ModelShape,
    load_model_shape,
    shape_from_config,
)

__all__ = [
    "DEFAULT_GPU_MEMORY_GB",
    "FITS_FRACTION",
    "KNOB_KEYS",
    "SHAPES",
    "ActorKnobs",
    "Assumption",
    "Estimate",
    "Knobs",
    "ModelConfigError",
    "ModelShape",
    "RoleEstimate",
    "RoleKnobs",
    "estimate",
    "largest_budget_that_fits",
    "load_model_shape",
    "resolve_knobs",
    "shape_from_config",
    "with_budget",
]
