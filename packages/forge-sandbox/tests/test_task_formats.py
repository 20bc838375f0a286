"""Task folders as Harbor's adapters write them (SWE-bench, SWE-gen-JS, Harbor 0.25's newer
schema) read by load_task; a bad task.toml fails its own trial, named, and the job goes on."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from forge_sandbox import TaskLayoutError, discover_tasks, load_task, run_job
from forge_sandbox.cli import main
from forge_sandbox.docker import DockerConfig
from forge_sandbox.docker._create import exec_user, workdir

SWE_BENCH_TOML = """\
[metadata]
author_name = "SWE-bench"
difficulty = "15 min - 1 hour"
category = "debugging"
tags = ["debugging", "swe-bench"]

[verifier]
timeout_sec = 3000.0

[agent]
timeout_sec = 3000.0

[environment]
build_timeout_sec = 1800.0
cpus = 1
memory = '4G'
storage = '10G'
"""


def _folder(root: Path, name: str, toml: str, dockerfile: str) -> Path:
    """A task folder in the adapters' layout: image only, no environment/workspace/."""
    task = root / name
    for part in ("environment", "tests", "solution"):
        (task / part).mkdir(parents=True)
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text("Fix the bug described in the issue.\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    return task


def test_swe_bench_adapter_folder_reads_with_harbors_units(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        "django__django-11099",
        SWE_BENCH_TOML,
        "FROM swebench/sweb.eval.x86_64.django_1776_django-11099:latest\nWORKDIR /testbed\n",
    )
    (folder / "tests" / "config.json").write_text(json.dumps({"repo": "django/django"}))
    task = load_task(folder)
    assert (task.memory_mb, task.storage_mb, task.cpus) == (4096, 10240, 1)
    assert (task.verifier_timeout_s, task.agent_timeout_s) == (3000.0, 3000.0)
    assert task.config.build_timeout_s == 1800.0 and task.config.network_mode is None


def test_swe_gen_js_folder_allows_the_network(tmp_path: Path) -> None:
    toml = 'version = "1.0"\n[environment]\nallow_internet = true\nmemory = "4G"\n'
    folder = _folder(
        tmp_path,
        "axios__axios-5919",
        toml,
        "FROM node:20\nRUN git clone https://github.com/axios/axios /app/src\nWORKDIR /app/src\n",
    )
    task = load_task(folder)
    assert task.config.network_allowed and task.memory_mb == 4096


def test_newer_schema_folder_with_a_prebuilt_image(tmp_path: Path) -> None:
    toml = (
        'schema_version = "1.4"\n[task]\nname = "org/fix-it"\n'
        '[environment]\ndocker_image = "registry.local/fix-it:1"\nnetwork_mode = "no-network"\n'
        'workdir = "/testbed"\n[agent]\nuser = "app"\n'
    )
    task = load_task(_folder(tmp_path, "fix-it", toml, "FROM scratch\n"))
    assert task.config.docker_image == "registry.local/fix-it:1"
    assert task.config.name == "org/fix-it" and task.config.workdir == "/testbed"
    assert task.config.agent_user == "app" and not task.config.network_allowed


def test_a_refusal_names_file_key_value_and_fix_without_a_chained_traceback(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path, "bad", "[environment]\nmemory = '4GB'\n", "FROM scratch\n")
    with pytest.raises(TaskLayoutError) as info:
        load_task(folder)
    message = str(info.value)
    assert message.startswith(f"{folder / 'task.toml'}: [environment] memory: expected a size")
    assert "found '4GB'" in message and "fix:" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    # following the advice works
    (folder / "task.toml").write_text("[environment]\nmemory = '4G'\n")
    assert load_task(folder).memory_mb == 4096


def test_discover_keeps_an_unreadable_task_only_when_asked(tmp_path: Path) -> None:
    _folder(tmp_path, "good", 'version = "1.0"\n', "FROM scratch\n")
    _folder(tmp_path, "typo", "[verifier]\ntimeout_secs = 5\n", "FROM scratch\n")
    with pytest.raises(TaskLayoutError, match="did you mean 'timeout_sec'"):
        discover_tasks(tmp_path)
    good, typo = discover_tasks(tmp_path, keep_unreadable=True)
    assert good.problem is None and good.name == "good"
    assert typo.name == "typo" and "timeout_secs" in (typo.problem or "")


@pytest.mark.usefixtures("isolation")
def test_one_bad_task_toml_fails_its_own_trial_and_the_job_goes_on(
    tmp_path: Path, fix_add: Path, capsys
) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(fix_add, tasks / "fix-add")
    shutil.copytree(fix_add, tasks / "fix-typo")
    toml = tasks / "fix-typo" / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb", "memroy_mb"))
    # the library: the bad trial is an infrastructure error naming the key; the other is scored
    summary = asyncio.run(
        run_job(discover_tasks(tasks, keep_unreadable=True), tmp_path / "job", "oracle")
    )
    assert summary.rewards == {"fix-add": 1.0, "fix-typo": None}
    assert summary.errors == {"fix-typo": "TaskLayoutError"}
    results = {
        json.loads(p.read_text())["task_name"]: json.loads(p.read_text())
        for p in (tmp_path / "job").glob("*/result.json")
    }
    info = results["fix-typo"]["exception_info"]
    assert "memroy_mb: did you mean 'memory_mb'?" in info["exception_message"]
    # the command: names it up front, runs the rest, exits with the infrastructure code
    assert main(["oracle", str(tasks), "--out", str(tmp_path / "cli")]) == 3
    err = capsys.readouterr().err
    assert "forge-sandbox oracle: fix-typo: " in err and "memroy_mb" in err
    assert "reward=1.0" in err and "TaskLayoutError: fix-typo" in err


def test_the_tasks_workdir_reaches_the_sandbox_else_the_images_own(tmp_path: Path) -> None:
    """`[environment] workdir` overrides where commands run (the Docker backend then ignores the
    image's WORKDIR); a task without it leaves the spec's default untouched, so an image-based
    backend keeps the image's WORKDIR (where SWE-bench puts /testbed)."""
    named = tmp_path / "named"
    (named / "tests").mkdir(parents=True)
    (named / "task.toml").write_text('version = "1.0"\n[environment]\nworkdir = "/app/src"\n')
    (named / "instruction.md").write_text("x\n")
    (named / "tests" / "test.sh").write_text("#!/bin/bash\n")
    spec = load_task(named).sandbox_spec()
    assert spec.workdir == "/app/src" and "workdir" in spec.model_fields_set
    image = {"WorkingDir": "/testbed", "User": ""}
    assert workdir(image, spec) == "/app/src"  # where the Docker backend's commands run
    (named / "task.toml").write_text('version = "1.0"\n')
    plain = load_task(named).sandbox_spec()
    assert "workdir" not in plain.model_fields_set
    assert workdir(image, plain) == "/testbed"


@pytest.mark.parametrize(
    ("user", "fields", "docker_user"),
    [
        (None, {}, "0"),  # the image's user (here root: no USER)
        ('"4321"', {"uid": 4321, "gid": 4321}, "4321:4321"),
        ('"4321:99"', {"uid": 4321, "gid": 99}, "4321:99"),
        ("4321", {"uid": 4321, "gid": 4321}, "4321:4321"),  # a TOML integer
        ('"app"', {"user": "app"}, "app"),
        ('"root"', {"user": "root"}, "root"),
        ('"0"', {"user": "0"}, "0"),  # uid 0 is no spec uid: the Docker backend's user
    ],
)
def test_the_tasks_agent_user_reaches_the_sandbox(
    tmp_path: Path, user: str | None, fields: dict, docker_user: str
) -> None:
    """`[agent] user`: a UID sets the spec's uid/gid (every backend honours it); a name is the
    Docker backend's exec user; no user leaves the image's own."""
    (tmp_path / "tests").mkdir()
    agent = f"[agent]\nuser = {user}\n" if user is not None else ""
    (tmp_path / "task.toml").write_text(f'version = "1.0"\n{agent}')
    (tmp_path / "instruction.md").write_text("x\n")
    (tmp_path / "tests" / "test.sh").write_text("#!/bin/bash\n")
    spec = load_task(tmp_path).sandbox_spec()
    assert {k: getattr(spec, k) for k in ("uid", "gid", "user") if k in spec.model_fields_set} == (
        fields
    )
    assert exec_user({"User": ""}, spec, DockerConfig()) == docker_user  # the commands' user
