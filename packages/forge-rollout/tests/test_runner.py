"""The rollout runner end to end: scripted policy -> real gateway -> real sandboxes -> verifier.

The scripted policy is a test double upstream that answers like vLLM (token ids = UTF-8 bytes,
log-prob -0.5 each): first call, the task's own oracle script as the bash action; second call,
the submit command. Solving every demo task with reward 1 proves the loop, the sandbox wiring
and the verifier; the traces it leaves must convert into rows that reproduce every call.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import forge_data
from forge_eval import score_path
from forge_rollout._aio import run_app_in_thread
from forge_rollout.episodes._agent import AgentConfig, NetworkConnectionError
from forge_rollout.episodes._runner import resolve_tasks, run_rollouts, select_tasks
from forge_rollout.testing._scripted import SCRIPTED_WINDOW, scripted_upstream
from forge_rollout.traces._job_rows import rows_from_job
from forge_sandbox import LocalSandbox, SandboxStartError
from forge_sandbox.testing import is_sandbox_process

WINDOW = SCRIPTED_WINDOW


def demo_solutions(tasks) -> dict[str, str]:
    """Instruction text -> the task's oracle script (run as the agent's bash action)."""
    return {t.instruction().strip(): (t.path / "solution" / "solve.sh").read_text() for t in tasks}


def _state(pid: str) -> str:
    """The process state letter from /proc (R, S, D, Z, ...), or '-' when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "-"
    return stat.rsplit(")", 1)[1].split()[0]


def _running(pid: str) -> bool:
    return _state(pid) not in ("-", "Z", "X")


def _uid_processes() -> list[str]:
    """Sandbox-uid processes descended from this test process (other test runs on the same
    machine have their own sandboxes and are not counted)."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,ppid=,uid=,comm="], capture_output=True, text=True
    ).stdout
    rows = [line.split(None, 3) for line in out.splitlines() if line.strip()]
    children: dict[str, list[str]] = {}
    for pid, ppid, _uid, _comm in rows:
        children.setdefault(ppid, []).append(pid)
    ours, todo = set(), [str(os.getpid())]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    return [" ".join(r) for r in rows if r[0] in ours and is_sandbox_process(r[0], r[2])]


@pytest.mark.usefixtures("isolation")
def test_scripted_policy_solves_every_demo_task(tmp_path: Path, gateway_at) -> None:
    tasks = resolve_tasks("demo")
    assert len(tasks) == 12
    traces = tmp_path / "traces"
    config = AgentConfig(step_limit=4, temperature=1.0)
    with run_app_in_thread(scripted_upstream(demo_solutions(tasks))) as upstream:
        with gateway_at(upstream, traces, window=WINDOW, reserve=0) as (gateway, _):
            job = tmp_path / "job"
            seen: list[int] = []
            summary = asyncio.run(
                run_rollouts(
                    tasks,
                    job,
                    endpoint=gateway,
                    model="scripted",
                    config=config,
                    traces_dir=traces,
                    concurrency=2,
                    progress=lambda done, total, _r: seen.append(done),
                )
            )
    assert summary.errors == {}
    assert summary.rewards == {t.name: 1.0 for t in tasks}
    assert sorted(seen) == list(range(1, 13))
    # every trial: trajectory, traces, Harbor fields, mini-swe-agent exit status
    for trial in job.glob("*/result.json"):
        result = json.loads(trial.read_text())
        meta = result["agent_result"]["metadata"]
        assert meta["exit_status"] == "Submitted" and meta["n_steps"] == 2
        assert result["agent_result"]["n_input_tokens"] > 0
        assert result["agent_info"]["name"] == "mini-swe-agent"
        assert (trial.parent / "agent" / "trajectory.json").is_file()
        assert len((trial.parent / "agent" / "traces.jsonl").read_text().splitlines()) == 2
    # forge-eval reads the job unchanged
    report = score_path(job)
    (panel,) = report.panels
    assert (panel.n_attempts, panel.solved, panel.infra_errors) == (12, 12, 0)
    assert panel.mean_agent_steps == 2
    # traces -> rows: one row per episode (the second prompt extends the first call)
    rows, stats = rows_from_job(job)
    assert stats.rows == 12 and stats.calls == 24 and stats.prefix_breaks == 0
    for row in rows:
        assert row.header.n_calls == 2 and row.header.reward == 1.0
        assert int(row.token_level_rewards.nonzero().max()) == int(
            row.response_mask.nonzero().max()
        )
    # overlong filtering reads each call's finish_reason from the trace files
    assert rows_from_job(job, mask_truncated=True)[1].masked_truncated_calls == 0
    trace_file = next(job.glob("*/agent/traces.jsonl"))
    first, *rest = trace_file.read_text().splitlines()
    assert json.loads(first)["finish_reason"] == "stop"
    trace_file.write_text(
        "\n".join([first.replace('"finish_reason":"stop"', '"finish_reason":"length"'), *rest])
        + "\n"
    )
    masked_rows, masked = rows_from_job(job, mask_truncated=True)
    assert masked.masked_truncated_calls == 1 and masked.rows == 12
    assert sum(int(r.response_mask.sum()) for r in masked_rows) < sum(
        int(r.response_mask.sum()) for r in rows
    )


@pytest.mark.usefixtures("isolation")
def test_attempts_resume_and_bad_input(tmp_path: Path, gateway_at) -> None:
    tasks = select_tasks(resolve_tasks("demo:train"), None)[:2]
    traces = tmp_path / "traces"
    config = AgentConfig(step_limit=3)
    with pytest.raises(KeyError, match=r"unknown task ids \['nope'\]"):
        select_tasks(tasks, ["nope"])
    with pytest.raises(FileNotFoundError, match="expected 'demo'"):
        resolve_tasks(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"expected a split among \['train', .*found 'bogus'"):
        resolve_tasks("demo:bogus")
    with run_app_in_thread(scripted_upstream(demo_solutions(tasks))) as upstream:
        with gateway_at(upstream, traces, window=WINDOW, reserve=0) as (gateway, _):
            job = tmp_path / "job"
            summary = asyncio.run(
                run_rollouts(
                    tasks,
                    job,
                    endpoint=gateway,
                    model="scripted",
                    config=config,
                    traces_dir=traces,
                    attempts=2,
                )
            )
            assert len(summary.rewards) == 4 and set(summary.rewards.values()) == {1.0}
            # rerun: everything finished, nothing runs again
            again = asyncio.run(
                run_rollouts(
                    tasks,
                    job,
                    endpoint=gateway,
                    model="scripted",
                    config=config,
                    traces_dir=traces,
                    attempts=2,
                )
            )
            assert again.rewards == summary.rewards
            assert len(list(job.glob("*/result.json"))) == 4

            # a sandbox that cannot start: infrastructure, no reward, the others go on
            def broken(spec):
                if "textkit" in str(spec.workspace) or "statkit" in str(spec.workspace):
                    raise SandboxStartError("bwrap could not start (test)")
                return LocalSandbox(spec)

            bad = asyncio.run(
                run_rollouts(
                    tasks,
                    tmp_path / "bad",
                    endpoint=gateway,
                    model="scripted",
                    config=config,
                    traces_dir=traces,
                    make_sandbox=broken,
                )
            )
    assert set(bad.errors.values()) <= {"SandboxStartError"}
    assert all(bad.rewards[name] is None for name in bad.errors)
    assert forge_data  # the demo split comes from forge-data


def test_unreachable_endpoint_fails_before_any_task(tmp_path: Path) -> None:
    tasks = resolve_tasks("demo:train")[:1]
    with pytest.raises(NetworkConnectionError, match="start the gateway"):
        asyncio.run(
            run_rollouts(
                tasks,
                tmp_path / "job",
                endpoint="http://127.0.0.1:9",
                model="m",
                config=AgentConfig(),
            )
        )
    assert not (tmp_path / "job").exists()


@pytest.mark.usefixtures("isolation")
def test_cancel_stops_every_sandbox(tmp_path: Path, gateway_at) -> None:
    tasks = resolve_tasks("demo:train")[:2]
    config = AgentConfig(step_limit=3, request_timeout_s=60)
    waiting: list[float] = []  # model calls that reached the upstream (and hang there)
    hung = scripted_upstream(demo_solutions(tasks), hung=waiting)
    with run_app_in_thread(hung, handler_cancellation=True) as up:
        with gateway_at(up, tmp_path / "traces", window=WINDOW, reserve=0) as (gateway, _):

            async def main() -> None:
                run = asyncio.create_task(
                    run_rollouts(
                        tasks,
                        tmp_path / "job",
                        endpoint=gateway,
                        model="scripted",
                        config=config,
                        traces_dir=tmp_path / "traces",
                        concurrency=2,
                    )
                )
                # wait until both agents' first model calls hang in the upstream and their
                # sandboxes are up, then cancel at once: the gateway gives up on the upstream
                # 5 s after a call came (a 504 that ends the trial), so the cancel must come
                # well before that (polling ps alone once took over 5 s under .ci/run's load)
                deadline = time.monotonic() + 60
                while len(waiting) < 2 and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert len(waiting) >= 2, f"expected 2 hanging model calls; found {len(waiting)}"
                # the first model call runs while the sandboxes start: wait for them (briefly)
                deadline = time.monotonic() + 3
                while not before and time.monotonic() < deadline:
                    before.extend(_uid_processes())
                    await asyncio.sleep(0.05)
                assert before, "expected running sandboxes before the interrupt"
                run.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await run

            before: list[str] = []
            asyncio.run(main())
    assert _uid_processes() == []
    # and none of the sandbox processes seen before survived (even re-parented to init). A
    # killed process re-parented to init stays a zombie until init reaps it (slowly on this
    # VM): a zombie runs nothing, so only a live state counts, polled for up to 15 s
    deadline = time.monotonic() + 15
    alive = [row for row in before if _running(row.split()[0])]
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [row for row in before if _running(row.split()[0])]
    assert alive == [], [(row, _state(row.split()[0])) for row in alive]
    assert list((tmp_path / "job").glob("*/result.json")) == []  # nothing half-counted


def test_resolve_split_demo_and_frozen_folder(tmp_path: Path) -> None:
    import shutil

    from forge_rollout.episodes._runner import resolve_split

    test = resolve_split("demo", "test")
    assert [t.name for t in test] == [t.id for t in forge_data.demo_split_tasks("test")]
    # a frozen split folder with its task folders under tasks/
    frozen = tmp_path / "split"
    shutil.copytree(forge_data.demo_split_root(), frozen)
    with pytest.raises(FileNotFoundError, match="expected a folder per task"):
        resolve_split(str(frozen), "test")
    forge_data.write_demo_tasks(frozen / "tasks")
    assert [t.name for t in resolve_split(str(frozen), "test")] == [t.name for t in test]
