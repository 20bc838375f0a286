"""Harbor's on-disk job and trial files, as far as scoring needs them.

Field names follow Harbor's pydantic models (`models/trial/result.py`, `models/trial/config.py`,
`models/job/result.py`, `models/job/config.py`, `models/agent/context.py`,
`models/verifier/result.py`); harbor itself is never imported. Unknown fields are ignored
(`extra="ignore"`: Harbor adds fields between releases), optional ones may be missing, and
known fields are checked strictly, so a wrong type is an error that names the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_HARBOR = ConfigDict(frozen=True, extra="ignore", strict=True, defer_build=True)
Number = float | int


class ExceptionInfo(BaseModel):
    """`TrialResult.exception_info`: the first exception that ended or marred the trial."""

    model_config = _HARBOR
    exception_type: str = Field(description="Exception class name, e.g. 'AgentTimeoutError'.")
    exception_message: str | None = Field(default=None, description="str(exception).")


class VerifierResult(BaseModel):
    """`TrialResult.verifier_result`: the verifier's rewards, e.g. {'reward': 1.0}."""

    model_config = _HARBOR
    rewards: dict[str, Number] | None = Field(default=None, description="Reward name -> value.")


class AgentContext(BaseModel):
    """`TrialResult.agent_result`: token counts and agent metadata."""

    model_config = _HARBOR
    n_input_tokens: int | None = Field(default=None, description="Input tokens incl. cache.")
    n_cache_tokens: int | None = Field(default=None, description="Cached input tokens.")
    n_output_tokens: int | None = Field(default=None, description="Output tokens.")
    cost_usd: Number | None = Field(default=None, description="Cost of the agent run in USD.")
    metadata: dict[str, Any] | None = Field(default=None, description="Agent-specific data.")


class TimingInfo(BaseModel):
    """Start and end of one trial phase (`environment_setup`, `verifier`, ...)."""

    model_config = _HARBOR
    started_at: datetime | None = Field(default=None, strict=False, description="Phase start.")
    finished_at: datetime | None = Field(default=None, strict=False, description="Phase end.")


class ModelInfo(BaseModel):
    """`AgentInfo.model_info`."""

    model_config = _HARBOR
    name: str | None = Field(default=None, description="Model name.")
    provider: str | None = Field(default=None, description="Model provider.")


class AgentInfo(BaseModel):
    """`TrialResult.agent_info`: the agent that ran, with its version."""

    model_config = _HARBOR
    name: str | None = Field(default=None, description="Agent name.")
    version: str | None = Field(default=None, description="Agent version.")
    model_info: ModelInfo | None = Field(default=None, description="Model used by the agent.")


class AgentConfig(BaseModel):  # type: ignore[no-redef]  # pydantic plugin bug #3125: field `kwargs`
    """`TrialConfig.agent` / `JobConfig.agents[i]`."""

    model_config = _HARBOR
    name: str | None = Field(default=None, description="Built-in agent name.")
    import_path: str | None = Field(default=None, description="module:Class of a custom agent.")
    model_name: str | None = Field(default=None, description="Model (or served adapter) name.")
    override_timeout_sec: Number | None = Field(default=None, description="Agent timeout.")
    max_timeout_sec: Number | None = Field(default=None, description="Agent timeout cap.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Agent keyword arguments.")


class VerifierConfig(BaseModel):
    """`TrialConfig.verifier`."""

    model_config = _HARBOR
    override_timeout_sec: Number | None = Field(default=None, description="Verifier timeout.")
    max_timeout_sec: Number | None = Field(default=None, description="Verifier timeout cap.")
    disable: bool = Field(default=False, description="Verification switched off.")


class TaskConfig(BaseModel):
    """`TrialConfig.task`: where the task came from."""

    model_config = _HARBOR
    path: str | None = Field(default=None, description="Local task directory.")
    name: str | None = Field(default=None, description="Package task 'org/name'.")
    git_url: str | None = Field(default=None, description="Git repository of the task.")
    git_commit_id: str | None = Field(default=None, description="Git commit of the task.")
    source: str | None = Field(default=None, description="Dataset the task belongs to.")


class TrialConfig(BaseModel):
    """`TrialResult.config` (also `<trial>/config.json`)."""

    model_config = _HARBOR
    task: TaskConfig | None = Field(default=None, description="Task source.")
    trial_name: str | None = Field(default=None, description="Trial name.")
    timeout_multiplier: Number = Field(default=1.0, description="Multiplier for all timeouts.")
    agent_timeout_multiplier: Number | None = Field(default=None, description="Agent only.")
    verifier_timeout_multiplier: Number | None = Field(default=None, description="Verifier only.")
    agent: AgentConfig = Field(default_factory=AgentConfig, description="Agent configuration.")
    verifier: VerifierConfig = Field(default_factory=VerifierConfig, description="Verifier.")


class TrialResult(BaseModel):
    """`<job>/<trial>/result.json`."""

    model_config = _HARBOR
    task_name: str = Field(description="Task name; attempts are grouped by it.")
    trial_name: str = Field(description="Unique trial name.")
    source: str | None = Field(default=None, description="Dataset name (Harbor's eval key).")
    task_checksum: str | None = Field(default=None, description="Digest of the task content.")
    config: TrialConfig | None = Field(default=None, description="The trial's configuration.")
    agent_info: AgentInfo | None = Field(default=None, description="Agent that ran.")
    agent_result: AgentContext | None = Field(default=None, description="Tokens and metadata.")
    verifier_result: VerifierResult | None = Field(default=None, description="Rewards.")
    exception_info: ExceptionInfo | None = Field(default=None, description="Recorded exception.")
    started_at: datetime | None = Field(default=None, strict=False, description="Trial start.")
    finished_at: datetime | None = Field(default=None, strict=False, description="Trial end.")
    verifier: TimingInfo | None = Field(default=None, description="Verifier phase timing.")


class DatasetConfig(BaseModel):
    """`JobConfig.datasets[i]`."""

    model_config = _HARBOR
    path: str | None = Field(default=None, description="Local dataset directory.")
    name: str | None = Field(default=None, description="Registry dataset name.")
    version: str | None = Field(default=None, description="Registry dataset version.")


class RetryConfig(BaseModel):
    """`JobConfig.retry` (formerly `orchestrator.retry`)."""

    model_config = _HARBOR
    max_retries: int = Field(default=0, description="Retries of a failed trial.")


class JobConfig(BaseModel):
    """`<job>/config.json`."""

    model_config = _HARBOR
    job_name: str | None = Field(default=None, description="Job name.")
    n_attempts: int = Field(default=1, description="Attempts per task.")
    timeout_multiplier: Number = Field(default=1.0, description="Multiplier for all timeouts.")
    retry: RetryConfig | None = Field(default=None, description="Retry policy.")
    orchestrator: dict[str, Any] | None = Field(default=None, description="Legacy retry home.")
    agents: list[AgentConfig] = Field(default_factory=list, description="Agents of the job.")
    datasets: list[DatasetConfig] = Field(default_factory=list, description="Datasets run.")


class JobResult(BaseModel):
    """`<job>/result.json` (only the fields used for consistency checks)."""

    model_config = _HARBOR
    id: str | None = Field(default=None, description="Job id.")
    n_total_trials: int | None = Field(default=None, description="Trials the job planned.")
    started_at: datetime | None = Field(default=None, strict=False, description="Job start.")
    finished_at: datetime | None = Field(default=None, strict=False, description="Job end.")
