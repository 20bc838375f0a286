"""The demo policy merged into its base (`recipes._demo_model`): the merged folder's logits are
base + adapter's (its tied head untied, the input embeddings kept), the same inputs give the
same bytes, the key follows the adapter, and a second call reuses the cache."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from peft import PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from forge_gates import LoRASpec, tree_files
from forge_ppo import lora_config
from forge_ppo.recipes._demo_model import (
    ADAPTER_WEIGHTS,
    RECORD_NAME,
    adapter_fingerprint,
    merge_adapter,
    merge_key,
    resolve_merged_model,
)
from forge_rollout import TinyModelSpec, make_tiny_model

# peft warns on any adapter of a tied head (the fixture's); merge_adapter unties it first
pytestmark = pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`:UserWarning")

# the demo policy's targets: lm_head included (the part vLLM refuses)
LORA = LoRASpec(rank=4, alpha=8, target_modules=("q_proj", "v_proj", "down_proj", "lm_head"))
TOKENS = torch.tensor([[1, 17, 42, 99, 250, 3, 7, 400]])


def _load(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The tiny model as `model.path = "tiny"` serves it (tied embeddings, as the real one)."""
    return make_tiny_model(tmp_path_factory.mktemp("m") / "tiny", TinyModelSpec(seed=0))


@pytest.fixture(scope="module")
def adapter(base, tmp_path_factory):
    """A LoRA adapter on `base` with every lora_B random (a fresh one's is 0: merging it would
    prove nothing), saved without the base head (as `adapter_state_dict` saves)."""
    torch.manual_seed(0)
    actor = get_peft_model(_load(base), lora_config(LORA, base_model=str(base)))
    with torch.no_grad():
        for name, param in actor.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    out = tmp_path_factory.mktemp("adapter")
    actor.save_pretrained(out, save_embedding_layers=False)
    return out


def test_merged_logits_equal_base_plus_adapter(base, adapter, tmp_path):
    assert json.loads((base / "config.json").read_text())["tie_word_embeddings"] is True
    merged_dir = merge_adapter(base, adapter, tmp_path / "merged")
    with torch.no_grad():
        expected = PeftModel.from_pretrained(_load(base), adapter).eval()(TOKENS).logits
        merged = _load(merged_dir)
        found = merged(TOKENS).logits
        plain = _load(base)(TOKENS).logits
    assert (expected - plain).abs().max() > 0.1  # the adapter really changes the logits
    torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-5)
    assert merged.config.tie_word_embeddings is False
    # the input embeddings are the base's: only the head took the lm_head delta
    torch.testing.assert_close(
        merged.get_input_embeddings().weight, _load(base).get_input_embeddings().weight
    )
    assert not any("lora" in key for key in load_file(merged_dir / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (merged_dir / name).read_bytes() == (base / name).read_bytes()


def test_merge_is_deterministic(base, adapter, tmp_path):
    first = tree_files(merge_adapter(base, adapter, tmp_path / "a"))
    assert first == tree_files(merge_adapter(base, adapter, tmp_path / "b"))


def test_key_follows_the_adapter_not_its_base_path(base, adapter, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(adapter, edited)
    assert merge_key(base, edited) == merge_key(base, adapter)
    config = json.loads((edited / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "/elsewhere/tiny"  # an install on another machine
    (edited / "adapter_config.json").write_text(json.dumps(config))
    assert adapter_fingerprint(edited) == adapter_fingerprint(adapter)
    tensors = load_file(edited / ADAPTER_WEIGHTS)
    key = sorted(tensors)[0]
    tensors[key] = tensors[key] + 1e-3
    save_file(tensors, edited / ADAPTER_WEIGHTS)
    assert merge_key(base, edited) != merge_key(base, adapter)


def test_second_call_reuses_the_cache(base, adapter, tmp_path):
    cache = tmp_path / "cache"
    folder, merged = resolve_merged_model(base, adapter, cache)
    assert merged and folder.name == f"demo-model-{merge_key(base, adapter)[:16]}"
    record = json.loads((folder / RECORD_NAME).read_text())
    assert record["key"] == merge_key(base, adapter)
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    again, merged_again = resolve_merged_model(base, adapter, cache)
    assert (again, merged_again) == (folder, False)
    assert weights.stat().st_mtime_ns == before  # not written again
    assert not list(cache.glob(".demo-model-*"))  # no staging folder left
