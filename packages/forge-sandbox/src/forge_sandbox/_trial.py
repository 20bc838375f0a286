"""One trial: a fresh sandbox, the agent, the verifier, stop; written as Harbor's trial files.

    JOB/<trial>/config.json         trial config (Harbor TrialConfig field names)
    JOB/<trial>/result.json         TrialResult field names: task_name, trial_name, trial_uri,
                                    task_id, task_checksum, agent_info, agent_result,
                                    verifier_result, exception_info, started_at, finished_at, ...
    JOB/<trial>/agent/oracle.txt    solve.sh output;  JOB/<trial>/verifier/  test output, rewards

A trial's steps: 1. a sandbox with the task's workspace, and a manifest of its working tree;
2. the agent (an agent-side outcome is recorded and the verifier still runs); 3. every process
the agent left is killed (a limit it hit, memory included, is its own outcome); 4. a second,
fresh sandbox from the task's environment receives the agent's change to the working tree
(`_transfer.py`: sources only, no bytecode, no .git) and the agent's sandbox is stopped: no
process, /logs, /tests or /tmp state of it reaches the verifier; 5. the verifier, there.

Who caused a failure: the fresh sandbox differs from the curated task (NOP 0, oracle 1 under
the same limits) only by the agent's change, so a verifier that hangs, hits a limit, writes no
reward or shows no evidence on a non-empty change scores 0 (AgentCausedFailure); with an empty
change, and for anything the backend raises (start, transfer, daemon, API), it stays an
infrastructure error (no reward). Every JSON file is written atomically and carries
`schema_version` (Harbor ignores the field).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import tempfile
import time
import traceback
import types
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import atomic_write_json
from forge_sandbox._agents import AGENT_VERSION, AgentName, run_agent
from forge_sandbox._errors import (
    AddTestsDirError,
    AgentTimeoutError,
    SandboxError,
    SandboxStateError,
    SandboxTransferError,
    TaskLayoutError,
    VerifierError,
)
from forge_sandbox._protocol import Sandbox, SandboxFactory
from forge_sandbox._spec import ExecResult, KillReport, SandboxSpec
from forge_sandbox._task import HarborTask, task_checksum
from forge_sandbox.local import SandboxInitChangedError
from forge_sandbox.local._sandbox import LocalSandbox
from forge_sandbox.verify._audit import AUDIT_SCHEMA, audit_change
from forge_sandbox.verify._testside import task_test_side
from forge_sandbox.verify._transfer import (
    Change,
    ChangeError,
    Manifest,
    carry_change,
    diff_manifests,
    take_manifest,
)
from forge_sandbox.verify._verifier import VerifierResult, run_verifier

TRIAL_SCHEMA = "forge-sandbox/trial@1"
ENVIRONMENT_IMPORT_PATH = "forge_sandbox.harbor:LocalSandboxEnvironment"
CHANGE_PATHS_KEPT = 200  # change-audit.json lists at most this many paths of each kind


class AgentReport(BaseModel):
    """What an agent reports for a trial (Harbor's AgentResult fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_input_tokens: int = Field(default=0, ge=0, description="Prompt tokens over all calls.")
    n_cache_tokens: int = Field(default=0, ge=0, description="Prompt tokens served from cache.")
    n_output_tokens: int = Field(default=0, ge=0, description="Completion tokens over all calls.")
    metadata: dict[str, Any] | None = Field(
        default=None, description="Agent-specific facts, e.g. n_steps and exit_status."
    )


class AgentOutcomeError(Exception):
    """An agent-side outcome (step limit, context exhausted...): recorded in exception_info
    under `exception_type` (default: the class name), and the verifier still runs."""

    exception_type: str | None = None

    def __init__(self, message: str, report: AgentReport | None = None) -> None:
        super().__init__(message)
        self.report = report


class AgentCausedFailure(AgentOutcomeError):
    """The verifier could not score the agent's change for a reason the change (or the agent's
    own actions) caused: a hang, a limit, no reward or no evidence in the fresh sandbox, a
    change that cannot be carried. The trial scores 0 (a verdict, not infrastructure)."""


class AgentResourceLimitError(AgentOutcomeError):
    """The agent's processes ran into a sandbox limit (pids_max: e.g. a fork bomb, or
    file_size_mb): the policy's own outcome, not infrastructure. Its processes are killed and
    the verifier runs on what it left (a fork bomb that fixed nothing scores 0)."""


class TrialAgent(Protocol):
    """An agent run_trial can drive besides the built-in oracle and NOP.

    `run` works in the started sandbox and may write under `trial_dir` (its `agent/` folder
    exists). Raise AgentOutcomeError for an agent-side outcome (the verifier still runs); any
    other exception is an infrastructure error (no verification, no reward).
    """

    name: str
    version: str

    async def run(self, sandbox: Sandbox, task: HarborTask, trial_dir: Path) -> AgentReport: ...


def _now() -> str:
    return datetime.now(UTC).isoformat()


def reward_of(rewards: dict[str, float | int] | None) -> float | None:
    """The trial's reward: `rewards['reward']`, else the first value; None without rewards."""
    if not rewards:
        return None
    return float(rewards["reward"] if "reward" in rewards else next(iter(rewards.values())))


def _exception_info(exc: BaseException, at: str) -> dict[str, Any]:
    return {
        "exception_type": getattr(exc, "exception_type", None) or type(exc).__name__,
        "exception_message": str(exc),
        "exception_traceback": "".join(traceback.format_exception(exc)),
        "occurred_at": at,
    }


def _with_limits(report: AgentReport | None, killed: KillReport) -> AgentReport | None:
    """The agent's report with what kill_processes found (if anything: processes left
    running, limits hit) under metadata['sandbox']."""
    if not killed.killed and not killed.limits_hit:
        return report
    base = report or AgentReport()
    sandbox = {"processes_killed": killed.killed, "limits_hit": killed.limits_hit}
    return base.model_copy(update={"metadata": {**(base.metadata or {}), "sandbox": sandbox}})


def _limit_text(limits: list[str], spec: SandboxSpec) -> str:
    text = {
        "pids": f"pids_max={spec.pids_max} (forks refused)",
        "file_size": f"file_size_mb={spec.file_size_mb} (SIGXFSZ)",
        "memory": f"memory_mb={spec.memory_mb} (a process OOM-killed)",
    }
    return " and ".join(text[name] for name in limits if name in text)


@dataclass
class _TrialState:
    """What a trial has so far: each phase's start/finish times, the agent's report, the first
    failure, the verifier's result. A step that raises leaves what earlier steps recorded."""

    times: dict[str, dict[str, str | None]] = field(default_factory=dict)
    report: AgentReport | None = None
    failure: BaseException | None = None
    verified: VerifierResult | None = None
    change: Change | None = None
    agent_oom: bool = False
    zero_for: BaseException | None = None
    # how each sandbox was had: agent "warm" | "cold" | "replaced: ..."; verifier
    # "prestarted" | "replaced: ..."; agent_waited_s: the agent's sandbox calls' wait for it
    starts: dict[str, str | float] = field(default_factory=dict)
    # the sandboxes' stops, run after the verdict (by run_job outside its concurrency slot)
    later: list[Coroutine[Any, Any, None]] = field(default_factory=list)


def environment_config(make_sandbox: SandboxFactory) -> dict[str, Any]:
    """`config.environment`: Harbor's `import_path` where Forge's Harbor environment runs these
    sandboxes (the local backend), else None; `forge_sandbox`: the factory that made them."""
    target = make_sandbox.func if isinstance(make_sandbox, functools.partial) else make_sandbox
    # a class or a function names itself; a backend object (Docker, Kubernetes) its class
    made_by = target if isinstance(target, type | types.FunctionType) else type(target)
    local = isinstance(made_by, type) and issubclass(made_by, LocalSandbox)
    return {
        "import_path": ENVIRONMENT_IMPORT_PATH if local else None,
        "forge_sandbox": f"{made_by.__module__}:{made_by.__qualname__}",
    }


def _trial_config(
    task: HarborTask,
    agent: AgentName | TrialAgent,
    trial_dir: Path,
    job_id: str,
    verifier_timeout_s: float | None,
    make_sandbox: SandboxFactory,
) -> dict[str, Any]:
    """The trial's config.json (Harbor TrialConfig field names)."""
    return {
        "schema_version": TRIAL_SCHEMA,
        "task": {"path": str(task.path)},
        "trial_name": trial_dir.name,
        "trials_dir": str(trial_dir.parent),
        "agent": {"name": _agent_name(agent), **getattr(agent, "config_summary", {})},
        "environment": environment_config(make_sandbox),
        "verifier": {"override_timeout_sec": verifier_timeout_s},
        "job_id": job_id,
    }


def _agent_name(agent: AgentName | TrialAgent) -> str:
    return agent if isinstance(agent, str) else agent.name


async def _run_agent_step(
    sandbox: Sandbox,
    task: HarborTask,
    agent: AgentName | TrialAgent,
    trial_dir: Path,
    state: _TrialState,
) -> None:
    """The agent: a timeout or an agent-side outcome is recorded, and the verifier still runs
    (as in Harbor); any other exception propagates (infrastructure)."""
    state.times["agent_execution"] = {"started_at": _now(), "finished_at": None}
    try:
        if isinstance(agent, str):
            run = await run_agent(agent, sandbox, task, logs_dir=trial_dir / "agent")
            state.report = AgentReport(metadata=run.model_dump())
        else:
            state.report = await agent.run(sandbox, task, trial_dir)
    except AgentTimeoutError as exc:
        state.failure = exc
    except AgentOutcomeError as exc:
        state.failure, state.report = exc, exc.report
    state.times["agent_execution"]["finished_at"] = _now()


async def _kill_agent_processes(sandbox: Sandbox, state: _TrialState) -> None:
    """Nothing the agent started may run on into the change's manifest; a limit its processes
    ran into (memory included: its own commands filled it) is its own outcome, recorded as
    AgentResourceLimitError, and the verifier scores what it left."""
    killed = await sandbox.kill_processes()
    state.report = _with_limits(state.report, killed)
    state.agent_oom = killed.oom_killed
    if state.failure is None and killed.limits_hit:
        state.failure = AgentResourceLimitError(
            f"agent: its processes ran into the sandbox's "
            f"{_limit_text(killed.limits_hit, sandbox.spec)}; {killed.killed} left "
            "running were killed before the verifier (the policy's outcome, scored by "
            "the verifier, not an infrastructure error)",
            state.report,
        )


def _agent_caused(state: _TrialState, cause: BaseException) -> None:
    """Score the trial 0 for a failure the agent's change caused (recorded, labelled)."""
    state.verified = None
    state.zero_for = cause
    if state.failure is None:
        state.failure = AgentCausedFailure(
            f"{type(cause).__name__}: {cause} (caused by the agent's change: the fresh "
            "sandbox differs from the curated task only by it; scored 0)"
        )


def _caused_by_change(exc: VerifierError) -> bool:
    """A verifier failure the code under test can cause: all but an upload of /tests that
    failed outside the sandbox (the backend, the host)."""
    if isinstance(exc, AddTestsDirError):
        return isinstance(exc.__cause__, SandboxTransferError)
    return True


def _write_change_audit(change: Change, archive: Path, trial_dir: Path, carried: bool) -> None:
    """`agent/change-audit.json`: what the agent changed and the audit's flags on it
    (`carried`: the change is what the carry let through)."""
    atomic_write_json(
        trial_dir / "agent" / "change-audit.json",
        {
            "schema_version": AUDIT_SCHEMA,
            "copied": list(change.copy[:CHANGE_PATHS_KEPT]),
            "deleted": list(change.delete[:CHANGE_PATHS_KEPT]),
            # the test harness's files it changed: not carried, the task's versions stay
            "kept": list(change.kept[:CHANGE_PATHS_KEPT]),
            "n_copied": len(change.copy),
            "n_deleted": len(change.delete),
            "n_kept": len(change.kept),
            "flags": audit_change(change, archive, carried=carried),
        },
    )


async def _carry(
    agent_box: Sandbox,
    fresh: Sandbox,
    before: Manifest,
    scratch: Path,
    trial_dir: Path,
    state: _TrialState,
    task_dir: Path,
) -> bool:
    """The agent's change into the fresh sandbox; False when it scored 0 instead."""
    try:
        after = await take_manifest(agent_box, scratch, after_agent=True)
        state.change = diff_manifests(before, after)
        side = await asyncio.to_thread(task_test_side, task_dir)
        carried = False
        try:  # the change less the harness's files and the test side (`kept`: the task's stay)
            state.change = await carry_change(
                agent_box, fresh, state.change, before, scratch, after, side
            )
            carried = True
        finally:
            await asyncio.to_thread(
                _write_change_audit, state.change, scratch / "change.tar", trial_dir, carried
            )
    except (ChangeError, SandboxError) as exc:
        # a change it made uncarriable, or its sandbox dead under its own commands (`kill -9`
        # of its init, its memory hog taking it down); any other backend failure: infrastructure
        ours = isinstance(exc, ChangeError | SandboxStateError) or state.agent_oom
        if not ours:
            raise
        _agent_caused(state, exc)
        return False
    return True


async def _verify(
    fresh: Sandbox,
    task: HarborTask,
    trial_dir: Path,
    verifier_timeout_s: float | None,
    state: _TrialState,
) -> None:
    """The verifier in the fresh sandbox. With a change, a failure of the tests' run (a hang,
    a limit, no reward, no evidence) is the change's doing: scored 0; without one, the run is
    the curated task's own and a failure stays infrastructure."""
    state.times["verifier"] = {"started_at": _now(), "finished_at": None}
    try:
        state.verified = await run_verifier(
            fresh, task, timeout_s=verifier_timeout_s, logs_dir=trial_dir / "verifier"
        )
    except VerifierError as exc:
        if state.change is None or state.change.empty or not _caused_by_change(exc):
            raise
        _agent_caused(state, exc)
    state.times["verifier"]["finished_at"] = _now()


@dataclass
class Prepared:
    """An agent sandbox started, and its working tree listed, before its trial runs (by
    `prepare_trial`; run_job does it ahead of the schedule). Its owner stops it."""

    sandbox: Sandbox
    before: Manifest
    scratch: tempfile.TemporaryDirectory[str]
    setup: dict[str, str | None]  # environment_setup's started_at / finished_at
    _stopping: asyncio.Future[None] | None = field(default=None, repr=False)

    def begin_stop(self) -> None:
        """Start stopping the sandbox (and removing the scratch folder) in the background."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._discard())

    async def discard(self) -> None:
        """Stop the sandbox and remove the scratch folder (once, however often called)."""
        self.begin_stop()
        assert self._stopping is not None
        await self._stopping

    async def _discard(self) -> None:
        try:
            await self.sandbox.stop()
        finally:
            self.scratch.cleanup()


async def prepare_trial(
    task: HarborTask, trial_name: str, make_sandbox: SandboxFactory
) -> Prepared:
    """A started agent sandbox for `task` with the manifest of its working tree; on failure
    nothing is left (the sandbox is stopped) and the error propagates (infrastructure)."""
    started_at = _now()
    if task.problem is not None:  # a task that could not be read fails here
        raise TaskLayoutError(task.problem)
    scratch = tempfile.TemporaryDirectory(prefix="forge-change-")
    box = make_sandbox(task.sandbox_spec(trial_name=trial_name))
    try:
        await box.start()
        before = await take_manifest(box, Path(scratch.name), after_agent=False)
    except BaseException:
        try:
            await box.stop()
        finally:
            scratch.cleanup()
        raise
    return Prepared(box, before, scratch, {"started_at": started_at, "finished_at": _now()})


async def _take_prepared(
    task: HarborTask,
    trial_name: str,
    make_sandbox: SandboxFactory,
    prepared: Awaitable[Prepared] | None,
    state: _TrialState,
) -> Prepared:
    """The trial's agent sandbox: the one started ahead when it is still alive (checked),
    else a new one (a dead one is stopped and replaced; `state.starts` says which). Each is
    in `state.later` (stopped after the verdict) from the moment the trial has it."""
    if prepared is not None:
        ready = await prepared  # its start failure is the trial's (infrastructure)
        state.later.append(ready.discard())
        try:
            await ready.sandbox.check_alive()
        except SandboxError as exc:
            state.starts["agent"] = f"replaced: {type(exc).__name__}: {exc}"[:500]
            # gone before its replacement starts (a pod's name is the trial's); a failed stop
            # is raised with the trial's other stops
            await asyncio.wait([asyncio.ensure_future(ready.discard())])
        else:
            state.starts["agent"] = "warm"
            return ready
    else:
        state.starts["agent"] = "cold"
    ready = await prepare_trial(task, trial_name, make_sandbox)
    state.later.append(ready.discard())
    return ready


async def _start_fresh(task: HarborTask, trial_name: str, make_sandbox: SandboxFactory) -> Sandbox:
    """The verifier's fresh sandbox from the task's environment, started (stopped on failure)."""
    fresh = make_sandbox(task.verifier_spec(trial_name=f"{trial_name}-verify"))
    try:
        await fresh.start()
    except BaseException:
        await fresh.stop()
        raise
    return fresh


async def _fresh_alive(
    starting: asyncio.Task[Sandbox],
    task: HarborTask,
    trial_name: str,
    make_sandbox: SandboxFactory,
    state: _TrialState,
) -> Sandbox:
    """The fresh sandbox started while the agent ran, checked alive, else a new one."""
    fresh = await starting
    try:
        await fresh.check_alive()
    except SandboxError as exc:
        state.starts["verifier"] = f"replaced: {type(exc).__name__}: {exc}"[:500]
        with contextlib.suppress(Exception):  # stopped again, and raised, after the verdict
            await fresh.stop()
        return await _start_fresh(task, trial_name, make_sandbox)
    state.starts["verifier"] = "prestarted"
    return fresh


async def _stop_started(starting: asyncio.Task[Sandbox]) -> None:
    """Stop the sandbox a start task made, once the start has ended (a failed or cancelled
    start left nothing: `_start_fresh` stops its own)."""
    await asyncio.wait([starting])
    if not starting.cancelled() and starting.exception() is None:
        await starting.result().stop()


class _PendingSandbox:
    """The trial's agent sandbox while it is still being had (started, listed, checked): the
    agent starts at once, since its first model call needs no sandbox, and its first sandbox
    call waits for it. No command runs before the tree is listed."""

    def __init__(self, getting: asyncio.Future[Prepared], spec: SandboxSpec) -> None:
        self._getting = getting
        self.spec = spec
        self.waited_s = 0.0  # how long the agent's sandbox calls waited for it (orchestration)
        self.calls = 0  # the agent's calls into its sandbox (none: nothing there is its doing)

    async def _box(self) -> Sandbox:
        self.calls += 1
        if not self._getting.done():
            began = time.monotonic()
            try:
                await asyncio.shield(self._getting)
            finally:
                self.waited_s += time.monotonic() - began
        return self._getting.result().sandbox

    async def exec(
        self,
        command: str | Sequence[str],
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> ExecResult:
        return await (await self._box()).exec(command, cwd=cwd, env=env, timeout_s=timeout_s)

    async def upload(self, local_path: str | os.PathLike[str], sandbox_path: str) -> None:
        await (await self._box()).upload(local_path, sandbox_path)

    async def download(self, sandbox_path: str, local_path: str | os.PathLike[str]) -> None:
        await (await self._box()).download(sandbox_path, local_path)

    async def extract(self, archive: str | os.PathLike[str], sandbox_dir: str) -> None:
        await (await self._box()).extract(archive, sandbox_dir)

    async def kill_processes(self) -> KillReport:
        return await (await self._box()).kill_processes()

    async def check_alive(self) -> None:
        await (await self._box()).check_alive()

    async def start(self) -> None:
        await self._box()

    async def stop(self) -> None:  # the trial stops the real one (state.later)
        return None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def _settled(future: asyncio.Future[Any]) -> None:
    """Wait for `future` to end, whatever its outcome (its error is the trial's, recorded
    where it was awaited; read here too, so that none goes unretrieved)."""
    await asyncio.wait([future])
    if not future.cancelled():
        future.exception()


async def _run_in_sandbox(
    task: HarborTask,
    agent: AgentName | TrialAgent,
    trial_dir: Path,
    verifier_timeout_s: float | None,
    make_sandbox: SandboxFactory,
    state: _TrialState,
    prepared: Awaitable[Prepared] | None,
) -> None:
    """A trial's sandboxes: the agent's (started ahead when `prepared` is given, else now,
    while the agent's first model call runs), and a fresh one for the verifier, started now
    too; each is stopped (in `state.later`) after the verdict."""
    # 1. the agent's sandbox with the task's workspace and the manifest of its tree (being
    #    had while the agent starts), and the verifier's fresh sandbox, checked alive at use
    state.times["environment_setup"] = {"started_at": _now(), "finished_at": None}
    getting = asyncio.ensure_future(
        _take_prepared(task, trial_dir.name, make_sandbox, prepared, state)
    )
    state.later.append(_settled(getting))  # its sandbox joins `later` once it has one
    starting = asyncio.ensure_future(_start_fresh(task, trial_dir.name, make_sandbox))
    state.later.append(_stop_started(starting))
    pending = _PendingSandbox(getting, task.sandbox_spec(trial_name=trial_dir.name))
    try:
        # 2. the agent (a timeout is recorded, and the verifier still runs, as in Harbor)
        await _run_agent_step(pending, task, agent, trial_dir, state)
        ready = await getting  # a failure to have it is infrastructure, raised here
        # 3. nothing the agent started runs on; a limit it hit is its own outcome; the
        #    sandbox's own processes are as start() left them (local backend)
        await _kill_agent_processes(ready.sandbox, state)
        if isinstance(ready.sandbox, LocalSandbox):
            await ready.sandbox.check_init()
    except (SandboxStateError, SandboxInitChangedError) as exc:
        had = getting.done() and not getting.cancelled() and getting.exception() is None
        if not had or pending.calls == 0:
            raise  # never had, or never touched by the agent: infrastructure, not its doing
        # its sandbox died under its own commands, or they reached its init
        state.times["agent_execution"]["finished_at"] = _now()
        _agent_caused(state, exc)
        return
    finally:
        state.starts["agent_waited_s"] = round(pending.waited_s, 4)
        if getting.done() and not getting.cancelled() and getting.exception() is None:
            state.times["environment_setup"] = dict(getting.result().setup)
    # 4. the fresh sandbox receives the agent's change only; the agent's sandbox, every
    #    process of it killed, is removed while the verifier runs in the other one
    fresh = await _fresh_alive(starting, task, trial_dir.name, make_sandbox, state)
    if fresh is not starting.result():
        state.later.append(fresh.stop())
    scratch = Path(ready.scratch.name)
    carried = await _carry(ready.sandbox, fresh, ready.before, scratch, trial_dir, state, task.path)
    ready.begin_stop()
    # 5. the verifier, in the fresh sandbox
    if carried:
        await _verify(fresh, task, trial_dir, verifier_timeout_s, state)


def _verifier_result(state: _TrialState) -> dict[str, Any] | None:
    """Harbor's verifier_result: the verifier's rewards, or 0 for a failure the agent caused."""
    if state.verified is not None:
        return {"rewards": state.verified.rewards}
    if state.zero_for is not None:
        return {"rewards": {"reward": 0.0}}
    return None


def _trial_result(
    task: HarborTask,
    agent: AgentName | TrialAgent,
    trial_dir: Path,
    config: dict[str, Any],
    state: _TrialState,
    started_at: str,
    finished_at: str,
    checksum: str,
) -> dict[str, Any]:
    """The trial's result.json (Harbor TrialResult field names)."""
    return {
        "schema_version": TRIAL_SCHEMA,
        "id": str(uuid.uuid4()),
        "task_name": task.name,
        "trial_name": trial_dir.name,
        "trial_uri": trial_dir.resolve().as_uri(),
        "task_id": {"path": str(task.path)},
        "source": None,
        "task_checksum": checksum,
        "config": config,
        "agent_info": {
            "name": _agent_name(agent),
            "version": AGENT_VERSION if isinstance(agent, str) else agent.version,
            "model_info": getattr(agent, "model_info", None),
        },
        "agent_result": {**(state.report or AgentReport()).model_dump(), "cost_usd": None},
        "verifier_result": _verifier_result(state),
        "verifier_environment_mode": "fresh",
        "sandbox_starts": dict(state.starts),
        "exception_info": (_exception_info(state.failure, finished_at) if state.failure else None),
        "started_at": started_at,
        "finished_at": finished_at,
        "environment_setup": state.times.get("environment_setup"),
        "agent_setup": None,
        "agent_execution": state.times.get("agent_execution"),
        "verifier": state.times.get("verifier"),
        "step_results": None,
    }


async def run_trial(
    task: HarborTask,
    agent: AgentName | TrialAgent,
    trial_dir: Path,
    *,
    job_id: str,
    verifier_timeout_s: float | None = None,
    make_sandbox: SandboxFactory = LocalSandbox,
    prepared: Awaitable[Prepared] | None = None,
    cleanup: Callable[[Coroutine[Any, Any, None]], None] | None = None,
) -> dict[str, Any]:
    """One trial: fresh sandbox, agent, verifier, stop; writes and returns its result.json.

    `prepared`: its agent sandbox started ahead (`prepare_trial`; checked alive before use,
    replaced when dead); the trial owns it from then on. `cleanup`: takes the coroutine that
    stops the trial's sandboxes, to be awaited by the caller (run_job, outside its slot);
    without it run_trial awaits it before returning."""
    for part in ("agent", "verifier", "artifacts"):
        (trial_dir / part).mkdir(parents=True, exist_ok=True)
    config = _trial_config(task, agent, trial_dir, job_id, verifier_timeout_s, make_sandbox)
    # files are written off the event loop (each is two fsyncs: other trials go on meanwhile),
    # and the task is hashed there too (every file of its folder), as it is when the trial starts
    try:
        await asyncio.to_thread(atomic_write_json, trial_dir / "config.json", config)
        checksum = await asyncio.to_thread(task_checksum, task.path)
    except BaseException:  # cancelled (or failed) before the sandboxes were its: still stopped
        if prepared is not None:
            await discard_prepared(prepared)
        raise
    state = _TrialState()
    started_at = _now()
    try:
        await _run_in_sandbox(
            task, agent, trial_dir, verifier_timeout_s, make_sandbox, state, prepared
        )
    except Exception as exc:  # every failure is recorded by type, as Harbor does
        state.failure = state.failure or exc
    except BaseException:  # cancelled: the sandboxes are stopped before it propagates
        await _stop_all(state.later)
        raise
    finished_at = _now()
    result = _trial_result(task, agent, trial_dir, config, state, started_at, finished_at, checksum)
    await asyncio.to_thread(atomic_write_json, trial_dir / "result.json", result)
    if cleanup is None:
        await _stop_all(state.later)
    else:
        cleanup(_stop_all(state.later))
    return result


async def discard_prepared(prepared: Awaitable[Prepared]) -> None:
    """Stop a sandbox started ahead for a trial that ended before using it (once started)."""
    starting = asyncio.ensure_future(prepared)
    await asyncio.wait([starting])
    if not starting.cancelled() and starting.exception() is None:
        await starting.result().discard()


async def _stop_all(stops: list[Coroutine[Any, Any, None]]) -> None:
    """Run every stop (each even when another fails; one that adds stops, as a sandbox still
    being had does, has them run too); raise the first failure after all."""
    failures: list[BaseException] = []
    while stops:
        batch = list(stops)
        stops.clear()
        results = await asyncio.gather(*batch, return_exceptions=True)
        failures += [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise failures[0]
