"""`RUN_SPEC_GATE_PASSED`: the spec a run folder holds is the spec the run validated and uses.

Read back from `<run_dir>/config-summary.json` (never the object in memory restated): the file
parses with its schema, its spec passes the schema and every rule again, its recorded SHA-256
is that spec's, and both equal the spec the run holds. A summary edited, truncated or written
from another spec, or a spec built without its rules, fails the gate with each difference.

    write_config_summary(run_dir, spec)
    run_spec_gate(run_dir, spec)      # records RUN_SPEC_GATE_PASSED, or _FAILED and raises
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from forge_gates._checks import Check, Violation
from forge_gates.ledger._gates import Gate
from forge_gates.ledger._ledger import GateRecord, gate
from forge_gates.ledger._phases import CONFIG_SUMMARY, SUMMARY_SCHEMA
from forge_gates.spec._config import spec_sha256, validate_config
from forge_gates.spec._spec import RunSpec

FIX = "rerun into a new folder; never edit config-summary.json by hand"


def _read_back(path: Path, check: Check) -> tuple[dict | None, RunSpec | None]:
    """(payload, the spec it holds re-validated with every rule), each None when unreadable."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        check.add(Violation(rule="run_spec.summary", expected=f"a readable {SUMMARY_SCHEMA} "
                            f"file at {path}", found=f"{type(exc).__name__}: {exc}"[:300],
                            fix=FIX))  # fmt: skip
        return None, None
    schema = payload.get("schema") if isinstance(payload, dict) else None
    check.require(
        schema == SUMMARY_SCHEMA,
        rule="run_spec.schema",
        expected=f"schema {SUMMARY_SCHEMA!r}",
        found=repr(schema),
        fix=FIX,
    )
    data = payload.get("spec") if isinstance(payload, dict) else None
    if not isinstance(data, dict):
        check.add(Violation(rule="run_spec.spec", expected="the resolved spec under 'spec'",
                            found=repr(data)[:200], fix=FIX))  # fmt: skip
        return payload if isinstance(payload, dict) else None, None
    spec, violations = validate_config(data)
    for v in violations:  # the schema and every rule, again, on what the folder holds
        check.add(v.model_copy(update={"rule": f"run_spec.rules.{v.rule}"}))
    return payload, spec


def run_spec_gate(run_dir: str | os.PathLike[str], spec: RunSpec) -> GateRecord:
    """Record RUN_SPEC_GATE_PASSED (phase, name, sha256) when the run folder's summary holds
    `spec`, valid under every rule; else RUN_SPEC_GATE_FAILED listing each difference."""
    check = Check(Gate.RUN_SPEC_GATE_PASSED)
    want = spec_sha256(spec)
    payload, saved = _read_back(Path(run_dir) / CONFIG_SUMMARY, check)
    if payload is not None:
        check.require(
            payload.get("sha256") == want,
            rule="run_spec.sha256",
            expected=f"the recorded sha256 = the run's spec ({want[:16]}...)",
            found=f"{str(payload.get('sha256'))[:16]}...",
            fix=FIX,
        )
    if saved is not None:
        got = spec_sha256(saved)
        check.require(
            got == want,
            rule="run_spec.round_trip",
            expected=f"the spec read back from {CONFIG_SUMMARY} = the run's spec ({want[:16]}...)",
            found=f"a spec hashing to {got[:16]}... (differs in: {_differences(spec, saved)})",
            fix=FIX,
        )
    fields = {"phase": spec.phase, "name": spec.name, "sha256": want}
    return gate(run_dir, check.gate, check.violations, fields)


def _differences(want: RunSpec, got: RunSpec) -> str:
    """Top-level tables whose content differs (at most 5), for the found text."""
    a, b = want.summary(), got.summary()
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return ", ".join(keys[:5]) or "nothing visible"
