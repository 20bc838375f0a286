"""The `[actor]` / `[critic]` knobs in the local trainer and in the gates: what the local trainer
honours (gradient checkpointing, dtype, the entropy term) and refuses (offload), the settings
gate that holds a built trainer to its spec, and the micro-batch read-back held to its budget;
each gate shown failing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from forge_gates import ActorSpec, CriticSpec, GateError, load_spec, read_ledger
from forge_ppo._protocol import TokenBudgets, TrainerSettings
from forge_ppo.local._build import build_local_trainer
from forge_ppo.recipes.train import check_micro_batches, settings_gate
from forge_ppo.recipes.train._checks import check_update
from forge_rollout.rows import episode_to_rows

torch.set_num_threads(1)


@dataclass
class Call:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]


def batch_rows():
    """Two-turn episodes of three tasks (completions and observations alternate)."""
    rows = []
    for seed, task in enumerate(["demo/a", "demo/b", "demo/c", "demo/a"]):
        g = torch.Generator().manual_seed(seed)
        history = torch.randint(0, 256, (4 + seed,), generator=g).tolist()
        calls = []
        for _ in range(2):
            completion = torch.randint(0, 256, (3,), generator=g).tolist()
            calls.append(Call(list(history), completion, [-1.0] * 3))
            history = history + completion + torch.randint(0, 256, (2,), generator=g).tolist()
        rows += episode_to_rows(
            calls, task_id=task, episode_id=f"{task}-{seed}", attempt=0, reward=float(seed % 2)
        )[0]
    return rows


def spec_for(tiny, **ppo):
    spec = load_spec("smoke-local")
    return spec.model_copy(update={"lora": tiny.lora, "ppo": spec.ppo.model_copy(update=ppo)})


def knob_spec(tiny, actor=None, critic=None, **ppo):
    spec = spec_for(tiny, **ppo)
    return spec.model_copy(
        update={
            "checkpoint": spec.checkpoint.model_copy(update={"warm_start": None}),
            "actor": actor or ActorSpec(),
            "critic": critic or CriticSpec(),
        }
    )


def _update(tiny, tmp_path: Path, **knobs):
    spec = knob_spec(tiny, **knobs)
    trainer = build_local_trainer(spec, tiny.base, tmp_path)
    return spec, trainer, trainer.update(batch_rows(), step=1)


def test_gradient_checkpointing_is_on_in_the_model_and_changes_no_gradient(tiny, tmp_path):
    _, plain, off = _update(tiny, tmp_path / "off")
    on_spec, checkpointed, on = _update(
        tiny,
        tmp_path / "on",
        actor=ActorSpec(gradient_checkpointing=True),
        critic=CriticSpec(gradient_checkpointing=True),
    )
    assert not plain.settings.actor.gradient_checkpointing
    assert checkpointed.settings.actor.gradient_checkpointing
    assert checkpointed.settings.critic.gradient_checkpointing
    assert checkpointed.actor.model.base_model.model.model.gradient_checkpointing is True
    for key in ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
        assert on.metrics[key] == pytest.approx(off.metrics[key], rel=1e-5), key
    settings_gate(on_spec, checkpointed, tmp_path / "on")  # read back = the spec
    assert read_ledger(tmp_path / "on")[-1].gate == "PPO_TRAINER_SETTINGS_GATE_PASSED"


def test_bf16_models_train_in_bf16(tiny, tmp_path):
    spec, trainer, result = _update(
        tiny, tmp_path, actor=ActorSpec(dtype="bf16"), critic=CriticSpec(dtype="bf16")
    )
    assert {p.dtype for p in trainer.actor.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in trainer.critic.parameters()} == {torch.bfloat16}
    assert trainer.settings == TrainerSettings.from_spec(spec)
    assert trainer.settings.actor.param_dtype == "bf16" and result.record.critic_optimizer_steps


def test_entropy_enters_the_actor_loss_only_with_a_coefficient(tiny, tmp_path):
    _, trainer, off = _update(tiny, tmp_path / "off", entropy_coeff=0.0)
    _, _, on = _update(tiny, tmp_path / "on", entropy_coeff=0.01)
    assert "actor/entropy_loss" not in off.metrics  # 0 removes the term (and its backward)
    assert on.metrics["actor/entropy_loss"] > 0
    assert trainer.settings.entropy_coeff == 0.0


@pytest.mark.parametrize("knob", ["param_offload", "optimizer_offload"])
def test_the_local_trainer_refuses_offload_even_without_the_rules(tiny, tmp_path, knob):
    spec = knob_spec(tiny, critic=CriticSpec(**{knob: True}))
    with pytest.raises(ValueError, match=f"found critic.{knob}; fix: remove them") as info:
        build_local_trainer(spec, tiny.base, tmp_path)
    assert "expected none of offload" in str(info.value)


def test_the_settings_gate_fails_when_the_engine_did_not_apply_a_knob(tiny, tmp_path):
    """The spec asks for actor checkpointing and bf16 compute; an engine that dropped both (the
    bug the gate exists for) is named, with what was expected and found, in the ledger."""
    spec = knob_spec(tiny, actor=ActorSpec(gradient_checkpointing=True))
    spec = spec.model_copy(
        update={"backends": spec.backends.model_copy(update={"trainer": "verl"})}
    )
    wanted = TrainerSettings.from_spec(spec)
    assert wanted.actor.fused_kernels and wanted.actor.param_dtype == "fp32"  # CPU ranks
    built = wanted.model_copy(
        update={"actor": wanted.actor.model_copy(update={"gradient_checkpointing": False})}
    )
    with pytest.raises(GateError) as info:
        settings_gate(spec, SimpleNamespace(settings=built), tmp_path)
    (violation,) = info.value.violations
    assert violation.rule == "settings.actor.gradient_checkpointing"
    assert violation.expected == (
        "actor.gradient_checkpointing = True (the spec, resolved for backends.trainer = 'verl')"
    )
    assert violation.found == "False read back from the built trainer"
    failed = read_ledger(tmp_path)[-1]
    assert failed.gate == "PPO_TRAINER_SETTINGS_GATE_FAILED"
    assert failed.fields["expected"] == [violation.expected]
    assert failed.fields["found"] == [violation.found]


BUDGETS = TokenBudgets(actor_train=4096, actor_infer=4096, critic_train=3072, critic_infer=6144)


def _peaks(**tokens: float) -> dict[str, float]:
    peaks = {"actor_train": 4000, "actor_infer": 4096, "critic_train": 3000, "critic_infer": 6000}
    return {f"perf/peak_padded_tokens/{k}": float(v) for k, v in (peaks | tokens).items()}


def test_micro_batches_within_their_budgets_pass():
    assert check_micro_batches(BUDGETS, _peaks()) == []


def test_an_over_budget_micro_batch_fails_with_expected_and_found():
    """verl's own batching: three 40K sequences at a 65,536 budget made one 80,000-token
    micro-batch (FACTS); here the critic's 3,072 budget holds a 3,440-token one."""
    metrics = _peaks(critic_train=3440) | {"perf/peak_real_tokens/critic_train": 3300.0}
    (violation,) = check_micro_batches(BUDGETS, metrics)
    assert violation.rule == "update.budget.critic_train"
    assert violation.expected == "every critic_train micro-batch <= 3072 tokens"
    assert violation.found == "3300 tokens (3440 padded), 1.07x the budget"


def test_padding_past_the_budget_is_a_warning_when_the_real_tokens_fit(capsys):
    """verl without use_remove_padding pads a micro-batch to sequences x the longest: the real
    tokens (verl's cap) are gated, the padded size is reported (memory holds it)."""
    metrics = _peaks(critic_train=3440) | {"perf/peak_real_tokens/critic_train": 3000.0}
    assert check_micro_batches(BUDGETS, metrics) == []
    assert "critic_train micro-batch padded to 3440 tokens (1.12x" in capsys.readouterr().err


def test_a_budget_without_a_read_back_fails_and_so_does_another_engine_budget():
    metrics = _peaks()
    del metrics["perf/peak_padded_tokens/actor_infer"]
    metrics["perf/micro_batch_budget/critic_infer"] = 3072.0  # the engine used another field
    found = {v.rule: v for v in check_micro_batches(BUDGETS, metrics)}
    assert set(found) == {"update.budget.actor_infer", "update.budget.critic_infer.engine"}
    assert found["update.budget.actor_infer"].found == (
        "no micro-batch size read back from the trainer"
    )
    assert found["update.budget.critic_infer.engine"].found == (
        "the engine batched under 3072 tokens"
    )


def test_the_update_gate_records_the_over_budget_micro_batch(tiny, tmp_path):
    spec = knob_spec(tiny)
    entry = {"step": 1, "actor_updated": True, "critic_updated": True, "valid_trajectories": 2,
             "metrics_finite": True}  # fmt: skip
    check_update(spec, BUDGETS, tmp_path, entry, _peaks())
    passed = read_ledger(tmp_path)[-1]
    assert passed.gate == "PPO_SMOKE_UPDATE_PASSED"
    assert passed.fields["peak_tokens.critic_train"] == 3000.0
    with pytest.raises(GateError):
        check_update(spec, BUDGETS, tmp_path, entry, _peaks(actor_train=4600))
    failed = read_ledger(tmp_path)[-1]
    assert failed.gate == "PPO_SMOKE_UPDATE_FAILED"
    assert failed.fields["rules"] == ["update.budget.actor_train"]
    assert failed.fields["found"] == ["4600 tokens, 1.12x the budget"]


def test_the_local_trainer_reports_every_budget_it_batched_under(tiny, tmp_path):
    _, trainer, result = _update(tiny, tmp_path)
    assert check_micro_batches(trainer.budgets, result.metrics) == []
    assert all(f"perf/peak_padded_tokens/{b}" in result.metrics for b in BUDGETS.model_dump())
