"""PPO_SEPARATED_ROLLOUT_GATE_PASSED is measured from what was launched: the rollout server's
own argv and environment (read from /proc of a real process started like vLLM), the trainer's
processes' environment, and the GPUs the host exposes. It passes the seed's 4+1 topology with
the seed's marker, and fails, each rule named, for a doubled rollout (the trainer's Ray cluster
runs its own rollout replica), a rollout GPU shared with a trainer rank, another max_num_seqs
than the spec's, and an allocator that is set here but not in the trainer's processes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from forge_gates import (
    GateError,
    RolloutTopology,
    TrainerPlacement,
    check_separated_rollout,
    format_marker,
    load_spec,
    read_config,
    read_ledger,
)
from forge_ppo.recipes.train._placement import GpuPlan, separated_rollout_gate, trainer_placement
from forge_rollout import VLLMServer, VLLMStack, free_port, listening_pid


def separated_spec():
    """smoke-4gpu with one separate rollout GPU (the seed's soak topology, 4 + 1)."""
    data = read_config("smoke-4gpu")
    data["resources"].update(rollout_gpus=1, rollout_replicas=1)
    return load_spec(data)


@dataclass
class Topology:
    world_size: int
    device: str


class VerlLike:
    """A trainer that reports its topology as the verl trainer does (`trainer.topology`) and
    whose ranks are real processes of this host, started with this process's environment (as
    it is when the test builds it), each answering with its rank (`ranks_seen()`)."""

    def __init__(self, world_size: int = 4, device: str = "cuda", *, answers=None) -> None:
        self.topology = Topology(world_size, device)
        sleep = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
        self.processes = [
            subprocess.Popen(sleep, stdout=subprocess.PIPE, text=True) for _ in range(world_size)
        ]
        for process in self.processes:  # running Python: its environment is readable whole
            assert process.stdout is not None and process.stdout.readline() == "up\n"
        self.answers = answers or [(rank, world_size) for rank in range(world_size)]

    def ranks_seen(self) -> list[dict]:
        return [
            {"rank": rank, "world_size": size, "pid": process.pid, "node": None}
            for (rank, size), process in zip(self.answers, self.processes, strict=True)
        ]

    def close(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()


@pytest.fixture
def verl_like() -> Iterator[type[VerlLike]]:
    """VerlLike, every one made in the test closed after it."""
    made: list[VerlLike] = []

    class Closed(VerlLike):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    yield Closed
    for trainer in made:
        trainer.close()


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[VLLMStack]:
    """A stack whose server is a real process started with vLLM's flags and the rollout GPU
    (it only sleeps: the gate reads the launched argv and environment, not the weights)."""
    spec = separated_spec()
    stack = VLLMStack(spec, tmp_path, tmp_path, rollout_gpus=("4",))
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--max-num-seqs", "10"]
    process = subprocess.Popen(argv, env={"CUDA_VISIBLE_DEVICES": "4", "PATH": "/usr/bin"})
    stack.server = VLLMServer.__new__(VLLMServer)
    stack.server.process = process
    stack.server_url = "http://127.0.0.1:9"  # nothing answers: the window is simply not read
    try:
        yield stack
    finally:
        process.kill()
        process.wait()


GPUS = GpuPlan(visible=("0", "1", "2", "3", "4"), trainer=("0", "1", "2", "3"), rollout=("4",))


def test_the_seed_topology_passes_with_the_seed_marker(
    launched, tmp_path, monkeypatch, verl_like
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # the trainer's processes inherit it
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    fields = separated_rollout_gate(separated_spec(), verl_like(), launched, tmp_path, GPUS)
    marker = format_marker("PPO_SEPARATED_ROLLOUT_GATE_PASSED", fields)
    assert marker.startswith(
        "PPO_SEPARATED_ROLLOUT_GATE_PASSED trainer_gpus=4 rollout_gpus=1 total_gpus=5 "
        "replicas=1 max_num_seqs=10 async=false"
    )
    assert [r.gate for r in read_ledger(tmp_path)] == ["PPO_SEPARATED_ROLLOUT_GATE_PASSED"]


def test_a_rollout_gpu_shared_with_a_trainer_rank_fails(
    launched, tmp_path, monkeypatch, verl_like
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4")  # the trainer can reach GPU 4 too
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    with pytest.raises(GateError) as error:
        separated_rollout_gate(separated_spec(), verl_like(), launched, tmp_path, GPUS)
    rules = {v.rule: v for v in error.value.violations}
    assert "shared GPU(s) ['4']" in rules["separated.shared_gpu"].found
    assert "5 GPU(s) usable by the trainer" in rules["separated.trainer_gpus"].found
    assert [r.gate for r in read_ledger(tmp_path)] == ["PPO_SEPARATED_ROLLOUT_GATE_FAILED"]


def test_another_max_num_seqs_and_an_unset_allocator_fail(tmp_path, monkeypatch, verl_like) -> None:
    spec = separated_spec()
    stack = VLLMStack(spec, tmp_path, tmp_path, rollout_gpus=("4",))
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--max-num-seqs", "64"]
    process = subprocess.Popen(argv, env={"CUDA_VISIBLE_DEVICES": "4", "PATH": "/usr/bin"})
    stack.server = VLLMServer.__new__(VLLMServer)
    stack.server.process, stack.server_url = process, "http://127.0.0.1:9"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)  # "set" nowhere it counts
    try:
        with pytest.raises(GateError) as error:
            separated_rollout_gate(spec, verl_like(), stack, tmp_path, GPUS)
    finally:
        process.kill()
        process.wait()
    rules = {v.rule: v for v in error.value.violations}
    assert set(rules) == {"separated.max_num_seqs", "separated.allocator"}
    assert rules["separated.max_num_seqs"].found == "--max-num-seqs 64 in the launched command"
    assert (
        "expandable_segments:False in all 4 trainer process(es)"
        in rules["separated.allocator"].expected
    )


def placement(**changes) -> TrainerPlacement:
    values = {
        "backend": "verl", "device": "cuda", "ranks": tuple((r, 4) for r in range(4)),
        "processes": 4,
        "gpus": ("0", "1", "2", "3"), "ray_gpus": 4.0, "rollout_actors": (),
        "alloc_conf": ("expandable_segments:False",) * 4,
    }  # fmt: skip
    return TrainerPlacement(**(values | changes))


def topology(trainer: TrainerPlacement, servers: int = 1) -> RolloutTopology:
    from forge_gates import LaunchedServer

    server = LaunchedServer(
        url="http://h:8000", pid=1, gpus=("4",), max_num_seqs=10, max_model_len=40960
    )
    return RolloutTopology(
        visible_gpus=GPUS.visible, trainer=trainer, servers=(server,) * servers,
        async_rollout=False,
    )  # fmt: skip


def test_a_doubled_rollout_fails() -> None:
    spec = separated_spec()
    assert check_separated_rollout(topology(placement()), spec)[0] == []
    # the seed's 6-GPU run: the trainer started its own vLLM replica beside Forge's server
    doubled = placement(rollout_actors=("vLLMHttpServer",))
    (v,) = check_separated_rollout(topology(doubled), spec)[0]
    assert v.rule == "separated.replicas"
    assert v.found.startswith("2: 1 inference server(s) started by Forge + 1 rollout actor(s)")
    # two Forge servers are a doubled rollout too
    rules = [v.rule for v in check_separated_rollout(topology(placement(), servers=2), spec)[0]]
    assert rules == ["separated.replicas"]


def test_one_trainer_rank_without_the_allocator_fails() -> None:
    alloc = ("expandable_segments:False",) * 3 + ("expandable_segments:True",)
    (v,) = check_separated_rollout(topology(placement(alloc_conf=alloc)), separated_spec())[0]
    assert v.rule == "separated.allocator" and "1 of 4 read differ" in v.found


def test_ranks_are_counted_as_the_processes_answer_not_as_the_spec_says() -> None:
    """The spec's 4 ranks pass only as 4 processes answering ranks 0..3 of one group of 4."""
    spec = separated_spec()
    for ranks, processes in (
        (((0, 4), (1, 4), (2, 4), (2, 4)), 4),  # rank 3 missing, rank 2 twice
        (((0, 2), (1, 2), (0, 2), (1, 2)), 4),  # two process groups of 2
        (tuple((r, 4) for r in range(4)), 3),  # a rank whose process was not found
    ):
        alloc = ("expandable_segments:False",) * processes  # read from each process found
        found = placement(ranks=ranks, processes=processes, alloc_conf=alloc)
        violations = check_separated_rollout(topology(found), spec)[0]
        assert [v.rule for v in violations] == ["separated.ranks"], (ranks, violations)
    two = placement(
        ranks=((0, 2), (1, 2)),
        processes=2,
        gpus=("0", "1"),
        alloc_conf=("expandable_segments:False",) * 2,
    )
    (v,) = check_separated_rollout(topology(two), spec)[0]
    assert v.rule == "separated.trainer_gpus" and "2 rank(s)" in v.found


def test_a_rank_outside_the_group_or_gone_fails_the_gate(
    launched, tmp_path, monkeypatch, verl_like
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    stray = verl_like(answers=[(0, 4), (1, 4), (2, 4), (0, 1)])  # one rank in a group of its own
    with pytest.raises(GateError) as error:
        separated_rollout_gate(separated_spec(), stray, launched, tmp_path / "stray", GPUS)
    assert [v.rule for v in error.value.violations] == ["separated.ranks"]
    assert "(0, 1)" in error.value.violations[0].found
    gone = verl_like()
    gone.processes[3].kill()
    gone.processes[3].wait()
    with pytest.raises(GateError) as error:
        separated_rollout_gate(separated_spec(), gone, launched, tmp_path / "gone", GPUS)
    (v,) = error.value.violations
    assert v.rule == "separated.ranks" and "3 of them found as processes" in v.found


def test_the_local_trainer_is_read_from_this_process(monkeypatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")

    class Local:  # the local trainer: no topology, its actor on the CPU
        class actor:
            device = type("Device", (), {"type": "cpu"})()

    spec = load_spec("smoke-local")
    found = trainer_placement(spec, Local())
    assert (found.device, found.world_size, found.processes, found.gpus) == ("cpu", 1, 1, ())
    assert found.ray_gpus is None and found.alloc_conf == ("expandable_segments:False",)


def test_a_connected_server_on_this_host_is_found_by_its_port(tmp_path) -> None:
    """inference.url on this host: the listening process is found (/proc/net/tcp -> fd) and
    its own argv read; a URL that nothing here listens on is 'not measurable', and fails."""
    port = free_port()
    listen = (
        "import socket, sys, time; s = socket.socket(); "
        "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(60)"
    )
    argv = [sys.executable, "-c", listen, str(port), "--max-num-seqs", "10"]
    process = subprocess.Popen(argv, env={"CUDA_VISIBLE_DEVICES": "4", "PATH": "/usr/bin"})
    try:
        stack = VLLMStack(separated_spec(), tmp_path, tmp_path)
        stack.server_url = f"http://127.0.0.1:{port}"
        for _ in range(200):  # until it listens
            if listening_pid(port) is not None:
                break
            time.sleep(0.05)
        (server,) = stack.servers()
        assert (server.pid, server.max_num_seqs, server.gpus) == (process.pid, 10, ("4",))
    finally:
        process.kill()
        process.wait()
    stack.server_url = "http://rollout-host.invalid:8000"  # another host: nothing to read
    (remote,) = stack.servers()
    assert (remote.pid, remote.gpus, remote.max_num_seqs) == (None, None, None)
    problems = check_separated_rollout(
        RolloutTopology(
            visible_gpus=GPUS.visible, trainer=placement(), servers=(remote,),
            async_rollout=False,
        ),
        separated_spec(),
    )[0]  # fmt: skip
    assert {v.rule for v in problems} == {"separated.max_num_seqs", "separated.rollout_gpus"}
