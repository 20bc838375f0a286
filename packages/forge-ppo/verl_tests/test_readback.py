"""What the built verl workers report back: the settings their engines run with (the spec's
`[actor]` / `[critic]` knobs after verl's own defaults) and the micro-batches verl's own
batching formed, in tokens, which the update gate holds to the budget.

verl 0.9.1's `rearrange_micro_batches` keeps the sum of a micro-batch's sequences within
`max_token_len` (`utils/seqlen_balancing.py:440-458` adds micro-batches until it does), but
without `use_remove_padding` its engine pads each micro-batch to sequences x the longest
(`prepare_model_inputs`). On these rows (1,500 + 300 + 200 tokens per rank under 2,048) verl
forms one micro-batch per rank of 2,000 real tokens that runs as 4,500: the gate fails, with
expected and found."""

from __future__ import annotations

import json
import os

import pytest

from forge_gates import GateError, ProcessPeak, load_spec, read_config, read_ledger
from forge_ppo._protocol import TrainerSettings
from forge_ppo.recipes.train import check_micro_batches, settings_gate
from forge_ppo.recipes.train._checks import check_update
from forge_ppo.verl import VerlTrainer
from forge_rollout.rows import episode_to_rows
from test_trainer import Call

BUDGET, LENGTHS = 2048, (1500, 300, 200)  # per rank: 2,000 real tokens, 4,500 padded


def long_rows():
    rows = []
    for k, length in enumerate(LENGTHS * 2):
        prompt = [(7 * k + i) % 300 + 1 for i in range(length - 100)]
        completion = [(3 * k + i) % 300 + 1 for i in range(100)]
        rows += episode_to_rows(
            [Call(prompt, completion, [-1.0] * 100)],
            task_id=f"demo/long-{k}", episode_id=f"long-{k}", attempt=0, reward=float(k % 2),
        )[0]  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def built(tiny_model, tmp_path_factory):
    data = read_config("smoke-verl-cpu")
    data["model"]["path"] = str(tiny_model)
    data["context"] |= {f"{k}_tokens": BUDGET for k in ("actor_train", "critic_train",
                                                         "critic_infer")}  # fmt: skip
    data["ppo"] |= {"batch_size": 6, "actor_mini_batch_size": 6, "critic_mini_batch_size": 6,
                    "entropy_coeff": 0.01}  # fmt: skip
    data["actor"] = {"gradient_checkpointing": True}
    data["critic"] = {"param_offload": True, "optimizer_offload": True}
    spec = load_spec(data)
    run = tmp_path_factory.mktemp("verl-readback")
    trainer = VerlTrainer(spec, tiny_model, run)
    try:
        yield spec, trainer, run, trainer.update(long_rows(), 1)
    finally:
        trainer.close()


def test_the_workers_run_with_the_specs_settings(built):
    spec, trainer, run, _ = built
    assert trainer.settings == TrainerSettings.from_spec(spec)
    assert trainer.settings.actor.gradient_checkpointing  # in the HF modules verl built
    assert trainer.settings.critic.param_offload and trainer.settings.critic.optimizer_offload
    assert trainer.settings.actor.fused_kernels and trainer.settings.entropy_coeff == 0.01
    settings_gate(spec, trainer, run)
    record = read_ledger(run)[-1]
    assert record.gate == "PPO_TRAINER_SETTINGS_GATE_PASSED"
    assert record.fields["actor.gradient_checkpointing"] is True
    assert record.fields["critic.param_dtype"] == "fp32"


def test_the_read_back_micro_batches_are_verls_and_the_gate_can_fail(built, capsys):
    spec, trainer, run, result = built
    m = result.metrics
    for budget in ("actor_train", "actor_infer", "critic_train", "critic_infer"):
        assert m[f"perf/micro_batch_budget/{budget}"] == BUDGET  # what the engine batched under
        assert m[f"perf/peak_real_tokens/{budget}"] == sum(LENGTHS)  # verl's cap holds
        assert m[f"perf/peak_padded_tokens/{budget}"] == 3 * max(LENGTHS)  # as computed
        assert m[f"perf/micro_batches/{budget}"] == 2  # 1 per rank, 2 ranks
    assert "actor/entropy_loss" in m  # entropy_coeff > 0: the term is in the loss
    assert check_micro_batches(trainer.budgets, m) == []  # real tokens within: a warning only
    assert "padded to 4500 tokens (2.20x" in capsys.readouterr().err
    over = {**m, "perf/peak_real_tokens/actor_train": 2100.0}  # the engine broke its cap
    problems = check_micro_batches(trainer.budgets, over)
    assert [v.rule for v in problems] == ["update.budget.actor_train"]
    assert problems[0].found == "2100 tokens (4500 padded), 1.03x the budget"
    entry = {"step": 1, "actor_updated": True, "critic_updated": True, "valid_trajectories": 6,
             "metrics_finite": True}  # fmt: skip
    with pytest.raises(GateError):
        check_update(spec, trainer.budgets, run, entry, over)
    failed = read_ledger(run)[-1]
    assert failed.gate == "PPO_SMOKE_UPDATE_FAILED"
    assert failed.fields["expected"][0] == "every actor_train micro-batch <= 2048 tokens"


def test_each_rank_records_its_own_peaks(built):
    """For the run's provenance: every rank's process measured itself (peak host RSS; no GPU
    peaks on CPU ranks) into `process-peaks/verl-ranks.json`, after loading and each update."""
    _, _, run, _ = built
    payload = json.loads((run / "process-peaks" / "verl-ranks.json").read_text())
    peaks = [ProcessPeak.model_validate(p) for p in payload["processes"]]
    assert sorted(p.rank for p in peaks) == [0, 1] and {p.role for p in peaks} == {"verl-rank"}
    pids = {p.pid for p in peaks}
    assert len(pids) == 2 and os.getpid() not in pids  # the ranks' own processes
    assert all((p.peak_rss_bytes or 0) > 0 and p.gpu == [] for p in peaks)
