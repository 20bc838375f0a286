"""The token-budget gates read the budgets back from the built trainer and can fail."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_gates import GateError, load_spec, read_config, read_ledger
from forge_ppo.cli import apply_overrides
from forge_ppo.local._trainer import TokenBudgets
from forge_ppo.recipes.train import budget_gates


def test_budgets_come_each_from_their_own_field() -> None:
    # distinct values, so a budget taken from another field (a swap) is caught
    sets = [
        "context.actor_train_tokens=6144",
        "context.critic_train_tokens=8192",
        "context.critic_infer_tokens=12288",
    ]
    spec = load_spec(apply_overrides(read_config("smoke-local"), sets))
    budgets = TokenBudgets.from_spec(spec)
    assert (budgets.actor_train, budgets.critic_train, budgets.critic_infer) == (6144, 8192, 12288)
    assert budgets.critic_train == spec.context.critic_train_tokens
    assert budgets.critic_infer == spec.context.critic_infer_tokens
    assert budgets.actor_train == budgets.actor_infer == spec.context.actor_train_tokens


def test_gates_pass_on_the_spec_budgets(tmp_path: Path) -> None:
    spec = load_spec("smoke-local")
    budget_gates(spec, SimpleNamespace(budgets=TokenBudgets.from_spec(spec)), tmp_path)
    gates = [r.gate for r in read_ledger(tmp_path)]
    assert gates == ["PPO_SMOKE_TOKEN_BUDGET_GATE_PASSED", "PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED"]


def test_a_trainer_that_swapped_the_critic_budget_fails(tmp_path: Path, capsys) -> None:
    """verl #7462: both critic budgets take the inference value. The spec is right, the engine
    is wrong, and the gate says so."""
    spec = load_spec(
        apply_overrides(read_config("smoke-local"), ["context.critic_infer_tokens=8192"])
    )
    right = TokenBudgets.from_spec(spec)
    ctx = spec.context
    assert ctx.critic_train_tokens != ctx.critic_infer_tokens, "test needs distinct budgets"
    wrong = right.model_copy(update={"critic_train": right.critic_infer})
    with pytest.raises(GateError) as info:
        budget_gates(spec, SimpleNamespace(budgets=wrong), tmp_path)
    rules = [v.rule for v in info.value.violations]
    assert rules == ["budget.critic_train.spec"]
    assert f"{right.critic_infer} built by the trainer" in info.value.violations[0].found
    assert read_ledger(tmp_path)[-1].gate == "PPO_SMOKE_TOKEN_BUDGET_GATE_FAILED"


def test_a_budget_below_the_window_fails(tmp_path: Path) -> None:
    spec = load_spec("smoke-local")
    small = TokenBudgets.from_spec(spec).model_copy(update={"critic_infer": 16})
    with pytest.raises(GateError) as info:
        budget_gates(spec, SimpleNamespace(budgets=small), tmp_path)
    assert {v.rule for v in info.value.violations} == {
        "budget.critic_infer.window",
        "budget.critic_infer.spec",
    }


def test_formal_updates_stop_past_the_infra_error_and_timeout_ratios() -> None:
    from forge_gates import Check
    from forge_ppo.recipes.train._checks import check_rollout_health

    spec = load_spec("formal-local")
    assert (spec.agent.max_infra_error_ratio, spec.agent.max_timeout_ratio) == (0.1, 0.35)
    healthy = Check("PPO_SMOKE_UPDATE_PASSED")
    metrics = {"rollout/episodes": 10.0, "rollout/errors": 1.0, "rollout/timeouts": 3.0}
    check_rollout_health(spec, healthy, metrics, "update")
    assert healthy.ok  # 1 of 10 errored, 3 of 10 timed out: within the ratios
    broken = Check("PPO_SMOKE_UPDATE_PASSED")
    metrics = {"rollout/episodes": 10.0, "rollout/errors": 2.0, "rollout/timeouts": 4.0}
    check_rollout_health(spec, broken, metrics, "update")
    assert [v.rule for v in broken.violations] == ["update.errors_ratio", "update.timeouts_ratio"]
    assert broken.violations[0].found == "2 of 10 (0.20)"


def test_updates_stop_past_the_hack_audit_ratio_when_the_spec_sets_one(tmp_path) -> None:
    """Reported only by default (1.0); a spec's agent.max_hack_flagged_ratio fails closed."""
    from forge_gates import Check
    from forge_ppo.recipes.train._checks import check_rollout_health
    from forge_ppo.recipes.train._rollouts import hack_audit_metrics

    job = tmp_path / "job"
    for name, command in (("a__1", "git diff"), ("b__1", "git log --all"), ("c__1", "ls")):
        (job / name / "agent").mkdir(parents=True)
        content = f"THOUGHT\n```mswea_bash_command\n{command}\n```"
        (job / name / "agent" / "trajectory.json").write_text(
            json.dumps({"messages": [{"role": "assistant", "content": content}]})
        )
    metrics = {"rollout/episodes": 3.0, **hack_audit_metrics([job])}
    assert metrics["train/hack_audit/flagged"] == 1.0
    assert metrics["train/hack_audit/git_history"] == 1.0
    assert metrics["train/hack_audit/flagged_share"] == pytest.approx(1 / 3)
    assert (job / "hack-audit.json").is_file()
    spec = load_spec("formal-local")
    assert spec.agent.max_hack_flagged_ratio == 1.0
    reported = Check("PPO_SMOKE_UPDATE_PASSED")
    check_rollout_health(spec, reported, metrics, "update")
    assert reported.ok
    strict = spec.model_copy(
        update={"agent": spec.agent.model_copy(update={"max_hack_flagged_ratio": 0.25})}
    )
    stopped = Check("PPO_SMOKE_UPDATE_PASSED")
    check_rollout_health(strict, stopped, metrics, "update")
    assert [v.rule for v in stopped.violations] == ["update.hack_audit_ratio"]
    assert stopped.violations[0].found == "1 of 3 (0.33)"


def test_the_production_formal_run_fails_closed_on_the_hack_audit() -> None:
    assert load_spec("formal-5gpu").agent.max_hack_flagged_ratio == 0.25
