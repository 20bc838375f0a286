"""SIGTERM (what schedulers send) is handled like Ctrl-C inside `sigterm_as_interrupt`: the
asyncio cleanups run, then the command exits 143 (130 for SIGINT) with its own message."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from forge_gates import sigterm_as_interrupt

    async def work(marker):
        try:
            print("READY", flush=True)
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.05)  # an awaiting cleanup, as a sandbox's stop() is
            open(marker, "w").write("cleaned")

    with sigterm_as_interrupt() as interrupt:
        try:
            asyncio.run(work(sys.argv[1]))
        except KeyboardInterrupt:
            print(f"interrupted by {interrupt.name}", flush=True)
            sys.exit(interrupt.exit_code)
    """
)


@pytest.mark.parametrize(
    "inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"]
)
@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_signal_runs_cleanups_and_exits_with_its_code(
    tmp_path: Path, signum: signal.Signals, code: int, inherited: signal.Handlers
) -> None:
    """Also when the parent left SIGINT ignored (a script's background job, `nohup cmd &`):
    asyncio.run then installs no SIGINT handler of its own unless the context restores one."""
    marker = tmp_path / "cleaned"
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(marker)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, inherited),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, out
    assert f"interrupted by {signum.name}" in out
    assert marker.read_text() == "cleaned"
