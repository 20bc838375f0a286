"""Synthesis's keep / drop rules, without a sandbox: a candidate is kept only when a test that
passed twice at baseline now fails (and no kept candidate failed the same set), dropped with a
named reason otherwise; a synthesized task survives curation only when NOP scores 0 and the
oracle 1, each without an infrastructure error, else it is dropped with the reason."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_data.synth import ReportedTest, _synth
from forge_data.synth._bugs import Candidate
from forge_data.synth._synth import _Probe, _State, _validate

BASELINE = {"t::a", "t::b", "t::c"}


def _candidate(index: int = 0) -> Candidate:
    return Candidate(
        index=index, path="pkg/m.py", entity="f@1", modifier="m", text="x = 1\n", bug_diff=""
    )


def _probe(*tests: tuple[str, str] | ReportedTest, exit_code: str = "1") -> _Probe:
    reported = [
        t if isinstance(t, ReportedTest) else ReportedTest(name=t[0], status=t[1]) for t in tests
    ]
    return _Probe(tests=reported, exit_code=exit_code, output="", seconds=1.0)


def _state(base_errors: set[str] | None = None) -> _State:
    return _State(set(BASELINE), base_errors or set())


# ------------------------------------------------------------------ a candidate
@pytest.mark.parametrize(
    ("probe", "verdict"),
    [
        (None, "breaks_suite"),  # no trial at all
        (_Probe(tests=None, exit_code="124", output="", seconds=None), "timeout"),
        (_Probe(tests=None, exit_code="137", output="", seconds=None), "timeout"),
        (_Probe(tests=None, exit_code="1", output="", seconds=None), "breaks_suite"),
        (_Probe(tests=None, exit_code="", output="", seconds=None), "breaks_suite"),
    ],
)
def test_a_run_without_a_report_is_dropped_with_its_reason(probe, verdict) -> None:
    state = _state()
    assert state.decide(_candidate(), probe) == verdict
    assert state.kept == [] and state.failing_sets == set()


def test_a_new_collection_error_breaks_collection_an_old_one_does_not() -> None:
    error = ReportedTest(name="tests/test_x.py", status="failed", type="collection")
    state = _state()
    assert state.decide(_candidate(), _probe(error, ("t::a", "failed"))) == "breaks_collection"
    known = _state({"tests/test_x.py"})
    assert known.decide(_candidate(), _probe(error, ("t::a", "failed"))) == "kept"


@pytest.mark.parametrize(
    "tests",
    [
        [("t::a", "passed"), ("t::b", "passed")],
        [("t::new", "failed"), ("t::a", "passed")],  # only a test outside the baseline fails
        [("t::a", "skipped"), ("t::b", "error")],  # not a failure
        [],
    ],
)
def test_a_candidate_that_breaks_no_baseline_test_is_dropped(tests) -> None:
    assert _state().decide(_candidate(), _probe(*tests)) == "no_failure"


def test_a_kept_candidate_records_its_failing_and_still_passing_tests() -> None:
    state = _state()
    probe = _probe(("t::c", "failed"), ("t::a", "failed"), ("t::b", "passed"), ("t::x", "passed"))
    candidate = _candidate(3)
    assert state.decide(candidate, probe) == "kept"
    assert len(state.kept) == 1
    kept, failing, still = state.kept[0]
    assert kept is candidate
    assert [t.name for t in failing] == ["t::a", "t::c"]  # sorted by name
    assert still == ["t::b"]  # baseline tests still passing (t::x was never in the baseline)
    assert state.failing_sets == {frozenset({"t::a", "t::c"})}


def test_a_candidate_failing_the_same_set_as_a_kept_one_is_dropped() -> None:
    state = _state()
    assert state.decide(_candidate(0), _probe(("t::a", "failed"))) == "kept"
    assert state.decide(_candidate(1), _probe(("t::a", "failed"), ("t::b", "passed"))) == (
        "same_failures"
    )
    assert state.decide(_candidate(2), _probe(("t::a", "failed"), ("t::b", "failed"))) == "kept"
    assert [c.index for c, _, _ in state.kept] == [0, 2]


# ------------------------------------------------------------------ a synthesized task
def _trial(name: str, reward: float | None, exception: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(task_name=name, reward=reward, exception_type=exception)


def _validate_with(monkeypatch, tmp_path: Path, nop: list, oracle: list, names: list[str]):
    final = tmp_path / "final"
    for name in names:
        (final / name).mkdir(parents=True)
    (final / "synth-report.json").write_text("{}")  # a file, not a task
    calls: list[tuple] = []

    def fake_job(kind, tasks, job, run):
        calls.append((kind, tasks, job, run))
        return SimpleNamespace(trials={"nop": nop, "oracle": oracle}[kind])

    monkeypatch.setattr(_synth, "run_sandbox_job", fake_job)
    report = SimpleNamespace(validation_failed={})
    config = SimpleNamespace(backend="docker", concurrency=3)
    good = _validate(config, tmp_path / "work", final, report)  # type: ignore[arg-type]
    return good, report.validation_failed, calls


def test_a_task_is_kept_only_when_nop_scores_0_and_the_oracle_1(monkeypatch, tmp_path) -> None:
    names = ["ok", "nop-passes", "oracle-fails", "oracle-half", "nop-none", "no-oracle", "infra"]
    nop = [
        _trial("ok", 0.0),
        _trial("nop-passes", 1.0),
        _trial("oracle-fails", 0.0),
        _trial("oracle-half", 0.0),
        _trial("nop-none", None),
        _trial("no-oracle", 0.0),
        _trial("infra", 0.0, "VerifierTimeoutError"),
    ]
    oracle = [
        _trial("ok", 1.0),
        _trial("nop-passes", 1.0),
        _trial("oracle-fails", 0.0),
        _trial("oracle-half", 0.5),
        _trial("nop-none", 1.0),
        _trial("infra", 1.0),
    ]
    good, failed, calls = _validate_with(monkeypatch, tmp_path, nop, oracle, names)
    assert good == {"ok"}
    assert failed == {
        "infra": "infrastructure: VerifierTimeoutError",
        "no-oracle": "no NOP or oracle trial",
        "nop-none": "NOP scored None (expected 0)",
        "nop-passes": "NOP scored 1.0 (expected 0)",
        "oracle-fails": "oracle scored 0.0 (expected 1)",
        "oracle-half": "oracle scored 0.5 (expected 1)",
    }
    assert [(kind, tasks, job) for kind, tasks, job, _ in calls] == [
        ("nop", tmp_path / "final", tmp_path / "work" / "jobs" / "nop"),
        ("oracle", tmp_path / "final", tmp_path / "work" / "jobs" / "oracle"),
    ]
    for *_, run in calls:
        assert (run.backend, run.concurrency, run.verifier_timeout_s, run.quiet) == (
            "docker",
            3,
            600,
            True,
        )


def test_an_infrastructure_error_on_either_side_drops_the_task(monkeypatch, tmp_path) -> None:
    nop = [_trial("a", 0.0), _trial("b", 0.0, "NopError"), _trial("c", None, "Both")]
    oracle = [_trial("a", 1.0, "OracleError"), _trial("b", 1.0), _trial("c", None, "Second")]
    good, failed, _ = _validate_with(monkeypatch, tmp_path, nop, oracle, ["a", "b", "c", "d"])
    assert good == set()
    assert failed == {
        "a": "infrastructure: OracleError",
        "b": "infrastructure: NopError",
        "c": "infrastructure: Both",  # the NOP's is named first
        "d": "no NOP or oracle trial",
    }
    good, failed, _ = _validate_with(monkeypatch, tmp_path / "x", [], [_trial("e", 1.0)], ["e"])
    assert (good, failed) == (set(), {"e": "no NOP or oracle trial"})
