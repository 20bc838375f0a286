"""A single-candidate evaluation (the seed's `ppo-eval-checkpoint`): `forge-ppo p0 --only NAME`
runs one candidate (the base model, or one checkpoint) on every panel of a p0 spec under the
same protocol, writes one Harbor job per panel that `forge-eval score` reads, judges its ledger
(P0's gates up to the panels, no comparison), and refuses a name that is no candidate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_eval import score_path
from forge_eval.cli import main as forge_eval_main
from forge_gates import GateError, load_spec, read_ledger
from forge_ppo.cli import main
from forge_ppo.recipes.p0 import resolve_candidates
from forge_ppo.recipes.p0._checks import single_candidate_ledger


def test_only_resolves_one_candidate_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    spec = load_spec("p0-local")  # candidates: base (base = true), smoke
    assert resolve_candidates(spec, {}, only="base") == {"base": None}
    step = tmp_path / "global_step_1"
    (step / "lora_adapter").mkdir(parents=True)
    (step / "lora_adapter" / "adapter_config.json").write_text("{}")
    assert resolve_candidates(spec, {"smoke": step}, only="smoke") == {
        "smoke": step / "lora_adapter"
    }
    with pytest.raises(GateError) as error:  # the checkpoint candidate needs its checkpoint
        resolve_candidates(spec, {}, only="smoke")
    assert [v.rule for v in error.value.violations] == ["candidate.smoke"]
    with pytest.raises(GateError) as error:  # a checkpoint for a candidate not evaluated
        resolve_candidates(spec, {"smoke": step}, only="base")
    assert [v.rule for v in error.value.violations] == ["candidate.unknown"]
    with pytest.raises(GateError) as error:
        resolve_candidates(spec, {}, only="nobody")
    assert [v.rule for v in error.value.violations] == ["candidate.only"]


@pytest.mark.usefixtures("isolation")
def test_the_base_model_alone_on_every_panel(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path_factory.mktemp("forge-cache")
    run_dir = tmp_path / "eval"
    argv = ["p0", "--config", "p0-local", "--only", "base", "--run-dir", str(run_dir),
            "--cache-dir", str(cache), "--set", "agent.step_limit=2"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    spec = load_spec("p0-local")
    panels = spec.eval.panel_names if spec.eval else ()
    # 1. one Harbor job per panel for the one candidate, scored as forge-eval scores it
    jobs = json.loads((run_dir / "jobs.json").read_text())["jobs"]
    assert list(jobs) == ["base"] and sorted(jobs["base"]) == sorted(panels)
    for panel in panels:
        job = Path(jobs["base"][panel])
        assert (job / "result.json").is_file() and (job / "config.json").is_file()
        report = score_path(job, panel=panel)
        (score,) = report.panels
        assert score.n_attempts == len(list(job.glob("*/result.json"))) > 0
        assert json.loads((job / "report.json").read_text())["panels"][0]["n_attempts"] == (
            score.n_attempts
        )
        assert forge_eval_main(["score", str(job)]) == 0
        assert f"== base on {panel}: solved" in out
        # every episode's commands audited (forge-rollout's hack-audit.json), the share printed
        assert (job / "hack-audit.json").is_file()
        assert report.hack_audit is not None and report.hack_audit.episodes == score.n_attempts
        assert f"hack audit flagged share {report.hack_audit.flagged_share:.3f}" in out
    # 2. no comparison; the ledger holds P0's gates up to one complete panel each
    assert not list(run_dir.glob("comparison-*.json"))
    assert single_candidate_ledger(run_dir, len(panels)) == []
    gates = [r.gate for r in read_ledger(run_dir)]
    assert gates.count("P0_PANEL_COMPLETE") == len(panels)
    assert "P0_COMPARISON_PASSED" not in gates
    # 3. the ledger check fails when a panel is missing
    assert single_candidate_ledger(run_dir, len(panels) + 1)
