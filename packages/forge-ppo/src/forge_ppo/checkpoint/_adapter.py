"""The actor's LoRA adapter: PEFT config from the spec, its state and fingerprint, the exported
`adapter_config.json`, and vLLM's adapter rules (checked by rule; the real vLLM load lives in the
`vllm_cpu` nox session)."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model_state_dict

from forge_gates import LoRASpec, Violation

ADAPTER_DIR = "lora_adapter"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
DEFAULT_MAX_LORA_RANK = 64  # vLLM --max-lora-rank; Forge's production rank is 32


def lora_config(spec: LoRASpec, *, base_model: str) -> LoraConfig:
    """The PEFT LoraConfig the actor trains with (no bias, no DoRA, no modules_to_save)."""
    return LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules),
        bias="none",
        use_dora=False,
        modules_to_save=None,
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_model,
    )


def adapter_state_dict(actor: PeftModel) -> dict[str, torch.Tensor]:
    """The adapter weights exactly as PEFT writes them (keys without the adapter name).

    Never the base layer of an adapted `lm_head` / embedding (PEFT's "auto" would add the frozen
    base weights to the file: not an adapter, refused by vLLM's rules, the base has them)."""
    state = get_peft_model_state_dict(actor, save_embedding_layers=False)
    return {k: v.detach().cpu().contiguous() for k, v in state.items()}


def tensor_fingerprint(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over sorted (key, dtype, shape, raw bytes): equal iff the tensors are identical."""
    digest = hashlib.sha256()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def adapter_config_dict(actor: PeftModel, *, base_model: str) -> dict[str, Any]:
    """`adapter_config.json` content as PEFT's save_pretrained writes it (inference mode on)."""
    config = copy.deepcopy(actor.peft_config["default"])
    config.base_model_name_or_path = base_model
    config.inference_mode = True
    out = config.to_dict()
    for key, value in out.items():
        if isinstance(value, set):
            out[key] = sorted(value)
    return out


def check_adapter_rules(
    config: Mapping[str, Any],
    tensor_names: Iterable[str],
    *,
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK,
) -> list[Violation]:
    """vLLM's LoRA loading rules: plain LoRA, no DoRA, no bias, no modules_to_save, r <= max
    rank, and only `lora_A` / `lora_B` weight tensors in the file."""
    problems: list[Violation] = []

    def need(ok: bool, rule: str, expected: str, found: Any, fix: str) -> None:
        if not ok:
            problems.append(Violation(rule=rule, expected=expected, found=str(found), fix=fix))

    need(
        config.get("peft_type") == "LORA",
        "adapter.peft_type",
        "LORA",
        config.get("peft_type"),
        "export a LoRA adapter",
    )
    need(
        not config.get("use_dora", False),
        "adapter.dora",
        "use_dora false",
        config.get("use_dora"),
        "train without DoRA (vLLM cannot serve it)",
    )
    need(
        config.get("bias", "none") == "none",
        "adapter.bias",
        "bias 'none'",
        config.get("bias"),
        "train with bias='none'",
    )
    need(
        not config.get("modules_to_save"),
        "adapter.modules_to_save",
        "no modules_to_save",
        config.get("modules_to_save"),
        "do not train full modules next to the adapter",
    )
    rank = config.get("r")
    need(
        isinstance(rank, int) and 0 < rank <= max_lora_rank,
        "adapter.rank",
        f"0 < r <= {max_lora_rank} (vLLM --max-lora-rank)",
        rank,
        "lower the LoRA rank or raise the server's --max-lora-rank",
    )
    need(
        not config.get("rank_pattern") and not config.get("alpha_pattern"),
        "adapter.patterns",
        "no per-module rank/alpha patterns",
        {"rank_pattern": config.get("rank_pattern"), "alpha_pattern": config.get("alpha_pattern")},
        "use one rank and alpha for every target module",
    )
    odd = sorted(
        n
        for n in tensor_names
        if not (n.endswith(".lora_A.weight") or n.endswith(".lora_B.weight"))
    )
    need(
        not odd,
        "adapter.tensors",
        "only *.lora_A.weight / *.lora_B.weight tensors",
        f"{len(odd)} other tensor(s), e.g. {odd[:3]}",
        "export only the LoRA A/B matrices",
    )
    return problems
