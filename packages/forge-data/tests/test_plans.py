"""Training batch plans: epoch coverage with tail padding, validation subset, schedules."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

import forge_data as fd
from forge_gates import GateError, read_ledger, sha256_canonical

TRAIN = [f"train-{i:03d}" for i in range(187)]
VALIDATION = [f"val-{i:02d}" for i in range(42)]


def test_formal_numbers_and_gate_records(tmp_path, capsys):
    plan = fd.plan_training(TRAIN, 8, epochs=2, seed=0, world_size=4, run_dir=tmp_path)
    assert (plan.batches_per_epoch, plan.padded_exposures, plan.total_steps) == (24, 5, 48)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "TRAIN_FULL_DATASET_GATE_PASSED tasks=187 batch_size=8 batches_per_epoch=24 "
        "padded_exposures=5",
        "TRAIN_EPOCH_COVERAGE exposures=192 unique_tasks=187 repeated_exposures=5",
        "TRAIN_EPOCH_COVERAGE exposures=192 unique_tasks=187 repeated_exposures=5",
    ]
    ledger = read_ledger(tmp_path)
    assert list(ledger[0].fields) == [
        "tasks",
        "batch_size",
        "batches_per_epoch",
        "padded_exposures",
    ]
    assert list(ledger[1].fields) == ["exposures", "unique_tasks", "repeated_exposures"]
    assert plan.batch(0) == plan.epochs[0].batches[0]
    assert plan.batch(47) == plan.epochs[1].batches[23]
    with pytest.raises(IndexError):
        plan.batch(48)


def test_epochs_differ_but_replay_identically():
    one = fd.plan_training(TRAIN, 8, epochs=2, seed=5)
    two = fd.plan_training(list(reversed(TRAIN)), 8, epochs=2, seed=5)
    assert one == two
    assert one.epochs[0].batches != one.epochs[1].batches


def test_bad_inputs_fail_with_every_violation(tmp_path):
    with pytest.raises(GateError) as error:
        fd.plan_training(["a", "a"], 6, epochs=0, world_size=4, run_dir=tmp_path)
    assert {v.rule for v in error.value.violations} == {
        "train.unique",
        "train.batch_divisible",
        "train.epochs",
    }
    assert read_ledger(tmp_path)[0].gate == "TRAIN_FULL_DATASET_GATE_FAILED"


@given(
    n=st.integers(min_value=1, max_value=120),
    batch_size=st.integers(min_value=1, max_value=16),
    seed=st.integers(min_value=0, max_value=10),
    epoch=st.integers(min_value=0, max_value=3),
)
def test_property_every_task_each_epoch_padding_below_batch(n, batch_size, seed, epoch):
    ids = [f"t{i}" for i in range(n)]
    plan = fd.plan_epoch(ids, batch_size, seed=seed, epoch=epoch)
    exposures = Counter(task for batch in plan.batches for task in batch)
    assert set(exposures) == set(ids)
    assert all(len(batch) == batch_size for batch in plan.batches)
    assert plan.repeated_exposures == len(plan.batches) * batch_size - n
    assert 0 <= plan.repeated_exposures <= batch_size - 1
    assert plan == fd.plan_epoch(list(reversed(ids)), batch_size, seed=seed, epoch=epoch)


def test_validation_subset_21_of_42(tmp_path, capsys):
    subset = fd.choose_validation_subset(VALIDATION, 21, seed=0, train_ids=TRAIN, run_dir=tmp_path)
    assert capsys.readouterr().out.strip() == (
        "TRAIN_VALIDATION_SUBSET_GATE_PASSED tasks=21 full_validation=42 train=187"
    )
    assert len(set(subset.task_ids)) == 21 and set(subset.task_ids) <= set(VALIDATION)
    contract = subset.contract(fd.GREEDY_DECODING)
    assert contract["task_ids"] == list(subset.task_ids) and contract["sha256"] == subset.sha256
    assert contract["decoding"] == {"temperature": 0.0, "top_p": 1.0, "n": 1}
    sent = {"temperature": 0.0, "top_p": 1.0, "seed": 7, "n": 1}  # what a run's agent sends
    assert subset.contract(sent)["decoding"] == sent  # the contract records it, not a literal


@given(seed=st.integers(min_value=0, max_value=2**32), k=st.integers(min_value=1, max_value=42))
def test_property_validation_subset_stable_for_a_seed(seed, k):
    one = fd.choose_validation_subset(VALIDATION, k, seed=seed)
    two = fd.choose_validation_subset(list(reversed(VALIDATION)), k, seed=seed)
    assert one == two
    assert one.sha256 == sha256_canonical(list(one.task_ids))


def test_validation_subset_rules():
    with pytest.raises(GateError) as error:
        fd.choose_validation_subset(["a", "a", "b"], 5, train_ids=["b"])
    assert {v.rule for v in error.value.violations} == {
        "validation.unique",
        "validation.k",
        "validation.disjoint",
    }


def test_schedule_for_the_formal_run():
    schedule = fd.plan_schedule(24, test_freq=10, save_freq=10)
    assert schedule.validation_steps == (0, 10, 20, 24)
    assert schedule.save_steps == (10, 20, 24)
    assert fd.plan_schedule(24, test_freq=10, save_freq=5).save_steps == (5, 10, 15, 20, 24)


def test_schedule_rules():
    with pytest.raises(GateError, match="schedule.checkpointed_validation"):
        fd.plan_schedule(24, test_freq=5, save_freq=10)
    with pytest.raises(GateError) as error:
        fd.plan_schedule(0, test_freq=0, save_freq=-1, validate_before_train=False)
    assert len(error.value.violations) == 4


def test_coverage_left_to_the_trainer(tmp_path, capsys):
    plan = fd.plan_training(TRAIN, 8, epochs=2, seed=0, run_dir=tmp_path, record_coverage=False)
    assert [r.gate for r in read_ledger(tmp_path)] == ["TRAIN_FULL_DATASET_GATE_PASSED"]
    assert "TRAIN_EPOCH_COVERAGE" not in capsys.readouterr().out
    assert fd.epoch_coverage(plan.epochs[1].batches) == {
        "exposures": 192,
        "unique_tasks": 187,
        "repeated_exposures": 5,
    }
    assert fd.epoch_coverage([["a", "b"], ["a"]]) == {
        "exposures": 3,
        "unique_tasks": 2,
        "repeated_exposures": 1,
    }
