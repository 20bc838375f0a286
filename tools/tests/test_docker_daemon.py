"""tools/docker_daemon.py without root or a daemon: the dockerd command line, the registry and
DockerConfig files it writes, the ready line the noxfile reads, the demo tasks' image form."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import docker_daemon
import pytest
import swebench_image

import forge_data as fd


def test_dockerd_runs_offline_with_everything_under_its_tmp(tmp_path: Path) -> None:
    argv = docker_daemon.dockerd_argv(Path("/c/root"), tmp_path, Path("/tmp/r"))
    assert argv[0] == "/c/root/usr/sbin/dockerd"
    for flag in ("--bridge=none", "--iptables=false", "--ip6tables=false"):
        assert flag in argv
    assert "--host=unix:///tmp/r/docker.sock" in argv and "--exec-root=/tmp/r/exec" in argv
    assert f"--data-root={tmp_path / 'data'}" in argv
    assert "--init-path=/c/root/usr/bin/tini-static" in argv
    assert docker_daemon.daemon_path(Path("/c/root")).startswith(
        "/c/root/usr/sbin:/c/root/usr/bin:"
    )


def test_the_registry_listens_on_loopback_only(tmp_path: Path) -> None:
    text = docker_daemon.registry_config(tmp_path / "r", 5123)
    assert "addr: 127.0.0.1:5123" in text and f"rootdirectory: {tmp_path / 'r'}" in text


def test_the_session_config_rewrites_the_public_base_and_requires_rewrites() -> None:
    config = tomllib.loads(docker_daemon.docker_config("nox-1", "127.0.0.1:5000"))
    assert config["owner"] == "nox-1" and config["require_rewrite"] is True
    assert config["rewrites"] == {"python:3.11-slim": "127.0.0.1:5000/forge/base:bookworm"}


def test_the_ready_line_gives_the_session_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(docker_daemon, "CACHE", tmp_path)
    line = "FORGE_DOCKER_READY DOCKER_HOST=unix:///t/docker.sock config=/t/docker.toml"
    found = re.search(docker_daemon.READY_LINE, line)
    assert found is not None
    env = {"DOCKER_HOST": "unix:///t/docker.sock", "FORGE_DOCKER_CONFIG": "/t/docker.toml"}
    assert docker_daemon.ready_env(found.group(1)) == env
    cli = tmp_path / "root" / "usr" / "bin" / "docker"  # the unpacked CLI, once there
    cli.parent.mkdir(parents=True)
    cli.write_text("")
    assert docker_daemon.ready_env(found.group(1)) == {**env, "FORGE_DOCKER_CLI": str(cli)}
    assert docker_daemon.gc_removed('noise\n{"removed": ["forge-a-1"]}\n') == ["forge-a-1"]
    assert docker_daemon.gc_removed('{"removed": []}') == []


def test_owner_env_points_gc_at_another_owners_containers(tmp_path: Path) -> None:
    config = tmp_path / "docker.toml"
    config.write_text(docker_daemon.docker_config("nox-1", "127.0.0.1:5000"))
    env = {"DOCKER_HOST": "unix:///t/docker.sock", "FORGE_DOCKER_CONFIG": str(config)}
    pods = docker_daemon.owner_env(env, docker_daemon.K8S_POD_OWNER)
    assert pods["DOCKER_HOST"] == env["DOCKER_HOST"] and pods["FORGE_DOCKER_CONFIG"] != str(config)
    copied = tomllib.loads(Path(pods["FORGE_DOCKER_CONFIG"]).read_text())
    assert copied["owner"] == "forge-k8s-api"
    assert copied["rewrites"] == tomllib.loads(config.read_text())["rewrites"]
    assert tomllib.loads(config.read_text())["owner"] == "nox-1"  # the session's own is kept
    config.write_text("require_rewrite = true\n")
    with pytest.raises(docker_daemon.DaemonError, match="expected one top-level `owner"):
        docker_daemon.owner_env(env, "x")


def test_the_pod_owner_is_the_in_process_servers() -> None:
    from forge_sandbox.testing._docker_pods import POD_OWNER

    assert docker_daemon.K8S_POD_OWNER == POD_OWNER


def test_image_form_puts_the_repository_in_the_image_at_testbed(tmp_path: Path) -> None:
    task = tmp_path / "demo"
    (task / "environment" / "workspace" / "pkg").mkdir(parents=True)
    (task / "environment" / "workspace" / "pkg" / "m.py").write_text("x = 1\n")
    (task / "task.toml").write_text('version = "1.0"\n\n[verifier]\ntimeout_sec = 60.0\n')
    docker_daemon.image_form(task)
    assert not (task / "environment" / "workspace").exists()
    assert (task / "environment" / "repo" / "pkg" / "m.py").read_text() == "x = 1\n"
    dockerfile = (task / "environment" / "Dockerfile").read_text()
    assert "FROM python:3.11-slim\nCOPY repo/ /testbed/\nWORKDIR /testbed\n" in dockerfile
    config = tomllib.loads((task / "task.toml").read_text())
    assert config["verifier"] == {"timeout_sec": 60.0, "env": {"FORGE_WORKSPACE": "/testbed"}}
    assert config["solution"] == {"env": {"FORGE_WORKSPACE": "/testbed"}}
    with pytest.raises(docker_daemon.DaemonError, match="expected environment/workspace/"):
        docker_daemon.image_form(task)


def test_a_failed_step_says_what_and_how_to_fix() -> None:
    with pytest.raises(docker_daemon.DaemonError) as info:
        docker_daemon._run(["false"], "download Docker's Debian packages", "apt-get update")
    text = str(info.value)
    assert "expected `false ...` to succeed; found exit 1" in text and "fix: apt-get update" in text


def test_a_non_root_run_is_refused_with_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(docker_daemon.os, "geteuid", lambda: 1000)
    with pytest.raises(docker_daemon.DaemonError, match="expected to run as root"):
        docker_daemon.Daemon(tmp_path, "o").__enter__()


def test_synth_env_rewrites_the_synth_base_and_builds_on_the_host_network(tmp_path) -> None:
    config = tmp_path / "docker.toml"
    config.write_text(docker_daemon.docker_config("nox-x", "127.0.0.1:5999"))
    env = docker_daemon.synth_env({"DOCKER_HOST": "unix:///x", "FORGE_DOCKER_CONFIG": str(config)})
    text = Path(env["FORGE_DOCKER_CONFIG"]).read_text()
    data = tomllib.loads(text)
    assert data["build_network"] == "host" and data["require_rewrite"] is True
    assert data["rewrites"]["debian:bookworm-slim"] == "127.0.0.1:5999/forge/base:bookworm"
    assert data["rewrites"]["python:3.11-slim"] == "127.0.0.1:5999/forge/base:bookworm"
    assert tomllib.loads(config.read_text())["build_network"] == "none"  # the original stays


def test_the_mounts_dockerd_leaves_are_found_deepest_first() -> None:
    mounts = (
        "nsfs /tmp/forge-dockerd-a/exec/netns/default nsfs rw 0 0\n"
        "tmpfs /tmp/forge-dockerd-a tmpfs rw 0 0\n"
        "nsfs /tmp/forge-dockerd-ab/exec/netns/default nsfs rw 0 0\n"  # another daemon's
        "overlay /var/lib/docker/overlay2/x/merged overlay rw 0 0\n"
    )
    found = docker_daemon.mounts_under(Path("/tmp/forge-dockerd-a"), mounts)
    assert found == ["/tmp/forge-dockerd-a/exec/netns/default", "/tmp/forge-dockerd-a"]
    assert docker_daemon.mounts_under(Path("/tmp/elsewhere"), mounts) == []


def _applies(repo: Path, patch: object, *flags: str) -> None:
    check = subprocess.run(["git", "-C", str(repo), "apply", "--check", *flags, "-"],
                           input=str(patch), text=True, capture_output=True)  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_the_published_shaped_rows_import_to_tasks_their_rewrites_cover(tmp_path: Path) -> None:
    """tools/swebench_image.py (run by `nox -s docker`): each row's patches apply to the
    repository its image is built from, and each imported task's FROM is a name rewritten."""
    swebench, swesmith = tmp_path / "swebench", tmp_path / "swesmith"
    swebench.mkdir()
    swesmith.mkdir()
    row = swebench_image.repository(swebench)
    for patch in (row["patch"], row["test_patch"]):  # both apply at base_commit, as built
        _applies(swebench, patch)
    smith = swebench_image.smith_repository(swesmith)
    # the adapter's checkout of the instance branch from origin: the bug, reversed by the oracle
    subprocess.run(["git", "-C", str(swesmith), "remote", "set-url", "origin",
                    str(tmp_path / "origin.git")], check=True)  # fmt: skip
    subprocess.run(["git", "-C", str(swesmith), "fetch", "-q"], check=True)
    subprocess.run(["git", "-C", str(swesmith), "checkout", "-q", str(smith["instance_id"])],
                   check=True)  # fmt: skip
    _applies(swesmith, smith["patch"], "-R")
    for repo in (swebench, swesmith):
        assert (repo / "tests/data.txt").read_text() == "built\n"  # untracked, test side
    config = docker_daemon.docker_config("o", "127.0.0.1:5000")
    assert swebench_image.base_image(config) == "127.0.0.1:5000/forge/base:bookworm"
    gym = dict(row, instance_id=swebench_image.GYM_INSTANCE)
    for kind, each in (("swebench", row), ("swesmith", smith), ("swegym", gym)):
        dockerfile = fd.task_files(kind, each)["environment/Dockerfile"][0]
        public = dockerfile.splitlines()[0].removeprefix("FROM ")
        tag = swebench_image.LOCAL_TAG.format(kind=kind)
        text = swebench_image.with_rewrite(config, public, tag)
        assert tomllib.loads(text)["rewrites"][public] == tag
