"""The P0 recipe's checks before and after the rollouts (no server, no sandbox): preflight
names the backends P0 cannot drive, the shipped panels resolve, the base model is marked,
the protocol values used are checked, a panel of only infrastructure errors is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import forge_data
from forge_gates import (
    GateError,
    check_p0_production,
    load_spec,
    read_config,
    read_ledger,
    validate_config,
)
from forge_ppo.cli import main
from forge_ppo.recipes.p0 import (
    panel_complete,
    protocol_values,
    resolve_candidates,
    resolve_panels,
    run_p0,
)
from forge_rollout import agent_config_from_spec


def test_p0_64k_stops_at_preflight_before_a_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORGE_KUBERNETES_CONFIG", raising=False)
    run_dir = tmp_path / "p0"
    assert main(["p0", "--config", "p0-64k", "--run-dir", str(run_dir)]) != 0
    err = capsys.readouterr().err
    assert "P0_PREFLIGHT_PASSED" in err
    # vLLM and Kubernetes are both driven (found through $FORGE_VLLM_PYTHON and
    # $FORGE_KUBERNETES_CONFIG): what is refused is what this machine lacks
    assert "[preflight.backend.inference.vllm]" in err and "FORGE_VLLM_PYTHON" in err
    assert "[preflight.backend.sandbox.config]" in err and "FORGE_KUBERNETES_CONFIG" in err
    assert "does not implement" not in err
    assert err.count("[preflight.backend.inference.vllm]") == 1  # printed once, not twice
    assert not run_dir.exists() and not (tmp_path / "runs").exists()


def test_p0_local_panels_resolve_to_the_demo_splits() -> None:
    panels, problems = resolve_panels(load_spec("p0-local"))
    assert problems == []
    assert {name: len(tasks) for name, tasks in panels.items()} == {"validation": 3, "test": 3}
    test_ids = [t.id for t in forge_data.demo_split_tasks("test")]
    assert [t.name for t in panels["test"]] == test_ids


def _production_layout(root: Path, n_verified: int) -> None:
    """p0-64k's relative paths under `root`: the frozen split (demo content) with its task
    folders, and a task folder of `n_verified` tasks."""
    split = root / "splits" / "swesmith-curated-grpo-267-v1"
    shutil.copytree(forge_data.demo_split_root(), split)
    shutil.copytree(forge_data.demo_tasks_root(), split / "tasks")
    verified = root / "tasks" / "swebench-verified-27"
    verified.mkdir(parents=True)
    for task in sorted(forge_data.demo_tasks_root().iterdir())[:n_verified]:
        shutil.copytree(task, verified / task.name)


def test_the_shipped_production_panels_resolve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _production_layout(tmp_path, 5)
    spec = load_spec("p0-64k")
    panels, problems = resolve_panels(spec)
    # test38 = split "test" of data.tasks, verified27 = every task of its folder
    assert {name: len(tasks) for name, tasks in panels.items()} == {"test38": 3, "verified27": 5}
    # ... and each must have the size the protocol names: here the demo stand-ins do not
    assert [(v.rule, v.expected, v.found) for v in problems] == [
        (
            "p0.panel.test38.size",
            "38 tasks in panel 'test38' (size = 38)",
            "3 tasks in splits/swesmith-curated-grpo-267-v1:test",
        ),
        (
            "p0.panel.verified27.size",
            "27 tasks in panel 'verified27' (size = 27)",
            "5 tasks in tasks/swebench-verified-27",
        ),
    ]
    # the values the run would use: every production value but the panel sizes
    used = protocol_values(spec, agent_config_from_spec(spec, "eval"), panels)
    assert [v.rule for v in check_p0_production(used)] == ["p0.production.panels"]


def test_an_unresolvable_panel_is_named(tmp_path: Path) -> None:
    data = read_config("p0-local")
    data["eval"]["panels"][1] = {"name": "test", "tasks": str(tmp_path / "nowhere")}
    spec, _ = validate_config(data)
    assert spec is not None
    _, problems = resolve_panels(spec)
    (v,) = problems
    assert v.rule == "p0.panel.test" and "nowhere" in v.expected


def _checkpoint(root: Path) -> Path:
    adapter = root / "global_step_1" / "lora_adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    return adapter.parent


def test_the_base_model_is_marked_not_named(tmp_path: Path) -> None:
    step = _checkpoint(tmp_path)
    spec = load_spec("p0-local")  # candidates: base (base = true), smoke
    assert resolve_candidates(spec, {"smoke": step}) == {
        "base": None,
        "smoke": step / "lora_adapter",
    }
    # a checkpoint for the base candidate is refused, as is a name that is no candidate
    with pytest.raises(GateError) as error:
        resolve_candidates(spec, {"smoke": step, "base": step, "other": step})
    assert [v.rule for v in error.value.violations] == ["candidate.base", "candidate.unknown"]
    # a candidate merely named 'base' is a checkpoint candidate like any other
    data = read_config("p0-local")
    data["eval"]["candidates"] = ["base", "smoke"]
    plain, _ = validate_config(data)
    assert plain is not None
    with pytest.raises(GateError) as error:
        resolve_candidates(plain, {"smoke": step})
    assert [v.rule for v in error.value.violations] == ["candidate.base"]
    assert "base = true" in error.value.violations[0].fix


def _job(harbor, root: Path, exceptions: list[str | None]) -> Path:
    trials = [
        harbor.trial_result(
            f"task-{i}",
            reward=None if exc else 1.0,
            exception=exc,
            index=i,
            source="test",
            verifier_started=exc is None,
        )
        for i, exc in enumerate(exceptions)
    ]
    return harbor.write_job(root, "job", trials)


def test_a_panel_of_only_infrastructure_errors_is_not_complete(tmp_path: Path, harbor) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = _job(harbor, tmp_path, ["EnvironmentStartTimeoutError", "SandboxError", "ApiError"])
    with pytest.raises(GateError) as error:
        panel_complete(run_dir, "smoke", "test", job, expected=3)
    (v,) = error.value.violations
    assert v.rule == "p0.panel_complete.test.infra"
    assert "panel 'test'" in v.expected
    assert v.found.startswith("all 3 attempts were infrastructure errors; first: ")
    assert "EnvironmentStartTimeoutError: EnvironmentStartTimeoutError raised (task-0__t000)" in (
        v.found
    )
    (record,) = read_ledger(run_dir)
    assert record.gate == "P0_PANEL_COMPLETE_FAILED"
    assert (job / "report.json").is_file()  # scored, so the errors can be read


def test_a_panel_with_one_real_attempt_is_complete(tmp_path: Path, harbor) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = _job(harbor, tmp_path, ["EnvironmentStartTimeoutError", None, "SandboxError"])
    report = panel_complete(run_dir, "smoke", "test", job, expected=3)
    assert report.panels[0].infra_errors == 2
    (record,) = read_ledger(run_dir)
    assert record.gate == "P0_PANEL_COMPLETE"
    assert record.fields == {
        "candidate": "smoke",
        "panel": "test",
        "attempts": 3,
        "solved": 1,
        "infra_errors": 2,
        "hack_audit_episodes": 0,  # these trials have no agent/trajectory.json
        "hack_audit_flagged": None,
        "hack_audit_flagged_share": None,
    }
    json.loads((job / "report.json").read_text())


def test_a_panel_with_missing_attempts_is_not_complete(tmp_path: Path, harbor) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = _job(harbor, tmp_path, [None, None])
    with pytest.raises(GateError) as error:
        panel_complete(run_dir, "smoke", "test", job, expected=3)
    assert [v.rule for v in error.value.violations] == ["p0.panel_complete.test.attempts"]


@pytest.mark.usefixtures("no_sandbox_preflight")
def test_a_protocol_difference_stops_the_run_before_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = read_config("p0-local")
    data["eval"]["panels"][1]["size"] = 4  # the demo test split has 3 tasks
    spec, _ = validate_config(data)
    assert spec is not None
    step = _checkpoint(tmp_path)
    with pytest.raises(GateError) as error:
        run_p0(spec, {"smoke": step}, run_dir=tmp_path / "p0", cache_dir=tmp_path / "cache")
    assert error.value.gate == "P0_PROTOCOL_GATE_PASSED"
    assert [v.rule for v in error.value.violations] == ["p0.panel.test.size"]
    assert not (tmp_path / "p0").exists() and not (tmp_path / "cache").exists()
