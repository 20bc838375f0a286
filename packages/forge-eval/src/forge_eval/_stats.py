"""Statistics, standard library only. Pure functions; every formula names its source.

Notation: n trials, x successes, p_hat = x / n. Paired 2x2 table of two runs A and B on the
same tasks: a = both solved, b = only A solved, c = only B solved, d = neither.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z_95 = 1.959963984540054
"""Two-sided 95% normal quantile, Phi^-1(0.975)."""


def wilson_interval(x: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927), clamped to [0, 1].

    centre = (p_hat + z^2 / 2n) / (1 + z^2 / n)
    half   = z / (1 + z^2 / n) * sqrt(p_hat (1 - p_hat) / n + z^2 / 4n^2)

    x: successes, 0 <= x <= n; n: trials, n >= 1.
    """
    if n < 1 or not 0 <= x <= n:
        raise ValueError(f"wilson_interval needs 0 <= x <= n and n >= 1; got x={x}, n={n}")
    p_hat = x / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p_hat + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p_hat * (1.0 - p_hat) / n + z2 / (4.0 * n * n))
    # exact ends: the bound is 0 at x = 0 and 1 at x = n (floating point leaves ~1e-18)
    low = 0.0 if x == 0 else min(p_hat, max(0.0, centre - half))
    high = 1.0 if x == n else max(p_hat, min(1.0, centre + half))
    return low, high


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact McNemar p: two-sided binomial test of b ~ Binomial(b + c, 1/2).

    p = min(1, 2 * P[X <= min(b, c)]), X ~ Bin(b + c, 1/2); p = 1 when b + c = 0.
    Integer arithmetic: exact for any b + c.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0; got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    # 2 * tail / 2^n, as one correctly rounded integer division
    return min(1.0, tail / (1 << (n - 1)))


def newcombe_paired_interval(
    a: int, b: int, c: int, d: int, z: float = Z_95
) -> tuple[float, float, float]:
    """Newcombe (1998, Stat Med 17:2635) method 10: hybrid-score interval for a paired difference.

    Estimates delta = p1 - p2 with p1 = (a + b) / n (first run's success rate) and
    p2 = (a + c) / n (second run's), from Wilson intervals (l1, u1), (l2, u2) of each margin:
        L = delta - sqrt((p1 - l1)^2 - 2 phi (p1 - l1)(u2 - p2) + (u2 - p2)^2)
        U = delta + sqrt((p2 - l2)^2 - 2 phi (p2 - l2)(u1 - p1) + (u1 - p1)^2)
    phi is the correlation of the 2x2 table with Newcombe's adjustment: with
    D = ad - bc and M = (a+b)(c+d)(a+c)(b+d): phi = (D - n/2)/sqrt(M) if D > n/2,
    0 if 0 <= D <= n/2, D/sqrt(M) if D < 0, and 0 when any margin is empty.
    Returns (delta, L, U), clamped to [-1, 1].
    """
    n = a + b + c + d
    if min(a, b, c, d) < 0 or n < 1:
        raise ValueError(f"need non-negative counts with n >= 1; got {(a, b, c, d)}")
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    if margins == 0 or 0 <= cross <= n / 2:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(margins)
    else:
        phi = cross / math.sqrt(margins)
    delta = p1 - p2
    lower_sq = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    upper_sq = (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2
    lower = delta - math.sqrt(max(0.0, lower_sq))
    upper = delta + math.sqrt(max(0.0, upper_sq))
    return delta, max(-1.0, lower), min(1.0, upper)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021, eq. 1): 1 - C(n - c, k) / C(n, k).

    n: attempts on one task, c: correct attempts among them, k <= n.
    """
    _check_nck("pass_at_k", n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (Yao et al. 2024, tau-bench): C(c, k) / C(n, k).

    The chance that k attempts drawn without replacement all succeed.
    """
    _check_nck("pass_hat_k", n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_nck(name: str, n: int, c: int, k: int) -> None:
    """n attempts on one task, c of them correct, k drawn: 0 <= c <= n and 1 <= k <= n (k = 0
    would give pass^k = 1 and pass@k = 0 for any task; c > n is not a count of the attempts)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(
            f"{name}: expected 0 <= c <= n and 1 <= k <= n (c correct of n attempts, k drawn); "
            f"found n={n}, c={c}, k={k}; fix: count c among the task's own n attempts and "
            "ask for 1 <= k <= the fewest attempts on any task"
        )


def clustered_mean(per_task: Sequence[float]) -> tuple[float, float | None]:
    """Mean over tasks and its task-clustered standard error.

    Each task contributes one estimate (e.g. its pass@k), so tasks are the sampling unit:
    SE = sd(per_task) / sqrt(T) with the T - 1 denominator; None when T < 2.
    per_task: (T,) floats.
    """
    t = len(per_task)
    if t == 0:
        raise ValueError("clustered_mean needs at least one task")
    mean = math.fsum(per_task) / t
    if t < 2:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in per_task) / (t - 1)
    return mean, math.sqrt(var / t)


def jaccard(left: set[str] | frozenset[str], right: set[str] | frozenset[str]) -> float:
    """|L & R| / |L | R|; two empty sets are identical, so jaccard(empty, empty) = 1."""
    union = left | right
    if not union:
        return 1.0
    return len(left & right) / len(union)


def mean_or_none(values: Sequence[float | int | None]) -> float | None:
    """Mean of the values that are present; None when none are."""
    present = [float(v) for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None
