"""masked_mean, masked_var and masked_whiten: hand-computed values, dtypes and every input check
(NaN in or out of the mask, shape, too few entries), with the exact error text."""

from __future__ import annotations

import math

import pytest
import torch

from forge_ppo import PPOInputError, masked_mean, masked_var, masked_whiten

torch.set_num_threads(1)
D = torch.float64
NAN, INF = float("nan"), float("inf")

# x over the mask [1, 1, 0, 1]: entries (1, 2, 4); mean 7/3, squared deviations sum 14/3
X = torch.tensor([[1.0, 2.0, 100.0, 4.0]], dtype=D)
M = torch.tensor([[1, 1, 0, 1]])


def test_masked_mean_hand_value_and_dtype():
    assert masked_mean(X, M).item() == pytest.approx(7 / 3, rel=1e-15)
    assert masked_mean(X, M.bool()).item() == pytest.approx(7 / 3, rel=1e-15)
    mean32 = masked_mean(X.float(), M)
    assert mean32.dtype == torch.float32 and mean32.shape == ()
    assert mean32.item() == pytest.approx(7 / 3, rel=1e-7)


def test_masked_mean_accumulates_in_float64():
    # float32 sums of 1e8 and 1.0 lose the 1s; float64 accumulation keeps them
    x = torch.tensor([1e8] + [1.0] * 8, dtype=torch.float32)
    assert masked_mean(x, torch.ones(9)).item() == pytest.approx((1e8 + 8) / 9, rel=1e-8)


def test_masked_mean_of_one_entry():
    assert masked_mean(X, torch.tensor([[0, 0, 0, 1]])).item() == 4.0


def test_masked_var_unbiased_and_population():
    assert masked_var(X, M).item() == pytest.approx((14 / 3) / 2, rel=1e-15)
    assert masked_var(X, M, unbiased=True).item() == pytest.approx(7 / 3, rel=1e-15)
    assert masked_var(X, M, unbiased=False).item() == pytest.approx((14 / 3) / 3, rel=1e-15)
    var32 = masked_var(X.float(), M)
    assert var32.dtype == torch.float32 and var32.item() == pytest.approx(7 / 3, rel=1e-6)
    ref = X[M.bool()]
    assert masked_var(X, M).item() == pytest.approx(ref.var(unbiased=True).item(), rel=1e-15)


def test_masked_var_of_one_entry_is_zero_only_without_bessel():
    one = torch.tensor([[0, 1, 0, 0]])
    assert masked_var(X, one, unbiased=False).item() == 0.0
    with pytest.raises(PPOInputError) as info:
        masked_var(X, one)
    assert str(info.value) == (
        "mask: expected >= 2 selected entries; found 1; fix: use a larger mini-batch "
        "(an unbiased variance needs 2 entries) or unbiased=False"
    )


def test_masked_mean_and_var_refuse_bad_masks_and_shapes():
    with pytest.raises(PPOInputError, match=r"^response_mask: expected at least one action token"):
        masked_mean(X, torch.zeros(1, 4))
    with pytest.raises(PPOInputError, match=r"^response_mask: expected only 0 and 1"):
        masked_var(X, torch.tensor([[1, 2, 0, 1]]))
    with pytest.raises(PPOInputError) as info:
        masked_mean(X, torch.ones(1, 3))
    assert str(info.value).startswith("mask: expected shape (1, 4) (the shape of x); found")


def test_masked_mean_ignores_entries_outside_the_mask():
    padded = X.clone()
    padded[0, 2] = 1e30
    assert masked_mean(padded, M).item() == masked_mean(X, M).item()
    assert masked_var(padded, M).item() == masked_var(X, M).item()


# ------------------------------------------------------------------------------ whitening
def whiten_by_hand(x: list[float], eps: float = 1e-8, shift_mean: bool = True) -> list[float]:
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / (len(x) - 1)
    return [(v - mean) / math.sqrt(var + eps) + (0.0 if shift_mean else mean) for v in x]


def test_whiten_hand_values_zero_outside_the_mask():
    w = masked_whiten(X, M)
    expected = whiten_by_hand([1.0, 2.0, 4.0])
    assert w[0, [0, 1, 3]].tolist() == pytest.approx(expected, rel=1e-12)
    assert w[0, 2].item() == 0.0
    # whitened entries have mean 0 and unbiased variance var / (var + eps) ~ 1
    assert sum(expected) == pytest.approx(0.0, abs=1e-12)


def test_whiten_without_shifting_the_mean_adds_it_back():
    w = masked_whiten(X, M, shift_mean=False)
    expected = whiten_by_hand([1.0, 2.0, 4.0], shift_mean=False)
    assert w[0, [0, 1, 3]].tolist() == pytest.approx(expected, rel=1e-12)
    assert w[0, 2].item() == 0.0
    assert w[0, [0, 1, 3]].mean().item() == pytest.approx(7 / 3, rel=1e-12)


def test_whiten_eps_is_added_to_the_variance():
    x = torch.tensor([0.0, 2.0], dtype=D)  # mean 1, unbiased var 2
    w = masked_whiten(x, torch.ones(2), eps=2.0)  # / sqrt(2 + 2)
    assert w.tolist() == [-0.5, 0.5]
    constant = masked_whiten(torch.full((3,), 5.0, dtype=D), torch.ones(3))
    assert constant.tolist() == [0.0, 0.0, 0.0]  # var 0: eps keeps it finite


def test_whiten_keeps_the_dtype_and_any_rank():
    x = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    mask = torch.ones(2, 3, 4)
    w = masked_whiten(x, mask)
    assert w.dtype == torch.float32 and w.shape == (2, 3, 4)
    expected = whiten_by_hand([float(i) for i in range(24)])
    assert w.flatten().tolist() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_whiten_nan_or_inf_outside_the_mask_is_ignored():
    padded = X.clone()
    padded[0, 2] = NAN
    assert torch.equal(masked_whiten(padded, M), masked_whiten(X, M))
    padded[0, 2] = INF
    assert torch.equal(
        masked_whiten(padded, M, shift_mean=False), masked_whiten(X, M, shift_mean=False)
    )


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_whiten_refuses_non_finite_inside_the_mask(bad):
    x = X.clone()
    x[0, 1] = bad
    with pytest.raises(PPOInputError) as info:
        masked_whiten(x, M)
    assert str(info.value) == (
        "x: expected finite values on every masked (action) token; found 1 non-finite "
        f"value(s), first {bad} at index (0, 1); fix: find where x became NaN/inf "
        "(model outputs, rewards) before the PPO math"
    )


def test_whiten_refuses_a_shape_mismatch():
    with pytest.raises(PPOInputError) as info:
        masked_whiten(X, torch.ones(4))
    assert str(info.value) == (
        "mask: expected shape (1, 4) (the shape of x); found shape (4,); "
        "fix: pass mask with one entry per token of x"
    )


@pytest.mark.parametrize("selected", [[0, 0, 0, 1], [1, 0, 0, 0]])
def test_whiten_needs_two_entries(selected):
    with pytest.raises(PPOInputError) as info:
        masked_whiten(X, torch.tensor([selected]))
    assert str(info.value) == (
        "mask: expected >= 2 selected entries; found 1; fix: use a larger mini-batch"
    )
    with pytest.raises(PPOInputError, match=r"^response_mask: expected at least one"):
        masked_whiten(X, torch.zeros(1, 4))


def test_whiten_with_exactly_two_entries():
    w = masked_whiten(X, torch.tensor([[1, 0, 0, 1]]))  # (1, 4): mean 2.5, var 4.5
    s = math.sqrt(4.5 + 1e-8)
    assert w.tolist() == [[pytest.approx(-1.5 / s), 0.0, 0.0, pytest.approx(1.5 / s)]]


def test_whiten_mean_accumulates_in_float64():
    # a float32 sum of (1e8, 1, -1e8, 0.5) loses the 1 (it gives 0.5); the mean is 0.375
    x = torch.tensor([1e8, 1.0, -1e8, 0.5], dtype=torch.float32)
    w = masked_whiten(x, torch.ones(4), shift_mean=False)
    assert w.mean().item() == pytest.approx(0.375, rel=1e-6)
    reference = masked_whiten(x.double(), torch.ones(4))
    assert masked_whiten(x, torch.ones(4)).tolist() == pytest.approx(reference.tolist(), rel=1e-6)
