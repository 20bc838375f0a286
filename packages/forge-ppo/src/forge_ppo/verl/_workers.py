"""verl's own workers, extended by subclassing with what Forge reads back from them.

`ForgeActorWorker` is verl's `ActorRolloutRefWorker` (built with role "actor": the LoRA actor,
FSDP2; the reference policy is the same model with the adapter disabled) and `ForgeCriticWorker`
is verl's `TrainingWorker` for the value model. Each adds three methods registered with verl's
own dispatch (`Dispatch.ONE_TO_ALL`: every rank runs it, the driver gets one result per rank):

- `forge_budgets()`: the token budgets the built engine holds (the gate reads these, never
  the spec);
- `forge_weights()`: the full (unsharded) tensors, gathered on every rank (a collective),
  returned by rank 0 only: the actor's PEFT adapter tensors (PEFT's key names), the critic's
  whole state dict;
- `forge_fingerprint()`: per rank, the SHA-256 of the full tensors, the number of meta tensors
  and whether all are finite (the warm-start check "on every rank").
"""

from __future__ import annotations

from typing import Any

import torch
from peft import get_peft_model_state_dict
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

from forge_ppo.checkpoint._adapter import tensor_fingerprint


def _budgets(engine_config: Any) -> dict[str, Any]:
    return {
        "train": engine_config.max_token_len_per_gpu,
        "infer": engine_config.infer_max_token_len_per_gpu,
        "dynamic": bool(engine_config.use_dynamic_bsz),
    }


def _full_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every rank gets the full tensors (FSDP2 all-gathers; a collective: all ranks call it)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=False)
    state = get_model_state_dict(module, options=options)
    return {
        k: v.detach().to("cpu", copy=True).contiguous()
        for k, v in state.items()
        if isinstance(v, torch.Tensor)  # a model state dict holds tensors only
    }


def _adapter_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    # as `adapter_state_dict` (the mirror, the checkpoint): never the frozen base of an
    # adapted lm_head / embedding
    return dict(
        get_peft_model_state_dict(
            module, state_dict=_full_state(module), save_embedding_layers=False
        )
    )


def _fingerprint(module: torch.nn.Module, state: dict[str, torch.Tensor], rank: int) -> dict:
    meta = [n for n, p in module.named_parameters() if p.is_meta]
    return {
        "rank": rank,
        "fingerprint": tensor_fingerprint(state),
        "tensors": len(state),
        "meta": meta[:5],
        "finite": all(bool(torch.isfinite(t).all()) for t in state.values()),
    }


class ForgeActorWorker(ActorRolloutRefWorker):
    """verl's actor worker (role "actor") plus Forge's read-backs."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_budgets(self) -> dict[str, Any]:
        assert self.actor is not None, "init_model() first"
        return _budgets(self.actor.engine.engine_config)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_weights(self) -> dict[str, torch.Tensor] | None:
        assert self.actor is not None, "init_model() first"
        state = _adapter_state(self.actor.engine.module)
        return state if self.rank == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_fingerprint(self) -> dict[str, Any]:
        assert self.actor is not None, "init_model() first"
        module = self.actor.engine.module
        return _fingerprint(module, _adapter_state(module), self.rank)


class ForgeCriticWorker(TrainingWorker):
    """verl's training worker for the value model plus Forge's read-backs."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_budgets(self) -> dict[str, Any]:
        return _budgets(self.engine.engine_config)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_weights(self) -> dict[str, torch.Tensor] | None:
        state = _full_state(self.engine.module)
        return state if self.rank == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_fingerprint(self) -> dict[str, Any]:
        module = self.engine.module
        return _fingerprint(module, _full_state(module), self.rank)
