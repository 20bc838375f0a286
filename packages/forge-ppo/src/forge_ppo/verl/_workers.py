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
  and whether all are finite (the warm-start check "on every rank");
- `forge_settings()`: the offload, checkpointing, fused-kernel and dtype settings the built
  engine runs with (the actor's also the entropy coefficient of the loss it uses);
- `forge_watch()` once after building, then `forge_micro_batches()` after each update: the
  largest micro-batch the engine formed per pass since the last call (`_readback`);
- `forge_memory()` (the actor's only: the critic shares the rank's process): the process's
  peak host RSS and, on GPUs, peak allocated and reserved memory (forge-gates `process_peaks`);
- `forge_rank()` (the actor's only): the rank and world size of the process group the rank's
  process joined, its pid and Ray node (the separated-rollout gate's ranks, as built).
"""

from __future__ import annotations

import os
from typing import Any

import ray
import torch
import torch.distributed as dist
from peft import get_peft_model_state_dict
from torch.distributed.tensor import DTensor, Shard
from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

from forge_gates import process_peaks
from forge_ppo.checkpoint._adapter import tensor_fingerprint
from forge_ppo.verl._readback import engine_settings, take_records, watch_engine


def _budgets(engine_config: Any) -> dict[str, Any]:
    return {
        "train": engine_config.max_token_len_per_gpu,
        "infer": engine_config.infer_max_token_len_per_gpu,
        "dynamic": bool(engine_config.use_dynamic_bsz),
    }


def _full_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every rank gets the module's full tensors (a collective: all ranks call it)."""
    return gather_full(module.state_dict())


def _adapter_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    # as `adapter_state_dict` (the mirror, the checkpoint): never the frozen base of an
    # adapted lm_head / embedding. PEFT picks the keys from the sharded state (no
    # communication); only those are gathered
    picked = get_peft_model_state_dict(
        module, state_dict=module.state_dict(), save_embedding_layers=False
    )
    return gather_full(dict(picked))


def gather_full(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Full CPU copies of `state`'s tensors on every rank (a collective).

    FSDP2 shards a parameter on dim 0 in `torch.chunk` order (rank r holds rows
    [r*c, (r+1)*c) of c = ceil(rows / world), fewer or none at the end). All such shards of one
    dtype travel in ONE all-gather (each padded to c rows), instead of one collective per
    tensor (`get_model_state_dict` gathers tensor by tensor: 54 gloo collectives took 0.15 s
    of every update on the tiny model); any other DTensor layout goes through `full_tensor()`.
    """
    full: dict[str, torch.Tensor] = {}
    groups: dict[tuple[Any, torch.dtype], list[tuple[str, DTensor]]] = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            continue  # a model state dict holds tensors only
        if not isinstance(value, DTensor):
            full[name] = value.detach().to("cpu", copy=True).contiguous()
        elif value.device_mesh.ndim == 1 and tuple(value.placements) == (Shard(0),):
            groups.setdefault((value.device_mesh, value.dtype), []).append((name, value))
        else:
            full[name] = value.full_tensor().detach().to("cpu", copy=True).contiguous()
    for (mesh, _dtype), items in groups.items():
        world = mesh.size()
        rows = [-(-v.shape[0] // world) for _, v in items]  # c per tensor
        pieces = []
        for (_, value), c in zip(items, rows, strict=True):
            local = value.to_local().detach()
            padded = local.new_zeros((c, *value.shape[1:]))
            padded[: local.shape[0]] = local
            pieces.append(padded.reshape(-1))
        flat = torch.cat(pieces)
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat, group=mesh.get_group())
        offset = 0
        for (name, value), c, piece in zip(items, rows, pieces, strict=True):
            n = piece.numel()
            shards = [g[offset : offset + n].view(c, *value.shape[1:]) for g in gathered]
            full[name] = torch.cat(shards)[: value.shape[0]].to("cpu").contiguous()
            offset += n
    return {name: full[name] for name in state if name in full}


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
    def forge_rank(self) -> dict[str, Any]:
        return {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
        }

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

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_settings(self) -> dict[str, Any]:
        assert self.actor is not None, "init_model() first"
        loss_config = self.loss_fn.keywords["config"]  # the config ppo_loss is bound to
        return engine_settings(self.actor.engine) | {
            "entropy_coeff": float(loss_config.entropy_coeff)
        }

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_watch(self) -> None:
        assert self.actor is not None, "init_model() first"
        watch_engine(self.actor.engine, "actor")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_micro_batches(self) -> dict[str, dict[str, int]]:
        return take_records("actor")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_memory(self) -> dict[str, Any]:
        # the rank's process (the critic is colocated in it): peak host RSS, GPU peaks
        return process_peaks("verl-rank", self.rank).model_dump(mode="json")


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

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_settings(self) -> dict[str, Any]:
        return engine_settings(self.engine)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_watch(self) -> None:
        watch_engine(self.engine, "critic")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def forge_micro_batches(self) -> dict[str, dict[str, int]]:
        return take_records("critic")
