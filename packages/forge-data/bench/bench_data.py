"""forge-data benchmark: freeze 60,000 synthetic candidates over 3,000 repositories.

`run()` returns a JSON-serialisable dict for `nox -s bench`::

    {"freeze_60k": {"seconds": 2.1, "candidates": 60000, "repositories": 3000,
                    "reference_seconds": 0.9, "ratio": 2.3, ...},
     "targets": [{"name": "freeze_60k_over_read_sort", "measured": 2.3, "op": "<=",
                  "threshold": 5.0, "unit": "x"}]}

`seconds` covers the whole freeze: the oracle filter (90% accepted), per-repository caps,
repository-isolated assignment, the manifest with its semantic hash, and writing the folder
(manifest + one JSONL per split, atomically). The reference, measured in the same process, is
the least any freeze must do: read the 60,000 candidate records back from JSONL and sort them
by id; the target is `ratio = seconds / reference_seconds` <= TARGET_RATIO (issue 37: no
absolute time is judged on a shared machine; the seconds are reported beside it; the old
"< 5 s" was 6.7x this machine's reference).
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
import time
from pathlib import Path

import forge_data as fd

CANDIDATES = 60_000
REPOSITORIES = 3_000
TARGET_RATIO = 5.0
SPEC = fd.FreezeSpec(
    name="bench-60k",
    targets=fd.SplitTargets(train=28_000, validation=6_000, test=6_000),
    per_repo_cap=20,
    min_repositories=2_500,
    seed=0,
)


def synthetic_candidates(seed: int = 0) -> tuple[list[fd.Task], dict[str, fd.Verdict]]:
    """60,000 tasks over 3,000 repositories of uneven size (1..39), 90% accepted."""
    rng = random.Random(seed)
    sizes = [CANDIDATES // REPOSITORIES] * REPOSITORIES
    for i in range(0, REPOSITORIES, 2):  # uneven sizes, same total
        shift = rng.randint(0, 19)
        sizes[i] += shift
        sizes[i + 1] -= shift
    tasks: list[fd.Task] = []
    verdicts: dict[str, fd.Verdict] = {}
    for r, size in enumerate(sizes):
        for i in range(size):
            task_id = f"org{r % 97}__repo{r:04d}.{i:03d}"
            tasks.append(
                fd.Task(
                    id=task_id,
                    repository=f"org{r % 97}/repo{r:04d}",
                    source="swe-smith",
                    instruction=f"Synthetic issue {i} of repository {r}: a function misbehaves.",
                    image=f"registry.local/swesmith/repo{r:04d}:latest",
                    fail_to_pass=(f"tests/test_{i}.py::test_bug",),
                    pass_to_pass=(f"tests/test_{i}.py::test_ok",),
                    fingerprint=hashlib.sha256(task_id.encode()).hexdigest(),
                )
            )
            kind = "rejected_nop_passes" if rng.random() < 0.1 else "accepted"
            verdicts[task_id] = fd.Verdict.model_construct(
                task_id=task_id,
                verdict=kind,
                reason="",
                nop_rewards=(0.0,),
                oracle_rewards=(1.0,),
                nop_job="nop",
                oracle_job="oracle",
            )
    rng.shuffle(tasks)
    return tasks, verdicts


def run() -> dict:
    """Measure the 60k freeze and its reference in this process; returns the bench JSON."""
    # 1. inputs (not timed)
    tasks, verdicts = synthetic_candidates()
    with tempfile.TemporaryDirectory(prefix="forge-data-bench-") as tmp:
        records = Path(tmp) / "candidates.jsonl"
        fd.write_task_records(records, tasks)
        # 2. reference: read the candidates back and sort them
        start = time.perf_counter()
        loaded = sorted(fd.read_task_records(records).tasks, key=lambda t: t.id)
        reference = time.perf_counter() - start
        # 3. the freeze itself
        start = time.perf_counter()
        manifest = fd.freeze(tasks, SPEC, Path(tmp) / "split", verdicts=verdicts)
        seconds = time.perf_counter() - start
        # 4. verification of what was written (reported, not part of the target)
        start = time.perf_counter()
        problems = fd.verify_frozen(Path(tmp) / "split")
        verify_seconds = time.perf_counter() - start
    return {
        "freeze_60k": {
            "seconds": round(seconds, 3),
            "candidates": len(loaded),
            "repositories": REPOSITORIES,
            "frozen_tasks": sum(manifest.counts.values()),
            "frozen_repositories": len(manifest.repositories),
            "reference": "read 60,000 candidate records from JSONL and sort by id",
            "reference_seconds": round(reference, 3),
            "ratio": round(seconds / reference, 2),
            "verify_seconds": round(verify_seconds, 3),
            "verify_ok": problems == [],
        },
        "targets": [  # judged by tools/bench.py
            {
                "name": "freeze_60k_over_read_sort",
                "measured": round(seconds / reference, 2),
                "op": "<=",
                "threshold": TARGET_RATIO,
                "unit": "x",
                "note": f"{seconds:.2f} s against {reference:.2f} s to read and sort the input",
            },
        ],
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
