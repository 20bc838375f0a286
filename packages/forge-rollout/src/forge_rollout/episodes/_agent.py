"""mini-swe-agent as a library: Forge's model (through the gateway) and environment (a Sandbox).

The loop is mini-swe-agent's own `DefaultAgent`; its text-based action format (one
```mswea_bash_command block per turn) is parsed and observations are formatted by its own
helpers. Forge adds two adapters:

- `GatewayModel`: an OpenAI-compatible client pointed at `<gateway>/sessions/<episode id>/v1`,
  so every call is traced by the gateway; a `context_length_exceeded` answer ends the episode
  as `ContextExhausted` (an agent outcome), an unreachable gateway raises
  `NetworkConnectionError` (an infrastructure error);
- `SandboxEnvironment`: runs each action through `Sandbox.exec` (async) from the agent's
  worker thread, and ends the episode when the command's first output line is the submit word.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from importlib import resources
from typing import Any, Literal, cast

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # no banner, no global-config side effects

import openai
import yaml
from minisweagent import __version__ as MINI_SWE_AGENT_VERSION
from minisweagent.agents.default import DefaultAgent
from minisweagent.exceptions import InterruptAgentFlow, Submitted
from minisweagent.models.utils.actions_text import (
    format_observation_messages,
    parse_regex_actions,
)
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel, ConfigDict, Field

from forge_gates import RunSpec
from forge_sandbox import AgentResourceLimitError, Sandbox

SUBMIT_WORD = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
ACTION_REGEX = r"```mswea_bash_command\s*\n(.*?)\n```"
LOCAL_SYSTEM = (
    "You fix bugs in a Python repository at /workspace. Answer with one short THOUGHT line and "
    "exactly one bash block:\n```mswea_bash_command\nCOMMAND\n```\nWhen done, run `echo "
    f"{SUBMIT_WORD}` alone."
)
LOCAL_INSTANCE = "Issue:\n{{task}}"
LOCAL_OBSERVATION = (
    "<returncode>{{output.returncode}}</returncode>\n<output>\n{{output.output}}</output>"
)
FORMAT_ERROR = (
    "Please always provide EXACTLY ONE action in triple backticks, "
    "found {{actions|length}} actions."
)


@functools.cache
def _shared_http_client() -> openai.DefaultHttpxClient:
    """One HTTP client for every episode of the process (thread-safe, pooled connections).

    A client per episode built its own TLS context, loading the CA bundle each time: about
    a tenth of an episode's CPU in the rollout bench, on a plain-HTTP gateway. The client
    lives as long as the process; each call still carries the episode's timeout.
    """
    return openai.DefaultHttpxClient()


class NetworkConnectionError(RuntimeError):
    """The model endpoint (gateway) could not be reached: an infrastructure error."""


class UpstreamError(RuntimeError):
    """The endpoint answered with an error other than a context overflow: infrastructure."""


class ContextExhausted(InterruptAgentFlow):
    """The gateway refused the next call: the context window is used up (an agent outcome)."""


class AgentConfig(BaseModel):
    """Agent loop and sampling settings; part of a rollout's protocol."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system_template: str = Field(default=LOCAL_SYSTEM, description="System message (Jinja).")
    instance_template: str = Field(default=LOCAL_INSTANCE, description="First user message.")
    observation_template: str = Field(
        default=LOCAL_OBSERVATION, description="How a command's output is shown to the model."
    )
    format_error_template: str = Field(default=FORMAT_ERROR, description="Reply to a bad format.")
    action_regex: str = Field(default=ACTION_REGEX, description="Extracts the one bash action.")
    step_limit: int = Field(default=4, gt=0, description="Max model calls (200 in production).")
    command_timeout_s: float = Field(default=20.0, gt=0, description="Per-command timeout.")
    temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature.")
    top_p: float | None = Field(default=None, gt=0, le=1, description="None = server default.")
    max_tokens: int | None = Field(default=None, gt=0, description="None = not sent.")
    seed: int | None = Field(default=None, description="Sampling seed sent with each call.")
    format_error_limit: int = Field(default=3, ge=0, description="Consecutive format errors.")
    max_output_chars: int = Field(default=4000, gt=0, description="Observation truncation.")
    request_timeout_s: float = Field(default=600.0, gt=0, description="Per model call timeout.")

    @classmethod
    def production(cls, **overrides: Any) -> AgentConfig:
        """mini-swe-agent's own text-based templates (`config/mini_textbased.yaml`), step 200."""
        text = (resources.files("minisweagent") / "config" / "mini_textbased.yaml").read_text()
        agent = yaml.safe_load(text)["agent"]
        model = yaml.safe_load(text).get("model", {})
        base = {
            "system_template": agent["system_template"],
            "instance_template": agent["instance_template"],
            "step_limit": 200,
            "command_timeout_s": 180.0,
        }
        if "observation_template" in model:
            base["observation_template"] = model["observation_template"]
        return cls(**(base | overrides))

    def sampling(self) -> dict[str, Any]:
        """The request parameters sent with every call (unset ones are omitted)."""
        params: dict[str, Any] = {"temperature": self.temperature}
        for name in ("top_p", "max_tokens", "seed"):
            if getattr(self, name) is not None:
                params[name] = getattr(self, name)
        return params


AgentUse = Literal["train", "validation", "eval"]


def agent_config_from_spec(spec: RunSpec, use: AgentUse) -> AgentConfig:
    """The one mapping from a run spec to agent settings, for every pipeline.

    - `eval` (P0): the spec's sampling and its `seed` on every call (one attempt per task, so
      a rerun reproduces the protocol);
    - `train`: the spec's sampling, no seed: the `rollouts_per_task` episodes of one task must
      be independent samples (one seed for all would make them the same episode);
    - `validation`: greedy (temperature 0, top-p 1) and the seed, as DESIGN §4 requires.
    """
    a = spec.agent
    greedy = use == "validation"
    return AgentConfig(
        step_limit=a.step_limit,
        command_timeout_s=a.command_timeout_s,
        temperature=0.0 if greedy else a.temperature,
        top_p=1.0 if greedy else a.top_p,
        max_tokens=a.max_tokens,
        seed=None if use == "train" else spec.seed,
        format_error_limit=a.format_error_limit,
    )


class GatewayModel:
    """mini-swe-agent `Model` that calls an OpenAI-compatible endpoint (the gateway)."""

    def __init__(self, *, base_url: str, model: str, config: AgentConfig) -> None:
        self.config = config
        self.model_name = model
        self.base_url = base_url
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key="forge",
            max_retries=0,
            timeout=config.request_timeout_s,
            http_client=_shared_http_client(),
        )
        self.n_calls = 0
        self.n_input_tokens = 0
        self.n_output_tokens = 0

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        # mini-swe-agent's messages are chat-API {role, content} dicts (system, user, assistant)
        prepared = [
            cast(ChatCompletionMessageParam, {"role": m["role"], "content": m["content"]})
            for m in messages
        ]
        try:
            response = self.client.chat.completions.create(
                model=self.model_name, messages=prepared, **(self.config.sampling() | kwargs)
            )
        except openai.BadRequestError as exc:
            if _error_code(exc) == "context_length_exceeded":
                raise ContextExhausted(
                    {
                        "role": "exit",
                        "content": "ContextExhausted",
                        "extra": {
                            "exit_status": "ContextExhausted",
                            "submission": "",
                            "error": str(exc),
                        },
                    }
                ) from exc
            raise UpstreamError(f"model endpoint refused the call: {exc}") from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise NetworkConnectionError(
                f"expected the model endpoint at {self.base_url} to answer; found {exc!r}; "
                "check that the gateway and the inference server are running"
            ) from exc
        except openai.APIStatusError as exc:
            raise UpstreamError(f"model endpoint failed: HTTP {exc.status_code}: {exc}") from exc
        self.n_calls += 1
        if response.usage is not None:
            self.n_input_tokens += response.usage.prompt_tokens
            self.n_output_tokens += response.usage.completion_tokens
        choice = response.choices[0]
        content = choice.message.content or ""
        extra = {"finish_reason": choice.finish_reason, "timestamp": time.time(), "cost": 0.0}
        try:
            actions = parse_regex_actions(
                content,
                action_regex=self.config.action_regex,
                format_error_template=self.config.format_error_template,
                template_kwargs={"finish_reason": choice.finish_reason},
            )
        except InterruptAgentFlow as exc:  # FormatError: persist what the model said
            exc.messages[0]["extra"].update(extra)
            raise
        return {"role": "assistant", "content": content, "extra": {"actions": actions, **extra}}

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        return dict(kwargs)

    def format_observation_messages(
        self, message: dict, outputs: list[dict], template_vars: dict | None = None
    ) -> list[dict]:
        return format_observation_messages(
            outputs,
            observation_template=self.config.observation_template,
            template_vars=template_vars,
        )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "model": {"name": self.model_name, "base_url": self.base_url},
                    "model_type": "forge_rollout.GatewayModel",
                }
            }
        }


def _error_code(exc: openai.APIStatusError) -> str | None:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    return error.get("code") if isinstance(error, dict) else None


class SandboxEnvironment:
    """mini-swe-agent `Environment` that runs actions in a Forge `Sandbox` (async, other loop)."""

    def __init__(
        self,
        sandbox: Sandbox,
        loop: asyncio.AbstractEventLoop,
        config: AgentConfig,
        cwd: str = "/workspace",
    ) -> None:
        self.sandbox = sandbox
        self.loop = loop
        self.config = config
        self.cwd = cwd
        self.n_commands = 0
        self.exec_s = 0.0  # wall seconds of the agent's commands (the rollout bench's bound)
        self.cancelled = False

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
        command = action.get("command", "")
        if self.cancelled or self.loop.is_closed():
            raise RuntimeError("episode cancelled: the sandbox was stopped")
        future = asyncio.run_coroutine_threadsafe(
            self.sandbox.exec(
                command,
                cwd=cwd or self.cwd,
                timeout_s=float(timeout or self.config.command_timeout_s),
            ),
            self.loop,
        )
        started = time.monotonic()
        result = future.result()  # a sandbox failure propagates: an infrastructure error
        self.exec_s += time.monotonic() - started
        self.n_commands += 1
        if result.oom_killed:  # its own command filled memory: the agent's outcome, scored
            raise AgentResourceLimitError(
                f"agent command {command[:80]!r} was OOM-killed at the sandbox's "
                f"{self.sandbox.spec.memory_mb} MiB memory limit (exit {result.exit_code}): the "
                "episode ends as the agent's outcome and the verifier scores what it left"
            )
        text = (result.stdout or "") + (result.stderr or "")
        if len(text) > self.config.max_output_chars:
            half = self.config.max_output_chars // 2
            text = (
                f"{text[:half]}\n[... {len(text) - 2 * half} characters elided ...]\n{text[-half:]}"
            )
        output: dict[str, Any] = {
            "output": text,
            "returncode": result.exit_code,
            "exception_info": "",
        }
        if result.timed_out:
            output["exception_info"] = (
                f"the command timed out after {self.config.command_timeout_s} s"
            )
        lines = text.lstrip().splitlines()
        if lines and lines[0].strip() == SUBMIT_WORD and result.exit_code == 0:
            submission = "\n".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {
            "cwd": self.cwd,
            "system": "Linux",
            "release": "",
            "version": "",
            "machine": "x86_64",
        } | kwargs

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": {"cwd": self.cwd},
                    "environment_type": "forge_rollout.SandboxEnvironment",
                }
            }
        }


def make_agent(
    model: GatewayModel, env: SandboxEnvironment, config: AgentConfig, wall_time_limit_s: int = 0
) -> DefaultAgent:
    """mini-swe-agent's DefaultAgent with Forge's limits (no cost limit: calls are local;
    `wall_time_limit_s` > 0 ends the episode as TimeExceeded, an agent timeout)."""
    return DefaultAgent(
        model,
        env,
        system_template=config.system_template,
        instance_template=config.instance_template,
        step_limit=config.step_limit,
        cost_limit=0.0,
        max_consecutive_format_errors=config.format_error_limit,
        wall_time_limit_seconds=wall_time_limit_s,
    )


__all__ = [
    "MINI_SWE_AGENT_VERSION",
    "AgentConfig",
    "ContextExhausted",
    "GatewayModel",
    "NetworkConnectionError",
    "SandboxEnvironment",
    "UpstreamError",
    "make_agent",
]
