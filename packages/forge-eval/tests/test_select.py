"""Checkpoint selection from validation-metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_eval import ForgeEvalError, select_checkpoint


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS = [
    {"step": 0, "success_rate_all": 0.2, "solved": ["a", "b"], "critic/vf_loss": 9.0},
    {"step": 10, "success_rate_all": 0.3, "solved": ["a", "c", "d"], "critic/ev": 0.99},
    {"step": 20, "success_rate_all": 0.3, "solved": ["c", "d", "e"], "critic/ev": 0.999},
    {"step": 24, "success_rate_all": 0.1, "solved": ["e"]},
]


def test_best_step_ties_to_earlier_and_ignores_critic_metrics(tmp_path: Path) -> None:
    path = _write(tmp_path / "validation-metrics.jsonl", ROWS)
    before = path.read_bytes()
    selection = select_checkpoint(path, patience=2)
    assert (selection.best_step, selection.best_success_rate) == (10, 0.3)
    jaccards = [c.jaccard_prev for c in selection.checkpoints]
    assert jaccards == [None, pytest.approx(1 / 4), pytest.approx(2 / 4), pytest.approx(1 / 3)]
    step_20 = selection.checkpoints[2]
    assert (step_20.gained, step_20.lost) == (["e"], ["a"])
    assert (selection.rounds_since_best, selection.patience_exhausted) == (2, True)
    assert "stopping is reasonable" in selection.hint
    assert path.read_bytes() == before  # never modifies or deletes anything


def test_order_of_lines_does_not_matter_and_patience_not_reached(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.jsonl", list(reversed(ROWS)))
    selection = select_checkpoint(path)  # default patience 3
    assert [c.step for c in selection.checkpoints] == [0, 10, 20, 24]
    assert selection.best_step == 10 and not selection.patience_exhausted
    assert "keep training" in selection.hint


def test_jaccard_of_two_empty_solved_sets_is_one(tmp_path: Path) -> None:
    rows = [{"step": 0, "success_rate_all": 0.0, "solved": []},
            {"step": 5, "success_rate_all": 0.0, "solved": []}]  # fmt: skip
    selection = select_checkpoint(_write(tmp_path / "m.jsonl", rows))
    assert selection.checkpoints[1].jaccard_prev == 1.0 and selection.best_step == 5
    assert selection.note is None  # a tie with step 0 is not "step 0 is better"


def test_step_zero_has_no_checkpoint_and_is_never_selected(tmp_path: Path) -> None:
    """The base model (validated at step 0) cannot be picked; the note says it was best."""
    rows = [{"step": 0, "success_rate_all": 0.5, "solved": ["a", "b"]},
            {"step": 10, "success_rate_all": 0.25, "solved": ["a"]},
            {"step": 20, "success_rate_all": 0.3, "solved": ["b"]}]  # fmt: skip
    selection = select_checkpoint(_write(tmp_path / "m.jsonl", rows))
    assert (selection.best_step, selection.best_validation_step) == (20, 0)
    assert selection.checkpoint_steps == [10, 20]
    assert [c.has_checkpoint for c in selection.checkpoints] == [False, True, True]
    assert "step 0 (the base model, before any update" in (selection.note or "")
    assert "best checkpoint is step 20" in (selection.note or "")


def test_only_steps_with_a_checkpoint_folder_are_selectable(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    path = _write(run / "validation-metrics.jsonl", ROWS)
    (run / "checkpoints" / "global_step_20").mkdir(parents=True)
    (run / "checkpoints" / "global_step_24").mkdir()
    selection = select_checkpoint(path)  # checkpoints/ beside the metrics is read
    assert selection.best_step == 20 and selection.best_validation_step == 10
    assert selection.checkpoint_steps == [20, 24]
    assert selection.note is None  # step 20 ties step 10: nothing better lacks a checkpoint
    (run / "checkpoints" / "global_step_20").rmdir()
    selection = select_checkpoint(path)
    assert selection.best_step == 24 and "step 10 (no checkpoint" in (selection.note or "")
    assert select_checkpoint(path, checkpoints=[10]).best_step == 10
    with pytest.raises(ForgeEvalError, match="a validated step with a checkpoint"):
        select_checkpoint(path, checkpoints=[5])


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "empty file"),
        ('{"step": 0, "success_rate_all": 0.1, "solved": []}\n{"step": 1,', "line 2"),
        ('{"step": "0", "success_rate_all": 0.1, "solved": []}\n', "field step"),
        ('{"step": 0, "success_rate_all": 1.5, "solved": []}\n', "field success_rate_all"),
        ('{"step": 0, "success_rate_all": 0.1, "solved": "a"}\n', "field solved"),
        ('{"step": 0, "success_rate_all": 0.1, "solved": []}\n' * 2, "step 0 again"),
        ("[1, 2]\n", "a JSON object"),
    ],
)
def test_bad_metrics_files(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(content)
    with pytest.raises(ForgeEvalError, match="Fix:") as info:
        select_checkpoint(path)
    assert needle in str(info.value)


def test_missing_file_and_bad_patience(tmp_path: Path) -> None:
    with pytest.raises(ForgeEvalError, match="no such file"):
        select_checkpoint(tmp_path / "nope.jsonl")
    with pytest.raises(ForgeEvalError, match="patience"):
        select_checkpoint(_write(tmp_path / "m.jsonl", ROWS), patience=0)
