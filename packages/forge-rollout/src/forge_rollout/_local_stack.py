"""The inference side of a local run: the policy server and the gateway, in this process.

`LocalStack` starts forge-rollout's CPU server (transformers, KV-cached sampling, runtime LoRA)
and the gateway (context guard + token traces) on loopback ports, each in a daemon thread,
and stops both on exit, whatever happened. `push_adapter` loads the trainer's new LoRA in
place and proves the server now answers with it (a fixed probe's log-probs change).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from forge_gates import Gate, RunSpec, Violation, gate
from forge_rollout._aio import run_app_in_thread
from forge_rollout._engine import Engine
from forge_rollout._gateway import create_gateway_app
from forge_rollout._gateway_config import GatewayConfig
from forge_rollout._server import create_server_app
from forge_rollout._tiny import TinyModelSpec, make_tiny_model

POLICY_NAME = "policy"
PROBE = [{"role": "user", "content": "Fix the failing test in /workspace."}]


def resolve_model(spec: RunSpec, cache_dir: Path) -> Path:
    """The model folder: `spec.model.path`, or for 'tiny' the cached tiny model (built once,
    under a file lock, deterministic for seed 0)."""
    if spec.model.path != "tiny":
        folder = Path(spec.model.path)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(
                f"model.path: expected a Hugging Face model folder with config.json; found "
                f"{folder}; fix: point model.path at a local checkpoint, or use 'tiny'"
            )
        return folder
    target = cache_dir / "tiny-model-seed0"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".tiny-model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").is_file():
            staging = cache_dir / f".tiny-model-{os.getpid()}"
            make_tiny_model(staging, TinyModelSpec(seed=0))
            os.replace(staging, target)
    return target


def _post(url: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            raw = answer.read()
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError:  # vLLM answers adapter loads with plain text
            return {"text": raw.decode("utf-8", "replace")}
    except urllib.error.HTTPError as error:
        raise RuntimeError(
            f"expected HTTP 200 from {url}; found {error.code}: {error.read()[:300]!r}"
        ) from error


class LocalStack:
    """Server + gateway for one run; use as a context manager."""

    def __init__(self, spec: RunSpec, model_dir: Path, run_dir: Path) -> None:
        self.spec, self.model_dir, self.run_dir = spec, model_dir, run_dir
        self.traces_dir = run_dir / "traces"
        self._stack = contextlib.ExitStack()
        self.server_url = ""
        self.gateway_url = ""

    def __enter__(self) -> LocalStack:
        try:
            # 1. the policy server (base model; the adapter is pushed before each rollout)
            engine = Engine(
                self.model_dir,
                served_model_name="base",
                max_model_len=self.spec.model.max_model_len,
            )
            self.engine = engine
            self.server_url = self._stack.enter_context(
                run_app_in_thread(create_server_app(engine), handler_cancellation=True)
            )
            # 2. the gateway: context guard at the spec's window, traces under the run folder
            config = GatewayConfig(
                upstream=self.server_url,
                traces_dir=self.traces_dir,
                window=self.spec.context.window,
                reserve=self.spec.context.reserve,
                tokenizer_dir=self.model_dir,
                run_dir=self.run_dir,
                upstream_timeout=max(60.0, self.spec.agent.command_timeout_s * 10),
            )
            self.gateway_url = self._stack.enter_context(
                run_app_in_thread(create_gateway_app(config), handler_cancellation=True)
            )
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def probe(self, model: str) -> tuple[list[int], list[float]]:
        """Greedy completion of a fixed prompt: (token ids, their log-probs)."""
        answer = _post(
            f"{self.server_url}/v1/chat/completions",
            {
                "model": model,
                "messages": PROBE,
                "max_tokens": 4,
                "temperature": 0.0,
                "logprobs": True,
                "return_token_ids": True,
            },
        )
        choice = answer["choices"][0]
        logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
        return list(choice["token_ids"]), logprobs

    def load_adapter(self, name: str, adapter_dir: Path) -> None:
        """Load (or replace in place) a PEFT adapter served as model `name`."""
        _post(
            f"{self.server_url}/v1/load_lora_adapter",
            {"lora_name": name, "lora_path": str(adapter_dir), "load_inplace": True},
        )

    def near_window_probe(self, margin: int = 4) -> dict[str, Any]:
        """A real request of window - margin prompt tokens + 1 completion token, sent to the
        server directly: it passes (`P0_NEAR_WINDOW_PROBE_PASSED`) only if the server answers
        and reports as prompt tokens exactly the tokens sent (a server that fell back to a
        smaller window, or truncated the prompt, reports fewer). Fields: what was measured."""
        window = self.spec.model.max_model_len
        prompt = [1 + (i % 200) for i in range(window - margin)]
        fields: dict[str, Any] = {"window": window, "sent_prompt_tokens": len(prompt)}
        try:
            answer = _post(
                f"{self.server_url}/v1/completions",
                {
                    "model": self.engine.served_model_name,
                    "prompt": prompt,
                    "max_tokens": 1,
                    "temperature": 0.0,
                },
                timeout=600.0,
            )
            usage = answer["usage"]
            fields["prompt_tokens"] = usage["prompt_tokens"]
            fields["completion_tokens"] = usage["completion_tokens"]
        except (RuntimeError, OSError, KeyError, TypeError) as error:
            problem = Violation(
                rule="near_window.answer",
                expected=f"the server to answer a {len(prompt)}-token prompt (window {window}) "
                "with its usage",
                found=f"{type(error).__name__}: {error}"[:400],
                fix="serve the configured window (model.max_model_len); see the server's log",
            )
            gate(self.run_dir, Gate.P0_NEAR_WINDOW_PROBE_PASSED, [problem], fields)
        problems = []
        if fields["prompt_tokens"] != len(prompt):
            problems.append(
                Violation(
                    rule="near_window.prompt_tokens",
                    expected=f"the server to count the {len(prompt)} prompt tokens sent "
                    f"(window {window} - margin {margin})",
                    found=f"usage.prompt_tokens = {fields['prompt_tokens']} (sent {len(prompt)})",
                    fix="the server fell back to a smaller window or truncated the prompt: "
                    f"start it with max_model_len = {window}",
                )
            )
        gate(self.run_dir, Gate.P0_NEAR_WINDOW_PROBE_PASSED, problems, fields)
        return fields

    def push_adapter(self, adapter_dir: Path, step: int) -> dict[str, Any]:
        """Load the adapter in place as `policy` and prove the server answers with it (a
        failing server is a failed PPO_ADAPTER_PUSH gate, never a silent stale policy)."""
        fields: dict[str, Any] = {"step": step, "adapter": POLICY_NAME}
        try:
            before = self.probe(POLICY_NAME) if POLICY_NAME in self.engine.adapters else None
            self.load_adapter(POLICY_NAME, adapter_dir)
            after = self.probe(POLICY_NAME)
        except (RuntimeError, OSError, KeyError) as error:
            problem = Violation(
                rule="adapter.push",
                expected="the inference server to load the adapter and answer the probe",
                found=f"{type(error).__name__}: {error}"[:400],
                fix="the inference server is down or failing; see its log, then rerun",
            )
            gate(self.run_dir, Gate.PPO_ADAPTER_PUSH_PASSED, [problem], fields)
        deltas = [abs(a - b) for a, b in zip(before[1], after[1], strict=False)] if before else []
        changed = before is None or before[0] != after[0] or any(d > 1e-6 for d in deltas)
        fields["probe_max_delta"] = round(max(deltas, default=0.0), 8)
        problems = (
            []
            if changed
            else [
                Violation(
                    rule="adapter.push",
                    expected="the fixed probe's log-probs to change after loading the new adapter",
                    found=f"identical tokens and log-probs (max delta {max(deltas):.2e})",
                    fix="the server did not pick up the adapter: check load_lora_adapter",
                )
            ]
        )
        gate(self.run_dir, Gate.PPO_ADAPTER_PUSH_PASSED, problems, fields)
        return fields
