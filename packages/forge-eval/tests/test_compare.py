"""Paired comparisons: counts, exact McNemar, Newcombe, refusals that show the difference."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from forge_eval import NotComparableError, compare_jobs, newcombe_paired_interval, read_job

TASKS = [f"task-{i:02d}" for i in range(38)]
SOLVED_A = set(TASKS[0:6])  # 6 / 38
SOLVED_B = set(TASKS[0:4]) | set(TASKS[6:11])  # 9 / 38: 4 shared, 2 only A, 5 only B


def _run(tmp_path: Path, harbor: SimpleNamespace, name: str, solved: set[str], **kwargs):
    return read_job(harbor.write_job(tmp_path, name, harbor.panel_trials(solved, TASKS, **kwargs)))


def test_paired_counts_mcnemar_and_newcombe(tmp_path: Path, harbor: SimpleNamespace) -> None:
    a = _run(tmp_path, harbor, "sft", SOLVED_A)
    b = _run(tmp_path, harbor, "rl", SOLVED_B, model="forge-rl-step24")
    comparison = compare_jobs(a, b, names=("sft", "rl"))
    (panel,) = comparison.panels
    assert (panel.b, panel.c, panel.wins, panel.losses, panel.ties) == (2, 5, 5, 2, 31)
    assert (panel.pass_at_1_a, panel.pass_at_1_b) == pytest.approx((6 / 38, 9 / 38))
    assert panel.mcnemar_p == pytest.approx(58 / 128, abs=1e-12)
    assert panel.mcnemar_p == pytest.approx(binomtest(2, 7).pvalue, rel=1e-9)
    assert panel.delta == pytest.approx(3 / 38, abs=1e-12)
    # B's margin first: (both, only B, only A, neither)
    _, low, high = newcombe_paired_interval(4, 5, 2, 27)
    assert (panel.delta_low, panel.delta_high) == (low, high)
    assert low < 0 < high
    assert panel.warnings == []
    assert comparison.subject["model"] == ["forge-sft", "forge-rl-step24"]
    assert comparison.runs[0].protocol_sha256 != comparison.runs[1].protocol_sha256
    outcomes = {t.task: (t.outcome_a, t.outcome_b, t.result) for t in panel.per_task}
    assert outcomes["task-04"] == ("solved", "failed", "loss")
    assert outcomes["task-06"] == ("failed", "solved", "win")
    assert outcomes["task-00"] == ("solved", "solved", "tie")


def test_warns_when_too_few_discordant_pairs(tmp_path: Path, harbor: SimpleNamespace) -> None:
    a = _run(tmp_path, harbor, "a", set(TASKS[:6]))
    b = _run(tmp_path, harbor, "b", set(TASKS[:3]) | set(TASKS[6:8]), model="m2")
    (panel,) = compare_jobs(a, b).panels
    assert panel.b + panel.c == 5
    assert any("p < 0.05 is impossible" in w for w in panel.warnings)
    assert panel.mcnemar_p > 0.05


def test_infra_errors_count_as_failures_with_a_warning(
    tmp_path: Path, harbor: SimpleNamespace
) -> None:
    trials = harbor.panel_trials(SOLVED_A, TASKS)
    trials[0] = harbor.trial_result(TASKS[0], reward=None, exception="VerifierTimeoutError")
    a = read_job(harbor.write_job(tmp_path, "a", trials))
    b = _run(tmp_path, harbor, "b", SOLVED_A, model="m2")
    (panel,) = compare_jobs(a, b).panels
    assert panel.per_task[0].outcome_a == "infra" and panel.per_task[0].result == "win"
    assert any("infrastructure errors A=1 B=0" in w for w in panel.warnings)


def _refusal(a, b, **kwargs) -> str:
    with pytest.raises(NotComparableError) as info:
        compare_jobs(a, b, **kwargs)
    return str(info.value)


def test_refuses_different_protocols_and_shows_the_difference(
    tmp_path: Path, harbor: SimpleNamespace
) -> None:
    a = _run(tmp_path, harbor, "a", SOLVED_A)
    kwargs = {"step_limit": 100, "context_window": 65536, "temperature": 1.0, "seed": 20260822}
    b = _run(tmp_path, harbor, "b", SOLVED_B, agent_kwargs=kwargs)
    message = _refusal(a, b)
    assert "step_limit: A=200 B=100" in message and "Fix:" in message
    allowed = compare_jobs(a, b, allow_diff=("step_limit",))
    assert allowed.subject["step_limit"] == ["200", "100"]


def test_refuses_different_task_sets(tmp_path: Path, harbor: SimpleNamespace) -> None:
    a = _run(tmp_path, harbor, "a", SOLVED_A)
    trials = harbor.panel_trials(SOLVED_B, [*TASKS[:-1], "task-extra"])
    message = _refusal(a, read_job(harbor.write_job(tmp_path, "b", trials)))
    assert "only in A [task-37]" in message and "only in B [task-extra]" in message


def test_refuses_changed_task_content(tmp_path: Path, harbor: SimpleNamespace) -> None:
    a = _run(tmp_path, harbor, "a", SOLVED_A)
    trials = harbor.panel_trials(SOLVED_B, TASKS)
    trials[3] = harbor.trial_result(TASKS[3], index=3, checksum="sha256-edited")
    message = _refusal(a, read_job(harbor.write_job(tmp_path, "b", trials)))
    assert "task content differs (task_checksum): [task-03]" in message


def test_refuses_different_panels(tmp_path: Path, harbor: SimpleNamespace) -> None:
    a = _run(tmp_path, harbor, "a", SOLVED_A)
    b = _run(tmp_path, harbor, "b", SOLVED_A, source="verified27")
    assert "panels: A=['test38'] B=['verified27']" in _refusal(a, b)


# the `harbor` fixture only hands out stateless builder functions: safe to share
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["solved", "failed", "infra"]), min_size=1, max_size=25))
def test_run_compared_with_itself_is_all_ties(harbor: SimpleNamespace, outcomes: list[str]) -> None:
    trials = [
        harbor.trial_result(
            f"t{i}",
            index=i,
            reward={"solved": 1.0, "failed": 0.0, "infra": None}[outcome],
            exception="VerifierTimeoutError" if outcome == "infra" else None,
        )
        for i, outcome in enumerate(outcomes)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        job = read_job(harbor.write_job(Path(tmp), "self", trials))
        again = read_job(job.path)
        (panel,) = compare_jobs(job, again).panels
    assert panel.wins == panel.losses == panel.b == panel.c == 0
    assert panel.ties == len(outcomes) and panel.mcnemar_p == 1.0
    assert panel.delta == 0.0 and panel.delta_low <= 0.0 <= panel.delta_high


def test_several_attempts_pair_the_first_by_start_time(
    tmp_path: Path, harbor: SimpleNamespace
) -> None:
    def attempts(solved_first: bool, model: str) -> list[dict]:
        return [
            harbor.trial_result("t", index=2, reward=0.0 if solved_first else 1.0, model=model),
            harbor.trial_result("t", index=1, reward=1.0 if solved_first else 0.0, model=model),
        ]

    config = harbor.job_config("x", n_attempts=2)
    a = read_job(harbor.write_job(tmp_path, "a", attempts(True, "m1"), config=config))
    b = read_job(harbor.write_job(tmp_path, "b", attempts(False, "m2"), config=config))
    (panel,) = compare_jobs(a, b).panels
    assert (panel.per_task[0].outcome_a, panel.per_task[0].outcome_b) == ("solved", "failed")
    assert any("only the first attempt" in w for w in panel.warnings)


def _folder_job(tmp_path: Path, harbor: SimpleNamespace, name: str, solved: set[str], **kwargs):
    """A job like `forge-rollout run` writes: no dataset recorded, so the panel is the folder."""
    trials = harbor.panel_trials(solved, TASKS, source=None, **kwargs)
    return harbor.write_job(tmp_path, name, trials, config=False)


def test_folder_named_panels_of_the_same_tasks_compare_without_flags(
    tmp_path: Path, harbor: SimpleNamespace
) -> None:
    a = read_job(_folder_job(tmp_path, harbor, "base-job", SOLVED_A))
    b = read_job(_folder_job(tmp_path, harbor, "step-10-job", SOLVED_B, model="m2"))
    assert a.panel_from_folder and b.panel_from_folder
    (panel,) = compare_jobs(a, b).panels
    assert (panel.n_tasks, panel.b, panel.c) == (38, 2, 5)
    assert any("panel names came from job folders" in w for w in panel.warnings)
    # a recorded dataset name wins over a folder name
    trials = harbor.panel_trials(SOLVED_B, TASKS, model="m2")
    named = read_job(harbor.write_job(tmp_path, "named", trials, config=False))
    (panel,) = compare_jobs(a, named).panels
    assert panel.panel == "test38"


def test_folder_named_panels_still_refuse_other_tasks(
    tmp_path: Path, harbor: SimpleNamespace
) -> None:
    a = read_job(_folder_job(tmp_path, harbor, "a-job", SOLVED_A))
    trials = harbor.panel_trials(SOLVED_B, [*TASKS[:-1], "task-extra"], source=None)
    b = read_job(harbor.write_job(tmp_path, "b-job", trials, config=False))
    assert "only in B [task-extra]" in _refusal(a, b)


def test_panel_refusal_names_the_option_that_works(tmp_path: Path, harbor: SimpleNamespace) -> None:
    a = _run(tmp_path, harbor, "a", SOLVED_A)
    b = _run(tmp_path, harbor, "b", SOLVED_A, source="verified27")
    message = _refusal(a, b)
    assert "--panel NAME" in message and "--allow-diff" not in message
    renamed = compare_jobs(read_job(a.path, panel="p"), read_job(b.path, panel="p"))
    assert [p.panel for p in renamed.panels] == ["p"]
