"""Collation: layout, dropped / corrupt rows, padding never changes a result, micro-batches."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import Qwen2Config, Qwen2ForCausalLM

from forge_gates import LoRASpec
from forge_ppo import (
    Actor,
    PPOInputError,
    ValueModel,
    collate,
    micro_batches,
    split_rows,
    task_mini_batches,
)
from forge_ppo.algo._batch import padded_tokens, row_length
from forge_ppo.local._ppo_steps import critic_values
from forge_rollout.rows import RowHeader, SampleRow, episode_to_rows

torch.set_num_threads(1)


@dataclass
class Call:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]


def make_row(prompt, response, mask, *, task="t", episode="e", reward=1.0) -> SampleRow:
    n = len(response)
    rewards = [0.0] * n
    if any(mask):
        rewards[max(i for i, m in enumerate(mask) if m)] = reward
    return SampleRow(
        header=RowHeader(
            task_id=task, episode_id=episode, attempt=0, row_index=0, n_calls=1, reward=reward
        ),
        prompt_ids=torch.tensor(prompt, dtype=torch.int64),
        response_ids=torch.tensor(response, dtype=torch.int64),
        response_mask=torch.tensor(mask, dtype=torch.int64),
        rollout_log_probs=torch.tensor([-0.5 * m for m in mask], dtype=torch.float32),
        token_level_rewards=torch.tensor(rewards, dtype=torch.float32),
    )


def test_collate_layout_by_hand():
    # two calls: completion [7, 8], observation [9], completion [10]
    calls = [Call([1, 2, 3], [7, 8], [-0.1, -0.2]), Call([1, 2, 3, 7, 8, 9], [10], [-0.3])]
    (a,), _ = episode_to_rows(calls, task_id="t/a", episode_id="e0", attempt=0, reward=1.0)
    b = make_row([4], [5], [1], task="t/b")
    batch = collate([a, b], pad_token_id=99)
    assert batch.input_ids.tolist() == [[1, 2, 3, 7, 8, 9, 10], [4, 5, 99, 99, 99, 99, 99]]
    assert batch.attention_mask.tolist() == [[1] * 7, [1, 1, 0, 0, 0, 0, 0]]
    # the output at position t predicts token t + 1
    assert batch.response_positions.tolist() == [[2, 3, 4, 5], [0, 0, 0, 0]]
    assert batch.response_ids.tolist() == [[7, 8, 9, 10], [5, 0, 0, 0]]
    assert batch.response_mask.tolist() == [[True, True, False, True], [True, False, False, False]]
    torch.testing.assert_close(batch.rollout_log_probs[0], torch.tensor([-0.1, -0.2, 0.0, -0.3]))
    assert batch.token_level_rewards.tolist() == [[0, 0, 0, 1.0], [1.0, 0, 0, 0]]
    assert batch.task_ids == ("t/a", "t/b") and batch.tokens == 9 and batch.response_width == 4


def test_split_rows_counts_drops_and_refuses_corrupt_rows():
    good = make_row([1, 2], [3, 4], [1, 0])
    no_action = make_row([1], [3, 4], [0, 0], reward=0.0)
    no_prompt = make_row([], [3], [1])
    kept, dropped = split_rows([good, no_action, no_prompt, good])
    assert kept == [good, good]
    assert dropped == {"empty_prompt": 1, "no_action_tokens": 1}
    bad_len = good.model_copy(update={"response_mask": torch.tensor([1, 0, 1])})
    with pytest.raises(PPOInputError, match="response_mask.*3 entries|one per response token"):
        split_rows([bad_len])
    nan_reward = good.model_copy(update={"token_level_rewards": torch.tensor([float("nan"), 0])})
    with pytest.raises(PPOInputError, match="token_level_rewards"):
        split_rows([nan_reward])
    odd_mask = good.model_copy(update={"response_mask": torch.tensor([2, 0])})
    with pytest.raises(PPOInputError, match="only 0"):
        split_rows([odd_mask])


def test_task_mini_batches_keep_task_order_and_all_rows_of_a_task():
    ids = ["b", "a", "b", "c", "a", "d", "c"]
    assert task_mini_batches(ids, 2) == [[0, 2, 1, 4], [3, 6, 5]]
    assert task_mini_batches(ids, 10) == [[0, 2, 1, 4, 3, 6, 5]]
    with pytest.raises(PPOInputError, match="tasks_per_mini_batch"):
        task_mini_batches(ids, 0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=9))
def test_micro_batches_respect_the_padded_budget_and_cover_every_row(shapes):
    rows = [make_row([1] * p, [2] * r, [1] * r, episode=str(i)) for i, (p, r) in enumerate(shapes)]
    budget = 18
    groups = micro_batches(rows, range(len(rows)), budget)
    assert sorted(i for g in groups for i in g) == list(range(len(rows)))
    for group in groups:
        assert padded_tokens([row_length(rows[i]) for i in group]) <= budget


def test_micro_batches_name_a_row_longer_than_the_budget():
    rows = [make_row([1] * 10, [2] * 10, [1] * 10, task="long-task", episode="ep9")]
    with pytest.raises(PPOInputError, match="long-task/ep9"):
        micro_batches(rows, [0], 8)


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(3)
    config = Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
    )
    actor = Actor.from_model(
        Qwen2ForCausalLM(config), LoRASpec(rank=4, alpha=8), base_model="tiny-config"
    )
    with torch.no_grad():  # a non-zero adapter, so the LoRA path is exercised too
        for name, p in actor.model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)
    return actor, ValueModel.from_config(config, base_model="tiny-config")


row_shapes = st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(0, 2**31))


def random_row(shape, name: str) -> SampleRow:
    p, r, seed = shape
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(r, generator=g) < 0.6).long()
    mask[-1] = 1
    prompt = torch.randint(0, 64, (p,), generator=g).tolist()
    return make_row(
        prompt, torch.randint(0, 64, (r,), generator=g).tolist(), mask.tolist(), episode=name
    )


@settings(max_examples=25, deadline=None)
@given(row_shapes, st.lists(row_shapes, min_size=1, max_size=3), st.integers(0, 3))
def test_padding_never_changes_a_rows_outputs(models, shape, others, where):
    """A row's log-probs, entropy and values are the same alone or batched with other rows."""
    actor, critic = models
    row = random_row(shape, "x")
    batch_rows = [random_row(s, str(i)) for i, s in enumerate(others)]
    where = min(where, len(batch_rows))
    batch_rows.insert(where, row)
    r = row.response_ids.numel()
    with torch.no_grad():
        alone = actor.forward(collate([row]), entropy=True)
        value_alone = critic_values(critic, collate([row]))
        batched = collate(batch_rows)
        together = actor.forward(batched, entropy=True)
        value_together = critic_values(critic, batched)
    tol = {"rtol": 0.0, "atol": 1e-6}  # float32 rounding of differently-shaped matmuls
    torch.testing.assert_close(together.log_probs[where, :r], alone.log_probs[0], **tol)
    torch.testing.assert_close(together.entropy[where, :r], alone.entropy[0], **tol)
    torch.testing.assert_close(value_together[where, :r], value_alone[0], **tol)
    assert not together.log_probs[where, r:].any()  # nothing leaks into the padding
