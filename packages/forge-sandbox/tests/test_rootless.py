"""The local backend as a user other than root: real sandboxes started by uid 65534.

Two ways it is bounded: without a writable cgroup by rlimits (`_proctree`), with a cgroup
parent delegated to that user by cgroups, as root's are. Either way every exec enters the
sandbox through the user namespace that user made (`_seccomp_exec.join`). The probe
(fixtures/rootless_probe.py) runs under that uid with a copy of the packages it imports, since
this test's interpreter and checkout may sit in folders only root can read (a 0700 /root).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge_sandbox.local import detect_cgroups

UID = 65534  # nobody
PROBE = Path(__file__).with_name("fixtures") / "rootless_probe.py"
PACKAGES = (
    "forge_sandbox",
    "forge_gates",
    "pydantic",
    "pydantic_core",
    "typing_extensions",
    "annotated_types",
    "typing_inspection",
    "packaging",
)


def _runs_as(python: str, env: dict[str, str]) -> bool:
    argv = ["setpriv", "--reuid", str(UID), "--regid", str(UID), "--clear-groups", "--"]
    check = (  # the sandbox's exec spawner runs sys.executable again, as that uid
        "import subprocess, sys, forge_sandbox.local; "
        "subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    )
    done = subprocess.run([*argv, python, "-c", check], env=env, capture_output=True)
    return done.returncode == 0


@pytest.fixture
def as_nobody(isolation: None) -> Iterator[tuple[list[str], dict[str, str]]]:
    """(argv prefix, environment) that run the probe as uid 65534 with the packages copied to
    a folder that uid can read, under an interpreter it can reach."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another uid (as that user, the rest of "
                    "the suite is this test)")  # fmt: skip
    site = Path(tempfile.mkdtemp(prefix="forge-rootless-", dir="/tmp"))
    try:
        os.chmod(site, 0o755)
        for name in PACKAGES:
            module = importlib.import_module(name)
            source = Path(module.__file__ or "")
            if source.name == "__init__.py":
                shutil.copytree(source.parent, site / name, ignore=shutil.ignore_patterns("*.pyc"))
            else:
                shutil.copy2(source, site / source.name)
        for path in site.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(site),
               "TMPDIR": "/tmp", "HOME": "/tmp"}  # fmt: skip
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        candidates = [f"/usr/bin/{version}", f"/usr/local/bin/{version}", sys.executable]
        python = next((p for p in candidates if Path(p).exists() and _runs_as(p, env)), None)
        if python is None:
            pytest.fail(
                f"expected a {version} that uid {UID} can run (one of {candidates}); found "
                f"none; fix: apt-get install -y {version}, or put this interpreter in a folder "
                "others may reach"
            )
        prefix = ["setpriv", "--reuid", str(UID), "--regid", str(UID), "--clear-groups", "--"]
        yield [*prefix, python, "-s", str(PROBE)], env
    finally:
        shutil.rmtree(site, ignore_errors=True)


def _probe(as_nobody: tuple[list[str], dict[str, str]], parent: str) -> dict:
    argv, env = as_nobody
    done = subprocess.run([*argv, parent], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _checked_both_ways(out: dict) -> None:
    assert out["euid"] == UID
    assert out["id"] == ["1000", "1000", "made"]  # the sandbox's uid/gid, its files written
    assert out["daemon"] == "started"
    assert out["bomb"]["exit"] == 124  # the forks beyond pids_max refused, until its timeout
    assert out["bomb"]["refused"], out
    assert out["killed"] >= 1  # the daemon, which no exec's process tree holds any more
    assert out["pids_after_kill"] == 3  # bwrap, pid 1, its sleep
    assert out["init"] == ["/usr/bin/bwrap", "/.forge-init/sh", "/.forge-init/sleep"]
    assert out["after"] == "still"
    assert out["left"] == []  # stop() left no process
    assert out["locked"] == 0 and out["state_left"] is False  # nor files it could not remove


def test_a_user_without_a_cgroup_gets_sandboxes_bounded_by_rlimits(as_nobody) -> None:
    out = _probe(as_nobody, "forge-sandbox")  # root's: not writable by that uid
    assert out["limits"] == "rlimits"
    assert out["pids_with_daemon"] == 4
    # RLIMIT_DATA: the 1 GiB allocation fails in the process (256 MiB), no OOM kill
    assert out["hog"] == {"exit": 1, "memory_error": True}
    _checked_both_ways(out)


def test_a_user_with_a_delegated_cgroup_gets_cgroup_limits(as_nobody) -> None:
    driver = detect_cgroups()
    parent = f"forge-sandbox-delegated-{os.getpid()}"
    if driver.version == 1:
        folders = [p.parent / parent for p in driver.root._unique()]
    else:
        pytest.skip("a cgroup v2 host: delegating there is systemd's (not verified here)")
    try:
        for folder in folders:
            folder.mkdir()
            for path in (folder, *folder.iterdir()):
                os.chown(path, UID, UID)
        out = _probe(as_nobody, parent)
    finally:
        for folder in folders:  # the probe's sandbox cgroups went with its stop()
            if folder.exists():
                folder.rmdir()
    assert out["limits"] == "cgroup v1"
    # the cgroup's 256 MiB: the kernel's OOM killer takes the allocating process
    assert out["hog"]["exit"] == 137, out
    _checked_both_ways(out)
