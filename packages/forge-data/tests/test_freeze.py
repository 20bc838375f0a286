"""Freeze: isolation, caps, shortage rules, the ready gate, determinism under permutation,
and the never-overwrite rule."""

from __future__ import annotations

import hashlib
import json
import os
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import forge_data as fd
from forge_gates import GateError, read_ledger


def make(task_id: str, repo: str) -> fd.Task:
    digest = hashlib.sha256(f"{task_id}|{repo}".encode()).hexdigest()
    return fd.Task(
        id=task_id,
        repository=repo,
        source="swe-smith",
        instruction="Fix it.",
        fail_to_pass=("t",),
        fingerprint=digest,
    )


def pool(sizes: list[int]) -> list[fd.Task]:
    return [make(f"r{r}-t{i}", f"org/r{r}") for r, size in enumerate(sizes) for i in range(size)]


def spec(train=6, validation=3, test=3, **kw) -> fd.FreezeSpec:
    return fd.FreezeSpec(
        targets=fd.SplitTargets(train=train, validation=validation, test=test), **kw
    )


def accepted(tasks, kind="accepted"):
    return {
        t.id: fd.Verdict(
            task_id=t.id, verdict=kind, reason="", nop_rewards=(0.0,), oracle_rewards=(1.0,)
        )
        for t in tasks
    }


def test_production_shape_187_42_38_from_89_repositories():
    rng = random.Random(7)
    tasks = pool([rng.randint(1, 25) for _ in range(89)])
    plan = fd.plan_freeze(tasks, spec(187, 42, 38, per_repo_cap=20, min_repositories=89))
    assert plan.ready, plan.violations
    assert len(plan.repositories) == 89
    assert {s: len(ids) for s, ids in plan.splits.items()} == {
        "train": 187,
        "validation": 42,
        "test": 38,
    }


def test_shortage_is_refused_by_default_and_recorded_when_allowed(tmp_path):
    tasks = pool([2, 2])
    with pytest.raises(GateError) as error:
        fd.freeze(tasks, spec(min_repositories=5), tmp_path / "a")
    rules = [v.rule for v in error.value.violations]
    assert "freeze.shortage.train" in rules and "freeze.min_repositories" in rules
    assert not (tmp_path / "a").exists()
    manifest = fd.freeze(tasks, spec(min_repositories=5, allow_shortage=True), tmp_path / "b")
    assert manifest.shortfall.train > 0 and manifest.shortfall.repositories == 3
    assert fd.verify_frozen(tmp_path / "b") == []


def test_freeze_check_records_ready_only_when_met(tmp_path, capsys):
    tasks = pool([2, 2, 2, 2, 2, 1, 1])
    fd.freeze_check(tasks, spec(min_repositories=7), run_dir=tmp_path)
    assert "BULK_ORACLE_FREEZE_READY train=6 validation=3 test=3" in capsys.readouterr().out
    with pytest.raises(GateError):
        fd.freeze_check(tasks, spec(train=20, allow_shortage=True), run_dir=tmp_path)
    gates = [r.gate for r in read_ledger(tmp_path)]
    assert gates == ["BULK_ORACLE_FREEZE_READY", "BULK_ORACLE_FREEZE_READY_FAILED"]


def test_only_accepted_tasks_are_frozen():
    tasks = pool([3, 3, 3])
    verdicts = accepted(tasks[:3]) | accepted(tasks[3:5], "rejected_nop_passes")
    verdicts |= accepted(tasks[5:6], "infrastructure")
    plan = fd.plan_freeze(tasks, spec(1, 1, 1), verdicts=verdicts)
    assert plan.candidates.excluded == {
        "infrastructure": 1,
        "no_verdict": 3,
        "rejected_nop_passes": 2,
    }
    frozen = {i for ids in plan.splits.values() for i in ids}
    assert frozen <= {t.id for t in tasks[:3]}


def test_conflicting_duplicate_ids_always_refused(tmp_path):
    tasks = pool([3, 3, 3])
    clash = make(tasks[0].id, "org/other")
    with pytest.raises(GateError, match="candidates.duplicate_id"):
        fd.freeze([*tasks, clash], spec(1, 1, 1, allow_shortage=True), tmp_path / "x")


def test_an_existing_folder_is_never_overwritten(tmp_path):
    tasks = pool([2, 2, 2, 2, 2, 1, 1])
    out = tmp_path / "split"
    first = fd.freeze(tasks, spec(), out)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(fd.DataError, match="never changed"):
        fd.freeze(tasks, spec(seed=1), out)
    assert (out / "manifest.json").read_bytes() == before
    assert json.loads(before)["sha256"] == first.sha256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["split"]  # no staging left over


def test_a_killed_freezes_staging_is_swept_and_modes_are_readable(tmp_path):
    import subprocess
    import sys

    done = subprocess.Popen([sys.executable, "-c", ""])
    done.wait()  # a pid that no longer runs: the freeze that was killed
    stale = tmp_path / f".split.staging-{done.pid}-0a1b2c3d"
    stale.mkdir()
    (stale / "train.jsonl").write_text("partial")
    previous = os.umask(0o077)
    try:
        fd.freeze(pool([2, 2, 2, 2, 2, 1, 1]), spec(), tmp_path / "split")
    finally:
        os.umask(previous)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["split"]
    out = tmp_path / "split"
    assert out.stat().st_mode & 0o777 == 0o755
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o644}


def test_manifest_hash_ignores_time_and_tracks_content(tmp_path):
    tasks = pool([2, 2, 2, 2, 2, 1, 1])
    a = fd.freeze(tasks, spec(), tmp_path / "a")
    b = fd.freeze(tasks, spec(), tmp_path / "b")
    c = fd.freeze(tasks, spec(seed=3), tmp_path / "c")
    assert a.sha256 == b.sha256
    assert c.sha256 != a.sha256  # the spec (seed) is part of the hashed content


repo_sizes = st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=14)
targets = st.tuples(*[st.integers(min_value=0, max_value=12)] * 3)


@given(
    sizes=repo_sizes,
    target=targets,
    cap=st.integers(min_value=1, max_value=6),
    seed=st.integers(min_value=0, max_value=3),
)
def test_property_isolation_and_caps_hold(sizes, target, cap, seed):
    plan = fd.plan_freeze(pool(sizes), spec(*target, per_repo_cap=cap, seed=seed))
    repo_of = {t.id: t.repository for t in pool(sizes)}
    seen: dict[str, str] = {}
    for split, ids in plan.splits.items():
        assert len(ids) <= getattr(plan.spec.targets, split)
        for task_id in ids:
            assert seen.setdefault(repo_of[task_id], split) == split  # one split per repository
    per_repo: dict[str, int] = {}
    for ids in plan.splits.values():
        for task_id in ids:
            per_repo[repo_of[task_id]] = per_repo.get(repo_of[task_id], 0) + 1
    assert all(n <= cap for n in per_repo.values())
    assert plan.ready == (not plan.shortfall.any)


@given(
    sizes=repo_sizes,
    target=targets,
    seed=st.integers(min_value=0, max_value=3),
    shuffle_seed=st.integers(),
)
def test_property_freeze_identical_under_input_permutation(sizes, target, seed, shuffle_seed):
    tasks = pool(sizes)
    shuffled = list(tasks)
    random.Random(shuffle_seed).shuffle(shuffled)
    one = fd.plan_freeze(tasks, spec(*target, per_repo_cap=3, seed=seed))
    two = fd.plan_freeze(shuffled + shuffled[:2], spec(*target, per_repo_cap=3, seed=seed))
    assert one.splits == two.splits and one.repositories == two.repositories
    assert one.shortfall == two.shortfall


def test_written_manifest_identical_under_input_permutation(tmp_path):
    tasks = pool([5, 4, 3, 3, 2, 2, 1, 1, 1])
    shuffled = list(reversed(tasks))
    a = fd.freeze(tasks, spec(7, 4, 3, per_repo_cap=3), tmp_path / "a", verdicts=accepted(tasks))
    b = fd.freeze(
        shuffled,
        spec(7, 4, 3, per_repo_cap=3),
        tmp_path / "b",
        verdicts=dict(reversed(list(accepted(tasks).items()))),
    )
    assert a.sha256 == b.sha256
    for split in fd.SPLITS:
        assert (tmp_path / "a" / f"{split}.jsonl").read_bytes() == (
            tmp_path / "b" / f"{split}.jsonl"
        ).read_bytes()
