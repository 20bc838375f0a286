"""Token-budget micro-batches: budget respected, full coverage, near-optimal counts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_ppo import PPOInputError, lower_bound, plan_micro_batches
from forge_ppo.algo._workloads import lognormal_lengths


def assert_valid(plan, lengths):
    seen = [i for rank in plan.ranks for mb in rank for i in mb]
    assert sorted(seen) == list(range(len(lengths)))  # every sequence exactly once
    for rank in plan.ranks:
        for mb in rank:
            assert sum(lengths[i] for i in mb) <= plan.token_budget
    assert plan.micro_batches >= plan.lower_bound


def test_lognormal_probe_meets_the_target():
    lengths = lognormal_lengths()
    assert sum(lengths) == 1_050_000 and max(lengths) <= 65_536
    plan = plan_micro_batches(lengths, 65_536)
    assert_valid(plan, lengths)
    assert plan.lower_bound == 17
    assert plan.micro_batches <= plan.lower_bound + 1
    assert plan.fill >= 0.9
    summary = plan.summary()
    assert summary["micro_batches"] == plan.micro_batches and summary["max_over_mean_load"] == 1.0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
def test_lognormal_workloads_over_ranks(seed, world_size):
    lengths = lognormal_lengths(seed=seed)
    plan = plan_micro_batches(lengths, 65_536, world_size, equal_counts=True)
    assert_valid(plan, lengths)
    assert {len(rank) for rank in plan.ranks} == {plan.micro_batches // world_size}
    assert {sum(len(mb) for mb in rank) for rank in plan.ranks} == {64 // world_size}
    assert plan.micro_batches <= plan.lower_bound + world_size
    loads = plan.rank_loads
    assert max(loads) / (sum(loads) / world_size) < 1.01


@given(
    st.lists(st.integers(1, 1000), min_size=1, max_size=60),
    st.integers(1000, 4000),
    st.integers(1, 4),
    st.booleans(),
    st.booleans(),
)
def test_never_over_budget_and_every_sequence_once(lengths, budget, world, equal, same):
    if len(lengths) < world or (equal and len(lengths) % world):
        with pytest.raises(PPOInputError, match="lengths"):
            plan_micro_batches(lengths, budget, world, equal_counts=equal)
        return
    plan = plan_micro_batches(
        lengths, budget, world, equal_counts=equal, same_count_across_ranks=same
    )
    assert_valid(plan, lengths)
    assert len(plan.ranks) == world
    if same:
        assert len({len(rank) for rank in plan.ranks}) == 1
    if equal:
        assert len({sum(len(mb) for mb in rank) for rank in plan.ranks}) == 1
    if world == 1:  # any-fit guarantee: all micro-batches but one are more than half full
        assert plan.micro_batches <= math.floor(2 * sum(lengths) / budget) + 1


def test_too_long_sequence_is_named():
    with pytest.raises(PPOInputError, match=r"sequence 2 \('task-x'\): expected 1..100 tokens"):
        plan_micro_batches([10, 20, 130], 100, names=["a", "b", "task-x"])
    with pytest.raises(PPOInputError, match="sequence 0"):
        plan_micro_batches([0], 100)


def test_exact_small_cases_and_padding_micro_batches():
    plan = plan_micro_batches([60, 40, 50, 50], 100)
    assert plan.micro_batches == 2 and plan.fill == 1.0
    # 3 sequences over 2 ranks, one of them long: the short rank gets an empty micro-batch
    plan = plan_micro_batches([100, 100, 10], 100, 2)
    assert [len(r) for r in plan.ranks] == [2, 2]
    assert plan.empty_micro_batches == 1
    assert lower_bound([60, 60, 60], 100) == 3  # each longer than half the budget
