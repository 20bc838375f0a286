"""Torch threads per CPU rank: Ray sets none for verl's workers, so Forge shares this host's
cores out among the ranks it starts (2 ranks on 2 cores ran 4 compute threads before)."""

from __future__ import annotations

import os
from types import SimpleNamespace

from forge_ppo.verl._config import VerlTopology
from forge_ppo.verl._trainer import VerlTrainer, rank_threads


def test_a_local_cluster_shares_the_cores_among_the_ranks(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
    assert rank_threads(2, None) == "4"
    assert rank_threads(3, None) == "2"
    assert rank_threads(16, None) == "1"  # never zero


def test_an_explicit_setting_wins_and_a_joined_cluster_decides_itself(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert rank_threads(2, None) == "3"
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")  # OpenMP's nested list: passed on as it is
    assert rank_threads(2, None) == "4,2"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert rank_threads(2, "10.0.0.1:6379") is None


def test_the_cpu_workers_get_the_platform_and_their_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    fake = SimpleNamespace(
        topology=VerlTopology(world_size=2, device="cpu"),
        spec=SimpleNamespace(resources=SimpleNamespace(ray_address=None)),
    )
    env = VerlTrainer._worker_env(fake)  # type: ignore[arg-type]
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["VERL_PLATFORM"] == "cpu"
    gpu = SimpleNamespace(topology=VerlTopology(world_size=4, device="cuda"), spec=fake.spec)
    assert "OMP_NUM_THREADS" not in VerlTrainer._worker_env(gpu)  # type: ignore[arg-type]
