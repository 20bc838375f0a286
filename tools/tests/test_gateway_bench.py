"""The gateway benches' targets: ratios against rllm-model-gateway, never milliseconds (issue 37).

The benches themselves run in `nox -s bench`; here their pure parts: how a target is computed
from the figures, what is sent to rllm-model-gateway's upstream directly, and the pairing
harness (every way measured for the same calls) against an in-process server.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import bench
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_rollout import run_app_in_thread

BENCH = Path(__file__).resolve().parents[2] / "packages/forge-rollout/bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"test_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="module")
def long():
    return _load("bench_gateway_32k")


@pytest.fixture(scope="module")
def rollout():
    return _load("bench_rollout")


def _figures(forge: float, rllm: float | None) -> dict:
    return {"added_p50_ms": forge, "rllm_added_p50_ms": rllm, "added_p50_ms_per_round": [],
            "bytes_per_token_ratio": 1.03}  # fmt: skip


def test_the_32k_target_is_rllms_added_p50_over_forges(long):
    speedup, linear = long._targets(_figures(forge=2.5, rllm=10.0), "")
    assert (speedup["name"], speedup["measured"], speedup["op"]) == (
        "gateway_32k_c8_speedup_over_rllm", 4.0, ">=")  # fmt: skip
    assert bench.judge("gateway_32k", speedup).status == "met"
    assert bench.judge("gateway_32k", long._targets(_figures(4.0, 10.0), "")[0]).status == "missed"
    assert (linear["name"], linear["measured"]) == ("trace_bytes_per_token_20_over_2_calls", 1.03)


def test_the_speedup_above_the_pass_through_compares_the_gateways_own_work(long):
    # the twenty-fifth session's second bench: Forge 3.44 ms, rllm 10.25 ms, hop ~1.2 ms
    assert long.speedup_above_floor(3.44, 10.25, 1.2) == round(9.05 / 2.24, 3)
    assert long.speedup_above_floor(3.44, 10.25, 0.0) == round(10.25 / 3.44, 3)
    for forge, rllm in ((1.2, 10.0), (1.0, 10.0), (3.0, 1.1), (3.0, None)):
        assert long.speedup_above_floor(forge, rllm, 1.2) is None  # not above the floor


@pytest.mark.parametrize(
    ("forge", "rllm", "reason"),
    [(2.5, None, "FORGE_RLLM_GATEWAY_PYTHON is not set"), (0.0, 9.0, "is not above 0")],
)
def test_without_rllm_or_with_noise_the_32k_target_is_not_measured(long, forge, rllm, reason):
    speedup = long._targets(_figures(forge, rllm), "FORGE_RLLM_GATEWAY_PYTHON is not set")[0]
    assert speedup["measured"] is None and reason in speedup["reason"]
    assert bench.judge("gateway_32k", speedup).status == "not measured"


def _settings(forge_c1: float, rllm_c1: float | None) -> dict:
    added = {"forge": {"p50": forge_c1}, "forge_local_count": {"p50": 1.5}}
    if rllm_c1 is not None:
        added["rllm"] = {"p50": rllm_c1}
    rps = {"forge_rps_over_rllm": 3.5} if rllm_c1 is not None else {}
    return {"c1": {"added_ms": added}, "c8": dict(rps), "c64": dict(rps)}


def test_the_c1_latency_target_is_a_ratio_not_milliseconds(rollout):
    targets = rollout._judged(_settings(1.0, 2.1), "http://rllm", "")
    rows = [bench.judge("rollout", t) for t in targets]
    assert [(r.target.split()[0], r.measured, r.status) for r in rows] == [
        ("gateway_c1_added_p50_speedup_over_rllm", 2.1, "met"),
        ("forge_rps_over_rllm_at_c8_c64", 3.5, "met"),
    ]
    assert all(t["unit"] == "x" for t in targets)
    missing = rollout._judged(_settings(1.0, None), None, "rllm-model-gateway did not start")
    assert [t["measured"] for t in missing] == [None, None]
    assert missing[0]["reason"] == "rllm-model-gateway did not start"


def test_rllms_direct_calls_ask_what_its_middleware_adds(long):
    body = json.dumps({"model": "stub", "messages": [{"role": "user", "content": "hi"}]})
    sent = json.loads(long._as_rllm_sends(body.encode()))
    assert sent == {"model": "stub", "messages": [{"role": "user", "content": "hi"}],
                    "logprobs": True, "extra_body": {"return_token_ids": True},
                    "return_token_ids": True}  # fmt: skip


def test_the_stubs_counting_ratio_is_bytes_per_rendered_token_rounded(long):
    body = json.dumps({"messages": [{"content": "ab" * 50}, {"content": "c" * 100}]}).encode()
    assert long._bytes_per_token(body, 100) == 2
    assert long._bytes_per_token(body, 1000) == 1  # never below one byte


def test_the_pairing_harness_times_every_way_for_the_same_calls(long, monkeypatch):
    monkeypatch.setattr(long, "THINK_MS", 0.0)
    seen: dict[str, list[tuple[str, bytes]]] = {"0": [], "1": []}  # by session, in order

    async def answer(request: web.Request) -> web.Response:
        way, session = request.match_info["way"], request.match_info["session"]
        seen[session].append((way, await request.read()))
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/{way}/{session}", answer)
    with run_app_in_thread(app) as url:
        bodies = [[f"s{s}c{c}".encode() for c in range(3)] for s in range(2)]
        ways = {
            name: (lambda i, n=name: f"{url}/{n}/{i}", bodies) for name in ("direct", "gateway")
        }
        took = asyncio.run(long._paired(ways))
    # the first call of each session is not timed; every way has the same calls
    assert {name: len(ms) for name, ms in took.items()} == {"direct": 4, "gateway": 4}
    # each call is sent every way in turn, the way that goes first rotating by call and session
    assert seen["0"] == [
        ("direct", b"s0c0"),
        ("gateway", b"s0c0"),
        ("gateway", b"s0c1"),
        ("direct", b"s0c1"),
        ("direct", b"s0c2"),
        ("gateway", b"s0c2"),
    ]
    assert seen["1"] == [
        ("gateway", b"s1c0"),
        ("direct", b"s1c0"),
        ("direct", b"s1c1"),
        ("gateway", b"s1c1"),
        ("gateway", b"s1c2"),
        ("direct", b"s1c2"),
    ]


@pytest.fixture(scope="module")
def rollout_batch():
    return _load("bench_rollout_batch")


@settings(max_examples=200, deadline=None)
@given(
    paths=st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=40),
    slots=st.integers(min_value=1, max_value=12),
)
def test_a_list_schedule_lies_between_the_packing_bound_and_grahams(paths, slots) -> None:
    """The rollout batch's reported schedule bounds: never under the perfect-packing bound
    (max path, sum / slots), never over Graham's list-scheduling bound (sum / slots + max),
    whatever the order."""
    module = _load("bench_rollout_batch")
    packing = max(max(paths), sum(paths) / slots)
    for order in (paths, sorted(paths, reverse=True)):
        span = module.list_schedule(order, slots)
        assert packing - 1e-9 <= span <= sum(paths) / slots + max(paths) + 1e-9


def test_the_rollout_batch_reports_its_schedule_bounds(rollout_batch) -> None:
    assert rollout_batch.list_schedule([], 8) == 0.0
    assert rollout_batch.list_schedule([1.0] * 24, 8) == 3.0  # three each: packs exactly
    assert rollout_batch.list_schedule([2.0] + [1.0] * 23, 8) == 4.0  # the long one ends last
    # longest-first is not optimal: 3+2+2 | 3+2 where 3+3 | 2+2+2 takes 6
    assert rollout_batch.list_schedule([3.0, 3.0, 2.0, 2.0, 2.0], 2) == 7.0
