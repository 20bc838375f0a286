"""Every rollout recipe takes `backends.sandbox`: train and P0 accept local, kubernetes and
docker; a Docker run without a daemon is refused by preflight before any run folder exists;
bwrap is required only for the local sandbox; P0 runs every job in the backend's sandboxes and
closes the backend."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge_gates import GateError, load_spec, read_config, validate_config
from forge_ppo.recipes._sandboxes import SANDBOX_BACKENDS, sandbox_problems
from forge_ppo.recipes.p0 import _p0 as p0
from forge_ppo.recipes.p0 import run_p0
from forge_ppo.recipes.train import train


def _spec(config: str, sandbox: str):
    data = read_config(config)
    data["backends"]["sandbox"] = sandbox
    spec, violations = validate_config(data)
    assert spec is not None, violations
    return spec


def _no_cgroup_writable(access: Any) -> Any:
    return lambda path, mode, **k: (
        not str(path).startswith("/sys/fs/cgroup") and access(path, mode, **k)
    )


def test_the_local_sandbox_needs_are_checked_for_the_local_sandbox_only(monkeypatch) -> None:
    """bwrap (and nsenter, setpriv, sh) and, as root, writable cgroups, each missing piece one
    violation with its fix; nothing of it for the image backends."""
    import os
    import shutil

    assert SANDBOX_BACKENDS == ("local", "kubernetes", "docker")
    real_which = shutil.which
    monkeypatch.setattr(
        shutil,
        "which",
        lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k),
    )
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "access", _no_cgroup_writable(os.access))
    problems = {v.rule: v for v in sandbox_problems(load_spec("smoke-local"))}
    assert set(problems) == {"tools.bwrap", "cgroups.writable"}, problems
    assert "run as root; or delegate" in problems["cgroups.writable"].fix
    assert sandbox_problems(load_spec("smoke-k8s-local")) == []
    assert sandbox_problems(load_spec("smoke-docker-local")) == []


def test_a_user_other_than_root_without_cgroups_passes_the_sandbox_preflight(monkeypatch) -> None:
    """Another user gets rlimits where no cgroup is writable (forge-sandbox's test_rootless
    runs such sandboxes): the preflight asks for nothing more than the tools."""
    import os

    monkeypatch.setattr(os, "geteuid", lambda: 1001)
    monkeypatch.setattr(os, "access", _no_cgroup_writable(os.access))
    assert sandbox_problems(load_spec("smoke-local")) == []


@pytest.fixture
def no_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    host = f"unix://{tmp_path}/no-daemon.sock"
    monkeypatch.setenv("DOCKER_HOST", host)
    return host


def test_a_docker_training_run_without_a_daemon_is_refused_before_a_run_folder(
    no_daemon: str, tmp_path: Path
) -> None:
    with pytest.raises(GateError) as refused:
        train(load_spec("smoke-docker-local"), run_dir=tmp_path / "run", cache_dir=tmp_path / "c")
    assert refused.value.gate == "PPO_PREFLIGHT_PASSED"
    rules = {v.rule: v for v in refused.value.violations}
    daemon = rules["preflight.backend.sandbox.docker_daemon"]
    assert "no-daemon.sock" in daemon.found and "DOCKER_HOST" in daemon.fix
    assert "preflight.backend.sandbox" not in rules  # docker is a backend train drives
    assert not (tmp_path / "run").exists() and not (tmp_path / "c").exists()


@pytest.mark.parametrize("sandbox", ["docker", "kubernetes"])
def test_p0_drives_the_docker_and_kubernetes_sandboxes(
    sandbox: str, no_daemon: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P0 used to refuse every sandbox but local ('which this version of Forge does not
    implement'); now it refuses only what this machine lacks (here: the daemon, the config)."""
    monkeypatch.delenv("FORGE_KUBERNETES_CONFIG", raising=False)
    with pytest.raises(GateError) as refused:
        run_p0(_spec("p0-local", sandbox), {}, run_dir=tmp_path / "p0", cache_dir=tmp_path / "c")
    assert refused.value.gate == "P0_PREFLIGHT_PASSED"
    rules = {v.rule for v in refused.value.violations}
    assert "preflight.backend.sandbox" not in rules
    wanted = "docker_daemon" if sandbox == "docker" else "config"
    assert f"preflight.backend.sandbox.{wanted}" in rules
    assert not any("bwrap" in r for r in rules)
    assert not (tmp_path / "p0").exists()


class _Live:
    gateway_url = "http://127.0.0.1:1/v1"
    traces_dir = Path("/nonexistent")
    base_model = "base"

    def near_window_probe(self) -> None:
        pass

    def load_adapter(self, name: str, path: Path) -> None:
        pass


def test_p0_runs_every_job_in_the_backends_sandboxes_and_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_run_panels opens `backends.sandbox` once with every panel's tasks (the Docker backend
    builds their images from them), hands it to every job, and closes it even on failure."""
    spec = _spec("p0-local", "docker")
    panels, problems = p0.resolve_panels(spec)
    assert problems == []
    opened: list[tuple[str, list[str]]] = []
    closed: list[object] = []
    used: list[object] = []

    class Backend:
        def close(self) -> None:
            closed.append(self)

    backend = Backend()

    def fake_open(name: str, *, tasks: Any = ()) -> Backend:
        opened.append((name, sorted(t.name for t in tasks)))
        return backend

    @contextlib.contextmanager
    def fake_stack(*args: Any) -> Iterator[_Live]:
        yield _Live()

    async def fake_rollouts(tasks: Any, job: Path, **kwargs: Any) -> Path:
        used.append(kwargs["make_sandbox"])
        return job

    monkeypatch.setattr("forge_ppo.recipes._sandboxes.open_backend", fake_open)
    monkeypatch.setattr(p0, "open_inference_stack", fake_stack)
    monkeypatch.setattr(p0, "endpoint_gate", lambda *a: {})
    monkeypatch.setattr(p0, "record_gate", lambda *a, **k: None)
    monkeypatch.setattr(p0, "run_rollouts", fake_rollouts)
    monkeypatch.setattr(p0, "panel_complete", lambda *a: "report")
    jobs = {n: {p: str(tmp_path / n / p) for p in panels} for n in ("base", "smoke")}
    adapters = {"base": None, "smoke": tmp_path}
    reports = p0._run_panels(spec, tmp_path, tmp_path, adapters, panels, jobs, None)
    every = sorted(t.name for tasks in panels.values() for t in tasks)
    assert opened == [("docker", every)]
    assert used == [backend] * (len(adapters) * len(panels))
    assert closed == [backend]
    assert reports == {p: {"base": "report", "smoke": "report"} for p in panels}
    # a failing job still closes the backend
    closed.clear()

    async def failing(*args: Any, **kwargs: Any) -> Path:
        raise RuntimeError("boom")

    monkeypatch.setattr(p0, "run_rollouts", failing)
    with pytest.raises(RuntimeError, match="boom"):
        p0._run_panels(spec, tmp_path, tmp_path, adapters, panels, jobs, None)
    assert closed == [backend]
