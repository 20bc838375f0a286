"""tools/production_cpu.py `commands_ran`: the episodes of a run read back from its trials'
result.json, and a run whose agents never ran a command in a pod refused, saying why."""

from __future__ import annotations

import json
from pathlib import Path

import production_cpu as production
import pytest


def _trial(run_dir: Path, step: int, name: str, commands: int | None, reward: float | None,
           exit_status: str = "Submitted") -> None:  # fmt: skip
    """A trial folder as forge-sandbox writes it (only the fields the check reads)."""
    trial = run_dir / "episodes" / f"step_{step:04d}" / "round_0" / name
    trial.mkdir(parents=True)
    metadata = {"exit_status": exit_status, "n_steps": 2}
    if commands is not None:
        metadata["n_commands"] = commands
    result = {
        "trial_name": name,
        "agent_result": {"metadata": metadata},
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
    }
    (trial / "result.json").write_text(json.dumps(result))


def test_the_episodes_are_read_back_with_commands_and_rewards(tmp_path: Path) -> None:
    _trial(tmp_path, 1, "datekit__a", 3, 1.0)
    _trial(tmp_path, 1, "statkit__b", 0, 0.0, "RepeatedFormatError")
    _trial(tmp_path, 2, "datekit__c", 1, None, "LimitsExceeded")  # no verdict recorded
    # the job's own result.json one folder up is no episode
    (tmp_path / "episodes/step_0001/round_0/result.json").write_text(json.dumps({"stats": {}}))
    assert production.commands_ran(tmp_path) == [
        production.Episode("step_0001/datekit__a", 3, 1.0, "Submitted"),
        production.Episode("step_0001/statkit__b", 0, 0.0, "RepeatedFormatError"),
        production.Episode("step_0002/datekit__c", 1, None, "LimitsExceeded"),
    ]


def test_a_run_whose_agents_ran_no_command_fails_naming_the_exit_statuses(tmp_path) -> None:
    _trial(tmp_path, 1, "datekit__a", 0, 0.0, "RepeatedFormatError")
    _trial(tmp_path, 1, "statkit__b", None, 0.0, "RepeatedFormatError")  # field absent: 0
    with pytest.raises(ValueError, match=r"found 2 episodes, none with .*n_commands > 0 .*"
                       r"\['RepeatedFormatError'\].*_demo_model"):  # fmt: skip
        production.commands_ran(tmp_path)


def test_a_run_without_episodes_fails(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="found 0 episodes"):
        production.commands_ran(tmp_path)
