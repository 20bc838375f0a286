"""`<run_dir>/provenance.json`: where a run came from and what it cost, and its ledger line.

Schema `forge-gates/provenance@1` (written atomically by `forge_gates.machine`'s
`recorded_run`: once when the run folder is made, `status = "running"`, and again when the run
ends, `"completed"` or `"failed"` with the failure):

- `code`: the git commit of the clone the code runs from and whether it is dirty (tracked files
  changed), or `git = false` with the reason (an installed wheel, no git): never a failure;
- `packages`: the versions of the forge packages and the key third-party ones (None: not
  installed), by distribution metadata only; `lock`: the SHA-256 of the workspace's `uv.lock`;
- `machine`: CPU model, cores, memory, OS, kernel, Python; the GPUs (model, memory, driver)
  from `nvidia-smi` and the CUDA version torch was built with, when there are any;
- `memory`: the peak host RSS of this process and of its largest reaped child, every process
  that recorded its own peaks (`process-peaks/<role>.json`: a trainer's ranks, with their GPU
  peaks), this process's peak GPU memory per device, and the largest micro-batch per budget;
- `disk`: the run folder's bytes at start and at the end, and the growth;
- `failure` (a failed run, the seed's fault-record appendix): the exception's type and message,
  the broken rules, the checkpoints written, the child processes still alive, the recovery.

`PROVENANCE_RECORDED` (first line of the ledger) is recorded once the file is written and read
back (`check_provenance`): it fails only when the file is missing or malformed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forge_gates._checks import Violation

PROVENANCE_NAME = "provenance.json"
PROVENANCE_SCHEMA = "forge-gates/provenance@1"
PEAKS_DIR = "process-peaks"  # <run_dir>/process-peaks/<role>.json: processes' own peaks
PEAKS_SCHEMA = "forge-gates/process-peaks@1"
Status = Literal["running", "completed", "failed"]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CodeVersion(_Section):
    """The code the run executes."""

    git: bool = Field(description="Whether the code runs from a git checkout.")
    commit: str | None = Field(description="HEAD's commit (None without git).")
    dirty: bool | None = Field(description="Tracked files differ from HEAD (None without git).")
    root: str | None = Field(description="The checkout's top folder (None without git).")
    note: str | None = Field(description="Why there is no commit, when there is none.")


class LockFile(_Section):
    """The workspace's lock file."""

    path: str | None = Field(description="The `uv.lock` found (None: none).")
    sha256: str | None = Field(description="Its SHA-256 (None: none found).")
    note: str | None = Field(description="Why there is no hash, when there is none.")


class Gpu(_Section):
    """One GPU as `nvidia-smi` lists it."""

    index: int = Field(description="Its index on the machine (not CUDA_VISIBLE_DEVICES's).")
    name: str = Field(description="Model name.")
    memory_total_mib: int | None = Field(description="Its memory, MiB.")
    driver: str | None = Field(description="Driver version.")


class Machine(_Section):
    """The machine the run's main process ran on."""

    hostname: str = Field(description="Host name.")
    cpu_model: str = Field(description="CPU model (/proc/cpuinfo), or 'unknown'.")
    cpu_count: int = Field(description="Logical CPUs of the machine.")
    cpu_affinity: int = Field(description="Logical CPUs this process may run on.")
    memory_bytes: int | None = Field(description="Physical memory (MemTotal).")
    os: str = Field(description="OS and libc (platform.platform()).")
    kernel: str = Field(description="Kernel release.")
    python: str = Field(description="Python version and implementation.")
    gpus: list[Gpu] = Field(description="Every GPU nvidia-smi lists (empty: none).")
    cuda: str | None = Field(description="CUDA torch was built with (torch loaded), else None.")
    visible_devices: str | None = Field(description="CUDA_VISIBLE_DEVICES, when set.")
    note: str | None = Field(description="What could not be read, when something could not.")


class GpuPeak(_Section):
    """One device's peak memory in one process (torch's caching allocator)."""

    device: int = Field(description="The device index as the process sees it.")
    peak_allocated_bytes: int = Field(description="torch.cuda.max_memory_allocated.")
    peak_reserved_bytes: int = Field(description="torch.cuda.max_memory_reserved.")


class ProcessPeak(_Section):
    """One process's peaks."""

    role: str = Field(description="What the process is: main, or e.g. verl-actor.")
    rank: int | None = Field(description="Its rank in a distributed trainer (None: not one).")
    pid: int = Field(description="Process id.")
    peak_rss_bytes: int | None = Field(description="Peak resident set (VmHWM / ru_maxrss).")
    gpu: list[GpuPeak] = Field(description="Per device with memory reserved (empty: none).")


class Memory(_Section):
    """What the run held at its peaks."""

    main: ProcessPeak = Field(description="This (the run's main) process.")
    children_peak_rss_bytes: int | None = Field(
        description="The largest peak RSS of a reaped child process (RUSAGE_CHILDREN; Linux "
        "counts the pages a child had before its exec: at least the parent's RSS then)."
    )
    processes: list[ProcessPeak] = Field(description="Processes that recorded their own peaks.")
    largest_micro_batch_tokens: dict[str, int] = Field(
        description="Per token budget, the largest micro-batch the trainer formed (tokens)."
    )
    notes: list[str] = Field(description="Peak records that could not be read, and why.")


class Disk(_Section):
    """The run folder's size."""

    bytes_at_start: int = Field(description="Bytes in the run folder when recording began.")
    bytes_at_end: int | None = Field(description="Bytes when the run ended (None: running).")
    growth_bytes: int | None = Field(description="End minus start (None: running).")


class Failure(_Section):
    """A failed run's fault record (the seed's appendix A)."""

    type: str = Field(description="The exception's type.")
    message: str = Field(description="Its message (first 2,000 characters).")
    violations: list[str] = Field(description="The broken rules of a failed gate.")
    checkpoints: list[str] = Field(description="Checkpoint folders the run left.")
    leftover_processes: list[str] = Field(description="Child processes alive at the failure.")
    recovery: str = Field(description="What to do next.")


class Provenance(_Section):
    """The whole `provenance.json`."""

    schema_version: Literal["forge-gates/provenance@1"] = Field(description="File schema.")
    run_id: str = Field(description="The run folder's name.")
    kind: str = Field(description="What wrote it: train, p0, learn, demo-policy, ...")
    phase: str | None = Field(description="The spec's phase (None: no spec).")
    spec_sha256: str | None = Field(description="SHA-256 of the resolved spec (None: no spec).")
    status: Status = Field(description="running, completed or failed.")
    started_at: str = Field(description="When recording began, ISO-8601 with time zone.")
    finished_at: str | None = Field(description="When the run ended (None: running).")
    wall_s: float | None = Field(description="Seconds from start to end (None: running).")
    command: list[str] = Field(description="The process's command line (sys.argv).")
    code: CodeVersion
    packages: dict[str, str | None] = Field(description="Distribution -> version (None: absent).")
    lock: LockFile
    machine: Machine
    memory: Memory
    disk: Disk
    failure: Failure | None = Field(description="The fault record of a failed run.")


def read_provenance(run_dir: str | os.PathLike[str]) -> Provenance:
    """`<run_dir>/provenance.json`, validated; raises ValueError saying what is wrong."""
    path = Path(run_dir) / PROVENANCE_NAME
    try:
        return Provenance.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise ValueError(f"{path}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from exc


def check_provenance(run_dir: str | os.PathLike[str]) -> tuple[list[Violation], dict[str, Any]]:
    """The provenance file read back: (violations, the ledger fields). A violation only when
    it is missing or malformed, or records a failure."""
    try:
        record = read_provenance(run_dir)
    except ValueError as exc:
        found = "no such file" if not (Path(run_dir) / PROVENANCE_NAME).is_file() else str(exc)
        return [
            Violation(
                rule="provenance.valid",
                expected=f"a {PROVENANCE_SCHEMA} file at {Path(run_dir) / PROVENANCE_NAME}",
                found=found[:500],
                fix="runs record it from the start (forge_gates.recorded_run); rerun into a "
                "new folder, and report a malformed one as a bug",
            )
        ], {}
    problems = []
    if record.failure is not None:
        problems.append(
            Violation(
                rule="provenance.failure",
                expected="a run that did not fail",
                found=f"{record.failure.type}: {record.failure.message[:300]}",
                fix=record.failure.recovery,
            )
        )
    fields = {
        "file": PROVENANCE_NAME,
        "status": record.status,
        "commit": record.code.commit,
        "dirty": record.code.dirty,
        "lock_sha256": record.lock.sha256,
    }
    return problems, fields
