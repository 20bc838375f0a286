"""`LocalStack.near_window_probe`: P0's proof that the server serves the configured window.
It passes only when the server answers a window - margin token prompt and counts exactly the
tokens sent; a server that fell back to a smaller window (or truncated) fails, both numbers
named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from forge_gates import GateError, RunSpec, read_config, read_ledger, validate_config
from forge_rollout import LocalStack
from forge_rollout._aio import run_app_in_thread

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
    assert fields == {
        "window": WINDOW,
        "sent_prompt_tokens": WINDOW - 4,
        "prompt_tokens": WINDOW - 4,
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
    assert v.rule == "near_window.answer" and f"{2 * WINDOW - 4}-token prompt" in v.expected
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
    assert v.found == "usage.prompt_tokens = 256 (sent 2044)"
    assert "2044 prompt tokens sent" in v.expected and "max_model_len = 2048" in v.fix
    assert "256" in str(error.value) and "2044" in str(error.value)
    (record,) = read_ledger(live.run_dir)
    assert record.gate == "P0_NEAR_WINDOW_PROBE_FAILED"
    assert record.fields["rules"] == ["near_window.prompt_tokens"]
