"""Strict warm start: every check before loading, exact loads, markers, restarted state."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen2Config

from forge_gates import GateError, LoRASpec, read_ledger
from forge_ppo import ValueModel, check_warm_start_config, save_checkpoint, warm_start
from forge_ppo.checkpoint._load_checks import check_loaded_actor

MARKERS = [
    "PPO_WARM_START_CONFIG_PASSED",
    "PPO_ACTOR_LORA_LOAD_PASSED",
    "PPO_WARM_START_LOAD_PASSED",
]


def _warm(tiny, folder, run_dir, **kwargs):
    args = dict(
        base_model=tiny.base_model,
        actor_base=tiny.base_lm(),
        critic=tiny.critic(),
        lora_spec=tiny.lora,
        run_dir=run_dir,
    )
    return warm_start(folder, **{**args, **kwargs})


def _rules(err) -> set[str]:
    return {v.rule for v in err.value.violations}


def test_warm_start_loads_exactly_and_records_markers(saved, tiny, tmp_path):
    path, actor, critic, _ = saved
    run = tmp_path / "run"
    run.mkdir()
    result = _warm(tiny, path, run)
    ledger = read_ledger(run)
    assert [r.gate for r in ledger] == MARKERS
    assert ledger[2].fields == {
        "parent_step": 1,
        "actor_tensors": 12,
        "critic_tensors": len(critic.state_dict()),
        "optimizer": "restarted",
        "scheduler": "restarted",
        "step": 0,
    }
    ids = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(
            result.actor.eval()(input_ids=ids).logits, actor(input_ids=ids).logits
        )
    for key, value in critic.state_dict().items():  # the critic equals the bf16 file
        assert torch.equal(result.critic.state_dict()[key], value.to(torch.bfloat16).float())
    assert any(p.requires_grad for p in result.actor.parameters())  # trainable again
    assert result.parent.step == 1
    assert result.parent.restarted == ("optimizer", "scheduler", "rng", "dataloader", "step")


def test_the_next_checkpoint_records_its_parent(saved, tiny, tmp_path):
    path, *_ = saved
    result = _warm(tiny, path, None)
    actor, critic = result.actor, result.critic
    from forge_ppo import UpdateTracker

    tracker = UpdateTracker(actor, critic)
    ids = torch.randint(0, 256, (1, 8))
    opt = torch.optim.SGD(
        [p for p in actor.parameters() if p.requires_grad] + list(critic.parameters()), lr=0.1
    )
    loss = actor(input_ids=ids).logits.logsumexp(-1).mean() + critic(ids).square().mean()
    loss.backward()
    opt.step()
    record = tracker.finish(
        step=1,
        actor_optimizer_steps=1,
        critic_optimizer_steps=1,
        actor_loss=loss.item(),
        critic_loss=loss.item(),
        action_tokens=8,
    )
    child = save_checkpoint(
        tmp_path / "child",
        step=1,
        actor=actor,
        critic=critic,
        update=record,
        base_model=tiny.base_model,
        lora_spec=tiny.lora,
        checkpoint_spec=tiny.spec,
        parent=result.parent,
    )
    summary = json.loads((child / "checkpoint-summary.json").read_text())
    assert summary["parent"]["path"] == str(path.resolve())
    assert summary["parent"]["restarted"] == ["optimizer", "scheduler", "rng", "dataloader", "step"]
    assert summary["step"] == 1


def test_truncated_file_is_caught_before_anything_loads(checkpoint_copy, tiny, tmp_path):
    weights = checkpoint_copy / "lora_adapter/adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    run = tmp_path / "run"
    run.mkdir()
    base = tiny.base_lm()
    with pytest.raises(GateError) as err:
        _warm(tiny, checkpoint_copy, run, actor_base=base)
    assert _rules(err) == {"checkpoint.size"}
    assert [r.gate for r in read_ledger(run)] == ["PPO_WARM_START_CONFIG_FAILED"]
    assert not any("lora" in name for name, _ in base.named_parameters())  # nothing injected


def test_edited_file_is_caught_by_its_hash(checkpoint_copy, tiny):
    weights = checkpoint_copy / "critic/model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # same size, one bit flipped
    weights.write_bytes(bytes(data))
    with pytest.raises(GateError) as err:
        _warm(tiny, checkpoint_copy, None)
    assert _rules(err) == {"checkpoint.sha256"}


def test_optimizer_or_unknown_state_is_refused(checkpoint_copy, tiny):
    torch.save({"state": {}}, checkpoint_copy / "optimizer.pt")
    (checkpoint_copy / "critic" / "extra_state_world_size_1_rank_0.pt").write_bytes(b"x")
    (checkpoint_copy / "notes.txt").write_text("hi")
    with pytest.raises(GateError) as err:
        _warm(tiny, checkpoint_copy, None)
    assert sorted(v.rule for v in err.value.violations) == [
        "checkpoint.forbidden_state",
        "checkpoint.forbidden_state",
        "checkpoint.unexpected_file",
    ]


def test_every_config_mismatch_is_listed_at_once(saved, tiny):
    path, *_ = saved
    other_lora = LoRASpec(rank=8, alpha=16, target_modules=("q_proj",))
    config = Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
    )
    critic = ValueModel.from_config(config, base_model="someone-else")
    summary, problems = check_warm_start_config(
        path, base_model="other/base", lora_spec=other_lora, critic=critic
    )
    assert summary is not None and summary.step == 1
    assert {v.rule for v in problems} == {
        "warm_start.base_model",
        "warm_start.lora",
        "warm_start.critic_base_model",
        "warm_start.critic_arch.num_hidden_layers",
    }


def test_the_base_model_is_compared_by_content_not_path(saved, tiny, tmp_path):
    """The same base model copied elsewhere warm starts; the same path with a changed weight
    file does not (the summary records the folder's content fingerprint)."""
    import shutil

    path, *_ = saved
    copy = tmp_path / "moved-base"
    shutil.copytree(tiny.base_model, copy)
    _, problems = check_warm_start_config(
        path, base_model=str(copy), lora_spec=tiny.lora, critic=tiny.critic()
    )
    assert problems == []
    weights = next(copy.glob("*.safetensors"))
    tensors = load_file(weights)
    name = next(iter(tensors))
    tensors[name] = tensors[name] + 1.0
    save_file(tensors, weights)
    _, problems = check_warm_start_config(
        path, base_model=str(copy), lora_spec=tiny.lora, critic=tiny.critic()
    )
    (v,) = problems
    assert v.rule == "warm_start.base_model" and str(copy) in v.expected


def test_vllm_rank_limit_applies_at_warm_start(saved, tiny):
    path, *_ = saved
    with pytest.raises(GateError) as err:
        _warm(tiny, path, None, max_lora_rank=2)
    assert _rules(err) == {"adapter.rank"}


def test_broken_summary_is_refused(checkpoint_copy, tiny):
    (checkpoint_copy / "checkpoint-summary.json").write_text("{not json")
    with pytest.raises(GateError) as err:
        _warm(tiny, checkpoint_copy, None)
    assert _rules(err) == {"checkpoint.summary"}


def test_loaded_actor_checks_catch_zero_missing_unequal_and_meta(saved, tiny):
    path, *_ = saved
    from peft import PeftModel

    file_state = load_file(path / "lora_adapter/adapter_model.safetensors")
    actor = PeftModel.from_pretrained(tiny.base_lm(), path / "lora_adapter")
    assert check_loaded_actor(actor, file_state) == []
    keys = sorted(file_state)
    edited = dict(file_state)
    edited[keys[0]] = torch.zeros_like(edited[keys[0]])  # file all zero, model not: unequal
    del edited[keys[1]]
    assert {v.rule for v in check_loaded_actor(actor, edited)} == {"actor.value", "actor.keys"}
    zero_path = path.parent / "zero.safetensors"
    zeroed = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in file_state.items()}
    save_file(zeroed, zero_path)
    never_trained = PeftModel.from_pretrained(tiny.base_lm(), path / "lora_adapter")
    with torch.no_grad():
        for name, p in never_trained.named_parameters():
            if "lora_B" in name:
                p.zero_()
    assert {v.rule for v in check_loaded_actor(never_trained, load_file(zero_path))} == {
        "actor.nonzero"
    }
    lora_name = next(n for n, _ in actor.named_parameters() if "lora_A" in n)
    module = actor.get_submodule(lora_name.rsplit(".", 1)[0])
    module.weight = torch.nn.Parameter(torch.empty(module.weight.shape, device="meta"))
    assert "actor.meta" in {v.rule for v in check_loaded_actor(actor, file_state)}


@pytest.mark.parametrize(
    ("name", "part"),
    [("lora_adapter/adapter_model.safetensors", "lora_B"), ("critic/model.safetensors", "")],
)
def test_nan_in_a_saved_tensor_is_refused_by_name_before_loading(
    checkpoint_copy, tiny, tmp_path, name, part, poison_and_rehash
):
    key = poison_and_rehash(checkpoint_copy, name, part)
    run = tmp_path / "run"
    run.mkdir()
    base = tiny.base_lm()
    with pytest.raises(GateError) as err:
        _warm(tiny, checkpoint_copy, run, actor_base=base)
    (v,) = err.value.violations
    assert v.rule == "checkpoint.finite" and name in v.expected
    assert f"{key}: 1 NaN, 0 inf" in v.found
    assert [r.gate for r in read_ledger(run)] == ["PPO_WARM_START_CONFIG_FAILED"]
    assert not any("lora" in n for n, _ in base.named_parameters())  # nothing injected


def test_a_nan_after_loading_reads_as_non_finite_not_as_a_failed_load(
    saved, tiny, tmp_path, poison_and_rehash
):
    path, *_ = saved
    from peft import PeftModel

    poisoned = tmp_path / "global_step_1"
    shutil.copytree(path, poisoned)
    key = poison_and_rehash(poisoned, "lora_adapter/adapter_model.safetensors")
    actor = PeftModel.from_pretrained(tiny.base_lm(), poisoned / "lora_adapter")
    file_state = load_file(poisoned / "lora_adapter/adapter_model.safetensors")
    (v,) = check_loaded_actor(actor, file_state)
    assert (v.rule, v.expected) == ("actor.finite", f"{key}: finite values")


def test_a_missing_checkpoint_folder_says_no_such_folder(tiny, tmp_path):
    with pytest.raises(GateError) as err:
        _warm(tiny, tmp_path / "nowhere", None)
    (v,) = err.value.violations
    assert (v.rule, v.found) == ("checkpoint.folder", "no such folder")
