"""The protocol of a run: everything that changes outcomes, hashed as canonical JSON.

Two runs are compared only when their protocols agree on every field except the subject
of the comparison (the model, its revision or adapter), which is expected to differ.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forge_eval._errors import ForgeEvalError
from forge_eval._harbor_models import AgentConfig, TrialResult
from forge_eval._reader import Job
from forge_gates import sha256_canonical

_ALIASES: dict[str, tuple[str, ...]] = {
    "model_revision": ("model_revision", "revision"),
    "adapter": ("adapter", "lora_adapter", "adapter_path", "lora_path"),
    "step_limit": ("step_limit", "max_steps", "max_turns", "max_iterations", "max_episodes"),
    "context_window": ("context_window", "max_model_len", "max_context_tokens", "context_length"),
    "seed": ("seed",),
}
"""Protocol field -> `agent.kwargs` keys read for it (first match wins)."""

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "presence_penalty",
                 "frequency_penalty", "repetition_penalty", "n")  # fmt: skip
SAMPLING_NESTS = ("sampling", "sampling_params", "model_kwargs", "completion_kwargs")
TRANSPORT_KEYS = frozenset({"api_base", "base_url", "api_key", "endpoint", "host", "port",
                            "logs_dir", "log_dir", "output_dir"})  # fmt: skip
"""`agent.kwargs` keys that say where the model is served, not how it behaves: not hashed."""

SUBJECT_FIELDS = ("model", "model_revision", "adapter")
"""Fields expected to differ between two compared runs (the thing being compared)."""


class Protocol(BaseModel):
    """What a run did, as far as it changes outcomes. Hashed by `protocol_sha256`."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    model: str | None = Field(description="Model name (agent.model_name or agent_info).")
    model_revision: str | None = Field(description="Model revision, from agent kwargs.")
    adapter: str | None = Field(description="LoRA adapter (path or name), from agent kwargs.")
    agent: str | None = Field(description="Agent name or import path.")
    agent_version: str | None = Field(description="agent_info.version.")
    step_limit: int | None = Field(description="Agent step limit, from agent kwargs.")
    context_window: int | None = Field(description="Context window, from agent kwargs.")
    sampling: dict[str, Any] = Field(description="Sampling parameters (temperature, top_p...).")
    seed: int | None = Field(description="Sampling seed, from agent kwargs.")
    retries: int | None = Field(description="Job retry.max_retries (None: no job config).")
    attempts: int = Field(description="Attempts per task (job n_attempts, else observed max).")
    timeouts: dict[str, Any] = Field(description="Timeout overrides and multipliers.")
    agent_kwargs: dict[str, Any] = Field(description="Remaining agent kwargs (not transport).")
    dataset: list[str] = Field(description="Sorted panel (dataset) names.")
    task_digests: list[str] = Field(description="Sorted 'task_name@task_checksum' strings.")


def protocol_of(job: Job) -> Protocol:
    """Build the protocol of a job from its job config and its trials' configs."""
    # 1. the agent as configured: the first trial's config, else the job's single agent
    first = job.trials[0]
    agent = first.config.agent if first.config else None
    if agent is None and job.config and len(job.config.agents) == 1:
        agent = job.config.agents[0]
    agent = agent or AgentConfig()
    _check_uniform(job)
    kwargs = dict(agent.kwargs)
    named = {field: _pop_alias(kwargs, keys) for field, keys in _ALIASES.items()}
    for field in ("step_limit", "context_window", "seed"):
        key, value = named[field]
        if value is not None and _as_int(value) is None:
            kwargs[key] = value  # not an integer: keep it hashed under its own name
    named = {field: value for field, (_, value) in named.items()}
    sampling = _pop_sampling(kwargs)
    # 2. the job: retries and attempts
    retries = None
    if job.config is not None:
        retry = job.config.retry
        legacy = (job.config.orchestrator or {}).get("retry") or {}
        retries = retry.max_retries if retry else int(legacy.get("max_retries", 0))
    per_task: dict[tuple[str, str], int] = {}
    for attempt in job.attempts:
        task_key = (attempt.panel, attempt.task_name)
        per_task[task_key] = per_task.get(task_key, 0) + 1
    attempts = job.config.n_attempts if job.config else max(per_task.values())
    return Protocol(
        model=agent.model_name or _info_model(first),
        model_revision=_as_str(named["model_revision"]),
        adapter=_as_str(named["adapter"]),
        agent=agent.name
        or agent.import_path
        or (first.agent_info.name if first.agent_info else None),
        agent_version=first.agent_info.version if first.agent_info else None,
        step_limit=_as_int(named["step_limit"]),
        context_window=_as_int(named["context_window"]),
        sampling=sampling,
        seed=_as_int(named["seed"]),
        retries=retries,
        attempts=attempts,
        timeouts=_timeouts(first),
        agent_kwargs={k: v for k, v in kwargs.items() if k not in TRANSPORT_KEYS},
        dataset=sorted({a.panel for a in job.attempts}),
        task_digests=sorted({f"{a.task_name}@{a.task_checksum or '?'}" for a in job.attempts}),
    )


def protocol_sha256(protocol: Protocol, *, exclude: tuple[str, ...] = ()) -> str:
    """SHA-256 of the protocol's canonical JSON, leaving out the `exclude` fields."""
    return sha256_canonical(protocol.model_dump(mode="json", exclude=set(exclude)))


def protocol_differences(
    left: Protocol, right: Protocol, *, exclude: tuple[str, ...] = ()
) -> list[str]:
    """One line per differing field: `field: A=<value> B=<value>` (task lists as set diffs)."""
    a, b = left.model_dump(mode="json"), right.model_dump(mode="json")
    lines = []
    for field in Protocol.model_fields:
        if field in exclude or a[field] == b[field]:
            continue
        if field == "task_digests":
            only_a = sorted(set(a[field]) - set(b[field]))
            only_b = sorted(set(b[field]) - set(a[field]))
            lines.append(f"task_digests: only in A {_short(only_a)}; only in B {_short(only_b)}")
        else:
            lines.append(f"{field}: A={a[field]!r} B={b[field]!r}")
    return lines


def _short(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return f"[{shown}{', ...' if len(items) > limit else ''}] ({len(items)})"


def _pop_alias(kwargs: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any]:
    """Remove every alias from kwargs; return the first (key, value) present."""
    found: tuple[str, Any] = (keys[0], None)
    for key in keys:
        if key in kwargs:
            value = kwargs.pop(key)
            if found[1] is None:
                found = (key, value)
    return found


def _check_uniform(job: Job) -> None:
    """Every trial of a job must run the same agent configuration and timeouts."""
    seen: dict[str, str] = {}
    for trial in job.trials:
        agent = trial.config.agent.model_dump(mode="json") if trial.config else None
        if agent is not None:
            agent["kwargs"] = {k: v for k, v in agent["kwargs"].items() if k not in TRANSPORT_KEYS}
        seen.setdefault(sha256_canonical([agent, _timeouts(trial)]), trial.trial_name)
    if len(seen) > 1:
        raise ForgeEvalError(
            str(job.path),
            expected="one agent configuration for every trial of the job",
            found=f"{len(seen)} different configurations (e.g. trials {sorted(seen.values())})",
            fix="a job must be one protocol; split it into one job directory per configuration",
        )


def _pop_sampling(kwargs: dict[str, Any]) -> dict[str, Any]:
    sampling: dict[str, Any] = {}
    for nest in SAMPLING_NESTS:
        if isinstance(kwargs.get(nest), dict):
            sampling.update(kwargs.pop(nest))
    for key in SAMPLING_KEYS:
        if key in kwargs:
            sampling[key] = kwargs.pop(key)
    return sampling


def _timeouts(trial: TrialResult) -> dict[str, Any]:
    config = trial.config
    if config is None:
        return {}
    return {
        "timeout_multiplier": config.timeout_multiplier,
        "agent_timeout_multiplier": config.agent_timeout_multiplier,
        "verifier_timeout_multiplier": config.verifier_timeout_multiplier,
        "agent_override_timeout_sec": config.agent.override_timeout_sec,
        "agent_max_timeout_sec": config.agent.max_timeout_sec,
        "verifier_override_timeout_sec": config.verifier.override_timeout_sec,
        "verifier_max_timeout_sec": config.verifier.max_timeout_sec,
    }


def _info_model(trial: TrialResult) -> str | None:
    info = trial.agent_info
    return info.model_info.name if info and info.model_info else None


def _as_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
