"""The gateway against the fault-injecting stub: guard, pass-through, traces, disconnects."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from forge_gates import GateError, read_ledger
from forge_rollout.traces._format import read_traces

WINDOW, RESERVE = 512, 16
BUDGET = WINDOW - RESERVE  # 496


def chat_body(prompt_bytes: int, **extra) -> dict:
    """The stub counts UTF-8 bytes of the contents: this prompt is exactly `prompt_bytes`."""
    return {"model": "stub", "messages": [{"role": "user", "content": "a" * prompt_bytes}], **extra}


def completions(state) -> int:
    return sum(n for (path, _), n in state.calls.items() if path == "/v1/chat/completions")


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "passes"),
    [
        (10, 0, False),  # zero
        (10, -5, False),  # negative
        (BUDGET - 20, 20, True),  # exact boundary: prompt + max_tokens == window - reserve
        (BUDGET - 20, 21, False),  # one over
        (BUDGET, None, True),  # no max_tokens: the prompt alone fits exactly
        (BUDGET + 1, None, False),  # ... and one over
        (BUDGET - 1, 1, True),  # max_tokens = 1, the smallest valid value, at the boundary
        (BUDGET, 1, False),  # ... and one over
    ],
)
def test_context_guard(stub_gateway, post, prompt, max_tokens, passes) -> None:
    url, state, traces, _ = stub_gateway
    extra = {} if max_tokens is None else {"max_tokens": max_tokens}
    status, body = post(f"{url}/sessions/s1/v1/chat/completions", chat_body(prompt, **extra))
    if passes:
        assert status == 200, body
        assert completions(state) == 1
        assert len(read_traces(traces, "s1")) == 1
        return
    assert status == 400
    error = body["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(
        f"This model's maximum context length is {WINDOW} tokens. However, you requested"
    )
    assert error["param"] == (
        "max_tokens" if max_tokens is not None and max_tokens <= 0 else "messages"
    )
    assert completions(state) == 0, "a refused request must never be forwarded"
    assert read_traces(traces) == []


def test_guard_message_has_the_numbers(stub_gateway, post) -> None:
    url, *_ = stub_gateway
    _, body = post(f"{url}/sessions/s1/v1/chat/completions", chat_body(400, max_tokens=100))
    message = body["error"]["message"]
    assert "500 tokens (400 in the messages, 100 in the completion)" in message
    assert f"{RESERVE} tokens in reserve, so at most {BUDGET} fit" in message


def test_bad_requests_get_their_own_400(stub_gateway, http, post) -> None:
    url, state, traces, _ = stub_gateway
    status, raw = http("POST", f"{url}/sessions/s1/v1/chat/completions", b'{"messages": [')
    assert status == 400 and json.loads(raw)["error"]["code"] == "invalid_json"
    status, body = post(f"{url}/sessions/s1/v1/chat/completions", chat_body(5, max_tokens="7"))
    assert status == 400 and body["error"]["param"] == "max_tokens"
    status, body = post(f"{url}/sessions/s1/v1/chat/completions", chat_body(5, stream=True))
    assert status == 400 and body["error"]["param"] == "stream"
    status, body = post(f"{url}/sessions/bad%20id/v1/chat/completions", chat_body(5))
    assert status == 400 and body["error"]["code"] == "invalid_session_id"
    status, body = post(f"{url}/v1/chat/completions", chat_body(5))
    assert status == 400 and body["error"]["code"] == "session_required"
    assert sum(state.calls.values()) == 0 and read_traces(traces) == []


@pytest.mark.parametrize("fault", ["fault-500", "fault-400"])
def test_upstream_errors_pass_through_unchanged(stub_gateway, stub, http, fault) -> None:
    url, _, traces, gateway = stub_gateway
    body = json.dumps(chat_body(5, model=fault, max_tokens=3)).encode()
    direct = http("POST", f"{stub[0]}/v1/chat/completions", body)
    through = http("POST", f"{url}/sessions/s1/v1/chat/completions", body)
    assert through == direct and through[0] in (400, 500)
    assert read_traces(traces) == [] and gateway.stats.upstream_errors == 1


@pytest.mark.parametrize(
    ("fault", "status"), [("fault-hang", 504), ("fault-drop", 502), ("fault-badjson", 502)]
)
def test_timeouts_and_broken_upstreams_record_nothing(
    stub, tmp_path, post, gateway_at, fault, status
) -> None:
    with gateway_at(stub[0], tmp_path / "t", upstream_timeout=0.5) as (url, _):
        answer, body = post(f"{url}/sessions/s1/v1/chat/completions", chat_body(5, model=fault))
        assert answer == status, body
        assert body["error"]["code"] == status
    assert read_traces(tmp_path / "t") == []


@pytest.mark.parametrize("fault", ["fault-empty", "fault-nologprobs"])
def test_answers_without_ids_reach_the_client_but_are_not_traced(stub_gateway, post, fault):
    url, _, traces, gateway = stub_gateway
    status, _ = post(f"{url}/sessions/s1/v1/chat/completions", chat_body(5, model=fault))
    assert status == 200
    assert read_traces(traces) == [] and gateway.stats.untraced_choices == 1


def test_counting_errors_pass_through(stub_gateway, post) -> None:
    url, state, traces, _ = stub_gateway
    status, body = post(
        f"{url}/sessions/s1/v1/chat/completions", chat_body(5, model="fault-tokenize")
    )
    assert status == 500 and body["error"]["message"] == "tokenizer broke"
    assert completions(state) == 0 and read_traces(traces) == []


def test_injected_fields_are_stripped_unless_asked(stub_gateway, post) -> None:
    url, state, traces, _ = stub_gateway
    _, plain = post(f"{url}/sessions/s1/v1/chat/completions", chat_body(5, max_tokens=4))
    forwarded = state.bodies[-1]
    assert forwarded["return_token_ids"] is True and forwarded["logprobs"] is True
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    assert plain["choices"][0]["logprobs"] is None
    _, full = post(
        f"{url}/sessions/s1/v1/chat/completions",
        chat_body(5, max_tokens=4, logprobs=True, return_token_ids=True),
    )
    assert full["prompt_token_ids"] == list(b"aaaaa") and full["choices"][0]["token_ids"]
    assert len(full["choices"][0]["logprobs"]["content"]) == 4
    first, second = read_traces(traces, "s1")
    assert (first.seq, second.seq) == (0, 1)
    assert first.params == {"model": "stub", "max_tokens": 4}
    assert first.prompt_token_ids == list(b"aaaaa") and first.completion_token_ids == [1, 2, 3, 4]
    assert first.logprobs == [-0.5] * 4 and first.finish_reason == "length"


def test_completions_endpoint_is_traced(stub_gateway, post) -> None:
    url, _, traces, _ = stub_gateway
    body = {"model": "stub", "prompt": "hello", "max_tokens": 4}
    status, answer = post(f"{url}/sessions/s2/v1/completions", body)
    assert status == 200 and answer["choices"][0]["logprobs"] is None
    (trace,) = read_traces(traces, "s2")
    assert trace.endpoint == "completions" and trace.prompt_token_ids == list(b"hello")
    status, answer = post(f"{url}/sessions/s2/v1/completions", {**body, "max_tokens": 500})
    assert status == 400 and answer["error"]["code"] == "context_length_exceeded"


def test_disconnected_client_leaves_no_trace(stub_gateway) -> None:
    url, _, traces, gateway = stub_gateway

    async def leave_early() -> None:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(TimeoutError):
                await session.post(
                    f"{url}/sessions/gone/v1/chat/completions",
                    json=chat_body(5, model="fault-slow"),
                    timeout=aiohttp.ClientTimeout(total=0.15),
                )
        await asyncio.sleep(0.8)  # the upstream answers after 0.5 s: too late for anyone

    asyncio.run(leave_early())
    assert read_traces(traces) == [] and gateway.stats.client_disconnects == 1


def test_concurrent_sessions_keep_their_order(stub_gateway) -> None:
    url, _, traces, _ = stub_gateway
    sessions, steps = 8, 6

    async def agent(client: aiohttp.ClientSession, name: str) -> None:
        for step in range(steps):
            body = chat_body(0, max_tokens=4)
            body["messages"][0]["content"] = f"{name}:{step}"
            async with client.post(f"{url}/sessions/{name}/v1/chat/completions", json=body) as r:
                assert r.status == 200

    async def main() -> None:
        async with aiohttp.ClientSession() as client:
            await asyncio.wait_for(
                asyncio.gather(*(agent(client, f"agent{i}") for i in range(sessions))), 30
            )

    asyncio.run(main())
    for i in range(sessions):
        got = read_traces(traces, f"agent{i}")
        assert [t.seq for t in got] == list(range(steps))
        assert [bytes(t.prompt_token_ids).decode() for t in got] == [
            f"agent{i}:{s}" for s in range(steps)
        ]
    assert len(read_traces(traces)) == sessions * steps


def test_health_stats_and_pass_through_routes(stub_gateway, http, post) -> None:
    url, *_ = stub_gateway
    status, raw = http("GET", f"{url}/health")
    health = json.loads(raw)
    assert status == 200 and health["status"] == "ok" and health["upstream"]["status"] == 200
    assert health["gateway"]["window"] == WINDOW and health["gateway"]["count"] == "upstream"
    status, raw = http("GET", f"{url}/sessions/s1/v1/models")
    assert status == 200 and json.loads(raw)["data"][0]["max_model_len"] == WINDOW
    status, body = post(f"{url}/tokenize", {"messages": [{"role": "user", "content": "abc"}]})
    assert status == 200 and body["count"] == 3
    post(f"{url}/sessions/s1/v1/chat/completions", chat_body(5, max_tokens=1))
    stats = json.loads(http("GET", f"{url}/stats")[1])
    assert stats["traces_written"] == 1 and stats["prompt_count"]["n"] == 1
    write, overhead = stats["trace_write"], stats["gateway_overhead"]
    assert write["n"] == 1 and 0 < write["p50_ms"] <= overhead["p50_ms"]  # a part of it
    assert stats["disk_calls"]["inline"] == 1 and stats["disk_calls"]["thread"] == 0


def test_fsynced_traces_are_written_in_the_disk_thread(stub, tmp_path, http, post, gateway_at):
    """fsync blocks for the disk's flush: never on the loop."""
    with gateway_at(stub[0], tmp_path / "t", fsync=True) as (url, _):
        for _ in range(2):
            post(f"{url}/sessions/s1/v1/chat/completions", chat_body(5, max_tokens=1))
        stats = json.loads(http("GET", f"{url}/stats")[1])
    assert stats["traces_written"] == 2
    assert stats["disk_calls"] == {"inline": 0, "thread": 2, "stalls": 0}
    assert [t.seq for t in read_traces(tmp_path / "t", "s1")] == [0, 1]


def test_health_reports_a_dead_upstream(stub, tmp_path, http, gateway_at) -> None:
    with gateway_at(stub[0], tmp_path / "t") as (url, gateway):
        gateway.upstream = "http://127.0.0.1:9"  # discard port: nothing listens
        status, raw = http("GET", f"{url}/health")
    assert status == 503 and json.loads(raw)["status"] == "upstream_unhealthy"


def test_guard_gate_is_recorded_and_fails_closed(stub, tmp_path: Path, capsys, gateway_at) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with gateway_at(stub[0], tmp_path / "t", run_dir=run_dir):
        pass
    (record,) = read_ledger(run_dir)
    assert record.gate == "PPO_CONTEXT_GUARD_PASSED"
    assert record.fields == {"window": WINDOW, "reserve": RESERVE}
    assert f"PPO_CONTEXT_GUARD_PASSED window={WINDOW} reserve={RESERVE}" in capsys.readouterr().out
    with (
        pytest.raises(RuntimeError) as failure,
        gateway_at(stub[0], tmp_path / "t", run_dir=run_dir, window=1024),
    ):
        pass
    assert isinstance(failure.value.__cause__, GateError)
    assert "guard.window" in str(failure.value.__cause__)
    assert [r.gate for r in read_ledger(run_dir)][-1] == "PPO_CONTEXT_GUARD_FAILED"


def test_guard_window_of_an_adapter_card_is_its_parents() -> None:
    """vLLM lists a loaded LoRA adapter without max_model_len: it has its base's window (a
    gateway started against a vLLM that still serves `policy` must not fail); an adapter whose
    parent is not served has none."""
    from forge_rollout.gateway._config import _card_window

    cards = [
        {"id": "base", "max_model_len": 2048, "parent": None},
        {"id": "policy", "max_model_len": None, "parent": "base"},
        {"id": "stray", "parent": "other"},
    ]
    assert [_card_window(c, cards) for c in cards] == [2048, 2048, None]
