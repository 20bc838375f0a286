"""forge_gates: typed run specs and fail-closed gates for every Forge pipeline.

Record a gate (prints `NAME key=value ...` and appends to `<run_dir>/gates.jsonl`)::

    from forge_gates import Check, gate

    check = Check("PPO_SMOKE_TOKEN_BUDGET_GATE_PASSED")
    check.require(budget >= window, rule="budget.actor_train", expected=f">= {window}",
                  found=budget, fix="raise context.actor_train_tokens")
    gate(run_dir, check.gate, check.violations, {"required": window})  # raises GateError

Shared contracts (one definition each, used by every package)::

    from forge_gates import canonical_json, sha256_canonical, tree_sha256, read_jsonl
    sha256_canonical({"lr": 1.0}) == sha256_canonical({"lr": 1})   # numbers as values
    tree_sha256("tasks/textkit-truncate-width")                    # a task folder's content hash
    read_jsonl("runs/x/metrics.jsonl", torn_tail="skip")           # file:line on a bad line

Load a checked run spec (shipped configs are named without a path) and verify a finished run::

    from forge_gates import load_spec, verify_run
    spec = load_spec("smoke-local")
    problems = verify_run("runs/ppo_smoke/20261129T180000Z", "smoke")  # [] = complete
"""

from forge_gates._atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    fsync_path,
    staging_dir,
    sweep_stale_staging,
)
from forge_gates._canonical import (
    canonical_json,
    file_sha256,
    sha256_canonical,
    sha256_text,
    tree_files,
    tree_sha256,
)
from forge_gates._checks import Check, GateError, Violation
from forge_gates._config import (
    load_spec,
    read_config,
    resolve_config,
    shipped_configs,
    spec_sha256,
    validate_config,
)
from forge_gates._gates import PENDING, Gate
from forge_gates._help import HelpFormatter, use_help_formatter
from forge_gates._jsonl import (
    JsonLine,
    JsonLinesError,
    append_jsonl,
    iter_jsonl,
    jsonl_line,
    read_jsonl,
)
from forge_gates._ledger import (
    LEDGER_NAME,
    GateRecord,
    failed_name,
    format_marker,
    gate,
    read_ledger,
    record_gate,
)
from forge_gates._phases import (
    CONFIG_SUMMARY,
    Requirement,
    new_run_dir,
    phase_contract,
    read_config_summary,
    verify_ledger,
    verify_run,
    write_config_summary,
)
from forge_gates._preflight import (
    check_backends,
    check_executables,
    check_free_disk,
    check_gpus,
    check_host_memory,
    check_package_versions,
    free_disk_gib,
    gpu_count,
    hint_spec,
    host_memory_gib,
    kubeconfig_found,
    preflight,
    vllm_python,
    vllm_version,
)
from forge_gates._rules import P0_PRODUCTION, check_p0_production, check_spec, p0_spec_values
from forge_gates._schedule import schedule_steps
from forge_gates._signals import Interrupt, sigterm_as_interrupt
from forge_gates._spec import (
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
from forge_gates._task_config import check_task_config
from forge_gates._topology import (
    ALLOC_CONF,
    ALLOC_CONF_ENV,
    LaunchedServer,
    RolloutTopology,
    TrainerPlacement,
    alloc_conf_ok,
    check_separated_rollout,
    parse_gpu_list,
    visible_gpus,
)
from forge_gates._versions import installed_version, parse_specifier, version_satisfies

__all__ = [
    "ALLOC_CONF",
    "ALLOC_CONF_ENV",
    "CONFIG_SUMMARY",
    "LEDGER_NAME",
    "P0_PRODUCTION",
    "PENDING",
    "AgentSpec",
    "BackendSpec",
    "CandidateSpec",
    "Check",
    "CheckpointSpec",
    "ContextSpec",
    "DataSpec",
    "EvalSpec",
    "Gate",
    "GateError",
    "GateRecord",
    "HelpFormatter",
    "InferenceSpec",
    "Interrupt",
    "JsonLine",
    "JsonLinesError",
    "LaunchedServer",
    "LoRASpec",
    "ModelSpec",
    "PPOSpec",
    "PanelSpec",
    "Phase",
    "Requirement",
    "ResourceSpec",
    "RolloutTopology",
    "RunSpec",
    "ScheduleSpec",
    "TrainerPlacement",
    "Violation",
    "alloc_conf_ok",
    "append_jsonl",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "canonical_json",
    "check_backends",
    "check_executables",
    "check_free_disk",
    "check_gpus",
    "check_host_memory",
    "check_p0_production",
    "check_package_versions",
    "check_separated_rollout",
    "check_spec",
    "check_task_config",
    "failed_name",
    "file_sha256",
    "format_marker",
    "free_disk_gib",
    "fsync_path",
    "gate",
    "gpu_count",
    "hint_spec",
    "host_memory_gib",
    "installed_version",
    "iter_jsonl",
    "jsonl_line",
    "kubeconfig_found",
    "load_spec",
    "new_run_dir",
    "p0_spec_values",
    "parse_gpu_list",
    "parse_specifier",
    "phase_contract",
    "preflight",
    "read_config",
    "read_config_summary",
    "read_jsonl",
    "read_ledger",
    "record_gate",
    "resolve_config",
    "schedule_steps",
    "sha256_canonical",
    "sha256_text",
    "shipped_configs",
    "sigterm_as_interrupt",
    "spec_sha256",
    "staging_dir",
    "sweep_stale_staging",
    "tree_files",
    "tree_sha256",
    "use_help_formatter",
    "validate_config",
    "verify_ledger",
    "verify_run",
    "version_satisfies",
    "visible_gpus",
    "vllm_python",
    "vllm_version",
    "write_config_summary",
]
