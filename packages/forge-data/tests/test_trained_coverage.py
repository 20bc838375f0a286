"""Epoch coverage measured from what trained, failing closed on a task that never trained."""

from __future__ import annotations

import json

import forge_data as fd

REPOS = {"a": "o/r1", "b": "o/r1", "c": "o/r2"}


def test_coverage_counts_what_trained_per_repository() -> None:
    slots = [
        fd.Exposure(task_id="a", step=1, rows=2),
        fd.Exposure(task_id="b", step=1, rows=1),
        fd.Exposure(task_id="c", step=2, rows=1),
        fd.Exposure(task_id="a", step=2, rows=0, reason="infrastructure error: X"),  # padding
    ]
    fields, violations = fd.trained_coverage(slots, REPOS)
    assert violations == []  # a trained once; the failed padded repeat is not a gap
    assert fields["exposures"] == 4 and fields["trained_exposures"] == 3
    assert fields["unique_tasks"] == 3 and fields["repeated_exposures"] == 0
    assert json.loads(str(fields["per_repository"])) == {"o/r1": 2, "o/r2": 1}


def test_a_planned_task_that_never_trained_fails_with_its_reason() -> None:
    slots = [
        fd.Exposure(task_id="a", step=1, rows=3),
        fd.Exposure(task_id="c", step=1, rows=0, reason="infrastructure error: ImagePullError"),
        fd.Exposure(task_id="c", step=2, rows=0, reason="no valid trajectory"),
    ]
    fields, violations = fd.trained_coverage(slots, REPOS)
    (v,) = violations
    assert v.rule == "coverage.c" and "task c trained at least once" in v.expected
    assert v.found == "step 1: infrastructure error: ImagePullError; step 2: no valid trajectory"
    assert fields["unique_tasks"] == 1 and fields["repositories"] == 1
