"""Oracle / NOP jobs over a folder of tasks, written as a Harbor job directory.

    JOB/config.json                 job config (Harbor JobConfig field names)
    JOB/result.json                 job result: id, started_at, updated_at, finished_at,
                                    n_total_trials, stats{n_completed_trials, ..., evals{...}}
    JOB/<trial>/                    one trial each (`_trial.py`: config.json, result.json, ...)

Every JSON file is written atomically and carries `schema_version` (Harbor ignores the field).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import atomic_write_json
from forge_sandbox._agents import AgentName
from forge_sandbox._errors import SandboxError
from forge_sandbox._protocol import SandboxFactory
from forge_sandbox._task import HarborTask
from forge_sandbox._trial import (
    Prepared,
    TrialAgent,
    discard_prepared,
    environment_config,
    prepare_trial,
    reward_of,
    run_trial,
)
from forge_sandbox.local._sandbox import LocalSandbox

JOB_SCHEMA = "forge-sandbox/job@1"
_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"  # shortuuid's

Progress = Callable[[int, int, dict[str, Any]], None]


class JobSummary(BaseModel):
    """What a job found, per task: a reward or the exception type (never both missing)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_dir: Path = Field(description="The Harbor job directory written.")
    agent: str = Field(description="Agent name: 'oracle', 'nop' or a TrialAgent's name.")
    rewards: dict[str, float | None] = Field(
        description="Task name (or 'task#attempt' when attempts > 1) -> reward (None: error)."
    )
    errors: dict[str, str] = Field(description="Same keys -> exception type, errored only.")

    @property
    def as_expected(self) -> bool:
        """Oracle: every reward 1; NOP: every reward 0; and no errors either way."""
        want = 1.0 if self.agent == "oracle" else 0.0
        return not self.errors and all(r == want for r in self.rewards.values())


def _now() -> str:
    return datetime.now(UTC).isoformat()


def trial_name_for(task_name: str, attempt: int = 0) -> str:
    """Harbor's trial naming (first 32 characters of the task, `__`, 7 characters), with the 7
    characters derived from (task, attempt) so a rerun finds its finished trials."""
    digest = int.from_bytes(hashlib.sha256(f"{task_name}#{attempt}".encode()).digest()[:8], "big")
    suffix = ""
    for _ in range(7):
        digest, index = divmod(digest, len(_ALPHABET))
        suffix += _ALPHABET[index]
    return f"{task_name[:32].rstrip('_-')}__{suffix}"


def _job_result(
    job_id: str,
    started_at: str,
    total: int,
    results: list[dict[str, Any]],
    finished: bool,
    concurrency: int = 1,
) -> dict[str, Any]:
    evals: dict[str, dict[str, Any]] = {}
    rewards_by_eval: dict[str, list[float]] = {}
    for result in results:
        key = f"{result['agent_info']['name']}__adhoc"  # Harbor: agent__dataset ('adhoc')
        stats = evals.setdefault(
            key,
            {
                "n_trials": 0,
                "n_errors": 0,
                "metrics": [],
                "pass_at_k": {},
                "reward_stats": {},
                "exception_stats": {},
            },
        )
        rewards = (result["verifier_result"] or {}).get("rewards")
        if rewards is not None:
            stats["n_trials"] += 1
            for name, value in rewards.items():
                stats["reward_stats"].setdefault(name, {}).setdefault(str(value), []).append(
                    result["trial_name"]
                )
        reward = reward_of(rewards)
        rewards_by_eval.setdefault(key, []).append(reward or 0.0)  # Harbor's Mean: None -> 0
        if result["exception_info"] is not None:
            stats["n_errors"] += 1
            kind = result["exception_info"]["exception_type"]
            stats["exception_stats"].setdefault(kind, []).append(result["trial_name"])
    for key, values in rewards_by_eval.items():
        evals[key]["metrics"] = [{"mean": sum(values) / len(values)}]
    errored = sum(1 for r in results if r["exception_info"] is not None)
    return {
        "schema_version": JOB_SCHEMA,
        "id": job_id,
        "started_at": started_at,
        "updated_at": _now(),
        "finished_at": _now() if finished else None,
        "n_total_trials": total,
        "stats": {
            "n_completed_trials": len(results),
            "n_errored_trials": errored,
            "n_running_trials": 0 if finished else min(concurrency, total - len(results)),
            "n_pending_trials": total - len(results),
            "n_cancelled_trials": 0,
            "n_retries": 0,
            "evals": evals,
            "n_input_tokens": 0,
            "n_cache_tokens": 0,
            "n_output_tokens": 0,
            "cost_usd": None,
        },
    }


async def run_job(
    tasks: list[HarborTask],
    job_dir: Path,
    agent: AgentName | TrialAgent,
    *,
    attempts: int = 1,
    resume: bool = False,
    concurrency: int = 2,
    verifier_timeout_s: float | None = None,
    make_sandbox: SandboxFactory = LocalSandbox,
    progress: Progress | None = None,
    warm: int | None = None,
) -> JobSummary:
    """Run `agent` on every task `attempts` times (one fresh sandbox per trial) into a Harbor
    job directory. `resume=True` continues a job in `job_dir`: trials with a reward are kept,
    the others run again (an interrupted trial leaves no result.json, or one without a reward:
    the interruption reaches the sandboxes' processes too).

    The warm queue: besides the `concurrency` trials running, up to `warm` more trials (None:
    `concurrency`; 0: none) have their agent sandbox started and its tree listed ahead of
    their turn, in schedule order; each is checked alive before use and replaced when dead.
    A trial's verifier sandbox starts while its agent runs, and its sandboxes are stopped
    after its verdict, outside the concurrency slot; the job returns once every one stopped
    (a stop that failed is raised then, naming the sandboxes, after result.json is final)."""
    ahead = concurrency if warm is None else warm
    if concurrency < 1 or attempts < 1 or ahead < 0:
        raise ValueError(
            f"expected concurrency >= 1, attempts >= 1 and warm >= 0; found {concurrency}, "
            f"{attempts}, {warm}"
        )
    job_dir = Path(job_dir)
    config = _job_config(tasks, job_dir, agent, attempts, concurrency, verifier_timeout_s)
    config["environment"] = environment_config(make_sandbox)
    # 1. the job config (or the one being resumed), and the trials already finished
    job_id, started_at, results = _open_job(job_dir, config, resume)
    plan = [(task, k) for task in tasks for k in range(attempts)]
    done = {r["trial_name"] for r in results}
    todo = [(task, k) for task, k in plan if trial_name_for(task.name, k) not in done]
    total = len(plan)
    atomic_write_json(
        job_dir / "result.json", _job_result(job_id, started_at, total, results, False, concurrency)
    )
    gate = asyncio.Semaphore(concurrency)  # trials running
    room = asyncio.Semaphore(concurrency + ahead)  # trials with sandboxes: running or warm
    starting = asyncio.Semaphore(concurrency)  # warm starts at once, in schedule order (the
    # first trials' sandboxes are not slowed by the later ones')
    stops: list[asyncio.Future[None]] = []
    writing = asyncio.Lock()  # the job's result.json

    # 2. every remaining trial, `concurrency` at a time; result.json is refreshed after each
    async def one(task: HarborTask, attempt: int) -> None:
        trial_dir = job_dir / trial_name_for(task.name, attempt)
        async with room:
            warm_start = _WarmStart(task, trial_dir.name, make_sandbox, starting) if ahead else None
            try:
                async with gate:
                    result = await run_trial(
                        task,
                        agent,
                        trial_dir,
                        job_id=job_id,
                        verifier_timeout_s=verifier_timeout_s,
                        make_sandbox=make_sandbox,
                        prepared=warm_start.take() if warm_start else None,
                        cleanup=lambda stop: stops.append(asyncio.ensure_future(stop)),
                    )
            finally:
                if warm_start is not None:
                    await warm_start.discard_untaken()
        async with writing:  # off the event loop, one at a time, each with every result so far
            results.append(result)  # in the lock: each trial reports its own count, in order
            done = len(results)
            summary = _job_result(job_id, started_at, total, results, False, concurrency)
            await asyncio.to_thread(atomic_write_json, job_dir / "result.json", summary)
            if progress is not None:
                progress(done, total, result)

    failed = await _all_ended([asyncio.create_task(one(task, k)) for task, k in todo], stops)
    # 3. the final job result
    atomic_write_json(
        job_dir / "result.json", _job_result(job_id, started_at, total, results, True)
    )
    if failed:
        raise SandboxError(
            f"job {job_dir}: expected every trial's sandboxes stopped; found {len(failed)} "
            f"stop(s) failed: {'; '.join(f'{type(e).__name__}: {e}' for e in failed[:3])}; "
            "fix: remove what they left (forge-sandbox docker gc / k8s gc); the verdicts in "
            "result.json stand"
        )
    return _summary(job_dir, agent, plan, attempts, results)


def _job_config(
    tasks: list[HarborTask],
    job_dir: Path,
    agent: AgentName | TrialAgent,
    attempts: int,
    concurrency: int,
    verifier_timeout_s: float | None,
) -> dict[str, Any]:
    """The job's config.json (Harbor JobConfig field names)."""
    return {
        "schema_version": JOB_SCHEMA,
        "job_name": job_dir.name,
        "jobs_dir": str(job_dir.parent),
        "n_attempts": attempts,
        "n_concurrent_trials": concurrency,
        "agents": [{"name": _agent_name(agent), **getattr(agent, "config_summary", {})}],
        "verifier": {"override_timeout_sec": verifier_timeout_s},
        "tasks": [{"path": str(t.path)} for t in tasks],
    }


def _agent_name(agent: AgentName | TrialAgent) -> str:
    return agent if isinstance(agent, str) else agent.name


async def _all_ended(
    trials: list[asyncio.Task[None]], stops: list[asyncio.Future[None]]
) -> list[BaseException]:
    """Await every trial; cancelled or failed, every trial still ends (and stops its
    sandboxes) before this returns or raises. Returns the stops that failed."""
    try:
        await asyncio.gather(*trials)
    finally:
        for trial in trials:
            if not trial.cancelling():  # once: a second cancel would cut its cleanup short
                trial.cancel()
        if trials:
            await asyncio.wait(trials)
        stopped = await asyncio.gather(*stops, return_exceptions=True)
    return [s for s in stopped if isinstance(s, BaseException)]


def _summary(
    job_dir: Path,
    agent: AgentName | TrialAgent,
    plan: list[tuple[HarborTask, int]],
    attempts: int,
    results: list[dict[str, Any]],
) -> JobSummary:
    attempt_of = {trial_name_for(t.name, k): k for t, k in plan}

    def key(r: dict[str, Any]) -> str:
        return (
            r["task_name"] if attempts == 1 else f"{r['task_name']}#{attempt_of[r['trial_name']]}"
        )

    return JobSummary(
        job_dir=job_dir,
        agent=_agent_name(agent),
        rewards={key(r): reward_of((r["verifier_result"] or {}).get("rewards")) for r in results},
        errors={
            key(r): r["exception_info"]["exception_type"]
            for r in results
            if r["exception_info"] is not None
        },
    )


class _WarmStart:
    """A trial's agent sandbox being started ahead of its turn (the warm queue). The trial
    takes it (then owns it); one never taken (the job was cancelled first) is stopped."""

    def __init__(
        self,
        task: HarborTask,
        trial_name: str,
        make_sandbox: SandboxFactory,
        starts: asyncio.Semaphore,
    ) -> None:
        async def start() -> Prepared:
            async with starts:
                return await prepare_trial(task, trial_name, make_sandbox)

        self._starting = asyncio.ensure_future(start())
        self._taken = False

    def take(self) -> Awaitable[Prepared]:
        self._taken = True
        return self._starting

    async def discard_untaken(self) -> None:
        if self._taken:
            return
        self._taken = True
        await discard_prepared(self._starting)


def _change(key: str, old: Any, new: Any) -> str:
    """`key: <in the job> -> <now>` naming the fields that differ ('' when equal)."""
    if old == new:
        return ""
    if isinstance(old, dict) and isinstance(new, dict):
        fields = sorted(set(old) | set(new))
        return "; ".join(
            _change(f"{key}.{f}", old.get(f), new.get(f))
            for f in fields
            if old.get(f) != new.get(f)
        )
    if key == "agents" and isinstance(old, list) and len(old) == len(new) == 1:
        return _change("agent", old[0], new[0])
    if key == "tasks" and isinstance(old, list):
        return f"tasks: {len(old)} in the job, {len(new)} now (or other task folders)"
    return f"{key} {old!r} in the job, {new!r} now"


def _open_job(
    job_dir: Path, config: dict[str, Any], resume: bool
) -> tuple[str, str, list[dict[str, Any]]]:
    """(job id, started_at, finished trial results) for a new job or one being resumed."""
    if not (job_dir.exists() and any(job_dir.iterdir())):
        atomic_write_json(job_dir / "config.json", config)
        return str(uuid.uuid4()), _now(), []
    if not resume:
        raise FileExistsError(
            f"job dir: expected a new or empty folder; found {job_dir} with files; "
            "fix: pass a new --out folder, or resume it"
        )
    try:
        old_config = json.loads((job_dir / "config.json").read_text())
        old_result = json.loads((job_dir / "result.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise FileExistsError(
            f"resume {job_dir}: expected its config.json and result.json; found {exc}; "
            "fix: pass a new --out folder"
        ) from exc
    keys = ("n_attempts", "agents", "tasks")
    if any(old_config.get(k) != config[k] for k in keys):
        changed = [_change(k, old_config.get(k), config[k]) for k in keys]
        raise FileExistsError(
            f"resume {job_dir}: expected the same {', '.join(keys)} as the job in that folder; "
            f"found {'; '.join(c for c in changed if c)}; fix: rerun with the job's settings "
            "to resume it, or pass a new --out folder for the new settings"
        )
    results = []
    for path in sorted(job_dir.glob("*/result.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # an unreadable trial is rerun (its folder is replaced)
        if _has_reward(result):
            results.append(result)
    return old_result["id"], old_result["started_at"], results


def _has_reward(result: dict[str, Any]) -> bool:
    """A finished trial's verdict is kept on resume only when it has a reward: a trial that
    ended in an infrastructure error (no reward) is rerun, since the interruption being resumed
    (Ctrl-C or SIGTERM reach the sandboxes' processes too) may be what failed it."""
    rewards = (result.get("verifier_result") or {}).get("rewards") or {}
    return isinstance(rewards, dict) and rewards.get("reward") is not None
