"""Oracle/NOP jobs in Harbor's job layout, and the CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from forge_sandbox import discover_tasks, load_task, run_job
from forge_sandbox.cli import main

TRIAL_FIELDS = {
    "task_name",
    "trial_name",
    "trial_uri",
    "task_id",
    "task_checksum",
    "config",
    "agent_info",
    "agent_result",
    "verifier_result",
    "exception_info",
    "started_at",
    "finished_at",
}


def _tasks(tmp_path: Path, fix_add: Path, make_task) -> Path:
    """fix-add (oracle 1, NOP 0) plus a task whose verifier never writes a reward."""
    make_task("no-reward", "exit 0\n", solve_sh="true\n")
    shutil.move(str(fix_add), tmp_path / "tasks" / "fix-add")
    return tmp_path / "tasks"


@pytest.mark.usefixtures("isolation")
def test_oracle_job_layout_and_harbor_names(tmp_path: Path, fix_add: Path, make_task) -> None:
    tasks = _tasks(tmp_path, fix_add, make_task)
    job = tmp_path / "job"
    seen: list[tuple[int, int]] = []
    summary = asyncio.run(
        run_job(
            discover_tasks(tasks),
            job,
            "oracle",
            concurrency=2,
            progress=lambda done, total, _r: seen.append((done, total)),
        )
    )
    assert summary.rewards == {"fix-add": 1.0, "no-reward": None}
    assert summary.errors == {"no-reward": "RewardFileNotFoundError"}
    assert not summary.as_expected
    assert sorted(seen) == [(1, 2), (2, 2)]

    config = json.loads((job / "config.json").read_text())
    assert config["agents"] == [{"name": "oracle"}] and config["n_concurrent_trials"] == 2
    assert config["environment"] == {
        "import_path": "forge_sandbox.harbor:LocalSandboxEnvironment",
        "forge_sandbox": "forge_sandbox.local._sandbox:LocalSandbox",
    }
    result = json.loads((job / "result.json").read_text())
    assert result["n_total_trials"] == 2 and result["finished_at"] is not None
    stats = result["stats"]
    assert stats["n_completed_trials"] == 2 and stats["n_errored_trials"] == 1
    evals = stats["evals"]["oracle__adhoc"]
    assert evals["n_trials"] == 1 and evals["n_errors"] == 1
    assert evals["metrics"] == [{"mean": 0.5}]  # Harbor's Mean: a missing reward counts 0
    assert list(evals["exception_stats"]) == ["RewardFileNotFoundError"]

    trials = {json.loads(p.read_text())["task_name"]: p.parent for p in job.glob("*/result.json")}
    assert set(trials) == {"fix-add", "no-reward"}
    good = json.loads((trials["fix-add"] / "result.json").read_text())
    assert set(good) >= TRIAL_FIELDS
    assert good["trial_name"].startswith("fix-add__") and len(good["trial_name"]) == 16
    assert good["trial_uri"] == trials["fix-add"].resolve().as_uri()
    assert good["verifier_result"] == {"rewards": {"reward": 1.0}}
    assert good["exception_info"] is None
    assert good["agent_info"] == {"name": "oracle", "version": "1.0.0", "model_info": None}
    assert good["agent_result"]["metadata"]["exit_code"] == 0
    assert len(good["task_checksum"]) == 64
    for part in ("agent/oracle.txt", "verifier/reward.txt", "verifier/test-stdout.txt"):
        assert (trials["fix-add"] / part).is_file(), part
    bad = json.loads((trials["no-reward"] / "result.json").read_text())
    assert bad["verifier_result"] is None  # never reward 0
    info = bad["exception_info"]
    assert info["exception_type"] == "RewardFileNotFoundError"
    assert set(info) == {
        "exception_type",
        "exception_message",
        "exception_traceback",
        "occurred_at",
    }


@pytest.mark.usefixtures("isolation")
def test_image_only_task_is_an_infrastructure_error_not_a_score(tmp_path: Path, make_task) -> None:
    """No environment/workspace/ (only a Dockerfile): refused by name, never run on an empty
    /workspace. The test would pass there (exit 0 writes reward 1) if it were run."""
    task = make_task("image-only", "echo 1 > /logs/verifier/reward.txt\n", solve_sh="true\n")
    shutil.rmtree(task / "environment" / "workspace")
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.11\nCOPY workspace /workspace\n"
    )
    summary = asyncio.run(run_job(discover_tasks(task.parent), tmp_path / "job", "oracle"))
    (result_path,) = (tmp_path / "job").glob("*/result.json")
    result = json.loads(result_path.read_text())
    assert result["verifier_result"] is None
    info = result["exception_info"]
    assert info["exception_type"] == "TaskLayoutError"
    assert "task image-only: expected the repository in" in info["exception_message"]
    assert summary.rewards == {"image-only": None}
    assert summary.errors == {"image-only": "TaskLayoutError"}


@pytest.mark.usefixtures("isolation")
def test_job_refuses_a_used_folder(tmp_path: Path, fix_add: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "x").write_text("")
    with pytest.raises(FileExistsError, match="new or empty"):
        asyncio.run(run_job(discover_tasks(fix_add), tmp_path / "job", "nop"))


@pytest.mark.usefixtures("isolation")
def test_cli_oracle_and_nop(tmp_path: Path, fix_add: Path, capsys) -> None:
    assert main(["oracle", str(fix_add), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "[1/1] fix-add" in err and "reward=1.0" in err and "1 as expected" in err
    assert main(["nop", str(fix_add), "--out", str(tmp_path / "n"), "--concurrency", "1"]) == 0
    assert "reward=0.0" in capsys.readouterr().err


@pytest.mark.usefixtures("isolation")
def test_cli_oracle_exit_codes(tmp_path: Path, make_task) -> None:
    make_task("wrong", "echo 0 > /logs/verifier/reward.txt\n", solve_sh="true\n")
    assert main(["oracle", str(tmp_path / "tasks"), "--out", str(tmp_path / "a")]) == 1
    make_task("broken", "exit 0\n", solve_sh="true\n")
    assert main(["oracle", str(tmp_path / "tasks"), "--out", str(tmp_path / "b")]) == 3
    assert main(["oracle", str(tmp_path / "none"), "--out", str(tmp_path / "c")]) == 2


@pytest.mark.usefixtures("isolation")
def test_cli_run_verify_doctor(tmp_path: Path, fix_add: Path, capsys) -> None:
    assert main(["run", "--task", str(fix_add), "--", "grep", "-c", "a - b", "calc.py"]) == 0
    assert capsys.readouterr().out == "1\n"
    assert main(["run", "--", "sh", "-c", "exit 7"]) == 7
    assert main(["run", "--timeout", "0.5", "--", "sleep", "10"]) == 124
    assert "timed out" in capsys.readouterr().err
    assert main(["verify", str(fix_add)]) == 0
    assert json.loads(capsys.readouterr().out)["reward"] == 0.0
    assert main(["doctor", "--json", "--no-live"]) == 0
    probes = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert probes["bwrap"]["ok"] and probes["cgroups"]["ok"]
    assert main(["doctor"]) == 0
    assert "live-sandbox" in capsys.readouterr().out


def test_cli_help_mentions_every_command(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("run", "verify", "oracle", "nop", "doctor", "exit codes"):
        assert command in out


@pytest.mark.usefixtures("isolation")
def test_a_user_name_on_the_local_backend_is_an_infrastructure_error(
    tmp_path: Path, make_task
) -> None:
    """bwrap takes a UID: `[agent] user = "app"` fails the trial by name, never runs it as
    someone else (the test would pass: exit 0 writes reward 1)."""
    task = make_task("named-user", "echo 1 > /logs/verifier/reward.txt\n", solve_sh="true\n")
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + '\n[agent]\nuser = "app"\n')
    summary = asyncio.run(run_job(discover_tasks(task.parent), tmp_path / "job", "oracle"))
    assert summary.rewards == {"named-user": None}
    assert summary.errors == {"named-user": "TaskLayoutError"}


def test_config_names_the_backend_that_made_the_sandboxes() -> None:
    """A Docker or Kubernetes job is not recorded as Forge's Harbor environment (local)."""
    import functools

    from forge_sandbox._trial import environment_config
    from forge_sandbox.local import LocalSandbox

    class Backend:  # a backend object (as DockerBackend / KubernetesBackend): called per sandbox
        def __call__(self, spec):
            raise AssertionError("not started")

    assert environment_config(Backend()) == {
        "import_path": None,
        "forge_sandbox": f"{__name__}:test_config_names_the_backend_that_made_the_sandboxes."
        "<locals>.Backend",
    }
    local = environment_config(functools.partial(LocalSandbox, bwrap="bwrap"))
    assert local["import_path"] == "forge_sandbox.harbor:LocalSandboxEnvironment"

    def factory(spec):
        raise AssertionError("not started")

    assert environment_config(factory)["import_path"] is None


@pytest.mark.usefixtures("isolation")
def test_a_jobs_files_are_written_off_the_event_loop(
    tmp_path: Path, fix_add: Path, monkeypatch
) -> None:
    """Every file a trial writes is two fsyncs; on the event loop's thread each would stall
    every other trial of the job. The job's result.json, the trial's config, result and
    change audit, and the verifier's outputs are written from worker threads, each file
    whole (the job's result.json ends with every trial); the task is hashed there too."""
    import threading

    from forge_gates import files
    from forge_sandbox import _job, _trial
    from forge_sandbox.verify import _verifier

    loop_threads: set[int] = set()
    written: list[tuple[str, bool]] = []
    real = files.atomic_write_bytes

    def spy(path, data):
        where = f"{Path(path).parent.name}/{Path(path).name}"
        written.append((where, threading.get_ident() in loop_threads))
        return real(path, data)

    def text(path, value):
        return spy(path, value.encode("utf-8"))

    def as_json(path, obj):
        return text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")

    for module in (_job, _trial, _verifier):
        for name, fake in (("atomic_write_json", as_json), ("atomic_write_text", text)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fake)
    hashed: list[bool] = []  # the task's checksum reads every file of its folder
    real_checksum = _trial.task_checksum

    def checksum(folder):
        hashed.append(threading.get_ident() in loop_threads)
        return real_checksum(folder)

    monkeypatch.setattr(_trial, "task_checksum", checksum)

    async def go():
        loop_threads.add(threading.get_ident())
        job = tmp_path / "job"
        return await run_job([load_task(fix_add)], job, "oracle", attempts=2, concurrency=2)

    summary = asyncio.run(go())
    assert set(summary.rewards.values()) == {1.0}
    names = {where.split("/")[1] for where, _ in written if not where.startswith("job/")}
    assert {"config.json", "result.json", "change-audit.json", "test-stdout.txt"} <= names
    assert sum(where == "job/result.json" for where, _ in written) == 4  # start, 2 trials, end
    on_loop = sorted({where for where, on in written if on})
    assert on_loop == ["job/config.json", "job/result.json"]  # the job's start and its end
    assert hashed == [False, False]  # once per trial, off the loop
    job = json.loads((tmp_path / "job" / "result.json").read_text())
    assert job["n_total_trials"] == 2 and len(list((tmp_path / "job").glob("*/result.json"))) == 2


@pytest.mark.usefixtures("isolation")
def test_progress_counts_each_trial_once_while_result_json_is_being_written(
    tmp_path: Path, fix_add: Path, monkeypatch
) -> None:
    """The job's result.json is written off the loop; a trial that ends meanwhile must not
    make the one being written report its count (two trials reporting 2, none 1)."""
    import time

    from forge_sandbox import _job

    job = tmp_path / "job"
    real = _job.atomic_write_json

    def slow(path, obj):  # the first trial's write waits until the second trial has ended
        if Path(path) == job / "result.json" and obj["stats"]["n_completed_trials"] == 1:
            deadline = time.monotonic() + 10
            while len(list(job.glob("*/result.json"))) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # its trial returns to the job meanwhile
        return real(path, obj)

    monkeypatch.setattr(_job, "atomic_write_json", slow)
    seen: list[int] = []
    asyncio.run(
        run_job(
            [load_task(fix_add)], job, "oracle", attempts=2, concurrency=2,
            progress=lambda done, total, _result: seen.append(done),
        )
    )  # fmt: skip
    assert seen == [1, 2]
