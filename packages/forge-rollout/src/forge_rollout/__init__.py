"""forge_rollout: model serving, a gateway with a context guard, and exact token traces.

Build the offline tiny model, serve it, put the gateway in front, read the traces::

    from forge_rollout import (
        Engine, GatewayConfig, create_gateway_app, create_server_app, make_tiny_model,
        read_traces, run_app_in_thread,
    )
    model_dir = make_tiny_model("models/tiny")
    engine = Engine(model_dir, served_model_name="tiny", max_model_len=4096)
    with run_app_in_thread(create_server_app(engine)) as server_url:
        config = GatewayConfig(upstream=server_url, traces_dir="traces", window=4096, reserve=256)
        with run_app_in_thread(create_gateway_app(config), handler_cancellation=True) as gw:
            ...  # OpenAI(base_url=f"{gw}/sessions/task-1/v1", api_key="-")
    traces = read_traces("traces", session_id="task-1")  # prompt/completion ids + log-probs

The trace -> row -> batch path and its types: `forge_rollout.rows` (start reading there).

Names are imported on first use, so `import forge_rollout` (and the gateway) stays free of
torch until a model is needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "CHATML_TEMPLATE": "_tiny",
    "TinyModelSpec": "_tiny",
    "make_tiny_model": "_tiny",
    "train_tokenizer": "_tiny",
    "Engine": "_engine",
    "EngineError": "_engine",
    "GeneratedChoice": "_engine",
    "SamplingParams": "_engine",
    "sequence_log_probs": "_sampling",
    "gather_log_probs": "_sampling",
    "pick_tokens": "_sampling",
    "raw_log_probs": "_sampling",
    "create_server_app": "_server",
    "GUARD_MARKER": "_gateway_config",
    "GatewayConfig": "_gateway_config",
    "create_gateway_app": "_gateway",
    "check_context": "_guard",
    "check_max_tokens": "_guard",
    "TRACE_SCHEMA": "_traces",
    "Trace": "_traces",
    "TraceFormatError": "_traces",
    "TraceTiming": "_traces",
    "TraceWriter": "_traces",
    "read_traces": "_traces",
    "VLLMError": "_vllm",
    "VLLMServer": "_vllm",
    "VLLMSpec": "_vllm",
    "vllm_command": "_vllm",
    "vllm_env": "_vllm",
    "run_app_in_thread": "_aio",
    "StubOptions": "_stub",
    "create_stub_app": "_stub",
    "AgentConfig": "_agent",
    "AgentUse": "_agent",
    "MINI_SWE_AGENT_VERSION": "_agent",
    "agent_config_from_spec": "_agent",
    "GatewayModel": "_agent",
    "SandboxEnvironment": "_agent",
    "NetworkConnectionError": "_agent",
    "UpstreamError": "_agent",
    "ContextExhausted": "_agent",
    "MiniSweAgent": "_runner",
    "run_rollouts": "_runner",
    "resolve_tasks": "_runner",
    "resolve_split": "_runner",
    "select_tasks": "_runner",
    "check_endpoint": "_runner",
    "SampleRow": "_samples",
    "TokenCall": "_samples",
    "RowHeader": "_samples",
    "ConversionStats": "_samples",
    "episode_to_rows": "_samples",
    "rows_from_trial": "_job_rows",
    "rows_from_job": "_job_rows",
    "LocalStack": "_local_stack",
    "POLICY_NAME": "_probes",
    "resolve_model": "_local_stack",
    "AdapterPusher": "_probes",
    "adapter_fingerprint": "_probes",
    "near_window_probe": "_probes",
    "InferenceStack": "_vllm_stack",
    "VLLMStack": "_vllm_stack",
    "open_inference_stack": "_vllm_stack",
    "free_port": "_vllm_stack",
    "listening_pid": "_vllm_stack",
}

__all__ = [
    "CHATML_TEMPLATE",
    "GUARD_MARKER",
    "MINI_SWE_AGENT_VERSION",
    "POLICY_NAME",
    "TRACE_SCHEMA",
    "AdapterPusher",
    "AgentConfig",
    "AgentUse",
    "ContextExhausted",
    "ConversionStats",
    "Engine",
    "EngineError",
    "GatewayConfig",
    "GatewayModel",
    "GeneratedChoice",
    "InferenceStack",
    "LocalStack",
    "MiniSweAgent",
    "NetworkConnectionError",
    "RowHeader",
    "SampleRow",
    "SamplingParams",
    "SandboxEnvironment",
    "StubOptions",
    "TinyModelSpec",
    "TokenCall",
    "Trace",
    "TraceFormatError",
    "TraceTiming",
    "TraceWriter",
    "UpstreamError",
    "VLLMError",
    "VLLMServer",
    "VLLMSpec",
    "VLLMStack",
    "adapter_fingerprint",
    "agent_config_from_spec",
    "check_context",
    "check_endpoint",
    "check_max_tokens",
    "create_gateway_app",
    "create_server_app",
    "create_stub_app",
    "episode_to_rows",
    "free_port",
    "gather_log_probs",
    "listening_pid",
    "make_tiny_model",
    "near_window_probe",
    "open_inference_stack",
    "pick_tokens",
    "raw_log_probs",
    "read_traces",
    "resolve_model",
    "resolve_split",
    "resolve_tasks",
    "rows_from_job",
    "rows_from_trial",
    "run_app_in_thread",
    "run_rollouts",
    "select_tasks",
    "sequence_log_probs",
    "train_tokenizer",
    "vllm_command",
    "vllm_env",
]

if TYPE_CHECKING:  # the same names, eagerly, for type checkers (a test keeps both in step)
    from forge_rollout._agent import (
        MINI_SWE_AGENT_VERSION,
        AgentConfig,
        AgentUse,
        ContextExhausted,
        GatewayModel,
        NetworkConnectionError,
        SandboxEnvironment,
        UpstreamError,
        agent_config_from_spec,
    )
    from forge_rollout._aio import (
        run_app_in_thread,
    )
    from forge_rollout._engine import (
        Engine,
        EngineError,
        GeneratedChoice,
        SamplingParams,
    )
    from forge_rollout._gateway import (
        create_gateway_app,
    )
    from forge_rollout._gateway_config import (
        GUARD_MARKER,
        GatewayConfig,
    )
    from forge_rollout._guard import (
        check_context,
        check_max_tokens,
    )
    from forge_rollout._job_rows import (
        rows_from_job,
        rows_from_trial,
    )
    from forge_rollout._local_stack import (
        LocalStack,
        resolve_model,
    )
    from forge_rollout._probes import (
        POLICY_NAME,
        AdapterPusher,
        adapter_fingerprint,
        near_window_probe,
    )
    from forge_rollout._runner import (
        MiniSweAgent,
        check_endpoint,
        resolve_split,
        resolve_tasks,
        run_rollouts,
        select_tasks,
    )
    from forge_rollout._samples import (
        ConversionStats,
        RowHeader,
        SampleRow,
        TokenCall,
        episode_to_rows,
    )
    from forge_rollout._sampling import (
        gather_log_probs,
        pick_tokens,
        raw_log_probs,
        sequence_log_probs,
    )
    from forge_rollout._server import (
        create_server_app,
    )
    from forge_rollout._stub import (
        StubOptions,
        create_stub_app,
    )
    from forge_rollout._tiny import (
        CHATML_TEMPLATE,
        TinyModelSpec,
        make_tiny_model,
        train_tokenizer,
    )
    from forge_rollout._traces import (
        TRACE_SCHEMA,
        Trace,
        TraceFormatError,
        TraceTiming,
        TraceWriter,
        read_traces,
    )
    from forge_rollout._vllm import (
        VLLMError,
        VLLMServer,
        VLLMSpec,
        vllm_command,
        vllm_env,
    )
    from forge_rollout._vllm_stack import (
        InferenceStack,
        VLLMStack,
        free_port,
        listening_pid,
        open_inference_stack,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'forge_rollout' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"forge_rollout.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
