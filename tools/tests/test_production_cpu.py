"""tools/production_cpu.py: the separated-rollout gate read back from a ledger, the processes a
run left found by its marker or its folders, and the configs the session runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nox_support
import production_cpu as production
import pytest

from forge_gates import load_spec

MEASURED = {
    "trainer_gpus": 0,
    "rollout_gpus": 0,
    "total_gpus": 0,
    "replicas": 1,
    "max_num_seqs": 4,
    "async": "false",
    "trainer_device": "cpu",
    "trainer_ranks": 2,
    "alloc_conf": "expandable_segments:False",
}


def _ledger(run_dir: Path, *records: tuple[str, dict]) -> Path:
    lines = [json.dumps({"gate": g, "fields": f, "at": "2026-12-03T00:00:00+00:00"}) for g, f in
             records]  # fmt: skip
    (run_dir / "gates.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def test_the_separated_rollout_gate_is_read_back_with_its_fields(tmp_path: Path) -> None:
    run = _ledger(tmp_path, ("RUN_SPEC_GATE_PASSED", {}), (production.SEPARATED, MEASURED))
    assert production.separated_rollout(run) == MEASURED


@pytest.mark.parametrize(
    "records, found",
    [
        ([("RUN_SPEC_GATE_PASSED", {})], "found 0 passed, 0 failed"),
        ([("PPO_SEPARATED_ROLLOUT_GATE_FAILED", {})], "found 0 passed, 1 failed"),
        ([(production.SEPARATED, MEASURED)] * 2, "found 2 passed, 0 failed"),
    ],
)
def test_a_missing_failed_or_doubled_gate_fails_naming_it(tmp_path, records, found) -> None:
    with pytest.raises(ValueError, match=found):
        production.separated_rollout(_ledger(tmp_path, *records))


def test_another_topology_than_the_stand_ins_fails_naming_the_fields(tmp_path: Path) -> None:
    measured = MEASURED | {"trainer_ranks": 1, "replicas": 2}
    run = _ledger(tmp_path, (production.SEPARATED, measured))
    with pytest.raises(ValueError, match=r"found \{'replicas': 2, 'trainer_ranks': 1\}"):
        production.separated_rollout(run)


def test_the_shipped_configs_are_the_topology_the_session_expects() -> None:
    smoke, soak = load_spec("smoke-production-cpu"), load_spec("soak-production-cpu")
    for spec in (smoke, soak):
        backends = (spec.backends.trainer, spec.backends.inference, spec.backends.sandbox)
        assert backends == ("verl", "vllm", "kubernetes")
        assert spec.resources.trainer_cpu_ranks == production.EXPECTED_TOPOLOGY["trainer_ranks"]
        assert spec.resources.rollout_replicas == production.EXPECTED_TOPOLOGY["replicas"]
        assert spec.resources.trainer_gpus == spec.resources.rollout_gpus == 0
        assert spec.inference.url is None  # the session passes its one server's url
        assert spec.checkpoint.warm_start is None  # vLLM refuses the demo policy's lm_head LoRA
        # the session serves the demo policy merged into model.path: its agent limits must let
        # the demo policy's actions through (max_tokens 160: its longest is 141 tokens)
        assert spec.agent == load_spec("smoke-local").agent
        # the merged model's own lm_head is sharded apart by verl's FSDP2: the fused kernel
        # would multiply by a DTensor
        assert spec.actor.fused_kernels is False
    assert (smoke.phase, smoke.schedule.total_updates) == ("smoke", 1)
    assert (soak.phase, soak.schedule.total_updates) == ("soak", 3)
    same = ("model", "context", "agent", "backends", "inference", "resources", "ppo", "lora")
    assert all(getattr(smoke, part) == getattr(soak, part) for part in same)


def _proc(root: Path, pid: str, cmdline: bytes, environ: bytes = b"") -> None:
    (root / pid).mkdir(parents=True)
    (root / pid / "cmdline").write_bytes(cmdline)
    (root / pid / "environ").write_bytes(environ)


def test_processes_left_finds_the_runs_marker_and_folders_only(tmp_path: Path) -> None:
    _proc(tmp_path, "10", b"python\0-m\0ray.worker\0", b"PATH=/bin\0FORGE_RUN=1\0")
    _proc(tmp_path, "11", b"bwrap\0--bind\0/tmp/forge-sbx-42-x/workspace\0/workspace\0")
    _proc(tmp_path, "12", b"python\0other\0", b"FORGE_RUN=2\0")  # another run's marker
    _proc(tmp_path, "13", b"")  # a kernel thread or a zombie: no command line
    _proc(tmp_path, "14", b"sleep\0infinity\0", b"FORGE_RUN=1X\0")  # not the exact marker
    (tmp_path / "self").mkdir()
    found = production.processes_left(["forge-sbx-42-"], "FORGE_RUN=1", proc=tmp_path)
    assert found == [
        "10 python -m ray.worker",
        "11 bwrap --bind /tmp/forge-sbx-42-x/workspace /workspace",
    ]


def test_a_real_process_with_the_marker_is_found_until_it_is_gone() -> None:
    marker = f"{production.MARKER}=test-{os.getpid()}"
    env = {**os.environ, production.MARKER: marker.split("=", 1)[1]}
    code = "import time; print('up', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        # running (a process in the middle of exec shows no command line or environment yet)
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        found = production.wait_processes_gone([], marker, timeout_s=0.5, poll_s=0.1)
        assert [line.split()[0] for line in found] == [str(child.pid)]
    finally:
        child.kill()
        child.wait()
    assert production.wait_processes_gone([], marker, timeout_s=5, poll_s=0.1) == []


class Session:
    """What `k8s_api` uses of a nox session: the venv's bin and `error`."""

    bin = str(Path(sys.executable).parent)

    def error(self, message: str) -> None:
        raise RuntimeError(message)


def test_the_local_runtime_api_server_serves_and_stops_with_no_pod(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    subprocess.run(
        [str(Path(sys.executable).parent / "forge-data"), "demo-tasks", "--out", str(tasks)],
        check=True,
        capture_output=True,
    )
    with nox_support.k8s_api(Session(), tasks, tmp_path / "api", {}, "local") as (config, api):
        text = Path(config).read_text()
        assert 'owner = "nox-k8s"' in text and "[images]" in text
        assert api.process.poll() is None
    assert api.returncode == 0  # exited on SIGTERM with no pod left
