"""Every statistic against the issue's reference vectors (1e-6), scipy/statsmodels and
plain reference implementations written here, plus hypothesis properties."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest, norm
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from forge_eval import (
    Z_95,
    clustered_mean,
    jaccard,
    mcnemar_exact_p,
    newcombe_paired_interval,
    pass_at_k,
    pass_hat_k,
    wilson_interval,
)

TOL = 1e-6


# --- the reference vectors -----------------------------------------------------
@pytest.mark.parametrize(
    ("x", "n", "low", "high"),
    [(6, 38, 0.074439, 0.304168), (9, 27, 0.186433, 0.521752)],
)
def test_wilson_reference_vectors(x: int, n: int, low: float, high: float) -> None:
    got = wilson_interval(x, n)
    assert got == pytest.approx((low, high), abs=TOL)


@pytest.mark.parametrize(("b", "c", "p"), [(3, 3, 1.0), (3, 1, 0.625)])
def test_mcnemar_reference_vectors(b: int, c: int, p: float) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(p, abs=TOL)


def test_pass_at_k_reference_vector() -> None:
    assert pass_at_k(10, 3, 5) == pytest.approx(0.916667, abs=TOL)


def test_z_is_the_normal_quantile() -> None:
    assert norm.ppf(0.975) == pytest.approx(Z_95, rel=1e-12)


# --- cross-checks against scipy / statsmodels -------------------------------------------
def test_wilson_matches_statsmodels_on_a_grid() -> None:
    for n in range(1, 61):
        for x in range(n + 1):
            ref = proportion_confint(x, n, alpha=0.05, method="wilson")
            assert wilson_interval(x, n) == pytest.approx(ref, abs=1e-9), (x, n)


def test_mcnemar_matches_scipy_and_statsmodels() -> None:
    for b in range(0, 25):
        for c in range(0, 25):
            ours = mcnemar_exact_p(b, c)
            if b + c:
                assert ours == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-9)
                ref = mcnemar([[7, b], [c, 9]], exact=True).pvalue
                assert ours == pytest.approx(ref, rel=1e-9)
            else:
                assert ours == 1.0


def test_mcnemar_exact_for_large_counts() -> None:
    assert mcnemar_exact_p(400, 520) == pytest.approx(binomtest(400, 920).pvalue, rel=1e-9)


def _newcombe_reference(table: tuple[int, int, int, int]) -> tuple[float, float]:
    """Newcombe square-and-add for paired data, as Fagerland, Lydersen & Laake (2017,
    ch. 8) state it, written independently of forge_eval (own Wilson from statsmodels)."""
    n11, n12, n21, n22 = table
    n = sum(table)
    p1, p2 = (n11 + n12) / n, (n11 + n21) / n
    l1, u1 = proportion_confint(n11 + n12, n, method="wilson")
    l2, u2 = proportion_confint(n11 + n21, n, method="wilson")
    rows = (n11 + n12, n21 + n22)
    cols = (n11 + n21, n12 + n22)
    if 0 in rows or 0 in cols:
        psi = 0.0
    else:
        big_a = n11 * n22 - n12 * n21
        scale = math.sqrt(rows[0] * rows[1] * cols[0] * cols[1])
        psi = (big_a - n / 2) / scale if big_a > n / 2 else 0.0 if big_a >= 0 else big_a / scale
    d1, d2, d3, d4 = p1 - l1, u2 - p2, p2 - l2, u1 - p1
    low = (p1 - p2) - math.sqrt(d1**2 + d2**2 - 2 * psi * d1 * d2)
    high = (p1 - p2) + math.sqrt(d3**2 + d4**2 - 2 * psi * d3 * d4)
    return max(-1.0, low), min(1.0, high)


def test_newcombe_matches_independent_reference_on_all_small_tables() -> None:
    for n in range(1, 13):
        for a, b, c in itertools.product(range(n + 1), repeat=3):
            d = n - a - b - c
            if d < 0:
                continue
            delta, low, high = newcombe_paired_interval(a, b, c, d)
            assert delta == pytest.approx((b - c) / n, abs=1e-12)
            assert (low, high) == pytest.approx(_newcombe_reference((a, b, c, d)), abs=1e-9)


def test_newcombe_equals_statsmodels_hybrid_score_when_phi_is_zero() -> None:
    # with phi = 0 (0 <= ad - bc <= n/2) the paired interval reduces to Newcombe's
    # independent hybrid score interval on the two margins (statsmodels method='newcomb')
    for a, b, c, d in [(2, 3, 1, 2), (1, 4, 3, 12), (3, 5, 2, 4), (0, 5, 0, 7), (1, 2, 7, 23)]:
        n = a + b + c + d
        assert 0 <= a * d - b * c <= n / 2
        ref = confint_proportions_2indep(a + b, n, a + c, n, method="newcomb", compare="diff")
        _, low, high = newcombe_paired_interval(a, b, c, d)
        assert (low, high) == pytest.approx(ref, abs=1e-9)


def test_newcombe_hand_computed_case() -> None:
    # 38 tasks, A solves 6, B solves 9; 2 only-A, 5 only-B: delta = (2 - 5) / 38 for A - B
    delta, low, high = newcombe_paired_interval(4, 2, 5, 27)
    assert delta == pytest.approx(-3 / 38, abs=1e-12)
    assert (low, high) == pytest.approx(_newcombe_reference((4, 2, 5, 27)), abs=1e-12)
    assert low < delta < high


def _pass_at_k_brute(n: int, c: int, k: int) -> float:
    outcomes = [1] * c + [0] * (n - c)
    draws = list(itertools.combinations(outcomes, k))
    return sum(any(d) for d in draws) / len(draws)


def _pass_hat_k_brute(n: int, c: int, k: int) -> float:
    outcomes = [1] * c + [0] * (n - c)
    draws = list(itertools.combinations(outcomes, k))
    return sum(all(d) for d in draws) / len(draws)


def test_pass_at_k_and_pass_hat_k_match_enumeration() -> None:
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_brute(n, c, k), abs=1e-12)
                assert pass_hat_k(n, c, k) == pytest.approx(_pass_hat_k_brute(n, c, k), abs=1e-12)


def test_pass_at_1_is_the_success_fraction() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_hat_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_hat_k(10, 3, 5) == 0.0


def test_clustered_mean_matches_statistics() -> None:
    values = [1.0, 0.0, 0.5, 0.25, 1.0]
    mean, se = clustered_mean(values)
    assert mean == pytest.approx(statistics.fmean(values))
    assert se == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)))
    assert clustered_mean([0.3]) == (0.3, None)


def test_jaccard_defines_empty_empty_as_identical() -> None:
    assert jaccard(set(), set()) == 1.0
    assert jaccard({"a"}, set()) == 0.0
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("call", "args"),
    [(wilson_interval, (3, 0)), (wilson_interval, (5, 4)), (mcnemar_exact_p, (-1, 2)),
     (pass_at_k, (3, 4, 1)), (pass_at_k, (3, 1, 4)), (newcombe_paired_interval, (0, 0, 0, 0))],
)  # fmt: skip
def test_bad_arguments_raise(call, args) -> None:
    with pytest.raises(ValueError, match="need|got|expected"):
        call(*args)


# --- hypothesis properties ---------------------------------------------------------------
@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_contains_p_hat_and_stays_in_unit_interval(xn: tuple[int, int]) -> None:
    x, n = xn
    low, high = wilson_interval(x, n)
    assert 0.0 <= low <= x / n <= high <= 1.0


@given(st.integers(0, 300), st.integers(0, 300))
def test_mcnemar_symmetric_and_a_probability(b: int, c: int) -> None:
    p = mcnemar_exact_p(b, c)
    assert p == mcnemar_exact_p(c, b)
    assert 0.0 < p <= 1.0


@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_monotone_in_k(nc: tuple[int, int]) -> None:
    n, c = nc
    at = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    hat = [pass_hat_k(n, c, k) for k in range(1, n + 1)]
    assert all(x <= y + 1e-12 for x, y in itertools.pairwise(at))
    assert all(x + 1e-12 >= y for x, y in itertools.pairwise(hat))
    assert all(0.0 <= v <= 1.0 for v in at + hat)


@given(st.tuples(*[st.integers(0, 40)] * 4).filter(lambda t: sum(t) > 0))
def test_newcombe_contains_delta_and_is_antisymmetric(table: tuple[int, int, int, int]) -> None:
    a, b, c, d = table
    delta, low, high = newcombe_paired_interval(a, b, c, d)
    assert -1.0 <= low <= delta <= high <= 1.0
    mirrored = newcombe_paired_interval(a, c, b, d)
    assert mirrored == pytest.approx((-delta, -high, -low), abs=1e-12)
