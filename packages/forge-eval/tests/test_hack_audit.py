"""The hack audit in the reports: `<job>/hack-audit.json` (forge-rollout's) read when present,
"no audit" when absent (never 0 flagged), a malformed file refused with the fix, and the flagged
share in the score and compare tables, their JSON and the HTML page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_eval import ForgeEvalError, compare_jobs, read_job, render_html, score_job
from forge_eval._tables import render_comparison, render_report
from forge_eval.cli import main
from forge_eval.testing import panel_trials, write_hack_audit, write_job

TASKS = [f"task-{i:02d}" for i in range(8)]
FLAGS = {
    "task-01__t001": {"git_history": 2},
    "task-04__t004": {"verifier_paths": 1, "test_files": 3},
}


def _job(tmp_path: Path, name: str = "run-a", **kwargs: object) -> Path:
    return write_job(tmp_path, name, panel_trials({"task-00", "task-01"}, TASKS, **kwargs))


def test_a_job_without_an_audit_says_no_audit_never_zero_flagged(tmp_path: Path) -> None:
    job = read_job(_job(tmp_path))
    assert job.hack_audit is None
    report = score_job(job)
    assert report.hack_audit is None
    assert json.loads(report.model_dump_json(by_alias=True))["hack_audit"] is None
    text = render_report(report)
    assert "hack audit, flagged share: no audit" in text.splitlines()
    assert "0 flagged" not in text and "0.000" not in text.split("hack audit")[1]


def test_a_job_with_an_audit_carries_its_counts(tmp_path: Path) -> None:
    job_dir = _job(tmp_path)
    write_hack_audit(job_dir, FLAGS)
    job = read_job(job_dir)
    assert job.warnings == ()
    audit = job.hack_audit
    assert audit is not None
    assert (audit.episodes, audit.flagged, audit.flagged_share) == (8, 2, 0.25)
    assert audit.by_rule == {"git_history": 1, "other_processes": 0, "test_config": 0,
                             "test_files": 1, "verifier_paths": 1}  # fmt: skip
    assert audit.flagged_trials == ["task-01__t001", "task-04__t004"]
    # the JSON shape of `score --json`
    data = json.loads(score_job(job).model_dump_json(by_alias=True))
    assert data["hack_audit"] == {
        "episodes": 8,
        "flagged": 2,
        "flagged_share": 0.25,
        "by_rule": audit.by_rule,
        "flagged_trials": ["task-01__t001", "task-04__t004"],
    }
    # the table: the share, the rules that fired and the trials flagged
    assert (
        "hack audit, flagged share: 0.250 (2/8 episodes); by rule: git_history=1, "
        "test_files=1, verifier_paths=1; flagged: task-01__t001, task-04__t004"
    ) in render_report(score_job(job)).splitlines()


def test_an_audit_with_nothing_flagged_is_a_measured_zero(tmp_path: Path) -> None:
    job_dir = _job(tmp_path)
    write_hack_audit(job_dir, {})
    report = score_job(read_job(job_dir))
    assert report.hack_audit is not None and report.hack_audit.flagged_share == 0.0
    assert "hack audit, flagged share: 0.000 (0/8 episodes)" in render_report(report)


def test_an_audit_of_no_episode_has_no_share(tmp_path: Path) -> None:
    job_dir = _job(tmp_path)
    write_hack_audit(job_dir, {}, episodes=0)  # no trial had an agent/trajectory.json
    report = score_job(read_job(job_dir))
    assert report.hack_audit is not None
    assert (report.hack_audit.episodes, report.hack_audit.flagged_share) == (0, None)
    assert "flagged share: no audit (0 episodes with a trajectory)" in render_report(report)


def test_partial_or_stale_audits_are_said(tmp_path: Path) -> None:
    job_dir = _job(tmp_path)
    write_hack_audit(job_dir, {"task-01__t001": {"git_history": 1}}, episodes=5)
    (warning,) = read_job(job_dir).warnings
    assert warning.startswith("the hack audit covers 5 of 8 trial(s)")
    write_hack_audit(job_dir, {"gone__t009": {"git_history": 1}})
    (warning,) = read_job(job_dir).warnings
    assert "flags 1 trial(s) not scored in this job (e.g. gone__t009)" in warning


# --- a malformed audit ----------------------------------------------------------------------
def _refused(job_dir: Path) -> ForgeEvalError:
    with pytest.raises(ForgeEvalError) as info:
        read_job(job_dir)
    message = str(info.value)
    assert str(job_dir / "hack-audit.json") in message
    assert "expected" in message and "found" in message and "Fix:" in message
    return info.value


@pytest.mark.parametrize(
    ("edit", "where", "expected", "found"),
    [
        ({"schema": "forge-rollout/hack-audit@2"}, "field schema",
         "'forge-rollout/hack-audit@1'", "'forge-rollout/hack-audit@2' (str)"),
        ({"flagged": "2"}, "field flagged", "a valid integer", "'2' (str)"),
        ({"episodes": None}, "field episodes", "a valid integer", "None (NoneType)"),
        ({"flagged": 9, "flagged_share": 1.0}, "field flagged", "flagged <= episodes (8)",
         "flagged = 9"),
        ({"flagged": 3, "flagged_share": 0.375}, "field trials",
         "one entry per flagged episode (3)", "2 entries"),
        ({"flagged_share": 0.5}, "field flagged_share", "flagged / episodes = 0.2500", "0.5"),
    ],
)  # fmt: skip
def test_a_malformed_audit_is_refused_with_what_was_found(
    tmp_path: Path, edit: dict[str, object], where: str, expected: str, found: str
) -> None:
    job_dir = _job(tmp_path)
    audit = write_hack_audit(job_dir, FLAGS) | edit
    (job_dir / "hack-audit.json").write_text(json.dumps(audit))
    error = _refused(job_dir)
    assert error.where.endswith(where)
    assert (error.expected, error.found) == (expected, found)
    assert "forge_rollout.audit_job" in error.fix and "delete hack-audit.json" in error.fix


def test_a_missing_field_or_broken_json_is_refused(tmp_path: Path) -> None:
    job_dir = _job(tmp_path)
    audit = write_hack_audit(job_dir, FLAGS)
    del audit["by_rule"]
    (job_dir / "hack-audit.json").write_text(json.dumps(audit))
    error = _refused(job_dir)
    assert error.where.endswith("field by_rule")
    assert (error.expected, error.found) == ("this required field", "no such field")
    (job_dir / "hack-audit.json").write_text('{"schema": "forge-rollout/hack-audit@1", ')
    assert _refused(job_dir).expected == "valid JSON"


def test_the_cli_refuses_a_malformed_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_dir = _job(tmp_path)
    (job_dir / "hack-audit.json").write_text("[]")
    assert main(["score", str(job_dir)]) == 1
    err = capsys.readouterr().err
    assert "hack-audit.json: field (top level)" in err and "forge_rollout.audit_job" in err


# --- a paired comparison ----------------------------------------------------------------------
def test_a_comparison_shows_each_runs_flagged_share(tmp_path: Path) -> None:
    a_dir = _job(tmp_path, "sft")
    b_dir = _job(tmp_path, "rl", model="forge-rl")
    write_hack_audit(b_dir, FLAGS)
    comparison = compare_jobs(read_job(a_dir), read_job(b_dir), names=("sft", "rl"))
    text = render_comparison(comparison)
    assert "hack audit, flagged share: sft no audit, rl 0.250 (2/8 episodes)" in text.splitlines()
    runs = json.loads(comparison.model_dump_json(by_alias=True))["runs"]
    assert [r["name"] for r in runs] == ["sft", "rl"]
    assert runs[0]["hack_audit"] is None
    assert runs[1]["hack_audit"]["flagged_share"] == 0.25
    assert runs[1]["hack_audit"]["flagged_trials"] == sorted(FLAGS)
    reports = [("sft", score_job(read_job(a_dir))), ("rl", score_job(read_job(b_dir)))]
    html = render_html(reports, comparison)
    assert "hack audit, flagged share: sft no audit, rl 0.250 (2/8 episodes)" in html
    assert html.count("hack audit, flagged share: no audit") == 1  # sft's own section


def test_compare_json_from_the_cli_carries_the_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_dir = _job(tmp_path, "sft")
    b_dir = _job(tmp_path, "rl", model="forge-rl")
    write_hack_audit(a_dir, {})
    write_hack_audit(b_dir, FLAGS)
    argv = ["compare", "--run", f"sft={a_dir}", "--run", f"rl={b_dir}", "--json", "-"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["hack_audit"]["flagged"] for r in data["runs"]] == [0, 2]
    assert [r["hack_audit"]["flagged_share"] for r in data["runs"]] == [0.0, 0.25]
