"""What a run shows and writes as it goes: labelled progress lines, the update file of each
phase, and curves with integer steps and the validation success rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_ppo.recipes.train._rollouts import progress_label
from forge_ppo.recipes.train._runlog import RunLog, train_line, update_file_name

METRICS = {
    "rollout/reward_mean": 0.5,
    "rollout/success_rate": 0.5,
    "actor/pg_loss": -0.0123,
    "critic/vf_loss": 0.25,
    "actor/ppo_kl": 0.0004,
    "actor/pg_clipfrac": 0.1,
    "critic/vf_clipfrac": 0.0,
    "critic/observability/ev": 0.3,
    "perf/tokens_per_s": 1234.5,
}


def test_progress_lines_say_what_they_are(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert progress_label(run / "episodes" / "step_0003" / "round_1", 8) == (
        "train step 3/8 round 1"
    )
    assert progress_label(run / "validation" / "step_0010", 24) == "validation step 10"
    assert progress_label(run / "odd", 8) == "odd"


def test_train_line_has_losses_kl_clip_ev_and_throughput() -> None:
    line = train_line(3, 8, METRICS)
    assert line.startswith("[train step 3/8] reward=0.5 success=0.5 ")
    for part in ("pg_loss=-0.0123", "vf_loss=0.25", "approx_kl=0.0004", "clipfrac=0.1",
                 "vf_clipfrac=0", "ev=0.3", "tokens/s=1234"):  # fmt: skip
        assert part in line, part
    # a metric the update did not log (EV undefined, KL to the reference off) is left out
    sparse = train_line(
        1, 1, {"rollout/success_rate": 0.0, "critic/observability/ev": float("nan")}
    )
    assert sparse == "[train step 1/1] success=0"


@pytest.mark.parametrize("phase", ["smoke", "soak", "formal"])
def test_each_phase_names_its_update_file(tmp_path: Path, phase: str) -> None:
    log = RunLog(tmp_path, phase, curves="off")
    log.update({"step": 1, "actor_updated": True})
    assert [p.name for p in tmp_path.iterdir()] == [update_file_name(phase)]
    data = json.loads((tmp_path / f"{phase}-update.json").read_text())
    assert data["schema"] == f"forge-ppo/{phase}-update@1" and data["phase"] == phase
    if phase == "smoke":  # the smoke contract's file keeps its name and schema
        assert data["schema"] == "forge-ppo/smoke-update@1"


def test_curves_have_integer_steps_and_the_validation_curve(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    log = RunLog(tmp_path, "formal", curves="on")
    log.metrics(0, {"val/success_rate_all": 0.0})
    for step in (1, 2, 3):
        log.metrics(step, METRICS)
    log.metrics(3, {"val/success_rate_all": 0.5})
    fig = log.figure()
    axes = {ax.get_title(): ax for ax in fig.axes}
    val = axes["validation success"]
    (line,) = val.get_lines()
    assert list(line.get_xdata()) == [0, 3] and list(line.get_ydata()) == [0.0, 0.5]
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
    assert log.plot() == tmp_path / "curves.png"
    log.close()


def test_one_update_gets_one_integer_tick_on_every_axis(tmp_path: Path) -> None:
    """The smoke's single update: matplotlib alone gives 0.945 ... 1.050 (overlapping labels);
    every axis, the undefined validation one included, shows the step 1 only."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    log = RunLog(tmp_path, "smoke", curves="on")
    log.metrics(1, METRICS)
    fig = log.figure()
    for ax in fig.axes:
        low, high = ax.get_xlim()
        assert (low, high) == (0.5, 1.5), ax.get_title()
        assert [t for t in ax.get_xticks() if low <= t <= high] == [1.0], ax.get_title()
    log.close()
