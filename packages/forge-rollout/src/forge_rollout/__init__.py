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
torch until a model is needed. Every public name is here; the folders (`models/`, `local/`,
`vllm/`, `gateway/`, `traces/`, `episodes/`, `testing/`) hold the private modules, and the
README's "Where the code lives" says what each may import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    # the inference stack: one protocol, its factory, the proofs both stacks give
    "POLICY_NAME": "_probes",
    "AdapterPusher": "_probes",
    "adapter_fingerprint": "_probes",
    "near_window_probe": "_probes",
    "InferenceStack": "_stack",
    "open_inference_stack": "_open_stack",
    # models/: the offline tiny model, SmolLM2, which folder a run serves
    "CHATML_TEMPLATE": "models._tiny",
    "TinyModelSpec": "models._tiny",
    "make_tiny_model": "models._tiny",
    "train_tokenizer": "models._tiny",
    "resolve_model": "models._resolve",
    # local/: the CPU engine, its sampling, the OpenAI-compatible server, LocalStack
    "Engine": "local._engine",
    "EngineError": "local._engine",
    "GeneratedChoice": "local._engine",
    "SamplingParams": "local._engine",
    "sequence_log_probs": "local._sampling",
    "gather_log_probs": "local._sampling",
    "pick_tokens": "local._sampling",
    "raw_log_probs": "local._sampling",
    "create_server_app": "local._server",
    "LocalStack": "local._stack",
    # vllm/: the vLLM launcher and VLLMStack
    "VLLMError": "vllm._launcher",
    "VLLMServer": "vllm._launcher",
    "VLLMSpec": "vllm._launcher",
    "vllm_command": "vllm._launcher",
    "vllm_env": "vllm._launcher",
    "VLLMStack": "vllm._stack",
    "free_port": "vllm._stack",
    "listening_pid": "vllm._stack",
    # gateway/: context guard + exact token traces in front of a server
    "GUARD_MARKER": "gateway._config",
    "GatewayConfig": "gateway._config",
    "create_gateway_app": "gateway._app",
    "check_context": "gateway._guard",
    "check_max_tokens": "gateway._guard",
    # traces/: the trace files and traces -> training rows (also `forge_rollout.rows`)
    "TRACE_SCHEMA": "traces._format",
    "Trace": "traces._format",
    "TraceFormatError": "traces._format",
    "TraceTiming": "traces._format",
    "TraceWriter": "traces._format",
    "read_traces": "traces._format",
    "SampleRow": "traces._samples",
    "TokenCall": "traces._samples",
    "RowHeader": "traces._samples",
    "ConversionStats": "traces._samples",
    "episode_to_rows": "traces._samples",
    "rows_from_trial": "traces._job_rows",
    "rows_from_job": "traces._job_rows",
    # episodes/: the mini-swe-agent loop and the rollout runner
    "AgentConfig": "episodes._agent",
    "AgentUse": "episodes._agent",
    "MINI_SWE_AGENT_VERSION": "episodes._agent",
    "agent_config_from_spec": "episodes._agent",
    "GatewayModel": "episodes._agent",
    "SandboxEnvironment": "episodes._agent",
    "NetworkConnectionError": "episodes._agent",
    "UpstreamError": "episodes._agent",
    "ContextExhausted": "episodes._agent",
    "MiniSweAgent": "episodes._runner",
    "run_rollouts": "episodes._runner",
    "resolve_tasks": "episodes._runner",
    "resolve_split": "episodes._runner",
    "select_tasks": "episodes._runner",
    "check_endpoint": "episodes._runner",
    "audit_job": "episodes._audit",
    "audit_commands": "episodes._audit",
    # testing/: the stub upstream with fault injection
    "StubOptions": "testing._stub",
    "create_stub_app": "testing._stub",
    "SCRIPTED_MODEL": "testing._scripted",
    "scripted_upstream": "testing._scripted",
    # servers in a thread or in the foreground
    "run_app_in_thread": "_aio",
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
    "SCRIPTED_MODEL",
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
    "audit_commands",
    "audit_job",
    "resolve_model",
    "resolve_split",
    "resolve_tasks",
    "rows_from_job",
    "rows_from_trial",
    "run_app_in_thread",
    "run_rollouts",
    "scripted_upstream",
    "select_tasks",
    "sequence_log_probs",
    "train_tokenizer",
    "vllm_command",
    "vllm_env",
]

if TYPE_CHECKING:  # the same names, eagerly, for type checkers (a test keeps both in step)
    from forge_rollout._aio import (
        run_app_in_thread,
    )
    from forge_rollout._open_stack import (
        open_inference_stack,
    )
    from forge_rollout._probes import (
        POLICY_NAME,
        AdapterPusher,
        adapter_fingerprint,
        near_window_probe,
    )
    from forge_rollout._stack import (
        InferenceStack,
    )
    from forge_rollout.episodes._agent import (
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
    from forge_rollout.episodes._audit import audit_commands, audit_job
    from forge_rollout.episodes._runner import (
        MiniSweAgent,
        check_endpoint,
        resolve_split,
        resolve_tasks,
        run_rollouts,
        select_tasks,
    )
    from forge_rollout.gateway._app import (
        create_gateway_app,
    )
    from forge_rollout.gateway._config import (
        GUARD_MARKER,
        GatewayConfig,
    )
    from forge_rollout.gateway._guard import (
        check_context,
        check_max_tokens,
    )
    from forge_rollout.local._engine import (
        Engine,
        EngineError,
        GeneratedChoice,
        SamplingParams,
    )
    from forge_rollout.local._sampling import (
        gather_log_probs,
        pick_tokens,
        raw_log_probs,
        sequence_log_probs,
    )
    from forge_rollout.local._server import (
        create_server_app,
    )
    from forge_rollout.local._stack import (
        LocalStack,
    )
    from forge_rollout.models._resolve import (
        resolve_model,
    )
    from forge_rollout.models._tiny import (
        CHATML_TEMPLATE,
        TinyModelSpec,
        make_tiny_model,
        train_tokenizer,
    )
    from forge_rollout.testing._scripted import SCRIPTED_MODEL, scripted_upstream
    from forge_rollout.testing._stub import (
        StubOptions,
        create_stub_app,
    )
    from forge_rollout.traces._format import (
        TRACE_SCHEMA,
        Trace,
        TraceFormatError,
        TraceTiming,
        TraceWriter,
        read_traces,
    )
    from forge_rollout.traces._job_rows import (
        rows_from_job,
        rows_from_trial,
    )
    from forge_rollout.traces._samples import (
        ConversionStats,
        RowHeader,
        SampleRow,
        TokenCall,
        episode_to_rows,
    )
    from forge_rollout.vllm._launcher import (
        VLLMError,
        VLLMServer,
        VLLMSpec,
        vllm_command,
        vllm_env,
    )
    from forge_rollout.vllm._stack import (
        VLLMStack,
        free_port,
        listening_pid,
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
