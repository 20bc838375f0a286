"""Critic observability and per-task metrics, with the exact names of DESIGN §4.

Batch level, over `response_mask` (action) tokens, population statistics (ddof = 0):
    critic/observability/{values,returns,advantages}_{mean,std}
    critic/observability/ev_return_variance    Var(R)
    critic/observability/ev_residual_variance  Var(R - V)
    critic/observability/ev_defined            1 if Var(R) > 0 else 0
    critic/observability/ev                    1 - Var(R - V) / Var(R), ONLY when defined
    critic/observability/action_tokens, critic/observability/trajectories
Per task (id percent-encoded so any id is one metric-path segment and round-trips):
    train/task/<id>/rollout/{episodes,success,timeouts,errors,action_tokens,agent_steps,reward}
    train/task/<id>/critic/{return_residual,value_mean,return_mean,advantage_mean,action_tokens}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from urllib.parse import quote, unquote

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from forge_ppo.algo._errors import PPOInputError
from forge_ppo.algo._validate import check_finite, check_mask, check_same_shape

OBS = "critic/observability"


def _population_var(x: torch.Tensor) -> float:
    """Var(x), ddof 0, float64; shifted by x[0] so identical entries give exactly 0."""
    d = x - x[0]
    return float((d - d.mean()).square().mean())


def critic_observability(
    values: torch.Tensor,
    returns: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
) -> dict[str, float]:
    """Critic health over action tokens. All inputs (B, T); see the module docstring for names.

    Raises PPOInputError naming the tensor on shape mismatch, an empty mask, or a non-finite
    value on a masked token.
    """
    tensors = {
        "values": values,
        "returns": returns,
        "advantages": advantages,
        "response_mask": response_mask,
    }
    check_same_shape("values", tensors)
    mask = check_mask(response_mask)
    picked = {}
    for name in ("values", "returns", "advantages"):
        check_finite(name, tensors[name].detach(), mask)
        picked[name] = tensors[name].detach().to(torch.float64)[mask]
    metrics: dict[str, float] = {}
    for name, x in picked.items():
        metrics[f"{OBS}/{name}_mean"] = float(x.mean())
        metrics[f"{OBS}/{name}_std"] = _population_var(x) ** 0.5
    var_return = _population_var(picked["returns"])
    var_residual = _population_var(picked["returns"] - picked["values"])
    metrics[f"{OBS}/ev_return_variance"] = var_return
    metrics[f"{OBS}/ev_residual_variance"] = var_residual
    metrics[f"{OBS}/ev_defined"] = 1.0 if var_return > 0.0 else 0.0
    if var_return > 0.0:  # never a fake 0 when the return variance vanishes
        metrics[f"{OBS}/ev"] = 1.0 - var_residual / var_return
    metrics[f"{OBS}/action_tokens"] = float(mask.sum())
    metrics[f"{OBS}/trajectories"] = float((mask.sum(dim=-1) > 0).sum())
    return metrics


def encode_task_id(task_id: str) -> str:
    """Percent-encode a task id into one metric-path segment (RFC 3986 unreserved kept)."""
    if not isinstance(task_id, str) or not task_id:
        raise PPOInputError(
            "task_id", expected="a non-empty string", found=repr(task_id), fix="pass the task id"
        )
    try:
        return quote(task_id, safe="", errors="strict")
    except UnicodeEncodeError as exc:
        raise PPOInputError(
            "task_id", expected="valid Unicode text", found=repr(task_id), fix=str(exc)
        ) from exc


def decode_task_id(segment: str) -> str:
    """Inverse of `encode_task_id`; rejects a segment that is not a canonical encoding."""
    # invalid UTF-8 (e.g. "%FF") decodes to U+FFFD, whose encoding differs: refused below
    task_id = unquote(segment) if segment else ""
    if not task_id or encode_task_id(task_id) != segment:
        raise PPOInputError(
            "segment",
            expected="a segment produced by encode_task_id",
            found=repr(segment),
            fix="read ids back only from metric names Forge wrote",
        )
    return task_id


ERRORED_SUCCESS = (
    "episode of task {task_id!r}: expected an infrastructure error (error=True) never to count "
    "as a success; found error=True with success=True; fix: record an errored episode with "
    "reward None and success=False"
)


class EpisodeOutcome(BaseModel):
    """One rollout episode as the per-task rollout metrics see it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(min_length=1, description="Task id (any text; encoded in metric names).")
    reward: float | None = Field(description="Verifier reward; None for an infrastructure error.")
    success: bool = Field(description="The verifier passed (reward at its success value).")
    timed_out: bool = Field(default=False, description="The agent hit its time or step limit.")
    error: bool = Field(default=False, description="Infrastructure error (never scored as 0).")
    agent_caused: bool = Field(
        default=False,
        description="A failure the agent's own actions caused (a limit its commands hit, a "
        "verifier that failed on its change): scored 0 by forge-sandbox, never dropped.",
    )
    action_tokens: int = Field(ge=0, description="Policy-generated tokens in the episode.")
    agent_steps: int = Field(ge=0, description="Agent turns (model calls) in the episode.")

    @model_validator(mode="after")
    def _error_has_no_reward(self) -> EpisodeOutcome:
        if self.error != (self.reward is None):
            raise ValueError(
                f"error={self.error} with reward={self.reward!r}: an infrastructure error has "
                "no reward (None) and every other episode has one; fix the episode record"
            )
        if self.error and self.success:
            raise ValueError(ERRORED_SUCCESS.format(task_id=self.task_id))
        return self


def task_rollout_metrics(episodes: Sequence[EpisodeOutcome]) -> dict[str, float]:
    """Per task: counts of episodes / successes / timeouts / errors, total action tokens and
    agent steps, and the mean reward over episodes that have one (absent when none has)."""
    groups: dict[str, list[EpisodeOutcome]] = defaultdict(list)
    for episode in episodes:
        if episode.error and episode.success:  # built without validation (model_construct)
            raise ValueError(ERRORED_SUCCESS.format(task_id=episode.task_id))
        groups[episode.task_id].append(episode)
    metrics: dict[str, float] = {}
    for task_id, group in groups.items():
        prefix = f"train/task/{encode_task_id(task_id)}/rollout"
        metrics[f"{prefix}/episodes"] = float(len(group))
        metrics[f"{prefix}/success"] = float(sum(e.success for e in group))
        metrics[f"{prefix}/timeouts"] = float(sum(e.timed_out for e in group))
        metrics[f"{prefix}/errors"] = float(sum(e.error for e in group))
        metrics[f"{prefix}/action_tokens"] = float(sum(e.action_tokens for e in group))
        metrics[f"{prefix}/agent_steps"] = float(sum(e.agent_steps for e in group))
        rewards = [e.reward for e in group if e.reward is not None]
        if rewards:
            metrics[f"{prefix}/reward"] = sum(rewards) / len(rewards)
    return metrics


def task_critic_metrics(
    task_ids: Sequence[str],
    values: torch.Tensor,
    returns: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
) -> dict[str, float]:
    """Per task, over its rows' action tokens: mean return residual R - V, mean value / return /
    advantage, action-token count. task_ids: one per row (B); tensors (B, T). Tasks whose rows
    have no action token get no critic metrics."""
    check_same_shape(
        "values",
        {
            "values": values,
            "returns": returns,
            "advantages": advantages,
            "response_mask": response_mask,
        },
    )
    if len(task_ids) != values.shape[0]:
        raise PPOInputError(
            "task_ids",
            expected=f"one id per row ({values.shape[0]})",
            found=f"{len(task_ids)} ids",
            fix="pass the batch's per-row task ids in row order",
        )
    mask = check_mask(response_mask)
    for name, tensor in (("values", values), ("returns", returns), ("advantages", advantages)):
        check_finite(name, tensor.detach(), mask)
    rows: dict[str, list[int]] = defaultdict(list)
    for row, task_id in enumerate(task_ids):
        rows[task_id].append(row)
    metrics: dict[str, float] = {}
    for task_id, index in rows.items():
        sub = mask[index]
        if not bool(sub.any()):
            continue
        v, r, a = (t.detach()[index].to(torch.float64)[sub] for t in (values, returns, advantages))
        prefix = f"train/task/{encode_task_id(task_id)}/critic"
        metrics[f"{prefix}/return_residual"] = float((r - v).mean())
        metrics[f"{prefix}/value_mean"] = float(v.mean())
        metrics[f"{prefix}/return_mean"] = float(r.mean())
        metrics[f"{prefix}/advantage_mean"] = float(a.mean())
        metrics[f"{prefix}/action_tokens"] = float(sub.sum())
    return metrics
