import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_gates import (
    CONFIG_SUMMARY,
    GateError,
    GateRecord,
    RunProvenance,
    load_spec,
    phase_contract,
    read_config,
    read_config_summary,
    record_gate,
    verify_ledger,
    verify_run,
    write_config_summary,
)
from forge_gates.cli import main

SMOKE = [
    "PROVENANCE_RECORDED",
    "RUN_SPEC_GATE_PASSED",
    "DATA_SPLIT_VERIFIED",
    "PPO_CONTEXT_GUARD_PASSED",
    "PPO_SMOKE_TOKEN_BUDGET_GATE_PASSED",
    "PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED",
    "PPO_TRAINER_SETTINGS_GATE_PASSED",
    "PPO_SMOKE_UPDATE_PASSED",
    "PPO_COMPACT_CHECKPOINT_PASSED",
    "PPO_SMOKE_PASSED",
]


WARM_START = [
    "PPO_WARM_START_CONFIG_PASSED",
    "PPO_ACTOR_LORA_LOAD_PASSED",
    "PPO_WARM_START_LOAD_PASSED",
]


def fresh_start(name):
    """A shipped config as a fresh start (the local configs warm-start from the demo policy
    by default); the ledgers below model a run without a warm start."""
    data = read_config(name)
    data["checkpoint"]["warm_start"] = None
    return load_spec(data)


def with_warm_start(names):
    """`names` with the warm-start gates where a warm-started run records them."""
    at = names.index("PPO_CONTEXT_GUARD_PASSED") + 1
    return [*names[:at], *WARM_START, *names[at:]]


def records(names):
    return [GateRecord(gate=n, fields={}, at="2026-11-29T00:00:00+00:00") for n in names]


def write_run(run_dir, names, spec=None):
    devnull = open(os.devnull, "w")
    for name in names:
        if name == "PROVENANCE_RECORDED":  # provenance.json written, then the gate from it
            RunProvenance.start(run_dir, "test", spec)
        else:
            record_gate(run_dir, name, {"step": 1}, stream=devnull)
    if spec is not None:
        write_config_summary(run_dir, spec)
    return run_dir


def test_smoke_contract_order():
    assert [r.gate for r in phase_contract("smoke")] == SMOKE


def test_complete_smoke_ledger_verifies(tmp_path):
    write_run(tmp_path, ["SOMETHING_EXTRA", *SMOKE], fresh_start("smoke-local"))
    assert verify_run(tmp_path, "smoke") == []
    assert main(["verify", str(tmp_path), "--phase", "smoke"]) == 0


def test_shipped_smoke_starts_from_the_demo_policy(tmp_path):
    """smoke-local warm-starts from the demo policy: its ledger must show the three warm-start
    gates, in order; a fresh-start ledger under that spec is incomplete."""
    spec = load_spec("smoke-local")
    assert spec.checkpoint.warm_start == "demo-policy"
    assert [r.gate for r in phase_contract("smoke", spec)] == with_warm_start(SMOKE)
    write_run(tmp_path / "warm", with_warm_start(SMOKE), spec)
    assert verify_run(tmp_path / "warm", "smoke") == []
    write_run(tmp_path / "fresh", SMOKE, spec)
    assert [p.rule for p in verify_run(tmp_path / "fresh", "smoke")] == [
        f"gate.missing.{name}" for name in WARM_START
    ]


def test_missing_gate_is_named(tmp_path, capsys):
    write_run(tmp_path, [g for g in SMOKE if g != "PPO_COMPACT_CHECKPOINT_PASSED"])
    problems = verify_run(tmp_path, "smoke")
    assert [p.rule for p in problems] == ["gate.missing.PPO_COMPACT_CHECKPOINT_PASSED"]
    assert main(["verify", str(tmp_path), "--phase", "smoke"]) == 1
    assert "gate.missing.PPO_COMPACT_CHECKPOINT_PASSED" in capsys.readouterr().err


def test_failed_gate_fails_the_run():
    problems = verify_ledger(records([*SMOKE, "PPO_SMOKE_UPDATE_FAILED"]), "smoke")
    assert [p.rule for p in problems] == ["gate.failed.PPO_SMOKE_UPDATE_FAILED"]


def test_out_of_order_is_named():
    names = list(SMOKE)
    u = names.index("PPO_SMOKE_UPDATE_PASSED")
    names[u], names[u + 1] = names[u + 1], names[u]
    rules = [p.rule for p in verify_ledger(records(names), "smoke")]
    assert rules == ["gate.order.PPO_COMPACT_CHECKPOINT_PASSED"]


def test_soak_counts_updates_from_spec():
    spec = fresh_start("soak-local")
    base = [g if g != "PPO_SMOKE_PASSED" else "PPO_SOAK_PASSED" for g in SMOKE]
    u = base.index("PPO_SMOKE_UPDATE_PASSED") + 1  # just after the first update
    three = base[:u] + ["PPO_SMOKE_UPDATE_PASSED"] * 2 + base[u:]
    assert verify_ledger(records(three), "soak", spec) == []
    two = base[:u] + ["PPO_SMOKE_UPDATE_PASSED"] + base[u:]
    assert verify_ledger(records(two), "soak") == []
    assert [p.rule for p in verify_ledger(records(two), "soak", spec)] == [
        "gate.count.PPO_SMOKE_UPDATE_PASSED"
    ]
    # an update after the checkpoint gate breaks the order even though counts are right
    late = (
        base[:u]
        + ["PPO_SMOKE_UPDATE_PASSED"]
        + base[u : u + 1]
        + ["PPO_SMOKE_UPDATE_PASSED"]
        + base[u + 1 :]
    )
    assert "gate.order.PPO_COMPACT_CHECKPOINT_PASSED" in {
        p.rule for p in verify_ledger(records(late), "soak", spec)
    }


def test_conditional_gates_from_spec():
    data = read_config("smoke-4gpu")
    data["checkpoint"]["warm_start"] = "/ckpt/global_step_20"
    spec = load_spec(data)
    names = [r.gate for r in phase_contract("smoke", spec)]
    assert names.index("PPO_WARM_START_CONFIG_PASSED") < names.index("PPO_ACTOR_LORA_LOAD_PASSED")
    assert names.index("PPO_WARM_START_LOAD_PASSED") < names.index("PPO_SMOKE_UPDATE_PASSED")
    formal = [r.gate for r in phase_contract("formal", load_spec("formal-5gpu"))]
    assert "PPO_SEPARATED_ROLLOUT_GATE_PASSED" in formal
    assert formal[-2:] == ["TRAIN_EPOCH_COVERAGE", "PPO_FINAL_CHECKPOINT_PASSED"]
    p0 = phase_contract("p0", load_spec("p0-64k"))
    assert [r for r in p0 if r.gate == "P0_PANEL_COMPLETE"][0].min_count == 4


def test_phase_mismatch_and_tampered_summary(tmp_path):
    write_run(tmp_path, SMOKE, load_spec("soak-local"))
    assert "phase.match" in {p.rule for p in verify_run(tmp_path, "smoke")}
    summary = json.loads((tmp_path / CONFIG_SUMMARY).read_text())
    summary["spec"]["seed"] = 1
    (tmp_path / CONFIG_SUMMARY).write_text(json.dumps(summary))
    with pytest.raises(GateError, match="config_summary.sha256"):
        read_config_summary(tmp_path)
    assert [p.rule for p in verify_run(tmp_path, "smoke")] == ["config_summary.sha256"]


def test_verify_without_ledger(tmp_path):
    assert [p.rule for p in verify_run(tmp_path, "formal")] == ["ledger.exists"]


@given(order=st.permutations(range(len(SMOKE))))
def test_any_order_breaking_permutation_is_refused(order):
    names = [SMOKE[i] for i in order]
    problems = verify_ledger(records(names), "smoke")
    if list(order) == sorted(order):
        assert problems == []
    else:
        assert any(p.rule.startswith("gate.order.") for p in problems)


@given(drop=st.sets(st.integers(0, len(SMOKE) - 1), min_size=1))
def test_any_missing_gate_is_refused(drop):
    names = [g for i, g in enumerate(SMOKE) if i not in drop]
    missing = {p.rule for p in verify_ledger(records(names), "smoke")}
    assert missing == {f"gate.missing.{SMOKE[i]}" for i in drop}


def test_new_run_dir_is_fresh_and_never_reused(tmp_path):
    from forge_gates import new_run_dir

    spec = load_spec("smoke-local")
    made = new_run_dir(spec, None, tmp_path)
    assert made.parent == tmp_path / "smoke" and made.name.startswith("smoke-local-")
    (made / "gates.jsonl").write_text("")
    with pytest.raises(GateError, match="run_dir.new"):
        new_run_dir(spec, made, tmp_path)
    assert new_run_dir(spec, tmp_path / "empty", tmp_path) == tmp_path / "empty"


def _formal_ledger(validation_steps, save_steps, batches_per_epoch=24):
    """A formal-5gpu ledger (187 tasks at batch 8: 24 steps; validate 0/10/20/24, save 10/20/24)."""
    spec = load_spec("formal-5gpu")
    out = []
    for req in phase_contract("formal", spec):
        if req.gate == "TRAIN_EPOCH_COVERAGE":
            for step in validation_steps:
                out.append(GateRecord(gate="PPO_VALIDATION_PASSED", fields={"step": step}, at="t"))
            for step in save_steps:
                out.append(
                    GateRecord(gate="PPO_COMPACT_CHECKPOINT_PASSED", fields={"step": step}, at="t")
                )
        fields = {"batches_per_epoch": batches_per_epoch} if "FULL_DATASET" in req.gate else {}
        out.append(GateRecord(gate=req.gate, fields=fields, at="t"))
    return out, spec


def test_formal_ledger_needs_every_scheduled_validation_and_checkpoint():
    good, spec = _formal_ledger([0, 10, 20, 24], [10, 20, 24])
    assert verify_ledger(good, "formal", spec) == []
    skipped, _ = _formal_ledger([0, 10, 24], [10, 20, 24])
    (v,) = verify_ledger(skipped, "formal", spec)
    assert v.rule == "schedule.PPO_VALIDATION_PASSED"
    assert "[0, 10, 20, 24]" in v.expected and "missing [20]" in v.found
    twice, _ = _formal_ledger([0, 10, 20, 24], [10, 20, 20, 24])
    (v,) = verify_ledger(twice, "formal", spec)
    assert v.rule == "schedule.PPO_COMPACT_CHECKPOINT_PASSED" and "repeated [20]" in v.found
    # a final step off the save interval must be saved too (25 steps: 10, 20, 25)
    off, _ = _formal_ledger([0, 10, 20, 25], [10, 20], batches_per_epoch=25)
    (v,) = verify_ledger(off, "formal", spec)
    assert "missing [25]" in v.found
