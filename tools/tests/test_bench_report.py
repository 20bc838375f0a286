"""tools/bench.py: targets judged from the benchmarks' results, the table, the exit status."""

from __future__ import annotations

import json

import bench
import pytest

MET = {"name": "freeze_60k_over_read", "measured": 2.0, "op": "<", "threshold": 5.0, "unit": "x"}
MISSED = {
    "name": "gae_speedup_vs_loop_at_65536",
    "measured": 80,
    "op": ">=",
    "threshold": 100,
    "unit": "x",
}
UNMEASURED = {
    "name": "forge_rps_over_rllm_at_c8_c64",
    "measured": None,
    "op": ">=",
    "threshold": 3,
    "unit": "x",
    "reason": "rllm-model-gateway did not install",
}


def test_a_missed_target_fails_and_a_met_one_passes():
    rows = bench.evaluate({"data": {"targets": [MET]}, "ppo": {"targets": [MISSED]}})
    assert [(r.benchmark, r.status, r.ratio) for r in rows] == [
        ("data", "met", 0.4),
        ("ppo", "missed", 0.8),
    ]
    assert bench.exit_code(rows) == 1 and bench.exit_code(rows[:1]) == 0
    assert bench.summary(rows).startswith("bench FAILED: 1 met, 1 missed")
    assert bench.summary(rows[:1]).startswith("BENCH_PASSED targets=1")


def test_the_table_has_one_readable_row_per_target():
    rows = bench.evaluate(
        {"data": {"targets": [MET]}, "ppo": {"targets": [MISSED]}, "sandbox": {"n_execs": 40}}
    )
    lines = bench.format_table(rows).splitlines()
    assert lines[0].split() == ["benchmark", "target", "measured", "ratio", "met"]
    row = ["data", "freeze_60k_over_read", "<", "5", "x", "2", "x", "0.4", "yes"]
    assert lines[2].split() == row
    assert lines[3].split() == [
        "ppo",
        "gae_speedup_vs_loop_at_65536",
        ">=",
        "100",
        "x",
        "80",
        "x",
        "0.8",
        "NO",
    ]
    assert lines[4].split()[:3] == ["sandbox", "(no", "target)"]  # shown, never failing
    assert bench.exit_code(rows[2:]) == 0


def test_a_summary_beside_targets_is_a_report_row_in_the_notes_that_never_fails():
    result = {"targets": [MET], "summary": "cold 20.1 s / warm 21.0 s = 0.96x"}
    rows = bench.evaluate({"first_smoke": result})
    assert [(r.target.split()[0], r.status) for r in rows] == [
        ("freeze_60k_over_read", "met"),
        ("(measured)", "report"),
    ]
    assert "first_smoke / (measured): cold 20.1 s / warm 21.0 s" in bench.format_table(rows)
    assert bench.exit_code(rows) == 0 and bench.summary(rows).startswith("BENCH_PASSED")


def test_a_report_without_targets_shows_its_summary_line_and_never_fails():
    rows = bench.evaluate(
        {
            "k8s": {"kubernetes": {"exec_ms": 33.6}, "summary": "exec 33.6 vs 10.2 ms (3.3x)"},
            "gone": {"skipped": "no sandboxes here", "summary": "not this"},
            "plain": {"n_execs": 40},
        }
    )
    assert [(r.benchmark, r.status, r.note) for r in rows] == [
        ("k8s", "no target", "exec 33.6 vs 10.2 ms (3.3x)"),
        ("gone", "no target", "no sandboxes here"),
        ("plain", "no target", "numbers only: see the JSON report"),
    ]
    assert "  k8s / (no target): exec 33.6 vs 10.2 ms (3.3x)" in bench.format_table(rows)
    assert bench.exit_code(rows) == 0


def test_an_unmeasured_target_fails_unless_explicitly_allowed():
    rows = bench.evaluate({"data": {"targets": [MET]}, "rollout": {"targets": [UNMEASURED]}})
    assert rows[1].status == "not measured" and rows[1].measured is None
    assert bench.exit_code(rows) == 1
    assert "--allow-unmeasured lets unmeasured targets pass" in bench.summary(rows)
    assert bench.exit_code(rows, allow_unmeasured=True) == 0
    table = bench.format_table(rows)
    assert "NOT MEASURED" in table and "rllm-model-gateway did not install" in table
    # allowed, it is still no pass for the missed one
    rows.append(bench.judge("ppo", MISSED))
    assert bench.exit_code(rows, allow_unmeasured=True) == 1


@pytest.mark.parametrize(
    "target",
    [
        {"name": "x", "measured": 1.0, "op": "<"},  # no threshold
        {"name": "x", "measured": 1.0, "op": "~", "threshold": 2},
        {"name": "x", "measured": True, "op": "<", "threshold": 2},  # a flag is not a number
        {"name": "x", "measured": float("nan"), "op": "<", "threshold": 2},
        "fast",
    ],
)
def test_a_malformed_target_or_a_raised_benchmark_is_an_error_not_a_pass(target):
    assert bench.judge("b", target).status == "error"
    raised = bench.evaluate({"b": {"error": "Traceback...\nRuntimeError: boom\n"}})
    assert (raised[0].status, raised[0].note) == ("error", "RuntimeError: boom")
    assert bench.exit_code(raised, allow_unmeasured=True) == 1


@pytest.mark.parametrize(
    ("op", "measured", "status"),
    [("<", 5.0, "missed"), ("<=", 5.0, "met"), (">", 5.0, "missed"), (">=", 5.0, "met")],
)
def test_the_boundary_follows_the_operator(op, measured, status):
    target = {"name": "t", "measured": measured, "op": op, "threshold": 5.0}
    assert bench.judge("b", target).status == status


def test_main_writes_the_verdict_and_exits_1_on_a_miss(tmp_path, monkeypatch, capsys):
    for name, target in (("good", MET), ("slow", MISSED)):
        (tmp_path / f"bench_{name}.py").write_text(
            f"def run():\n    return {{'targets': [{target!r}]}}\n"
        )
    monkeypatch.setattr(bench, "discover", lambda only: sorted(tmp_path.glob("bench_*.py")))
    out = tmp_path / "report.json"
    assert bench.main(["--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["schema"] == "forge/bench-report@2" and report["passed"] is False
    assert [t["status"] for t in report["targets"]] == ["met", "missed"]
    printed = capsys.readouterr().out
    assert "gae_speedup_vs_loop_at_65536" in printed and "bench FAILED" in printed
    monkeypatch.setattr(bench, "discover", lambda only: [tmp_path / "bench_good.py"])
    assert bench.main(["--out", str(out)]) == 0 and json.loads(out.read_text())["passed"]


@pytest.mark.parametrize(
    "target",
    [
        {"name": "gateway_p50_added", "measured": 1.0, "op": "<", "threshold": 2.0, "unit": "ms"},
        {"name": "gateway_p50_added_ms_32k_c8", "measured": 1.0, "op": "<", "threshold": 2.0},
        {"name": "freeze_60k", "measured": 1.0, "op": "<", "threshold": 5.0, "unit": "s"},
        {"name": "ppo_smoke_wall_seconds", "measured": 1.0, "op": "<", "threshold": 180.0},
    ],
)
def test_a_target_in_milliseconds_or_seconds_is_an_error_even_when_it_would_be_met(target):
    row = bench.judge("rollout", target)
    assert (row.status, row.measured) == ("error", None)
    assert "expected a ratio" in row.note and "found an absolute time in" in row.note
    assert bench.exit_code([row]) == 1


def test_ratios_are_judged_and_a_name_merely_containing_ms_or_s_is_not_refused():
    for name, unit in (("forms_over_rllm", "x"), ("terms", ""), ("steps_per_update", "")):
        target = {"name": name, "measured": 1.0, "op": "<", "threshold": 2.0, "unit": unit}
        assert bench.judge("b", target).status == "met", name
