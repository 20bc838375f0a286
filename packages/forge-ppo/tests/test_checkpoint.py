"""LoRA-only checkpoints: layout, summary, PEFT load, vLLM rules and every failure path."""

from __future__ import annotations

import errno
import json
import os
import signal

import pytest
import torch
from peft import PeftModel
from pydantic import ValidationError
from safetensors import safe_open

from forge_gates import GateError, read_ledger
from forge_ppo import (
    UpdateRecord,
    UpdateTracker,
    ValueModel,
    adapter_state_dict,
    check_adapter_rules,
    save_checkpoint,
    verify_checkpoint,
)

PAYLOAD = {
    "lora_adapter/adapter_model.safetensors",
    "lora_adapter/adapter_config.json",
    "critic/model.safetensors",
    "critic/config.json",
}


def _save(tiny, root, actor, critic, record, **kwargs):
    args = dict(
        step=record.step,
        actor=actor,
        critic=critic,
        update=record,
        base_model=tiny.base_model,
        lora_spec=tiny.lora,
        checkpoint_spec=tiny.spec,
        run_dir=root / "run",
    )
    return save_checkpoint(root, **{**args, **kwargs})


def _rules(err: GateError) -> set[str]:
    return {v.rule for v in err.value.violations}


def _no_checkpoint_left(root):
    return not [
        p.name for p in root.iterdir() if p.name.startswith(("global_step", ".global_step"))
    ]


def test_layout_summary_and_marker(saved, tiny):
    path, _, critic, record = saved
    files = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
    assert files == PAYLOAD | {"checkpoint-summary.json"}
    summary = verify_checkpoint(path)
    assert set(summary.files) == PAYLOAD
    assert summary.step == 1 and summary.parent is None and summary.update == record
    assert summary.never_saved == ("optimizer", "scheduler", "rng", "extra_state")
    sizes = {k: (path / k).stat().st_size for k in PAYLOAD}
    assert summary.actor_bytes == sum(v for k, v in sizes.items() if k.startswith("lora_adapter"))
    assert summary.total_bytes == sum(sizes.values())
    config = json.loads((path / "lora_adapter/adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (4, 8)
    assert sorted(config["target_modules"]) == sorted(tiny.lora.target_modules)
    assert config["base_model_name_or_path"] == tiny.base_model
    with safe_open(path / "critic/model.safetensors", "pt") as handle:
        assert {handle.get_tensor(k).dtype for k in handle.keys()}  # noqa: SIM118 == {torch.bfloat16}
        assert set(handle.keys()) == set(critic.state_dict())
    (marker,) = [r for r in read_ledger(path.parent / "run") if r.gate.startswith("PPO_COMPACT")]
    assert marker.gate == "PPO_COMPACT_CHECKPOINT_PASSED"
    assert (
        marker.fields["total_bytes"]
        == summary.total_bytes
        == (marker.fields["actor_bytes"] + marker.fields["critic_bytes"])
    )


def test_adapter_loads_with_peft_and_reproduces_the_actor(saved, tiny):
    path, actor, _, _ = saved
    loaded = PeftModel.from_pretrained(tiny.base_lm(), path / "lora_adapter").eval()
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, actor(input_ids=ids).logits)
        assert not torch.equal(loaded(input_ids=ids).logits, tiny.base_lm()(input_ids=ids).logits)


def test_saved_adapter_passes_vllm_rules_and_each_rule_can_fail(saved):
    path, *_ = saved
    config = json.loads((path / "lora_adapter/adapter_config.json").read_text())
    with safe_open(path / "lora_adapter/adapter_model.safetensors", "pt") as handle:
        names = list(handle.keys())
    assert check_adapter_rules(config, names, max_lora_rank=4) == []
    bad = {**config, "use_dora": True, "bias": "all", "modules_to_save": ["lm_head"], "r": 128}
    rules = {v.rule for v in check_adapter_rules(bad, [*names, "x.lora_B.bias"], max_lora_rank=64)}
    assert rules == {
        "adapter.dora",
        "adapter.bias",
        "adapter.modules_to_save",
        "adapter.rank",
        "adapter.tensors",
    }


def test_value_model_round_trips_through_the_checkpoint(saved):
    path, _, critic, _ = saved
    config = json.loads((path / "critic/config.json").read_text())
    rebuilt = ValueModel.from_critic_config(config, dtype=torch.float32)
    from safetensors.torch import load_file

    rebuilt.load_state_dict(
        {k: v.float() for k, v in load_file(path / "critic/model.safetensors").items()}
    )
    reference = ValueModel.from_critic_config(config, dtype=torch.float32)
    reference.load_state_dict(
        {k: v.to(torch.bfloat16).float() for k, v in critic.state_dict().items()}
    )
    ids = torch.randint(0, 256, (2, 7))
    with torch.no_grad():
        assert torch.equal(rebuilt(ids), reference(ids))


def test_fp32_critic_when_the_spec_says_so(tiny, tmp_path):
    actor, critic, record = tiny.trained()
    path = _save(tiny, tmp_path, actor, critic, record, critic_dtype="fp32")
    with safe_open(path / "critic/model.safetensors", "pt") as handle:
        for key in handle.keys():  # noqa: SIM118
            assert torch.equal(handle.get_tensor(key), critic.state_dict()[key])


def test_no_update_no_record(tiny):
    actor, critic = tiny.actor(), tiny.critic()
    tracker = UpdateTracker(actor, critic)
    with pytest.raises(GateError) as err:
        tracker.finish(
            step=1,
            actor_optimizer_steps=0,
            critic_optimizer_steps=1,
            actor_loss=float("nan"),
            critic_loss=0.1,
            action_tokens=5,
        )
    assert {
        "update.actor_changed",
        "update.critic_changed",
        "update.actor_loss",
        "update.actor_optimizer_steps",
    } <= _rules(err)
    with pytest.raises(ValidationError):
        UpdateRecord(
            step=1,
            actor_optimizer_steps=1,
            critic_optimizer_steps=1,
            actor_delta_norm=0.0,
            critic_checksum_before=(0, 0),
            critic_checksum_after=(1, 1),
            actor_fingerprint="0" * 64,
            actor_loss=0.0,
            critic_loss=0.0,
            action_tokens=1,
        )


def test_refuses_a_record_of_another_step_or_other_weights(tiny, tmp_path):
    actor, critic, record = tiny.trained()
    with torch.no_grad():  # the adapter changed after the record was taken
        next(p for p in actor.parameters() if p.requires_grad).add_(1.0)
    (tmp_path / "run").mkdir()  # a failure is recorded when the run folder exists
    with pytest.raises(GateError) as err:
        _save(tiny, tmp_path, actor, critic, record, step=2)
    assert _rules(err) == {"checkpoint.update_step", "checkpoint.update_fingerprint"}
    assert _no_checkpoint_left(tmp_path)
    (failed,) = read_ledger(tmp_path / "run")
    assert failed.gate == "PPO_COMPACT_CHECKPOINT_FAILED" and failed.fields["violations"] == 2


def test_refuses_to_overwrite(saved, tiny):
    path, actor, critic, record = saved
    with pytest.raises(GateError) as err:
        _save(tiny, path.parent, actor, critic, record)
    assert _rules(err) == {"checkpoint.exists"}


def test_free_disk_checked_first(saved, tiny, tmp_path):
    _, actor, critic, record = saved
    with pytest.raises(GateError) as err:
        _save(
            tiny,
            tmp_path,
            actor,
            critic,
            record,
            checkpoint_spec=tiny.spec.model_copy(update={"min_free_disk_gib": 1e9}),
        )
    assert _rules(err) == {"preflight.disk"}
    assert _no_checkpoint_left(tmp_path)


def test_size_caps_enforced_and_nothing_left(saved, tiny, tmp_path):
    _, actor, critic, record = saved
    tight = tiny.spec.model_copy(update={"actor_max_mib": 0.001, "total_max_mib": 0.01})
    with pytest.raises(GateError) as err:
        _save(tiny, tmp_path, actor, critic, record, checkpoint_spec=tight)
    assert _rules(err) == {"checkpoint.actor_cap", "checkpoint.total_cap"}
    assert _no_checkpoint_left(tmp_path)


def test_on_disk_size_checked_after_writing(saved, tiny, tmp_path):
    """Tensor bytes fit the actor cap but the files (header + adapter_config.json) do not."""
    path, actor, critic, record = saved
    tensor_bytes = sum(t.numel() * t.element_size() for t in adapter_state_dict(actor).values())
    on_disk = verify_checkpoint(path).actor_bytes
    assert on_disk > tensor_bytes + 200
    cap = (tensor_bytes + 100) / (1 << 20)
    with pytest.raises(GateError) as err:
        _save(
            tiny,
            tmp_path,
            actor,
            critic,
            record,
            checkpoint_spec=tiny.spec.model_copy(update={"actor_max_mib": cap}),
        )
    assert _rules(err) == {"checkpoint.actor_cap"}
    assert "MiB (" in str(err.value)  # the post-write message carries the exact byte count
    assert _no_checkpoint_left(tmp_path)


def test_os_error_during_write_leaves_no_half_written_checkpoint(
    saved, tiny, tmp_path, monkeypatch
):
    _, actor, critic, record = saved
    import forge_ppo.checkpoint._save as module

    real = module.save_file

    def full_disk(state, path, metadata=None):
        if "critic" in str(path):
            with open(path, "wb") as handle:
                handle.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(state, path, metadata=metadata)

    monkeypatch.setattr(module, "save_file", full_disk)
    with pytest.raises(GateError) as err:
        _save(tiny, tmp_path, actor, critic, record)
    assert _rules(err) == {"checkpoint.write"}
    assert "No space left on device" in str(err.value)
    assert isinstance(err.value.__cause__, OSError)
    assert _no_checkpoint_left(tmp_path)


def test_kill_mid_write_leaves_no_final_folder(saved, tiny, tmp_path):
    _, actor, critic, record = saved
    import forge_ppo.checkpoint._save as module

    pid = os.fork()
    if pid == 0:  # child: die by SIGKILL halfway through the critic file
        try:

            def killed(state, path, metadata=None):
                if "critic" in str(path):
                    with open(path, "wb") as handle:
                        handle.write(b"partial")
                        handle.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(state, path, metadata=metadata)

            real = module.save_file
            module.save_file = killed
            _save(tiny, tmp_path, actor, critic, record, run_dir=None)
        finally:
            os._exit(3)  # never reached when the kill lands
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    names = [p.name for p in tmp_path.iterdir()]
    assert "global_step_1" not in names
    assert names and all(n.startswith(f".global_step_1.tmp-{pid}-") for n in names)
    # the next save into the folder sweeps what the killed one left (its pid is dead)
    _save(tiny, tmp_path, actor, critic, record, run_dir=None)
    assert [p.name for p in tmp_path.iterdir()] == ["global_step_1"]


def test_checkpoint_files_are_0644_and_folders_0755_whatever_the_umask(saved, tiny, tmp_path):
    """An inference server running as another user must read the adapter (safetensors writes
    0600, mkdtemp 0700, a umask of 077 would give 0700 folders)."""
    _, actor, critic, record = saved
    previous = os.umask(0o077)
    try:
        path = _save(tiny, tmp_path, actor, critic, record, run_dir=None)
    finally:
        os.umask(previous)
    modes = {p.relative_to(path).as_posix(): p.stat().st_mode & 0o777 for p in path.rglob("*")}
    assert path.stat().st_mode & 0o777 == 0o755
    assert modes == {
        **{name: 0o644 for name in PAYLOAD | {"checkpoint-summary.json"}},
        "lora_adapter": 0o755,
        "critic": 0o755,
    }
