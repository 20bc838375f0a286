"""Freeze's documented assignment policy, pinned: best fit by the remaining fraction of each
target, ties to the earlier split, diversity additions, the seeded order of repositories and of
ids under the cap, round-robin filling; the CandidateStats counts and every violation's text.

The reference below re-states the module docstring of `forge_data.freeze._freeze` with plain loops
(no max-with-key), independently of the implementation."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

import forge_data as fd

SPLITS = ("train", "validation", "test")


def key(seed: int, value: str) -> str:
    """The documented seeded key: SHA-256 of "<seed>\\0<value>"."""
    return hashlib.sha256(f"{seed}\x00{value}".encode()).hexdigest()


def make(task_id: str, repo: str, fingerprint: str | None = None) -> fd.Task:
    digest = fingerprint or hashlib.sha256(f"{task_id}|{repo}".encode()).hexdigest()
    return fd.Task(
        id=task_id,
        repository=repo,
        source="swe-smith",
        instruction="Fix it.",
        fail_to_pass=("t",),
        fingerprint=digest,
    )


def pool(sizes: dict[str, int]) -> list[fd.Task]:
    return [make(f"{repo}-{i}", repo) for repo, size in sizes.items() for i in range(size)]


def spec(train, validation, test, **kw) -> fd.FreezeSpec:
    targets = fd.SplitTargets(train=train, validation=validation, test=test)
    return fd.FreezeSpec(targets=targets, **kw)


def repos_by_split(plan: fd.FreezePlan) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {s: set() for s in SPLITS}
    for repo, split in plan.repositories.items():
        out[split].add(repo)
    return out


# ------------------------------------------------------------------ the reference
def reference_plan(sizes: dict[str, int], targets: dict[str, int], cap: int, min_repos: int,
                   seed: int) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:  # fmt: skip
    """(task ids per split, split of every used repository), from the docstring's rules."""
    ids = {r: sorted((f"{r}-{i}" for i in range(n)), key=lambda i: key(seed, i))[:cap]
           for r, n in sizes.items()}  # fmt: skip
    order = sorted(ids, key=lambda r: (-len(ids[r]), key(seed, r)))
    need = dict(targets)
    members: dict[str, list[str]] = {s: [] for s in SPLITS}
    rest = []
    for repo in order:  # 1. capacity: best fit by the remaining fraction of the target
        open_splits = [s for s in SPLITS if need[s] > 0]
        if not open_splits:
            rest.append(repo)
            continue
        fits = [s for s in open_splits if len(ids[repo]) <= need[s]]
        candidates = fits if fits else open_splits
        best = candidates[0]
        for s in candidates[1:]:  # strictly larger wins: ties stay with the earlier split
            if need[s] / targets[s] > need[best] / targets[best]:
                best = s
        members[best].append(repo)
        need[best] -= len(ids[repo])
    for repo in rest:  # 2. diversity: most tasks per repository, while a split has room
        if sum(len(m) for m in members.values()) >= min_repos:
            break
        room = [s for s in SPLITS if len(members[s]) < targets[s]]
        if not room:
            break
        best = room[0]
        for s in room[1:]:
            if targets[s] / (len(members[s]) + 1) > targets[best] / (len(members[best]) + 1):
                best = s
        members[best].append(repo)
    chosen: dict[str, list[str]] = {s: [] for s in SPLITS}
    placed: dict[str, str] = {}
    for s in SPLITS:  # 3. round robin: one task per repository per round
        depth = 0
        while len(chosen[s]) < targets[s] and any(depth < len(ids[r]) for r in members[s]):
            for repo in members[s]:
                if len(chosen[s]) < targets[s] and depth < len(ids[repo]):
                    chosen[s].append(ids[repo][depth])
                    placed[repo] = s
            depth += 1
    return {s: tuple(sorted(chosen[s])) for s in SPLITS}, dict(sorted(placed.items()))


@given(
    sizes=st.lists(st.integers(1, 7), min_size=1, max_size=12),
    targets=st.tuples(st.integers(0, 14), st.integers(0, 8), st.integers(0, 8)),
    cap=st.integers(1, 5),
    min_repos=st.integers(0, 12),
    seed=st.integers(0, 5),
)
def test_plan_equals_the_documented_policy(sizes, targets, cap, min_repos, seed):
    by_repo = {f"org/r{i}": n for i, n in enumerate(sizes)}
    wanted = dict(zip(SPLITS, targets, strict=True))
    plan = fd.plan_freeze(
        pool(by_repo), spec(*targets, per_repo_cap=cap, min_repositories=min_repos, seed=seed)
    )
    splits, placed = reference_plan(by_repo, wanted, cap, min_repos, seed)
    assert plan.splits == splits
    assert plan.repositories == placed
    used = sum(len(ids) for ids in splits.values())
    capped = sum(min(n, cap) for n in sizes)
    assert plan.candidates.dropped_by_cap == sum(sizes) - capped
    assert plan.candidates.unused == capped - used
    assert plan.shortfall.repositories == max(0, min_repos - len(placed))
    for s in SPLITS:
        assert getattr(plan.shortfall, s) == wanted[s] - len(splits[s])


# ------------------------------------------------------------------ hand cases
def test_a_repository_goes_where_it_fits_exactly_before_the_larger_fraction():
    # A (3) -> train (does not fit validation); B (2) fits train (need 3 of 6, fraction 0.5)
    # and validation exactly (need 2 of 2, fraction 1.0): validation; C (3) -> train
    plan = fd.plan_freeze(pool({"A": 3, "B": 2, "C": 3}), spec(6, 2, 0))
    assert repos_by_split(plan) == {"train": {"A", "C"}, "validation": {"B"}, "test": set()}
    assert plan.ready


def test_without_an_exact_fit_the_largest_remaining_fraction_wins():
    # A (5) -> train (fits 6, not 3); B (4) then fits nowhere: train needs 1 of 6 (0.17),
    # validation 3 of 3 (1.0) -> validation, which takes 3 of B's 4 tasks
    plan = fd.plan_freeze(pool({"A": 5, "B": 4}), spec(6, 3, 0, allow_shortage=True))
    assert repos_by_split(plan) == {"train": {"A"}, "validation": {"B"}, "test": set()}
    assert len(plan.splits["validation"]) == 3 and plan.shortfall.train == 1


def test_fraction_not_absolute_need_decides():
    # after A (5) -> train: train needs 5 of 10 (0.5), validation 3 of 3 (1.0); B (3) fits both
    # exactly: validation by fraction (train by absolute need would be the other answer)
    plan = fd.plan_freeze(pool({"A": 5, "B": 3, "C": 5}), spec(10, 3, 0))
    assert repos_by_split(plan) == {"train": {"A", "C"}, "validation": {"B"}, "test": set()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equal_fractions_go_to_the_earlier_split_in_seeded_order(seed):
    repos = ["X", "Y", "Z"]
    plan = fd.plan_freeze(pool(dict.fromkeys(repos, 2)), spec(2, 2, 2, seed=seed))
    order = sorted(repos, key=lambda r: key(seed, r))
    assert plan.repositories == {order[0]: "train", order[1]: "validation", order[2]: "test"}


def test_diversity_adds_repositories_where_a_repository_would_carry_most_tasks():
    # capacity: A (4) -> train, then two of the five 1-task repositories -> validation, test;
    # min_repositories 5: two more join train (4 / 2 tasks per repository beats 1 / 2)
    small = ["B", "C", "D", "E", "F"]
    plan = fd.plan_freeze(
        pool({"A": 4} | dict.fromkeys(small, 1)), spec(4, 1, 1, min_repositories=5)
    )
    order = sorted(small, key=lambda r: key(0, r))
    assert plan.repositories == {
        "A": "train",
        order[0]: "validation",
        order[1]: "test",
        order[2]: "train",
        order[3]: "train",
    }
    # round robin: A, then each added repository, then A again
    assert plan.splits["train"] == tuple(
        sorted([f"{order[2]}-0", f"{order[3]}-0", *first_ids("A", 4, 2)])
    )
    assert plan.ready
    assert plan.candidates.unused == 3  # two of A's tasks and the last small repository's
    assert plan.candidates.dropped_by_cap == 0


def first_ids(repo: str, size: int, n: int, seed: int = 0) -> list[str]:
    return sorted((f"{repo}-{i}" for i in range(size)), key=lambda i: key(seed, i))[:n]


def test_diversity_never_gives_a_split_more_repositories_than_tasks():
    # every split holds as many repositories as its target: nothing more can join
    plan = fd.plan_freeze(
        pool({"A": 2, "B": 1, "C": 1, "D": 1, "E": 1}), spec(2, 1, 1, min_repositories=5)
    )
    assert len(plan.repositories) == 4
    assert plan.shortfall.repositories == 1
    assert [v.rule for v in plan.violations] == ["freeze.min_repositories"]


def test_the_cap_keeps_the_first_ids_in_seeded_order():
    plan = fd.plan_freeze(pool({"A": 6}), spec(3, 0, 0, per_repo_cap=3, seed=4))
    assert plan.splits["train"] == tuple(sorted(first_ids("A", 6, 3, seed=4)))
    assert plan.candidates.dropped_by_cap == 3 and plan.candidates.unused == 0


def test_repositories_of_equal_size_are_taken_in_seeded_order():
    # only one of the three 2-task repositories is needed: the first by seeded key
    for seed in range(4):
        plan = fd.plan_freeze(pool({"P": 2, "Q": 2, "R": 2}), spec(2, 0, 0, seed=seed))
        assert list(plan.repositories) == [min("PQR", key=lambda r: key(seed, r))]


# ------------------------------------------------------------------ candidate accounting
def test_candidate_stats_count_every_record_and_reason():
    tasks = pool({"A": 3, "B": 2})
    duplicate = tasks[0]  # the same record twice is one task
    clash = make("B-0", "B", fingerprint="0" * 64)  # same id, other content
    no_repo = make("loose", "")
    plan = fd.plan_freeze([*tasks, duplicate, clash, no_repo], spec(2, 1, 0, per_repo_cap=2))
    assert plan.candidates == fd.CandidateStats(
        total=8,
        eligible=4,  # A-0..A-2, B-1 (B-0 conflicts, loose has no repository)
        excluded={"conflicting_duplicate_id": 1, "missing_repository": 1},
        dropped_by_cap=1,  # A keeps 2 of 3
        unused=0,
    )
    assert [v.model_dump() for v in plan.violations] == [
        {
            "rule": "candidates.duplicate_id",
            "expected": "one content per task id",
            "found": "task B-0 appears with different fingerprints",
            "fix": "remove or rename one of the records",
        }
    ]


def test_every_conflicting_id_is_excluded_and_reported():
    tasks = pool({"A": 3})
    clashes = [make("A-0", "A", fingerprint="0" * 64), make("A-2", "A", fingerprint="1" * 64)]
    plan = fd.plan_freeze([*tasks, *clashes], spec(1, 0, 0))
    assert plan.candidates.excluded == {"conflicting_duplicate_id": 2}
    assert plan.candidates.total == 5 and plan.candidates.eligible == 1
    assert [v.found for v in plan.violations] == [
        "task A-0 appears with different fingerprints",
        "task A-2 appears with different fingerprints",
    ]


def test_each_exclusion_is_counted_once_per_task():
    tasks = [make(f"n{i}", "") for i in range(3)] + pool({"A": 1})
    plan = fd.plan_freeze(tasks, spec(1, 0, 0))
    assert plan.candidates.excluded == {"missing_repository": 3}
    assert plan.candidates.total == 4 and plan.candidates.eligible == 1


def test_unused_counts_eligible_tasks_no_split_needed():
    # capped at 3: A 3 (1 dropped), B 3, C 1. The first 3-task repository fills train to 3,
    # the second fits nowhere and takes validation (fraction 1.0 vs 0.25), C completes train
    plan = fd.plan_freeze(pool({"A": 4, "B": 3, "C": 1}), spec(4, 1, 0, per_repo_cap=3))
    first, second = sorted("AB", key=lambda r: key(0, r))
    assert plan.repositories == {first: "train", second: "validation", "C": "train"}
    assert plan.candidates.dropped_by_cap == 1
    assert plan.candidates.unused == 2  # 7 capped tasks, 5 used
    assert plan.ready


# ------------------------------------------------------------------ violation texts
def test_shortage_and_repository_violations_carry_the_numbers():
    plan = fd.plan_freeze(pool({"A": 2, "B": 1}), spec(3, 1, 1, min_repositories=4))
    assert [v.model_dump() for v in plan.violations] == [
        {
            "rule": "freeze.shortage.train",
            "expected": "3 train tasks",
            "found": "2 (1 short)",
            "fix": "validate more candidates (oracle-plan), lower the target, or --allow-shortage",
        },
        {
            "rule": "freeze.shortage.test",
            "expected": "1 test tasks",
            "found": "0 (1 short)",
            "fix": "validate more candidates (oracle-plan), lower the target, or --allow-shortage",
        },
        {
            "rule": "freeze.min_repositories",
            "expected": ">= 4 repositories",
            "found": "2 (2 short)",
            "fix": "add candidates from more repositories, lower --min-repositories, "
            "or --allow-shortage",
        },
    ]
    assert plan.shortfall == fd.Shortfall(train=1, test=1, repositories=2)
    assert not plan.ready


@pytest.mark.parametrize("cap", [0, -3])
def test_a_per_repository_cap_below_one_is_refused(cap) -> None:
    with pytest.raises(ValidationError) as info:
        spec(1, 0, 0, per_repo_cap=cap)
    assert info.value.errors()[0]["msg"] == (
        f"Value error, FreezeSpec.per_repo_cap: expected >= 1 task per repository; found {cap} "
        "(no repository could give a task: every split would be empty); fix: the most tasks one "
        "repository may give, e.g. 20"
    )
    assert spec(1, 0, 0, per_repo_cap=1).per_repo_cap == 1
    assert spec(1, 0, 0).per_repo_cap == 20


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_a_blank_split_set_name_is_refused(name) -> None:
    with pytest.raises(ValidationError) as info:
        spec(1, 0, 0, name=name)
    assert info.value.errors()[0]["msg"] == (
        "Value error, FreezeSpec.name: expected the split set's name (not blank: it names the "
        f"manifest); found {name!r}; fix: name the set, e.g. 'split'"
    )
    assert spec(1, 0, 0, name="x").name == "x"
    assert spec(1, 0, 0).name == "split"


def test_a_verdict_recorded_for_other_content_is_stale() -> None:
    tasks = pool({"A": 2, "B": 2})

    def verdict(task: fd.Task, fingerprint: str | None) -> fd.Verdict:
        return fd.Verdict(
            task_id=task.id,
            verdict="accepted",
            reason="",
            nop_rewards=(0.0,),
            oracle_rewards=(1.0,),
            fingerprint=fingerprint,
        )

    verdicts = {
        "A-0": verdict(tasks[0], tasks[0].fingerprint),  # this content: counts
        "A-1": verdict(tasks[1], None),  # recorded without one: counts
        "B-0": verdict(tasks[2], "0" * 64),  # judged before the task was edited
        "B-1": verdict(tasks[3], "1" * 64),
    }
    plan = fd.plan_freeze(tasks, spec(2, 0, 0, allow_shortage=True), verdicts=verdicts)
    assert plan.candidates.excluded == {"stale_verdict": 2}
    assert plan.candidates.eligible == 2 and plan.splits["train"] == ("A-0", "A-1")
