"""Ray for the verl trainer: join the cluster at `resources.ray_address`, or start a local one
sized by the spec; stop only what was started here, and nothing is left behind."""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from urllib.parse import urlparse

import ray

from forge_gates import RunSpec
from forge_ppo.verl._config import VerlTopology

CONNECT_TIMEOUT_S = 5.0
# Ray keeps its Unix sockets under its temp dir; under a deep TMPDIR (nox's session tmp,
# /work/main/.nox/verl/tmp) `ray.init` was measured to hang for good while connecting, so a
# local cluster gets a short one (FORGE_RAY_TMPDIR overrides)
RAY_TMPDIR = "/tmp/forge-ray"
# Ray waits a hard-coded 30 s for a new raylet to register (node.py:428); on a loaded 2-core
# machine that was measured to run out: a local start is tried this many times
START_ATTEMPTS = 3


class RayUnavailableError(RuntimeError):
    """The Ray cluster the spec names cannot be reached."""


@dataclass
class RayCluster:
    """A connection; `started` when this process started the cluster (then `stop` ends it)."""

    address: str
    started: bool

    def stop(self) -> None:
        if ray.is_initialized():
            ray.shutdown()  # a local cluster started by ray.init dies with this call


def _probe(address: str) -> None:
    """Fail fast (seconds, not Ray's minutes of retries) when nothing answers at `address`."""
    if address == "auto":
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    host, port = parsed.hostname or "", parsed.port or 6379
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        raise RayUnavailableError(
            f"resources.ray_address: expected a Ray cluster answering at {address}; found "
            f"{error.__class__.__name__}: {error}; fix: start it (`ray start --head`) or unset "
            "ray_address to let Forge start a local one"
        ) from None


def start_ray(spec: RunSpec, topology: VerlTopology, env: dict[str, str]) -> RayCluster:
    """Join `resources.ray_address` or start a local cluster with the trainer's resources;
    `env` reaches every worker (runtime_env)."""
    runtime_env = {"env_vars": env}
    address = spec.resources.ray_address
    if address:
        _probe(address)
        ray.init(address=address, runtime_env=runtime_env, ignore_reinit_error=False)
        return RayCluster(address=address, started=False)
    cpus = topology.world_size if topology.device == "cpu" else None
    gpus = topology.world_size if topology.device == "cuda" else None
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            context = ray.init(
                num_cpus=cpus,
                num_gpus=gpus,
                include_dashboard=False,
                runtime_env=runtime_env,
                log_to_driver=True,
                _temp_dir=os.environ.get("FORGE_RAY_TMPDIR", RAY_TMPDIR),
            )
            return RayCluster(address=context.address_info.get("address", "local"), started=True)
        except Exception as error:  # Ray raises a bare Exception for this one
            if "timed out during startup" not in str(error):
                raise
            ray.shutdown()
            print(
                f"FORGE_RAY_START attempt={attempt} raylet registration timed out (Ray waits "
                "30 s); retrying",
                file=sys.stderr,
                flush=True,
            )
    raise RayUnavailableError(
        f"a local Ray cluster: expected its raylet to register within Ray's 30 s, "
        f"{START_ATTEMPTS} times; found a timeout each time (an overloaded machine?); fix: stop "
        "other jobs, or start Ray yourself (`ray start --head`) and set resources.ray_address"
    )
