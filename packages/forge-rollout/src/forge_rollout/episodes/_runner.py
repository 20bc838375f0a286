"""The rollout runner: mini-swe-agent episodes on tasks in sandboxes, as a Harbor job directory.

Per (task, attempt): a fresh sandbox with the task's workspace, the agent (its model calls go
through the gateway under session `<episode id>`), the verifier, then the sandbox is stopped,
always. Failures are classified: gateway unreachable / upstream errors / sandbox failures are
infrastructure errors (no reward); context exhausted and the agent's wall-clock timeout are
agent outcomes (verified, reward kept); step limit and repeated format errors end the episode
normally (`metadata.exit_status`). The trial folder holds the trajectory and the session's
token traces (`agent/traces.jsonl`), so forge-eval and the trainer read one place.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import forge_data
from forge_gates import atomic_write_json
from forge_rollout.episodes._agent import (
    MINI_SWE_AGENT_VERSION,
    AgentConfig,
    GatewayModel,
    NetworkConnectionError,
    SandboxEnvironment,
    make_agent,
)
from forge_sandbox import (
    AgentOutcomeError,
    AgentReport,
    HarborTask,
    JobSummary,
    LocalSandbox,
    Progress,
    Sandbox,
    SandboxFactory,
    discover_tasks,
    load_task,
    run_job,
)

AGENT_NAME = "mini-swe-agent"
OUTCOME_EXCEPTIONS = {"ContextExhausted": "ContextExhausted", "TimeExceeded": "AgentTimeoutError"}


class AgentOutcome(AgentOutcomeError):
    """An episode that ended on the agent's side but still gets verified."""

    def __init__(self, exception_type: str, message: str, report: AgentReport) -> None:
        super().__init__(message, report)
        self.exception_type = exception_type


class MiniSweAgent:
    """A forge-sandbox TrialAgent running mini-swe-agent's DefaultAgent through the gateway."""

    name = AGENT_NAME
    version = MINI_SWE_AGENT_VERSION

    def __init__(
        self,
        *,
        endpoint: str,
        model: str,
        config: AgentConfig,
        traces_dir: str | Path | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.model = model
        self.config = config
        self.traces_dir = Path(traces_dir) if traces_dir is not None else None

    @property
    def config_summary(self) -> dict[str, Any]:
        """What the job config records (the endpoint is not: it does not change outcomes)."""
        return {"model_name": self.model, "agent_config": self.config.model_dump(mode="json")}

    @property
    def model_info(self) -> dict[str, Any]:
        return {"name": self.model, "provider": "forge-gateway"}

    async def run(self, sandbox: Sandbox, task: HarborTask, trial_dir: Path) -> AgentReport:
        # 1. one gateway session per episode
        session_id = f"ep-{uuid.uuid4().hex}"
        model = GatewayModel(
            base_url=f"{self.endpoint}/sessions/{session_id}/v1",
            model=self.model,
            config=self.config,
        )
        env = SandboxEnvironment(sandbox, asyncio.get_running_loop(), self.config)
        agent = make_agent(model, env, self.config, wall_time_limit_s=int(task.agent_timeout_s))
        # 2. the agent loop runs in a daemon thread; sandbox calls come back to this loop. On
        #    cancellation (Ctrl-C) the trial stops its sandbox at once; the thread's next
        #    sandbox call fails and its model call, if one is in flight, is abandoned.
        try:
            result = await _in_daemon_thread(agent.run, task.instruction())
        except asyncio.CancelledError:
            env.cancelled = True
            raise
        finally:
            trajectory = agent.serialize()
            await asyncio.to_thread(self._write_logs, trajectory, session_id, trial_dir)
        # 3. the report, and the outcome class of how it ended
        exit_status = result.get("exit_status", "")
        report = AgentReport(
            n_input_tokens=model.n_input_tokens,
            n_output_tokens=model.n_output_tokens,
            metadata={
                "n_steps": model.n_calls,
                "n_commands": env.n_commands,
                "exec_s": round(env.exec_s, 4),
                "exit_status": exit_status,
                "session_id": session_id,
            },
        )
        if exit_status in OUTCOME_EXCEPTIONS:
            raise AgentOutcome(
                OUTCOME_EXCEPTIONS[exit_status], f"episode ended: {exit_status}", report
            )
        return report

    def _write_logs(self, trajectory: dict[str, Any], session_id: str, trial_dir: Path) -> None:
        """The trajectory and the session's traces (off the event loop: other trials go on)."""
        atomic_write_json(trial_dir / "agent" / "trajectory.json", trajectory)
        if self.traces_dir is None:
            return
        source = self.traces_dir / f"{session_id}.jsonl"
        if source.is_file():
            shutil.copyfile(source, trial_dir / "agent" / "traces.jsonl")


async def _in_daemon_thread(fn: Any, *args: Any) -> Any:
    """Run a blocking call in a daemon thread (never joined at exit, unlike to_thread's)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            value, ok = fn(*args), True
        except BaseException as exc:  # handed to the awaiting coroutine
            value, ok = exc, False
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle, ok, value)

    threading.Thread(target=work, name="forge-agent", daemon=True).start()
    return await future


def check_endpoint(endpoint: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """GET `<endpoint>/health` before any task runs; NetworkConnectionError without answer."""
    url = f"{endpoint.rstrip('/')}/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read()
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise NetworkConnectionError(
            f"expected the model endpoint to answer GET {url}; found {exc}; fix: start the "
            "gateway (forge-rollout gateway) and its inference server, or pass --endpoint"
        ) from exc
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return {"raw": body.decode("utf-8", "replace")[:200]}


def served_model(endpoint: str, timeout_s: float = 10.0) -> str:
    """The one model `<endpoint>/v1/models` lists (the model to use when none is named).

    `forge-rollout serve --model DIR` serves DIR under its path unless --served-model-name
    says otherwise, so a fixed default name would miss it. Several models (a base and its
    LoRA adapters) and none named is an error listing them; so is an empty list."""
    url = f"{endpoint.rstrip('/')}/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            payload = json.loads(response.read())
        ids = [str(card["id"]) for card in payload["data"]]
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise NetworkConnectionError(
            f"expected GET {url} to list the served models; found {exc}; fix: start the "
            "gateway and its inference server, or name the model with --model"
        ) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"expected GET {url} to answer an OpenAI model list; found {exc!r}; "
            "fix: name the model with --model"
        ) from exc
    if len(ids) != 1:
        raise ValueError(
            f"--model: expected one model at {url} when --model is not given; found "
            f"{len(ids)}: {ids}; fix: pass --model NAME with one of them"
        )
    return ids[0]


def _split_name(spec: str, split: str) -> forge_data.SplitName:
    """`split` as one of forge-data's split names; an unknown one is an error naming them."""
    for name in forge_data.SPLITS:
        if name == split:
            return name
    raise ValueError(
        f"--tasks {spec}: expected a split among {list(forge_data.SPLITS)} after the colon; "
        f"found {split!r}; fix: name one of those splits"
    )


def resolve_tasks(spec: str, task_root: str | Path | None = None) -> list[HarborTask]:
    """Tasks from `demo`, `demo:<split>`, `easy` (the bundled easy tier), `realrepo`,
    `realrepo:<split>` (the real-repository tier), a task folder, a folder of tasks, or
    `<frozen split folder>:<split>` (task folders under `task_root`)."""
    if spec == "easy":
        return discover_tasks(forge_data.easy_tasks_root())
    if spec == "realrepo" or spec.startswith("realrepo:"):  # built here on first use
        split_folder = forge_data.ensure_realrepo()
        if spec == "realrepo":
            return discover_tasks(split_folder / "tasks")
        return resolve_tasks(f"{split_folder}:{spec.split(':', 1)[1]}", split_folder / "tasks")
    if spec == "demo" or spec.startswith("demo:"):
        root = forge_data.demo_tasks_root()
        if spec == "demo":
            return discover_tasks(root)
        split_name = _split_name(spec, spec.split(":", 1)[1])
        ids = [t.id for t in forge_data.demo_split_tasks(split_name)]
        return [load_task(root / task_id) for task_id in ids]
    path, _, split = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if split and Path(path).is_dir() and (Path(path) / "manifest.json").is_file():
        if task_root is None:
            raise ValueError(
                f"--tasks {spec}: expected --task-root with the task folders of this split; "
                "found none; fix: pass --task-root DIR"
            )
        ids = [t.id for t in forge_data.read_split_tasks(path, _split_name(spec, split))]
        missing = [i for i in ids if not (Path(task_root) / i).is_dir()]
        if missing:
            raise FileNotFoundError(
                f"--tasks {spec}: expected a folder per task under {task_root}; found none for "
                f"{missing[:5]}; fix: point --task-root at the split's task folders"
            )
        return [load_task(Path(task_root) / i) for i in ids]
    folder = Path(spec)
    if (folder / "task.toml").is_file() or (folder / "instruction.md").is_file():
        return [load_task(folder)]
    if folder.is_dir():
        tasks = discover_tasks(folder)
        if tasks:
            return tasks
    raise FileNotFoundError(
        f"--tasks {spec}: expected 'demo', 'demo:<split>', 'easy', 'realrepo[:<split>]', a "
        "Harbor task folder, a folder of tasks or '<split folder>:<split>'; found nothing "
        "there; fix: check the path"
    )


def resolve_split(tasks_ref: str, split: str) -> list[HarborTask]:
    """A run spec's `data.tasks` + a split name -> task folders: the bundled demo split, or a
    frozen split folder whose Harbor task folders sit in `<folder>/tasks/`."""
    if tasks_ref in ("demo", "realrepo"):
        return resolve_tasks(f"{tasks_ref}:{split}")
    root = Path(tasks_ref)
    return resolve_tasks(f"{root}:{split}", task_root=root / "tasks")


def select_tasks(tasks: list[HarborTask], task_ids: list[str] | None) -> list[HarborTask]:
    """Keep `task_ids` (in that order); an unknown id is an error naming it."""
    if not task_ids:
        return tasks
    by_name = {t.name: t for t in tasks}
    unknown = [i for i in task_ids if i not in by_name]
    if unknown:
        raise KeyError(
            f"unknown task ids {unknown}: expected names among {sorted(by_name)[:20]}; "
            "fix: check --task-ids"
        )
    return [by_name[i] for i in task_ids]


async def run_rollouts(
    tasks: list[HarborTask],
    job_dir: str | Path,
    *,
    endpoint: str,
    model: str | None,
    config: AgentConfig,
    attempts: int = 1,
    concurrency: int = 2,
    traces_dir: str | Path | None = None,
    verifier_timeout_s: float | None = None,
    make_sandbox: SandboxFactory = LocalSandbox,
    progress: Progress | None = None,
    resume: bool = True,
    warm: int | None = None,
) -> JobSummary:
    """Roll out `attempts` episodes per task into a Harbor job directory (resumable).
    `model=None` uses the endpoint's only model (see `served_model`). `warm`: agent sandboxes
    started ahead of the schedule (None: as many as `concurrency`; 0: none; see run_job)."""
    # 1. fail fast, before any sandbox starts, when the endpoint is not there
    await asyncio.to_thread(check_endpoint, endpoint)
    if model is None:
        model = await asyncio.to_thread(served_model, endpoint)
    # 2. every (task, attempt) through forge-sandbox's job runner
    agent = MiniSweAgent(endpoint=endpoint, model=model, config=config, traces_dir=traces_dir)
    return await run_job(
        tasks,
        Path(job_dir),
        agent,
        attempts=attempts,
        resume=resume,
        concurrency=concurrency,
        verifier_timeout_s=verifier_timeout_s,
        make_sandbox=make_sandbox,
        progress=progress,
        warm=warm,
    )
