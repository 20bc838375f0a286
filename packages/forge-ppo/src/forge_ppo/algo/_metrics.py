"""Diagnostics that reveal PPO bugs: entropy over action tokens and gradient norms."""

from __future__ import annotations

import math
from collections.abc import Iterable
from time import perf_counter

import torch

from forge_ppo.algo._validate import check_mask, check_same_shape


def masked_entropy_mean(entropy: torch.Tensor, response_mask: torch.Tensor) -> float:
    """Mean per-token entropy over action tokens. entropy, response_mask: (B, T)."""
    check_same_shape("entropy", {"entropy": entropy, "response_mask": response_mask})
    mask = check_mask(response_mask)
    return float(entropy.detach().to(torch.float64)[mask].mean())


def grad_norm(parameters: Iterable[torch.nn.Parameter], norm_type: float = 2.0) -> float:
    """Global gradient norm over `parameters` (those without .grad are skipped), in float64.

    Unlike `torch.nn.utils.clip_grad_norm_` this only measures; a non-finite result is returned
    as is (inf / nan) so the caller can log it and skip the step.
    """
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return 0.0
    if math.isinf(norm_type):
        return float(max(g.abs().max().to(torch.float64) for g in grads))
    total = sum(
        torch.linalg.vector_norm(g.to(torch.float64), norm_type) ** norm_type for g in grads
    )
    return float(total ** (1.0 / norm_type))


class PhaseTimer:
    """Wall-clock seconds per phase (`timing_s/<phase>`) and in total (`timing_s/update`)."""

    def __init__(self) -> None:
        self.start = self.last = perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = perf_counter()
        self.laps[f"timing_s/{name}"] = now - self.last
        self.last = now

    def metrics(self) -> dict[str, float]:
        return {**self.laps, "timing_s/update": perf_counter() - self.start}
