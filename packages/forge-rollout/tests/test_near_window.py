"""`near_window_probe` (through LocalStack): P0's proof that the server serves the configured
window. It passes only when the server answers a window - margin token prompt (margin 1,024 at
production windows, a quarter of smaller ones) and counts exactly the tokens sent; a server that
fell back to a smaller window (refuses, truncates, or reports a smaller max_model_len) fails,
both numbers named. The same probe runs against a real vLLM in `nox -s vllm_cpu`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from forge_gates import GateError, RunSpec, read_config, read_ledger, validate_config
from forge_rollout import LocalStack
from forge_rollout._aio import run_app_in_thread
from forge_rollout._probes import near_window_margin

WINDOW = 512  # the session `engine` fixture's max_model_len (conftest.WINDOW)


def p0_spec(window: int) -> RunSpec:
    data = read_config("p0-local")
    data["model"]["max_model_len"] = data["context"]["window"] = window
    spec, violations = validate_config(data)
    assert spec is not None, violations
    return spec


def stack(spec: RunSpec, server_url: str, engine: Any, tmp_path: Path) -> LocalStack:
    """A LocalStack pointed at an already running server (not entered: nothing started)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    live = LocalStack(spec, tmp_path, run_dir)
    live.server_url, live.engine = server_url, engine
    return live


def test_the_real_server_counts_every_token_sent(
    server_url: str, engine: Any, tmp_path: Path
) -> None:
    live = stack(p0_spec(WINDOW), server_url, engine, tmp_path)
    fields = live.near_window_probe()
    sent = WINDOW - WINDOW // 4
    assert fields == {
        "window": WINDOW,
        "margin": WINDOW // 4,
        "sent_prompt_tokens": sent,
        "served_max_model_len": WINDOW,
        "prompt_tokens": sent,
        "completion_tokens": 1,
    }
    (record,) = read_ledger(live.run_dir)
    assert (record.gate, record.fields) == ("P0_NEAR_WINDOW_PROBE_PASSED", fields)


def test_a_server_with_a_smaller_window_refuses_the_probe(
    server_url: str, engine: Any, tmp_path: Path
) -> None:
    live = stack(p0_spec(2 * WINDOW), server_url, engine, tmp_path)  # serves WINDOW only
    with pytest.raises(GateError) as error:
        live.near_window_probe()
    (v,) = error.value.violations
    sent = 2 * WINDOW - near_window_margin(2 * WINDOW)
    assert sent > WINDOW  # the probe must not fit the smaller window
    assert v.rule == "near_window.answer" and f"{sent}-token prompt" in v.expected
    assert "400" in v.found
    assert [r.gate for r in read_ledger(live.run_dir)] == ["P0_NEAR_WINDOW_PROBE_FAILED"]


@pytest.fixture
def truncating_server() -> Iterator[str]:
    """Answers every completion as a server that kept only the last 256 prompt tokens."""

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        kept = min(len(body["prompt"]), 256)
        usage = {"prompt_tokens": kept, "completion_tokens": 1, "total_tokens": kept + 1}
        return web.json_response({"choices": [{"text": "x", "index": 0}], "usage": usage})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    with run_app_in_thread(app) as url:
        yield url


def test_a_truncated_prompt_fails_with_both_numbers(
    truncating_server: str, engine: Any, tmp_path: Path
) -> None:
    live = stack(p0_spec(2048), truncating_server, engine, tmp_path)
    with pytest.raises(GateError) as error:
        live.near_window_probe()
    (v,) = error.value.violations
    assert v.rule == "near_window.prompt_tokens"
    assert v.found == "usage.prompt_tokens = 256 (sent 1536)"
    assert "1536 prompt tokens sent" in v.expected and "max_model_len = 2048" in v.fix
    assert "256" in str(error.value) and "1536" in str(error.value)
    (record,) = read_ledger(live.run_dir)
    assert record.gate == "P0_NEAR_WINDOW_PROBE_FAILED"
    assert record.fields["rules"] == ["near_window.prompt_tokens"]


def test_the_margin_is_1024_tokens_at_production_windows() -> None:
    assert near_window_margin(65536) == near_window_margin(40960) == 1024
    assert near_window_margin(2048) == 512 and near_window_margin(512) == 128


@pytest.fixture
def small_window_server() -> Iterator[str]:
    """Counts every prompt token, but reports a 1,024-token window in /v1/models (a server
    started with a smaller max_model_len than the run asked for)."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "tiny", "max_model_len": 1024}]})

    async def completions(request: web.Request) -> web.Response:
        sent = len((await request.json())["prompt"])
        usage = {"prompt_tokens": sent, "completion_tokens": 1, "total_tokens": sent + 1}
        return web.json_response({"choices": [{"text": "x", "index": 0}], "usage": usage})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    with run_app_in_thread(app) as url:
        yield url


def test_a_server_reporting_a_smaller_window_fails(
    small_window_server: str, engine: Any, tmp_path: Path
) -> None:
    live = stack(p0_spec(2048), small_window_server, engine, tmp_path)
    with pytest.raises(GateError) as error:
        live.near_window_probe()
    (v,) = error.value.violations
    assert v.rule == "near_window.served_window"
    assert v.found == "max_model_len = 1024" and "max_model_len >= 2048" in v.expected
    assert [r.gate for r in read_ledger(live.run_dir)] == ["P0_NEAR_WINDOW_PROBE_FAILED"]
