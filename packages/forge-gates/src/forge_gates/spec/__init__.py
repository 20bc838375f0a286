"""forge_gates.spec: the typed run spec, its rules, the shipped configs and Harbor task keys.

Constructing a `RunSpec` runs every rule, so an object that exists is valid; configs shipped
in `forge_gates/configs/` load by name::

    from forge_gates import load_spec, spec_sha256
    spec = load_spec("smoke-local")        # or a path, or a dict
    spec_sha256(spec)                      # the hash a run folder records

`forge_gates` re-exports every name here; import them from there. This layer imports
`forge_gates.files` and `forge_gates._checks` only.
"""

from forge_gates.spec._config import (
    load_spec,
    read_config,
    resolve_config,
    shipped_configs,
    spec_sha256,
    validate_config,
)
from forge_gates.spec._memory import ActorSpec, CriticSpec, MixedPrecisionSpec, TrainedModelSpec
from forge_gates.spec._rules import (
    P0_PRODUCTION,
    check_p0_production,
    check_spec,
    p0_spec_values,
)
from forge_gates.spec._schedule import schedule_steps
from forge_gates.spec._spec import (
    AgentSpec,
    BackendSpec,
    CandidateSpec,
    CheckpointSpec,
    ContextSpec,
    DataSpec,
    EvalSpec,
    InferenceSpec,
    LoRASpec,
    ModelSpec,
    PanelSpec,
    Phase,
    PPOSpec,
    ResourceSpec,
    RunSpec,
    ScheduleSpec,
)
from forge_gates.spec._task_config import (
    HarborTaskConfig,
    TaskConfigError,
    check_task_config,
    parse_task_config,
    read_task_config,
    size_to_mib,
)
from forge_gates.spec._task_keys import harbor_fields as harbor_task_fields

__all__ = [
    "ActorSpec",
    "CriticSpec",
    "MixedPrecisionSpec",
    "TrainedModelSpec",
    "P0_PRODUCTION",
    "AgentSpec",
    "BackendSpec",
    "CandidateSpec",
    "CheckpointSpec",
    "HarborTaskConfig",
    "ContextSpec",
    "DataSpec",
    "EvalSpec",
    "InferenceSpec",
    "LoRASpec",
    "ModelSpec",
    "PPOSpec",
    "PanelSpec",
    "Phase",
    "ResourceSpec",
    "RunSpec",
    "ScheduleSpec",
    "TaskConfigError",
    "check_p0_production",
    "check_spec",
    "check_task_config",
    "harbor_task_fields",
    "load_spec",
    "p0_spec_values",
    "parse_task_config",
    "read_config",
    "read_task_config",
    "resolve_config",
    "schedule_steps",
    "shipped_configs",
    "size_to_mib",
    "spec_sha256",
    "validate_config",
]
