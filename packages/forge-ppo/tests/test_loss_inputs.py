"""The losses' input checks (exact error text), padded-mask diagnostics, defaults, clamps and the
dual-clip boundaries, each against a hand-computed value."""

from __future__ import annotations

import math

import pytest
import torch

from forge_ppo import (
    PPOInputError,
    aggregate_loss,
    kl_penalty,
    loss_normaliser,
    policy_loss,
    value_loss,
)
from forge_ppo.algo._losses import LOG_RATIO_CLAMP

torch.set_num_threads(1)
D = torch.float64
NAN, INF = float("nan"), float("inf")
MODES = "('token-mean', 'seq-mean-token-sum', 'seq-mean-token-mean')"


def t(rows):
    return torch.tensor(rows, dtype=D)


def message(call) -> str:
    with pytest.raises(PPOInputError) as info:
        call()
    return str(info.value)


# ------------------------------------------------------------------ aggregation
def test_unknown_aggregation_mode_message():
    expected = f"loss_agg_mode: expected one of {MODES}; found 'seq-sum'; fix: pick one"
    assert message(lambda: aggregate_loss(t([[1.0]]), torch.ones(1, 1), "seq-sum")) == expected
    assert message(lambda: loss_normaliser([torch.ones(1, 1)], "seq-sum")) == expected


def test_token_mean_is_the_default_aggregation():
    loss, mask = t([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]), torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate_loss(loss, mask).item() == pytest.approx(7 / 3, rel=1e-15)


def test_aggregation_shape_mismatch_names_the_mask():
    assert message(lambda: aggregate_loss(t([[1.0, 2.0]]), torch.ones(1, 3))) == (
        "response_mask: expected shape (1, 2) (the shape of loss_mat); found shape (1, 3); "
        "fix: pass response_mask with one entry per token of loss_mat"
    )


@pytest.mark.parametrize("normaliser", [0, -3])
def test_a_non_positive_normaliser_is_refused(normaliser):
    text = message(lambda: aggregate_loss(t([[1.0]]), torch.ones(1, 1), normaliser=normaliser))
    assert text == (
        f"normaliser: expected a positive token / sequence count; found {normaliser}; fix: "
        "compute it with loss_normaliser() over the non-empty mini-batch"
    )


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_an_empty_mask_has_no_normaliser(mode):
    text = message(lambda: aggregate_loss(t([[1.0, 2.0]]), torch.zeros(1, 2), mode))
    assert "normaliser: expected a positive token / sequence count; found 0;" in text


def test_explicit_normaliser_and_dp_size():
    loss, mask = t([[1.0, 2.0, 3.0]]), torch.tensor([[1, 1, 0]])
    assert aggregate_loss(loss, mask, normaliser=6).item() == 0.5
    assert aggregate_loss(loss, mask, normaliser=6, dp_size=4).item() == 2.0
    seq = aggregate_loss(loss, mask, "seq-mean-token-mean", normaliser=3, dp_size=2)
    assert seq.item() == pytest.approx(1.5 / 3 * 2, rel=1e-15)


def test_loss_normaliser_counts():
    masks = [torch.tensor([[1, 1, 0], [0, 0, 0]]), torch.tensor([[0, 1], [1, 1], [0, 0]])]
    assert loss_normaliser(masks, "token-mean") == 5
    assert loss_normaliser(masks, "seq-mean-token-sum") == 3
    assert loss_normaliser(masks, "seq-mean-token-mean") == 3
    assert loss_normaliser([torch.tensor([[0.0, 1.0]])], "seq-mean-token-mean") == 1


# ------------------------------------------------------------------ policy loss
def policy_args(**kw):
    base = {
        "log_probs": t([[0.0, 0.0]]),
        "old_log_probs": t([[0.0, 0.0]]),
        "advantages": t([[1.0, 1.0]]),
        "response_mask": torch.ones(1, 2),
    }
    return {**base, **kw}


@pytest.mark.parametrize("name", ["old_log_probs", "advantages", "response_mask"])
def test_policy_shape_mismatch_names_the_tensor(name):
    args = policy_args(**{name: torch.zeros(1, 3)})
    assert message(lambda: policy_loss(**args)) == (
        f"{name}: expected shape (1, 2) (the shape of log_probs); found shape (1, 3); "
        f"fix: pass {name} with one entry per token of log_probs"
    )


@pytest.mark.parametrize("name", ["log_probs", "old_log_probs", "advantages"])
@pytest.mark.parametrize("bad", [NAN, INF])
def test_policy_non_finite_on_an_action_token_names_the_tensor(name, bad):
    args = policy_args(**{name: t([[0.0, bad]])})
    assert message(lambda: policy_loss(**args)) == (
        f"{name}: expected finite values on every masked (action) token; found 1 non-finite "
        f"value(s), first {bad} at index (0, 1); fix: find where {name} became NaN/inf "
        "(model outputs, rewards) before the PPO math"
    )


def test_policy_padding_never_changes_loss_or_diagnostics():
    # two action tokens and a padded third holding NaN advantages and a huge log-ratio
    ratios = t([[1.5, 0.5]])
    adv = t([[1.0, -1.0]])
    small = policy_loss(ratios.log(), t([[0.0, 0.0]]), adv, torch.ones(1, 2), dual_clip=3.0)
    padded = policy_loss(
        t([[math.log(1.5), math.log(0.5), 7.0]]),
        t([[0.0, 0.0, -7.0]]),
        t([[1.0, -1.0, NAN]]),
        torch.tensor([[1, 1, 0]]),
        dual_clip=3.0,
    )
    for a, b in zip(small, padded, strict=True):
        assert a.item() == pytest.approx(b.item(), rel=1e-15)
    # by hand: losses (-1.2, 0.8) -> -0.2; both clipped; kl = -(log 1.5 + log 0.5) / 2
    assert padded.loss.item() == pytest.approx(-0.2, rel=1e-12)
    assert padded.clip_fraction.item() == 1.0
    assert padded.approx_kl.item() == pytest.approx(-(math.log(1.5) + math.log(0.5)) / 2)


def test_default_clip_ratio_is_0_2_and_clip_ratio_high_overrides_the_upper_side():
    args = policy_args(log_probs=t([[math.log(1.5), math.log(0.5)]]), advantages=t([[1.0, -1.0]]))
    # default: max(-1.5, -1.2) = -1.2 and max(0.5, 0.8) = 0.8
    assert policy_loss(**args).loss.item() == pytest.approx((-1.2 + 0.8) / 2, rel=1e-12)
    # asymmetric: upper 1 + 0.28, lower still 1 - 0.2
    high = policy_loss(**args, clip_ratio_high=0.28)
    assert high.loss.item() == pytest.approx((-1.28 + 0.8) / 2, rel=1e-12)
    low = policy_loss(**args, clip_ratio=0.1, clip_ratio_high=0.3)
    assert low.loss.item() == pytest.approx((-1.3 + 0.9) / 2, rel=1e-12)


def test_log_ratio_is_clamped_before_exp():
    assert LOG_RATIO_CLAMP == 20.0
    # log-ratio -30 is clamped to -20: approx_kl = 20, ratio e^-20 for a positive advantage
    out = policy_loss(**policy_args(log_probs=t([[-30.0, -30.0]])))
    assert out.approx_kl.item() == 20.0
    assert out.loss.item() == pytest.approx(-math.exp(-20.0), rel=1e-12)
    # log-ratio +30 is clamped to +20: a negative advantage pays e^20, not e^30
    up = policy_loss(**policy_args(log_probs=t([[30.0, 30.0]]), advantages=t([[-1.0, -1.0]])))
    assert up.approx_kl.item() == -20.0
    assert up.loss.item() == pytest.approx(math.exp(20.0), rel=1e-12)


@pytest.mark.parametrize("dual_clip", [1.0, 0.5, -2.0])
def test_dual_clip_must_exceed_one(dual_clip):
    assert message(lambda: policy_loss(**policy_args(), dual_clip=dual_clip)) == (
        f"dual_clip: expected > 1 or None; found {dual_clip!r}; fix: use e.g. 3.0"
    )


def test_dual_clip_just_above_one_is_accepted():
    # ratio 5, A = -1: clipped surrogate max(5, 0.8) = 5, dual clip min(5, 1.5) = 1.5
    args = policy_args(log_probs=t([[math.log(5.0), 0.0]]), advantages=t([[-1.0, 0.0]]))
    out = policy_loss(**args, dual_clip=1.5)
    assert out.loss.item() == pytest.approx(1.5 / 2, rel=1e-12)
    assert out.clip_fraction_lower.item() == 0.5


def test_dual_clip_at_equality_holds_nothing():
    ratio = math.exp(math.log(3.0))  # the ratio exactly as the loss computes it
    args = policy_args(log_probs=t([[math.log(3.0), 0.0]]), advantages=t([[-1.0, 1.0]]))
    out = policy_loss(**args, dual_clip=ratio)
    assert out.clip_fraction_lower.item() == 0.0  # the floor equals the loss: nothing held
    assert out.loss.item() == pytest.approx((ratio - 1.0) / 2, rel=1e-12)


def test_without_dual_clip_nothing_is_held_below():
    args = policy_args(log_probs=t([[math.log(5.0), 0.0]]), advantages=t([[-1.0, 0.0]]))
    out = policy_loss(**args)
    assert out.clip_fraction_lower.item() == 0.0
    assert out.loss.item() == pytest.approx(5.0 / 2, rel=1e-12)


# ------------------------------------------------------------------ value loss
def value_args(**kw):
    base = {
        "vpreds": t([[0.0, 0.0]]),
        "values": t([[0.0, 0.0]]),
        "returns": t([[0.0, 0.0]]),
        "response_mask": torch.ones(1, 2),
    }
    return {**base, **kw}


@pytest.mark.parametrize("name", ["values", "returns", "response_mask"])
def test_value_shape_mismatch_names_the_tensor(name):
    args = value_args(**{name: torch.zeros(2, 2)})
    assert message(lambda: value_loss(**args)) == (
        f"{name}: expected shape (1, 2) (the shape of vpreds); found shape (2, 2); "
        f"fix: pass {name} with one entry per token of vpreds"
    )


@pytest.mark.parametrize("name", ["vpreds", "values", "returns"])
def test_value_non_finite_on_an_action_token_names_the_tensor(name):
    args = value_args(**{name: t([[NAN, 0.0]])})
    assert message(lambda: value_loss(**args)).startswith(
        f"{name}: expected finite values on every masked (action) token; found 1 non-finite "
        "value(s), first nan at index (0, 0);"
    )


def test_value_clip_default_and_both_sides():
    # old values 0, clip 0.2: vpred 1.0 -> 0.2 (upper), vpred -1.0 -> -0.2 (lower)
    args = value_args(vpreds=t([[1.0, -1.0]]), returns=t([[-1.0, 1.0]]))
    out = value_loss(**args)
    # token 0: max((1+1)^2, (0.2+1)^2) = 4; token 1: max((-1-1)^2, (-0.2-1)^2) = 4
    assert out.loss.item() == pytest.approx(0.5 * 4.0, rel=1e-12)
    assert out.clip_fraction.item() == 0.0
    # returns beyond the predictions: the clipped error is the larger one on both sides
    args = value_args(vpreds=t([[1.0, -1.0]]), returns=t([[2.0, -2.0]]))
    out = value_loss(**args)
    # token 0: max(1, 1.8^2 = 3.24); token 1: max(1, 3.24)
    assert out.loss.item() == pytest.approx(0.5 * 3.24, rel=1e-12)
    assert out.clip_fraction.item() == 1.0
    wide = value_loss(**args, value_clip=1.5)  # no clipping inside +-1.5: errors 1 and 1
    assert wide.loss.item() == pytest.approx(0.5, rel=1e-12)
    assert wide.clip_fraction.item() == 0.0


def test_value_padding_never_changes_loss_or_diagnostics():
    small = value_loss(t([[0.5, 0.1]]), t([[0.0, 0.0]]), t([[1.0, -1.0]]), torch.ones(1, 2))
    padded = value_loss(
        t([[0.5, 0.1, 50.0, 50.0]]),
        t([[0.0, 0.0, NAN, 0.0]]),
        t([[1.0, -1.0, 0.0, INF]]),
        torch.tensor([[1, 1, 0, 0]]),
    )
    for a, b in zip(small, padded, strict=True):
        assert a.item() == pytest.approx(b.item(), rel=1e-15)
    assert padded.vpred_mean.item() == pytest.approx(0.3, rel=1e-12)
    assert padded.clip_fraction.item() == 0.5


def test_vpred_mean_accumulates_in_float64():
    vpreds = torch.tensor([[1e8, 1.0]], dtype=torch.float32)
    out = value_loss(vpreds, vpreds, vpreds, torch.ones(1, 2))
    assert out.vpred_mean.dtype == torch.float64
    assert out.vpred_mean.item() == 50000000.5  # a float32 sum would round 1e8 + 1 to 1e8


# ------------------------------------------------------------------ KL
def test_k3_is_the_default_estimator_and_shapes_must_match():
    logp, ref = t([[math.log(0.5)]]), t([[math.log(0.25)]])
    d = math.log(0.5)
    assert kl_penalty(logp, ref).item() == pytest.approx(math.exp(d) - d - 1, rel=1e-12)
    assert message(lambda: kl_penalty(logp, t([[0.0, 0.0]]))) == (
        "ref_log_probs: expected shape (1, 1) (the shape of log_probs); found shape (1, 2); "
        "fix: pass ref_log_probs with one entry per token of log_probs"
    )


def test_k3_is_clamped_to_ten_and_survives_impossible_tokens():
    logp = t([[0.0, 0.0, -INF, -30.0]])
    ref = t([[-15.0, 15.0, 0.0, 0.0]])
    k3 = kl_penalty(logp, ref, "k3")
    # d = -15: exp(-15) + 15 - 1 ~ 14 -> 10; d = 15: e^15 - 16 -> 10; d = +inf -> clamp 20 -> 10
    assert k3.tolist() == [[10.0, 10.0, 10.0, 10.0]]
    small = kl_penalty(t([[0.0]]), t([[2.0]]), "k3").item()
    assert small == pytest.approx(math.exp(2.0) - 3.0, rel=1e-12)  # 4.389: below the clamp


def test_unknown_estimator_message():
    x = t([[0.0]])
    assert message(lambda: kl_penalty(x, x, "k2")) == (
        "estimator: expected 'k1' or 'k3'; found 'k2'; fix: pick one"
    )


# ------------------------------------------------------------------ hot path: once per batch
@pytest.mark.parametrize("name", ["old_log_probs", "advantages", "values", "returns"])
def test_batch_level_check_gives_the_losses_own_error(name):
    from forge_ppo.algo._losses import check_loss_inputs

    good = {k: t([[0.1, 0.2, 0.3]]) for k in ("old_log_probs", "advantages", "values", "returns")}
    mask = torch.tensor([[1, 1, 0]])
    assert check_loss_inputs(mask, **good).tolist() == [[True, True, False]]
    bad = dict(good, **{name: t([[0.1, NAN, 0.3]])})
    text = message(lambda: check_loss_inputs(mask, **bad))
    assert text.startswith(f"{name}: expected finite values on every masked (action) token")
    bad[name] = t([[0.1, NAN, NAN]])[:, :2]
    assert "expected shape (1, 3)" in message(lambda: check_loss_inputs(mask, **bad))
    assert "at least one action token" in message(
        lambda: check_loss_inputs(torch.zeros(1, 3), **good)
    )


def test_unvalidated_losses_equal_the_validated_ones():
    g = torch.Generator().manual_seed(0)
    lp, old, adv = (torch.randn(3, 5, generator=g, dtype=D) for _ in range(3))
    mask = torch.rand(3, 5, generator=g) > 0.3
    mask[0, 0] = True
    for validate in (True, False):
        out = policy_loss(lp, old, adv, mask, dual_clip=3.0, validate=validate)
        vout = value_loss(lp, old, adv, mask, validate=validate)
        if validate:
            want, vwant = out, vout
    for a, b in zip(out, want, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(vout, vwant, strict=True):
        assert torch.equal(a, b)


# ------------------------------------------------------------------ validate=False
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_integer_masks_without_validation_match_the_validated_bool_mask(dtype, mode):
    """A trainer's micro-batch loop passes the batch's 0/1 mask as it is (int64 from the
    collator) with validate=False: every output equals the checked bool mask's, and the
    padded tokens (NaN there, as padding may be) never reach a result."""
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0]], dtype=dtype)
    pad = mask == 0
    log_probs = t([[-1.0, -0.5, 0, 0], [0, -2.0, -0.1, -0.3], [0, 0, 0, 0]]).masked_fill(pad, NAN)
    old = t([[-1.2, -0.2, 0, 0], [0, -1.0, -0.4, -0.3], [0, 0, 0, 0]]).masked_fill(pad, NAN)
    advantages = t([[1.0, -2.0, 0, 0], [0, 0.5, -1.0, 3.0], [0, 0, 0, 0]])
    vpreds = t([[0.1, 0.9, 0, 0], [0, -0.4, 0.3, 0.7], [0, 0, 0, 0]]).masked_fill(pad, NAN)
    values, returns = t([[0.0] * 4] * 3), t([[1.0, 0.5, 0, 0], [0, 0.2, -1.0, 1.0], [0, 0, 0, 0]])
    for validated, unchecked in (
        (
            policy_loss(log_probs, old, advantages, mask != 0, dual_clip=3.0, loss_agg_mode=mode),
            policy_loss(
                log_probs, old, advantages, mask, dual_clip=3.0, loss_agg_mode=mode, validate=False
            ),
        ),
        (
            value_loss(vpreds, values, returns, mask != 0, loss_agg_mode=mode),
            value_loss(vpreds, values, returns, mask, loss_agg_mode=mode, validate=False),
        ),
    ):
        for want, got in zip(validated, unchecked, strict=True):
            assert torch.isfinite(got) and got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    by_hand = policy_loss(log_probs, old, advantages, mask, validate=False)
    kept = ~pad
    ratio = torch.exp(log_probs[kept] - old[kept])
    a = advantages[kept]
    expected = torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
    torch.testing.assert_close(by_hand.loss, expected, rtol=1e-12, atol=0)
