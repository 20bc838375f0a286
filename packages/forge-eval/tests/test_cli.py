"""The `forge-eval` command line: tables by default, JSON on request, exit codes, HTML."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_eval.cli import main
from forge_gates import atomic_write_text

TASKS = [f"task-{i:02d}" for i in range(12)]


@pytest.fixture
def runs(tmp_path: Path, harbor: SimpleNamespace) -> tuple[Path, Path]:
    a = harbor.write_job(tmp_path, "sft", harbor.panel_trials(set(TASKS[:4]), TASKS))
    b = harbor.write_job(
        tmp_path, "rl", harbor.panel_trials(set(TASKS[2:9]), TASKS, model="forge-rl")
    )
    return a, b


def test_score_prints_a_table(runs, capsys) -> None:
    assert main(["score", str(runs[0])]) == 0
    out = capsys.readouterr().out
    assert "benchmark pass@1 [95% CI]" in out and "test38" in out and "0.333 [" in out
    assert "protocol sha256" in out


def test_score_json_file_is_written_atomically(runs, tmp_path: Path, capsys) -> None:
    out_file = tmp_path / "out" / "report.json"
    assert main(["score", str(runs[0]), "--json", str(out_file)]) == 0
    data = json.loads(out_file.read_text())
    assert data["schema"] == "forge-eval/report@1" and len(data["protocol_sha256"]) == 64
    assert data["panels"][0]["solved"] == 4
    assert [p.name for p in out_file.parent.iterdir()] == ["report.json"]  # no temp files
    assert "wrote" in capsys.readouterr().out


def test_score_json_to_stdout(runs, capsys) -> None:
    assert main(["score", str(runs[0]), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "forge-eval/report@1"


def test_bad_input_exits_1_with_the_reason(tmp_path: Path, capsys) -> None:
    assert main(["score", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert "expected a Harbor job directory" in err and "Fix:" in err


def test_compare_table_and_json(runs, tmp_path: Path, capsys) -> None:
    out_file = tmp_path / "cmp.json"
    argv = ["compare", "--run", f"sft={runs[0]}", "--run", f"rl={runs[1]}", "--json", str(out_file)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "McNemar p" in out and "delta rl-sft" in out
    data = json.loads(out_file.read_text())
    assert data["schema"] == "forge-eval/compare@1"
    panel = data["panels"][0]
    issue_keys = {"panel", "wins", "ties", "losses", "b", "c", "mcnemar_p", "delta",
                  "delta_low", "delta_high", "per_task"}  # fmt: skip
    assert issue_keys <= set(panel)
    assert (panel["b"], panel["c"]) == (2, 5) and len(panel["per_task"]) == 12


def test_compare_refusal_exits_2_and_shows_the_difference(
    runs, tmp_path: Path, harbor: SimpleNamespace, capsys
) -> None:
    other = harbor.write_job(
        tmp_path, "short-steps",
        harbor.panel_trials(set(TASKS[:3]), TASKS, agent_kwargs={"step_limit": 50}),
    )  # fmt: skip
    assert main(["compare", "--run", f"A={runs[0]}", "--run", f"B={other}"]) == 2
    err = capsys.readouterr().err
    assert "not comparable" in err and "step_limit: A=200 B=50" in err


def test_compare_two_rollout_jobs_of_one_split_needs_no_flags(
    tmp_path: Path, harbor: SimpleNamespace, capsys
) -> None:
    """`forge-rollout run` records no dataset: the panels are the job folders' names."""
    a = harbor.write_job(
        tmp_path, "base", harbor.panel_trials(set(TASKS[:4]), TASKS, source=None), config=False
    )
    b = harbor.write_job(
        tmp_path, "step10",
        harbor.panel_trials(set(TASKS[2:9]), TASKS, source=None, model="rl"), config=False,
    )  # fmt: skip
    assert main(["compare", "--run", f"A={a}", "--run", f"B={b}"]) == 0
    assert "McNemar p" in capsys.readouterr().out
    assert main(["compare", "--run", f"A={a}", "--run", f"B={b}", "--allow-diff", "panels"]) == 2
    assert "--panel NAME" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--run", "A"],
        ["--run", "A", "--run", "B", "--run", "C"],
        ["--run", "A", "--run", "B", "--allow-diff", "colour"],
    ],
)
def test_compare_usage_errors_exit_2(runs, argv: list[str], capsys) -> None:
    paths = {"A": str(runs[0]), "B": str(runs[1]), "C": str(runs[0])}
    assert main(["compare", *(paths.get(arg, arg) for arg in argv)]) == 2
    assert "forge-eval compare" in capsys.readouterr().err


def test_select_table(tmp_path: Path, capsys) -> None:
    path = tmp_path / "validation-metrics.jsonl"
    rows = [{"step": 0, "success_rate_all": 0.1, "solved": ["a"]},
            {"step": 10, "success_rate_all": 0.2, "solved": ["a", "b"]}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["select", str(path)]) == 0
    assert "best step 10" in capsys.readouterr().out
    assert main(["select", str(path), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "forge-eval/select@1"


def test_report_html_is_self_contained(runs, tmp_path: Path, capsys) -> None:
    out_file = tmp_path / "report.html"
    assert main(["report", f"sft={runs[0]}", f"rl={runs[1]}", "--html", str(out_file)]) == 0
    html = out_file.read_text()
    assert html.startswith("<!DOCTYPE html>") and "forge-eval/report-html@1" in html
    assert html.count("<svg") == 2  # pass@1 plot + per-task grid
    assert "<script" not in html and "src=" not in html and "<link" not in html
    assert re.findall(r"https?://[^\"']+", html) == ["http://www.w3.org/2000/svg"] * 2
    assert "Paired comparison: rl vs sft" in html and "task-08: rl solved" in html
    assert "wrote" in capsys.readouterr().out


def test_report_shows_refusal_instead_of_comparison(
    runs, tmp_path: Path, harbor: SimpleNamespace, capsys
) -> None:
    other = harbor.write_job(tmp_path, "v27", harbor.panel_trials({"x"}, ["x", "y"]))
    out_file = tmp_path / "r.html"
    assert main(["report", str(runs[0]), str(other), "--html", str(out_file)]) == 0
    html = out_file.read_text()
    assert "Comparison refused" in html and "only in A" in html and html.count("<svg") == 1
    assert "comparison left out" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["score"], ["compare"], ["select"], ["report"]])
def test_help(command: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    assert "usage: forge-eval" in capsys.readouterr().out


def test_write_atomic_keeps_old_file_on_failure(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "report.json"
    atomic_write_text(target, "old\n")

    def boom(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["report.json"]
