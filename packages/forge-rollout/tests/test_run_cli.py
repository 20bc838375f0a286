"""`forge-rollout run` end to end with the real tiny model: served locally, behind the gateway,
episodes in real sandboxes on the demo train split; forge-eval reads the job unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forge_eval import score_path
from forge_rollout._aio import run_app_in_thread, start_ready
from forge_rollout.cli import main
from forge_rollout.traces._job_rows import rows_from_job

WINDOW = 2048


@pytest.mark.usefixtures("isolation")
def test_run_demo_train_with_two_attempts(tmp_path: Path, tiny_model_dir: Path, gateway_at):
    from forge_rollout.local._engine import Engine
    from forge_rollout.local._server import create_server_app

    engine = Engine(tiny_model_dir, served_model_name="tiny", max_model_len=WINDOW)
    traces, job = tmp_path / "traces", tmp_path / "job"
    with run_app_in_thread(create_server_app(engine)) as server:
        with gateway_at(server, traces, window=WINDOW, reserve=64, upstream_timeout=60.0) as (
            gateway,
            _,
        ):
            argv = ["run", "--tasks", "demo:train", "--endpoint", gateway, "--traces",
                    str(traces), "--out", str(job), "--attempts", "2", "--model", "tiny",
                    "--max-tokens", "32", "--step-limit", "2", "--concurrency", "2"]  # fmt: skip
            assert main(argv) == 0
            # rerunning resumes: every trial is finished, nothing runs again
            before = sorted(p.stat().st_mtime_ns for p in job.glob("*/result.json"))
            assert main(argv) == 0
            assert sorted(p.stat().st_mtime_ns for p in job.glob("*/result.json")) == before
    report = score_path(job)
    (panel,) = report.panels
    assert panel.n_attempts == 12 and panel.n_tasks == 6
    # the hack audit read every trial's trajectory
    audit = json.loads((job / "hack-audit.json").read_text())
    assert audit["episodes"] == 12 and audit["schema"] == "forge-rollout/hack-audit@1"
    # every attempt is accounted for: a reward, or a named exception (never silently 0)
    trials = [json.loads(p.read_text()) for p in job.glob("*/result.json")]
    for trial in trials:
        rewards = (trial["verifier_result"] or {}).get("rewards")
        assert rewards is not None or trial["exception_info"]["exception_type"]
        assert trial["agent_result"]["metadata"]["n_steps"] >= 1
    # the traces of a real model convert into rows with one log-prob per action token
    rows, stats = rows_from_job(job)
    assert stats.calls >= 12 and len(rows) >= 1
    for row in rows:
        assert row.rollout_log_probs[row.response_mask == 1].lt(0).all()


def test_run_bad_input(tmp_path: Path, capsys):
    assert main(["run", "--tasks", "demo:train", "--task-ids", "nope", "--endpoint",
                 "http://127.0.0.1:9", "--out", str(tmp_path / "job")]) == 2  # fmt: skip
    assert "unknown task ids ['nope']" in capsys.readouterr().err
    code = main(["run", "--tasks", "demo:train", "--endpoint", "http://127.0.0.1:9",
                 "--out", str(tmp_path / "job")])  # fmt: skip
    assert code == 1 and "NetworkConnectionError" in capsys.readouterr().err
    assert not (tmp_path / "job").exists()


def _start_serve(model_dir: Path) -> tuple[subprocess.Popen, str]:
    """The real `forge-rollout serve --model DIR` (no --served-model-name) on a free port."""
    argv = [sys.executable, "-m", "forge_rollout.cli", "serve", "--model", str(model_dir),
            "--max-model-len", str(WINDOW), "--port", "0"]  # fmt: skip
    return start_ready(argv, "FORGE_SERVE", timeout=120)


@pytest.mark.usefixtures("isolation")
def test_run_without_model_uses_the_served_one(
    tmp_path: Path, tiny_model_dir: Path, gateway_at, capsys
):
    """A newcomer's first run: `serve --model DIR`, then `run` with no --model. The model is
    the server's only one (not a fixed 'base' that every trial would miss); a rerun into that
    job with another model is a clear error; a job of only infrastructure errors exits 1."""
    process, server = _start_serve(tiny_model_dir)
    traces, job = tmp_path / "traces", tmp_path / "job"
    base = ["run", "--tasks", "demo:train", "--task-ids", "statkit-median-even", "--endpoint",
            "", "--traces", str(traces), "--max-tokens", "16", "--step-limit", "1"]  # fmt: skip
    try:
        with gateway_at(server, traces, window=WINDOW, reserve=64, upstream_timeout=60.0) as (
            gateway,
            _,
        ):
            base[base.index("--endpoint") + 1] = gateway
            # 1. no --model: the served model (named after its folder) is used
            assert main([*base, "--out", str(job)]) == 0
            out = capsys.readouterr().out
            assert "infrastructure_errors=0" in out
            (trial,) = [json.loads(p.read_text()) for p in job.glob("*/result.json")]
            assert trial["config"]["agent"]["model_name"] == str(tiny_model_dir)
            assert trial["verifier_result"] is not None
            # 2. the same folder with another model: expected/found/fix, no traceback
            assert main([*base, "--out", str(job), "--model", "other"]) == 2
            err = capsys.readouterr().err
            assert "Traceback" not in err
            assert f"agent.model_name {str(tiny_model_dir)!r} in the job, 'other' now" in err
            assert "fix:" in err
            # 3. every trial an infrastructure error (unknown model): exit 1 with the reason
            assert main([*base, "--out", str(tmp_path / "bad"), "--model", "nope"]) == 1
            err = capsys.readouterr().err
            assert "every trial" in err and "UpstreamError" in err and "nope" in err
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_several_served_models_and_none_named_is_an_error(engine, lora_dirs) -> None:
    from forge_rollout.episodes._runner import served_model
    from forge_rollout.local._server import create_server_app

    with run_app_in_thread(create_server_app(engine)) as url:
        assert served_model(url) == "tiny"
        engine.load_adapter("step-1", str(lora_dirs[0]))
        try:
            with pytest.raises(ValueError, match=r"found 2: \['tiny', 'step-1'\].*--model NAME"):
                served_model(url)
        finally:
            engine.unload_adapter("step-1")


def test_run_backend_reaches_the_runner(tmp_path: Path, monkeypatch, capsys) -> None:
    """`--backend` picks forge_sandbox.open_backend's factory, which every episode gets; the
    docker one is given the tasks (their images) and its config; the backend is closed after."""
    import types

    from forge_rollout.episodes import _run_cli

    opened, used, closed = [], [], []

    class Backend:
        api = object()

        def close(self) -> None:
            closed.append(self)

    def fake_open(name, *, config=None, tasks=()):
        opened.append((name, config, sorted(t.name for t in tasks)))
        return Backend()

    async def fake_rollouts(tasks, out, **kwargs):
        used.append(kwargs["make_sandbox"])
        return types.SimpleNamespace(rewards={}, errors={})

    monkeypatch.setattr(_run_cli, "open_backend", fake_open)
    monkeypatch.setattr(_run_cli, "run_rollouts", fake_rollouts)
    base = ["run", "--tasks", "demo:train", "--task-ids", "statkit-median-even",
            "--endpoint", "http://127.0.0.1:9"]  # fmt: skip
    config = tmp_path / "docker.toml"
    for backend, extra, want in (
        ("docker", ["--docker-config", str(config)], ("docker", config, ["statkit-median-even"])),
        ("kubernetes", ["--k8s-config", str(config)], ("kubernetes", config, [])),
        ("local", [], ("local", None, [])),
    ):
        opened.clear()
        argv = [*base, "--out", str(tmp_path / backend), "--backend", backend, *extra]
        assert main(argv) == 0
        assert opened == [want]
        assert isinstance(used[-1], Backend) and closed[-1] is used[-1]
    with pytest.raises(SystemExit):
        main([*base, "--out", str(tmp_path / "x"), "--backend", "podman"])
    assert "invalid choice: 'podman'" in capsys.readouterr().err


def test_run_backend_docker_without_a_daemon_fails_before_any_episode(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    pytest.importorskip("docker", reason="install forge-sandbox[docker]")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    monkeypatch.delenv("FORGE_DOCKER_CONFIG", raising=False)
    out = tmp_path / "job"
    code = main(["run", "--tasks", "demo:train", "--endpoint", "http://127.0.0.1:9",
                 "--out", str(out), "--backend", "docker"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3, err
    assert "--backend docker" in err and "DOCKER_HOST" in err
    assert not out.exists()
