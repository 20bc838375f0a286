"""provenance.json: recorded from a run folder's start, completed at its end or its failure,
read back by its gate and by `verify_run`; never failing a run for a missing git."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

import forge_gates.machine._host_facts as facts
import forge_gates.machine._run_provenance as recording
from forge_gates import (
    PROVENANCE_NAME,
    PROVENANCE_SCHEMA,
    GateError,
    ProcessPeak,
    RunProvenance,
    Violation,
    file_sha256,
    load_spec,
    phase_contract,
    read_ledger,
    read_provenance,
    record_gate,
    recorded_run,
    verify_run,
    write_config_summary,
    write_process_peaks,
)

ROOT = Path(__file__).resolve().parents[3]


def test_a_completed_run_records_every_field(tmp_path: Path) -> None:
    spec = load_spec("smoke-local")
    run_dir = tmp_path / "run"
    with recorded_run(run_dir, "train", spec) as provenance:
        during = read_provenance(run_dir)
        (run_dir / "weights.bin").write_bytes(b"x" * 5000)
        provenance.largest_micro_batch({"actor_train": 900.0, "critic_train": None})
        provenance.largest_micro_batch({"actor_train": 700, "critic_infer": 30})
    record = read_provenance(run_dir)
    # 1. at the start: running, its gate the ledger's first line, pointing at the file
    assert during.status == "running" and during.finished_at is None and during.failure is None
    (first,) = read_ledger(run_dir)
    assert first.gate == "PROVENANCE_RECORDED"
    assert first.fields["file"] == PROVENANCE_NAME and first.fields["kind"] == "train"
    # 2. at the end: completed, the same identity, every section filled
    assert (record.schema_version, record.status, record.kind) == (
        PROVENANCE_SCHEMA, "completed", "train"
    )  # fmt: skip
    assert record.run_id == "run" and record.phase == "smoke"
    assert len(record.spec_sha256 or "") == 64
    assert record.started_at == during.started_at and record.wall_s is not None
    assert record.code.git and len(record.code.commit or "") == 40
    assert record.code.dirty in (True, False) and record.code.root == str(ROOT)
    assert first.fields["commit"] == record.code.commit
    assert record.lock.sha256 == file_sha256(ROOT / "uv.lock")
    assert record.packages["forge-gates"] and "torch" in record.packages
    assert "verl" in record.packages and "vllm" in record.packages  # None when absent
    m = record.machine
    assert m.cpu_count >= 1 and m.cpu_affinity >= 1 and m.cpu_model and m.kernel and m.python
    assert (m.memory_bytes or 0) > 0
    assert record.memory.main.pid == os.getpid() and (record.memory.main.peak_rss_bytes or 0) > 0
    assert record.memory.largest_micro_batch_tokens == {"actor_train": 900, "critic_infer": 30}
    disk = record.disk
    assert disk.bytes_at_start == 0 and disk.bytes_at_end is not None
    assert disk.growth_bytes == disk.bytes_at_end - disk.bytes_at_start >= 5000


def test_a_folder_outside_git_is_said_so_and_never_fails(
    tmp_path: Path, monkeypatch, request
) -> None:
    # an installed copy: a folder with no uv.lock above it (pytest's tmp_path may sit inside a
    # clone, e.g. under nox's tmp, where the clone's own uv.lock is found)
    outside = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else "/"))
    request.addfinalizer(lambda: shutil.rmtree(outside, ignore_errors=True))
    code = facts.code_version(outside / "forge_gates" / "x.py")
    assert not code.git and code.commit is None and code.dirty is None
    assert code.note is not None and "not a git checkout" in code.note
    lock = facts.lock_file(outside / "site-packages" / "forge_gates" / "x.py")
    assert lock.sha256 is None and lock.note is not None and "no uv.lock" in lock.note
    monkeypatch.setattr(facts.shutil, "which", lambda name: None)  # no git, no nvidia-smi
    assert facts.code_version().note == "git not found"
    assert facts.gpus() == ([], None)
    # a run whose code is an installed copy: recorded and completed all the same
    monkeypatch.undo()
    monkeypatch.setattr(recording, "HERE", outside / "site-packages" / "forge_gates" / "x.py")
    with recorded_run(tmp_path / "run", "p0"):
        pass
    record = read_provenance(tmp_path / "run")
    assert record.status == "completed" and not record.code.git and record.lock.sha256 is None


def test_a_failure_is_recorded_with_the_fault_record_and_raised(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    child = None
    problem = Violation(rule="update.rows", expected=">= 1 row", found="0 rows", fix="see X")
    with pytest.raises(GateError, match="update.rows"), recorded_run(run_dir, "train") as p:
        for step in (2, 10):
            (run_dir / "checkpoints" / f"global_step_{step}").mkdir(parents=True)
        p.largest_micro_batch({"actor_train": 64})
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        raise GateError("PPO_SMOKE_UPDATE_PASSED", [problem])
    assert child is not None
    child.kill()
    child.wait()
    record = read_provenance(run_dir)
    failure = record.failure
    assert record.status == "failed" and failure is not None
    assert failure.type == "forge_gates._checks.GateError" and "update.rows" in failure.message
    assert failure.violations == [str(problem)]
    assert failure.checkpoints == ["checkpoints/global_step_2", "checkpoints/global_step_10"]
    assert any(line.startswith(f"{child.pid} ") for line in failure.leftover_processes)
    assert failure.recovery.startswith("see X; then rerun into a new folder")
    assert "checkpoints/global_step_10" in failure.recovery
    # the same fields as a completed run, and verify names the failure with its fix
    assert record.memory.largest_micro_batch_tokens == {"actor_train": 64}
    assert record.disk.growth_bytes is not None and record.code.commit
    rules = {v.rule: v for v in verify_run(run_dir, "smoke")}
    assert rules["provenance.failure"].fix == failure.recovery


def test_an_interrupt_and_a_plain_error_are_recorded_too(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), recorded_run(tmp_path / "a", "train"):
        raise KeyboardInterrupt
    failure = read_provenance(tmp_path / "a").failure
    assert failure is not None and failure.type == "KeyboardInterrupt"
    assert failure.recovery.startswith("interrupted") and failure.checkpoints == []
    with pytest.raises(ValueError), recorded_run(tmp_path / "b", "learn"):
        raise ValueError("expected 1; found 2; fix: 3")
    failure = read_provenance(tmp_path / "b").failure
    assert failure is not None and failure.type == "ValueError"
    assert failure.message == "expected 1; found 2; fix: 3" and "traceback" in failure.recovery


def test_the_file_is_written_atomically(tmp_path: Path, monkeypatch, capsys) -> None:
    """A write that dies before its rename leaves the previous file whole (never a torn one)
    and no temporary file; with a run's own error, that error is the one raised."""
    run_dir = tmp_path / "run"
    provenance = RunProvenance.start(run_dir, "train")
    failing = RunProvenance.start(tmp_path / "b", "train")

    def dies(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("forge_gates.files._atomic.os.replace", dies)
    with pytest.raises(OSError, match="No space"):
        provenance.finish()
    assert read_provenance(run_dir).status == "running"
    assert sorted(p.name for p in run_dir.iterdir()) == [".gates.jsonl.lock", "gates.jsonl",
                                                         PROVENANCE_NAME]  # fmt: skip
    failing.finish(RuntimeError("the run's own error"))  # reported, not raised over it
    assert read_provenance(tmp_path / "b").status == "running"
    err = capsys.readouterr().err
    assert "expected to record the failure" in err and "No space" in err


def test_the_gate_fails_on_a_malformed_file(tmp_path: Path, monkeypatch) -> None:
    def torn(path, obj):
        Path(path).write_text('{"schema_version": "forge-gates/provenance@1", "code": ')

    monkeypatch.setattr(recording, "atomic_write_json", torn)
    with pytest.raises(GateError, match=r"provenance\.valid"):
        RunProvenance.start(tmp_path / "run", "train")
    (record,) = read_ledger(tmp_path / "run")
    assert record.gate == "PROVENANCE_RECORDED_FAILED" and record.fields["rules"] == [
        "provenance.valid"
    ]


def test_verify_requires_provenance_in_training_runs_only(tmp_path: Path) -> None:
    spec = load_spec("smoke-local")
    names = [str(r.gate) for r in phase_contract("smoke", spec)]
    assert names[0] == "PROVENANCE_RECORDED"
    for phase in ("soak", "formal"):
        assert phase_contract(phase)[0].gate == "PROVENANCE_RECORDED"
    assert "PROVENANCE_RECORDED" not in [r.gate for r in phase_contract("p0")]
    run_dir = tmp_path / "run"
    RunProvenance.start(run_dir, "train", spec)
    devnull = open(os.devnull, "w")
    for name in names[1:]:
        record_gate(run_dir, name, {}, stream=devnull)
    write_config_summary(run_dir, spec)
    assert verify_run(run_dir, "smoke") == []  # still running: the run verifies itself
    (run_dir / PROVENANCE_NAME).write_text("{}")
    (v,) = verify_run(run_dir, "smoke")
    assert v.rule == "provenance.valid" and "ValidationError" in v.found
    (run_dir / PROVENANCE_NAME).unlink()
    (v,) = verify_run(run_dir, "smoke")
    assert (v.rule, v.found) == ("provenance.valid", "no such file")


def test_processes_record_their_own_peaks(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with recorded_run(run_dir, "train"):
        ranks = [
            ProcessPeak(role="verl-rank", rank=r, pid=100 + r, peak_rss_bytes=2**30, gpu=[])
            for r in (0, 1)
        ]
        write_process_peaks(run_dir, "verl-ranks", ranks)
        (run_dir / "process-peaks" / "broken.json").write_text('{"schema": "other"}')
    memory = read_provenance(run_dir).memory
    assert [(p.rank, p.pid) for p in memory.processes] == [(0, 100), (1, 101)]
    assert len(memory.notes) == 1 and memory.notes[0].startswith("broken.json: ValueError")
    assert memory.main.role == "main" and memory.main.rank is None


def test_gpu_peaks_come_from_an_initialised_torch_only(monkeypatch) -> None:
    """No torch, or torch without CUDA initialised: nothing (no context is ever created);
    with it: per device that reserved memory, peak allocated and reserved bytes."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert facts.gpu_peaks() == []
    reserved = {0: 3 * 2**30, 1: 0}
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        device_count=lambda: 2,
        max_memory_allocated=lambda i: reserved[i] // 2,
        max_memory_reserved=lambda i: reserved[i],
    )
    fake = types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(cuda="13.0"))
    monkeypatch.setitem(sys.modules, "torch", fake)
    (peak,) = facts.gpu_peaks()
    assert (peak.device, peak.peak_allocated_bytes, peak.peak_reserved_bytes) == (
        0, 3 * 2**29, 3 * 2**30
    )  # fmt: skip
    assert facts.process_peaks("verl-rank", 1).gpu == [peak]
    assert facts.machine().cuda == "13.0"
    cuda.is_initialized = lambda: False
    assert facts.gpu_peaks() == []


def test_nvidia_smi_lines_become_gpus(monkeypatch) -> None:
    monkeypatch.setattr(facts.shutil, "which", lambda name: f"/usr/bin/{name}")
    line = "0, NVIDIA H200, 143771, 580.95.05\n1, NVIDIA H200, 143771, 580.95.05"
    monkeypatch.setattr(facts, "_run", lambda args, cwd=None: line)
    listed, note = facts.gpus()
    assert note is None and [(g.index, g.name, g.memory_total_mib) for g in listed] == [
        (0, "NVIDIA H200", 143771), (1, "NVIDIA H200", 143771)
    ]  # fmt: skip
    monkeypatch.setattr(facts, "_run", lambda args, cwd=None: None)
    assert facts.gpus() == ([], "nvidia-smi failed")


def test_the_record_is_json_with_the_schema_tag(tmp_path: Path) -> None:
    with recorded_run(tmp_path / "run", "demo-policy"):
        pass
    payload = json.loads((tmp_path / "run" / PROVENANCE_NAME).read_text())
    assert payload["schema_version"] == PROVENANCE_SCHEMA and payload["status"] == "completed"
    assert payload["phase"] is None and payload["spec_sha256"] is None
