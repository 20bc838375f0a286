"""Recording a run's provenance: `provenance.json` written at the start and completed at the
end, the failure included (format and fields: `forge_gates.ledger._provenance`)::

    with recorded_run(run_dir, "train", spec) as provenance:   # PROVENANCE_RECORDED
        ...
        provenance.largest_micro_batch({"actor_train": 4096})  # after each update
    # completed, or failed with the exception's fault record (and the exception re-raised)

A process other than the run's main one (a trainer's rank) records its own peaks with
`write_process_peaks`; the end of the run gathers them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from forge_gates._checks import GateError
from forge_gates.files._atomic import atomic_write_json
from forge_gates.ledger._gates import Gate
from forge_gates.ledger._ledger import gate
from forge_gates.ledger._provenance import (
    PEAKS_DIR,
    PEAKS_SCHEMA,
    PROVENANCE_NAME,
    PROVENANCE_SCHEMA,
    Disk,
    Failure,
    Memory,
    ProcessPeak,
    Provenance,
    check_provenance,
)
from forge_gates.machine._host_facts import (
    HERE,
    children_peak_rss_bytes,
    code_version,
    folder_bytes,
    live_children,
    lock_file,
    machine,
    package_versions,
    process_peaks,
)
from forge_gates.spec._config import spec_sha256
from forge_gates.spec._spec import RunSpec


def _now() -> str:
    return datetime.now(UTC).isoformat()


class RunProvenance:
    """One run folder's provenance: `start` writes it (`status = "running"`) and records
    `PROVENANCE_RECORDED`; `finish` completes it, with the failure when there was one."""

    def __init__(self, run_dir: Path, record: Provenance, started: float) -> None:
        self.run_dir = run_dir
        self.record = record
        self._started = started
        self._micro_batches: dict[str, int] = {}

    @classmethod
    def start(
        cls,
        run_dir: str | os.PathLike[str],
        kind: str,
        spec: RunSpec | None = None,
        *,
        ledger: bool = True,
    ) -> RunProvenance:
        """Write `<run_dir>/provenance.json` and record `PROVENANCE_RECORDED` from it, read
        back (GateError when it is missing or malformed). `ledger=False`: the marker only, not
        into `gates.jsonl` (a folder whose ledger is a copy of another run's)."""
        folder = Path(run_dir)
        folder.mkdir(parents=True, exist_ok=True)
        size, started = folder_bytes(folder), time.perf_counter()
        code = code_version(HERE)
        record = Provenance(
            schema_version=PROVENANCE_SCHEMA,
            run_id=folder.name,
            kind=kind,
            phase=spec.phase if spec is not None else None,
            spec_sha256=spec_sha256(spec) if spec is not None else None,
            status="running",
            started_at=_now(),
            finished_at=None,
            wall_s=None,
            command=list(sys.argv),
            code=code,
            packages=package_versions(),
            lock=lock_file(HERE, code.root),
            machine=machine(),
            memory=_memory(folder, {}),
            disk=Disk(bytes_at_start=size, bytes_at_end=None, growth_bytes=None),
            failure=None,
        )
        atomic_write_json(folder / PROVENANCE_NAME, record.model_dump(mode="json"))
        violations, fields = check_provenance(folder)
        fields = {"kind": kind, **fields}
        gate(folder if ledger else None, Gate.PROVENANCE_RECORDED, violations, fields)
        return cls(folder, record, started)

    def largest_micro_batch(self, tokens: Mapping[str, float | int | None]) -> None:
        """Keep, per budget, the largest micro-batch seen so far (tokens; None ignored)."""
        for budget, value in tokens.items():
            if value is not None:
                self._micro_batches[budget] = max(self._micro_batches.get(budget, 0), int(value))

    def finish(self, error: BaseException | None = None) -> Provenance:
        """Complete the file: end time, memory peaks, disk growth, and for `error` its fault
        record. With an error, a record or write that fails is reported on stderr, never raised
        over the run's own error."""
        try:
            record = self._ended(error)
            atomic_write_json(self.run_dir / PROVENANCE_NAME, record.model_dump(mode="json"))
        except Exception as exc:
            if error is None:
                raise
            print(
                f"provenance: expected to record the failure in {self.run_dir / PROVENANCE_NAME}; "
                f"found {type(exc).__name__}: {exc}; fix: free the disk or report the error "
                "(the run's own error follows)",
                file=sys.stderr,
                flush=True,
            )
            return self.record
        self.record = record
        return record

    def _ended(self, error: BaseException | None) -> Provenance:
        size = folder_bytes(self.run_dir)
        start = self.record.disk.bytes_at_start
        return self.record.model_copy(
            update={
                "status": "completed" if error is None else "failed",
                "finished_at": _now(),
                "wall_s": round(time.perf_counter() - self._started, 3),
                "machine": machine(),
                "memory": _memory(self.run_dir, self._micro_batches),
                "disk": Disk(bytes_at_start=start, bytes_at_end=size, growth_bytes=size - start),
                "failure": None if error is None else fault_record(self.run_dir, error),
            }
        )


@contextmanager
def recorded_run(
    run_dir: str | os.PathLike[str], kind: str, spec: RunSpec | None = None
) -> Iterator[RunProvenance]:
    """`RunProvenance.start`, then `finish` when the block ends: completed, or failed with
    the exception's fault record (any exception, Ctrl-C included; it is re-raised)."""
    provenance = RunProvenance.start(run_dir, kind, spec)
    try:
        yield provenance
    except BaseException as error:
        provenance.finish(error)
        raise
    provenance.finish()


def write_process_peaks(
    run_dir: str | os.PathLike[str], role: str, peaks: Sequence[ProcessPeak]
) -> Path:
    """Record processes' own peaks (e.g. every rank of a trainer, as each measured itself) as
    `<run_dir>/process-peaks/<role>.json` (atomic; the latest call wins)."""
    path = Path(run_dir) / PEAKS_DIR / f"{role}.json"
    payload = {"schema": PEAKS_SCHEMA, "processes": [p.model_dump(mode="json") for p in peaks]}
    return atomic_write_json(path, payload)


def _memory(run_dir: Path, micro_batches: dict[str, int]) -> Memory:
    """This process's peaks and those other processes recorded in `run_dir`."""
    processes: list[ProcessPeak] = []
    notes = []
    for path in sorted((run_dir / PEAKS_DIR).glob("*.json")):
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
            if payload.get("schema") != PEAKS_SCHEMA:
                raise ValueError(f"schema {payload.get('schema')!r}, not {PEAKS_SCHEMA}")
            processes += [ProcessPeak.model_validate(p) for p in payload["processes"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
            notes.append(f"{path.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return Memory(
        main=process_peaks("main"),
        children_peak_rss_bytes=children_peak_rss_bytes(),
        processes=processes,
        largest_micro_batch_tokens=dict(sorted(micro_batches.items())),
        notes=notes,
    )


def _step(folder: Path) -> tuple[int, str]:
    tail = folder.name.rsplit("_", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, folder.as_posix())


def fault_record(run_dir: Path, error: BaseException) -> Failure:
    """The seed's fault record of `error` (appendix A): type, message, broken rules, the
    checkpoints left, the child processes still alive and what to do next."""
    kind = type(error)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    violations = [str(v)[:500] for v in getattr(error, "violations", ())]
    found = run_dir.glob("*/global_step_*")
    checkpoints = [p.relative_to(run_dir).as_posix() for p in sorted(found, key=_step)]
    if isinstance(error, KeyboardInterrupt):
        recovery = "interrupted (Ctrl-C or SIGTERM): rerun into a new folder"
    elif isinstance(error, GateError):
        fixes = list(dict.fromkeys(v.fix for v in error.violations))
        recovery = "; ".join(fixes)[:1000] + "; then rerun into a new folder"
    else:
        recovery = "see the traceback in the run's log, fix its cause, rerun into a new folder"
    if checkpoints:
        recovery += f" (a checkpoint left here can be its warm start: {checkpoints[-1]})"
    return Failure(
        type=name,
        message=str(error)[:2000] or repr(error)[:2000],
        violations=violations,
        checkpoints=checkpoints,
        leftover_processes=live_children(),
        recovery=recovery,
    )
