"""P0_ENDPOINT_GATE_PASSED measures the endpoint the episodes will use, from this host, and can
fail with a `_FAILED` line (expected, found) before any task runs: no answer, an unhealthy
gateway, a gateway guarding another window."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from forge_gates import GateError, load_spec, read_ledger
from forge_ppo.recipes.p0._checks import endpoint_gate

SPEC = load_spec("p0-local")


def _health(status: str = "ok", window: int | None = None) -> dict[str, Any]:
    ctx = SPEC.context
    return {
        "status": status,
        "gateway": {"window": window or ctx.window, "reserve": ctx.reserve},
        "upstream": {"status": 200 if status == "ok" else 503, "error": None},
    }


def _fails(tmp_path: Path, url: str, probe: Any = None) -> dict[str, Any]:
    with pytest.raises(GateError) as info:
        if probe is None:
            endpoint_gate(SPEC, tmp_path, url)
        else:
            endpoint_gate(SPEC, tmp_path, url, probe=probe)
    record = read_ledger(tmp_path)[-1]
    assert record.gate == "P0_ENDPOINT_GATE_FAILED"
    assert record.fields["expected"] == [v.expected for v in info.value.violations]
    assert record.fields["found"] == [v.found for v in info.value.violations]
    return {v.rule: v for v in info.value.violations}


def test_a_healthy_gateway_with_the_protocols_window_passes(tmp_path: Path):
    endpoint_gate(SPEC, tmp_path, "http://gw", probe=lambda url: _health())
    record = read_ledger(tmp_path)[-1]
    assert record.gate == "P0_ENDPOINT_GATE_PASSED"
    assert record.fields["status"] == "ok" and record.fields["window"] == SPEC.context.window


def test_an_endpoint_that_does_not_answer_fails_closed(tmp_path: Path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    found = _fails(tmp_path, f"http://127.0.0.1:{port}")
    assert list(found) == ["p0.endpoint.answers"]
    assert found["p0.endpoint.answers"].expected == (
        f"GET http://127.0.0.1:{port}/health answered from the rollout host"
    )
    assert found["p0.endpoint.answers"].found.startswith("NetworkConnectionError")


def test_an_unhealthy_gateway_or_another_window_fails(tmp_path: Path):
    found = _fails(
        tmp_path, "http://gw", probe=lambda url: _health("upstream_unhealthy", window=32768)
    )
    assert set(found) == {"p0.endpoint.healthy", "p0.endpoint.window"}
    assert found["p0.endpoint.healthy"].found == "status 'upstream_unhealthy', upstream 503"
    assert found["p0.endpoint.window"].expected == (
        f"the gateway's window = context.window ({SPEC.context.window})"
    )
    assert found["p0.endpoint.window"].found == "32768"
