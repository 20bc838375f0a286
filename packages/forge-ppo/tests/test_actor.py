"""The actor: raw log-probs equal the rollout convention, the reference is the adapter-disabled
model, the exported adapter reloads exactly, warm start goes through the core's gates."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel

from forge_gates import GateError, read_ledger
from forge_ppo import Actor, ValueModel, check_adapter_rules, collate, save_checkpoint
from forge_rollout import sequence_log_probs
from forge_rollout.rows import RowHeader, SampleRow

torch.set_num_threads(1)


def rows(seed: int = 0, shapes=((5, 4), (2, 7), (9, 3))) -> list[SampleRow]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, (p, r) in enumerate(shapes):
        mask = (torch.rand(r, generator=g) < 0.7).long()
        mask[-1] = 1
        rewards = torch.zeros(r)
        rewards[-1] = 1.0
        out.append(
            SampleRow(
                header=RowHeader(
                    task_id=f"t{i}",
                    episode_id=f"e{i}",
                    attempt=0,
                    row_index=0,
                    n_calls=1,
                    reward=1.0,
                ),
                prompt_ids=torch.randint(0, 256, (p,), generator=g),
                response_ids=torch.randint(0, 256, (r,), generator=g),
                response_mask=mask,
                rollout_log_probs=torch.zeros(r),
                token_level_rewards=rewards,
            )
        )
    return out


def perturb(actor: Actor, seed: int = 0) -> None:
    """Give the adapter non-zero B matrices (a fresh adapter has B = 0: actor == base)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in actor.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)


def test_log_probs_follow_the_rollout_convention(tiny):
    """Actor.log_probs on a padded batch == forge_rollout's teacher-forced raw log-probs."""
    actor = Actor.from_pretrained(tiny.base, tiny.lora)
    perturb(actor)
    batch_rows = rows()
    with torch.no_grad():
        out = actor.log_probs(collate(batch_rows))
        for b, row in enumerate(batch_rows):
            ids = torch.cat([row.prompt_ids, row.response_ids])
            logits = actor.model(input_ids=ids[None]).logits[0]
            expected = sequence_log_probs(logits, ids, row.prompt_ids.numel())
            r = row.response_ids.numel()
            mask = row.response_mask == 1
            torch.testing.assert_close(out[b, :r][mask], expected[mask], rtol=0, atol=1e-5)
            assert not out[b, :r][~mask].any()


def test_reference_is_the_adapter_disabled_model(tiny):
    actor = Actor.from_pretrained(tiny.base, tiny.lora)
    batch = collate(rows())
    with torch.no_grad():
        assert torch.equal(actor.reference_log_probs(batch), actor.log_probs(batch))  # B = 0
        perturb(actor)
        changed = actor.log_probs(batch)
        reference = actor.reference_log_probs(batch)
        base = tiny.base_lm()
    assert not torch.allclose(changed, reference)
    with torch.no_grad():  # the reference equals the plain base model
        for b, row in enumerate(rows()):
            ids = torch.cat([row.prompt_ids, row.response_ids])
            expected = sequence_log_probs(
                base(input_ids=ids[None]).logits[0], ids, row.prompt_ids.numel()
            )
            mask = row.response_mask == 1
            r = row.response_ids.numel()
            torch.testing.assert_close(reference[b, :r][mask], expected[mask], rtol=0, atol=1e-5)
    assert actor.trainable_parameters() and all(
        "lora_" in n for n, p in actor.model.named_parameters() if p.requires_grad
    )


def test_a_frozen_reference_is_the_adapter_as_it_was_and_training_is_untouched(tiny):
    """`ppo.reference = "warm_start"`: the reference is the adapter at `freeze_reference`
    (the loaded policy), not the base model; swapping it in for the reference pass leaves the
    trained parameters (objects, values, gradients) as they were."""
    actor = Actor.from_pretrained(tiny.base, tiny.lora)
    perturb(actor, seed=1)  # the "warm-start" policy
    batch = collate(rows())
    actor.freeze_reference()
    with torch.no_grad():
        start = actor.log_probs(batch)
        assert torch.equal(actor.reference_log_probs(batch), start)
    parameters = actor.trainable_parameters()
    optimizer = torch.optim.SGD(parameters, lr=0.5)
    loss = -actor.log_probs(batch).sum()
    loss.backward()
    grads = [p.grad.clone() for p in parameters]
    optimizer.step()
    values = [p.detach().clone() for p in parameters]
    with torch.no_grad():
        moved = actor.log_probs(batch)
        reference = actor.reference_log_probs(batch)
        with actor.model.disable_adapter():
            base = actor.forward(batch).log_probs
    assert not torch.allclose(moved, start), "the update changed the policy"
    torch.testing.assert_close(reference, start, rtol=0, atol=0)  # still the frozen policy
    assert not torch.allclose(reference, base), "not the base model"
    assert actor.trainable_parameters() == parameters  # the optimizer's objects
    assert all(torch.equal(p, v) for p, v in zip(parameters, values, strict=True))
    assert all(torch.equal(p.grad, g) for p, g in zip(parameters, grads, strict=True))
    assert all(p.requires_grad for p in parameters)


def test_saved_adapter_reloads_with_peft_and_reproduces_log_probs(tiny, tmp_path):
    actor = Actor.from_pretrained(tiny.base, tiny.lora)
    perturb(actor, seed=4)
    folder = actor.save_adapter(tmp_path / "adapter")
    assert sorted(p.name for p in folder.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == tiny.base_model
    assert config["r"] == tiny.lora.rank and config["lora_alpha"] == tiny.lora.alpha
    from safetensors.torch import load_file

    assert check_adapter_rules(config, load_file(folder / "adapter_model.safetensors")) == []
    loaded = Actor(
        PeftModel.from_pretrained(tiny.base_lm(), folder),
        base_model=tiny.base_model,
        lora=tiny.lora,
    )
    batch = collate(rows(seed=2))
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.log_probs(batch), actor.log_probs(batch), rtol=0, atol=1e-5
        )
    perturb(actor, seed=5)  # rewriting the folder in place (after the next update) works
    actor.save_adapter(folder)
    reloaded = PeftModel.from_pretrained(tiny.base_lm(), folder)
    with torch.no_grad():
        ids = torch.arange(10)[None]
        torch.testing.assert_close(
            reloaded(input_ids=ids).logits, actor.model(input_ids=ids).logits
        )


def test_export_refuses_an_adapter_vllm_cannot_serve(tiny, tmp_path):
    big = tiny.lora.model_copy(update={"rank": 65})
    actor = Actor.from_pretrained(tiny.base, big)
    with pytest.raises(GateError, match="adapter.rank"):
        actor.save_adapter(tmp_path / "adapter")
    assert not (tmp_path / "adapter").exists()


def test_warm_start_from_a_checkpoint_uses_the_core_gates(tiny, saved, tmp_path):
    path, trained, _, _ = saved
    run = tmp_path / "run"
    run.mkdir()
    critic = ValueModel.from_pretrained(tiny.base_model)
    actor, loaded = Actor.from_checkpoint(
        path, base_model=tiny.base_model, lora=tiny.lora, critic=critic, run_dir=run
    )
    assert [r.gate for r in read_ledger(run)] == [
        "PPO_WARM_START_CONFIG_PASSED",
        "PPO_ACTOR_LORA_LOAD_PASSED",
        "PPO_WARM_START_LOAD_PASSED",
    ]
    assert loaded.parent.step == 1 and actor.trainable_parameters()
    batch = collate(rows(seed=3))
    reference = Actor(trained, base_model=tiny.base_model, lora=tiny.lora)
    with torch.no_grad():
        torch.testing.assert_close(actor.log_probs(batch), reference.log_probs(batch))
    fresh = Actor.from_pretrained(tiny.base, tiny.lora)  # load_adapter: the same, in place
    fresh.load_adapter(path, critic=ValueModel.from_pretrained(tiny.base_model))
    with torch.no_grad():
        torch.testing.assert_close(fresh.log_probs(batch), reference.log_probs(batch))


def test_saved_checkpoint_of_an_actor_round_trips(tiny, tmp_path):
    """Actor.model is what save_checkpoint takes (the lead's pipeline path)."""
    actor, critic, record = tiny.trained()
    wrapped = Actor(actor, base_model=tiny.base_model, lora=tiny.lora)
    out = save_checkpoint(
        tmp_path / "checkpoints",
        step=1,
        actor=wrapped.model,
        critic=critic,
        update=record,
        base_model=tiny.base_model,
        lora_spec=tiny.lora,
        checkpoint_spec=tiny.spec,
    )
    assert (out / "lora_adapter" / "adapter_model.safetensors").is_file()
