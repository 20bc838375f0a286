"""PPO losses: clipped policy surrogate (optional dual clip), clipped value loss, KL estimators,
entropy, and loss aggregation with an explicit global normaliser.

Aggregation (verl 0.9.1 `agg_loss` semantics, normaliser made explicit):
    token-mean          sum_{b,t} m_bt l_bt / N_tokens
    seq-mean-token-sum  sum_b [sum_t m_bt l_bt] / N_seqs
    seq-mean-token-mean sum_b [sum_t m_bt l_bt / sum_t m_bt] / N_seqs
N_tokens / N_seqs are the counts over the WHOLE mini-batch (every micro-batch on every rank;
sequences with no action token do not count). Summing the micro-batch losses then gives the
same value and gradient as one big batch. Backends that average gradients over `dp_size` ranks
pass `dp_size` so the mean of the ranks' gradients equals the global sum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import torch

from forge_ppo.algo._errors import PPOInputError
from forge_ppo.algo._validate import check_finite, check_mask, check_same_shape

LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
LOG_RATIO_CLAMP = 20.0  # verl clamps log(pi / pi_old) to [-20, 20] before exp


def _as_bool(response_mask: torch.Tensor) -> torch.Tensor:
    return response_mask if response_mask.dtype == torch.bool else response_mask != 0


def check_loss_inputs(response_mask: torch.Tensor, **tensors: torch.Tensor) -> torch.Tensor:
    """The checks `policy_loss` / `value_loss` make, once for a whole batch: every tensor has the
    mask's shape, the mask is 0/1 and selects a token, every masked value is finite (each failure
    the same PPOInputError naming the tensor). Returns the bool mask. A trainer calls this before
    its micro-batch loop and the losses with `validate=False`, so the loop does not sync."""
    check_same_shape("response_mask", {"response_mask": response_mask, **tensors})
    mask = check_mask(response_mask)
    for name, tensor in tensors.items():
        check_finite(name, tensor.detach(), mask)
    return mask


def _check_mode(mode: str) -> None:
    if mode not in LOSS_AGG_MODES:
        raise PPOInputError(
            "loss_agg_mode", expected=f"one of {LOSS_AGG_MODES}", found=repr(mode), fix="pick one"
        )


def loss_normaliser(response_masks: Sequence[torch.Tensor], loss_agg_mode: LossAggMode) -> int:
    """Global normaliser over a mini-batch split into micro-batches: action tokens (token-mean)
    or sequences with >= 1 action token (seq modes). Each mask: (B_i, T_i).

    Multi-rank: all-reduce (sum) the per-rank values before using them.
    """
    _check_mode(loss_agg_mode)
    if loss_agg_mode == "token-mean":
        return int(sum(int((m != 0).sum()) for m in response_masks))
    return int(sum(int(((m != 0).sum(dim=-1) > 0).sum()) for m in response_masks))


def aggregate_loss(
    loss_mat: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: LossAggMode = "token-mean",
    *,
    normaliser: float | None = None,
    dp_size: int = 1,
) -> torch.Tensor:
    """Reduce per-token losses to a scalar (see the module docstring for the equations).

    Args:
        loss_mat: (B, T) per-token loss; entries outside the mask are ignored.
        response_mask: (B, T) bool or 0/1.
        normaliser: global N_tokens / N_seqs (`loss_normaliser`); None = this batch's own count.
        dp_size: data-parallel ranks whose gradients the backend averages.
    Returns:
        0-d tensor.
    """
    _check_mode(loss_agg_mode)
    check_same_shape("loss_mat", {"loss_mat": loss_mat, "response_mask": response_mask})
    mask = response_mask != 0
    masked = torch.where(mask, loss_mat, 0.0)
    if loss_agg_mode == "token-mean":
        total, local = masked.sum(), int(mask.sum())
    else:
        tokens = mask.sum(dim=-1)
        seq_losses = masked.sum(dim=-1)
        if loss_agg_mode == "seq-mean-token-mean":
            seq_losses = seq_losses / tokens.clamp(min=1)
        total, local = seq_losses.sum(), int((tokens > 0).sum())
    denominator = local if normaliser is None else normaliser
    if denominator <= 0:
        raise PPOInputError(
            "normaliser",
            expected="a positive token / sequence count",
            found=repr(denominator),
            fix="compute it with loss_normaliser() over the non-empty mini-batch",
        )
    return total / denominator * dp_size


class PolicyLossOutput(NamedTuple):
    """Policy loss and its diagnostics (detached 0-d tensors)."""

    loss: torch.Tensor
    clip_fraction: torch.Tensor  # tokens where the clipped term is active
    clip_fraction_lower: torch.Tensor  # negative-advantage tokens held by the dual clip
    approx_kl: torch.Tensor  # k1: mean(log pi_old - log pi) over the mask (verl ppo_kl)

    def metrics(self) -> dict[str, float]:
        return {
            "actor/pg_loss": float(self.loss.detach()),
            "actor/pg_clipfrac": float(self.clip_fraction),
            "actor/pg_clipfrac_lower": float(self.clip_fraction_lower),
            "actor/ppo_kl": float(self.approx_kl),
        }


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_high: float | None = None,
    dual_clip: float | None = None,
    loss_agg_mode: LossAggMode = "token-mean",
    normaliser: float | None = None,
    dp_size: int = 1,
    validate: bool = True,
) -> PolicyLossOutput:
    """Clipped PPO surrogate (Schulman et al. 2017), optional dual clip (Ye et al. 2020).

        ratio = exp(clamp(log_probs - old_log_probs, -20, 20))
        l     = max(-A * ratio, -A * clip(ratio, 1 - clip_ratio, 1 + clip_ratio_high))
        dual  : where A < 0, l = min(l, -A * dual_clip)
    All (B, T); `log_probs` carries the gradient. `validate=False` skips the mask and
    finiteness checks (each a device-to-host sync): for a trainer's micro-batch loop whose whole
    batch went through `check_loss_inputs` once, and whose loss is checked finite after it.
    """
    check_same_shape(
        "log_probs",
        {
            "log_probs": log_probs,
            "old_log_probs": old_log_probs,
            "advantages": advantages,
            "response_mask": response_mask,
        },
    )
    if validate:
        mask = check_mask(response_mask)
        for name, tensor in (("log_probs", log_probs), ("old_log_probs", old_log_probs)):
            check_finite(name, tensor.detach(), mask)
        check_finite("advantages", advantages, mask)
    else:
        mask = _as_bool(response_mask)
    if dual_clip is not None and dual_clip <= 1.0:
        raise PPOInputError(
            "dual_clip", expected="> 1 or None", found=repr(dual_clip), fix="use e.g. 3.0"
        )
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    log_ratio = torch.clamp(log_probs - old_log_probs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + high)
    losses = torch.maximum(unclipped, clipped)
    n = mask.sum()
    clip_fraction = ((clipped > unclipped) & mask).sum() / n
    lower = torch.zeros((), dtype=torch.float64, device=advantages.device)
    if dual_clip is not None:
        floor = -advantages * dual_clip
        held = (losses > floor) & (advantages < 0)
        lower = (held & mask).sum() / n
        losses = torch.where(advantages < 0, torch.minimum(losses, floor), losses)
    loss = aggregate_loss(losses, mask, loss_agg_mode, normaliser=normaliser, dp_size=dp_size)
    approx_kl = torch.where(mask, -log_ratio.detach(), 0.0).sum() / n
    return PolicyLossOutput(loss, clip_fraction.detach(), lower.detach(), approx_kl)


class ValueLossOutput(NamedTuple):
    """Value loss and its diagnostics (detached 0-d tensors)."""

    loss: torch.Tensor
    clip_fraction: torch.Tensor  # tokens where the clipped prediction's error is larger
    vpred_mean: torch.Tensor  # mean new value prediction over the mask

    def metrics(self) -> dict[str, float]:
        """Canonical critic names (DESIGN §4)."""
        return {
            "critic/vf_loss": float(self.loss.detach()),
            "critic/vf_clipfrac": float(self.clip_fraction),
            "critic/vpred_mean": float(self.vpred_mean),
        }


def value_loss(
    vpreds: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    value_clip: float = 0.2,
    loss_agg_mode: LossAggMode = "token-mean",
    normaliser: float | None = None,
    dp_size: int = 1,
    validate: bool = True,
) -> ValueLossOutput:
    """Clipped value loss (PPO2 / verl `compute_value_loss`):

        v_clip = clip(vpreds, values - c, values + c)
        l      = 0.5 * agg(max((vpreds - R)^2, (v_clip - R)^2))
    vpreds: (B, T) new predictions (carry the gradient); values: (B, T) old predictions;
    returns: (B, T) GAE returns. `validate=False`: as for `policy_loss`.
    """
    check_same_shape(
        "vpreds",
        {"vpreds": vpreds, "values": values, "returns": returns, "response_mask": response_mask},
    )
    if validate:
        mask = check_mask(response_mask)
        for name, tensor in (("vpreds", vpreds.detach()), ("values", values), ("returns", returns)):
            check_finite(name, tensor, mask)
    else:
        mask = _as_bool(response_mask)
    v_clipped = torch.clamp(vpreds, values - value_clip, values + value_clip)
    losses1 = (vpreds - returns).square()
    losses2 = (v_clipped - returns).square()
    losses = torch.maximum(losses1, losses2)
    loss = 0.5 * aggregate_loss(losses, mask, loss_agg_mode, normaliser=normaliser, dp_size=dp_size)
    n = mask.sum()
    clip_fraction = ((losses2 > losses1) & mask).sum() / n
    vpred_mean = torch.where(mask, vpreds.detach().to(torch.float64), 0.0).sum() / n
    return ValueLossOutput(loss, clip_fraction.detach(), vpred_mean)


def kl_penalty(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: Literal["k1", "k3"] = "k3"
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate (Schulman, "Approximating KL divergence", 2020).

        k1 = log pi - log pi_ref
        k3 = exp(d) - d - 1,  d = clamp(log pi_ref - log pi, -20, 20), clamped to [-10, 10]
    (the clamps are verl's `low_var_kl`). (B, T) -> (B, T).
    """
    check_same_shape("log_probs", {"log_probs": log_probs, "ref_log_probs": ref_log_probs})
    if estimator == "k1":
        return log_probs - ref_log_probs
    if estimator == "k3":
        d = torch.clamp(ref_log_probs - log_probs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return torch.clamp(torch.exp(d) - d - 1.0, -10.0, 10.0)
    raise PPOInputError("estimator", expected="'k1' or 'k3'", found=repr(estimator), fix="pick one")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Categorical entropy per position: H = logsumexp(z) - sum softmax(z) * z.

    logits: (..., V) -> (...), computed in float32 at least.
    """
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    log_norm = torch.logsumexp(z, dim=-1)
    return log_norm - (torch.softmax(z, dim=-1) * z).sum(dim=-1)
