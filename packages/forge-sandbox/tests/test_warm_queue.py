"""The warm queue (run_job): agent sandboxes started ahead of their turn and checked alive
before use, the verifier's sandbox started while the agent runs, stops after the verdict; a
dead warm sandbox is replaced (never used, never scored), nothing is left after a cancel."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from forge_sandbox import LocalSandbox, SandboxError, SandboxSpec, SandboxStateError, run_job
from forge_sandbox import discover_tasks as discover

SOLVED = "echo fixed > /workspace/answer\n"
CHECK = "[ -e /workspace/answer ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"  # noqa: E501


class Recorder:
    """A SandboxFactory of LocalSandboxes that remembers each one (and may hurt some)."""

    def __init__(self, kill: set[str] | None = None) -> None:
        self.made: list[LocalSandbox] = []
        self.kill = kill or set()  # trial names whose sandbox's init dies while it waits

    def __call__(self, spec: SandboxSpec) -> LocalSandbox:
        recorder = self

        class Hurt(LocalSandbox):
            async def check_alive(self) -> None:
                if spec.trial_name in recorder.kill:  # it died while it waited to be used
                    recorder.kill.discard(spec.trial_name)
                    os.kill(self.init_pid, signal.SIGKILL)
                    for _ in range(100):
                        try:  # gone (ESRCH mid-read included) or a zombie: dead
                            if " Z " in Path(f"/proc/{self.init_pid}/stat").read_text():
                                break
                        except OSError:
                            break
                        await asyncio.sleep(0.02)
                await super().check_alive()

        box = Hurt(spec)
        self.made.append(box)
        return box


def _tasks(make_task, n: int) -> list[Any]:
    folders = [make_task(f"t{i}", CHECK, solve_sh=SOLVED) for i in range(n)]
    return sorted(discover(folders[0].parent), key=lambda t: t.name)


def _results(job: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for path in job.glob("*/result.json"):
        result = json.loads(path.read_text())
        found[result["task_name"]] = result
    return found


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


async def _all_stopped(recorder: Recorder) -> None:
    running = []
    for box in recorder.made:
        try:
            await box.check_alive()
        except SandboxStateError:
            continue
        running.append(box.spec.trial_name)
    assert running == [], f"sandboxes left running: {running}"


async def _run_recorded(tasks: list[Any], job: Path, recorder: Recorder, warm: int) -> Any:
    """An oracle job, one trial at a time, on the recorder's sandboxes; all stopped after."""
    summary = await run_job(tasks, job, "oracle", concurrency=1, warm=warm, make_sandbox=recorder)
    await _all_stopped(recorder)
    return summary


@pytest.mark.usefixtures("isolation")
def test_sandboxes_start_ahead_and_every_one_is_stopped(tmp_path: Path, make_task) -> None:
    tasks = _tasks(make_task, 4)
    recorder = Recorder()

    summary = asyncio.run(_run_recorded(tasks, tmp_path / "job", recorder, warm=1))
    assert summary.rewards == {t.name: 1.0 for t in tasks} and not summary.errors
    results = _results(tmp_path / "job")
    assert {r["sandbox_starts"]["agent"] for r in results.values()} == {"warm"}
    assert {r["sandbox_starts"]["verifier"] for r in results.values()} == {"prestarted"}
    # one at a time, yet each next trial's sandbox was ready before the one before it ended
    order = sorted(results.values(), key=lambda r: _at(r["agent_execution"]["started_at"]))
    for earlier, later in itertools.pairwise(order):
        assert _at(later["environment_setup"]["finished_at"]) < _at(earlier["finished_at"])
    assert len(recorder.made) == 2 * len(tasks)  # an agent and a verifier sandbox per trial


@pytest.mark.usefixtures("isolation")
def test_without_the_queue_each_trial_starts_its_own(tmp_path: Path, make_task) -> None:
    tasks = _tasks(make_task, 2)
    summary = asyncio.run(run_job(tasks, tmp_path / "job", "oracle", concurrency=1, warm=0))
    assert summary.rewards == {t.name: 1.0 for t in tasks}
    results = _results(tmp_path / "job")
    assert {r["sandbox_starts"]["agent"] for r in results.values()} == {"cold"}


@pytest.mark.usefixtures("isolation")
@pytest.mark.parametrize("which", ["agent", "verifier"])
def test_a_dead_warm_sandbox_is_replaced_not_used(tmp_path: Path, make_task, which) -> None:
    tasks = _tasks(make_task, 3)
    victim = next(iter(sorted(p.name for p in (tmp_path / "tasks").iterdir())))
    from forge_sandbox import trial_name_for

    name = trial_name_for(victim) + ("-verify" if which == "verifier" else "")
    recorder = Recorder(kill={name})

    summary = asyncio.run(_run_recorded(tasks, tmp_path / "job", recorder, warm=2))
    assert summary.rewards == {t.name: 1.0 for t in tasks} and not summary.errors
    starts = _results(tmp_path / "job")[victim]["sandbox_starts"]
    assert starts[which].startswith("replaced: SandboxStateError")
    assert "init" in starts[which]
    assert len(recorder.made) == 2 * len(tasks) + 1  # the dead one and its replacement


@pytest.mark.usefixtures("isolation")
def test_a_cancelled_job_leaves_no_sandbox_warm_or_running(tmp_path: Path, make_task) -> None:
    for i in range(5):
        make_task(f"h{i}", CHECK, solve_sh="sleep 30\n")
    tasks = discover(tmp_path / "tasks")
    recorder = Recorder()

    async def go() -> None:
        job = asyncio.ensure_future(run_job(tasks, tmp_path / "job", "oracle", concurrency=2,
                                            warm=2, make_sandbox=recorder))  # fmt: skip
        for _ in range(200):  # until both running trials and both warm ones have sandboxes
            await asyncio.sleep(0.05)
            if sum(not str(box.spec.trial_name).endswith("-verify") for box in recorder.made) >= 4:
                break
        await asyncio.sleep(0.5)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        await _all_stopped(recorder)

    asyncio.run(go())
    assert len(recorder.made) >= 4


@pytest.mark.usefixtures("isolation")
def test_a_trial_cancelled_before_it_uses_its_warm_sandbox_still_stops_it(
    tmp_path: Path, make_task, monkeypatch
) -> None:
    """A trial takes its warm sandbox, then writes its config and hashes its task off the loop
    before the sandbox is in its hands; cancelled there (Ctrl-C), the sandbox must still be
    stopped (it was left running, its state folder behind: a flaky test_interrupt)."""
    import threading

    from forge_sandbox import _trial

    tasks = _tasks(make_task, 2)
    recorder = Recorder()
    hashing = threading.Event()
    real = _trial.task_checksum

    def slow_checksum(folder):
        hashing.set()
        time.sleep(1.0)  # the job is cancelled meanwhile
        return real(folder)

    monkeypatch.setattr(_trial, "task_checksum", slow_checksum)

    async def go() -> None:
        job = asyncio.ensure_future(run_job(tasks, tmp_path / "job", "oracle", concurrency=1,
                                            warm=2, make_sandbox=recorder))  # fmt: skip
        for _ in range(400):  # until the first trial hashes its task and a sandbox has started
            await asyncio.sleep(0.02)
            if hashing.is_set() and any(box.running for box in recorder.made):
                break
        assert hashing.is_set()
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        await _all_stopped(recorder)

    asyncio.run(go())
    assert recorder.made, "expected the warm queue to have started a sandbox"
    assert not list((tmp_path / "job").glob("*/result.json"))


@pytest.mark.usefixtures("isolation")
def test_a_stop_that_fails_fails_the_job_after_the_verdicts(tmp_path: Path, make_task) -> None:
    tasks = _tasks(make_task, 2)

    class BadStop(LocalSandbox):
        async def stop(self) -> None:
            await super().stop()
            if str(self.spec.trial_name).endswith("-verify"):
                raise SandboxError("stop: the backend refused (test)")

    with pytest.raises(SandboxError, match="expected every trial's sandboxes stopped; found 2"):
        asyncio.run(run_job(tasks, tmp_path / "job", "oracle", concurrency=2, make_sandbox=BadStop))
    results = _results(tmp_path / "job")
    assert {r["verifier_result"]["rewards"]["reward"] for r in results.values()} == {1.0}
    final = json.loads((tmp_path / "job" / "result.json").read_text())
    assert final["finished_at"] is not None and final["stats"]["n_completed_trials"] == 2


def test_warm_below_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="warm >= 0"):
        asyncio.run(run_job([], tmp_path / "job", "oracle", warm=-1))


class SlowAgent:
    """A TrialAgent whose first step is a model call (no sandbox), then one command."""

    name, version = "slow-agent", "1"

    def __init__(self) -> None:
        self.began: list[float] = []
        self.ran: list[float] = []

    async def run(self, sandbox, task, trial_dir):
        from forge_sandbox import AgentReport

        self.began.append(time.time())
        await asyncio.sleep(0.3)  # the model's first answer
        result = await sandbox.exec(SOLVED)
        self.ran.append(time.time())
        assert result.exit_code == 0
        return AgentReport()


@pytest.mark.usefixtures("isolation")
def test_a_cold_sandbox_starts_while_the_agents_first_model_call_runs(
    tmp_path: Path, make_task
) -> None:
    tasks = _tasks(make_task, 1)

    class Slow(LocalSandbox):
        async def start(self) -> None:
            await asyncio.sleep(0.6)
            await super().start()

    agent = SlowAgent()
    summary = asyncio.run(run_job(tasks, tmp_path / "job", agent, warm=0, make_sandbox=Slow))
    assert summary.rewards == {"t0": 1.0}
    (result,) = _results(tmp_path / "job").values()
    setup_done = _at(result["environment_setup"]["finished_at"])
    assert agent.began[0] < setup_done < agent.ran[0]  # overlapped, and no command before it
    assert 0.1 < result["sandbox_starts"]["agent_waited_s"] < agent.ran[0] - agent.began[0]


@pytest.mark.usefixtures("isolation")
@pytest.mark.parametrize("error", [SandboxError, SandboxStateError])
def test_a_sandbox_that_cannot_be_had_is_infrastructure_even_mid_agent(
    tmp_path: Path, make_task, error
) -> None:
    tasks = _tasks(make_task, 1)

    class Broken(LocalSandbox):
        async def start(self) -> None:
            await asyncio.sleep(0.5)  # the agent is in its first model call
            raise error("start: the backend refused (test)")

    summary = asyncio.run(run_job(tasks, tmp_path / "job", SlowAgent(), warm=0,
                                  make_sandbox=Broken))  # fmt: skip
    assert summary.rewards == {"t0": None}  # never scored: not the agent's doing
    assert summary.errors == {"t0": error.__name__}


@pytest.mark.usefixtures("isolation")
def test_an_init_change_with_no_agent_command_is_infrastructure_not_a_zero(
    tmp_path: Path, make_task, monkeypatch
) -> None:
    """NOP runs no command: whatever changed its sandbox's init was not its doing."""
    from forge_sandbox.local import SandboxInitChangedError

    tasks = _tasks(make_task, 1)

    async def changed(self) -> None:
        raise SandboxInitChangedError("sandbox init: changed (test)")

    monkeypatch.setattr(LocalSandbox, "check_init", changed)
    nop = asyncio.run(run_job(tasks, tmp_path / "nop", "nop", warm=0))
    assert nop.rewards == {"t0": None} and nop.errors == {"t0": "SandboxInitChangedError"}
    oracle = asyncio.run(run_job(tasks, tmp_path / "oracle", "oracle", warm=0))
    assert oracle.rewards == {"t0": 0.0} and oracle.errors == {"t0": "AgentCausedFailure"}
