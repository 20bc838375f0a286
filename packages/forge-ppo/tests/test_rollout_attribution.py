"""Who caused a failure, as training sees it: an agent-caused failure is a scored 0 (kept),
an infrastructure error is dropped, and the update reports both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_ppo.recipes.train._rollouts import episode_outcomes, rollout_metrics


def _trial(job: Path, name: str, reward: float | None, kind: str | None) -> None:
    folder = job / name
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(
        json.dumps(
            {
                "task_name": name,
                "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
                "exception_info": None if kind is None else {"exception_type": kind},
                "agent_result": {"n_output_tokens": 5, "metadata": {"n_steps": 1}},
            }
        )
    )


def test_agent_caused_failures_are_scored_and_counted_infra_errors_are_a_rate(tmp_path) -> None:
    job = tmp_path / "job"
    _trial(job, "solved", 1.0, None)
    _trial(job, "hang", 0.0, "AgentCausedFailure")  # the verifier hung on its change
    _trial(job, "hog", 0.0, "AgentResourceLimitError")  # its commands filled memory
    _trial(job, "daemon", None, "SandboxStartError")  # the host: dropped, not scored
    outcomes = {o.task_id: o for o in episode_outcomes([job])}
    assert outcomes["hang"].agent_caused and not outcomes["hang"].error
    assert outcomes["hog"].agent_caused and outcomes["hog"].reward == 0.0
    assert outcomes["daemon"].error and not outcomes["daemon"].agent_caused
    metrics = rollout_metrics(list(outcomes.values()))
    assert metrics["rollout/agent_caused_failures"] == 2
    assert metrics["rollout/infra_error_rate"] == pytest.approx(0.25)
    assert metrics["rollout/reward_mean"] == pytest.approx(1 / 3)
