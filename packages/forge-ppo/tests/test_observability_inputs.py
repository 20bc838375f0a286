"""Critic observability and per-task metrics: hand-computed means and counts, padding, the
exact error text of every input check, and task-id encoding edge cases."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from forge_ppo import (
    EpisodeOutcome,
    PPOInputError,
    critic_observability,
    decode_task_id,
    encode_task_id,
    task_critic_metrics,
    task_rollout_metrics,
)

torch.set_num_threads(1)
OBS = "critic/observability"
NAN = float("nan")


def message(call) -> str:
    with pytest.raises(PPOInputError) as info:
        call()
    return str(info.value)


def test_batch_means_and_counts_by_hand():
    values = torch.tensor([[1.0, 2.0, NAN], [4.0, NAN, NAN]])
    returns = torch.tensor([[2.0, 2.0, NAN], [7.0, NAN, NAN]])
    advantages = returns - values
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])  # row 1 has exactly one action token
    m = critic_observability(values, returns, advantages, mask)
    assert m[f"{OBS}/values_mean"] == pytest.approx(7 / 3, rel=1e-12)
    assert m[f"{OBS}/returns_mean"] == pytest.approx(11 / 3, rel=1e-12)
    assert m[f"{OBS}/advantages_mean"] == pytest.approx(4 / 3, rel=1e-12)
    assert m[f"{OBS}/action_tokens"] == 3.0
    assert m[f"{OBS}/trajectories"] == 2.0
    # Var(R) over (2, 2, 7) = 50/9; Var(R - V) over (1, 0, 3) = 14/9
    assert m[f"{OBS}/ev_return_variance"] == pytest.approx(50 / 9, rel=1e-12)
    assert m[f"{OBS}/ev_residual_variance"] == pytest.approx(14 / 9, rel=1e-12)
    assert m[f"{OBS}/ev"] == pytest.approx(1 - 14 / 50, rel=1e-12)


def test_constant_returns_report_no_ev():
    values = torch.tensor([[0.0, 1.0]])
    returns = torch.tensor([[1.0, 1.0]])
    m = critic_observability(values, returns, returns - values, torch.ones(1, 2))
    assert m[f"{OBS}/ev_defined"] == 0.0 and f"{OBS}/ev" not in m
    assert m[f"{OBS}/ev_return_variance"] == 0.0
    assert m[f"{OBS}/ev_residual_variance"] == pytest.approx(0.25)


def test_observability_shape_mismatch_names_the_mask():
    ok = torch.zeros(2, 3)
    assert message(lambda: critic_observability(ok, ok, ok, torch.ones(3, 2))) == (
        "response_mask: expected shape (2, 3) (the shape of values); found shape (3, 2); "
        "fix: pass response_mask with one entry per token of values"
    )


@pytest.mark.parametrize("name", ["values", "returns", "advantages"])
def test_observability_non_finite_names_the_tensor(name):
    tensors = {n: torch.zeros(1, 2) for n in ("values", "returns", "advantages")}
    tensors[name] = torch.tensor([[0.0, NAN]])
    assert message(lambda: critic_observability(**tensors, response_mask=torch.ones(1, 2))) == (
        f"{name}: expected finite values on every masked (action) token; found 1 non-finite "
        f"value(s), first nan at index (0, 1); fix: find where {name} became NaN/inf "
        "(model outputs, rewards) before the PPO math"
    )


# ------------------------------------------------------------------ per task
def test_task_critic_metrics_by_hand_with_an_empty_task_first():
    values = torch.tensor([[9.0, 9.0], [1.0, 3.0], [5.0, NAN]])
    returns = torch.tensor([[9.0, 9.0], [2.0, 5.0], [4.0, NAN]])
    advantages = torch.tensor([[9.0, 9.0], [0.5, 1.5], [-2.0, NAN]])
    mask = torch.tensor([[0, 0], [1, 1], [1, 0]])
    c = task_critic_metrics(["empty", "x", "y"], values, returns, advantages, mask)
    assert c == {
        "train/task/x/critic/return_residual": 1.5,
        "train/task/x/critic/value_mean": 2.0,
        "train/task/x/critic/return_mean": 3.5,
        "train/task/x/critic/advantage_mean": 1.0,
        "train/task/x/critic/action_tokens": 2.0,
        "train/task/y/critic/return_residual": -1.0,
        "train/task/y/critic/value_mean": 5.0,
        "train/task/y/critic/return_mean": 4.0,
        "train/task/y/critic/advantage_mean": -2.0,
        "train/task/y/critic/action_tokens": 1.0,
    }


def test_task_critic_means_accumulate_in_float64():
    values = torch.tensor([[1e8, 1.0]], dtype=torch.float32)
    c = task_critic_metrics(["t"], values, values, values, torch.ones(1, 2))
    assert c["train/task/t/critic/value_mean"] == 50000000.5  # float32 would give 5e7


@pytest.mark.parametrize("name", ["returns", "advantages", "response_mask"])
def test_task_critic_shape_mismatch_names_the_tensor(name):
    tensors = {n: torch.zeros(2, 3) for n in ("values", "returns", "advantages")}
    tensors["response_mask"] = torch.ones(2, 3)
    tensors[name] = torch.zeros(2, 4)
    assert message(lambda: task_critic_metrics(["a", "b"], **tensors)) == (
        f"{name}: expected shape (2, 3) (the shape of values); found shape (2, 4); "
        f"fix: pass {name} with one entry per token of values"
    )


@pytest.mark.parametrize("name", ["values", "returns", "advantages"])
def test_task_critic_non_finite_names_the_tensor(name):
    tensors = {n: torch.zeros(1, 2) for n in ("values", "returns", "advantages")}
    tensors[name] = torch.tensor([[NAN, 0.0]])
    text = message(lambda: task_critic_metrics(["a"], **tensors, response_mask=torch.ones(1, 2)))
    assert text.startswith(f"{name}: expected finite values on every masked (action) token")


def test_task_ids_must_be_one_per_row():
    x = torch.zeros(3, 2)
    assert message(lambda: task_critic_metrics(["a", "b"], x, x, x, torch.ones(3, 2))) == (
        "task_ids: expected one id per row (3); found 2 ids; "
        "fix: pass the batch's per-row task ids in row order"
    )


# ------------------------------------------------------------------ task ids
def test_encode_refuses_empty_and_non_text():
    assert message(lambda: encode_task_id("")) == (
        "task_id: expected a non-empty string; found ''; fix: pass the task id"
    )
    assert message(lambda: encode_task_id(7)) == (
        "task_id: expected a non-empty string; found 7; fix: pass the task id"
    )


def test_encode_refuses_text_that_is_not_unicode():
    lone = "a\ud800"
    text = message(lambda: encode_task_id(lone))
    assert text.startswith("task_id: expected valid Unicode text; found 'a\\ud800'; fix: ")
    assert "surrogates not allowed" in text  # the codec's own reason is the fix's detail


def test_encode_escapes_everything_but_unreserved_characters():
    assert encode_task_id("XxX-._~") == "XxX-._~"
    assert encode_task_id("a/b c%d") == "a%2Fb%20c%25d"


@pytest.mark.parametrize("segment", ["%FF", "%C3", "%e2%82", "a%2fb", "%41", "", "a b"])
def test_decode_refuses_non_canonical_segments(segment):
    assert message(lambda: decode_task_id(segment)) == (
        f"segment: expected a segment produced by encode_task_id; found {segment!r}; "
        "fix: read ids back only from metric names Forge wrote"
    )


def test_decode_refuses_none():
    with pytest.raises(PPOInputError, match="^segment: "):
        decode_task_id(None)


def test_decode_accepts_the_encoding_of_the_replacement_character():
    assert decode_task_id("%EF%BF%BD") == "\ufffd"
    assert decode_task_id(encode_task_id("é/ü")) == "é/ü"


ERRORED_AND_SOLVED = (
    "episode of task 'a/b': expected an infrastructure error (error=True) never to count as a "
    "success; found error=True with success=True; fix: record an errored episode with reward "
    "None and success=False"
)


def test_an_episode_both_errored_and_successful_is_refused():
    fields = {"task_id": "a/b", "reward": None, "error": True, "action_tokens": 1, "agent_steps": 1}
    with pytest.raises(ValidationError) as info:
        EpisodeOutcome(success=True, **fields)
    assert info.value.errors()[0]["msg"] == f"Value error, {ERRORED_AND_SOLVED}"
    assert EpisodeOutcome(success=False, **fields).error  # errored and failed: accepted


def test_the_per_task_metrics_refuse_an_errored_success_built_without_validation():
    good = EpisodeOutcome(task_id="a/b", reward=1.0, success=True, action_tokens=1, agent_steps=1)
    errored = EpisodeOutcome(
        task_id="a/b", reward=None, success=False, error=True, action_tokens=1, agent_steps=1
    )
    for bad in (
        errored.model_copy(update={"success": True}),  # model_copy does not validate
        EpisodeOutcome.model_construct(**{**errored.model_dump(), "success": True}),
    ):
        with pytest.raises(ValueError) as info:
            task_rollout_metrics([good, bad])
        assert str(info.value) == ERRORED_AND_SOLVED
    metrics = task_rollout_metrics([good, errored])
    assert metrics["train/task/a%2Fb/rollout/success"] == 1.0
    assert metrics["train/task/a%2Fb/rollout/errors"] == 1.0
