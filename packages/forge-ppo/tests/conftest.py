"""Tiny offline models for checkpoint and warm-start tests (nothing is downloaded), and
Harbor-shaped job folders for the P0 recipe's tests (`harbor`, as forge-eval's tests write
them: Harbor 0.25's own field names)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from peft import PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.utils import logging as hf_logging

from forge_eval.testing import job_config, trial_result, write_job
from forge_gates import CheckpointSpec, LoRASpec, file_sha256
from forge_ppo import UpdateRecord, UpdateTracker, ValueModel, lora_config, save_checkpoint
from forge_sandbox.testing.fixtures import cgroups, isolation  # noqa: F401 (by name)

torch.set_num_threads(1)
hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()

LORA = LoRASpec(rank=4, alpha=8, target_modules=("q_proj", "v_proj", "up_proj"))
SPEC = CheckpointSpec(min_free_disk_gib=0.001, actor_max_mib=1, critic_max_mib=2, total_max_mib=3)


def pytest_configure(config):
    # peft 0.21 calls a transformers method deprecated in 5.x; nothing to act on here
    config.addinivalue_line("filterwarnings", "ignore:.*is_gradient_checkpointing:FutureWarning")


@dataclass
class Tiny:
    base: Path  # a saved tiny Qwen2ForCausalLM folder
    lora: LoRASpec = LORA
    spec: CheckpointSpec = SPEC

    @property
    def base_model(self) -> str:
        return str(self.base)

    def base_lm(self) -> Qwen2ForCausalLM:
        return Qwen2ForCausalLM.from_pretrained(self.base, local_files_only=True).eval()

    def critic(self) -> ValueModel:
        return ValueModel.from_pretrained(self.base_model)

    def actor(self) -> PeftModel:
        return get_peft_model(self.base_lm(), lora_config(LORA, base_model=self.base_model))

    def trained(self, step: int = 1, seed: int = 0) -> tuple[PeftModel, ValueModel, UpdateRecord]:
        """One real update of actor (LoRA) and critic on random tokens."""
        torch.manual_seed(seed)
        actor, critic = self.actor(), self.critic()
        tracker = UpdateTracker(actor, critic)
        ids = torch.randint(0, 256, (2, 12))
        trainable = [p for p in actor.parameters() if p.requires_grad]
        actor_opt = torch.optim.AdamW(trainable, lr=1e-2)
        critic_opt = torch.optim.AdamW(critic.parameters(), lr=1e-3)
        logp = actor(input_ids=ids).logits.log_softmax(-1).gather(-1, ids[..., None])
        actor_loss = -logp.mean()
        actor_loss.backward()
        actor_opt.step()
        critic_loss = (critic(ids) - 1.0).square().mean()
        critic_loss.backward()
        critic_opt.step()
        record = tracker.finish(
            step=step,
            actor_optimizer_steps=1,
            critic_optimizer_steps=1,
            actor_loss=actor_loss.item(),
            critic_loss=critic_loss.item(),
            action_tokens=int(ids.numel()),
        )
        return actor.eval(), critic, record


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Tiny:
    torch.manual_seed(1234)
    config = Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=128,
    )
    base = tmp_path_factory.mktemp("tiny") / "base"
    Qwen2ForCausalLM(config).save_pretrained(base)
    return Tiny(base=base)


@pytest.fixture(scope="session")
def saved(tiny, tmp_path_factory):
    """(checkpoint folder, trained actor, critic, record), written once; copy before editing."""
    actor, critic, record = tiny.trained()
    root = tmp_path_factory.mktemp("ckpt")
    path = save_checkpoint(
        root,
        step=1,
        actor=actor,
        critic=critic,
        update=record,
        base_model=tiny.base_model,
        lora_spec=LORA,
        checkpoint_spec=SPEC,
        run_dir=root / "run",
    )
    return path, actor, critic, record


@pytest.fixture
def checkpoint_copy(saved, tmp_path) -> Path:
    target = tmp_path / "global_step_1"
    shutil.copytree(saved[0], target)
    return target


def _poison_and_rehash(folder: Path, name: str, part: str = "lora_B") -> str:
    """Write a NaN into the first `part` tensor of `name` and re-hash the summary, so the file
    checks pass and only the values are wrong (what a diverged parent looks like)."""
    weights = folder / name
    tensors = load_file(weights)
    key = sorted(k for k in tensors if part in k)[0]
    tensors[key].view(-1)[0] = float("nan")
    save_file(tensors, weights)
    summary_path = folder / "checkpoint-summary.json"
    summary = json.loads(summary_path.read_text())
    summary["files"][name].update(bytes=weights.stat().st_size, sha256=file_sha256(weights))
    summary_path.write_text(json.dumps(summary))
    return key


@pytest.fixture
def poison_and_rehash():
    """`(folder, file, part="lora_B") -> key`: a NaN in a saved tensor, the summary re-hashed."""
    return _poison_and_rehash


@pytest.fixture
def no_sandbox_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests of the gates a run meets before any sandbox starts (model, split, warm start,
    protocol): the local sandbox's own preflight (root, cgroups) is not what they test, and
    they run as an ordinary user too."""
    from forge_ppo.recipes.p0 import _p0
    from forge_ppo.recipes.train import _train

    for module in (_p0, _train):
        monkeypatch.setattr(module, "sandbox_problems", lambda spec: [])


# -- Harbor job folders: forge-eval's test builders (Harbor's own field names) ---------------


@pytest.fixture
def harbor() -> SimpleNamespace:
    """The builders, for tests (tests cannot import conftest under --import-mode=importlib)."""
    return SimpleNamespace(trial_result=trial_result, job_config=job_config, write_job=write_job)
