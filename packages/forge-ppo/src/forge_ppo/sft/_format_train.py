"""Warm start on the action format (`forge-ppo sft-format`): LoRA SFT on synthetic pairs,
then the first-turn valid-block rate on the demo tasks before and after.

`run_format_sft`, as numbered steps:

1. synthetic pairs (`_format.format_pairs`, never a demo task) -> rows with the model's chat
   template; a held-out set from another seed for the estimate;
2. the base model's first turn on every demo task at temperature 1 (`samples` per task, the
   agent's real system + instance prompt through `Engine.chat_prompt_ids`, as the server
   renders it): the share of replies with exactly one valid action block;
3. SFT: mini-batch AdamW on a fresh LoRA adapter, loss `action_nll` (token-mean NLL on the
   reply tokens only), `epochs` passes over length-bucketed batches in shuffled order.
   `_sft.train_sft` is full-batch (one step = every row), built for a dozen oracle rows;
   here 1-2 epochs over ~120 rows must be ~60 steps of a few rows each, so this loop
   batches them and reuses its loss;
4. the adapter saved as a PEFT folder (`Actor.save_adapter`, what `forge-rollout serve
   --adapter` and vLLM load), then step 2 again with the adapter;
5. `format-sft.json` (schema'd, atomic): the spec, the loss curve, both rates with counts.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from forge_gates import LoRASpec, atomic_write_json
from forge_ppo.algo._batch import Batch, collate, row_length
from forge_ppo.local._actor import Actor
from forge_ppo.sft._format import first_turn, format_pairs, one_action, pair_rows
from forge_ppo.sft._sft import SFTResult, action_nll, first_turn_probability, sft_step
from forge_rollout import AgentConfig, Engine, SampleRow, SamplingParams
from forge_sandbox import HarborTask

REPORT_SCHEMA = "forge-ppo/format-sft@1"
REPORT_NAME = "format-sft.json"
ADAPTER_DIR = "adapter"
HELD_OUT_SEED_OFFSET = 1_000_003  # the held-out pairs come from seed + this (other draws)


class FormatSFTSpec(BaseModel):
    """How the format warm start trains and measures (all of it goes into the report)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(default=120, gt=0, description="Synthetic training pairs.")
    held_out: int = Field(default=20, gt=0, description="Held-out pairs for the estimate.")
    seed: int = Field(default=20261201, description="Pair generator and torch seed.")
    epochs: int = Field(default=2, gt=0, description="Passes over the training pairs.")
    batch_size: int = Field(default=4, gt=0, description="Rows per optimizer step.")
    lr: float = Field(default=2e-3, gt=0, description="AdamW learning rate of the adapter.")
    grad_clip: float = Field(default=1.0, gt=0, description="Max global grad norm.")
    lora: LoRASpec = Field(
        default=LoRASpec(rank=16, alpha=32), description="Adapter: attention + MLP projections."
    )
    samples: int = Field(default=4, gt=0, description="T=1 first-turn samples per demo task.")
    max_tokens: int = Field(default=160, gt=0, description="Tokens per sampled reply (demo cfg).")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature measured.")


def train_format(
    actor: Actor,
    rows: Sequence[SampleRow],
    held_out: Sequence[SampleRow],
    spec: FormatSFTSpec,
    pad_token_id: int,
    log: Callable[[str], None] = print,
) -> SFTResult:
    """Mini-batch AdamW on the adapter, `spec.epochs` shuffled passes; the held-out NLL and
    exact-reply probability (the mean of exp(sum log pi) over a reply: `first_turn_probability`)
    after every epoch. Raises RuntimeError on a non-finite loss."""
    torch.manual_seed(spec.seed)
    batches, shuffle = (
        length_batches([row_length(r) for r in rows], spec.batch_size),
        random.Random(spec.seed),
    )
    optimizer = torch.optim.AdamW(actor.trainable_parameters(), lr=spec.lr, weight_decay=0.0)
    held = collate(list(held_out), pad_token_id=pad_token_id).to(actor.device)
    started, history, step, loss = time.perf_counter(), [], 0, float("nan")
    history.append({"step": 0, "epoch": 0, **_held_out(actor, held)})
    for epoch in range(1, spec.epochs + 1):
        shuffle.shuffle(batches)
        actor.model.train()
        for indices in batches:
            batch = collate([rows[i] for i in indices], pad_token_id=pad_token_id)
            batch = batch.to(actor.device)
            step += 1
            loss = sft_step(
                actor, optimizer, batch, grad_clip=spec.grad_clip, lr=spec.lr, step=step
            )
            history.append({"step": step, "epoch": epoch, "loss": loss,
                            "seconds": time.perf_counter() - started})  # fmt: skip
            log(f"format-sft step {step} epoch {epoch} loss {loss:.4f} "
                f"{history[-1]['seconds']:.0f} s")  # fmt: skip
        history.append({"step": step, "epoch": epoch, **_held_out(actor, held)})
        log(f"format-sft epoch {epoch} held-out nll {history[-1]['held_out_nll']:.4f} exact "
            f"{history[-1]['held_out_exact']:.4f}")  # fmt: skip
    actor.model.eval()
    final = history[-1]
    return SFTResult(
        steps=step,
        final_loss=loss,
        estimated_success=final["held_out_exact"],
        per_task_estimate=final["per_kind"],
        action_tokens=sum(int(r.response_mask.sum()) for r in rows),
        seconds=time.perf_counter() - started,
        history=[{k: v for k, v in h.items() if k != "per_kind"} for h in history],
    )


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Row indices in batches of `batch_size` rows of similar length (sorted by length, then
    cut), so right padding wastes little; the trainer shuffles the batches' order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _held_out(actor: Actor, held: Batch) -> dict[str, Any]:
    """Held-out token-mean NLL and mean exact-reply probability (overall and per kind)."""
    actor.model.eval()
    with torch.no_grad():
        log_probs = actor.log_probs(held)
        exact = first_turn_probability(log_probs, held.response_mask)
        nll = float(action_nll(log_probs, held.response_mask))
    actor.model.train()
    kinds: dict[str, list[float]] = {}
    for task_id, p in zip(held.task_ids, exact.tolist(), strict=True):
        kinds.setdefault(task_id, []).append(p)
    per_kind = {k: sum(v) / len(v) for k, v in sorted(kinds.items())}
    return {"held_out_nll": nll, "held_out_exact": float(exact.mean()), "per_kind": per_kind}


def first_turn_rate(
    engine: Engine,
    tasks: Sequence[HarborTask],
    config: AgentConfig,
    spec: FormatSFTSpec,
    adapter: str | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """`spec.samples` T=1 first replies per task (its real first prompt, seeded per task)
    and how many hold exactly one valid action block (`one_action`)."""
    per_task: dict[str, Any] = {}
    started = time.perf_counter()
    for index, task in enumerate(tasks):
        prompt = engine.chat_prompt_ids(first_turn(config, task.instruction()))
        params = SamplingParams(
            n=spec.samples, temperature=spec.temperature, max_tokens=spec.max_tokens,
            seed=spec.seed + index,
        )  # fmt: skip
        texts = [c.text for c in engine.generate(prompt, params, adapter=adapter)]
        commands = [one_action(t, config) for t in texts]
        per_task[task.name] = {
            "valid": sum(c is not None for c in commands),
            "samples": len(texts),
            "commands": commands,
            "replies": texts,
        }
        log(f"first turn {adapter or 'base'} {task.name}: {per_task[task.name]['valid']}/"
            f"{len(texts)} valid, {time.perf_counter() - started:.0f} s")  # fmt: skip
    valid = sum(t["valid"] for t in per_task.values())
    total = sum(t["samples"] for t in per_task.values())
    return {
        "valid": valid,
        "samples": total,
        "rate": valid / total,
        "seconds": time.perf_counter() - started,
        "per_task": per_task,
    }


def run_format_sft(
    model_dir: Path,
    out: Path,
    tasks: Sequence[HarborTask],
    spec: FormatSFTSpec,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Steps 1-5 of the module docstring into `out`; returns the report."""
    config = AgentConfig()  # the templates and parsing every Forge pipeline uses
    # 1. synthetic pairs -> rows (the model's own chat template)
    engine = Engine(model_dir, served_model_name="base")
    pairs = format_pairs(spec.count, spec.seed, config)
    held_pairs = format_pairs(spec.held_out, spec.seed + HELD_OUT_SEED_OFFSET, config)
    rows, held = pair_rows(pairs, engine.tokenizer), pair_rows(held_pairs, engine.tokenizer)
    # 2. the base model's first turn on the demo tasks
    before = first_turn_rate(engine, tasks, config, spec, log=log)
    # 3. SFT of a fresh adapter
    actor = Actor.from_pretrained(model_dir, spec.lora)
    pad = engine.tokenizer.pad_token_id
    if pad is None:
        raise ValueError(
            f"expected the tokenizer of {model_dir} to name a pad token; found none; fix: "
            "rebuild the folder with `forge-rollout make-model smollm2` (align_tokenizer)"
        )
    result = train_format(actor, rows, held, spec, pad_token_id=int(pad), log=log)
    # 4. the PEFT adapter, measured through the serving engine
    adapter = actor.save_adapter(out / ADAPTER_DIR)
    del actor
    engine.load_adapter("format", str(adapter))
    after = first_turn_rate(engine, tasks, config, spec, adapter="format", log=log)
    # 5. the report
    report = {
        "schema": REPORT_SCHEMA,
        "base_model": str(model_dir),
        "adapter": str(adapter),
        "spec": spec.model_dump(mode="json"),
        "pairs": {
            "count": len(pairs),
            "kinds": dict(Counter(p.kind for p in pairs)),
            "prompt_tokens": sum(len(r.prompt_ids) for r in rows),
            "reply_tokens": result.action_tokens,
        },
        "sft_result": result.model_dump(mode="json"),
        "first_turn_before": before,
        "first_turn_after": after,
    }
    atomic_write_json(out / REPORT_NAME, report)
    return report
