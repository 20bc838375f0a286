"""Input checks shared by the math: same shapes, a non-empty 0/1 mask, finite masked values.

Every failure raises PPOInputError naming the tensor. Values outside `response_mask` are never
inspected: padding may hold anything (NaN included) and never changes a result.
"""

from __future__ import annotations

import torch

from forge_ppo.algo._errors import PPOInputError


def check_same_shape(reference: str, tensors: dict[str, torch.Tensor]) -> tuple[int, ...]:
    """Every tensor in `tensors` has the shape of `tensors[reference]`; returns that shape."""
    shape = tuple(tensors[reference].shape)
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != shape:
            raise PPOInputError(
                name,
                expected=f"shape {shape} (the shape of {reference})",
                found=f"shape {tuple(tensor.shape)}",
                fix=f"pass {name} with one entry per token of {reference}",
            )
    return shape


def check_mask(response_mask: torch.Tensor, *, name: str = "response_mask") -> torch.Tensor:
    """`response_mask` holds only 0/1 (bool or numeric) and selects at least one token.

    Returns the mask as bool.
    """
    if response_mask.dtype == torch.bool:
        mask = response_mask
    else:
        mask = response_mask != 0
        bad = (response_mask != 0) & (response_mask != 1)
        if bool(bad.any()):
            where = tuple(int(i) for i in bad.nonzero()[0])
            raise PPOInputError(
                name,
                expected="only 0 and 1 entries",
                found=f"{response_mask[where].item()!r} at index {where}",
                fix="build the mask from token roles: 1 = policy-generated token, 0 otherwise",
            )
    if not bool(mask.any()):
        raise PPOInputError(
            name,
            expected="at least one action token (an entry equal to 1)",
            found=f"an empty mask of shape {tuple(mask.shape)}",
            fix="drop batches without action tokens before the PPO math",
        )
    return mask


def check_finite(name: str, tensor: torch.Tensor, mask: torch.Tensor) -> None:
    """Every entry of `tensor` where `mask` is true is finite."""
    bad = mask & ~torch.isfinite(tensor)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        raise PPOInputError(
            name,
            expected="finite values on every masked (action) token",
            found=f"{int(bad.sum())} non-finite value(s), first {tensor[where].item()} "
            f"at index {where}",
            fix=f"find where {name} became NaN/inf (model outputs, rewards) before the PPO math",
        )
