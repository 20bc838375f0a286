"""forge_gates.machine: what the machine and the launched processes really are.

Preflight (disk, GPUs, memory, executables, package versions, backends), the separated-rollout
gate (reads back the launched topology), signal handling, version checks, and a run's
provenance (code, packages, machine, peaks, disk growth: `provenance.json`)::

    from forge_gates import preflight, check_separated_rollout
    problems = preflight(spec, run_dir)                 # [] = this machine can run the spec
    violations, fields = check_separated_rollout(topology, spec)   # what was launched
    with recorded_run(run_dir, "train", spec) as provenance: ...  # provenance.json

`forge_gates` re-exports every name here; import them from there. This layer imports
`forge_gates.ledger`, `forge_gates.spec` and `forge_gates._checks`.
"""

from forge_gates.machine._host_facts import process_peaks
from forge_gates.machine._preflight import (
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
from forge_gates.machine._run_provenance import RunProvenance, recorded_run, write_process_peaks
from forge_gates.machine._signals import Interrupt, sigterm_as_interrupt
from forge_gates.machine._topology import (
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
from forge_gates.machine._versions import installed_version, parse_specifier, version_satisfies

__all__ = [
    "ALLOC_CONF",
    "ALLOC_CONF_ENV",
    "Interrupt",
    "LaunchedServer",
    "RolloutTopology",
    "RunProvenance",
    "TrainerPlacement",
    "alloc_conf_ok",
    "check_backends",
    "check_executables",
    "check_free_disk",
    "check_gpus",
    "check_host_memory",
    "check_package_versions",
    "check_separated_rollout",
    "free_disk_gib",
    "gpu_count",
    "hint_spec",
    "host_memory_gib",
    "installed_version",
    "kubeconfig_found",
    "parse_gpu_list",
    "parse_specifier",
    "preflight",
    "process_peaks",
    "recorded_run",
    "sigterm_as_interrupt",
    "version_satisfies",
    "visible_gpus",
    "vllm_python",
    "vllm_version",
    "write_process_peaks",
]
