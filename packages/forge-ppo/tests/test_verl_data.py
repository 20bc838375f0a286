"""The verl trainer's pure parts, without verl installed: rows -> verl's padded batch layout and
the critic's key mapping (forge_ppo.verl._data / _critic import neither verl nor Ray)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ppo.verl._critic import from_verl_critic, to_verl_critic
from forge_ppo.verl._data import rows_to_tensors
from forge_rollout.rows import RowHeader, SampleRow


def _row(prompt: list[int], response: list[int], mask: list[int], reward: float, task: str):
    rewards = [0.0] * len(response)
    if any(mask):
        rewards[max(i for i, m in enumerate(mask) if m)] = reward
    return SampleRow(
        header=RowHeader(
            task_id=task, episode_id=task + "-e", attempt=0, row_index=0, n_calls=1, reward=reward
        ),
        prompt_ids=torch.tensor(prompt),
        response_ids=torch.tensor(response),
        response_mask=torch.tensor(mask),
        rollout_log_probs=torch.tensor([-0.5 * m for m in mask], dtype=torch.float32),
        token_level_rewards=torch.tensor(rewards),
    )


rows_strategy = st.lists(
    st.tuples(
        st.lists(st.integers(1, 99), min_size=1, max_size=6),
        st.lists(st.tuples(st.integers(1, 99), st.integers(0, 1)), min_size=1, max_size=7),
        st.sampled_from([0.0, 1.0]),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(rows_strategy, st.integers(1, 4))
def test_rows_become_verls_left_right_padded_batch(data, pad_to):
    rows = [
        _row(p, [t for t, _ in r], [m for _, m in r], w, f"t{i}")
        for i, (p, r, w) in enumerate(data)
    ]
    t, uids = rows_to_tensors(rows, pad_to=pad_to)
    n, width_p = len(t["prompts"]), t["prompts"].shape[1]
    assert n % pad_to == 0 and n - len(rows) < pad_to and len(uids) == n
    assert t["input_ids"].shape == t["attention_mask"].shape == t["position_ids"].shape
    assert t["forge_real_row"].tolist() == [i < len(rows) for i in range(n)]
    for b in range(n):
        row = rows[b % len(rows)]
        real = t["attention_mask"][b].bool()
        # the real tokens, in order: prompt (left-padded) then response (right-padded)
        assert (
            t["input_ids"][b][real].tolist() == row.prompt_ids.tolist() + row.response_ids.tolist()
        )
        assert t["position_ids"][b][real].tolist() == list(range(int(real.sum())))
        p = row.prompt_ids.numel()
        assert t["prompts"][b, width_p - p :].tolist() == row.prompt_ids.tolist()
        if b < len(rows):
            r = row.response_ids.numel()
            assert t["response_mask"][b, :r].tolist() == row.response_mask.tolist()
            assert t["response_mask"][b, r:].sum() == 0
            assert torch.equal(t["token_level_rewards"][b, :r], row.token_level_rewards.float())
            assert uids[b] == row.header.task_id
        else:  # padding rows add no action token, no reward, no log-prob to any loss
            for key in ("response_mask", "token_level_rewards", "rollout_log_probs"):
                assert not t[key][b].any(), key
    assert int(t["response_mask"].sum()) == sum(int(r.response_mask.sum()) for r in rows)


def test_no_rows_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="expected at least one row"):
        rows_to_tensors([])


def test_critic_keys_map_both_ways_and_refuse_a_foreign_tensor():
    state = {
        "backbone.layers.0.mlp.up_proj.weight": torch.ones(2),
        "value_head.bias": torch.zeros(1),
    }
    verl = to_verl_critic(state)
    assert sorted(verl) == ["model.layers.0.mlp.up_proj.weight", "score.bias"]
    assert from_verl_critic(verl).keys() == state.keys()
    with pytest.raises(KeyError, match="expected a name under"):
        to_verl_critic({"lm_head.weight": torch.ones(1)})
