"""A verl run's checkpoint is in Forge's layout (PEFT adapter that `PeftModel.from_pretrained`
loads, critic weights, summary; no verl shards, no optimizer state), and a new verl run
warm-starts from it with the strict checks on every rank."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from test_parity import spec_for
from transformers import AutoModelForCausalLM

from forge_gates import read_jsonl
from forge_ppo import adapter_state_dict, verify_checkpoint
from forge_ppo.verl import VerlTrainer
from test_trainer import batch_rows


@pytest.fixture(scope="module")
def saved(tiny_model, tmp_path_factory):
    spec = spec_for(tiny_model)
    run = tmp_path_factory.mktemp("verl-save")
    trainer = VerlTrainer(spec, tiny_model, run)
    try:
        result = trainer.update(batch_rows(), 1)
        folder = trainer.save(run / "checkpoints", step=1, record=result.record, run_dir=run)
        adapter = adapter_state_dict(trainer.actor.model)
        critic = {k: v.clone() for k, v in trainer.critic.state_dict().items()}
    finally:
        trainer.close()
    return spec, run, folder, adapter, critic


def test_the_checkpoint_is_forge_layout_only(saved):
    _, run, folder, _, _ = saved
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert "lora_adapter/adapter_model.safetensors" in names
    assert "lora_adapter/adapter_config.json" in names
    assert "critic/model.safetensors" in names and "checkpoint-summary.json" in names
    assert not [n for n in names if n.endswith((".pt", ".bin")) or "optim" in n], names
    assert verify_checkpoint(folder).step == 1  # raises on a broken checkpoint
    gates = [g["gate"] for g in read_jsonl(run / "gates.jsonl")]
    assert "PPO_COMPACT_CHECKPOINT_PASSED" in gates


def test_peft_loads_the_verl_adapter_with_the_trained_values(saved, tiny_model):
    _, _, folder, adapter, _ = saved
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model), local_files_only=True)
    model = PeftModel.from_pretrained(base, str(folder / "lora_adapter"))
    loaded = adapter_state_dict(model)
    assert set(loaded) == set(adapter)
    for key, value in adapter.items():
        assert torch.equal(loaded[key], value), key
    config = json.loads((folder / "lora_adapter" / "adapter_config.json").read_text())
    assert config["r"] == saved[0].lora.rank and config["lora_alpha"] == saved[0].lora.alpha


def test_a_verl_run_warm_starts_from_it_on_every_rank(saved, tiny_model, tmp_path):
    spec, _, folder, adapter, critic = saved
    warm = spec.model_copy(
        update={"checkpoint": spec.checkpoint.model_copy(update={"warm_start": str(folder)})}
    )
    trainer = VerlTrainer(warm, tiny_model, tmp_path)
    try:
        for key, value in adapter_state_dict(trainer.actor.model).items():
            assert torch.equal(value, adapter[key]), key
        for key, value in trainer.critic.state_dict().items():  # fp32 critic_dtype: exact
            assert torch.equal(value, critic[key]), key
        assert trainer.parent is not None
    finally:
        trainer.close()
    ledger = list(read_jsonl(tmp_path / "gates.jsonl"))
    assert [g["gate"] for g in ledger].count("PPO_ACTOR_LORA_LOAD_PASSED") == 1  # the file
    loads = [g for g in ledger if g["gate"] == "PPO_TRAINER_RANKS_LOAD_PASSED"]
    assert any(
        g["fields"].get("backend") == "verl" and g["fields"].get("ranks") == 2 for g in loads
    ), loads
    assert "PPO_WARM_START_LOAD_PASSED" in [g["gate"] for g in ledger]
