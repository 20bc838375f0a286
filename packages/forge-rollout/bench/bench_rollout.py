"""Gateway overhead on loopback: direct calls vs Forge's gateway (vs rllm-model-gateway 0.1.0).

One run, one machine, one trivial upstream (the stub in `--canned` mode: the same vLLM-shaped
answer, 256 prompt + 32 completion tokens with log-probs, for every call), each server in its
own process. The client keeps C sessions busy, each sending its calls one after another.
Reported per concurrency C in {1, 8, 64}: p50/p99 latency and requests/s per target, and the
latency the gateway ADDS (its p50/p99 minus the direct p50/p99 at the same C). Forge runs twice:
counting prompts with the upstream's /tokenize (default, one extra round trip) and with an
in-process tokenizer (`--tokenizer --no-tito`: the canned stub's fixed prompt count cannot match
the token-in-token-out path's, which refuses such an answer). Any error answer fails the bench
(its latencies would measure nothing). rllm-model-gateway runs when FORGE_RLLM_GATEWAY_PYTHON
names a Python that has it installed (a separate venv: its dependencies differ); otherwise it
is reported as skipped and both targets as not measured, with the reason (so `nox -s bench`
fails unless `-- --allow-unmeasured`). The targets are ratios against it on the same load in
the same run: Forge's requests/s at C=8 and C=64 >= 3x its, and its added p50 at C=1 over
Forge's >= C1_SPEEDUP_TARGET (the added milliseconds are reported beside them). Bounded: 2,000
calls per setting (500 at C=1), at most 6 s of load per setting.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from forge_rollout._aio import start_ready

SCHEMA = "forge/bench-rollout@1"
CALLS = {1: 500, 8: 2000, 64: 2000}
MAX_SECONDS = 6.0
C1_SPEEDUP_TARGET = 1.5  # rllm-model-gateway's added p50 at C=1 / Forge's (was < 2 ms, issue 37)
WINDOW, RESERVE = 4096, 256
BODY = {
    "model": "stub",
    "messages": [
        {"role": "system", "content": "You are a software engineering agent. " * 8},
        {"role": "user", "content": "Run the tests and fix the failing one.\n" * 20},
    ],
    "max_tokens": 256,
    "temperature": 1.0,
}


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"expected {url} to answer within {timeout}s; it did not")


async def _load(url_for, concurrency: int, calls: int) -> dict[str, Any]:
    """`concurrency` sessions share `calls` calls; latency per call, requests/s overall."""
    latencies: list[float] = []
    errors = 0
    remaining = calls
    deadline = time.perf_counter() + MAX_SECONDS
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as client:

        async def session(index: int) -> None:
            nonlocal remaining, errors
            url = url_for(f"bench-{concurrency}-{index}")
            while remaining > 0 and time.perf_counter() < deadline:
                remaining -= 1
                started = time.perf_counter()
                async with client.post(url, json=BODY) as answer:
                    await answer.read()
                    if answer.status != 200:
                        errors += 1
                latencies.append((time.perf_counter() - started) * 1000)

        for _ in range(min(20, calls)):  # warm-up: connections, caches
            async with client.post(url_for("warmup"), json=BODY) as answer:
                await answer.read()
        started = time.perf_counter()
        await asyncio.gather(*(session(i) for i in range(concurrency)))
        wall = time.perf_counter() - started
    return {
        "calls": len(latencies),
        "errors": errors,
        "p50_ms": round(_percentile(latencies, 50) or 0.0, 3),
        "p99_ms": round(_percentile(latencies, 99) or 0.0, 3),
        "requests_per_s": round(len(latencies) / wall, 1) if wall > 0 else None,
    }


def _rllm(stub_url: str, tmp: Path) -> tuple[subprocess.Popen | None, str | None, str]:
    python = os.environ.get("FORGE_RLLM_GATEWAY_PYTHON")
    if not python:
        return None, None, "FORGE_RLLM_GATEWAY_PYTHON is not set (see the bench's docstring)"
    port = _free_port()
    argv = [python, "-m", "rllm_model_gateway", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--worker", f"{stub_url}/v1", "--db-path", str(tmp / "rllm.db"), "--store", "sqlite"]
    argv += ["--log-level", "warning"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/health")
    except RuntimeError as error:
        process.kill()
        return None, None, f"rllm-model-gateway did not start: {error}"
    return process, f"http://127.0.0.1:{port}", ""


def _start_targets(
    tmp: Path, processes: list[subprocess.Popen]
) -> tuple[dict[str, Any], str | None, str]:
    """1. The trivial upstream, Forge's gateway twice, and rllm-model-gateway if present (each
    process appended to `processes` as it starts); (URL of each target, rllm's URL, why not)."""
    cli = [sys.executable, "-m", "forge_rollout.cli"]
    stub, stub_url = start_ready(
        [*cli, "stub-upstream", "--canned", "--window", str(WINDOW),
         "--completion-tokens", "32"], "FORGE_STUB",
    )  # fmt: skip
    processes.append(stub)
    gateway_args = ["--upstream", stub_url, "--port", "0", "--window", str(WINDOW)]
    gateway_args += ["--reserve", str(RESERVE)]
    forge, forge_url = start_ready(
        [*cli, "gateway", *gateway_args, "--traces", str(tmp / "traces")],
        "FORGE_GATEWAY",
    )
    processes.append(forge)
    from forge_rollout.models._tiny import train_tokenizer

    tokenizer_dir = tmp / "tokenizer"
    train_tokenizer().save_pretrained(tokenizer_dir)
    local, local_url = start_ready(
        [*cli, "gateway", *gateway_args, "--traces", str(tmp / "traces-local"),
         "--tokenizer", str(tokenizer_dir), "--no-tito"], "FORGE_GATEWAY",
    )  # fmt: skip
    processes.append(local)
    rllm, rllm_url, rllm_reason = _rllm(stub_url, tmp)
    if rllm is not None:
        processes.append(rllm)
    targets = {
        "direct": lambda s: f"{stub_url}/v1/chat/completions",
        "forge": lambda s: f"{forge_url}/sessions/{s}/v1/chat/completions",
        "forge_local_count": lambda s: f"{local_url}/sessions/{s}/v1/chat/completions",
    }
    if rllm_url:
        targets["rllm"] = lambda s: f"{rllm_url}/sessions/{s}/v1/chat/completions"
    return targets, rllm_url, rllm_reason


def _measure(targets: dict[str, Any]) -> dict[str, Any]:
    """2. The same load against every target, concurrency by concurrency."""
    settings: dict[str, Any] = {}
    for concurrency, calls in CALLS.items():
        row = {
            name: asyncio.run(_load(url_for, concurrency, calls))
            for name, url_for in targets.items()
        }
        failed = {name: r["errors"] for name, r in row.items() if r["errors"]}
        if failed:  # latencies of error answers measure nothing
            raise RuntimeError(
                f"expected every call answered 200 at concurrency {concurrency}; found "
                f"errors {failed}; fix: the gateway or stub setup of this bench"
            )
        direct = row["direct"]
        row["added_ms"] = {
            name: {
                "p50": round(row[name]["p50_ms"] - direct["p50_ms"], 3),
                "p99": round(row[name]["p99_ms"] - direct["p99_ms"], 3),
            }
            for name in targets
            if name != "direct"
        }
        if "rllm" in row and row["rllm"]["requests_per_s"]:
            row["forge_rps_over_rllm"] = round(
                row["forge"]["requests_per_s"] / row["rllm"]["requests_per_s"], 2
            )
        settings[f"c{concurrency}"] = row
    return settings


def _judged(settings: dict[str, Any], rllm_url: str | None, rllm_reason: str) -> list[Any]:
    """3. The targets, judged by tools/bench.py (never as timed assertions): ratios against
    rllm-model-gateway on the same load in the same run; without it they are not measured,
    with the reason."""
    reason = rllm_reason or "rllm-model-gateway answered no call"
    over_rllm = [settings[c].get("forge_rps_over_rllm") for c in ("c8", "c64")]
    throughput: dict[str, Any] = {
        "name": "forge_rps_over_rllm_at_c8_c64",
        "op": ">=",
        "threshold": 3,
        "unit": "x",
        "measured": min(over_rllm) if rllm_url and None not in over_rllm else None,
        "reason": reason,
        "note": "the lower of C=8 and C=64",
    }
    added = settings["c1"]["added_ms"]
    forge, rllm = added["forge"]["p50"], added.get("rllm", {}).get("p50")
    latency: dict[str, Any] = {
        "name": "gateway_c1_added_p50_speedup_over_rllm",
        "op": ">=",
        "threshold": C1_SPEEDUP_TARGET,
        "unit": "x",
        "measured": None,
        "note": f"added p50 at C=1: Forge {forge} ms, rllm-model-gateway {rllm} ms",
    }
    if not rllm_url or rllm is None:
        latency["reason"] = reason
    elif forge <= 0:
        latency["reason"] = f"Forge's added p50 {forge} ms is not above 0 (noise)"
    else:
        latency["measured"] = round(rllm / forge, 3)
    return [latency, throughput]


def _summary(settings: dict[str, Any]) -> str:
    """What the run measured beside the targets (the bench table's `(measured)` row)."""
    c1, c8, c64 = (settings[c] for c in ("c1", "c8", "c64"))
    rllm = {c: row["added_ms"].get("rllm", {}).get("p50") for c, row in settings.items()}
    return (
        f"added p50 at C=1: Forge {c1['added_ms']['forge']['p50']} ms (/tokenize count), "
        f"{c1['added_ms']['forge_local_count']['p50']} ms (local count), rllm-model-gateway "
        f"{rllm['c1']} ms; req/s Forge {c8['forge']['requests_per_s']} (C=8), "
        f"{c64['forge']['requests_per_s']} (C=64) vs rllm "
        f"{c8.get('rllm', {}).get('requests_per_s')}, {c64.get('rllm', {}).get('requests_per_s')}"
    )


def run() -> dict[str, Any]:
    processes: list[subprocess.Popen] = []
    result: dict[str, Any] = {"schema": SCHEMA, "calls_per_setting": CALLS}
    with tempfile.TemporaryDirectory(prefix="forge-bench-rollout-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            # 1. the trivial upstream, Forge's gateway twice, and rllm-model-gateway if present
            targets, rllm_url, rllm_reason = _start_targets(tmp, processes)
            # 2. the same load against every target, concurrency by concurrency
            settings = _measure(targets)
            result["settings"] = settings
            result["rllm_model_gateway"] = (
                {"status": "ok", "version": "0.1.0"}
                if rllm_url
                else {"status": "skipped", "reason": rllm_reason}
            )
            # 3. the targets, judged by tools/bench.py (never as timed assertions)
            result["targets"] = _judged(settings, rllm_url, rllm_reason)
            result["summary"] = _summary(settings)
            traces = tmp / "traces"
            result["forge_traces_written"] = sum(
                p.read_bytes().count(b"\n") for p in traces.glob("*.jsonl")
            )
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
