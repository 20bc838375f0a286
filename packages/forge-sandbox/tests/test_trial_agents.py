"""Custom trial agents (the rollout runner's path), attempts, and resuming a job."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from forge_sandbox import (
    AgentOutcomeError,
    AgentReport,
    discover_tasks,
    load_task,
    run_job,
    trial_name_for,
)


class StepLimit(AgentOutcomeError):
    exception_type = "ContextExhausted"


class ScriptAgent:
    """Runs the task's own solve.sh through Sandbox.exec, then optionally ends as an outcome."""

    name = "script"
    version = "0.1"
    config_summary = {"model_name": "none"}  # noqa: RUF012

    def __init__(self, outcome: bool = False, crash: bool = False) -> None:
        self.outcome, self.crash, self.runs = outcome, crash, 0

    async def run(self, sandbox, task, trial_dir: Path) -> AgentReport:
        self.runs += 1
        if self.crash:
            raise RuntimeError("sandbox connection lost")
        await sandbox.upload(task.solution_dir, "/solution")
        done = await sandbox.exec(["bash", "/solution/solve.sh"], cwd="/workspace")
        (trial_dir / "agent" / "log.txt").write_text(done.stdout)
        report = AgentReport(n_input_tokens=7, n_output_tokens=3, metadata={"n_steps": 1})
        if self.outcome:
            raise StepLimit("context window used up", report)
        return report


@pytest.mark.usefixtures("isolation")
def test_outcome_is_recorded_and_still_verified(tmp_path: Path, fix_add: Path) -> None:
    job = tmp_path / "job"
    summary = asyncio.run(run_job([load_task(fix_add)], job, ScriptAgent(outcome=True)))
    assert summary.rewards == {"fix-add": 1.0}
    assert summary.errors == {"fix-add": "ContextExhausted"}
    (trial,) = [json.loads(p.read_text()) for p in job.glob("*/result.json")]
    assert trial["agent_result"]["n_input_tokens"] == 7
    assert trial["agent_result"]["metadata"] == {"n_steps": 1}
    assert trial["agent_info"]["name"] == "script" and trial["agent_info"]["version"] == "0.1"
    assert json.loads((job / "config.json").read_text())["agents"] == [
        {"name": "script", "model_name": "none"}
    ]


@pytest.mark.usefixtures("isolation")
def test_infrastructure_crash_is_never_verified(tmp_path: Path, fix_add: Path) -> None:
    summary = asyncio.run(run_job([load_task(fix_add)], tmp_path / "job", ScriptAgent(crash=True)))
    assert summary.rewards == {"fix-add": None}
    assert summary.errors == {"fix-add": "RuntimeError"}


@pytest.mark.usefixtures("isolation")
def test_attempts_and_resume(tmp_path: Path, fix_add: Path) -> None:
    task = load_task(fix_add)
    job = tmp_path / "job"
    agent = ScriptAgent()
    summary = asyncio.run(run_job([task], job, agent, attempts=2))
    assert summary.rewards == {"fix-add#0": 1.0, "fix-add#1": 1.0}
    names = sorted(p.parent.name for p in job.glob("*/result.json"))
    assert names == sorted(trial_name_for("fix-add", k) for k in (0, 1))
    assert len(set(names)) == 2 and all(len(n.split("__")[1]) == 7 for n in names)
    # an interrupted trial leaves no result.json: resume runs only that one
    (job / names[0] / "result.json").unlink()
    again = ScriptAgent()
    resumed = asyncio.run(run_job([task], job, again, attempts=2, resume=True))
    assert again.runs == 1 and resumed.rewards == {"fix-add#0": 1.0, "fix-add#1": 1.0}
    result = json.loads((job / "result.json").read_text())
    assert result["stats"]["n_completed_trials"] == 2 and result["finished_at"]
    # a trial that ended without a reward (an infrastructure error, e.g. the interruption
    # itself reaching its sandbox) is run again on resume; one with a reward is kept
    failed = job / names[1] / "result.json"
    record = json.loads(failed.read_text())
    record["verifier_result"] = None
    record["exception_info"] = {"exception_type": "VerifierNoEvidenceError"}
    failed.write_text(json.dumps(record))
    third = ScriptAgent()
    resumed = asyncio.run(run_job([task], job, third, attempts=2, resume=True))
    assert third.runs == 1 and resumed.rewards == {"fix-add#0": 1.0, "fix-add#1": 1.0}
    assert json.loads(failed.read_text())["exception_info"] is None
    with pytest.raises(FileExistsError, match="expected a new or empty folder"):
        asyncio.run(run_job([task], job, ScriptAgent(), attempts=2))
    with pytest.raises(FileExistsError, match="n_attempts 2 in the job, 3 now"):
        asyncio.run(run_job([task], job, ScriptAgent(), attempts=3, resume=True))


def test_trial_names_are_stable_and_distinct():
    names = {trial_name_for("a" * 40, k) for k in range(50)}
    assert len(names) == 50
    assert trial_name_for("x", 3) == trial_name_for("x", 3)
    assert discover_tasks  # public API stays importable


class CommandAgent:
    """Runs one shell command in the sandbox, then (bounded) `true` until one is refused a
    fork at pids_max, as a policy's next commands would be."""

    name = "command"
    version = "0.1"

    def __init__(self, command: str, probes: int = 0) -> None:
        self.command, self.probes = command, probes

    async def run(self, sandbox, task, trial_dir: Path) -> AgentReport:
        await sandbox.exec(self.command, timeout_s=10)
        for _ in range(self.probes):
            if (await sandbox.exec("true", timeout_s=10)).pids_limit_hit:
                break
            await asyncio.sleep(0.05)
        return AgentReport(metadata={"n_steps": 1})


def _with(**limits):
    from forge_sandbox import LocalSandbox

    return lambda spec: LocalSandbox(spec.model_copy(update=limits))


@pytest.mark.usefixtures("cgroups")
def test_an_agents_fork_bomb_is_its_own_outcome_not_infrastructure(tmp_path, fix_add) -> None:
    """A real fork bomb, left running in a sandbox with pids_max 64: its processes are killed
    before the verifier, which then runs (uploads its tests, scores the unfixed bug 0); the
    cause is recorded as an agent outcome. Before, the full pids_max failed the test upload
    (AddTestsDirError: an infrastructure error, dropped from scoring and from PPO)."""
    job = tmp_path / "job"
    bomb = CommandAgent("{ :(){ :|:& };:; } >/dev/null 2>&1 &", probes=100)
    summary = asyncio.run(run_job([load_task(fix_add)], job, bomb, make_sandbox=_with(pids_max=64)))
    assert summary.errors == {"fix-add": "AgentResourceLimitError"}
    assert summary.rewards == {"fix-add": 0.0}
    (trial,) = [json.loads(p.read_text()) for p in job.glob("*/result.json")]
    assert "pids_max=64" in trial["exception_info"]["exception_message"]
    sandbox = trial["agent_result"]["metadata"]["sandbox"]
    assert sandbox["limits_hit"] == ["pids"] and sandbox["processes_killed"] > 0
    assert trial["verifier"]["finished_at"] is not None


@pytest.mark.usefixtures("isolation")
def test_leftover_processes_are_killed_before_the_verifier(tmp_path, fix_add) -> None:
    """No limit hit: a background process of the agent is killed (recorded), and no error."""
    job = tmp_path / "job"
    agent = CommandAgent("sleep 300 > /dev/null 2>&1 &")
    summary = asyncio.run(run_job([load_task(fix_add)], job, agent))
    assert summary.errors == {} and summary.rewards == {"fix-add": 0.0}
    (trial,) = [json.loads(p.read_text()) for p in job.glob("*/result.json")]
    assert trial["agent_result"]["metadata"] == {
        "n_steps": 1,
        "sandbox": {"processes_killed": 1, "limits_hit": []},
    }


@pytest.mark.usefixtures("cgroups")
def test_an_agent_oom_kill_is_the_agents_outcome_scored_by_the_verifier(tmp_path, fix_add) -> None:
    """The agent's own commands filling memory are its outcome (never a dropped infrastructure
    episode): labelled, and the verifier scores what it left (nothing fixed: 0)."""
    agent = CommandAgent("python3 -c \"x = b'a' * (512 << 20)\"")
    summary = asyncio.run(
        run_job([load_task(fix_add)], tmp_path / "job", agent, make_sandbox=_with(memory_mb=64))
    )
    assert summary.errors == {"fix-add": "AgentResourceLimitError"}
    assert summary.rewards == {"fix-add": 0.0}
    (trial,) = [json.loads(p.read_text()) for p in (tmp_path / "job").glob("*/result.json")]
    assert "memory_mb=64" in trial["exception_info"]["exception_message"]
