import json
import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_gates import (
    LEDGER_NAME,
    Check,
    GateError,
    Violation,
    format_marker,
    gate,
    read_ledger,
    record_gate,
)


def test_record_appends_json_line_and_prints_marker(tmp_path, capsys):
    record_gate(tmp_path, "PPO_CONTEXT_GUARD_PASSED", {"window": 40960, "reserve": 256})
    record_gate(tmp_path, "PPO_SMOKE_PASSED", {"ok": True})
    out = capsys.readouterr().out.splitlines()
    assert out == ["PPO_CONTEXT_GUARD_PASSED window=40960 reserve=256", "PPO_SMOKE_PASSED ok=true"]
    lines = (tmp_path / LEDGER_NAME).read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert list(first) == ["gate", "fields", "at"]
    assert first["gate"] == "PPO_CONTEXT_GUARD_PASSED"
    assert first["fields"] == {"window": 40960, "reserve": 256}
    assert first["at"].endswith("+00:00")
    assert [r.gate for r in read_ledger(tmp_path)] == [
        "PPO_CONTEXT_GUARD_PASSED",
        "PPO_SMOKE_PASSED",
    ]


def test_non_finite_fields_keep_the_ledger_json(tmp_path, capsys):
    """JSON has no NaN or Infinity: such a field is written as its name, as the marker shows."""
    fields = {"delta": float("inf"), "low": float("-inf"), "ev": float("nan"), "ok": 0.5,
              "per_step": [1.0, float("nan")]}  # fmt: skip
    record_gate(tmp_path, "PPO_ADAPTER_PUSH_PASSED", fields)
    assert capsys.readouterr().out == (
        "PPO_ADAPTER_PUSH_PASSED delta=inf low=-inf ev=nan ok=0.5 per_step=1.0,nan\n"
    )

    def refuse(constant: str) -> None:
        raise AssertionError(f"the ledger holds {constant}, which JSON does not have")

    (line,) = (tmp_path / LEDGER_NAME).read_text().splitlines()
    assert json.loads(line, parse_constant=refuse)["fields"] == {
        "delta": "inf", "low": "-inf", "ev": "nan", "ok": 0.5, "per_step": [1.0, "nan"]
    }  # fmt: skip
    (record,) = read_ledger(tmp_path)
    assert record.fields["delta"] == "inf"


def test_marker_formats_seed_example():
    fields = {
        "trainer_gpus": 4,
        "rollout_gpus": 1,
        "total_gpus": 5,
        "replicas": 1,
        "max_num_seqs": 10,
        "async": False,
    }
    assert format_marker("PPO_SEPARATED_ROLLOUT_GATE_PASSED", fields) == (
        "PPO_SEPARATED_ROLLOUT_GATE_PASSED trainer_gpus=4 rollout_gpus=1 total_gpus=5 "
        "replicas=1 max_num_seqs=10 async=false"
    )
    assert (
        format_marker("X", {"msg": "two words", "ids": ["a", "b"]}) == 'X msg="two words" ids=a,b'
    )


def test_gate_with_violations_raises_all_and_records_failure(tmp_path, capsys):
    check = Check("PPO_SMOKE_PASSED")
    check.require(False, rule="a", expected="1", found="0", fix="fa")
    check.require(True, rule="b", expected="1", found="1", fix="fb")
    check.require(False, rule="c", expected="2", found="3", fix="fc")
    with pytest.raises(GateError) as info:
        gate(tmp_path, check.gate, check.violations, {"x": 1})
    assert [v.rule for v in info.value.violations] == ["a", "c"]
    assert "[a] expected 1; found 0; fix: fa" in str(info.value)
    assert "[c] expected 2; found 3; fix: fc" in str(info.value)
    records = read_ledger(tmp_path)
    assert [r.gate for r in records] == ["PPO_SMOKE_FAILED"]
    assert records[0].failed and records[0].fields["rules"] == ["a", "c"]
    out = capsys.readouterr()
    assert "PPO_SMOKE_PASSED" not in out.out.split()


def test_gate_without_run_dir_prints_only(tmp_path, capsys):
    gate(None, "RUN_SPEC_GATE_PASSED", [], {"phase": "smoke"})
    assert capsys.readouterr().out.strip() == "RUN_SPEC_GATE_PASSED phase=smoke"
    assert not (tmp_path / LEDGER_NAME).exists()


def test_malformed_line_names_file_and_line(tmp_path):
    record_gate(tmp_path, "A_PASSED")
    with open(tmp_path / LEDGER_NAME, "a") as handle:
        handle.write('{"gate": 3}\n')
    with pytest.raises(GateError) as info:
        read_ledger(tmp_path)
    assert f"{tmp_path / LEDGER_NAME}:2" in str(info.value)


def test_missing_ledger_is_a_clear_error(tmp_path):
    with pytest.raises(GateError, match="no such file"):
        read_ledger(tmp_path / "nope")


def test_kill_mid_write_leaves_ledger_intact(tmp_path, monkeypatch):
    record_gate(tmp_path, "A_PASSED", {"n": 1})
    before = (tmp_path / LEDGER_NAME).read_bytes()

    def killed(*_args, **_kwargs):
        raise KeyboardInterrupt("killed between write and rename")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        record_gate(tmp_path, "B_PASSED", {"n": 2})
    monkeypatch.undo()
    assert (tmp_path / LEDGER_NAME).read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
    assert [r.gate for r in read_ledger(tmp_path)] == ["A_PASSED"]


def test_full_disk_leaves_ledger_intact(tmp_path, monkeypatch):
    record_gate(tmp_path, "A_PASSED")
    before = (tmp_path / LEDGER_NAME).read_bytes()
    real_fsync = os.fsync

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        record_gate(tmp_path, "B_PASSED")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert (tmp_path / LEDGER_NAME).read_bytes() == before


def test_concurrent_writers_lose_nothing(tmp_path, capsys):
    def writer(k):
        for i in range(10):
            record_gate(tmp_path, f"W{k}_PASSED", {"i": i})

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = read_ledger(tmp_path)
    assert len(records) == 40
    for k in range(4):
        assert [r.fields["i"] for r in records if r.gate == f"W{k}_PASSED"] == list(range(10))


def test_violation_str_has_all_parts():
    v = Violation(rule="r", expected="e", found="f", fix="x")
    assert str(v) == "[r] expected e; found f; fix: x"


field_values = st.one_of(
    st.integers(-(10**9), 10**9),
    st.booleans(),
    st.text(max_size=20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
)


@given(
    entries=st.lists(
        st.tuples(
            st.from_regex(r"[A-Z][A-Z0-9_]{0,20}_PASSED", fullmatch=True),
            st.dictionaries(
                st.from_regex(r"[a-z_]{1,10}", fullmatch=True), field_values, max_size=4
            ),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_ledger_round_trips(tmp_path_factory, entries):
    run_dir = tmp_path_factory.mktemp("run")
    for name, fields in entries:
        record_gate(run_dir, name, fields, stream=open(os.devnull, "w"))
    records = read_ledger(run_dir)
    assert [(r.gate, r.fields) for r in records] == entries
