"""RUN_SPEC_GATE_PASSED reads the spec back from the run folder and can fail: an edited
summary, a summary of another spec, a spec built without its rules, no summary at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_gates import (
    CONFIG_SUMMARY,
    GateError,
    RunSpec,
    load_spec,
    read_config,
    read_ledger,
    run_spec_gate,
    spec_sha256,
    write_config_summary,
)
from forge_gates.spec._spec import SKIP_RULES


def _failed(run_dir: Path, spec: RunSpec) -> dict[str, object]:
    with pytest.raises(GateError) as info:
        run_spec_gate(run_dir, spec)
    record = read_ledger(run_dir)[-1]
    assert record.gate == "RUN_SPEC_GATE_FAILED"
    rules = [v.rule for v in info.value.violations]
    assert record.fields["rules"] == rules
    assert record.fields["found"] == [v.found[:300] for v in info.value.violations]
    return {v.rule: v for v in info.value.violations}


def test_the_spec_read_back_passes(tmp_path: Path):
    spec = load_spec("smoke-local")
    write_config_summary(tmp_path, spec)
    run_spec_gate(tmp_path, spec)
    record = read_ledger(tmp_path)[-1]
    assert record.gate == "RUN_SPEC_GATE_PASSED"
    assert record.fields == {"phase": "smoke", "name": "smoke-local", "sha256": spec_sha256(spec)}


def test_an_edited_summary_fails(tmp_path: Path):
    spec = load_spec("smoke-local")
    path = write_config_summary(tmp_path, spec)
    payload = json.loads(path.read_text())
    payload["spec"]["ppo"]["batch_size"] = 2  # still a valid spec, not the run's
    path.write_text(json.dumps(payload))
    found = _failed(tmp_path, spec)
    assert list(found) == ["run_spec.round_trip"]
    assert "differs in: ppo" in found["run_spec.round_trip"].found


def test_a_summary_of_another_spec_fails(tmp_path: Path):
    write_config_summary(tmp_path, load_spec("soak-local"))
    found = _failed(tmp_path, load_spec("smoke-local"))
    assert set(found) == {"run_spec.sha256", "run_spec.round_trip"}


def test_a_spec_built_without_its_rules_fails(tmp_path: Path):
    data = read_config("smoke-local")
    data["context"]["window"] = 1024  # != model.max_model_len: rule context.window
    unchecked = RunSpec.model_validate(data, context={SKIP_RULES: True})
    write_config_summary(tmp_path, unchecked)
    found = _failed(tmp_path, unchecked)
    assert "run_spec.rules.context.window" in found
    assert found["run_spec.rules.context.window"].found == "context.window = 1024"


def test_no_summary_fails(tmp_path: Path):
    found = _failed(tmp_path, load_spec("smoke-local"))
    assert list(found) == ["run_spec.summary"]
    assert f"{CONFIG_SUMMARY}" in found["run_spec.summary"].expected
