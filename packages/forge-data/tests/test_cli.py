"""CLI smoke tests through `main([...])`: the whole offline flow on the demo tasks."""

from __future__ import annotations

import json
import shutil

import pytest

import forge_data as fd
from forge_data.cli import main
from forge_gates import read_ledger

SPEC = [
    "--train",
    "6",
    "--validation",
    "3",
    "--test",
    "3",
    "--per-repo-cap",
    "2",
    "--min-repositories",
    "7",
]


def write_job(job, rewards: dict[str, float]) -> None:
    for task_id, reward in rewards.items():
        trial = job / f"{task_id}__1"
        trial.mkdir(parents=True)
        (trial / "result.json").write_text(
            json.dumps(
                {
                    "task_name": task_id,
                    "trial_name": trial.name,
                    "verifier_result": {"rewards": {"reward": reward}},
                    "exception_info": None,
                }
            )
        )


def test_help_explains_itself(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "freeze-check" in out and "Exit codes" in out


def test_demo_commands(tmp_path, capsys):
    assert main(["demo-tasks", "--out", str(tmp_path / "tasks")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 12
    assert main(["demo-tasks", "--out", str(tmp_path / "tasks")]) == 1
    assert main(["demo-split"]) == 0
    assert fd.demo_split().sha256 in capsys.readouterr().out


def test_candidates_reports_bad_rows_and_filters(tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    good = {
        "instance_id": "a",
        "repo": "o/r",
        "problem_statement": "Crash on empty input list.",
        "FAIL_TO_PASS": ["t"],
        "PASS_TO_PASS": [],
    }
    rows.write_text(
        "\n".join(
            [json.dumps(good), "{bad", json.dumps(dict(good, instance_id="b", FAIL_TO_PASS=[]))]
        )
    )
    out = tmp_path / "candidates.jsonl"
    # issue 33: a bad record fails the command unless --keep-going (it used to exit 0)
    assert main(["candidates", "--tasks", str(rows), "--out", str(out), "--quiet"]) == 1
    assert "found 1 that could not be read" in capsys.readouterr().err
    args = ["candidates", "--tasks", str(rows), "--out", str(out), "--quiet", "--keep-going"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert f"{rows}:2" in captured.err and "rejected b: no_fail_to_pass" in captured.err
    assert json.loads(captured.out) == {
        "read": 2,
        "bad_records": 1,
        "kept": 1,
        "rejected": {"no_fail_to_pass": 1},
    }
    assert [t.id for t in fd.read_tasks(out).tasks] == ["a"]
    assert main(["candidates", "--tasks", str(rows), "--strict", "--quiet"]) == 1


def test_candidates_exits_1_when_none_is_kept_even_with_keep_going(tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    row = {"instance_id": "a", "repo": "o/r", "problem_statement": "Crash on empty input."}
    rows.write_text(json.dumps(row) + "\n")  # read fine, rejected: no FAIL_TO_PASS
    assert main(["candidates", "--tasks", str(rows), "--quiet", "--keep-going"]) == 1
    assert "expected at least one record kept; found none" in capsys.readouterr().err
    rows.write_text("{bad\n")
    assert main(["candidates", "--tasks", str(rows), "--quiet", "--keep-going"]) == 1


def test_offline_flow_ingest_check_freeze_verify_plan(tmp_path, capsys):
    tasks = tmp_path / "tasks"
    fd.write_demo_tasks(tasks)
    ids = fd.demo_task_ids()
    write_job(tmp_path / "nop", dict.fromkeys(ids, 0.0))
    write_job(tmp_path / "oracle", dict.fromkeys(ids, 1.0) | {ids[0]: 0.0})
    verdicts = str(tmp_path / "verdicts.jsonl")
    common = ["--tasks", str(tasks), "--quiet", *SPEC]
    # 1. ingest; 2. the planner now has nothing left to validate but the rejected one's gap
    assert (
        main(
            [
                "ingest",
                "--nop",
                str(tmp_path / "nop"),
                "--oracle",
                str(tmp_path / "oracle"),
                "--verdicts",
                verdicts,
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["verdicts"] == {
        "accepted": 11,
        "rejected_oracle_fails": 1,
    }
    assert main(["oracle-plan", *common, "--verdicts", verdicts, "-n", "4"]) == 0
    # 3. freeze-check fails: one task short; passes when the oracle is skipped
    run = tmp_path / "run"
    assert main(["freeze-check", *common, "--verdicts", verdicts, "--run-dir", str(run)]) == 1
    assert main(["freeze-check", *common, "--skip-oracle", "--run-dir", str(run)]) == 0
    assert [r.gate for r in read_ledger(run)] == [
        "BULK_ORACLE_FREEZE_READY_FAILED",
        "BULK_ORACLE_FREEZE_READY",
    ]
    # 4. freeze: refused without evidence, refused on shortage, allowed with --allow-shortage
    split = tmp_path / "split"
    assert main(["freeze", *common, "--out", str(split)]) == 1
    assert main(["freeze", *common, "--verdicts", verdicts, "--out", str(split)]) == 1
    assert (
        main(["freeze", *common, "--verdicts", verdicts, "--out", str(split), "--allow-shortage"])
        == 0
    )
    manifest = fd.load_manifest(split)
    assert ids[0] not in manifest.tasks and sum(manifest.counts.values()) == 11
    assert main(["freeze", *common, "--skip-oracle", "--out", str(split)]) == 1  # exists
    # 5. verify, then tamper
    capsys.readouterr()
    assert (
        main(["verify", str(split), "--tasks-root", str(tasks), "--expect-sha256", manifest.sha256])
        == 0
    )
    (tasks / manifest.splits["train"][0] / "instruction.md").write_text("changed")
    assert main(["verify", str(split), "--tasks-root", str(tasks)]) == 1
    assert "task.files_changed" in capsys.readouterr().err
    # 6. plan on the shipped demo split
    plan = tmp_path / "plan.json"
    assert (
        main(
            [
                "plan",
                "--split",
                str(fd.demo_split_root()),
                "--batch-size",
                "4",
                "--validation-tasks",
                "2",
                "--test-freq",
                "1",
                "--save-freq",
                "1",
                "--run-dir",
                str(run),
                "--out",
                str(plan),
            ]
        )
        == 0
    )
    body = json.loads(plan.read_text())
    assert body["schedule"]["validation_steps"] == [0, 1, 2]
    assert body["validation_contract"]["tasks"] == 2
    assert "TRAIN_VALIDATION_SUBSET_GATE_PASSED" in [r.gate for r in read_ledger(run)]


def test_freeze_copies_the_harbor_folders_where_verify_finds_them(tmp_path, capsys):
    """From a folder of Harbor tasks, or from a candidates file with --tasks-root: the frozen
    tasks' folders land in <out>/tasks/<id>/, so `verify <out>` needs no --tasks-root."""
    tasks = tmp_path / "tasks"
    fd.write_demo_tasks(tasks)
    candidates = tmp_path / "candidates.jsonl"
    assert main(["candidates", "--tasks", str(tasks), "--out", str(candidates), "--quiet"]) == 0
    common = ["--quiet", "--skip-oracle", *SPEC, "--allow-shortage"]
    for name, source in (
        ("from-folder", ["--tasks", str(tasks)]),
        ("from-candidates", ["--tasks", str(candidates), "--tasks-root", str(tasks)]),
    ):
        split = tmp_path / name
        assert main(["freeze", *source, *common, "--out", str(split)]) == 0
        manifest = fd.load_manifest(split)
        assert sorted(p.name for p in (split / "tasks").iterdir()) == sorted(manifest.tasks)
        capsys.readouterr()
        assert main(["verify", str(split)]) == 0
        assert "task_files=" + str(split / "tasks") in capsys.readouterr().out
    # records without their folders: frozen, and the note names the fix
    assert main(["freeze", "--tasks", str(candidates), *common, "--out", str(tmp_path / "x")]) == 0
    assert "fix: pass --tasks-root DIR" in capsys.readouterr().err
    assert not (tmp_path / "x" / "tasks").exists()
    # a --tasks-root without task folders is refused before anything is written
    bad = ["--tasks", str(candidates), "--tasks-root", str(tmp_path / "nowhere")]
    assert main(["freeze", *bad, *common, "--out", str(tmp_path / "y")]) == 1
    assert "expected a folder of Harbor task folders" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()


def test_candidates_locates_lines_that_are_not_utf8(tmp_path, capsys):
    """A bad byte sequence is a located bad record, on any line, and never hides the kind."""
    good = {
        "instance_id": "a",
        "repo": "o/r",
        "problem_statement": "Crash on empty input list.",
        "FAIL_TO_PASS": ["t"],
    }
    rows = tmp_path / "rows.jsonl"
    bad_line = b'{"instance_id": "caf\xe9 \xff", "repo": "o/r"}\n'
    rows.write_bytes(bad_line + json.dumps(good).encode() + b"\n" + bad_line)
    out = tmp_path / "candidates.jsonl"
    args = ["candidates", "--tasks", str(rows), "--out", str(out), "--quiet", "--keep-going"]
    assert main(args) == 0  # issue 33: without --keep-going the bad lines fail the command
    captured = capsys.readouterr()
    assert f"{rows}:1: not valid UTF-8" in captured.err
    assert f"{rows}:3: not valid UTF-8" in captured.err
    assert "Field required" not in captured.err  # still read as rows, not as Task records
    assert json.loads(captured.out)["read"] == 1 and json.loads(captured.out)["bad_records"] == 2
    assert [t.id for t in fd.read_tasks(out).tasks] == ["a"]
    assert main(["candidates", "--tasks", str(rows), "--strict", "--quiet"]) == 1


def test_bad_utf8_in_a_task_folder_or_manifest_is_named_not_a_traceback(tmp_path, capsys):
    tasks = tmp_path / "tasks"
    fd.write_demo_tasks(tasks)
    first = fd.demo_task_ids()[0]
    (tasks / first / "instruction.md").write_bytes(b"fix the caf\xe9 bug\n")
    assert main(["candidates", "--tasks", str(tasks), "--quiet", "--keep-going"]) == 0
    err = capsys.readouterr().err
    assert f"{tasks / first}: instruction.md is not UTF-8 text" in err
    split = tmp_path / "split"
    split.mkdir()
    (split / "manifest.json").write_bytes(b'{"name": "caf\xe9"}')
    assert main(["verify", str(split)]) == 1
    assert main(["plan", "--split", str(split), "--batch-size", "2"]) == 1
    assert "manifest" in capsys.readouterr().err


def test_verify_checks_task_files_by_default(tmp_path, capsys):
    """`verify SPLIT` checks <split>/tasks/: an edit, a deletion, an addition and a chmod -x
    all fail it; no task folders fail it too, unless --no-task-files says to skip them."""
    tasks = tmp_path / "tasks"
    fd.write_demo_tasks(tasks)
    split = tmp_path / "split"
    fd.freeze(fd.read_harbor_tasks(tasks).tasks, fd.DEMO_SPLIT_SPEC, split)
    # 1. no task folders next to the split: a violation, not problems=0
    assert main(["verify", str(split)]) == 1
    assert "[task.root_missing]" in capsys.readouterr().err
    assert main(["verify", str(split), "--no-task-files"]) == 0
    assert "task_files=skipped problems=0" in capsys.readouterr().out
    # 2. the split's own tasks/ folder is checked without --tasks-root
    shutil.copytree(tasks, split / "tasks")
    assert main(["verify", str(split)]) == 0
    assert f"task_files={split / 'tasks'} problems=0" in capsys.readouterr().out
    train = fd.load_manifest(split).splits["train"]
    (split / "tasks" / train[0] / "instruction.md").write_text("changed")
    (split / "tasks" / train[1] / "solution" / "solve.sh").unlink()
    (split / "tasks" / train[2] / "tests" / "extra.py").write_text("")
    (split / "tasks" / train[3] / "tests" / "test.sh").chmod(0o644)
    assert main(["verify", str(split)]) == 1
    captured = capsys.readouterr()
    out = captured.err
    assert "problems=0" not in captured.out and out.count("[task.files_changed]") == 4
    assert "changed instruction.md" in out and "removed solution/solve.sh" in out
    assert "added tests/extra.py" in out and "executable bit changed on tests/test.sh" in out
    # 3. plan verifies the same way before planning
    assert main(["plan", "--split", str(split), "--batch-size", "2"]) == 1
    assert main(["plan", "--split", "demo", "--batch-size", "2"]) == 0
