"""Benchmark: sandbox start/stop time and per-exec overhead against a plain subprocess.

`run()` returns JSON-serialisable numbers (medians in ms, and ratios). Each exec runs the same
argv both ways, in the same process: through a running LocalSandbox (sh -> python: no_new_privs
+ the seccomp filter -> nsenter into all namespaces + the cgroup leaf -> env -i -> CMD, plus leaf
create/remove and OOM accounting) and through `subprocess.run`. Probe on this machine kind:
about +10 ms per exec for a fresh bwrap per command; the long-lived sandbox is the design that
pays less.

    python packages/forge-sandbox/bench/bench_sandbox.py      # prints the JSON
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import time
from typing import Any

from forge_sandbox import LocalSandbox, SandboxSpec, SandboxUnavailableError

N_STARTS = 5
N_EXECS = 40
COMMANDS = {"true": ["/bin/true"], "python3": ["/usr/bin/python3", "-c", "pass"]}


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


async def _starts(n: int) -> tuple[list[float], list[float]]:
    starts, stops = [], []
    for _ in range(n):
        sandbox = LocalSandbox(SandboxSpec())
        began = time.perf_counter()
        await sandbox.start()
        starts.append(time.perf_counter() - began)
        began = time.perf_counter()
        await sandbox.stop()
        stops.append(time.perf_counter() - began)
    return starts, stops


async def _execs(argv: list[str], n: int) -> list[float]:
    samples = []
    async with LocalSandbox(SandboxSpec()) as sandbox:
        await sandbox.exec(argv)  # warm-up
        for _ in range(n):
            began = time.perf_counter()
            result = await sandbox.exec(argv)
            samples.append(time.perf_counter() - began)
            assert result.exit_code == 0, result
    return samples


def _plain(argv: list[str], n: int) -> list[float]:
    subprocess.run(argv, check=True)  # warm-up
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append(time.perf_counter() - began)
    return samples


def run() -> dict[str, Any]:
    """Medians (ms) and ratios for sandbox start/stop and per-exec overhead."""
    try:
        starts, stops = asyncio.run(_starts(N_STARTS))
    except SandboxUnavailableError as exc:
        return {"skipped": str(exc)}
    report: dict[str, Any] = {
        "n_starts": N_STARTS,
        "n_execs": N_EXECS,
        "sandbox_start_ms": _ms(starts),
        "sandbox_stop_ms": _ms(stops),
    }
    for name, argv in COMMANDS.items():
        sandboxed = _ms(asyncio.run(_execs(argv, N_EXECS)))
        plain = _ms(_plain(argv, N_EXECS))
        report[f"exec_{name}"] = {
            "sandbox_ms": sandboxed,
            "plain_subprocess_ms": plain,
            "overhead_ms": round(sandboxed - plain, 3),
            "ratio": round(sandboxed / plain, 2),
        }
    plain_true = report["exec_true"]["plain_subprocess_ms"]
    report["start_vs_plain_subprocess_ratio"] = round(report["sandbox_start_ms"] / plain_true, 1)
    return report


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
