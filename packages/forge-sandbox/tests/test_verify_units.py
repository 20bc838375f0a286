"""The verifier's reward derivation piece by piece, no sandbox: which reward file is read, every
refusal's exact text, a run that hit a limit, the listed tests deciding the reward, the evidence
that the tests ran, and the result lines read for the listed ids. A fake sandbox carries only
the `spec` the messages quote."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_sandbox import SandboxSpec
from forge_sandbox._errors import (
    AddTestsDirError,
    DownloadVerifierDirError,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    SandboxError,
    TaskLayoutError,
    VerifierFileSizeLimitError,
    VerifierNoEvidenceError,
    VerifierOOMError,
    VerifierOutputParseError,
    VerifierPidsLimitError,
    VerifierTimeoutError,
)
from forge_sandbox._spec import ExecResult
from forge_sandbox.verify._evidence import EVIDENCE_FIX, REPORT_MAX_BYTES, Evidence, find_evidence
from forge_sandbox.verify._testlist import (
    TestReport,
    check_listed,
    listed_tests,
    result_lines,
)
from forge_sandbox.verify._verifier import (
    RESET_VERIFIER_DIR,
    VerifierResult,
    _check_range,
    _check_run,
    _grade_listed,
    _no_evidence,
    parse_rewards,
    reward_files_named,
    run_verifier,
)

BOX = SimpleNamespace(spec=SandboxSpec(memory_mb=300, pids_max=64, file_size_mb=5))


def _run(**fields) -> ExecResult:
    base = {
        "stdout": "",
        "stderr": "",
        "exit_code": 0,
        "timed_out": False,
        "oom_killed": False,
        "duration_s": 1.5,
    }
    return ExecResult(**{**base, **fields})


def _error(call, kind: type[BaseException]) -> str:
    with pytest.raises(kind) as info:
        call()
    assert type(info.value) is kind
    return str(info.value)


# ------------------------------------------------------------------ the reward files
def _folder(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode() if isinstance(text, str) else text)
    return tmp_path


def test_a_reward_outside_zero_one_is_a_broken_verifier() -> None:
    for value in (0.0, 1.0, 0.5):
        _check_range("here", value)
    for value in (-0.01, 1.01, 2):
        assert _error(lambda v=value: _check_range("here", v), VerifierOutputParseError) == (
            f"here: expected a reward in [0, 1] (1 = solved, 0 = not); found {value!r}; fix: "
            "the task's tests/test.sh must write 1 or 0"
        )


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"test.sh": "echo 1 > /logs/verifier/reward.txt"}, {"reward.txt"}),
        ({"test.sh": "python write.py", "write.py": "open('reward.json')"}, {"reward.json"}),
        ({"a.sh": "reward.txt", "b.py": "reward.json"}, set()),  # both named: Harbor's order
        ({"test.sh": "pytest"}, set()),
    ],
)
def test_the_reward_files_the_task_scripts_name(tmp_path: Path, files, expected) -> None:
    assert reward_files_named(_folder(tmp_path, files)) == frozenset(expected)


def test_only_small_regular_files_name_a_reward_file(tmp_path: Path) -> None:
    tests = _folder(tmp_path / "tests", {"test.sh": "echo 1 > /logs/verifier/reward.txt"})
    at_cap = b"reward.json".ljust(1 << 20, b" ")
    (tests / "big.txt").write_bytes(at_cap)  # exactly 1 MiB: still read
    assert reward_files_named(tests) == frozenset()
    (tests / "big.txt").write_bytes(at_cap + b" ")  # over 1 MiB: not read
    assert reward_files_named(tests) == {"reward.txt"}
    outside = _folder(tmp_path / "outside", {"names.txt": "reward.json"})
    os.symlink(outside / "names.txt", tests / "link.txt")  # a link is not the task's script
    (tests / "reward.json").mkdir()  # a folder's name is not text in a script
    assert reward_files_named(tests) == {"reward.txt"}


@pytest.mark.parametrize(
    ("files", "only", "expected"),
    [
        ({"reward.json": '{"reward": 1}', "reward.txt": "0"}, set(), {"reward": 1}),
        ({"reward.json": '{"reward": 1}', "reward.txt": "0"}, {"reward.txt"}, {"reward": 0.0}),
        ({"reward.json": '{"a": 0.5}', "reward.txt": "0"}, {"reward.json"}, {"a": 0.5}),
        ({"reward.txt": " 1\n"}, set(), {"reward": 1.0}),
        ({"reward.txt": "0"}, {"reward.txt"}, {"reward": 0.0}),
        ({"reward.json": '{"x": 0, "y": 1.0}'}, {"reward.json"}, {"x": 0, "y": 1.0}),
    ],
)
def test_which_reward_file_is_read(tmp_path: Path, files, only, expected) -> None:
    folder = _folder(tmp_path, files)
    assert parse_rewards(folder, frozenset(only)) == expected


def test_a_file_the_scripts_do_not_name_is_never_read(tmp_path: Path) -> None:
    planted = _folder(tmp_path / "a", {"reward.json": '{"reward": 1}'})
    message = _error(
        lambda: parse_rewards(planted, frozenset({"reward.txt"})), RewardFileNotFoundError
    )
    assert message == (
        "no reward file: expected /logs/verifier/reward.json or /logs/verifier/reward.txt after "
        "test.sh; found neither; fix: the task's tests/test.sh must write one of them"
    )
    planted_txt = _folder(tmp_path / "b", {"reward.txt": "1"})
    _error(lambda: parse_rewards(planted_txt, frozenset({"reward.json"})), RewardFileNotFoundError)


@pytest.mark.parametrize(
    ("only", "planted"),
    [({"reward.txt"}, ".reward.json-not-read"), ({"reward.json"}, ".reward.txt-not-read")],
)
def test_a_planted_stand_in_name_is_never_read(tmp_path: Path, only, planted) -> None:
    folder = _folder(tmp_path, {planted: "1"})  # and no reward file the scripts name
    with pytest.raises(RewardFileNotFoundError):
        parse_rewards(folder, frozenset(only))


def test_empty_reward_files_are_named(tmp_path: Path) -> None:
    json_folder = _folder(tmp_path / "j", {"reward.json": ""})
    assert _error(lambda: parse_rewards(json_folder), RewardFileEmptyError) == (
        f"reward file is empty: {json_folder / 'reward.json'}"
    )
    txt_folder = _folder(tmp_path / "t", {"reward.txt": ""})
    assert _error(lambda: parse_rewards(txt_folder), RewardFileEmptyError) == (
        f"reward file is empty: {txt_folder / 'reward.txt'}"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "reward.json: expected a non-empty JSON object of numbers; found [1]"),
        ("{}", "reward.json: expected a non-empty JSON object of numbers; found {}"),
        ('{"r": "1"}', "reward.json: expected a number for 'r'; found '1'"),
        ('{"r": true}', "reward.json: expected a number for 'r'; found True"),
        ('{"r": NaN}', "reward.json: expected a finite number for 'r'; found nan"),
        ('{"r": Infinity}', "reward.json: expected a finite number for 'r'; found inf"),
        (
            '{"r": 1.5}',
            "reward.json 'r': expected a reward in [0, 1] (1 = solved, 0 = not); found 1.5; fix: "
            "the task's tests/test.sh must write 1 or 0",
        ),
    ],
)
def test_a_reward_json_that_is_not_a_reward_is_refused(tmp_path: Path, text, message) -> None:
    folder = _folder(tmp_path, {"reward.json": text})
    assert _error(lambda: parse_rewards(folder), VerifierOutputParseError) == message


def test_invalid_reward_json_is_refused_with_the_parser_message(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"reward.json": "{1"})
    message = _error(lambda: parse_rewards(folder), VerifierOutputParseError)
    assert message.startswith(
        "reward.json: expected a JSON object of numbers; found invalid JSON (Expecting property "
        "name enclosed in double quotes: line 1 column 2 (char 1))"
    )
    not_utf8 = _folder(tmp_path / "b", {"reward.json": b'{"r": "\xff"}'})
    assert "found invalid JSON ('utf-8' codec can't decode byte 0xff" in _error(
        lambda: parse_rewards(not_utf8), VerifierOutputParseError
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"one", "reward.txt: expected one number; found 'one'"),
        (b"\xff1", "reward.txt: expected one number; found '\ufffd1'"),  # bytes replaced
        (b"x" * 100, f"reward.txt: expected one number; found {'x' * 80!r}"),
        (b"nan", "reward.txt: expected a finite number; found nan"),
        (b"-inf", "reward.txt: expected a finite number; found -inf"),
        (
            b"2",
            "reward.txt: expected a reward in [0, 1] (1 = solved, 0 = not); found 2.0; fix: the "
            "task's tests/test.sh must write 1 or 0",
        ),
    ],
)
def test_a_reward_txt_that_is_not_a_reward_is_refused(tmp_path: Path, raw, message) -> None:
    folder = _folder(tmp_path, {"reward.txt": raw})
    assert _error(lambda: parse_rewards(folder), VerifierOutputParseError) == message


def test_the_result_reward_is_reward_else_the_only_value() -> None:
    def result(rewards):
        return VerifierResult(rewards=rewards, exit_code=0, duration_s=0, stdout="", stderr="")

    assert result({"reward": 1, "other": 0}).reward == 1.0
    assert result({"only": 0}).reward == 0.0
    assert result({"a": 1, "b": 0}).reward is None
    assert type(result({"reward": 1}).reward) is float


# ------------------------------------------------------------------ a run that hit a limit
def test_a_run_that_finished_as_written_passes() -> None:
    _check_run(_run(exit_code=1), BOX, 30.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "kind", "message"),
    [
        (
            {"timed_out": True, "exit_code": 124},
            VerifierTimeoutError,
            "verifier: expected tests/test.sh to finish within 2.5 s; found it still running "
            "(killed with its process tree); fix: raise the verifier timeout "
            "(--verifier-timeout, or [verifier] timeout_sec in task.toml)",
        ),
        (
            {"oom_killed": True, "exit_code": 137},
            VerifierOOMError,
            "verifier: expected tests/test.sh to run to completion; found a process of it "
            "OOM-killed at the sandbox's 300 MiB memory limit (exit 137): any reward it wrote "
            "first is not trusted; fix: raise the task's memory_mb, or see what filled memory "
            "(/tmp is charged to it)",
        ),
        (
            {"pids_limit_hit": True, "exit_code": 1},
            VerifierPidsLimitError,
            "verifier: expected tests/test.sh to run to completion; found a process of it "
            "refused a fork or thread at the sandbox's pids_max=64 (exit 1): any reward it wrote "
            "is not trusted; fix: raise the sandbox's pids_max (SandboxSpec.pids_max), or see "
            "what the tests spawn",
        ),
        (
            {"file_size_limit_hit": True, "exit_code": 153},
            VerifierFileSizeLimitError,
            "verifier: expected tests/test.sh to run to completion; found it killed by SIGXFSZ, "
            "a file written past file_size_mb=5 (exit 153): any reward it wrote is not trusted; "
            "fix: raise the sandbox's file_size_mb, or see what the tests write",
        ),
    ],
)
def test_a_run_that_hit_a_limit_has_no_reward(fields, kind, message) -> None:
    assert _error(lambda: _check_run(_run(**fields), BOX, 2.5), kind) == message  # type: ignore[arg-type]


def test_the_first_limit_in_order_names_the_failure() -> None:
    everything = _run(
        timed_out=True, oom_killed=True, pids_limit_hit=True, file_size_limit_hit=True
    )
    _error(lambda: _check_run(everything, BOX, 1.0), VerifierTimeoutError)  # type: ignore[arg-type]
    rest = _run(oom_killed=True, pids_limit_hit=True, file_size_limit_hit=True)
    _error(lambda: _check_run(rest, BOX, 1.0), VerifierOOMError)  # type: ignore[arg-type]
    last = _run(pids_limit_hit=True, file_size_limit_hit=True)
    _error(lambda: _check_run(last, BOX, 1.0), VerifierPidsLimitError)  # type: ignore[arg-type]


# ------------------------------------------------------------------ evidence
def test_a_reward_without_evidence_is_no_verdict() -> None:
    plain = str(_no_evidence({"reward": 0.0}, truncated=False))
    assert plain == (
        "verifier: expected evidence that the tests ran (SWE-bench test-output markers, a test "
        "runner's result lines or summary, a junit or CTRF report) with its reward; found rewards "
        "{'reward': 0.0} without any: a broken environment, not a verdict (retried in curation, "
        f"never a rejection); fix: {EVIDENCE_FIX}"
    )
    cut = str(_no_evidence({"reward": 1}, truncated=True))
    assert cut == plain.replace(
        "{'reward': 0.0} without any",
        "{'reward': 1} without any (its "
        "output passed the sandbox's max_output_bytes and was cut: raise it)",
    )
    assert isinstance(_no_evidence({}, truncated=False), VerifierNoEvidenceError)


# ------------------------------------------------------------------ the listed tests
def _task(tmp_path: Path, fail_to_pass: list[str], pass_to_pass: list[str]) -> SimpleNamespace:
    (tmp_path / "task.toml").write_text(
        f"[metadata]\nfail_to_pass = {json.dumps(fail_to_pass)}\n"
        f"pass_to_pass = {json.dumps(pass_to_pass)}\n"
    )
    return SimpleNamespace(path=tmp_path)


def test_a_task_that_lists_no_tests_keeps_its_rewards(tmp_path: Path) -> None:
    rewards = {"reward": 1.0}
    out = tmp_path / "out"
    out.mkdir()
    report, got = _grade_listed(_task(tmp_path, [], []), _run(), BOX, rewards, out)  # type: ignore[arg-type]
    assert report is None and got is rewards
    assert not (out / "listed-tests.json").exists()


def test_every_listed_test_passing_keeps_the_reward_and_writes_the_report(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    task = _task(tmp_path, ["t.py::test_a"], ["t.py::test_b"])
    run = _run(stdout="PASSED t.py::test_a\n", stderr="t.py::test_b PASSED [100%]\n")
    report, rewards = _grade_listed(task, run, BOX, {"reward": 1.0, "x": 1}, out)  # type: ignore[arg-type]
    assert report == TestReport(
        listed=2, result_lines=2, passed=("t.py::test_a", "t.py::test_b"), failed=(), missing=()
    )
    assert rewards == {"reward": 1.0, "x": 1}
    written = json.loads((out / "listed-tests.json").read_text())
    assert written == {
        "schema_version": "forge-sandbox/listed-tests@1",
        "listed": 2,
        "result_lines": 2,
        "passed": ["t.py::test_a", "t.py::test_b"],
        "failed": [],
        "missing": [],
    }


def test_a_listed_test_not_seen_passing_zeroes_every_reward(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    task = _task(tmp_path, ["t.py::test_a"], ["t.py::test_b"])
    run = _run(stdout="PASSED t.py::test_a\n")  # test_b never ran
    report, rewards = _grade_listed(task, run, BOX, {"reward": 1.0, "x": 1}, out)  # type: ignore[arg-type]
    assert report is not None and report.missing == ("t.py::test_b",)
    assert rewards == {"reward": 0.0, "x": 0.0}
    assert json.loads((out / "listed-tests.json").read_text())["missing"] == ["t.py::test_b"]


def test_a_run_with_no_result_line_in_any_format_read_is_no_verdict(tmp_path: Path) -> None:
    """jest's `✓ title` lines (a SWE-bench Multilingual JavaScript row) are no format the
    listed check reads: that is no verdict, not a 0 for every trial, the oracle's included."""
    out = tmp_path / "out"
    out.mkdir()
    task = _task(tmp_path, ["renders the title"], [])
    run = _run(stdout="PASS src/a.test.js\n  \u2713 renders the title (5 ms)\n")
    message = _error(
        lambda: _grade_listed(task, run, BOX, {"reward": 1.0}, out),  # type: ignore[arg-type]
        VerifierNoEvidenceError,
    )
    assert message.startswith(
        "verifier: expected result lines of the task's 1 listed tests in test.sh's output "
        "(pytest -rA or -v, unittest -v, SymPy's bin/test, go test -v, cargo test); found no "
        "test's result line in any of these"
    )
    assert json.loads((out / "listed-tests.json").read_text())["result_lines"] == 0
    # a collection error is a result line: its listed tests are missing, the reward 0
    crashed = _run(stdout="ERROR tests/test_a.py - ImportError: cannot import name 'b'\n")
    (tmp_path / "c").mkdir()
    report, rewards = _grade_listed(
        _task(tmp_path / "c", ["tests/test_a.py::test_b"], []), crashed, BOX, {"reward": 1.0}, out
    )  # type: ignore[arg-type]
    assert report is not None and report.missing == ("tests/test_a.py::test_b",)
    assert rewards == {"reward": 0.0}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # go test -v as SWE-bench's parser reads it (ids: the test, a subtest by its path)
        ("=== RUN   TestA\n--- PASS: TestA (0.00s)\n    --- FAIL: TestA/sub_1 (0.01s)\n",
         {"TestA": {"PASSED"}, "TestA/sub_1": {"FAILED"}}),
        ("--- SKIP: TestB (0.00s)\n", {"TestB": {"SKIPPED"}}),
        # cargo test (libtest)
        ("test regression::r1878 ... ok\ntest tests::b ... FAILED\ntest slow ... ignored\n",
         {"regression::r1878": {"PASSED"}, "tests::b": {"FAILED"}, "slow": {"SKIPPED"}}),
        ("test result: ok. 1 passed; 0 failed\n", {}),
    ],
)  # fmt: skip
def test_go_and_cargo_result_lines(text: str, expected: dict) -> None:
    assert result_lines(text) == expected


def test_a_cut_output_gives_no_verdict_on_listed_tests(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    task = _task(tmp_path, ["t.py::test_a", "t.py::test_c"], [])
    box = SimpleNamespace(spec=SandboxSpec(max_output_bytes=4096))
    run = _run(stdout="PASSED t.py::test_a\nPASSED t.py::test_c\n", output_truncated=True)
    message = _error(
        lambda: _grade_listed(task, run, box, {"reward": 1.0}, out),  # type: ignore[arg-type]
        VerifierNoEvidenceError,
    )
    assert message == (
        "verifier: expected every result line of the task's 2 listed tests in test.sh's output; "
        "found it cut at max_output_bytes=4096 (a flood can hide failing lines): no verdict; "
        "fix: raise the sandbox's max_output_bytes, or make the tests quieter"
    )
    assert (out / "listed-tests.json").is_file()  # the report is kept for the reader


START, END = ">>>>> Start Test Output", ">>>>> End Test Output"


# what each runner printed for one passing and one failing test (captured, 2026-12-04)
MOCHA = "  calc\n    ✔ adds\n    1) fails\n\n\n  1 passing (5ms)\n  1 failing\n\n  1) calc\n"
JEST = (
    "Test Suites: 1 failed, 1 total\nTests:       1 failed, 1 passed, 2 total\n"
    "Snapshots:   0 total\nTime:        0.449 s\nRan all test suites matching t/a.test.js.\n"
)
VITEST = (  # with its colour codes, which it writes to a pipe too
    "\x1b[2m Test Files \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[90m (1)\x1b[39m\n"
    "\x1b[2m      Tests \x1b[22m \x1b[1m\x1b[31m1 failed\x1b[39m\x1b[22m\x1b[2m | \x1b[22m"
    "\x1b[1m\x1b[32m1 passed\x1b[39m\x1b[22m\x1b[90m (2)\x1b[39m\n"
)
NODE_TAP = "1..2\n# tests 2\n# suites 0\n# pass 1\n# fail 1\n# cancelled 0\n"
NODE_SPEC = "\u2139 tests 2\n\u2139 suites 0\n\u2139 pass 1\n\u2139 fail 1\n"
# ava 7 (one passing, one failing, one skipped: it counts only the failure) and ava 2
AVA = (
    "\n  - [skip] slow\n  \u2714 adds\n  \u2718 [fail]: broken\n  \u2500\n\n"
    "  1 test failed\n  1 test skipped\n"
)
AVA2 = "\n  \u2714 adds\n\n  1 test passed\n\n"
TAPJS = (
    "ok 1 - test/tp.js # time=8.373ms\n\n# No coverage generated\n"
    "# { total: 2, pass: 1, fail: 1 }\n"
)
TAPE = "not ok 2 should be strictly equal\n\n1..2\n# tests 2\n# pass  1\n# fail  1\n\n"
UVU = "\n\n  Total:     2\x1b[31m\n  Passed:    1\x1b[39m\n  Skipped:   0\n  Duration:  1.54ms\n\n"
# cargo 1.9x's libtest: two test binaries (a unit-test one, an integration one)
CARGO = (
    "     Running unittests src/lib.rs (target/debug/deps/demo-8348ca7a80742723)\n\n"
    "running 2 tests\ntest tests::adds_neg ... ok\ntest tests::broken ... FAILED\n\n"
    "test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 2 filtered out; "
    "finished in 0.00s\n\n     Running tests/spec_tests.rs (target/debug/deps/spec_tests-cd2d)\n\n"
    "running 1 test\ntest integ ... ok\n\n"
    "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; "
    "finished in 0.00s\n\n"
)
CARGO_NONE = (  # a name filter that matched no test in either binary
    "running 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; "
    "4 filtered out; finished in 0.00s\n\nrunning 0 tests\n\ntest result: ok. 0 passed; "
    "0 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.00s\n"
)
GO_FAIL = (  # go 1.19, no -v: the failing test's line, its package, a package without tests
    "--- FAIL: TestBroken (0.00s)\n    m_test.go:4: bad\nFAIL\nFAIL\texample.com/m\t0.002s\n"
    "?   \texample.com/m/sub\t[no test files]\nFAIL\n"
)
GO_OK = "ok  \texample.com/m\t0.002s\n?   \texample.com/m/sub\t[no test files]\n"
# go 1.19 -v over three packages (captured 2026-12-04): calc's binary exits 0 in its `init`
# (`func init() { os.Exit(0) }`): go prints its `ok` line alone, no test of it ran
GO_V_GOOD = (
    "=== RUN   TestMul\n--- PASS: TestMul (0.00s)\n=== RUN   TestNothing\n"
    "--- PASS: TestNothing (0.00s)\nPASS\nok  \texample.com/gox/good\t0.002s\n"
)
GO_V_EMPTY = (
    "testing: warning: no tests to run\nPASS\nok  \texample.com/gox/empty\t0.006s "
    "[no tests to run]\n"
)
GO_V_INIT_EXIT = "ok  \texample.com/gox/calc\t0.005s\n" + GO_V_EMPTY + GO_V_GOOD
GO_V_COVER = (  # -v -cover: a `coverage:` line between PASS and ok
    "=== RUN   TestMul\n--- PASS: TestMul (0.00s)\nPASS\ncoverage: 100.0% of statements\n"
    "ok  \texample.com/gox/good\t0.002s\tcoverage: 100.0% of statements\n"
)
# cargo 1.9x, stdout (captured 2026-12-04): tests/add.rs calls library code that runs
# `std::process::exit(0)`; its binary began and printed no result; cargo exited 0
CARGO_CUT = (
    "\nrunning 1 test\ntest tests::mul_works ... ok\n\ntest result: ok. 1 passed; 0 failed; "
    "0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n\nrunning 2 tests\n\n"
    "running 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; "
    "0 filtered out; finished in 0.00s\n\n"
)
# Maven 3.8 + surefire 2.22 (Debian's, offline): a class line, then the module's summary
MAVEN = (
    "[INFO] Running calc.CalcTest\n[ERROR] Tests run: 2, Failures: 1, Errors: 0, Skipped: 0, "
    "Time elapsed: 0.133 s <<< FAILURE! - in calc.CalcTest\n[INFO] \n[INFO] Results:\n"
    "[ERROR] Failures: \n[ERROR]   CalcTest.add:5 expected:<5> but was:<-1>\n[INFO] \n"
    "[ERROR] Tests run: 2, Failures: 1, Errors: 0, Skipped: 0\n"
)
MAVEN_COLOUR = (  # without -B it colours a pipe too
    "[\x1b[1;34mINFO\x1b[m] \x1b[1;32mTests run: 2, Failures: 0, Errors: 0, Skipped: 0\x1b[m\n"
)


@pytest.mark.parametrize(
    ("stdout", "stderr", "kind", "detail"),
    [
        (START + END, "", "swebench-markers", "stdout: both test-output markers"),  # no gap
        # the first start marker counts: a second, unfinished run after it does not undo it
        (f"{START}\n{END}\n{START}\n", "", "swebench-markers", "stdout: both test-output markers"),
        ("", f"x{START}\n{END}", "swebench-markers", "stderr: both test-output markers"),
        (
            f"{START}\nPASSED a::b\n{END}\n",
            "",
            "swebench-markers",
            "stdout: both test-output markers",
        ),  # markers first
        (
            "PASSED a.py::t\nERROR b.py::u - boom\n",
            "",
            "pytest",
            "stdout: 2 pytest -rA result lines",
        ),
        ("", "XFAIL a::b\n", "pytest", "stderr: 1 pytest -rA result lines"),
        (
            "===== 1 failed, 2 passed in 0.50s =====\n",
            "",
            "pytest",
            "stdout: pytest summary ===== 1 failed, 2 passed in 0.50s =====",
        ),
        ("", "Ran 1 test in 0.001s\n", "unittest", "stderr: unittest ran 1 tests"),
        (
            "Ran 0 tests in 0.0s\nRan 4 tests in 1.2s\n",
            "",
            "unittest",
            "stdout: unittest ran 4 tests",
        ),
        ("nothing", "Ran 2 tests in 0.1s\n", "unittest", "stderr: unittest ran 2 tests"),
        # JavaScript runners' summaries, as mocha 11, jest 30, vitest 4 and node 20 print them
        (MOCHA, "", "js-runner", "stdout: mocha summary, 2 tests"),
        (JEST, "", "js-runner", "stdout: jest summary, 2 tests"),
        ("", JEST, "js-runner", "stderr: jest summary, 2 tests"),  # jest writes to stderr
        (VITEST, "", "js-runner", "stdout: vitest summary, 2 tests"),
        (NODE_TAP, "", "js-runner", "stdout: TAP summary, 2 tests"),
        (NODE_SPEC, "", "js-runner", "stdout: node --test summary, 2 tests"),
        # ava 7 and 2, tap 21, tape 5, uvu 0.5 (captured 2026-12-04; SWE-gen-JS runs 89 with ava)
        (AVA, "", "js-runner", "stdout: ava summary, 1 tests"),
        (AVA2, "", "js-runner", "stdout: ava summary, 1 tests"),
        (TAPJS, "", "js-runner", "stdout: tap summary, 2 tests"),
        (TAPE, "", "js-runner", "stdout: TAP summary, 2 tests"),
        (UVU, "", "js-runner", "stdout: uvu summary, 2 tests"),
        # Rust and Go (SWE-gen-JS runs 98 tasks with cargo test: biome, swc, oxc, ...)
        (CARGO, "", "cargo-test", "stdout: libtest results, 3 tests ran"),
        ("", CARGO, "cargo-test", "stderr: libtest results, 3 tests ran"),
        (GO_FAIL, "", "go-test", "stdout: 1 go test verdict lines"),
        (
            "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\nPASS\n",
            "",
            "go-test",
            "stdout: 1 go test verdict lines",
        ),
        (GO_V_EMPTY + GO_V_GOOD, "", "go-test", "stdout: 2 go test verdict lines"),
        (GO_V_COVER, "", "go-test", "stdout: 1 go test verdict lines"),
        (GO_FAIL + GO_OK, "", "go-test", "stdout: 1 go test verdict lines"),  # no -v
        (
            CARGO.replace("running 1 test\n", ""),
            "",
            "cargo-test",
            "stdout: libtest results, 3 tests ran",
        ),
        (MAVEN, "", "surefire", "stdout: Maven test summary, 2 ran"),
        (MAVEN_COLOUR, "", "surefire", "stdout: Maven test summary, 2 ran"),
        # a run cut before its summary: the per-class lines count
        (
            "[INFO] Tests run: 3, Failures: 0, Errors: 0, Skipped: 1, Time elapsed: 0.1 s\n",
            "",
            "surefire",
            "stdout: Maven test summary, 2 ran",
        ),
    ],
)
def test_the_evidence_found_and_what_it_says(stdout, stderr, kind, detail) -> None:
    assert find_evidence(stdout, stderr) == Evidence(kind=kind, detail=detail)


@pytest.mark.parametrize(
    "stream",
    [
        f"{END}{START}",
        START + END[:-1],
        f"{START[1:]}\n{END}",
        "Ran 0 tests in 0.0s\n",
        "PASSED\n",
        "pytest PASSED a::b\n",
        "  0 passing (1ms)\n",  # mocha found no test
        "Tests:       0 total\n",
        "Error: Cannot find module 'nope'\n  code: 'MODULE_NOT_FOUND'\n",  # mocha at load
        "Pattern: t/zzz - 0 matches\n",  # jest found no file
        " Test Files  1 failed (1)\n",  # vitest's file count alone is not a test's
        " Test Files  1 failed (1)\n      Tests  no tests\n",  # vitest: a file that cannot load
        "the 2 passing cars\n",
        "\n  \u2718 Couldn\u2019t find any matching tests\n\n",  # ava: nothing matched
        "  1 uncaught exception\n",  # ava: a test file that cannot load
        "Total: 2\n",  # uvu's count alone, no Passed line after it
        CARGO_NONE,
        "error: could not compile `demo` (lib test) due to 1 previous error\n",
        "ok  \texample.com/m\t0.002s [no tests to run]\n",
        GO_OK,  # without -v a package's `ok` line is all an exit 0 in its `init` prints too
        "ok  \texample.com/m\t(cached)\n",
        GO_V_INIT_EXIT,  # a package's binary that exited before its tests, beside real ones
        GO_V_GOOD.replace("PASS\nok", "ok"),
        CARGO_CUT,  # a test binary that exited part-way, beside one that finished
        CARGO + "running 2 tests\ntest a ... ok\n",  # the last binary never finished
        "FAIL\texample.com/m [build failed]\n?   \texample.com/m/sub\t[no test files]\nFAIL\n",
        "[INFO] Tests run: 1, Failures: 0, Errors: 0, Skipped: 1\n",  # skipped only
        "[ERROR] COMPILATION ERROR : \n[INFO] BUILD FAILURE\n",
    ],
)
def test_streams_that_show_nothing_ran(stream) -> None:
    assert find_evidence(stream, stream) is None


def _ctrf(count: int) -> str:
    return json.dumps({"results": {"tests": [{"name": f"t{i}"} for i in range(count)]}})


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"r.xml": "<a><testcase/><b><testcase/></b></a>"}, ("junit", "r.xml: 2 junit test cases")),
        ({"sub/c.json": _ctrf(3)}, ("ctrf", "sub/c.json: 3 CTRF tests")),
        ({"a.json": _ctrf(1), "b.xml": "<testcase/>"}, ("ctrf", "a.json: 1 CTRF tests")),  # sorted
        ({"c.xml": "<x/>", "d.json": _ctrf(2)}, ("ctrf", "d.json: 2 CTRF tests")),
        ({"reward.json": _ctrf(2)}, None),  # the reward file is never a report
        ({"r.txt": "<testcase/>", "t.yaml": _ctrf(1)}, None),  # other suffixes are not read
        ({"e.json": json.dumps([1, 2])}, None),
        ({"e.json": json.dumps({"results": [1]})}, None),
        ({"e.json": json.dumps({"results": {"tests": {"a": 1}}})}, None),
        ({"e.json": json.dumps({"results": {"tests": []}})}, None),
        ({"e.json": "{bad"}, None),
        ({"e.json": b"\xff\xfe"}, None),
        ({"e.xml": "<testcase"}, None),
        ({"e.xml": b"\x00"}, None),
    ],
)
def test_report_files_as_evidence(tmp_path: Path, files, expected) -> None:
    folder = _folder(tmp_path / "verifier", files)
    found = find_evidence("", "", folder)
    assert (None if found is None else (found.kind, found.detail)) == expected


def test_reports_that_are_links_folders_or_too_large_are_not_read(tmp_path: Path) -> None:
    assert find_evidence("", "", tmp_path / "absent") is None
    assert find_evidence("", "") is None
    folder = _folder(tmp_path / "verifier", {})
    outside = _folder(tmp_path / "outside", {"c.json": _ctrf(1)})
    os.symlink(outside / "c.json", folder / "link.json")
    (folder / "dir.xml").mkdir()
    assert find_evidence("", "", folder) is None
    report = _ctrf(1).encode()
    (folder / "big.json").write_bytes(report.ljust(REPORT_MAX_BYTES, b" "))  # at the cap: read
    found = find_evidence("", "", folder)
    assert found is not None and found.detail == "big.json: 1 CTRF tests"
    (folder / "big.json").write_bytes(report.ljust(REPORT_MAX_BYTES + 1, b" "))
    assert find_evidence("", "", folder) is None


def test_a_stream_wins_over_a_report_and_stdout_over_stderr(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"c.json": _ctrf(1)})
    found = find_evidence("Ran 1 test in 0s\n", "PASSED a::b\n", folder)
    assert found == Evidence(kind="unittest", detail="stdout: unittest ran 1 tests")


# ------------------------------------------------------------------ the listed ids
@pytest.mark.parametrize(
    ("metadata", "config", "expected"),
    [
        ('fail_to_pass = ["a", "b"]\npass_to_pass = ["c", "a"]', None, ("a", "b", "c")),
        ('fail_to_pass = \'["x"]\'\npass_to_pass = ""', None, ("x",)),  # JSON text in TOML
        ('fail_to_pass = "not json"', None, ("not json",)),
        ("fail_to_pass = 3", {"FAIL_TO_PASS": ["z"]}, ("z",)),  # neither a list nor text
        ("", {"FAIL_TO_PASS": '["p"]', "PASS_TO_PASS": ["q", 7]}, ("p", "q", "7")),
        ("", [1, 2], ()),
        ("", None, ()),
        ('fail_to_pass = ["m"]', {"FAIL_TO_PASS": ["ignored"]}, ("m",)),
    ],
)
def test_the_ids_a_task_lists(tmp_path: Path, metadata, config, expected) -> None:
    (tmp_path / "task.toml").write_text(f"[metadata]\n{metadata}\n")
    if config is not None:
        (tmp_path / "tests").mkdir()
        (tmp_path / "tests" / "config.json").write_text(json.dumps(config))
    assert listed_tests(tmp_path) == expected


def test_unreadable_task_files_list_nothing_or_fall_back(tmp_path: Path) -> None:
    (tmp_path / "task.toml").write_text("[metadata\n")
    assert listed_tests(tmp_path) == ()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "config.json").write_text('{"FAIL_TO_PASS": ["f"]}')
    assert listed_tests(tmp_path) == ("f",)
    (tmp_path / "tests" / "config.json").write_text("{broken")
    assert listed_tests(tmp_path) == ()
    (tmp_path / "task.toml").write_text('version = "1"\n')
    assert listed_tests(tmp_path) == ()


def test_every_result_line_kind_and_its_status() -> None:
    text = "\n".join(
        [
            "PASSED tests/a.py::test_one",
            "FAILED tests/a.py::test_two - AssertionError: x - y",
            "SKIPPED tests/a.py::test_six",
            "tests/b.py::test_three PASSED                    [ 50%]",
            "tests/b.py::test_four[x y] XFAIL",
            "test_five (pkg.mod.Case.test_five) ... ok",
            "test_seven (pkg.mod.Case)",
            "A docstring line between the name and the status.",
            " ... skipped 'not here'",
            "test_eight (pkg.mod.Case) ... expected failure",
            "test_sym_a ok",
            "test_sym_b F",
            "test_sym_c f",
            "test_sym_d E",
            "test_sym_e Skipped   ",
            "noise ... ok",
            "tests/c.py::test_nine PASSED   ",  # trailing blanks are dropped
            "   PASSED tests/c.py::indented",  # leading ones are not: not a result line
        ]
    )
    assert result_lines(text) == {
        "tests/a.py::test_one": {"PASSED"},
        "tests/a.py::test_two": {"FAILED"},
        "tests/a.py::test_six": {"SKIPPED"},
        "tests/b.py::test_three": {"PASSED"},
        "tests/b.py::test_four[x y]": {"XFAIL"},
        "test_five (pkg.mod.Case.test_five)": {"ok"},
        "pkg.mod.Case.test_five": {"ok"},
        "test_five (pkg.mod.Case)": {"ok"},
        "test_seven (pkg.mod.Case)": {"skipped"},
        "pkg.mod.Case": {"skipped", "expected failure"},
        "pkg.mod.Case.test_seven": {"skipped"},
        "test_seven (pkg.mod.Case.test_seven)": {"skipped"},
        "test_eight (pkg.mod.Case)": {"expected failure"},
        "pkg.mod.Case.test_eight": {"expected failure"},
        "test_eight (pkg.mod.Case.test_eight)": {"expected failure"},
        "test_sym_a": {"ok"},
        "test_sym_b": {"FAIL"},
        "test_sym_c": {"expected failure"},
        "test_sym_d": {"FAIL"},
        "test_sym_e": {"FAIL"},
        "tests/c.py::test_nine": {"PASSED"},
    }


def test_a_status_before_any_unittest_name_is_not_a_result() -> None:
    assert result_lines(" ... ok\norphan ... FAIL\n") == {}


@pytest.mark.parametrize(
    ("ids", "stdout", "stderr", "passed", "failed", "missing"),
    [
        # a module run as a script prints __main__.Class.test
        (
            ("test_hidden.Case.test_a",),
            "test_a (__main__.Case.test_a) ... ok\n",
            "",
            ("test_hidden.Case.test_a",),
            (),
            (),
        ),
        # an id with '::' or a space is never re-read as __main__
        (("a.b::c.d",), "PASSED __main__.b::c.d\n", "", (), (), ("a.b::c.d",)),
        (("mod.test_x",), "test_x (__main__.test_x) ... ok\n", "", (), (), ("mod.test_x",)),
        (("a b.C.t",), "PASSED __main__.C.t\n", "", (), (), ("a b.C.t",)),
        # every passing status at once is still passing
        (
            ("m.C.t",),
            "PASSED m.C.t\nXFAIL m.C.t\nt (m.C.t) ... ok\nt (m.C.t) ... expected failure\n",
            "",
            ("m.C.t",),
            (),
            (),
        ),
        (("__main__.C.t",), "t (__main__.C.t) ... ok\n", "", ("__main__.C.t",), (), ()),
        # the streams are read together; a failing line anywhere wins
        (("x::y",), "PASSED x::y\n", "ERROR x::y\n", (), ("x::y",), ()),
        (("x::y",), "", "PASSED x::y\n", ("x::y",), (), ()),
        ((" x::y ",), "PASSED x::y\n", "", (" x::y ",), (), ()),
        (("x::y",), "XPASS x::y\n", "", (), ("x::y",), ()),
        (("x::y", "x::z"), "XFAIL x::y\n", "", ("x::y",), (), ("x::z",)),
    ],
)
def test_how_each_listed_id_fared(ids, stdout, stderr, passed, failed, missing) -> None:
    report = check_listed(ids, stdout, stderr)
    assert (report.passed, report.failed, report.missing) == (passed, failed, missing)
    assert report.listed == len(ids)
    assert report.all_passed is (len(passed) == len(ids))


def test_all_passed_needs_a_listed_test() -> None:
    assert TestReport(listed=0, passed=(), failed=(), missing=()).all_passed is False
    assert TestReport(listed=1, passed=("a",), failed=(), missing=()).all_passed is True
    assert TestReport(listed=2, passed=("a",), failed=(), missing=("b",)).all_passed is False


# ------------------------------------------------------------------ run_verifier, step by step
class _VerifierBox:
    """A sandbox that records the verifier's calls: the reset, the upload of tests/, the run
    (answered with `run`), the download of /logs/verifier (writing `logs` there)."""

    def __init__(
        self,
        run: ExecResult,
        logs: dict[str, str],
        *,
        reset: ExecResult | None = None,
        upload_error: BaseException | None = None,
        download_error: BaseException | None = None,
    ) -> None:
        self.spec = SandboxSpec(max_output_bytes=4096)
        self.run, self.logs, self.reset = run, logs, reset or _run()
        self.upload_error, self.download_error = upload_error, download_error
        self.calls: list[tuple] = []

    async def exec(self, command, cwd=None, env=None, timeout_s=None) -> ExecResult:
        self.calls.append(("exec", command, cwd, env, timeout_s))
        return self.reset if command == RESET_VERIFIER_DIR else self.run

    async def upload(self, local_path, sandbox_path) -> None:
        self.calls.append(("upload", Path(local_path), sandbox_path))
        if self.upload_error is not None:
            raise self.upload_error

    async def download(self, sandbox_path, local_path) -> None:
        self.calls.append(("download", sandbox_path, Path(local_path)))
        if self.download_error is not None:
            raise self.download_error
        _folder(Path(local_path), self.logs)


def _verifier_task(tmp_path: Path, *, test_sh: bool = True) -> SimpleNamespace:
    tests = tmp_path / "task" / "tests"
    tests.mkdir(parents=True)
    if test_sh:
        (tests / "test.sh").write_text("pytest -rA; echo $? > /logs/verifier/reward.txt\n")
    return SimpleNamespace(
        name="demo/fix-add",
        path=tmp_path / "task",
        tests_dir=tests,
        verifier_timeout_s=180.0,
        verifier_env={"CI": "1"},
    )


def _verify(box, task, **kwargs) -> VerifierResult:
    return asyncio.run(run_verifier(box, task, **kwargs))


def test_a_verifier_run_with_its_calls_files_and_result(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)
    run = _run(stdout="PASSED t.py::test_a\n", stderr="warn\n", exit_code=1, duration_s=2.5)
    box = _VerifierBox(run, {"reward.txt": "1"})
    logs = tmp_path / "trial" / "verifier"
    result = _verify(box, task, logs_dir=logs)
    assert box.calls == [
        ("exec", RESET_VERIFIER_DIR, "/", None, None),
        ("upload", task.tests_dir, "/tests"),
        ("exec", ["bash", "/tests/test.sh"], None, {"CI": "1"}, 180.0),
        ("download", "/logs/verifier", logs),
    ]
    assert result == VerifierResult(
        rewards={"reward": 1.0},
        exit_code=1,
        duration_s=2.5,
        stdout="PASSED t.py::test_a\n",
        stderr="warn\n",
        evidence=Evidence(kind="pytest", detail="stdout: 1 pytest -rA result lines"),
        tests=None,
    )
    assert (logs / "test-stdout.txt").read_text() == "PASSED t.py::test_a\n"
    assert (logs / "test-stderr.txt").read_text() == "warn\n"
    assert json.loads((logs / "evidence.json").read_text()) == {
        "schema_version": "forge-sandbox/evidence@1",
        "kind": "pytest",
        "detail": "stdout: 1 pytest -rA result lines",
    }


def test_the_callers_timeout_wins_and_no_logs_dir_is_a_temporary_one(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)
    box = _VerifierBox(_run(stdout="Ran 2 tests in 0.1s\n"), {"reward.txt": "0"})
    result = _verify(box, task, timeout_s=7.0)
    assert box.calls[2][4] == 7.0 and result.rewards == {"reward": 0.0}
    downloaded = box.calls[3][2]
    assert downloaded.name == "verifier" and not downloaded.exists()  # removed afterwards
    assert downloaded.parent.name.startswith("forge-verifier-")


def test_an_existing_logs_dir_is_used_and_a_report_file_is_evidence(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)
    logs = tmp_path / "verifier"
    logs.mkdir()
    ctrf = json.dumps({"results": {"tests": [{"name": "t"}]}})
    box = _VerifierBox(_run(), {"reward.txt": "1", "ctrf.json": ctrf})
    result = _verify(box, task, logs_dir=logs)
    assert result.evidence == Evidence(kind="ctrf", detail="ctrf.json: 1 CTRF tests")


def test_a_limit_message_quotes_the_sandboxs_own_limit(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)
    box = _VerifierBox(_run(oom_killed=True, exit_code=137), {"reward.txt": "1"})
    message = _error(lambda: _verify(box, task), VerifierOOMError)
    assert f"at the sandbox's {box.spec.memory_mb} MiB memory limit (exit 137)" in message
    (task.path / "task.toml").write_text('[metadata]\nfail_to_pass = ["t.py::a"]\n')
    cut = _VerifierBox(_run(stdout="PASSED t.py::a\n", output_truncated=True), {"reward.txt": "1"})
    message = _error(lambda: _verify(cut, task), VerifierNoEvidenceError)
    assert "found it cut at max_output_bytes=4096" in message


def test_the_reward_file_the_scripts_name_is_the_one_read(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)  # test.sh names reward.txt only
    box = _VerifierBox(_run(stdout="Ran 1 test in 0s\n"), {"reward.json": '{"reward": 1}'})
    with pytest.raises(RewardFileNotFoundError):
        _verify(box, task)


def test_a_missing_test_script_is_a_layout_error(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path, test_sh=False)
    box = _VerifierBox(_run(), {})
    message = _error(lambda: _verify(box, task), TaskLayoutError)
    assert (
        message == "task demo/fix-add: expected tests/test.sh; found none; fix: add the test script"
    )
    assert box.calls == []


def test_a_verifier_folder_that_cannot_be_reset_stops_the_verifier(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)
    stderr = "x" * 100 + "y" * 300
    box = _VerifierBox(_run(), {}, reset=_run(exit_code=1, stderr=stderr))
    message = _error(lambda: _verify(box, task), DownloadVerifierDirError)
    assert message == (
        "expected /logs/verifier to be an empty folder before the tests; found it could not be "
        f"reset (a symlink, or files that cannot be removed): {'y' * 300!r}"
    )
    assert len(box.calls) == 1


@pytest.mark.parametrize("error", [SandboxError("tar exited 2"), OSError("disk full")])
def test_a_failed_upload_of_the_tests_is_named(tmp_path: Path, error) -> None:
    task = _verifier_task(tmp_path)
    box = _VerifierBox(_run(), {}, upload_error=error)
    message = _error(lambda: _verify(box, task), AddTestsDirError)
    assert message == f"uploading {task.tests_dir} to /tests failed: {error}"
    assert len(box.calls) == 2


@pytest.mark.parametrize("error", [SandboxError("no such path"), OSError("disk full")])
def test_a_failed_download_of_the_logs_is_named(tmp_path: Path, error) -> None:
    task = _verifier_task(tmp_path)
    box = _VerifierBox(_run(stdout="Ran 1 test in 0s\n"), {}, download_error=error)
    message = _error(lambda: _verify(box, task, logs_dir=tmp_path / "v"), DownloadVerifierDirError)
    assert message == f"copying /logs/verifier out failed: {error}"
    assert (tmp_path / "v" / "test-stdout.txt").read_text() == "Ran 1 test in 0s\n"


def test_a_limit_hit_stops_before_the_logs_are_read(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)
    box = _VerifierBox(_run(timed_out=True, exit_code=124), {"reward.txt": "1"})
    _error(lambda: _verify(box, task, logs_dir=tmp_path / "v"), VerifierTimeoutError)
    assert [c[0] for c in box.calls] == ["exec", "upload", "exec"]
    assert (tmp_path / "v" / "test-stderr.txt").read_text() == ""


def test_evidence_is_required_unless_waived(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)
    box = _VerifierBox(_run(output_truncated=True), {"reward.txt": "0"})
    message = _error(lambda: _verify(box, task), VerifierNoEvidenceError)
    assert "found rewards {'reward': 0.0} without any (its output passed" in message
    waived = _verify(
        _VerifierBox(_run(), {"reward.txt": "0"}),
        task,
        logs_dir=tmp_path / "v",
        require_evidence=False,
    )
    assert waived.evidence is None and waived.rewards == {"reward": 0.0}
    assert not (tmp_path / "v" / "evidence.json").exists()


def test_listed_tests_decide_the_reward_of_a_run(tmp_path: Path) -> None:
    task = _verifier_task(tmp_path)
    (task.path / "task.toml").write_text('[metadata]\nfail_to_pass = ["t.py::a", "t.py::b"]\n')
    box = _VerifierBox(_run(stdout="PASSED t.py::a\n"), {"reward.txt": "1"})
    result = _verify(box, task, logs_dir=tmp_path / "v")
    assert result.rewards == {"reward": 0.0}
    assert result.tests == TestReport(
        listed=2, result_lines=1, passed=("t.py::a",), failed=(), missing=("t.py::b",)
    )
    assert (tmp_path / "v" / "listed-tests.json").is_file()
