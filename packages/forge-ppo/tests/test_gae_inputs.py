"""compute_gae's input contracts (exact error text), non-finite rewards and values, dtypes,
rows of different lengths, and reverse_discounted_scan's hand values."""

from __future__ import annotations

import pytest
import torch

from forge_ppo import PPOInputError, compute_gae, reverse_discounted_scan
from forge_ppo.algo._reference import gae_reference

torch.set_num_threads(1)
D = torch.float64
NAN, INF = float("nan"), float("inf")


def message(call) -> str:
    with pytest.raises(PPOInputError) as info:
        call()
    return str(info.value)


def gae(rewards, values, mask, gamma=1.0, lam=0.95, **kw):
    return compute_gae(torch.as_tensor(rewards), torch.as_tensor(values), torch.as_tensor(mask),
                       gamma, lam, **kw)  # fmt: skip


# ------------------------------------------------------------------ non-finite inputs
@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize("position", [1, 2])  # an action token, an observation token
def test_a_non_finite_reward_anywhere_raises_naming_it(bad, position):
    rewards = torch.zeros(2, 4, dtype=D)
    rewards[1, position] = bad
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 1]])
    for mode in ("raise", "previous_action"):
        text = message(
            lambda m=mode: gae(rewards, torch.zeros(2, 4), mask, reward_on_observation=m)
        )
        assert text == (
            "token_level_rewards: expected finite rewards on every token (0 off the action "
            f"tokens); found 1 non-finite reward(s), first {bad} at (row 1, token {position}); "
            "fix: find where the reward became NaN/inf (verifier, reward shaping) before the "
            "PPO math"
        )


def test_several_non_finite_rewards_are_counted():
    rewards = torch.tensor([[0.0, NAN, INF], [NAN, 0.0, 0.0]])
    text = message(lambda: gae(rewards, torch.zeros(2, 3), torch.ones(2, 3)))
    assert "found 3 non-finite reward(s), first nan at (row 0, token 1)" in text


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_a_non_finite_value_on_an_action_token_raises(bad):
    values = torch.zeros(1, 3, dtype=D)
    values[0, 2] = bad
    text = message(lambda: gae(torch.zeros(1, 3), values, [[1, 0, 1]]))
    assert text == (
        "values: expected finite values on every masked (action) token; found 1 non-finite "
        f"value(s), first {bad} at index (0, 2); fix: find where values became NaN/inf "
        "(model outputs, rewards) before the PPO math"
    )


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_values_off_the_mask_never_change_a_result(bad):
    rewards = torch.tensor([[0.0, 0.0, 0.5, 0.0, 1.0]], dtype=D)
    clean = torch.tensor([[0.3, 0.0, -0.2, 0.0, 0.7]], dtype=D)
    mask = torch.tensor([[1, 0, 1, 0, 1]])
    dirty = clean.clone()
    dirty[0, 1], dirty[0, 3] = bad, -bad
    adv, ret = gae(rewards, dirty, mask, 0.9, 0.8)
    ref_adv, ref_ret = gae(rewards, clean, mask, 0.9, 0.8)
    assert torch.equal(adv, ref_adv) and torch.equal(ret, ref_ret)
    assert adv[0, 1] == 0.0 and ret[0, 3] == 0.0


# ------------------------------------------------------------------ contract messages
@pytest.mark.parametrize("shape", [(3,), (1, 2, 3)])
def test_rewards_must_be_two_dimensional(shape):
    x = torch.zeros(shape)
    assert message(lambda: compute_gae(x, x, torch.ones(shape), 1.0, 0.95)) == (
        f"token_level_rewards: expected a 2-D (B, T) tensor; found shape {shape}; "
        "fix: stack the batch as (batch, tokens)"
    )


def test_shape_mismatch_names_the_tensor_and_the_reference():
    assert message(lambda: gae(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 4))) == (
        "response_mask: expected shape (2, 3) (the shape of token_level_rewards); found shape "
        "(2, 4); fix: pass response_mask with one entry per token of token_level_rewards"
    )


@pytest.mark.parametrize("name", ["gamma", "lam"])
@pytest.mark.parametrize("value", [-0.01, 1.01, 2])
def test_gamma_and_lambda_outside_the_unit_interval(name, value):
    kwargs = {"gamma": 1.0, "lam": 0.95, name: value}
    x = torch.zeros(1, 2)
    assert message(lambda: compute_gae(x, x, torch.ones(1, 2), **kwargs)) == (
        f"{name}: expected a number in [0, 1]; found {value!r}; fix: pass {name} in [0, 1]"
    )


@pytest.mark.parametrize(("gamma", "lam"), [(0.0, 0.0), (1.0, 1.0), (0.0, 1.0), (1.0, 0.0)])
def test_the_unit_interval_ends_are_accepted(gamma, lam):
    rewards = torch.tensor([[1.0, 2.0]], dtype=D)
    values = torch.tensor([[0.5, 0.25]], dtype=D)
    adv, _ = gae(rewards, values, torch.ones(1, 2), gamma, lam)
    delta0 = 1.0 + gamma * 0.25 - 0.5
    assert adv.tolist() == [[delta0 + gamma * lam * 1.75, 1.75]]


def test_unknown_reward_on_observation_mode():
    x = torch.zeros(1, 2)
    text = message(
        lambda: compute_gae(x, x, torch.ones(1, 2), 1.0, 1.0, reward_on_observation="drop")
    )
    assert text == (
        "reward_on_observation: expected 'raise' or 'previous_action'; found 'drop'; "
        "fix: pick one of the two documented modes"
    )


def test_reward_on_observation_message_in_raise_mode():
    rewards = torch.tensor([[0.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 0]])
    assert message(lambda: gae(rewards, torch.zeros(2, 4), mask)) == (
        "token_level_rewards: expected rewards only on action tokens (response_mask 1); found 2 "
        "reward(s) on observation tokens, first 0.5 at (row 0, token 1); fix: place the reward "
        "on the last action token of the step (DESIGN §3.4), or pass "
        "reward_on_observation='previous_action'"
    )


def test_reward_before_the_first_action_token_in_both_modes():
    rewards, mask = torch.tensor([[3.0, 0.0, 0.0]]), torch.tensor([[0, 1, 1]])
    assert message(lambda: gae(rewards, torch.zeros(1, 3), mask)) == (
        "token_level_rewards: expected rewards only on action tokens (response_mask 1); found 1 "
        "reward(s) on observation tokens, first 3.0 at (row 0, token 0) before the row's first "
        "action token; fix: place the reward on the last action token of the step (DESIGN §3.4), "
        "or pass reward_on_observation='previous_action'"
    )
    text = message(
        lambda: gae(rewards, torch.zeros(1, 3), mask, reward_on_observation="previous_action")
    )
    assert text == (
        "token_level_rewards: expected rewards only on action tokens (response_mask 1) or after "
        "one; found 1 reward(s) on observation tokens, first 3.0 at (row 0, token 0) before the "
        "row's first action token; fix: place the reward on the last action token of the step "
        "(DESIGN §3.4)"
    )


def test_previous_action_mode_counts_only_orphans():
    # one carried reward (token 2, after action 1) and one orphan (row 1, token 0)
    rewards = torch.tensor([[0.0, 0.0, 1.0], [5.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 1]])
    text = message(
        lambda: gae(rewards, torch.zeros(2, 3), mask, reward_on_observation="previous_action")
    )
    assert "found 1 reward(s) on observation tokens, first 5.0 at (row 1, token 0) before" in text


def test_an_action_token_reward_is_not_an_observation_reward():
    # a reward on the first token, which is an action token: accepted in both modes
    for mode in ("raise", "previous_action"):
        adv, ret = gae([[2.0, 0.0]], [[0.5, 0.0]], [[1, 0]], reward_on_observation=mode)
        assert adv.tolist() == [[1.5, 0.0]] and ret.tolist() == [[2.0, 0.0]]


def test_carried_reward_lands_on_the_previous_action_of_its_own_row():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 4.0]], dtype=D)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 0]])
    adv, ret = gae(rewards, torch.zeros(2, 4, dtype=D), mask, 1.0, 1.0,
                   reward_on_observation="previous_action")  # fmt: skip
    assert adv.tolist() == [[0.0] * 4, [5.0, 0.0, 4.0, 0.0]]
    assert ret.tolist() == adv.tolist()


# ------------------------------------------------------------------ shapes and dtypes
def test_rows_with_different_action_counts():
    # row 0: actions at 0, 1, 3 (r on 3); row 1: one action at 2; row 2: no action at all
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 2.0, 0.0], [0.0] * 4], dtype=D)
    values = torch.tensor([[0.5, 0.25, 9.0, 0.5], [9.0, 9.0, 1.0, 9.0], [9.0] * 4], dtype=D)
    mask = torch.tensor([[1, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0]])
    adv, ret = gae(rewards, values, mask, 0.5, 0.5)
    # row 0: delta = (0.5*0.25-0.5, 0.5*0.5-0.25, 1-0.5) = (-0.375, 0, 0.5), c = 0.25
    # A_2 = 0.5, A_1 = 0 + 0.25*0.5 = 0.125, A_0 = -0.375 + 0.25*0.125 = -0.34375
    assert adv.tolist() == [[-0.34375, 0.125, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0], [0.0] * 4]
    assert ret.tolist() == [[0.15625, 0.375, 0.0, 1.0], [0.0, 0.0, 2.0, 0.0], [0.0] * 4]
    ref_adv, ref_ret = gae_reference(rewards, values, mask, 0.5, 0.5)
    assert torch.equal(adv, ref_adv) and torch.equal(ret, ref_ret)


@pytest.mark.parametrize(
    ("reward_dtype", "value_dtype", "out"),
    [
        (torch.float32, torch.float64, torch.float64),
        (torch.float64, torch.float32, torch.float64),
        (torch.float32, torch.float32, torch.float32),
        (torch.bfloat16, torch.float32, torch.float32),
    ],
)
def test_output_dtype_is_the_promoted_input_dtype(reward_dtype, value_dtype, out):
    rewards = torch.tensor([[0.0, 1.0]], dtype=reward_dtype)
    values = torch.tensor([[0.5, 0.25]], dtype=value_dtype)
    adv, ret = gae(rewards, values, [[1, 1]], 1.0, 1.0)
    assert adv.dtype == out and ret.dtype == out
    assert adv.tolist() == [[0.5, 0.75]] and ret.tolist() == [[1.0, 1.0]]


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.float32, torch.uint8])
def test_any_zero_one_mask_dtype(mask_dtype):
    mask = torch.tensor([[1, 0, 1]]).to(mask_dtype)
    adv, ret = gae([[0.0, 0.0, 1.0]], [[0.5, 7.0, 0.25]], mask, 1.0, 1.0)
    assert adv.tolist() == [[0.5, 0.0, 0.75]] and ret.tolist() == [[1.0, 0.0, 1.0]]


def test_inputs_are_not_modified():
    rewards = torch.tensor([[0.0, 1.0, 0.0]], dtype=D)
    values = torch.tensor([[0.5, 0.25, NAN]], dtype=D)
    mask = torch.tensor([[1, 1, 0]])
    copies = [t.clone() for t in (rewards, values, mask)]
    gae(rewards, values, mask)
    for original, copy in zip((rewards, values, mask), copies, strict=True):
        assert torch.equal(original.nan_to_num(), copy.nan_to_num())


# ------------------------------------------------------------------ the scan
def scan_by_hand(x: list[float], discount: float) -> list[float]:
    out, running = [], 0.0
    for v in reversed(x):
        running = v + discount * running
        out.append(running)
    return out[::-1]


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 9, 33])
@pytest.mark.parametrize("discount", [0.0, 0.5, 0.9, 1.0])
def test_scan_equals_the_reverse_loop(length, discount):
    x = torch.tensor([[(k + 1.0) * (-1) ** k for k in range(length)]], dtype=D)
    expected = scan_by_hand(x[0].tolist(), discount)
    assert reverse_discounted_scan(x, discount)[0].tolist() == pytest.approx(expected, rel=1e-14)


def test_scan_hand_values_over_three_doubling_steps():
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0, 2.0]], dtype=D)
    # y_k = 2 * 0.5^(5 - k) plus the 1 at k = 0
    assert reverse_discounted_scan(x, 0.5).tolist() == [[1.0625, 0.125, 0.25, 0.5, 1.0, 2.0]]
    assert reverse_discounted_scan(x, 1.0).tolist() == [[3.0, 2.0, 2.0, 2.0, 2.0, 2.0]]
    assert reverse_discounted_scan(x, 0.0).tolist() == x.tolist()


def test_scan_copies_unless_told_to_overwrite():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=D)
    before = x.clone()
    y = reverse_discounted_scan(x, 0.5)
    assert torch.equal(x, before) and y.data_ptr() != x.data_ptr()
    z = reverse_discounted_scan(x.clone(), 0.5, overwrite=True)
    assert torch.equal(y, z)
    assert y.tolist() == [[1 + 1 + 0.75 + 0.5, 2 + 1.5 + 1.0, 3 + 2.0, 4.0]]


def test_scan_rows_are_independent():
    x = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 8.0]], dtype=D)
    assert reverse_discounted_scan(x, 0.5).tolist() == [[1.75, 1.5, 1.0], [2.0, 4.0, 8.0]]


# ------------------------------------------------------------------ precision
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (0.99, 0.9)])
def test_float32_inputs_are_computed_in_float64(gamma, lam):
    # float32 inputs give exactly the float64 result rounded once to float32
    g = torch.Generator().manual_seed(5)
    mask = torch.rand(3, 700, generator=g) < 0.7
    values = torch.randn(3, 700, generator=g).float()
    rewards = (torch.randn(3, 700, generator=g) * mask).float()
    adv32, ret32 = compute_gae(rewards, values, mask, gamma, lam)
    adv64, ret64 = compute_gae(rewards.double(), values.double(), mask, gamma, lam)
    assert torch.equal(adv32, adv64.float()) and torch.equal(ret32, ret64.float())
