"""Shared fixtures: the tiny model (built once), the local server, a LoRA adapter, the stub
upstream and gateways. Everything binds 127.0.0.1 on OS-chosen ports and is shut down."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

from forge_rollout._aio import run_app_in_thread
from forge_rollout.gateway._app import GATEWAY, GatewayConfig, create_gateway_app
from forge_rollout.testing._stub import STATE, StubOptions, create_stub_app
from forge_sandbox.testing.fixtures import cgroups, isolation  # noqa: F401 (by name)

torch.set_num_threads(1)

WINDOW = 512


def call(method: str, url: str, body: Any = None, timeout: float = 30.0) -> tuple[int, bytes]:
    """A plain HTTP call: (status, raw body); errors are answers, not exceptions."""
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def post_json(url: str, body: Any, timeout: float = 30.0) -> tuple[int, Any]:
    status, raw = call("POST", url, body, timeout)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


@pytest.fixture(scope="session")
def http():
    """`http(method, url, body=None, timeout=30) -> (status, raw bytes)`."""
    return call


@pytest.fixture(scope="session")
def post():
    """`post(url, body, timeout=30) -> (status, parsed JSON or raw bytes)`."""
    return post_json


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from forge_rollout.models._tiny import TinyModelSpec, make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny"), TinyModelSpec(seed=0))


@pytest.fixture(scope="session")
def engine(tiny_model_dir: Path):
    from forge_rollout.local._engine import Engine

    return Engine(tiny_model_dir, served_model_name="tiny", max_model_len=WINDOW)


@pytest.fixture(scope="session")
def server_url(engine) -> Iterator[str]:
    from forge_rollout.local._server import create_server_app

    with run_app_in_thread(create_server_app(engine)) as url:
        yield url


@pytest.fixture(scope="session")
def fresh_model(tiny_model_dir: Path):
    """An independent copy of the weights for reference forward passes."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def make_lora(model_dir: Path, out: Path, seed: int, scale: float = 0.5) -> Path:
    """A PEFT LoRA adapter (r=4 on q/v) whose B matrices are random, so it changes outputs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def lora_maker():
    """`make_lora(model_dir, out, seed, scale=0.5) -> out` for tests that need their own."""
    return make_lora


@pytest.fixture(scope="session")
def lora_dirs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("lora")
    return make_lora(tiny_model_dir, root / "a", seed=1), make_lora(tiny_model_dir, root / "b", 2)


@pytest.fixture
def stub() -> Iterator[tuple[str, Any]]:
    """The fault-injecting stub upstream (window 512): (url, state of what it saw)."""
    app = create_stub_app(StubOptions(window=WINDOW, completion_tokens=4, hang_s=5.0))
    with run_app_in_thread(app, handler_cancellation=True) as url:
        yield url, app[STATE]


@contextlib.contextmanager
def running_gateway(upstream: str, traces: Path, **overrides: Any) -> Iterator[tuple[str, Any]]:
    """A gateway in a thread: (url, the Gateway object for its stats)."""
    settings: dict[str, Any] = {
        "upstream": upstream,
        "traces_dir": traces,
        "window": WINDOW,
        "reserve": 16,
        "upstream_timeout": 5.0,
        "upstream_wait": 5.0,
    }
    settings.update(overrides)
    app = create_gateway_app(GatewayConfig(**settings))
    with run_app_in_thread(app, handler_cancellation=True) as url:
        yield url, app[GATEWAY]


@pytest.fixture(scope="session")
def gateway_at():
    """`with gateway_at(upstream, traces_dir, **config) as (url, gateway): ...`"""
    return running_gateway


@pytest.fixture
def stub_gateway(stub, tmp_path: Path) -> Iterator[tuple[str, Any, Path, Any]]:
    """Gateway (window 512, reserve 16) in front of the stub: (url, stub state, traces, gw)."""
    url, state = stub
    with running_gateway(url, tmp_path / "traces") as (gw_url, gateway):
        yield gw_url, state, tmp_path / "traces", gateway
