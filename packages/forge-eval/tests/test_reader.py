"""Reading Harbor job directories: real field names, tolerance, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_eval import ForgeEvalError, read_job


def test_reads_harbor_job_with_errored_trials(job_38: Path, harbor: SimpleNamespace) -> None:
    job = read_job(job_38)
    assert job.name == "run-a" and len(job.attempts) == 38 and job.warnings == ()
    by_task = {a.task_name: a for a in job.attempts}
    timed_out = by_task[harbor.TASKS_38[5]]
    assert (timed_out.exception_type, timed_out.solved) == ("AgentTimeoutError", True)
    assert by_task[harbor.TASKS_38[6]].outcome.category == "infra"
    assert by_task[harbor.TASKS_38[7]].n_input_tokens is None
    assert by_task[harbor.TASKS_38[8]].outcome.category == "agent"
    assert {a.panel for a in job.attempts} == {"test38"}


def test_tolerates_missing_optional_fields(tmp_path: Path, harbor: SimpleNamespace) -> None:
    minimal = [
        {"task_name": "t1", "trial_name": "t1__a", "verifier_result": {"rewards": {"reward": 1}}},
        {"task_name": "t2", "trial_name": "t2__a"},
        {"task_name": "t3", "trial_name": "t3__a", "verifier_result": {"rewards": {"score": 0}},
         "exception_info": {"exception_type": "AgentTimeoutError"}, "future_field": [1, 2]},
    ]  # fmt: skip
    job = read_job(harbor.write_job(tmp_path, "bare", minimal, config=None, job_result=False))
    assert [a.solved for a in job.attempts] == [True, False, False]
    assert job.attempts[1].outcome.counted_type == "NoReward"
    assert job.attempts[2].outcome.reward == 0.0  # single reward key used
    assert {a.panel for a in job.attempts} == {"bare"}  # no dataset anywhere: directory name
    assert any("config.json missing" in w for w in job.warnings)


def test_panel_resolution_order(tmp_path: Path, harbor: SimpleNamespace) -> None:
    trial = harbor.trial_result("t1", source=None)
    trial["config"]["task"]["source"] = "from-task-config"
    assert (
        read_job(harbor.write_job(tmp_path, "j1", [trial])).attempts[0].panel == "from-task-config"
    )
    trial = harbor.trial_result("t1", source=None)
    trial["config"]["task"]["source"] = None
    job = harbor.write_job(
        tmp_path, "j2", [trial], config=harbor.job_config("j2", dataset="verified27")
    )
    assert read_job(job).attempts[0].panel == "verified27"
    assert read_job(job, panel="override").attempts[0].panel == "override"


def test_agent_steps_from_metadata_then_trajectory(tmp_path: Path, harbor: SimpleNamespace) -> None:
    trials = [
        harbor.trial_result("t1", index=0, metadata={"n_steps": 17}),
        harbor.trial_result("t2", index=1),
    ]
    job_dir = harbor.write_job(tmp_path, "steps", trials)
    atif = {"schema_version": "ATIF-v1.2", "steps": [
        {"step_id": 1, "source": "system"}, {"step_id": 2, "source": "user"},
        {"step_id": 3, "source": "agent"}, {"step_id": 4, "source": "agent"}]}  # fmt: skip
    (job_dir / trials[1]["trial_name"] / "agent").mkdir()
    (job_dir / trials[1]["trial_name"] / "agent" / "trajectory.json").write_text(json.dumps(atif))
    assert [a.agent_steps for a in read_job(job_dir).attempts] == [17, 2]


def test_warns_when_job_result_disagrees(tmp_path: Path, harbor: SimpleNamespace) -> None:
    job_dir = harbor.write_job(tmp_path, "short", harbor.panel_trials({"a"}, ["a", "b"]))
    result = json.loads((job_dir / "result.json").read_text())
    result["n_total_trials"] = 5
    (job_dir / "result.json").write_text(json.dumps(result))
    assert any("plans 5 trials" in w for w in read_job(job_dir).warnings)


# --- bad input ---------------------------------------------------------------------------
def _error(path: Path, **kwargs) -> str:
    with pytest.raises(ForgeEvalError) as info:
        read_job(path, **kwargs)
    message = str(info.value)
    assert "expected" in message and "found" in message and "Fix:" in message
    return message


def test_missing_directory(tmp_path: Path) -> None:
    assert "no such directory" in _error(tmp_path / "nope")


def test_empty_job(tmp_path: Path, harbor: SimpleNamespace) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text(json.dumps(harbor.job_config("empty")))
    assert "empty job" in _error(tmp_path / "empty")


def test_unfinished_trial_refused_unless_allowed(tmp_path: Path, harbor: SimpleNamespace) -> None:
    job_dir = harbor.write_job(tmp_path, "running", harbor.panel_trials({"a"}, ["a", "b"]))
    (job_dir / "c__t009").mkdir()
    (job_dir / "c__t009" / "config.json").write_text("{}")
    assert "c__t009" in _error(job_dir)
    job = read_job(job_dir, allow_incomplete=True)
    assert len(job.attempts) == 2 and any("unfinished" in w for w in job.warnings)


def test_malformed_json_names_file_and_line(tmp_path: Path, harbor: SimpleNamespace) -> None:
    job_dir = harbor.write_job(tmp_path, "broken", harbor.panel_trials({"a"}, ["a", "b"]))
    target = job_dir / "b__t001" / "result.json"
    target.write_text('{"task_name": "b",\n "trial_name": ')
    message = _error(job_dir)
    assert str(target) in message and "line 2" in message


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda t: t["verifier_result"]["rewards"].update(reward="yes"),
         "verifier_result.rewards.reward"),
        (lambda t: t.pop("task_name"), "task_name"),
        (lambda t: t.update(trial_name=7), "trial_name"),
        (lambda t: t["agent_result"].update(n_input_tokens="12k"), "agent_result.n_input_tokens"),
        (lambda t: t.update(exception_info={"exception_message": "x"}),
         "exception_info.exception_type"),
        (lambda t: t["config"]["agent"].update(kwargs=[1]), "config.agent.kwargs"),
        (lambda t: t.update(started_at="yesterday"), "started_at"),
        (lambda t: t["verifier_result"]["rewards"].update(reward=True),
         "verifier_result.rewards.reward"),
    ],
)  # fmt: skip
def test_wrong_type_names_the_field(
    tmp_path: Path, mutate, field: str, harbor: SimpleNamespace
) -> None:
    trials = harbor.panel_trials({"a"}, ["a", "b"])
    mutate(trials[1])
    message = _error(harbor.write_job(tmp_path, "typed", trials))
    assert f"field {field}" in message and "b__t001/result.json" in message


def test_non_finite_and_ambiguous_rewards(tmp_path: Path, harbor: SimpleNamespace) -> None:
    trials = harbor.panel_trials({"a"}, ["a"])
    trials[0]["verifier_result"]["rewards"]["reward"] = float("nan")
    assert "finite" in _error(harbor.write_job(tmp_path, "nan", trials))
    trials = harbor.panel_trials({"a"}, ["a"])
    trials[0]["verifier_result"]["rewards"] = {"tests": 1, "lint": 0}
    assert "'reward' key" in _error(harbor.write_job(tmp_path, "multi", trials))


def test_bad_job_config_names_the_field(tmp_path: Path, harbor: SimpleNamespace) -> None:
    config = harbor.job_config("cfg")
    config["n_attempts"] = "one"
    message = _error(
        harbor.write_job(tmp_path, "cfg", harbor.panel_trials({"a"}, ["a"]), config=config)
    )
    assert "config.json: field n_attempts" in message


def test_duplicate_trial_names_refused(tmp_path: Path, harbor: SimpleNamespace) -> None:
    trials = harbor.panel_trials({"a"}, ["a", "b"])
    job_dir = harbor.write_job(tmp_path, "dup", trials)
    copy = job_dir / "copy-of-a"
    copy.mkdir()
    (copy / "result.json").write_text(json.dumps(trials[0]))
    assert "unique" in _error(job_dir)


def test_two_models_in_one_job_refused(tmp_path: Path, harbor: SimpleNamespace) -> None:
    trials = [harbor.trial_result("a", index=0), harbor.trial_result("b", index=1, model="other")]
    assert "one agent and model per job" in _error(harbor.write_job(tmp_path, "mixed", trials))


def test_panel_override_never_merges_panels(tmp_path: Path, harbor: SimpleNamespace) -> None:
    trials = [harbor.trial_result("a", index=0, source="test38"),
              harbor.trial_result("b", index=1, source="verified27")]  # fmt: skip
    job_dir = harbor.write_job(tmp_path, "two", trials)
    with pytest.raises(ForgeEvalError, match="never merged"):
        read_job(job_dir, panel="mine")


def test_attempts_ordered_by_start_naive_or_aware(tmp_path: Path, harbor: SimpleNamespace) -> None:
    late = harbor.trial_result("a", index=9)  # 10:09 UTC
    early = harbor.trial_result("a", index=2)
    early["started_at"] = "2026-11-29T10:02:00"  # naive (older Harbor): read as UTC
    unknown = harbor.trial_result("a", index=1)
    unknown["started_at"] = None
    job = read_job(harbor.write_job(tmp_path, "order", [late, unknown, early]))
    assert [a.trial_name for a in job.attempts] == ["a__t002", "a__t009", "a__t001"]


def test_out_of_range_reward_is_an_error_trial_not_solved(
    tmp_path: Path, harbor: SimpleNamespace
) -> None:
    """A Harbor result with reward 1.5 or -1 (the contract is binary, in [0, 1]) is read
    without a crash, counted as an infrastructure error, and never solved."""
    minimal = [
        {"task_name": "t1", "trial_name": "t1__a", "verifier_result": {"rewards": {"reward": 1.5}}},
        {"task_name": "t2", "trial_name": "t2__a", "verifier_result": {"rewards": {"reward": -1}}},
        {"task_name": "t3", "trial_name": "t3__a", "verifier_result": {"rewards": {"reward": 1}}},
    ]  # fmt: skip
    job = read_job(harbor.write_job(tmp_path, "range", minimal, config=None, job_result=False))
    assert [a.solved for a in job.attempts] == [False, False, True]
    assert [a.outcome.category for a in job.attempts] == ["infra", "infra", "ok"]
    assert job.attempts[0].outcome.counted_type == "RewardOutOfRangeError"
