"""The local backend's command lines and the spec models (pure: nothing is run)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from pydantic import ValidationError

from forge_sandbox import (
    ExecResult,
    SandboxSpec,
    SandboxUnavailableError,
    TaskLayoutError,
    load_task,
)
from forge_sandbox._task import TaskConfigWarning
from forge_sandbox.local._bwrap import (
    Tools,
    bwrap_argv,
    command_argv,
    drop_to,
    exec_argv,
    exec_join,
    find_tools,
    join_argv,
    root_binds,
)

TOOLS = Tools(bwrap="/usr/bin/bwrap", nsenter="/usr/bin/nsenter", setpriv="/s", sh="/bin/sh")


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_bwrap_flags_isolate() -> None:
    argv = bwrap_argv(TOOLS, SandboxSpec(), Path("/state/ws"), 7)
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"):
        assert flag in argv
    assert _pairs(argv, "--cap-drop") == ["ALL"]
    assert "--share-net" not in argv
    assert argv[argv.index("--bind") : argv.index("--bind") + 3] == [
        "--bind",
        "/state/ws",
        "/workspace",
    ]
    assert _pairs(argv, "--bind") == ["/state/ws"]  # the only writable host folder
    assert _pairs(argv, "--remount-ro") == ["/"]
    assert _pairs(argv, "--tmpfs") == ["/", "/tmp", "/logs", "/tests", "/solution"]
    assert _pairs(argv, "--info-fd") == ["7"]
    assert _pairs(argv, "--uid") == ["1000"] and _pairs(argv, "--gid") == ["1000"]
    assert argv.index("--remount-ro") > argv.index("--bind")  # after every mount under /


def test_storage_mb_makes_workspace_and_tmp_sized_tmpfs_without_a_host_bind() -> None:
    argv = bwrap_argv(TOOLS, SandboxSpec(storage_mb=8), Path("/state/ws"), 7)
    assert "--bind" not in argv  # no writable host folder at all
    assert _pairs(argv, "--ro-bind")[-1] == "/state/ws"  # the seed, read-only
    for target in ("/workspace", "/tmp"):
        at = argv.index(target, argv.index("--tmpfs") + 2) - 1
        assert argv[at - 2 : at + 2] == ["--size", str(8 << 20), "--tmpfs", target]
    assert argv[-1].startswith("cp -a /.forge-workspace-seed/. /workspace/ || exit 1; ")
    assert argv.index("--remount-ro") > argv.index("/.forge-workspace-seed")


def test_host_network_is_opt_in() -> None:
    assert "--share-net" in bwrap_argv(TOOLS, SandboxSpec(network="host"), Path("/w"), 3)


def test_root_binds_host_and_rootfs(tmp_path: Path) -> None:
    host = root_binds(SandboxSpec())
    assert host[:3] == ["--ro-bind", "/usr", "/usr"]
    assert "/etc" in host and "/root" not in host and "/home" not in host
    rootfs = tmp_path / "rootfs"
    for name in ("usr", "etc", "proc", "tmp", "opt"):
        (rootfs / name).mkdir(parents=True)
    (rootfs / "bin").symlink_to("usr/bin")
    binds = root_binds(SandboxSpec(rootfs=rootfs))
    assert binds[:3] == ["--symlink", "usr/bin", "/bin"]
    assert _pairs(binds, "--ro-bind") == [str(rootfs / n) for n in ("etc", "opt", "usr")]


def test_exec_argv_enters_every_namespace_as_the_sandbox_user() -> None:
    argv = exec_argv(TOOLS, SandboxSpec(), 4242, "/workspace", {"A": "1"}, ["ls", "-l"])
    # the spawner (which installed no_new_privs + the filter) runs it: it starts with nsenter
    assert argv[:3] == ["/usr/bin/nsenter", "-t", "4242"]
    for flag in ("-U", "-m", "-u", "-i", "-n", "-p", "-C", "-r"):
        assert flag in argv
    nsenter = argv
    assert _pairs(nsenter, "-W") == ["/workspace"] and _pairs(nsenter, "-S") == ["1000"]
    assert argv[-6:] == ["/usr/bin/env", "-i", "--", "A=1", "ls", "-l"]


def test_exec_argv_as_another_user_keeps_its_ids_for_bwraps_mapping() -> None:
    argv = exec_argv(TOOLS, SandboxSpec(), 4242, "/w", {}, ["id"], root=False)
    assert "--preserve-credentials" in argv  # nsenter's setgroups is denied in bwrap's userns
    assert "-S" not in argv and "-G" not in argv


def test_exec_join_sets_the_leaf_the_rlimits_and_for_another_user_its_namespace() -> None:
    spec = SandboxSpec(file_size_mb=3, open_files=64, pids_max=9, memory_mb=100)
    as_root = exec_join(spec, [Path("/cg/a"), Path("/cg/b")], 4242, 500, root=True)
    assert as_root == {
        "procs": ["/cg/a", "/cg/b"],
        "rlimits": [["core", 0], ["nofile", 64], ["fsize", 3 * 1024 * 1024]],
        "oom_score_adj": 500,
        "userns_of": None,  # root's nsenter joins every namespace itself
    }
    rootless = exec_join(spec, [], 4242, 500, root=False, rlimits=True)
    assert rootless["userns_of"] == "/proc/4242/ns/mnt"  # its owner: bwrap's outer userns
    assert rootless["rlimits"][-2:] == [["nproc", 9], ["data", 100 * 1024 * 1024]]


def test_join_argv_counts_files_and_blocks() -> None:
    argv = join_argv(TOOLS, [Path("/cg/a"), Path("/cg/b")], SandboxSpec(file_size_mb=3), ["x"], 500)
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[3:] == ["sh", "2", "/cg/a", "/cg/b", "1024", str(3 * 2048), "500", "x"]


def test_drop_to_only_when_asked() -> None:
    assert drop_to(TOOLS, None) == []
    assert drop_to(TOOLS, 100000)[:5] == ["/s", "--reuid", "100000", "--regid", "100000"]


def test_command_argv() -> None:
    assert command_argv(SandboxSpec(), "echo hi") == ["/bin/bash", "-c", "echo hi"]
    assert command_argv(SandboxSpec(), ["ls", Path("/x")]) == ["ls", "/x"]
    with pytest.raises(ValueError, match="empty"):
        command_argv(SandboxSpec(), [])
    with pytest.raises(ValueError, match="absolute path"):
        command_argv(SandboxSpec(), ["A=1", "ls"])


def test_missing_tool_error_lists_the_install_command() -> None:
    with pytest.raises(SandboxUnavailableError) as info:
        find_tools("/nope/bwrap")
    assert info.value.violations[0].fix == "apt-get install -y bubblewrap"


def test_spec_is_frozen_strict_and_documented() -> None:
    spec = SandboxSpec()
    with pytest.raises(ValidationError):
        spec.memory_mb = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        SandboxSpec(unknown=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="absolute"):
        SandboxSpec(workdir="workspace")
    with pytest.raises(ValidationError):
        SandboxSpec(uid=0)
    with pytest.raises(ValidationError):
        SandboxSpec(env={"A=B": "x"})
    for model in (SandboxSpec, ExecResult):
        assert all(f.description for f in model.model_fields.values()), model
    assert spec.base_env()["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert spec.network == "none"


def test_task_spec_uses_task_toml(fix_add: Path) -> None:
    task = load_task(fix_add)
    assert (task.verifier_timeout_s, task.agent_timeout_s) == (60, 60)
    spec = task.sandbox_spec(pids_max=99)
    assert spec.workspace == fix_add / "environment" / "workspace"
    assert (spec.memory_mb, spec.cpus, spec.pids_max) == (512, 1.0, 99)


def _task_toml(tmp_path: Path, toml: str) -> Path:
    (tmp_path / "task.toml").write_text('version = "1.0"\n' + toml)
    return tmp_path


@pytest.mark.parametrize(
    ("toml", "key", "nearest"),
    [
        ("[verifier]\ntimeout_secs = 5\n", "timeout_secs", "'timeout_sec'"),
        ("[enviroment]\nmemory_mb = 512\n", "'enviroment'", "'environment'"),
        ("[environment]\nmemory = 512\n", "memory", "'memory_mb'"),
        ("[agent]\ntimeout = 5\n", "timeout", "'timeout_sec'"),
        ("verifer_timeout = 5\n", "'verifer_timeout'", "'verifier'"),
    ],
)
def test_task_toml_typo_is_refused_with_the_nearest_key(
    tmp_path: Path, toml: str, key: str, nearest: str
) -> None:
    with pytest.raises(TaskLayoutError) as info:
        load_task(_task_toml(tmp_path, toml))
    message = str(info.value)
    assert key in message and f"did you mean {nearest}?" in message, message


@pytest.mark.parametrize("value", ["0", "-5", "0.0", '"60"', "true"])
@pytest.mark.parametrize("table", ["verifier", "agent"])
def test_timeout_zero_negative_or_not_a_number_is_refused(
    tmp_path: Path, table: str, value: str
) -> None:
    with pytest.raises(TaskLayoutError, match=rf"\[{table}\] timeout_sec: expected a number"):
        load_task(_task_toml(tmp_path, f"[{table}]\ntimeout_sec = {value}\n"))


def test_harmless_foreign_harbor_key_warns_and_is_ignored(tmp_path: Path) -> None:
    """Issue 33 changed this: allow_internet is read now (the task's network), so the ignored
    key that warns is gpus."""
    toml = "[environment]\ngpus = 0\nmemory_mb = 512\n[metadata]\nanything = 1\n"
    with pytest.warns(TaskConfigWarning, match=r"\[environment\] gpus: a Harbor key"):
        task = load_task(_task_toml(tmp_path, toml))
    assert task.memory_mb == 512


def test_allow_internet_is_read_as_the_tasks_network(tmp_path: Path) -> None:
    toml = "[environment]\nallow_internet = true\nmemory_mb = 512\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a key Forge reads: no warning
        task = load_task(_task_toml(tmp_path, toml))
    assert task.config.network_mode == "public" and task.config.network_allowed
