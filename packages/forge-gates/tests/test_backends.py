"""Backends are named in the spec, the topology fields need the engines that use them, and
preflight refuses a backend this Forge cannot drive or this machine cannot run."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from forge_gates import (
    Violation,
    check_backends,
    kubeconfig_found,
    load_spec,
    read_config,
    shipped_configs,
    validate_config,
)

LOCAL_ONLY = {"trainer": ["local"], "inference": ["local"], "sandbox": ["local"]}
EVERY = {
    "trainer": ["local", "verl"],
    "inference": ["local", "vllm"],
    "sandbox": ["local", "kubernetes", "docker"],
}


@pytest.mark.parametrize("name", shipped_configs())
def test_shipped_configs_name_their_engines(name: str) -> None:
    """A config's name says its engines: `*-local` / `*-cpu` run on this machine, each engine
    local unless the name names it (`-k8s-` pods, `-docker-` containers, `-verl-` the verl
    trainer, `-vllm-` vLLM), except `-production-cpu`: every production engine on its CPU
    stand-in; any other config is production (vLLM, Kubernetes, verl for training)."""
    backends = load_spec(name).backends
    if name.endswith("-production-cpu"):
        assert (backends.trainer, backends.inference, backends.sandbox) == (
            "verl",
            "vllm",
            "kubernetes",
        )
    elif name.endswith(("-local", "-cpu")):
        assert (backends.trainer, backends.inference, backends.sandbox) == (
            "verl" if "-verl-" in name else "local",
            "vllm" if "-vllm-" in name else "local",
            "kubernetes" if "-k8s-" in name else "docker" if "-docker-" in name else "local",
        )
    else:
        assert backends.inference == "vllm" and backends.sandbox == "kubernetes"
        if not name.startswith("p0"):
            assert backends.trainer == "verl"


def test_gpus_with_a_local_engine_are_a_rule_violation() -> None:
    data = read_config("smoke-4gpu")
    data["backends"]["trainer"] = "local"
    spec, violations = validate_config(data)
    assert spec is None
    (v,) = [v for v in violations if v.rule == "backends.trainer"]
    assert "trainer_gpus = 4" in v.found and "'local'" in v.found and "verl" in v.fix
    data = read_config("p0-64k")
    data["backends"]["inference"] = "local"
    spec, violations = validate_config(data)
    assert [v.rule for v in violations] == ["backends.inference"]
    assert "rollout_gpus = 1" in violations[0].found


def test_a_backend_this_forge_does_not_drive_is_refused_with_the_fix() -> None:
    spec = load_spec("smoke-4gpu")
    violations = check_backends(spec, LOCAL_ONLY, env={})
    assert [v.rule for v in violations] == [
        "preflight.backend.trainer",
        "preflight.backend.inference",
        "preflight.backend.sandbox",
    ]
    assert "'verl', which this version of Forge does not implement" in violations[0].found
    assert all("*-local config" in v.fix for v in violations)
    # a concern the pipeline does not use (P0 trains nothing) is not checked
    assert check_backends(load_spec("p0-local"), {"inference": ["local"]}, env={}) == []
    assert check_backends(load_spec("smoke-local"), LOCAL_ONLY, env={}) == []


def test_missing_packages_and_kubeconfig_are_each_named(tmp_path: Path) -> None:
    spec = load_spec("smoke-4gpu")
    violations = check_backends(spec, EVERY, env={"HOME": str(tmp_path)})
    rules = {v.rule: v for v in violations}
    # nothing of the production stack is installed in the test environment
    assert "preflight.backend.trainer.verl" in rules and "preflight.backend.trainer.ray" in rules
    assert rules["preflight.backend.trainer.verl"].found == "not installed"
    assert "preflight.backend.inference.vllm" in rules
    kube = rules["preflight.backend.sandbox.kubeconfig"]
    assert kube.found == "none" and "KUBECONFIG" in kube.fix
    # with credentials present the kubeconfig rule holds
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\n")
    assert kubeconfig_found({"KUBECONFIG": f"/nonexistent:{config}"}) == str(config)
    assert kubeconfig_found({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "in-cluster service account"
    assert kubeconfig_found({"HOME": str(tmp_path)}) is None
    later = check_backends(spec, EVERY, env={"KUBECONFIG": str(config)})
    assert "preflight.backend.sandbox.kubeconfig" not in {v.rule for v in later}


def test_the_kubernetes_backend_needs_its_config_named_explicitly(tmp_path: Path) -> None:
    spec = load_spec("smoke-k8s-local")
    home = {"HOME": str(tmp_path)}
    rules = {v.rule: v for v in check_backends(spec, EVERY, env=home)}
    assert rules["preflight.backend.sandbox.config"].found == "unset"
    assert "FORGE_KUBERNETES_CONFIG" in rules["preflight.backend.sandbox.config"].fix
    assert rules["preflight.backend.sandbox.kubeconfig"].found == "none"
    missing = {**home, "FORGE_KUBERNETES_CONFIG": str(tmp_path / "absent.toml")}
    (v,) = [v for v in check_backends(spec, EVERY, env=missing) if v.rule.endswith(".config")]
    assert v.found.endswith("absent.toml is not a file")
    # the config's own kubeconfig counts (no KUBECONFIG needed); a stale one is named
    kubeconfig, config = tmp_path / "kubeconfig", tmp_path / "k8s.toml"
    config.write_text(f'kubeconfig = "{kubeconfig}"\n')
    named = {**home, "FORGE_KUBERNETES_CONFIG": str(config)}
    (v,) = check_backends(spec, EVERY, env=named)
    assert v.rule == "preflight.backend.sandbox.kubeconfig" and "is not a file" in v.found
    kubeconfig.write_text("apiVersion: v1\n")
    assert check_backends(spec, EVERY, env=named) == []
    config.write_text("kubeconfig = [\n")
    (v,) = check_backends(spec, EVERY, env={**named, "KUBECONFIG": str(kubeconfig)})
    assert v.rule == "preflight.backend.sandbox.config" and "TOMLDecodeError" in v.found


def test_cpu_ranks_must_divide_the_batch_and_belong_to_the_verl_trainer() -> None:
    """smoke-verl-cpu runs verl on 2 CPU ranks; 3 ranks do not divide its batch of 4, and CPU
    ranks with the local trainer (or beside trainer GPUs) would be ignored."""
    data = read_config("smoke-verl-cpu")
    data["resources"]["trainer_cpu_ranks"] = 3
    spec, violations = validate_config(data)
    assert spec is None
    (v,) = [v for v in violations if v.rule == "ppo.batch_size.world_size"]
    assert "(3)" in v.expected and "4 % 3 = 1" in v.found
    data = read_config("smoke-verl-cpu")
    data["backends"]["trainer"] = "local"
    _, violations = validate_config(data)
    (v,) = [v for v in violations if v.rule == "backends.trainer.cpu_ranks"]
    assert "trainer_cpu_ranks = 2" in v.found and "'local'" in v.found
    assert load_spec("smoke-verl-cpu").resources.trainer_world_size == 2


def test_a_verl_run_must_prove_its_ranks_loaded_the_weights() -> None:
    from forge_gates import Gate, phase_contract

    verl = [r.gate for r in phase_contract("smoke", load_spec("smoke-verl-cpu"))]
    local = [r.gate for r in phase_contract("smoke", load_spec("smoke-local"))]
    assert Gate.PPO_TRAINER_RANKS_LOAD_PASSED in verl
    assert Gate.PPO_TRAINER_RANKS_LOAD_PASSED not in local
    # after any warm start, before the budgets read back from the built workers
    at = verl.index(Gate.PPO_TRAINER_RANKS_LOAD_PASSED)
    assert at < verl.index(Gate.PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED)


def _answer_once(server: socket.socket, reply: bytes) -> threading.Thread:
    """Accept one connection on `server`, read the request, send `reply`."""

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _daemon_rules(env: dict[str, str]) -> dict[str, Violation]:
    spec = load_spec("smoke-docker-local")
    return {v.rule: v for v in check_backends(spec, EVERY, env=env) if "docker_daemon" in v.rule}


def test_the_docker_backend_needs_a_daemon_at_docker_host(tmp_path: Path) -> None:
    """Preflight probes $DOCKER_HOST (GET /_ping on a unix socket, a connect on tcp://) and
    refuses a run with no daemon there, naming DOCKER_HOST and tools/docker_daemon.py."""
    spec = load_spec("smoke-docker-local")
    assert spec.backends.sandbox == "docker"
    # 1. nothing listening: refused with the fix
    (v,) = _daemon_rules({"DOCKER_HOST": f"unix://{tmp_path}/absent.sock"}).values()
    assert "absent.sock" in v.found and "Error" in v.found
    assert "DOCKER_HOST" in v.fix and "tools/docker_daemon.py" in v.fix
    # 2. a socket that answers the ping with 200: accepted; with 500: refused with the status
    for reply, refused in (
        (b"HTTP/1.1 200 OK\r\n\r\nOK", False),
        (b"HTTP/1.1 500 No\r\n\r\n", True),
    ):
        path = str(tmp_path / "d.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(path)
            server.listen(1)
            thread = _answer_once(server, reply)
            rules = _daemon_rules({"DOCKER_HOST": f"unix://{path}"})
            thread.join(5)
        Path(path).unlink()
        assert bool(rules) is refused, rules
        if refused:
            assert "500" in rules["preflight.backend.sandbox.docker_daemon"].found
    # 3. tcp://: a listening port is accepted, a closed one refused; an unknown scheme refused
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert _daemon_rules({"DOCKER_HOST": f"tcp://127.0.0.1:{port}"}) == {}
    assert _daemon_rules({"DOCKER_HOST": f"tcp://127.0.0.1:{port}"})
    (v,) = _daemon_rules({"DOCKER_HOST": "npipe:////./pipe/docker"}).values()
    assert "expected unix://" in v.found
    # 4. without DOCKER_HOST the SDK's default socket is what is probed
    (v,) = _daemon_rules({}).values() or [None]
    assert v is None or "/var/run/docker.sock" in v.found
