"""forge_gates.ledger: the gate registry, the run folder's gate ledger, and phase contracts.

Record a gate (a `NAME key=value` line on stdout and a line in `<run_dir>/gates.jsonl`), then
judge a finished run against the contract of its phase::

    from forge_gates import Check, Gate, gate, verify_run
    check = Check(Gate.PPO_SMOKE_PASSED)
    gate(run_dir, check.gate, check.violations, {"updates": 1})   # raises GateError
    verify_run(run_dir, "smoke")                                   # [] = complete

`forge_gates` re-exports every name here; import them from there. This layer imports
`forge_gates.spec`, `forge_gates.files` and `forge_gates._checks`.
"""

from forge_gates.ledger._gates import PENDING, Gate
from forge_gates.ledger._ledger import (
    LEDGER_NAME,
    GateRecord,
    failed_name,
    format_marker,
    gate,
    read_ledger,
    record_gate,
)
from forge_gates.ledger._phases import (
    CONFIG_SUMMARY,
    Requirement,
    new_run_dir,
    phase_contract,
    read_config_summary,
    verify_ledger,
    verify_run,
    write_config_summary,
)
from forge_gates.ledger._provenance import (
    PROVENANCE_NAME,
    PROVENANCE_SCHEMA,
    ProcessPeak,
    Provenance,
    check_provenance,
    read_provenance,
)
from forge_gates.ledger._run_spec import run_spec_gate

__all__ = [
    "CONFIG_SUMMARY",
    "LEDGER_NAME",
    "PENDING",
    "PROVENANCE_NAME",
    "PROVENANCE_SCHEMA",
    "Gate",
    "GateRecord",
    "ProcessPeak",
    "Provenance",
    "Requirement",
    "check_provenance",
    "failed_name",
    "format_marker",
    "gate",
    "new_run_dir",
    "phase_contract",
    "read_config_summary",
    "read_ledger",
    "read_provenance",
    "record_gate",
    "run_spec_gate",
    "verify_ledger",
    "verify_run",
    "write_config_summary",
]
