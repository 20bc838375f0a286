"""forge-data synth's parts without a sandbox: test/source files, swesmith candidates (seeded,
compiling, never in a test file), the keep rule, the CTRF plugin and grader, the problem
statement, the deterministic git index, and every refusal before anything is installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_data._errors import DataError
from forge_data.synth import ReportedTest, is_test_path, problem_statement, read_ctrf, source_files
from forge_data.synth._bugs import candidates
from forge_data.synth._report_plugin import PLUGIN
from forge_data.synth._source import fetch_project
from forge_data.synth._synth import _Probe, _refuse, _State
from forge_data.synth._task import GRADE_PY, init_git

pytest.importorskip("swesmith", reason="install forge-data[synth]")

PROJECT = Path(__file__).parent / "fixtures" / "synth_project"


@pytest.mark.parametrize(
    ("path", "test"),
    [
        ("tests/test_a.py", True),
        ("test_a.py", True),
        ("pkg/a_test.py", True),
        ("conftest.py", True),
        ("tests/data/input.txt", True),
        ("pkg/testing/helpers.py", True),
        ("pkg/testing.py", True),
        ("pkg/test_utils/io.py", True),
        ("src/pkg/core.py", False),
        ("src/pkg/contest.py", False),
        ("attest.py", False),
        ("pytest_plugin/core.py", False),
    ],
)
def test_is_test_path(path: str, test: bool) -> None:
    assert is_test_path(path) is test


def test_source_files_are_the_projects_modules_only() -> None:
    assert source_files(PROJECT) == [
        "src/minicalc/__init__.py",
        "src/minicalc/intervals.py",
        "src/minicalc/numbers.py",
        "src/minicalc/words.py",
    ]


def _candidates(seed: int, max_pairs: int = 60) -> list:
    return list(candidates(PROJECT, seed, max_pairs, {}))


def test_candidates_are_deterministic_for_a_seed_and_differ_between_seeds() -> None:
    first, again, other = _candidates(7), _candidates(7), _candidates(8)
    assert len(first) >= 10
    assert [c.model_dump() for c in first] == [c.model_dump() for c in again]
    assert [c.key for c in first] != [c.key for c in other]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**31))
def test_every_candidate_compiles_changes_one_source_file_and_no_test(seed: int) -> None:
    counts: dict = {}
    made = list(candidates(PROJECT, seed, 40, counts))
    keys = [c.key for c in made]
    assert len(keys) == len(set(keys))  # no two candidates with the same file text
    for candidate in made:
        original = (PROJECT / candidate.path).read_text()
        assert candidate.text != original and not is_test_path(candidate.path)
        compile(candidate.text, candidate.path, "exec")
        assert candidate.bug_diff.startswith(f"--- a/{candidate.path}")
    assert sum(c["candidate"] for c in counts.values()) == len(made)


def _report(statuses: dict[str, str]) -> _Probe:
    tests = [ReportedTest(name=n, status=s) for n, s in statuses.items()]
    return _Probe(tests=tests, exit_code="1", output="", seconds=1.0)


NAMES = [f"tests/test_m.py::test_{i}" for i in range(8)]


@settings(max_examples=200, deadline=None)
@given(
    baseline=st.sets(st.sampled_from(NAMES), min_size=1),
    runs=st.lists(
        st.dictionaries(st.sampled_from(NAMES), st.sampled_from(["passed", "failed", "skipped"])),
        min_size=1,
        max_size=6,
    ),
)
def test_a_kept_bug_has_a_failing_listed_test_and_never_repeats_a_failing_set(
    baseline: set[str], runs: list[dict[str, str]]
) -> None:
    state = _State(baseline, set())
    for number, run in enumerate(runs):
        from forge_data.synth._bugs import Candidate

        candidate = Candidate(index=number, path="m.py", entity="f@1", modifier="m",
                              text=str(number), bug_diff="")  # fmt: skip
        verdict = state.decide(candidate, _report(run))
        failing = {n for n, s in run.items() if s == "failed"} & baseline
        assert (verdict == "kept") == (bool(failing) and verdict != "same_failures")
        if not failing:
            assert verdict == "no_failure"
    seen = set()
    for _candidate, failing_tests, still in state.kept:
        names = {t.name for t in failing_tests}
        assert names and names <= baseline and not names & set(still)
        assert set(still) <= baseline
        assert frozenset(names) not in seen
        seen.add(frozenset(names))


def test_no_report_is_a_timeout_or_a_broken_suite_and_new_collection_errors_drop() -> None:
    state = _State({"t::a"}, {"tests/old_broken.py"})
    from forge_data.synth._bugs import Candidate

    bug = Candidate(index=0, path="m.py", entity="f@1", modifier="m", text="x", bug_diff="")
    assert state.decide(bug, _Probe(tests=None, exit_code="124", output="", seconds=None)) == (
        "timeout"
    )
    assert state.decide(bug, _Probe(tests=None, exit_code="2", output="", seconds=None)) == (
        "breaks_suite"
    )
    assert state.decide(bug, None) == "breaks_suite"
    broken = _Probe(
        tests=[ReportedTest(name="t::a", status="failed"),
               ReportedTest(name="tests/new.py", status="failed", type="collection")],
        exit_code="2", output="", seconds=1.0,
    )  # fmt: skip
    assert state.decide(bug, broken) == "breaks_collection"
    old = _Probe(
        tests=[ReportedTest(name="t::a", status="failed"),
               ReportedTest(name="tests/old_broken.py", status="failed", type="collection")],
        exit_code="1", output="", seconds=1.0,
    )  # fmt: skip
    assert state.decide(bug, old) == "kept"


def test_the_ctrf_plugin_reports_each_outcome(tmp_path: Path) -> None:
    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / "forge_report.py").write_text(PLUGIN)
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_ok(): assert 1\n"
        "def test_bad(): assert 1 == 2, 'one is not two'\n"
        "@pytest.mark.skip\ndef test_skip(): pass\n"
        "@pytest.mark.xfail\ndef test_xfail(): assert 0\n"
        "@pytest.fixture\ndef broken(): raise RuntimeError('setup broke')\n"
        "def test_setup_error(broken): pass\n"
    )
    (tmp_path / "test_broken.py").write_text("import not_a_module_anywhere\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the rootdir, whatever lies above
    report = tmp_path / "out" / "ctrf.json"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "forge_report", "-p", "no:cacheprovider", "-q",
         "-o", "addopts=", "--continue-on-collection-errors", str(tmp_path)],
        env={"PYTHONPATH": str(tmp_path / "plug"), "FORGE_CTRF": str(report),
             "PATH": "/usr/bin:/bin"},
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    tests = read_ctrf(report)
    assert tests is not None, run.stdout + run.stderr
    assert len(tests) == 6, [t.name for t in tests]
    status = {t.name.rsplit("::", 1)[-1]: t for t in tests}
    assert status["test_ok"].status == "passed"
    assert status["test_bad"].status == "failed" and "one is not two" in status["test_bad"].message
    assert "assert 1 == 2" in status["test_bad"].trace
    assert status["test_skip"].status == "skipped" and status["test_xfail"].status == "skipped"
    assert status["test_setup_error"].status == "failed"
    assert status["test_broken.py"].type == "collection"
    data = json.loads(report.read_text())["results"]["summary"]
    assert (data["passed"], data["failed"], data["skipped"]) == (1, 3, 2)


@pytest.mark.parametrize(
    ("statuses", "reward"),
    [
        ({"a": "passed", "b": "passed", "c": "failed"}, "1"),  # c is not listed
        ({"a": "failed", "b": "passed"}, "0"),
        ({"a": "passed", "b": "skipped"}, "0"),
        ({"b": "passed"}, "0"),  # the FAIL_TO_PASS test did not run
        ({}, None),  # a report without tests: no verdict
        (None, None),  # no report at all
    ],
)
def test_grade_from_the_report(tmp_path: Path, statuses: dict | None, reward: str | None) -> None:
    (tmp_path / "grade.py").write_text(GRADE_PY)
    (tmp_path / "config.json").write_text(
        json.dumps({"FAIL_TO_PASS": ["a"], "PASS_TO_PASS": ["b"]})
    )
    if statuses is not None:
        tests = [{"name": n, "status": s} for n, s in statuses.items()]
        (tmp_path / "ctrf.json").write_text(json.dumps({"results": {"tests": tests}}))
    run = subprocess.run(
        [sys.executable, "-I", "grade.py", "ctrf.json", "config.json", "reward.txt"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    if reward is None:
        assert run.returncode == 2 and not (tmp_path / "reward.txt").exists()
        assert "the tests did not run" in run.stderr
    else:
        assert (tmp_path / "reward.txt").read_text() == reward + "\n"


def test_the_statement_names_the_failing_tests_never_the_bug() -> None:
    failing = [
        ReportedTest(
            name="tests/test_numbers.py::test_gcd[12-18-6]",
            status="failed",
            message="assert 0 == 6",
            trace="tests/test_numbers.py:22\n>  assert gcd(a, b) == expected",
        ),
        ReportedTest(name="tests/test_numbers.py::test_gcd[7-13-1]", status="failed"),
    ]  # fmt: skip
    text = problem_statement("minicalc", failing)
    assert text.startswith("# minicalc: 2 tests in tests/test_numbers.py fail")
    assert "`tests/test_numbers.py::test_gcd[7-13-1]`" in text and "assert 0 == 6" in text
    assert "a, b = b, a % b" not in text and "numbers.py:" not in text.replace("test_numbers", "")
    many = [ReportedTest(name=f"t.py::test_{i}", status="failed") for i in range(12)]
    assert "... and 4 more" in problem_statement("p", many)


def test_the_git_workspace_is_byte_identical_and_clean(tmp_path: Path) -> None:
    shas, indexes = [], []
    for name in ("one", "two"):
        shutil.copytree(PROJECT, tmp_path / name)
        shas.append(init_git(tmp_path / name, "minicalc 1.2.0"))
        indexes.append((tmp_path / name / ".git" / "index").read_bytes())
    assert shas[0] == shas[1] and indexes[0] == indexes[1]
    status = subprocess.run(["git", "-C", str(tmp_path / "one"), "status", "--porcelain"],
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert status.stdout == ""
    log = subprocess.run(["git", "-C", str(tmp_path / "one"), "log", "--oneline"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert len(log.stdout.splitlines()) == 1


def test_refusals_before_anything_is_installed(tmp_path: Path) -> None:
    no_tests = tmp_path / "no-tests"
    shutil.copytree(PROJECT / "src", no_tests / "src")
    project = fetch_project(str(no_tests), tmp_path / "w1", tmp_path / "cache")
    assert "no test files" in (_refuse(project, project.root) or "")
    only_tests = tmp_path / "only-tests"
    shutil.copytree(PROJECT / "tests", only_tests / "tests")
    project = fetch_project(str(only_tests), tmp_path / "w2", tmp_path / "cache")
    assert "no Python source files" in (_refuse(project, project.root) or "")
    compiled = tmp_path / "compiled"
    shutil.copytree(PROJECT, compiled)
    (compiled / "src" / "minicalc" / "fast.pyx").write_text("def f(): pass\n")
    project = fetch_project(str(compiled), tmp_path / "w3", tmp_path / "cache")
    assert "compiled extensions" in (_refuse(project, project.root) or "")
    with pytest.raises(DataError, match="NAME==VERSION"):
        fetch_project("not a requirement", tmp_path / "w4", tmp_path / "cache")


def test_a_modifier_writing_a_syntax_error_or_raising_is_counted_never_fatal(monkeypatch) -> None:
    import forge_data.synth._bugs as bugs

    get_entities, _modifiers = bugs._swesmith()

    class Rewrite:
        rewrite = "def broken(:\n    pass\n"

    class Broken:
        name = "broken_syntax"

        def __init__(self, likelihood: float = 1.0, seed: int = 0) -> None:
            self.likelihood = likelihood

        def can_change(self, entity: object) -> bool:
            return True

        def modify(self, entity: object) -> Rewrite:
            return Rewrite()

    class Raising(Broken):
        name = "raising"

        def modify(self, entity: object) -> Rewrite:
            raise AttributeError("a libcst transform failed")

    monkeypatch.setattr(bugs, "_swesmith", lambda: (get_entities, [Broken(), Raising()]))
    counts: dict = {}
    assert list(candidates(PROJECT, 1, 30, counts)) == []
    assert counts["broken_syntax"]["syntax_error"] + counts["raising"]["modifier_error"] == 30
    assert counts["broken_syntax"]["syntax_error"] > 0 and counts["raising"]["modifier_error"] > 0


def test_a_git_repository_gives_its_files_without_ignored_ones_or_history(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(PROJECT, repo)
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "debug.log").write_text("noise\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    project = fetch_project(str(repo), tmp_path / "work", tmp_path / "cache")
    files = sorted(p.relative_to(project.root).as_posix() for p in project.root.rglob("*"))
    assert "src/minicalc/numbers.py" in files and "tests/test_numbers.py" in files
    assert "debug.log" not in files and not any(f.startswith(".git/") for f in files)
    assert (project.name, project.version, project.repository) == (
        "minicalc",
        "1.2.0",
        "local/minicalc",
    )


def test_the_venv_is_relocated_to_workspace_whatever_the_script_header(tmp_path: Path) -> None:
    """uv writes `#!<venv>/bin/python`, or past the kernel's shebang limit a /bin/sh
    trampoline naming the synth-time path: both become /workspace/.venv's python, RECORD
    follows, and the activate scripts (synth-time paths) go."""
    from forge_data.synth._env import _relocate

    venv = tmp_path / ".venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "tool-1.0.dist-info").mkdir(parents=True)
    (venv / "bin").mkdir()
    long = "/x" * 80 + "/.venv/bin/python"
    (venv / "bin" / "short").write_text(f"#!{tmp_path}/.venv/bin/python\nimport tool\n")
    (venv / "bin" / "long").write_text(
        f"#!/bin/sh\n'''exec' '{long}' \"$0\" \"$@\"\n' '''\nimport tool\n"
    )
    (venv / "bin" / "activate").write_text(f"VIRTUAL_ENV={tmp_path}\n")
    (venv / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ncommand = /usr/bin/python3 -m venv {venv}\n"
    )
    (site / "tool-1.0.dist-info" / "RECORD").write_text(
        "../../../bin/short,sha256=old,1\n../../../bin/long,sha256=old,1\ntool.py,sha256=k,3\n"
    )
    _relocate(venv)
    for name in ("short", "long"):
        assert (venv / "bin" / name).read_text() == "#!/workspace/.venv/bin/python\nimport tool\n"
    assert not (venv / "bin" / "activate").exists()
    assert "command" not in (venv / "pyvenv.cfg").read_text()
    record = (site / "tool-1.0.dist-info" / "RECORD").read_text().splitlines()
    assert record[0].startswith("../../../bin/short,sha256=") and "old" not in record[0]
    assert record[0].endswith(",42") and record[2] == "tool.py,sha256=k,3"  # 42 bytes now


def test_the_suite_limit_is_a_rung_so_load_does_not_change_the_tasks() -> None:
    from forge_data.synth._synth import suite_timeout

    assert [suite_timeout(s) for s in (0.4, 1.9, 2.4, 4.9)] == [45] * 4
    assert [suite_timeout(s) for s in (5.1, 13.9, 14.1, 31.9, 60.0)] == [90, 90, 180, 180, 300]
