"""Who caused a failure, helper by helper (no sandbox): the trial's reward, the limits the
agent's processes hit and how they are written, a verifier failure blamed on the agent's change
or kept as infrastructure, and the change's carry into the fresh sandbox. The sandboxes are
fakes with the one or two calls each helper makes; the transfer and verifier functions are
replaced where the trial module calls them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from forge_sandbox import _trial
from forge_sandbox._errors import (
    AddTestsDirError,
    RewardFileNotFoundError,
    SandboxError,
    SandboxStateError,
    SandboxTransferError,
    VerifierError,
    VerifierTimeoutError,
)
from forge_sandbox._spec import KillReport, SandboxSpec
from forge_sandbox._trial import (
    AgentCausedFailure,
    AgentReport,
    AgentResourceLimitError,
    _agent_caused,
    _carry,
    _caused_by_change,
    _kill_agent_processes,
    _limit_text,
    _TrialState,
    _verify,
    _with_limits,
    reward_of,
)
from forge_sandbox.verify._transfer import Change, ChangeError

SPEC = SandboxSpec(pids_max=64, file_size_mb=5, memory_mb=300)


def _kill(killed: int = 0, *, oom: bool = False, pids: bool = False, fsize: bool = False):
    return KillReport(killed=killed, oom_killed=oom, pids_limit_hit=pids, file_size_limit_hit=fsize)


# ------------------------------------------------------------------ the reward
@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        (None, None),
        ({}, None),
        ({"reward": 1}, 1.0),
        ({"reward": 0}, 0.0),
        ({"a": 0.25, "b": 1.0}, 0.25),  # no 'reward': the first value
        ({"a": 0.0, "reward": 1.0}, 1.0),  # 'reward' wins wherever it stands
    ],
)
def test_the_trial_reward(rewards, expected) -> None:
    got = reward_of(rewards)
    assert got == expected and (got is None or type(got) is float)


# ------------------------------------------------------------------ limits the agent hit
def test_a_clean_kill_leaves_the_report_as_it_is() -> None:
    report = AgentReport(n_input_tokens=3)
    assert _with_limits(report, _kill()) is report
    assert _with_limits(None, _kill()) is None


@pytest.mark.parametrize(
    ("killed", "expected"),
    [
        (_kill(2), {"processes_killed": 2, "limits_hit": []}),
        (_kill(0, pids=True), {"processes_killed": 0, "limits_hit": ["pids"]}),
        (
            _kill(1, oom=True, fsize=True),
            {"processes_killed": 1, "limits_hit": ["memory", "file_size"]},
        ),
    ],
)
def test_processes_left_or_limits_hit_go_under_metadata_sandbox(killed, expected) -> None:
    report = AgentReport(n_output_tokens=7, metadata={"n_steps": 4})
    got = _with_limits(report, killed)
    assert got is not None and got.n_output_tokens == 7
    assert got.metadata == {"n_steps": 4, "sandbox": expected}
    assert report.metadata == {"n_steps": 4}  # the original is not changed
    bare = _with_limits(None, killed)
    assert bare == AgentReport(metadata={"sandbox": expected})


def test_the_limit_text_names_each_limit_with_its_value() -> None:
    assert _limit_text(["pids"], SPEC) == "pids_max=64 (forks refused)"
    assert _limit_text(["file_size"], SPEC) == "file_size_mb=5 (SIGXFSZ)"
    assert _limit_text(["memory"], SPEC) == "memory_mb=300 (a process OOM-killed)"
    assert _limit_text(["memory", "pids", "file_size"], SPEC) == (
        "memory_mb=300 (a process OOM-killed) and pids_max=64 (forks refused) and "
        "file_size_mb=5 (SIGXFSZ)"
    )
    assert _limit_text(["cpu", "pids"], SPEC) == "pids_max=64 (forks refused)"
    assert _limit_text([], SPEC) == ""


class _KillBox:
    """A sandbox whose kill_processes reports `report`."""

    def __init__(self, report: KillReport) -> None:
        self.report = report
        self.spec = SPEC
        self.calls = 0

    async def kill_processes(self) -> KillReport:
        self.calls += 1
        return self.report


def test_a_limit_the_agent_hit_is_its_own_outcome() -> None:
    state = _TrialState(report=AgentReport(n_input_tokens=1))
    box = _KillBox(_kill(3, pids=True, fsize=True))
    asyncio.run(_kill_agent_processes(box, state))  # type: ignore[arg-type]
    assert box.calls == 1 and state.agent_oom is False
    assert isinstance(state.failure, AgentResourceLimitError)
    assert str(state.failure) == (
        "agent: its processes ran into the sandbox's pids_max=64 (forks refused) and "
        "file_size_mb=5 (SIGXFSZ); 3 left running were killed before the verifier (the "
        "policy's outcome, scored by the verifier, not an infrastructure error)"
    )
    assert state.report is not None and state.failure.report is state.report
    assert state.report.metadata == {
        "sandbox": {"processes_killed": 3, "limits_hit": ["pids", "file_size"]}
    }


def test_an_oom_is_remembered_and_an_earlier_failure_is_kept() -> None:
    earlier = AgentCausedFailure("step limit")
    state = _TrialState(failure=earlier)
    asyncio.run(_kill_agent_processes(_KillBox(_kill(0, oom=True)), state))  # type: ignore[arg-type]
    assert state.agent_oom is True and state.failure is earlier
    quiet = _TrialState()
    asyncio.run(_kill_agent_processes(_KillBox(_kill(4)), quiet))  # type: ignore[arg-type]
    assert quiet.failure is None and quiet.agent_oom is False
    assert quiet.report == AgentReport(
        metadata={"sandbox": {"processes_killed": 4, "limits_hit": []}}
    )


# ------------------------------------------------------------------ blame
def test_a_failure_caused_by_the_change_scores_zero_labelled() -> None:
    cause = VerifierTimeoutError("test.sh hung")
    state = _TrialState(verified=object())  # type: ignore[arg-type]
    _agent_caused(state, cause)
    assert state.verified is None and state.zero_for is cause
    assert isinstance(state.failure, AgentCausedFailure)
    assert str(state.failure) == (
        "VerifierTimeoutError: test.sh hung (caused by the agent's change: the fresh sandbox "
        "differs from the curated task only by it; scored 0)"
    )
    assert state.failure.report is None
    earlier = AgentResourceLimitError("fork bomb")
    kept = _TrialState(failure=earlier)
    _agent_caused(kept, cause)
    assert kept.failure is earlier and kept.zero_for is cause


def _raised(error: BaseException, cause: BaseException | None) -> BaseException:
    try:
        raise error from cause
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("error", "caused"),
    [
        (_raised(AddTestsDirError("upload"), SandboxTransferError("tar exited 2")), True),
        (_raised(AddTestsDirError("upload"), OSError("host disk")), False),
        (_raised(AddTestsDirError("upload"), SandboxError("daemon")), False),
        (AddTestsDirError("upload"), False),
        (VerifierTimeoutError("hung"), True),
        (_raised(RewardFileNotFoundError("none"), OSError("x")), True),
    ],
)
def test_which_verifier_failures_the_change_can_cause(error, caused) -> None:
    assert _caused_by_change(error) is caused


# ------------------------------------------------------------------ the verifier step
def _change(*paths: str) -> Change:
    return Change(copy=tuple(paths), delete=())


def _verify_with(monkeypatch, outcome: Any, state: _TrialState, tmp_path: Path) -> list[dict]:
    calls: list[dict] = []

    async def fake_run_verifier(fresh, task, **kwargs):
        calls.append({"fresh": fresh, "task": task, **kwargs})
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(_trial, "run_verifier", fake_run_verifier)
    asyncio.run(_verify("fresh", "task", tmp_path, 42.0, state))  # type: ignore[arg-type]
    return calls


def test_a_verified_run_is_recorded_with_its_times(monkeypatch, tmp_path: Path) -> None:
    state = _TrialState(change=_change("a.py"))
    result = object()
    calls = _verify_with(monkeypatch, result, state, tmp_path)
    assert calls == [
        {"fresh": "fresh", "task": "task", "timeout_s": 42.0, "logs_dir": tmp_path / "verifier"}
    ]
    assert state.verified is result and state.zero_for is None and state.failure is None
    times = state.times["verifier"]
    assert times["started_at"] and times["finished_at"]
    assert times["started_at"] <= times["finished_at"]


def test_a_verifier_failure_on_a_change_scores_zero(monkeypatch, tmp_path: Path) -> None:
    error = VerifierTimeoutError("hung")
    state = _TrialState(change=_change("a.py"))
    _verify_with(monkeypatch, error, state, tmp_path)
    assert state.zero_for is error and isinstance(state.failure, AgentCausedFailure)
    assert state.times["verifier"]["finished_at"] is not None


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (None, VerifierTimeoutError("hung")),  # no change recorded
        (Change(copy=(), delete=()), VerifierTimeoutError("hung")),  # the curated task's own run
        (_change("a.py"), _raised(AddTestsDirError("upload"), OSError("host"))),  # the host's
    ],
)
def test_a_verifier_failure_the_change_cannot_have_caused_stays_infrastructure(
    monkeypatch, tmp_path: Path, change, error
) -> None:
    state = _TrialState(change=change)
    with pytest.raises(VerifierError) as raised:
        _verify_with(monkeypatch, error, state, tmp_path)
    assert raised.value is error
    assert state.zero_for is None and state.failure is None
    assert state.times["verifier"]["finished_at"] is None


def test_an_empty_change_with_only_deletions_is_not_empty(monkeypatch, tmp_path: Path) -> None:
    state = _TrialState(change=Change(copy=(), delete=("gone.py",)))
    _verify_with(monkeypatch, VerifierTimeoutError("hung"), state, tmp_path)
    assert isinstance(state.failure, AgentCausedFailure)


# ------------------------------------------------------------------ carrying the change
class _Transfer:
    """Stand-ins for the transfer functions `_carry` calls, recording what they were given."""

    def __init__(self, monkeypatch, carry_error: BaseException | None = None) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.change = _change("src/a.py")
        self.carry_error = carry_error
        monkeypatch.setattr(_trial, "take_manifest", self.take_manifest)
        monkeypatch.setattr(_trial, "diff_manifests", self.diff_manifests)
        monkeypatch.setattr(_trial, "carry_change", self.carry_change)
        monkeypatch.setattr(_trial, "_write_change_audit", self.write_audit)

    async def take_manifest(self, box, scratch, *, after_agent):
        self.calls.append(("take_manifest", (box, scratch, after_agent)))
        return "after"

    def diff_manifests(self, before, after):
        self.calls.append(("diff_manifests", (before, after)))
        return self.change

    async def carry_change(self, agent_box, fresh, change, before, scratch, after, side):
        assert side is None  # the task folder holds no row
        self.calls.append(("carry_change", (agent_box, fresh, change, before.workdir, scratch)))
        if self.carry_error is not None:
            raise self.carry_error
        self.carried = Change(copy=change.copy, delete=change.delete, kept=("conftest.py",))
        return self.carried

    def write_audit(self, change, archive, trial_dir, carried):
        self.calls.append(("audit", (change, archive, trial_dir, carried)))


def _carry_with(transfer: _Transfer, state: _TrialState, tmp_path: Path) -> bool:
    before = SimpleNamespace(workdir="/testbed")
    return asyncio.run(
        _carry("agent", "fresh", before, tmp_path, tmp_path / "trial", state, tmp_path)  # type: ignore[arg-type]
    )


def test_a_change_is_carried_and_audited(monkeypatch, tmp_path: Path) -> None:
    transfer = _Transfer(monkeypatch)
    state = _TrialState()
    assert _carry_with(transfer, state, tmp_path) is True
    # what was carried (the harness's files kept as the task's) is the trial's change, audited
    assert state.change is transfer.carried and state.failure is None
    names = [name for name, _ in transfer.calls]
    assert names == ["take_manifest", "diff_manifests", "carry_change", "audit"]
    assert transfer.calls[3][1][0] is transfer.carried
    assert transfer.calls[0][1] == ("agent", tmp_path, True)
    assert transfer.calls[2][1] == ("agent", "fresh", transfer.change, "/testbed", tmp_path)
    assert transfer.calls[3][1] == (
        transfer.carried,
        tmp_path / "change.tar",
        tmp_path / "trial",
        True,
    )


@pytest.mark.parametrize(
    ("error", "agent_oom"),
    [
        (ChangeError("a link out of the tree"), False),
        (SandboxStateError("its init was killed"), False),
        (SandboxError("the container died"), True),  # its memory hog took it down
    ],
)
def test_a_change_the_agent_made_uncarriable_scores_zero(
    monkeypatch, tmp_path: Path, error, agent_oom
) -> None:
    transfer = _Transfer(monkeypatch, carry_error=error)
    state = _TrialState(agent_oom=agent_oom)
    assert _carry_with(transfer, state, tmp_path) is False
    assert state.zero_for is error and isinstance(state.failure, AgentCausedFailure)
    assert [name for name, _ in transfer.calls][-1] == "audit"  # audited even so
    assert transfer.calls[-1][1][-1] is False  # the raw change: the carry refused it


def test_a_backend_failure_while_carrying_stays_infrastructure(monkeypatch, tmp_path) -> None:
    error = SandboxTransferError("tar exited 2")
    transfer = _Transfer(monkeypatch, carry_error=error)
    state = _TrialState()
    with pytest.raises(SandboxTransferError) as raised:
        _carry_with(transfer, state, tmp_path)
    assert raised.value is error and state.zero_for is None and state.failure is None
    with pytest.raises(RuntimeError):
        _carry_with(
            _Transfer(monkeypatch, carry_error=RuntimeError("bug")), _TrialState(), tmp_path
        )
