"""GAE over action tokens: a plain float64 loop, hand-computed cases and properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from forge_ppo import PPOInputError, compute_gae, masked_whiten, reverse_discounted_scan
from forge_ppo.algo._reference import gae_loop_verl_semantics, gae_reference

torch.set_num_threads(1)
TOL = {"rtol": 1e-9, "atol": 1e-9}


def random_batch(seed: int, batch: int, length: int, p_action: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, length, generator=g) < p_action
    mask[0, -1 if length > 1 else 0] = True  # never an empty batch
    values = torch.randn(batch, length, generator=g, dtype=torch.float64)
    rewards = torch.randn(batch, length, generator=g, dtype=torch.float64) * mask
    return rewards, values, mask


@pytest.mark.parametrize(
    "gamma,lam", [(1.0, 0.95), (0.99, 0.95), (1.0, 1.0), (0.9, 0.0), (0.5, 0.3)]
)
@pytest.mark.parametrize("seed", range(4))
def test_matches_plain_float64_loop(seed, gamma, lam):
    rewards, values, mask = random_batch(seed, batch=5, length=257)
    advantages, returns = compute_gae(rewards, values, mask, gamma, lam)
    ref_adv, ref_ret = gae_reference(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(advantages, ref_adv, **TOL)
    torch.testing.assert_close(returns, ref_ret, **TOL)


def test_hand_computed_with_observation_tokens():
    # actions at 0, 2, 3: r = (0, 0, 1), V = (0.5, 0.2, 0.4), gamma 0.9, lam 0.8 (c = 0.72)
    # delta = (0.9*0.2-0.5, 0.9*0.4-0.2, 1-0.4) = (-0.32, 0.16, 0.6)
    # A_2 = 0.6; A_1 = 0.16 + 0.72*0.6 = 0.592; A_0 = -0.32 + 0.72*0.592 = 0.10624
    mask = torch.tensor([[1, 0, 1, 1, 0]])
    values = torch.tensor([[0.5, 9.0, 0.2, 0.4, -7.0]], dtype=torch.float64)
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    advantages, returns = compute_gae(rewards, values, mask, 0.9, 0.8)
    expected = torch.tensor([[0.10624, 0.0, 0.592, 0.6, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(advantages, expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(
        returns,
        torch.tensor([[0.60624, 0.0, 0.792, 1.0, 0.0]], dtype=torch.float64),
        rtol=0,
        atol=1e-15,
    )


def test_hand_computed_monte_carlo_when_gamma_lambda_one():
    # gamma = lam = 1: A_k = (sum of rewards from k on) - V_k, R_k = sum of rewards from k on
    mask = torch.tensor([[1, 1, 0, 0, 1]])
    values = torch.tensor([[1.0, 2.0, 0.0, 0.0, 3.0]], dtype=torch.float64)
    rewards = torch.tensor([[0.5, 0.0, 0.0, 0.0, 2.0]], dtype=torch.float64)
    advantages, returns = compute_gae(rewards, values, mask, 1.0, 1.0)
    assert advantages.tolist() == [[1.5, 0.0, 0.0, 0.0, -1.0]]
    assert returns.tolist() == [[2.5, 2.0, 0.0, 0.0, 2.0]]


def test_verl_semantics_agree_on_action_tokens():
    rewards, values, mask = random_batch(7, batch=4, length=300)
    advantages, returns = compute_gae(rewards, values, mask, 1.0, 0.95)
    verl_adv, verl_ret = gae_loop_verl_semantics(rewards, values, mask, 1.0, 0.95, whiten=False)
    torch.testing.assert_close(advantages[mask], verl_adv[mask], **TOL)
    torch.testing.assert_close(returns[mask], verl_ret[mask], **TOL)
    whitened, _ = gae_loop_verl_semantics(rewards, values, mask, 1.0, 0.95, whiten=True)
    torch.testing.assert_close(masked_whiten(advantages, mask)[mask], whitened[mask], **TOL)


def test_float32_inputs_give_float32_within_rounding():
    rewards, values, mask = random_batch(3, batch=3, length=4096)
    adv32, ret32 = compute_gae(rewards.float(), values.float(), mask, 1.0, 0.95)
    ref_adv, ref_ret = gae_reference(rewards.float(), values.float(), mask, 1.0, 0.95)
    assert adv32.dtype == torch.float32 and ret32.dtype == torch.float32
    torch.testing.assert_close(adv32.double(), ref_adv, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(ret32.double(), ref_ret, rtol=1e-6, atol=1e-5)


def test_reward_on_observation_token_raises_by_default_and_names_it():
    mask = torch.tensor([[1, 0, 1]])
    rewards = torch.tensor([[0.0, 1.0, 0.0]])
    with pytest.raises(PPOInputError, match=r"token_level_rewards.*row 0, token 1"):
        compute_gae(rewards, torch.zeros(1, 3), mask, 1.0, 1.0)


def test_reward_on_observation_token_carried_to_previous_action():
    mask = torch.tensor([[1, 0, 1, 0]])
    values = torch.zeros(1, 4, dtype=torch.float64)
    rewards = torch.tensor([[0.0, 1.0, 0.0, 2.0]], dtype=torch.float64)
    adv, _ = compute_gae(rewards, values, mask, 0.5, 1.0, reward_on_observation="previous_action")
    # step rewards (1, 2) on actions 0 and 2: A_1 = 2, A_0 = 1 + 0.5 * 2 = 2
    assert adv.tolist() == [[2.0, 0.0, 2.0, 0.0]]
    ref, _ = gae_reference(rewards, values, mask, 0.5, 1.0, reward_on_observation="previous_action")
    assert torch.equal(adv, ref)
    with pytest.raises(PPOInputError, match="before the row's first action token"):
        compute_gae(
            torch.tensor([[3.0, 0.0]]),
            torch.zeros(1, 2),
            torch.tensor([[0, 1]]),
            1.0,
            1.0,
            reward_on_observation="previous_action",
        )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"values": torch.zeros(2, 4)}, r"values: expected shape \(2, 3\)"),
        ({"response_mask": torch.zeros(2, 3, dtype=torch.bool)}, "response_mask: .*at least one"),
        ({"response_mask": torch.full((2, 3), 2)}, "response_mask: expected only 0 and 1"),
        ({"values": torch.tensor([[float("nan"), 0, 0], [0, 0, 0]])}, "values: .*non-finite"),
        ({"gamma": 1.5}, "gamma: expected a number in"),
    ],
)
def test_contract_errors_name_the_tensor(kwargs, match):
    args = {
        "token_level_rewards": torch.zeros(2, 3),
        "values": torch.zeros(2, 3),
        "response_mask": torch.ones(2, 3, dtype=torch.bool),
        "gamma": 1.0,
        "lam": 0.95,
    }
    with pytest.raises(PPOInputError, match=match):
        compute_gae(**{**args, **kwargs})


def test_nan_outside_the_mask_is_ignored():
    mask = torch.tensor([[1, 0, 1]])
    values = torch.tensor([[0.1, float("nan"), 0.3]])
    adv, ret = compute_gae(torch.tensor([[0.0, 0.0, 1.0]]), values, mask, 1.0, 0.9)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert adv[0, 1] == 0 and ret[0, 1] == 0


def test_scan_hand_values_and_long_sequences():
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    assert reverse_discounted_scan(x, 0.5).tolist() == [[1 + 1 + 0.75, 2 + 1.5, 3.0]]
    long = torch.ones(1, 70000, dtype=torch.float64)
    out = reverse_discounted_scan(long, 0.95)
    assert out[0, 0].item() == pytest.approx(1 / 0.05, rel=1e-12)
    assert out[0, -1].item() == 1.0


# ---------------------------------------------------------------- properties
masks = st.lists(st.lists(st.booleans(), min_size=1, max_size=24), min_size=1, max_size=4).map(
    lambda rows: [r + [False] * (24 - len(r)) for r in rows]
)
unit = st.floats(0.0, 1.0)


def _tensors(mask_rows, seed):
    mask = torch.tensor(mask_rows)
    mask[0, 0] = True
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    rewards = torch.randn(mask.shape, generator=g, dtype=torch.float64) * mask
    return rewards, values, mask


@given(masks, st.integers(0, 2**31), unit)
def test_lambda_zero_gives_the_td_error(mask_rows, seed, gamma):
    rewards, values, mask = _tensors(mask_rows, seed)
    advantages, _ = compute_gae(rewards, values, mask, gamma, 0.0)
    for b in range(mask.shape[0]):
        idx = mask[b].nonzero().flatten().tolist()
        for j, t in enumerate(idx):
            next_value = values[b, idx[j + 1]].item() if j + 1 < len(idx) else 0.0
            td = rewards[b, t].item() + gamma * next_value - values[b, t].item()
            assert advantages[b, t].item() == pytest.approx(td, rel=1e-12, abs=1e-12)


@given(st.integers(1, 4), st.integers(1, 40), st.integers(0, 2**31), unit, unit)
def test_all_ones_mask_equals_classic_gae(batch, length, seed, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, length, generator=g, dtype=torch.float64)
    rewards = torch.randn(batch, length, generator=g, dtype=torch.float64)
    advantages, returns = compute_gae(rewards, values, torch.ones(batch, length), gamma, lam)
    for b in range(batch):  # cleanrl ppo.py's loop
        lastgaelam = 0.0
        for t in reversed(range(length)):
            nextvalues = values[b, t + 1].item() if t + 1 < length else 0.0
            delta = rewards[b, t].item() + gamma * nextvalues - values[b, t].item()
            lastgaelam = delta + gamma * lam * lastgaelam
            assert advantages[b, t].item() == pytest.approx(lastgaelam, rel=1e-9, abs=1e-9)
            assert returns[b, t].item() == pytest.approx(lastgaelam + values[b, t].item(), abs=1e-9)


@given(masks, st.integers(0, 2**31), unit, unit, st.lists(st.integers(0, 24), max_size=12))
def test_inserting_observation_tokens_leaves_action_advantages_unchanged(
    mask_rows, seed, gamma, lam, inserts
):
    rewards, values, mask = _tensors(mask_rows, seed)
    advantages, returns = compute_gae(rewards, values, mask, gamma, lam)
    columns = list(range(mask.shape[1]))
    for k, where in enumerate(sorted(inserts, reverse=True)):
        columns.insert(min(where, len(columns)), -1 - k)  # -1 - k marks a new observation token
    take = torch.tensor([max(c, 0) for c in columns])
    is_new = torch.tensor([c < 0 for c in columns])
    new_mask = mask[:, take] & ~is_new
    new_values = torch.where(is_new, 123.0, values[:, take])
    new_rewards = torch.where(is_new, 0.0, rewards[:, take])
    adv2, ret2 = compute_gae(new_rewards, new_values, new_mask, gamma, lam)
    assert torch.equal(adv2[new_mask], advantages[mask])
    assert torch.equal(ret2[new_mask], returns[mask])


@given(
    masks,
    st.integers(0, 2**31),
    unit,
    unit,
    st.integers(0, 9),
    st.integers(0, 9),
    st.integers(0, 3),
)
def test_padding_never_changes_a_result(mask_rows, seed, gamma, lam, left, right, extra_rows):
    rewards, values, mask = _tensors(mask_rows, seed)
    advantages, returns = compute_gae(rewards, values, mask, gamma, lam)
    batch, length = mask.shape
    big_mask = torch.zeros(batch + extra_rows, left + length + right, dtype=torch.bool)
    big_values = torch.full(big_mask.shape, float("nan"), dtype=torch.float64)
    big_rewards = torch.zeros(big_mask.shape, dtype=torch.float64)
    window = (slice(0, batch), slice(left, left + length))
    big_mask[window], big_values[window], big_rewards[window] = mask, values, rewards
    adv2, ret2 = compute_gae(big_rewards, big_values, big_mask, gamma, lam)
    assert torch.equal(adv2[window], advantages) and torch.equal(ret2[window], returns)
    assert not adv2[~big_mask].any() and not ret2[~big_mask].any()


@given(st.integers(0, 2**31), st.booleans())
def test_whitening_matches_the_formula_over_the_mask(seed, shift_mean):
    _, values, mask = random_batch(seed, 3, 50)
    mask[1, :2] = True  # at least two entries
    x = values[mask]
    mean, var = x.mean().item(), x.var(unbiased=True).item()
    expected = (x - mean) / math.sqrt(var + 1e-8) + (0.0 if shift_mean else mean)
    w = masked_whiten(values, mask, shift_mean=shift_mean)
    torch.testing.assert_close(w[mask], expected, rtol=1e-12, atol=1e-12)
    assert not w[~mask].any()
