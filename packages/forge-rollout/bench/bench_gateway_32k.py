"""The gateway at production lengths against its peer (issues 16.5 and 37.3).

32K-token prompts, 8 sessions of 20-call episodes (prompt ~32K tokens, growing), each server in
its own process, one stub upstream with a fixed model time per call (`--latency-ms`, far below
a real 32K prefill) so the closed loop measures added latency, not the stub's throughput.
Sessions pause for a seeded random tool step between calls (mean THINK_MS), as agents do, so
they are concurrent but not in lock step. Each gateway runs rounds of its own, in which every
session sends each call through it and directly, one after the other (the order alternating by
call), so that both latencies come from the same minutes; Forge's rounds and rllm's alternate
(each gateway carries the 8 sessions alone: interleaved with the other, it would see about 2 of
them at a time, and on 2 shared cores the other's CPU use would slow its calls):

- Forge's gateway (`forge-rollout gateway --tokenizer`: it renders the chat itself and calls
  the upstream's `/v1/completions` with ids), and directly: that id body to the stub;
- rllm-model-gateway 0.1.0 (`FORGE_RLLM_GATEWAY_PYTHON`, its own venv; its sqlite trace store,
  as in `bench_rollout`), and directly: the chat body as it forwards it (log-probs and ids asked
  for) to the stub's `/v1/chat/completions`. The stub then counts one token per
  `bytes_per_token` bytes of text (the tokenizer's ratio), so the prompt ids it echoes have the
  prompt's real length.

Added p50 = p50 through a gateway - p50 of the upstream call it makes, sent directly. The
target: `gateway_32k_c8_speedup_over_rllm` = rllm's added p50 / Forge's (>= 3). Reported beside
it: the same harness with a bare pass-through in the gateway's place (parse the chat request,
forward an id prompt built in advance, return the answer: the floor of one more HTTP hop on
this machine), the gateway's `/stats` (its own time; the awaited trace write), its render work
replayed in this process (back to back, after the bench's pause, after a busy wait that
touches no memory: on this VM's shared cores the same work costs 2-4x after the process held
its CPU), and the two direct calls' p50s (ids vs chat: what the stub itself does differently).
Trace bytes per episode token for 2-call vs 20-call episodes: linear growth means a ratio near
1 (full prompts per call would be ~10x); target <= 1.25.

    FORGE_RLLM_GATEWAY_PYTHON=... python packages/forge-rollout/bench/bench_gateway_32k.py
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from forge_rollout._aio import start_ready

SCHEMA = "forge/bench-gateway-32k@1"
LONG_WINDOW, LONG_PROMPT, SESSIONS, CALLS = 40960, 32768, 8, 20
LATENCY_MS = 250.0  # a real 32K prefill + 256 decoded tokens takes seconds
OBSERVATION_TOKENS = 150  # per call in the 32K episodes
ROUNDS = 3  # rounds per gateway, new sessions each: 3 x 8 x 20 timed calls each way
FLOOR_ROUNDS = 2  # the same through a bare pass-through (the floor of one more HTTP hop)
REPLAYS = 5  # back-to-back replays of a session's render work (hot caches)
THINK_MS = 50.0  # mean pause between a session's calls (its command running in the sandbox)
BUSY_WAIT_MS = 20.0  # the render replay after a busy wait instead of a sleep
SPEEDUP_TARGET = 3.0
BYTES_RATIO_TARGET = 1.25

# one way of sending a session's calls: (URL for session index, bodies of each session)
Way = tuple[Callable[[int], str], list[list[bytes]]]


def _helpers():
    """bench_rollout.py (percentiles, rllm-model-gateway's start), loaded by path."""
    import importlib.util

    path = Path(__file__).with_name("bench_rollout.py")
    spec = importlib.util.spec_from_file_location("forge_bench_rollout_helpers", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _same(url: str) -> Callable[[int], str]:
    """One URL for every session (a direct call)."""
    return lambda index: url


def _per_session(base: str, prefix: str) -> Callable[[int], str]:
    """A gateway's chat URL for session `index`, named `<prefix>-<index>`."""
    return lambda index: f"{base}/sessions/{prefix}-{index}/v1/chat/completions"


# -- the load ----------------------------------------------------------------------------------


def _chat_bodies(calls: int, first_tokens: int, tokenizer: Any) -> list[bytes]:
    """One session's request bodies: a ~first_tokens-token first prompt, then per call the
    stub's answer (32 `x`) and an observation of ~OBSERVATION_TOKENS tokens."""
    line = "output of the command: the tests ran and printed this line\n"
    per_line = len(tokenizer.encode(line, add_special_tokens=False))
    messages: list[dict[str, str]] = [
        {"role": "system", "content": "You are a software engineering agent."},
        {"role": "user", "content": line * (first_tokens // per_line)},
    ]
    bodies = []
    for call in range(calls):
        body = {"model": "stub", "messages": messages, "max_tokens": 256, "temperature": 1.0}
        bodies.append(json.dumps(body).encode())
        observation = f"step {call}\n" + line * max(1, OBSERVATION_TOKENS // per_line)
        messages = [*messages, {"role": "assistant", "content": "x" * 32},
                    {"role": "user", "content": observation}]  # fmt: skip
    return bodies


def _as_rllm_sends(body: bytes) -> bytes:
    """The chat body as rllm-model-gateway forwards it: its middleware asks for log-probs and
    token ids (`SessionRoutingMiddleware._mutate`) and re-serialises with `json.dumps`."""
    payload = json.loads(body)
    payload["logprobs"] = True
    payload["extra_body"] = {"return_token_ids": True}
    payload["return_token_ids"] = True
    return json.dumps(payload).encode()


def _direct_rows(chat: list[bytes], tokenizer: Any) -> tuple[list[int], list[bytes]]:
    """The direct calls Forge's gateway stands for: token-id prompts of its lengths, same
    parameters; (prompt lengths, `/v1/completions` bodies)."""
    lengths = []
    for body in chat:  # every session sends the same conversation
        text = tokenizer.apply_chat_template(
            json.loads(body)["messages"], add_generation_prompt=True, tokenize=False
        )
        lengths.append(len(tokenizer.encode(text, add_special_tokens=False)))
    rows = []
    for size in lengths:
        prompt = [(7 * i) % 500 + 3 for i in range(size)]
        rows.append(json.dumps({"model": "stub", "prompt": prompt, "max_tokens": 256,
                                "temperature": 1.0, "logprobs": 0,
                                "return_tokens_as_token_ids": True}).encode())  # fmt: skip
    return lengths, rows


def _bytes_per_token(body: bytes, tokens: int) -> int:
    """The stub's counting ratio: UTF-8 bytes of the message contents per rendered token."""
    messages = json.loads(body)["messages"]
    text = "".join(str(m.get("content") or "") for m in messages)
    return max(1, round(len(text.encode()) / tokens))


async def _post(client: aiohttp.ClientSession, url: str, body: bytes) -> float:
    started = time.perf_counter()
    async with client.post(url, data=body, headers={"Content-Type": "application/json"}) as answer:
        await answer.read()
        if answer.status != 200:
            raise RuntimeError(f"expected 200 from {url}; found {answer.status}")
    return (time.perf_counter() - started) * 1000


async def _sessions(url_of, bodies: list[list[bytes]]) -> None:
    """Every session sends its calls one after another, all sessions at once."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:

        async def session(index: int) -> None:
            for body in bodies[index]:
                await _post(client, url_of(index), body)

        await asyncio.gather(*(session(i) for i in range(len(bodies))))


async def _paired(ways: dict[str, Way]) -> dict[str, list[float]]:
    """Every session sends each call every way, one after the other (the order rotating by
    call and session), all sessions at once: all latencies come from the same minutes of the
    same machine, and the i-th latency of every way is the same call (paired differences).
    Between calls a session pauses for its tool step (uniform 0 to 2 x THINK_MS, seeded), as
    an agent does while its command runs; without it the stub's fixed model time keeps the 8
    sessions in lock step and every call queues behind the other 7 in every server. The first
    call (a gateway tokenizes the whole first prompt) is not timed."""
    names = list(ways)
    took: dict[str, list[float]] = {name: [] for name in names}
    sessions = len(ways[names[0]][1])
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:

        async def session(index: int) -> None:
            think = random.Random(index)
            for call in range(len(ways[names[0]][1][index])):
                await asyncio.sleep(think.uniform(0.0, 2 * THINK_MS) / 1000)  # the tool step
                shift = (call + index) % len(names)
                this_call = {}
                for name in names[shift:] + names[:shift]:
                    url_of, bodies = ways[name]
                    this_call[name] = await _post(client, url_of(index), bodies[index][call])
                if call > 0:  # appended together: the pairs stay aligned across sessions
                    for name in names:
                        took[name].append(this_call[name])

        await asyncio.gather(*(session(i) for i in range(sessions)))
    return took


# -- the floor and the gateway's own work -----------------------------------------------------


def _passthrough_app(upstream: str, rows: list[bytes]):
    """The least any token-in-token-out gateway does: read and parse the chat request, send
    an id prompt of its length (built in advance) to the upstream, return the answer as it is.
    Its added latency is the floor set by one more HTTP hop and JSON parse on this machine."""
    from aiohttp import web

    state: dict[str, aiohttp.ClientSession] = {}

    async def start(app: web.Application) -> None:
        state["client"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def stop(app: web.Application) -> None:
        await state["client"].close()

    async def chat(request: web.Request) -> web.Response:
        messages = json.loads(await request.read())["messages"]
        row = rows[min(len(rows) - 1, (len(messages) - 2) // 2)]
        async with state["client"].post(
            f"{upstream}/v1/completions", data=row, headers={"Content-Type": "application/json"}
        ) as answer:
            payload = await answer.read()
        return web.Response(body=payload, content_type="application/json")

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/sessions/{session_id}/v1/chat/completions", chat)
    return app


def _passthrough_main(upstream: str, rows_file: str) -> int:
    from forge_rollout._aio import serve_forever

    rows = [line.encode() for line in Path(rows_file).read_text().splitlines()]
    return serve_forever(_passthrough_app(upstream, rows), "127.0.0.1", 0, "FORGE_PASSTHROUGH")


def _busy_wait(seconds: float) -> None:
    """Stay on the CPU without touching memory: what the machine does to this process's
    caches meanwhile is not this process's doing."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _render_replay(
    tokenizer: Any, chat: list[bytes], idle_s: float, busy: bool = False
) -> list[float]:
    """The gateway's own work before the model call (parse, render, tokenize the new text,
    link, build the upstream body), replayed on one session's calls in this process: ms per
    call after the first. With idle_s = 0 the calls run back to back (caches hot); with the
    bench's mean pause between a session's calls (model time + tool step) each call starts
    as the gateway's do, after the process slept. With busy, the pause is a busy wait
    instead of a sleep: the process keeps its CPU and touches nothing, so a slowdown against
    back to back is the machine's (a neighbour evicting the shared caches), not the code's."""
    from forge_rollout.gateway._chat_io import upstream_body
    from forge_rollout.gateway._renderer import ChatRenderer

    renderer = ChatRenderer(tokenizer, 1 << 40)
    state = renderer.session("replay", list)
    took: list[float] = []
    for seq, raw in enumerate(chat):
        if idle_s:
            (_busy_wait if busy else time.sleep)(idle_s)
        started = time.perf_counter()
        body = json.loads(raw)
        rendered = renderer.render(state, body)
        renderer.link(state, rendered)
        upstream_body(body, rendered.prompt_json(), rendered.length, LONG_WINDOW)
        if seq:
            took.append((time.perf_counter() - started) * 1000)
        ids = tokenizer.encode("x" * 32, add_special_tokens=False)  # the stub's answer
        renderer.remember(state, rendered, [(seq, "x" * 32, ids)])
    return took


# -- the servers and the rounds ---------------------------------------------------------------


def _start_servers(
    tmp: Path, tokenizer_dir: Path, bytes_per_token: int, processes: list[subprocess.Popen]
) -> tuple[str, str, str | None, str]:
    """The stub (model time LATENCY_MS, bodies forgotten), Forge's gateway and, when installed,
    rllm-model-gateway in front of it, each appended to `processes` as it starts; (stub URL,
    Forge's URL, rllm's URL or None, why not)."""
    cli = [sys.executable, "-m", "forge_rollout.cli"]
    stub, stub_url = start_ready(
        [*cli, "stub-upstream", "--window", str(LONG_WINDOW), "--completion-tokens", "32",
         "--latency-ms", str(LATENCY_MS), "--bytes-per-token", str(bytes_per_token),
         "--forget-bodies"], "FORGE_STUB",
    )  # fmt: skip
    processes.append(stub)
    gateway, gateway_url = start_ready(
        [*cli, "gateway", "--upstream", stub_url, "--port", "0", "--window",
         str(LONG_WINDOW), "--reserve", "256", "--traces", str(tmp / "traces-long"),
         "--tokenizer", str(tokenizer_dir)], "FORGE_GATEWAY",
    )  # fmt: skip
    processes.append(gateway)
    rllm, rllm_url, reason = _helpers()._rllm(stub_url, tmp)
    if rllm is not None:
        processes.append(rllm)
    return stub_url, gateway_url, rllm_url, reason


def _floor(
    tmp: Path,
    stub_url: str,
    rows: list[bytes],
    chat: list[list[bytes]],
    processes: list[subprocess.Popen],
) -> dict[str, list[float]]:
    """The floor: a bare pass-through in the gateway's place (same harness, same loop);
    {"direct": ms, "passthrough": ms}, paired."""
    (tmp / "rows.jsonl").write_text("\n".join(row.decode() for row in rows))
    passthrough, passthrough_url = start_ready(
        [sys.executable, __file__, "passthrough", stub_url, str(tmp / "rows.jsonl")],
        "FORGE_PASSTHROUGH",
    )
    processes.append(passthrough)
    took: dict[str, list[float]] = {"direct": [], "passthrough": []}
    for round_ in range(FLOOR_ROUNDS):
        ways: dict[str, Way] = {
            "direct": (_same(f"{stub_url}/v1/completions"), [rows] * len(chat)),
            "passthrough": (_per_session(passthrough_url, f"floor-{round_}"), chat),
        }
        for name, ms in asyncio.run(_paired(ways)).items():
            took[name] += ms
    passthrough.terminate()
    return took


def _gateway_rounds(
    urls: dict[str, str | None], rows: list[bytes], chat: list[list[bytes]], percentile: Any
) -> tuple[dict[str, list[float]], list[dict[str, float]]]:
    """Forge's gateway and rllm-model-gateway (when it runs), each in rounds of its own paired
    with the upstream call it makes sent directly (so that each gateway carries the 8 sessions
    alone, and one's CPU use does not slow the other's calls), the two alternating round by
    round (so that both see the same minutes of the machine); new sessions each round (more
    calls, same episodes); (ms per way, added p50 of each round alone: the spread in a run)."""
    stub, rllm = urls["stub"], urls["rllm"]
    rllm_rows = [_as_rllm_sends(body) for body in chat[0]]
    # gateway -> (its direct way, its upstream call's URL, that call's body per call)
    pairs: dict[str, tuple[str, str, list[bytes]]] = {
        "forge": ("direct", f"{stub}/v1/completions", rows)
    }
    if rllm:
        pairs["rllm"] = ("direct_chat", f"{stub}/v1/chat/completions", rllm_rows)
    took: dict[str, list[float]] = {}
    per_round: list[dict[str, float]] = []
    for round_ in range(ROUNDS):
        added: dict[str, float] = {}
        order = list(pairs) if round_ % 2 == 0 else list(pairs)[::-1]
        for gateway in order:
            direct, direct_url, bodies = pairs[gateway]
            base = urls[gateway]
            ways: dict[str, Way] = {
                direct: (_same(direct_url), [bodies] * len(chat)),
                gateway: (_per_session(str(base), f"long-{round_}"), chat),
            }
            result = asyncio.run(_paired(ways))
            for name, ms in result.items():
                took[name] = took.get(name, []) + ms
            added[gateway] = percentile(result[gateway], 50) - percentile(result[direct], 50)
        per_round.append({name: round(ms, 3) for name, ms in added.items()})
    return took, per_round


def _trace_sizes(tmp: Path, gateway_url: str, tokenizer: Any) -> dict[int, float]:
    """Trace bytes per token: one 2-call and one 20-call episode, in their own sessions
    (key -calls: the full prompt ids per token a v1 trace would have stored)."""
    sizes: dict[int, float] = {}
    for calls in (2, CALLS):
        bodies = [_chat_bodies(calls, OBSERVATION_TOKENS, tokenizer)]  # uniform calls
        url = f"{gateway_url}/sessions/bytes-{calls}/v1/chat/completions"
        asyncio.run(_sessions(_same(url), bodies))
        path = tmp / "traces-long" / f"bytes-{calls}.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        tokens = lines[-1]["prompt"]["length"] + len(lines[-1]["completion_token_ids"])
        full = sum(line["prompt"]["length"] for line in lines)  # what v1 would store
        sizes[calls] = path.stat().st_size / tokens
        sizes[-calls] = full / tokens
    return sizes


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


# -- the run ----------------------------------------------------------------------------------


def _measure(tmp: Path, tokenizer_dir: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    # 1. the load: every session sends the same conversation; the direct id bodies
    first = LONG_PROMPT - CALLS * (OBSERVATION_TOKENS + 40)
    chat = [_chat_bodies(CALLS + 1, first, tokenizer) for _ in range(SESSIONS)]
    lengths, rows = _direct_rows(chat[0], tokenizer)
    per_token = _bytes_per_token(chat[0][-1], lengths[-1])
    processes: list[subprocess.Popen] = []
    try:
        # 2. the stub, Forge's gateway, rllm-model-gateway; 3. the pass-through floor
        stub, forge, rllm, rllm_reason = _start_servers(tmp, tokenizer_dir, per_token, processes)
        floor = _floor(tmp, stub, rows, chat, processes)
        # 4. both gateways, each paired with its upstream call sent directly
        urls = {"stub": stub, "forge": forge, "rllm": rllm}
        took, per_round = _gateway_rounds(urls, rows, chat, _helpers()._percentile)
        with urllib.request.urlopen(f"{forge}/stats") as answer:
            stats = json.loads(answer.read())
        # 5. trace bytes per token
        sizes = _trace_sizes(tmp, forge, tokenizer)
    finally:
        _stop(processes)
    # 6. the gateway's own work, replayed in this process
    replays = {
        "hot": [ms for _ in range(REPLAYS) for ms in _render_replay(tokenizer, chat[0], 0.0)],
        "idle": _render_replay(tokenizer, chat[0], (LATENCY_MS + THINK_MS) / 1000),
        "busy": _render_replay(tokenizer, chat[0], BUSY_WAIT_MS / 1000, busy=True),
    }
    return {
        "lengths": lengths,
        "bytes_per_token": per_token,
        "took": took,
        "floor": floor,
        "per_round": per_round,
        "stats": stats,
        "sizes": sizes,
        "replays": replays,
        "rllm_reason": "" if rllm else rllm_reason,
    }


def speedup_above_floor(forge: float, rllm: float | None, floor: float) -> float | None:
    """rllm-model-gateway's added p50 over Forge's, each less the bare pass-through's (the one
    more HTTP hop both pay on this machine, measured in the same run): the gateways' own work
    compared. Reported beside the target (issue 37's note: the hop does not shrink with a
    faster CPU, so the plain ratio falls as the machine gets faster); None when either is not
    above the floor."""
    if rllm is None or forge <= floor or rllm <= floor:
        return None
    return round((rllm - floor) / (forge - floor), 3)


def _figures(m: dict[str, Any]) -> dict[str, Any]:
    """The measured latencies as the report's figures (ms, rounded)."""
    p = _helpers()._percentile
    took, floor, stats = m["took"], m["floor"], m["stats"]

    def p50(name: str) -> float:
        return p(took[name], 50)

    forge_added = p50("forge") - p50("direct")
    rllm = "rllm" in took
    rllm_added = p50("rllm") - p50("direct_chat") if rllm else None
    floor_added = p(floor["passthrough"], 50) - p(floor["direct"], 50)
    out: dict[str, Any] = {
        "prompt_tokens": {"min": min(m["lengths"]), "max": max(m["lengths"])},
        "stub_bytes_per_token": m["bytes_per_token"],
        "calls_timed_per_way": len(took["forge"]),
        "p50_ms": {name: round(p(ms, 50), 3) for name, ms in took.items()},
        "p99_ms": {name: round(p(ms, 99), 3) for name, ms in took.items()},
        "added_p50_ms": round(forge_added, 3),
        "rllm_added_p50_ms": round(rllm_added, 3) if rllm_added is not None else None,
        "added_p50_ms_per_round": m["per_round"],
        "passthrough_added_p50_ms": round(floor_added, 3),
        "speedup_over_rllm_above_passthrough": speedup_above_floor(
            forge_added, rllm_added, floor_added
        ),
        "gateway_work_p50_ms": round(forge_added - floor_added, 3),
        "paired_difference_p50_ms": round(
            statistics.median(g - d for g, d in zip(took["forge"], took["direct"], strict=True)), 3
        ),
        "gateway_own_overhead_p50_ms": stats["gateway_overhead"]["p50_ms"],
        "gateway_before_upstream_p50_ms": stats["prompt_count"]["p50_ms"],
        "gateway_trace_write_p50_ms": stats["trace_write"]["p50_ms"],
        "render_replay_hot_p50_ms": round(statistics.median(m["replays"]["hot"]), 3),
        "render_replay_after_idle_p50_ms": round(statistics.median(m["replays"]["idle"]), 3),
        "render_replay_after_busy_wait_p50_ms": round(statistics.median(m["replays"]["busy"]), 3),
        "busy_wait_ms": BUSY_WAIT_MS,
        "gateway_stats": stats,
    }
    sizes = m["sizes"]
    out["trace_bytes_per_token"] = {
        "2_calls": round(sizes[2], 2),
        f"{CALLS}_calls": round(sizes[CALLS], 2),
    }
    out["full_prompt_ids_per_token_v1_estimate"] = {
        "2_calls": round(sizes[-2], 2),
        f"{CALLS}_calls": round(sizes[-CALLS], 2),
    }
    out["bytes_per_token_ratio"] = round(sizes[CALLS] / sizes[2], 3)
    return out


def _targets(f: dict[str, Any], rllm_reason: str) -> list[dict[str, Any]]:
    """The two targets, judged by tools/bench.py (never as timed assertions)."""
    speedup: dict[str, Any] = {
        "name": "gateway_32k_c8_speedup_over_rllm",
        "op": ">=",
        "threshold": SPEEDUP_TARGET,
        "unit": "x",
        "measured": None,
        "note": f"rllm-model-gateway's added p50 / Forge's, each over its upstream call sent "
        f"directly; upstream model time {LATENCY_MS:g} ms per call; per round "
        f"{f['added_p50_ms_per_round']}",
    }
    if f["rllm_added_p50_ms"] is None:
        speedup["reason"] = rllm_reason or "rllm-model-gateway answered no call"
    elif f["added_p50_ms"] <= 0:
        speedup["reason"] = f"Forge's added p50 {f['added_p50_ms']} ms is not above 0 (noise)"
    else:
        speedup["measured"] = round(f["rllm_added_p50_ms"] / f["added_p50_ms"], 3)
    linear = {
        "name": "trace_bytes_per_token_20_over_2_calls",
        "op": "<=",
        "threshold": BYTES_RATIO_TARGET,
        "unit": "x",
        "measured": f["bytes_per_token_ratio"],
    }
    return [speedup, linear]


def _summary(f: dict[str, Any]) -> str:
    bytes_ = f["trace_bytes_per_token"]
    return (
        f"added p50 at 32K c8: Forge {f['added_p50_ms']} ms, rllm-model-gateway "
        f"{f['rllm_added_p50_ms']} ms, bare pass-through {f['passthrough_added_p50_ms']} ms "
        f"(above it: {f['speedup_over_rllm_above_passthrough']}x); "
        f"Forge's own time {f['gateway_own_overhead_p50_ms']} ms (trace write "
        f"{f['gateway_trace_write_p50_ms']} ms; render {f['render_replay_hot_p50_ms']} ms back "
        f"to back, {f['render_replay_after_busy_wait_p50_ms']} ms after a {BUSY_WAIT_MS:g} ms "
        f"busy wait); trace bytes/token {bytes_['2_calls']} (2 calls), "
        f"{bytes_[f'{CALLS}_calls']} ({CALLS} calls)"
    )


def run() -> dict[str, Any]:
    from forge_rollout.models._tiny import train_tokenizer

    with tempfile.TemporaryDirectory(prefix="forge-bench-32k-") as name:
        tmp = Path(name)
        tokenizer_dir = tmp / "tokenizer"
        train_tokenizer().save_pretrained(tokenizer_dir)
        measured = _measure(tmp, tokenizer_dir)
    figures = _figures(measured)
    return {
        "schema": SCHEMA,
        **figures,
        "targets": _targets(figures, measured["rllm_reason"]),
        "summary": _summary(figures),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["passthrough"]:
        sys.exit(_passthrough_main(sys.argv[2], sys.argv[3]))
    print(json.dumps(run(), indent=2))
