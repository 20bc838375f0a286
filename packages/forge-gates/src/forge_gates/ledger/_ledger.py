"""The gate ledger: `<run_dir>/gates.jsonl`, one JSON line per recorded gate, plus stdout markers.

Line format (schema `forge-gates/ledger@1`, one object per line):
    {"gate": "PPO_SMOKE_PASSED", "fields": {"updates": 1}, "at": "2026-11-29T18:00:00.123456+00:00"}
A failed gate is recorded as `<NAME minus _PASSED>_FAILED` with its violations, so a reader can
tell "failed" from "never ran". Lines are RFC 8259 JSON: a non-finite number in a field is
written as the string "inf", "-inf" or "nan" (as the stdout marker shows it). Every append
rewrites the file atomically (the ledger is small) under an exclusive lock, so concurrent
writers and a kill mid-write never corrupt it.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forge_gates._checks import GateError, Violation
from forge_gates.files._atomic import atomic_write_bytes
from forge_gates.files._jsonl import iter_jsonl

LEDGER_NAME = "gates.jsonl"
Scalar = str | int | float | bool | None


class GateRecord(BaseModel):
    """One line of the gate ledger."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gate: str = Field(description="Gate name, e.g. PPO_SMOKE_PASSED or PPO_SMOKE_FAILED.")
    fields: dict[str, Any] = Field(default_factory=dict, description="The gate's key=value facts.")
    at: str = Field(description="When it was recorded, ISO-8601 with time zone.")

    @property
    def failed(self) -> bool:
        return self.gate.endswith("_FAILED")


def failed_name(gate: str) -> str:
    """`PPO_SMOKE_PASSED` -> `PPO_SMOKE_FAILED`; a name without `_PASSED` gets `_FAILED` added."""
    return (gate.removesuffix("_PASSED") or gate) + "_FAILED"


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(value)
    if isinstance(value, list | tuple):
        return ",".join(_format_value(v) for v in value)
    text = str(value)
    if not text or any(c.isspace() for c in text) or '"' in text:
        return json.dumps(text)
    return text


def _finite_json(value: Any) -> Any:
    """`value` with non-finite floats as the strings "inf" / "-inf" / "nan" (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_json(item) for item in value]
    return value


def format_marker(gate: str, fields: Mapping[str, Any]) -> str:
    """The stdout marker line: `NAME key=value key=value` (booleans as true/false)."""
    parts = [gate] + [f"{key}={_format_value(value)}" for key, value in fields.items()]
    return " ".join(parts)


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / f".{LEDGER_NAME}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


FAILED_TEXT = 300  # characters of each expected / found kept in a `_FAILED` line


def record_gate(
    run_dir: str | os.PathLike[str] | None,
    gate: str,
    fields: Mapping[str, Any] | None = None,
    *,
    stream: TextIO | None = None,
) -> GateRecord:
    """Append `gate` to `<run_dir>/gates.jsonl` (atomically, fsynced) and print its marker.

    `run_dir=None` prints the marker only (a gate passed before a run folder may exist).
    """
    fields = dict(fields or {})
    record = GateRecord(gate=gate, fields=fields, at=datetime.now(UTC).isoformat())
    dumped = record.model_dump()
    try:
        line = json.dumps(dumped, sort_keys=False, default=str, allow_nan=False) + "\n"
    except ValueError:  # a NaN or infinity in a field
        line = json.dumps(_finite_json(dumped), sort_keys=False, default=str) + "\n"
    if run_dir is not None:
        path = Path(run_dir) / LEDGER_NAME
        with _locked(Path(run_dir)):
            before = path.read_bytes() if path.exists() else b""
            if before and not before.endswith(b"\n"):
                before += b"\n"
            atomic_write_bytes(path, before + line.encode("utf-8"))
    out = stream or sys.stdout
    print(format_marker(gate, fields), file=out, flush=True)
    return record


def gate(
    run_dir: str | os.PathLike[str] | None,
    name: str,
    violations: Sequence[Violation],
    fields: Mapping[str, Any] | None = None,
    *,
    stream: TextIO | None = None,
) -> GateRecord:
    """Pass or fail the gate `name`.

    With no violations: record `name` with `fields` and print its marker. Otherwise record
    `<name>_FAILED` with the violations, each rule with what it expected and what was found
    (when a run folder exists), print them all to stderr and raise one GateError listing every
    one of them.
    """
    if not violations:
        return record_gate(run_dir, name, fields, stream=stream)
    failure = {
        "violations": len(violations),
        "rules": [v.rule for v in violations],
        "expected": [v.expected[:FAILED_TEXT] for v in violations],
        "found": [v.found[:FAILED_TEXT] for v in violations],
    }
    error = GateError(name, violations)
    if run_dir is not None and Path(run_dir).is_dir():
        record_gate(run_dir, failed_name(name), failure, stream=stream)
    print(str(error), file=sys.stderr, flush=True)
    error.printed = True
    raise error


def read_ledger(run_dir: str | os.PathLike[str]) -> list[GateRecord]:
    """Every record of `<run_dir>/gates.jsonl`, in order.

    Raises GateError naming the file and line for a missing ledger or a malformed line.
    """
    path = Path(run_dir) / LEDGER_NAME
    if not path.is_file():
        raise GateError(
            "LEDGER",
            [
                Violation(
                    rule="ledger.exists",
                    expected=f"a gate ledger at {path}",
                    found="no such file",
                    fix="point at a run folder written by a Forge pipeline",
                )
            ],
        )
    records: list[GateRecord] = []
    problems: list[Violation] = []
    for line in iter_jsonl(path):
        try:
            if line.error is not None:
                raise ValueError(line.error)
            records.append(GateRecord.model_validate(line.value))
        except (ValueError, ValidationError) as exc:
            problems.append(
                Violation(
                    rule="ledger.line",
                    expected='{"gate": NAME, "fields": {...}, "at": ISO-8601}',
                    found=f"{line.where}: {str(exc).splitlines()[0]}",
                    fix="the ledger was edited or corrupted; rerun the pipeline into a new folder",
                )
            )
    if problems:
        raise GateError("LEDGER", problems)
    return records
