"""Every Forge CLI ends quietly when the reader of its stdout goes away (`forge-x ... | head`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIX_ADD = (
    Path(__file__).resolve().parents[2] / "packages/forge-sandbox/tests/fixtures/tasks/fix-add"
)
# one command of each CLI that prints to stdout without a run folder
COMMANDS = {
    "forge_gates": ["show", "formal-5gpu"],
    "forge_data": ["demo-split"],
    "forge_eval": ["select", "{metrics}"],
    "forge_ppo": ["balance", "100", "200", "300", "--budget", "1000", "--json"],
    "forge_rollout": ["vllm-args", "--model", "m", "--max-model-len", "4096"],
    "forge_sandbox": ["doctor", "--no-live", "--json"],
}


@pytest.mark.parametrize("package", sorted(COMMANDS))
def test_output_into_a_closed_pipe_exits_quietly(package: str, tmp_path: Path) -> None:
    metrics = tmp_path / "validation-metrics.jsonl"
    metrics.write_text(json.dumps({"step": 10, "success_rate_all": 0.2, "solved": ["a"]}) + "\n")
    argv = [arg.format(metrics=metrics) for arg in COMMANDS[package]]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line: no race with the writer
    try:
        done = subprocess.run(
            [sys.executable, "-m", f"{package}.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141, (done.returncode, done.stderr)
