"""Readers: Harbor task folders, SWE-smith / SWE-bench rows (JSONL, Parquet), Task records,
the lazy Hugging Face loader; bad records are reported with their file:line."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

import forge_data as fd

ROW = {
    "instance_id": "owner__repo.abc123.func_pm_remove_cond__x1",
    "repo": "swesmith/owner__repo.abc123",
    "patch": "diff --git a/x.py b/x.py\n",
    "FAIL_TO_PASS": ["tests/test_x.py::test_a"],
    "PASS_TO_PASS": ["tests/test_x.py::test_b"],
    "image_name": "jyangballin/swesmith.x86_64.owner_1776_repo.abc123",
    "base_commit": "abc123",
    "problem_statement": "Calling x() with an empty list raises IndexError.",
}


def _jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_harbor_task_fields(tmp_path):
    task = fd.read_harbor_task(fd.demo_tasks_root() / "statkit-median-even")
    assert task.id == "statkit-median-even"
    assert task.repository == "forge-demo/statkit"
    assert task.source == "harbor"
    assert task.base_image == "python:3.11-slim"
    assert task.fail_to_pass == ("test_hidden.FailToPass.test_even_count_averages_middle_values",)
    assert "tests/test.sh" in task.files and len(task.fingerprint) == 64


def test_harbor_problems_name_the_folder(tmp_path):
    shutil.copytree(fd.demo_tasks_root() / "iterkit-chunked-tail", tmp_path / "good")
    (tmp_path / "no-tests").mkdir()
    (tmp_path / "no-tests" / "task.toml").write_text('version = "1.0"\n')
    shutil.copytree(tmp_path / "good", tmp_path / "bad-toml")
    (tmp_path / "bad-toml" / "task.toml").write_text("version = \n")
    report = fd.read_harbor_tasks(tmp_path)
    assert [t.id for t in report.tasks] == ["good"]
    by_location = {p.location.rsplit("/", 1)[1]: p.reason for p in report.problems}
    assert "missing required file" in by_location["no-tests"]
    assert "not valid TOML" in by_location["bad-toml"]


def test_fingerprint_changes_with_any_file_but_not_with_pycache(tmp_path):
    shutil.copytree(fd.demo_tasks_root() / "iterkit-chunked-tail", tmp_path / "t")
    before = fd.read_harbor_task(tmp_path / "t").fingerprint
    (tmp_path / "t" / "__pycache__").mkdir()
    (tmp_path / "t" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert fd.read_harbor_task(tmp_path / "t").fingerprint == before
    (tmp_path / "t" / "solution" / "solve.sh").write_text("true\n")
    assert fd.read_harbor_task(tmp_path / "t").fingerprint != before


def test_jsonl_rows_and_bad_rows_with_line_numbers(tmp_path):
    string_lists = dict(ROW, instance_id="b", FAIL_TO_PASS=json.dumps(["t1", "t2"]))
    path = _jsonl(
        tmp_path / "rows.jsonl",
        [
            json.dumps(ROW),
            "",
            "{not json",
            json.dumps({"repo": "r"}),
            json.dumps(string_lists),
            json.dumps(dict(ROW, instance_id="c", FAIL_TO_PASS=5)),
            "[1, 2]",
        ],
    )
    report = fd.read_jsonl_rows(path)
    assert [t.id for t in report.tasks] == [ROW["instance_id"], "b"]
    first = report.tasks[0]
    assert (first.source, first.image, first.base_commit) == (
        "swe-smith",
        ROW["image_name"],
        "abc123",
    )
    assert first.metadata == {"patch": ROW["patch"]}
    assert report.tasks[1].fail_to_pass == ("t1", "t2")
    problems = {p.location: p.reason for p in report.problems}
    assert set(problems) == {f"{path}:3", f"{path}:4", f"{path}:6", f"{path}:7"}
    assert "not valid JSON" in problems[f"{path}:3"]
    assert "instance_id" in problems[f"{path}:4"]
    assert "FAIL_TO_PASS" in problems[f"{path}:6"]
    assert "not an object" in problems[f"{path}:7"]


def test_row_fingerprint_is_content_not_key_order():
    reordered = dict(reversed(list(ROW.items())))
    assert fd.task_from_row(ROW).fingerprint == fd.task_from_row(reordered).fingerprint
    assert fd.task_from_row(ROW).fingerprint != fd.task_from_row(dict(ROW, patch="x")).fingerprint


def test_swe_bench_rows_without_image_are_marked_swe_bench():
    row = {k: v for k, v in ROW.items() if k != "image_name"}
    assert fd.task_from_row(row).source == "swe-bench"


def test_parquet_rows_with_row_numbers(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [ROW, dict(ROW, instance_id=""), dict(ROW, instance_id="z")]
    table = pa.Table.from_pylist(
        [
            dict(
                r,
                FAIL_TO_PASS=json.dumps(r["FAIL_TO_PASS"]),
                PASS_TO_PASS=json.dumps(r["PASS_TO_PASS"]),
            )
            for r in rows
        ]
    )
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path)
    report = fd.read_tasks(path)
    assert [t.id for t in report.tasks] == [ROW["instance_id"], "z"]
    assert [p.location for p in report.problems] == [f"{path}:row 2"]


def test_read_tasks_detects_the_kind_of_source(tmp_path):
    rows = _jsonl(tmp_path / "rows.jsonl", [json.dumps(ROW)])
    records = tmp_path / "candidates.jsonl"
    fd.write_task_records(records, fd.read_tasks(rows).tasks)
    assert fd.read_tasks(records).tasks == fd.read_tasks(rows).tasks
    assert len(fd.read_tasks(fd.demo_tasks_root()).tasks) == 12
    with pytest.raises(fd.DataError, match="does not exist"):
        fd.read_tasks(tmp_path / "missing.jsonl")
    with pytest.raises(fd.DataError, match=r"\.jsonl, \.json or \.parquet"):
        (tmp_path / "rows.csv").write_text("a,b\n")
        fd.read_tasks(tmp_path / "rows.csv")


def test_task_records_bad_line_is_located(tmp_path):
    task = fd.task_from_row(ROW)
    path = _jsonl(tmp_path / "c.jsonl", [task.model_dump_json(), '{"id": "x"}'])
    report = fd.read_task_records(path)
    assert report.tasks == (task,)
    assert report.problems[0].location == f"{path}:2"


def test_hf_loader_without_datasets_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(fd.DataError, match="pip install datasets"):
        fd.load_hf_rows()


def test_parquet_without_pyarrow_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(fd.DataError, match=r"forge-data\[parquet\]"):
        fd.read_parquet_rows(tmp_path / "x.parquet")


@pytest.mark.parametrize(
    ("toml", "found"),
    [
        ("[verifier]\ntimeout_secs = 5\n", "timeout_secs: did you mean 'timeout_sec'?"),
        ("[enviroment]\nmemory_mb = 512\n", "'enviroment': did you mean 'environment'?"),
        ("[verifier]\ntimeout_sec = 0\n", "[verifier] timeout_sec: expected a number of seconds"),
    ],
)
def test_task_toml_typos_are_located_problems(tmp_path, toml, found):
    """The same refusal as forge-sandbox's load_task: a typo is never run on defaults."""
    shutil.copytree(fd.demo_tasks_root() / "iterkit-chunked-tail", tmp_path / "typo")
    (tmp_path / "typo" / "task.toml").write_text('version = "1.0"\n' + toml)
    report = fd.read_harbor_tasks(tmp_path)
    assert report.tasks == ()
    (problem,) = report.problems
    assert problem.location.endswith("/typo") and found in problem.reason, problem.reason


def test_demo_tasks_have_no_unknown_task_toml_keys():
    assert len(fd.read_harbor_tasks(fd.demo_tasks_root()).tasks) == 12
