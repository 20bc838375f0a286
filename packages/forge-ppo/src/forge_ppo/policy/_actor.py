"""The actor: a Hugging Face causal LM with a trainable PEFT LoRA adapter (spec.lora).

Log-probs are RAW (temperature 1, no top-k/top-p), the convention of forge-rollout's server and
vLLM's `raw_logprobs`, so a fresh forward pass of the served weights reproduces the rollout's
log-probs. Only the response positions go through the LM head:

    hidden  = decoder(input_ids, attention_mask)                       (B, L, H)
    h       = hidden[b, response_positions[b, j]]                      (B, R, H)
    logits  = lm_head(h), at least float32                             (B, R, V)
    log_probs[b, j] = log_softmax(logits[b, j])[response_ids[b, j]]    (B, R)

Outputs are 0 outside `response_mask` (observation and padding tokens: PPO never reads them).

The reference policy is the same model with the adapter disabled (`disable_adapter()`), so KL
to the reference costs no second copy of the weights; or, after `freeze_reference()`, the
adapter as it was then (e.g. the warm-start policy: `ppo.reference = "warm_start"`), a copy of
the LoRA tensors only, swapped in for the reference pass.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import torch
from peft import PeftModel, get_peft_model
from safetensors.torch import save as safetensors_bytes
from transformers import AutoModelForCausalLM, PreTrainedModel

from forge_gates import GateError, LoRASpec, atomic_write_bytes, atomic_write_json
from forge_ppo.algo._batch import Batch, gather_response
from forge_ppo.algo._losses import entropy_from_logits
from forge_ppo.checkpoint._adapter import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    adapter_config_dict,
    adapter_state_dict,
    check_adapter_rules,
    lora_config,
)
from forge_ppo.checkpoint._warm_start import WarmStart, warm_start
from forge_ppo.models._value_model import ValueModel

EXPORT_GATE = "PPO_ADAPTER_EXPORT"


class ActorOutput(NamedTuple):
    """Response-aligned actor outputs; 0 outside `response_mask`."""

    log_probs: torch.Tensor  # (B, R) float32 (float64 for a float64 model)
    entropy: torch.Tensor | None  # (B, R), same dtype, when asked for


def load_causal_lm(path: str | os.PathLike[str], *, dtype: torch.dtype) -> PreTrainedModel:
    """A local Hugging Face causal LM folder; never downloads."""
    return AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=dtype)


class Actor:
    """A PEFT-wrapped causal LM; only the LoRA parameters train.

    Build it with `from_pretrained` (fresh adapter, B = 0: the actor starts equal to the base),
    `from_model` (an in-memory base, e.g. a tiny test model) or `from_checkpoint` (warm start).
    """

    def __init__(self, model: PeftModel, *, base_model: str, lora: LoRASpec) -> None:
        self.model = model
        self.base_model = base_model
        self.lora = lora
        self.reference: dict[str, torch.Tensor] | None = None  # frozen LoRA tensors, by name

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_model(cls, base: PreTrainedModel, lora: LoRASpec, *, base_model: str) -> Actor:
        """Wrap `base` (modified in place) with a fresh adapter from `lora` (`lora_config`);
        `base_model` names it in the adapter config (the local folder it was loaded from). The
        adapter takes the base's dtype (PEFT would keep it in fp32 on a bf16 base), as verl
        casts it (`transformer_impl.py:372-381`): a spec's `actor.dtype` is the whole model's."""
        base.name_or_path = base.config.name_or_path = base_model
        config = lora_config(lora, base_model=base_model)
        model = get_peft_model(base, config, autocast_adapter_dtype=False)
        return cls(model, base_model=base_model, lora=lora)

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], lora: LoRASpec, *, dtype: torch.dtype = torch.float32
    ) -> Actor:
        """The base model in `path` (local folder, offline) with a fresh LoRA adapter."""
        return cls.from_model(load_causal_lm(path, dtype=dtype), lora, base_model=str(path))

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: str | os.PathLike[str],
        *,
        base_model: str,
        lora: LoRASpec,
        critic: ValueModel,
        run_dir: str | os.PathLike[str] | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> tuple[Actor, WarmStart]:
        """Warm start from a `global_step_N` checkpoint through the core's strict `warm_start`
        (its three gates; `critic` is loaded in place). The new run starts at step 0."""
        loaded = warm_start(
            checkpoint,
            base_model=base_model,
            actor_base=load_causal_lm(base_model, dtype=dtype),
            critic=critic,
            lora_spec=lora,
            run_dir=run_dir,
        )
        return cls(loaded.actor, base_model=base_model, lora=lora), loaded

    def load_adapter(
        self,
        checkpoint: str | os.PathLike[str],
        *,
        critic: ValueModel,
        run_dir: str | os.PathLike[str] | None = None,
    ) -> WarmStart:
        """Replace this actor's weights with a checkpoint's (warm start, see `from_checkpoint`).

        Call it BEFORE building a PPOTrainer: the trainer's optimizer holds the old parameters
        (PPOTrainer.update refuses an actor whose model was swapped).
        """
        dtype = next(self.model.parameters()).dtype
        loaded = warm_start(
            checkpoint,
            base_model=self.base_model,
            actor_base=load_causal_lm(self.base_model, dtype=dtype),
            critic=critic,
            lora_spec=self.lora,
            run_dir=run_dir,
        )
        self.model = loaded.actor.to(self.device)
        self.reference = None  # it named the old model's tensors
        return loaded

    # -- forward -----------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The LoRA parameters (the only ones with requires_grad)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def forward(self, batch: Batch, *, entropy: bool = False) -> ActorOutput:
        """Log-probs (and per-token entropy) of the response tokens; see the module docstring.

        Gradients flow when enabled by the caller. batch: on the actor's device.
        """
        base = self.model.get_base_model()
        assert isinstance(base, PreTrainedModel), "peft types it nn.Module; ours is a causal LM"
        hidden = base.get_decoder()(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        ).last_hidden_state
        logits = base.get_output_embeddings()(gather_response(hidden, batch.response_positions))
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # (B, R, V), at least float32
        log_probs = torch.log_softmax(logits, dim=-1)
        picked = log_probs.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
        action = batch.response_mask
        out_entropy = None
        if entropy:
            out_entropy = torch.where(action, entropy_from_logits(logits), 0.0)
        return ActorOutput(torch.where(action, picked, 0.0), out_entropy)

    def log_probs(self, batch: Batch) -> torch.Tensor:
        """(B, R) float32 raw log-probs of the action tokens (0 elsewhere)."""
        return self.forward(batch).log_probs

    def freeze_reference(self) -> None:
        """Make the adapter as it is now the reference policy (instead of the base model)."""
        self.reference = {
            name: p.detach().clone() for name, p in self.model.named_parameters() if p.requires_grad
        }

    @torch.no_grad()
    def reference_log_probs(self, batch: Batch) -> torch.Tensor:
        """(B, R) log-probs under the reference policy: the base model (adapter disabled), or
        the frozen adapter of `freeze_reference` swapped in for this pass and swapped back."""
        if self.reference is None:
            with self.model.disable_adapter():
                return self.forward(batch).log_probs
        current: dict[str, torch.Tensor] = {}
        parameters = dict(self.model.named_parameters())
        try:
            for name, frozen in self.reference.items():
                current[name] = parameters[name].data
                parameters[name].data = frozen
            return self.forward(batch).log_probs
        finally:
            for name, data in current.items():
                parameters[name].data = data

    # -- export ------------------------------------------------------------------------------

    def save_adapter(self, folder: str | os.PathLike[str]) -> Path:
        """Write the adapter as a PEFT folder (`adapter_model.safetensors` + `adapter_config.json`)
        that `PeftModel.from_pretrained` and forge-rollout's / vLLM's `load_lora_adapter` read.

        The tensors and config are the ones checkpoints write (same fingerprint); vLLM's adapter
        rules are checked first (GateError PPO_ADAPTER_EXPORT). Each file is replaced atomically,
        weights first, so the folder can be rewritten in place after every update.
        """
        target = Path(folder)
        state = adapter_state_dict(self.model)
        config = adapter_config_dict(self.model, base_model=self.base_model)
        problems = check_adapter_rules(config, state)
        if problems:
            raise GateError(EXPORT_GATE, problems)
        target.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(
            target / ADAPTER_WEIGHTS, safetensors_bytes(state, metadata={"format": "pt"})
        )
        atomic_write_json(target / ADAPTER_CONFIG, config)
        return target
