"""Ctrl-C or SIGTERM in the middle of a training run: the process exits, and no sandbox, server
or gateway outlives it (they are its daemon threads and its sandboxes' process trees)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from forge_sandbox.testing import is_sandbox_process


def _tree(root: int) -> dict[str, str]:
    """pid -> 'uid comm' for `root` and all its descendants."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,uid=,comm="], capture_output=True,
                         text=True).stdout  # fmt: skip
    rows = [line.split(None, 3) for line in out.splitlines() if line.strip()]
    children: dict[str, list[str]] = {}
    for pid, ppid, _uid, _comm in rows:
        children.setdefault(ppid, []).append(pid)
    ours, todo = {str(root)}, [str(root)]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    return {r[0]: f"{r[2]} {r[3]}" for r in rows if r[0] in ours}


def _alive(pids: dict[str, str]) -> dict[str, str]:
    """The ones still running (zombies are dead: only their exit status waits to be read)."""
    out = {}
    for pid, what in pids.items():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        state = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("State:")), "?")
        if state not in ("Z", "X"):
            out[pid] = f"{what} state={state}"
    return out


def _sandbox_cgroups(owner: int) -> list[str]:
    """The sandbox cgroups `sbx-<owner>-*` that still exist (none when cgroups are absent)."""
    from forge_sandbox import SandboxError, detect_cgroups

    try:
        driver = detect_cgroups()
    except SandboxError:
        return []
    return [name for name in driver.names() if name.startswith(f"sbx-{owner}-")]


@pytest.mark.usefixtures("isolation")
@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_interrupt_mid_rollout_leaves_nothing_behind(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    """Ctrl-C and SIGTERM (what schedulers send) both stop every sandbox before the command
    says so: no sandbox process, no `forge-sbx-*` state folder, no sandbox cgroup is left."""
    # the sandboxes' state folders land here (TMPDIR); their host uid must traverse it:
    # pytest's tmp_path is root-only, and nox's TMPDIR may sit in a 0700 home (the sandbox
    # would then fall back to /tmp), so make it under /tmp
    state_root = Path(tempfile.mkdtemp(prefix="forge-interrupt-", dir="/tmp"))
    state_root.chmod(0o755)
    try:
        _interrupt_case(tmp_path, state_root, signum, code)
    finally:
        shutil.rmtree(state_root, ignore_errors=True)


def _interrupt_case(tmp_path: Path, state_root: Path, signum: signal.Signals, code: int) -> None:
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "forge_ppo.cli", "train", "--config", "smoke-local",
            "--run-dir", str(run_dir), "--cache-dir", str(tmp_path / "cache"),
            "--set", "agent.step_limit=6", "--set", "agent.max_tokens=96",
            "--set", "checkpoint.warm_start=null"]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(state_root)}
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    seen: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            sandboxes = {
                p: d for p, d in _tree(proc.pid).items() if is_sandbox_process(p, d.split()[0])
            }
            if sandboxes:
                seen.update(sandboxes)
                break
            time.sleep(0.05)
        assert seen, "expected a sandbox to start before the interrupt"
        assert list(state_root.glob("forge-sbx-*")), "expected a live sandbox's state folder"
        proc.send_signal(signum)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = proc.stdout.read() if proc.stdout else ""
    assert proc.returncode == code, output[-2000:]
    assert f"interrupted by {signum.name}: sandboxes stopped" in output, output[-2000:]
    # every sandbox process seen is gone (re-parenting to init would not hide it); a killed
    # process may take a moment to be reaped by init, so wait for it, and report what lingers
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(seen):
        time.sleep(0.1)
    assert _alive(seen) == {}
    assert sorted(p.name for p in state_root.glob("forge-sbx-*")) == []
    assert _sandbox_cgroups(proc.pid) == []
    # the run stopped before any update: no checkpoint, no passed smoke
    assert not list(run_dir.glob("checkpoints/global_step_*"))
    ledger = (run_dir / "gates.jsonl").read_text()
    assert "PPO_SMOKE_PASSED" not in ledger
