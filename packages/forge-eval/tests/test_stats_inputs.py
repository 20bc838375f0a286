"""Statistics at their edges: refused inputs (each count checked, exact messages), a custom z
threaded through Newcombe's interval, the two-task clustered SE, and mean_or_none."""

from __future__ import annotations

import math

import pytest
from statsmodels.stats.proportion import proportion_confint

from forge_eval import (
    clustered_mean,
    newcombe_paired_interval,
    pass_at_k,
    pass_hat_k,
    wilson_interval,
)
from forge_eval._stats import mean_or_none


@pytest.mark.parametrize("table", [(-1, 1, 1, 1), (1, -1, 1, 1), (1, 1, -1, 1), (1, 1, 1, -1)])
def test_newcombe_refuses_any_negative_count(table):
    with pytest.raises(ValueError) as info:
        newcombe_paired_interval(*table)
    assert str(info.value) == f"need non-negative counts with n >= 1; got {table}"


def test_newcombe_refuses_an_empty_table():
    with pytest.raises(
        ValueError, match=r"need non-negative counts with n >= 1; got \(0, 0, 0, 0\)"
    ):
        newcombe_paired_interval(0, 0, 0, 0)


@pytest.mark.parametrize("z", [1.0, 2.5758293035489004])
@pytest.mark.parametrize("table", [(3, 5, 2, 4), (1, 4, 3, 12), (10, 1, 6, 3), (2, 7, 0, 1)])
def test_newcombe_uses_the_given_z_for_both_margins(z, table):
    # hybrid score with the margins' Wilson intervals at the same z (Newcombe 1998, method 10)
    a, b, c, d = table
    n = a + b + c + d
    alpha = 2 * (1 - _phi(z))
    l1, u1 = proportion_confint(a + b, n, alpha=alpha, method="wilson")
    l2, u2 = proportion_confint(a + c, n, alpha=alpha, method="wilson")
    p1, p2 = (a + b) / n, (a + c) / n
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    if margins == 0 or 0 <= cross <= n / 2:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(margins)
    else:
        phi = cross / math.sqrt(margins)
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2)
    delta, got_low, got_high = newcombe_paired_interval(a, b, c, d, z=z)
    assert delta == pytest.approx((b - c) / n, abs=1e-15)
    assert (got_low, got_high) == pytest.approx((max(-1, low), min(1, high)), abs=1e-9)
    wider = newcombe_paired_interval(a, b, c, d, z=z + 1.0)
    assert wider[1] < got_low and wider[2] > got_high


def _phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def test_wilson_ends_are_exact():
    for n in (1, 5, 38, 1000):
        assert wilson_interval(0, n)[0] == 0.0
        assert wilson_interval(n, n)[1] == 1.0


@pytest.mark.parametrize(("x", "n"), [(-1, 5), (6, 5), (0, 0)])
def test_wilson_refuses_impossible_counts(x, n):
    with pytest.raises(ValueError) as info:
        wilson_interval(x, n)
    assert str(info.value) == f"wilson_interval needs 0 <= x <= n and n >= 1; got x={x}, n={n}"


def test_clustered_mean_of_two_tasks_has_a_standard_error():
    mean, se = clustered_mean([0.0, 1.0])  # sd = sqrt(1/2), SE = sd / sqrt(2) = 0.5
    assert mean == 0.5 and se == pytest.approx(0.5, rel=1e-15)
    assert clustered_mean([0.25]) == (0.25, None)
    mean3, se3 = clustered_mean([0.0, 0.5, 1.0])  # var 0.25, SE = sqrt(0.25 / 3)
    assert mean3 == 0.5 and se3 == pytest.approx(math.sqrt(0.25 / 3), rel=1e-15)


def test_clustered_mean_refuses_no_tasks():
    with pytest.raises(ValueError) as info:
        clustered_mean([])
    assert str(info.value) == "clustered_mean needs at least one task"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, None, 2], 1.5),
        ([0], 0.0),
        ([None, 0.0, None], 0.0),
        ([0.1] * 10, 0.1),  # fsum: exactly 0.1, not 0.09999999999999999
        ([], None),
        ([None, None], None),
    ],
)
def test_mean_or_none(values, expected):
    got = mean_or_none(values)
    assert got == expected and (got is None or type(got) is float)


@pytest.mark.parametrize("name", ["pass_at_k", "pass_hat_k"])
@pytest.mark.parametrize(
    ("n", "c", "k"),
    [
        (5, 2, 0),  # k = 0: pass^0 would be 1 and pass@0 0 for any task
        (5, 6, 1),  # c > n: more correct attempts than attempts
        (5, -1, 1),
        (5, 2, 6),  # k > n
        (5, 2, -1),
        (0, 0, 0),
    ],
)
def test_pass_at_k_and_pass_hat_k_refuse_impossible_counts(name, n, c, k):
    function = {"pass_at_k": pass_at_k, "pass_hat_k": pass_hat_k}[name]
    with pytest.raises(ValueError) as info:
        function(n, c, k)
    assert str(info.value) == (
        f"{name}: expected 0 <= c <= n and 1 <= k <= n (c correct of n attempts, k drawn); "
        f"found n={n}, c={c}, k={k}; fix: count c among the task's own n attempts and ask for "
        "1 <= k <= the fewest attempts on any task"
    )


@pytest.mark.parametrize(("n", "c", "k"), [(1, 0, 1), (1, 1, 1), (4, 0, 4), (4, 4, 4), (4, 4, 1)])
def test_pass_at_k_and_pass_hat_k_accept_the_boundaries(n, c, k):
    assert pass_at_k(n, c, k) == (1.0 if c else 0.0)  # c is 0 or n here
    assert pass_hat_k(n, c, k) == (1.0 if c == n else 0.0)
