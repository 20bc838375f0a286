"""Split planning: which eligible task goes to which split. Pure, no I/O.

Rules (each broken one is a named violation; nothing is frozen while any remains, except
shortages under `allow_shortage`):

* eligible = accepted by the oracle (when verdicts are given: a verdict that carries another
  fingerprint judged an earlier version of the task and counts as none), with a repository,
  unique id;
* at most `per_repo_cap` tasks per repository (which ones: seeded order of their ids);
* a repository lands in exactly one split (repository isolation);
* every split meets its target and at least `min_repositories` repositories are used, or the
  shortfall is reported (refused unless `allow_shortage`).

Deterministic for any input order: every ordering comes from sorted ids and seeded SHA-256 keys.
Assignment: repositories, largest first (ties: seeded key), go to the split with the largest
remaining fraction of its target among those they fit without waste (else the largest remaining
fraction) until every split has the capacity for its target; then further repositories join the
split with the most tasks per repository until `min_repositories` are in (a repository joins a
split only while that split has fewer repositories than tasks). Each split is then filled
round-robin over its repositories, one task per repository per round, so tasks spread evenly.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forge_data._errors import violation
from forge_data.curation._verdicts import Verdict
from forge_data.tasks._models import SPLITS, SplitName, Task
from forge_gates import Violation


class SplitTargets(BaseModel):
    """How many tasks each split should hold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    train: int = Field(ge=0, description="Target number of training tasks.")
    validation: int = Field(ge=0, description="Target number of validation tasks.")
    test: int = Field(ge=0, description="Target number of test tasks.")

    def of(self, split: SplitName) -> int:
        return int(getattr(self, split))


class FreezeSpec(BaseModel):
    """Everything that decides a freeze besides the candidates themselves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="split", description="Name of the frozen split set (not blank).")
    targets: SplitTargets = Field(description="Tasks per split, e.g. 187/42/38.")
    per_repo_cap: int = Field(default=20, description="Most tasks from one repository (>= 1).")
    min_repositories: int = Field(default=0, ge=0, description="Fewest repositories over splits.")
    allow_shortage: bool = Field(
        default=False, description="Freeze what there is when targets cannot be met (recorded)."
    )
    seed: int = Field(default=0, description="Seed of every tie-break and within-repo choice.")

    @field_validator("name")
    @classmethod
    def _named(cls, name: str) -> str:
        if not name.strip():
            raise ValueError(
                f"FreezeSpec.name: expected the split set's name (not blank: it names the "
                f"manifest); found {name!r}; fix: name the set, e.g. 'split'"
            )
        return name

    @field_validator("per_repo_cap")
    @classmethod
    def _capped(cls, cap: int) -> int:
        if cap < 1:
            raise ValueError(
                f"FreezeSpec.per_repo_cap: expected >= 1 task per repository; found {cap} (no "
                "repository could give a task: every split would be empty); fix: the most tasks "
                "one repository may give, e.g. 20"
            )
        return cap


class Shortfall(BaseModel):
    """How far a freeze falls short of its spec (all zero when the targets are met)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    train: int = Field(default=0, ge=0, description="Training tasks missing.")
    validation: int = Field(default=0, ge=0, description="Validation tasks missing.")
    test: int = Field(default=0, ge=0, description="Test tasks missing.")
    repositories: int = Field(default=0, ge=0, description="Repositories missing.")

    @property
    def any(self) -> bool:
        return bool(self.train or self.validation or self.test or self.repositories)


class CandidateStats(BaseModel):
    """What happened to the candidates on the way into the splits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int = Field(description="Candidate records given (duplicates included).")
    eligible: int = Field(description="Unique tasks allowed into a split.")
    excluded: dict[str, int] = Field(description="Tasks kept out, by named reason.")
    dropped_by_cap: int = Field(description="Eligible tasks left out by the per-repository cap.")
    unused: int = Field(description="Eligible tasks under the cap that no split needed.")


class FreezePlan(BaseModel):
    """The outcome of planning: the splits, the shortfall and every violated rule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: FreezeSpec = Field(description="The spec planned for.")
    splits: dict[SplitName, tuple[str, ...]] = Field(description="Task ids per split, sorted.")
    repositories: dict[str, SplitName] = Field(description="The split of every used repository.")
    shortfall: Shortfall = Field(description="What is missing against the spec.")
    candidates: CandidateStats = Field(description="Candidate accounting.")
    violations: tuple[Violation, ...] = Field(description="Broken rules (shortages included).")

    @property
    def ready(self) -> bool:
        """True when the spec is met in full: nothing missing, nothing violated."""
        return not self.violations


def seeded_key(seed: int, value: str) -> str:
    """A stable pseudo-random sort key of `value` under `seed` (SHA-256 hex)."""
    return hashlib.sha256(f"{seed}\x00{value}".encode()).hexdigest()


def _eligible(
    tasks: Iterable[Task], verdicts: Mapping[str, Verdict] | None
) -> tuple[dict[str, Task], dict[str, int], list[Violation], int]:
    by_id: dict[str, Task] = {}
    conflicts: set[str] = set()
    total = 0
    for task in tasks:
        total += 1
        seen = by_id.get(task.id)
        if seen is not None and seen.fingerprint != task.fingerprint:
            conflicts.add(task.id)
        by_id.setdefault(task.id, task)
    excluded: dict[str, int] = defaultdict(int)
    problems = [
        violation(
            "candidates.duplicate_id",
            expected="one content per task id",
            found=f"task {task_id} appears with different fingerprints",
            fix="remove or rename one of the records",
        )
        for task_id in sorted(conflicts)
    ]
    eligible: dict[str, Task] = {}
    for task_id in sorted(by_id):
        task = by_id[task_id]
        verdict = None if verdicts is None else verdicts.get(task_id)
        if task_id in conflicts:
            excluded["conflicting_duplicate_id"] += 1
        elif not task.repository:
            excluded["missing_repository"] += 1
        elif verdicts is not None and verdict is None:
            excluded["no_verdict"] += 1
        elif verdict is not None and not verdict.applies_to(task.fingerprint):
            excluded["stale_verdict"] += 1  # judged before the task was edited
        elif verdict is not None and verdict.verdict != "accepted":
            excluded[verdict.verdict] += 1
        else:
            eligible[task_id] = task
    return eligible, dict(sorted(excluded.items())), problems, total


def _assign_repositories(
    order: list[str], sizes: dict[str, int], spec: FreezeSpec
) -> dict[SplitName, list[str]]:
    """Repositories per split: first enough capacity for every target, then more repositories
    (where each can still add a task) until `min_repositories`."""
    # 1. capacity: best fit by the remaining fraction of each split's target
    need = {s: spec.targets.of(s) for s in SPLITS}
    members: dict[SplitName, list[str]] = {s: [] for s in SPLITS}
    rest: list[str] = []
    for repo in order:
        open_splits = [s for s in SPLITS if need[s] > 0]
        if not open_splits:
            rest.append(repo)
            continue
        pool = [s for s in open_splits if sizes[repo] <= need[s]] or open_splits
        split = max(pool, key=lambda s: (need[s] / spec.targets.of(s), -SPLITS.index(s)))
        members[split].append(repo)
        need[split] -= sizes[repo]
    # 2. diversity: add repositories to the split with the most tasks per repository
    for repo in rest:
        if sum(len(m) for m in members.values()) >= spec.min_repositories:
            break
        room = [s for s in SPLITS if len(members[s]) < spec.targets.of(s)]
        if not room:
            break
        split = max(
            room, key=lambda s: (spec.targets.of(s) / (len(members[s]) + 1), -SPLITS.index(s))
        )
        members[split].append(repo)
    return members


def plan_freeze(
    tasks: Iterable[Task], spec: FreezeSpec, *, verdicts: Mapping[str, Verdict] | None = None
) -> FreezePlan:
    """Plan the splits for `spec` from candidate tasks (accepted ones only when `verdicts`)."""
    # 1. eligible tasks, by repository, each repository capped (seeded order of ids)
    eligible, excluded, problems, total = _eligible(tasks, verdicts)
    by_repo: dict[str, list[str]] = defaultdict(list)
    for task_id, task in eligible.items():
        by_repo[task.repository].append(task_id)
    dropped = 0
    for ids in by_repo.values():
        ids.sort(key=lambda i: seeded_key(spec.seed, i))
        dropped += max(0, len(ids) - spec.per_repo_cap)
        del ids[spec.per_repo_cap :]
    # 2. repositories, largest first, ties by seeded key
    order = sorted(by_repo, key=lambda r: (-len(by_repo[r]), seeded_key(spec.seed, r)))
    members = _assign_repositories(order, {r: len(ids) for r, ids in by_repo.items()}, spec)
    # 3. fill each split round-robin over its repositories: one task per repository per round
    chosen: dict[SplitName, list[str]] = {s: [] for s in SPLITS}
    placed: dict[str, SplitName] = {}
    for split in SPLITS:
        target, picked = spec.targets.of(split), chosen[split]
        for depth in range(spec.per_repo_cap):
            for repo in members[split]:
                if len(picked) < target and depth < len(by_repo[repo]):
                    picked.append(by_repo[repo][depth])
                    placed[repo] = split
    need = {s: spec.targets.of(s) - len(chosen[s]) for s in SPLITS}
    # 4. shortfall against the spec
    shortfall = Shortfall(**need, repositories=max(0, spec.min_repositories - len(placed)))
    for split in SPLITS:
        if need[split]:
            problems.append(
                violation(
                    f"freeze.shortage.{split}",
                    expected=f"{spec.targets.of(split)} {split} tasks",
                    found=f"{len(chosen[split])} ({need[split]} short)",
                    fix="validate more candidates (oracle-plan), lower the target, or "
                    "--allow-shortage",
                )
            )
    if shortfall.repositories:
        problems.append(
            violation(
                "freeze.min_repositories",
                expected=f">= {spec.min_repositories} repositories",
                found=f"{len(placed)} ({shortfall.repositories} short)",
                fix="add candidates from more repositories, lower --min-repositories, "
                "or --allow-shortage",
            )
        )
    used = sum(len(ids) for ids in chosen.values())
    return FreezePlan(
        spec=spec,
        splits={s: tuple(sorted(chosen[s])) for s in SPLITS},
        repositories=dict(sorted(placed.items())),
        shortfall=shortfall,
        candidates=CandidateStats(
            total=total,
            eligible=len(eligible),
            excluded=excluded,
            dropped_by_cap=dropped,
            unused=len(eligible) - dropped - used,
        ),
        violations=tuple(problems),
    )
