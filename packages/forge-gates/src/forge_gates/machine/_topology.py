"""The separated-rollout topology as launched, and the gate that judges it.

`RolloutTopology` holds what was measured, never the spec: the GPUs this host exposes, where the
trainer's processes run (their Ray resources and environments, read back from the processes), the
inference servers actually started (each one's argv and environment, read from /proc), and
whether rollouts wait for each pushed adapter. `check_separated_rollout(topology, spec)` lists
every way it differs from the spec's topology (the seed's 6-GPU run doubled vLLM when the trainer
built its own rollout replicas; a rollout GPU shared with a trainer rank starves both), including
the allocator setting in the trainer's processes (`PYTORCH_CUDA_ALLOC_CONF=
expandable_segments:False`: expandable segments cannot be shared by CUDA IPC, which weight sync
between processes relies on).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forge_gates._checks import Check, Violation
from forge_gates.ledger._gates import Gate
from forge_gates.spec._spec import RunSpec

ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
ALLOC_CONF = "expandable_segments:False"


@dataclass(frozen=True, kw_only=True)
class LaunchedServer:
    """One inference server as it runs: read from its process, not from its spec."""

    url: str  # Where it answers.
    pid: int | None  # Its process (None: connected to, not launched here).
    # GPU ids it can use (its CUDA_VISIBLE_DEVICES; every visible GPU when unset; None: not
    # measurable, a server on another host)
    gpus: tuple[str, ...] | None
    max_num_seqs: int | None  # --max-num-seqs it was started with.
    max_model_len: int | None  # The window it reports.


@dataclass(frozen=True, kw_only=True)
class TrainerPlacement:
    """Where the trainer's processes run, read back from them (Ray's actor table, /proc)."""

    backend: str  # backends.trainer of the built trainer.
    device: str  # cpu | cuda, as the built trainer reports it.
    # (rank, world size) as each of the trainer's rank processes reports them (its process
    # group, asked in the process: verl's ranks; the local trainer is rank 0 of 1)
    ranks: tuple[tuple[int, int], ...]
    processes: int  # Trainer rank processes found (this process, or this job's Ray actors).
    gpus: tuple[str, ...]  # GPU ids the trainer's processes can use (union over processes).
    ray_gpus: float | None  # GPUs in the trainer's Ray cluster (None: no Ray).
    rollout_actors: tuple[str, ...]  # Ray actors of the run that are rollout replicas (classes)
    alloc_conf: tuple[str | None, ...]  # PYTORCH_CUDA_ALLOC_CONF per trainer process (None: unset)

    @property
    def world_size(self) -> int:
        """Ranks that answered (one process group only when `check_separated_rollout` says so)."""
        return len(self.ranks)


@dataclass(frozen=True, kw_only=True)
class RolloutTopology:
    """Everything the separated-rollout gate judges."""

    visible_gpus: tuple[str, ...]  # GPU ids this host exposes to the run.
    trainer: TrainerPlacement  # The trainer as built.
    servers: tuple[LaunchedServer, ...]  # Inference servers started.
    async_rollout: bool  # True when rollouts do not wait for the new adapter.


def visible_gpus(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES when set, else `nvidia-smi -L`'s
    indices (none without a driver)."""
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return parse_gpu_list(listed)
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU "))


def parse_gpu_list(value: str) -> tuple[str, ...]:
    """`"0,1, 2"` -> ("0", "1", "2"); empty -> ()."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def check_separated_rollout(
    topology: RolloutTopology, spec: RunSpec
) -> tuple[list[Violation], dict[str, Any]]:
    """Every rule of the separated topology the measured `topology` breaks, and the marker's
    fields (what was measured): trainer_gpus rollout_gpus total_gpus replicas max_num_seqs
    async, then the trainer's device, ranks and allocator setting."""
    res, trainer = spec.resources, topology.trainer
    check = Check(Gate.PPO_SEPARATED_ROLLOUT_GATE_PASSED)
    # 1. one rollout replica: Forge's servers plus any the trainer started on its own
    replicas = len(topology.servers) + len(trainer.rollout_actors)
    check.require(
        replicas == res.rollout_replicas,
        rule="separated.replicas",
        expected=f"{res.rollout_replicas} rollout replica(s) (resources.rollout_replicas)",
        found=f"{replicas}: {len(topology.servers)} inference server(s) started by Forge + "
        f"{len(trainer.rollout_actors)} rollout actor(s) in the trainer's Ray cluster "
        f"{list(trainer.rollout_actors)}",
        fix="the trainer must not build rollout replicas (verl's full trainer does: drive its "
        "actor/critic worker groups only); start exactly one Forge vLLM server",
    )
    # 2. each server as launched: max_num_seqs, its GPUs, none shared with a trainer rank
    rollout_gpus = _check_servers(topology, spec, check)
    # 3. the trainer's placement: its ranks, its Ray GPUs, inside what the host exposes
    trainer_gpus = _check_trainer(topology, spec, check, rollout_gpus)
    # 4. synchronous: every rollout waits for the adapter of the update before it
    check.require(
        topology.async_rollout == res.async_training,
        rule="separated.async",
        expected=f"async = {str(res.async_training).lower()} (rollouts wait for each new adapter)",
        found=f"async = {str(topology.async_rollout).lower()}",
        fix="push the adapter and wait for its proof before the next rollout",
    )
    # 5. the allocator, in the trainer's own processes (not only in this one's environment)
    wrong = [conf for conf in trainer.alloc_conf if not alloc_conf_ok(conf)]
    check.require(
        not wrong and len(trainer.alloc_conf) == trainer.processes,
        rule="separated.allocator",
        expected=f"{ALLOC_CONF_ENV}={ALLOC_CONF} in all {trainer.processes} trainer process(es) "
        "(weights cross processes by CUDA IPC)",
        found=f"{len(wrong)} of {len(trainer.alloc_conf)} read differ: {wrong[:3]}",
        fix=f"export {ALLOC_CONF_ENV}={ALLOC_CONF} before the trainer (and its Ray cluster) "
        "starts; a joined cluster needs it in its own environment",
    )
    fields = {
        "trainer_gpus": trainer_gpus,
        "rollout_gpus": len(rollout_gpus),
        "total_gpus": len(topology.visible_gpus),
        "replicas": replicas,
        "max_num_seqs": ",".join(str(s.max_num_seqs) for s in topology.servers) or None,
        "async": str(topology.async_rollout).lower(),
        "trainer_device": trainer.device,
        "trainer_ranks": trainer.world_size,
        "alloc_conf": ALLOC_CONF if not wrong and trainer.alloc_conf else "mismatch",
    }
    if len(topology.servers) == 1:
        fields["max_num_seqs"] = topology.servers[0].max_num_seqs
    return check.violations, fields


def _check_servers(topology: RolloutTopology, spec: RunSpec, check: Check) -> set[str]:
    """Step 2: each inference server as launched (max_num_seqs, its GPUs), and no rollout GPU
    shared with a trainer process; returns the rollout GPUs the servers use."""
    res, trainer = spec.resources, topology.trainer
    rollout_gpus: set[str] = set()
    for server in topology.servers:
        check.require(
            server.max_num_seqs == res.max_num_seqs,
            rule="separated.max_num_seqs",
            expected=f"--max-num-seqs {res.max_num_seqs} (resources.max_num_seqs) on {server.url}",
            found="not measurable (a server Forge did not start)"
            if server.pid is None
            else f"--max-num-seqs {server.max_num_seqs} in the launched command",
            fix="let the pipeline start vLLM (unset inference.url) with the spec's max_num_seqs",
        )
        gpus = server.gpus
        check.require(
            gpus is not None and len(gpus) == res.rollout_gpus,
            rule="separated.rollout_gpus",
            expected=f"{res.rollout_gpus} GPU(s) for the rollout server (resources.rollout_gpus)",
            found="not measurable" if gpus is None else f"{len(gpus)}: {list(gpus)}",
            fix="launch vLLM pinned to the rollout GPU(s) (CUDA_VISIBLE_DEVICES set by Forge)",
        )
        rollout_gpus |= set(gpus or ())
    shared = sorted(rollout_gpus & set(trainer.gpus))
    check.require(
        not shared,
        rule="separated.shared_gpu",
        expected="no GPU used by both the rollout server and a trainer rank",
        found=f"shared GPU(s) {shared}: rollout {sorted(rollout_gpus)}, trainer "
        f"{sorted(trainer.gpus)}",
        fix="give the trainer's processes CUDA_VISIBLE_DEVICES without the rollout GPU(s)",
    )
    return rollout_gpus


def _check_trainer(
    topology: RolloutTopology, spec: RunSpec, check: Check, rollout_gpus: set[str]
) -> int:
    """Step 3: the trainer as built (GPUs, ranks, its Ray cluster's GPUs), and every GPU in use
    among those the host exposes; returns the trainer's GPU count (0 off CUDA)."""
    res, trainer = spec.resources, topology.trainer
    trainer_gpus = len(trainer.gpus) if trainer.device == "cuda" else 0
    n = trainer.world_size
    check.require(
        sorted(trainer.ranks) == [(r, n) for r in range(n)] and trainer.processes == n,
        rule="separated.ranks",
        expected=f"ranks 0..{n - 1} of one process group of {n}, each a trainer process of "
        "this run (found in this process or among this job's alive Ray actors)",
        found=f"(rank, world size) as the processes report them: {sorted(trainer.ranks)}; "
        f"{trainer.processes} of them found as processes",
        fix="a rank left its process group or another run's workers answered; rebuild the "
        "trainer (one Ray job per run)",
    )
    check.require(
        trainer_gpus == res.trainer_gpus and trainer.world_size == res.trainer_world_size,
        rule="separated.trainer_gpus",
        expected=f"{res.trainer_gpus} trainer GPU(s), {res.trainer_world_size} rank(s)",
        found=f"{trainer_gpus} GPU(s) usable by the trainer's processes ({trainer.device}), "
        f"{trainer.world_size} rank(s)",
        fix="the trainer was built on other resources than the spec names; check "
        "resources.trainer_gpus and the Ray cluster",
    )
    if trainer.ray_gpus is not None and trainer.device == "cuda":
        check.require(
            trainer.ray_gpus == res.trainer_gpus,
            rule="separated.ray_gpus",
            expected=f"{res.trainer_gpus} GPU(s) in the trainer's Ray cluster",
            found=f"{trainer.ray_gpus:g}",
            fix="start (or join) a Ray cluster holding only the trainer GPUs",
        )
    outside = sorted((set(trainer.gpus) | rollout_gpus) - set(topology.visible_gpus))
    total = len(set(trainer.gpus) | rollout_gpus)
    check.require(
        not outside and res.trainer_gpus + res.rollout_gpus <= len(topology.visible_gpus),
        rule="separated.total_gpus",
        expected=f"trainer + rollout = {res.trainer_gpus + res.rollout_gpus} GPU(s) among the "
        f"{len(topology.visible_gpus)} visible {list(topology.visible_gpus)}",
        found=f"{total} in use, not visible: {outside}",
        fix="run on a machine (or CUDA_VISIBLE_DEVICES) with enough GPUs",
    )
    return trainer_gpus


def alloc_conf_ok(value: str | None) -> bool:
    """True when the allocator setting turns expandable segments off (other options allowed)."""
    if value is None:
        return False
    options = dict(part.split(":", 1) for part in value.replace(" ", "").split(",") if ":" in part)
    return options.get("expandable_segments") == "False"
