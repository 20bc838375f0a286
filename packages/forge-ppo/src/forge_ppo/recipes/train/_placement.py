"""Where the trainer and the rollout server run, decided before either starts and measured
after both exist, for PPO_SEPARATED_ROLLOUT_GATE_PASSED (forge_gates.check_separated_rollout).

    gpus = assign_gpus(spec)              # the first trainer_gpus, then rollout_gpus
    prepare_trainer_env(gpus.trainer)     # CUDA_VISIBLE_DEVICES + allocator, for the trainer
    ... the stack (vLLM pinned to gpus.rollout) and the trainer are built ...
    separated_rollout_gate(spec, trainer, live, run_dir, gpus)   # read back from the processes

The trainer's side is read from the trainer's own processes. Each rank answers in its process
with its rank, its process group's world size, its pid and node (the verl trainer's
`ranks_seen()`; the local trainer is this process, rank 0 of 1): the gate counts those, never
the spec. For a trainer on Ray, the ranks' processes are looked up among this job's alive
actors in Ray's actor table (rollout replicas among them are counted as replicas) and each
one's environment is read on its node; without Ray, from /proc of this host.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_gates import (
    ALLOC_CONF,
    ALLOC_CONF_ENV,
    Gate,
    RolloutTopology,
    RunSpec,
    TrainerPlacement,
    check_separated_rollout,
    gate,
    parse_gpu_list,
    visible_gpus,
)
from forge_ppo._protocol import Trainer
from forge_rollout import InferenceStack

# Ray actor classes that serve rollouts (verl's vLLM / SGLang / TRT-LLM replicas and servers)
ROLLOUT_ACTOR = re.compile(r"rollout|vllm|sglang|trtllm|llmserver|asyncllm", re.IGNORECASE)


@dataclass(frozen=True)
class GpuPlan:
    """The GPUs the host exposes at start, and which go to the trainer and the rollout server."""

    visible: tuple[str, ...]
    trainer: tuple[str, ...]
    rollout: tuple[str, ...]


def assign_gpus(spec: RunSpec) -> GpuPlan:
    """The first `trainer_gpus` visible GPUs to the trainer, the next `rollout_gpus` to the
    rollout server (preflight has checked there are enough)."""
    visible = visible_gpus()
    trainer = spec.resources.trainer_gpus if spec.phase != "p0" else 0
    return GpuPlan(
        visible, visible[:trainer], visible[trainer : trainer + spec.resources.rollout_gpus]
    )


def prepare_trainer_env(trainer_ids: tuple[str, ...]) -> None:
    """The environment the trainer (and a Ray cluster it starts) inherits: only the trainer
    GPUs visible, and the allocator without expandable segments (CUDA IPC cannot share them)."""
    os.environ[ALLOC_CONF_ENV] = ALLOC_CONF
    if trainer_ids:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(trainer_ids)


def _environ(pid: int) -> dict[str, str]:
    """A process's initial environment from /proc (what it was started with)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
    return dict(e.partition("=")[::2] for e in raw.split("\0") if "=" in e)


def _environ_if_alive(pid: int) -> dict[str, str] | None:
    try:
        return _environ(pid)
    except (FileNotFoundError, ProcessLookupError):
        return None


def _ray_actors() -> tuple[list[dict[str, Any]], float] | None:
    """This job's alive Ray actors and the cluster's GPUs, or None when no Ray is running here
    (the local trainer). Ray is never imported for that answer."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    from ray._private import state  # the GCS actor table (no dashboard needed)

    job = ray.get_runtime_context().get_job_id()
    actors = [
        a
        for a in state.actors().values()
        if a.get("State") == "ALIVE" and str(a.get("JobID")) == job
    ]
    return actors, float(ray.cluster_resources().get("GPU", 0.0))


def _actor_environ(actor: dict[str, Any]) -> dict[str, str]:
    """An actor process's environment: from /proc when it runs on this node, else read by a
    task pinned to the actor's node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = actor["Address"]["NodeID"]
    if node == ray.get_runtime_context().get_node_id():
        return _environ(int(actor["Pid"]))
    read = ray.remote(num_cpus=0)(_environ).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)
    )
    return ray.get(read.remote(int(actor["Pid"])), timeout=180)


def trainer_placement(spec: RunSpec, trainer: Trainer) -> TrainerPlacement:
    """The built trainer's placement, read back from its processes: the verl trainer's ranks
    each answer with their rank, world size, pid and node (`ranks_seen()`), and their
    processes are looked up among this job's alive Ray actors; the local trainer is this
    process, rank 0 of 1."""
    topology = getattr(trainer, "topology", None)  # the verl trainer: (world_size, device)
    if topology is not None:
        device = str(topology.device)
        seen = list(trainer.ranks_seen())  # type: ignore[attr-defined]
    else:  # the local trainer: one process, this one
        actor = getattr(trainer, "actor", None)
        device = str(getattr(getattr(actor, "device", None), "type", "cpu"))
        seen = [{"rank": 0, "world_size": 1, "pid": os.getpid(), "node": None}]
    ranks = tuple((int(r["rank"]), int(r["world_size"])) for r in seen)
    found = _ray_actors()
    if found is None:  # no Ray: the rank processes of this host (the local trainer: this one)
        pids = sorted({int(r["pid"]) for r in seen})
        read = [dict(os.environ) if pid == os.getpid() else _environ_if_alive(pid) for pid in pids]
        envs, ray_gpus, rollout = [env for env in read if env is not None], None, ()
    else:
        actors, ray_gpus = found
        rollout = tuple(
            a["ActorClassName"] for a in actors if ROLLOUT_ACTOR.search(a["ActorClassName"])
        )
        keys = {(r["node"], int(r["pid"])) for r in seen}
        trainers = [a for a in actors if (a["Address"]["NodeID"], int(a["Pid"])) in keys]
        envs = [_actor_environ(a) for a in trainers]
    gpus: set[str] = set()
    if device == "cuda":
        for env in envs:  # unset: the process may use every GPU the host exposes
            listed = env.get("CUDA_VISIBLE_DEVICES")
            gpus |= set(visible_gpus(env) if listed is None else parse_gpu_list(listed))
    return TrainerPlacement(
        backend=spec.backends.trainer,
        device=device,
        ranks=ranks,
        processes=len(envs),
        gpus=tuple(sorted(gpus)),
        ray_gpus=ray_gpus,
        rollout_actors=rollout,
        alloc_conf=tuple(env.get(ALLOC_CONF_ENV) for env in envs),
    )


def separated_rollout_gate(
    spec: RunSpec, trainer: Trainer, live: InferenceStack, run_dir: Path, gpus: GpuPlan
) -> dict[str, Any]:
    """PPO_SEPARATED_ROLLOUT_GATE_PASSED from what was launched (fails closed, every rule)."""
    topology = RolloutTopology(
        visible_gpus=gpus.visible,
        trainer=trainer_placement(spec, trainer),
        servers=live.servers(),
        async_rollout=live.async_rollout,
    )
    violations, fields = check_separated_rollout(topology, spec)
    gate(run_dir, Gate.PPO_SEPARATED_ROLLOUT_GATE_PASSED, violations, fields)
    return fields
