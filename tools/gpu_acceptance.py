"""GPU acceptance of `forge-ppo estimate`: the local trainer's actor (LoRA) and critic updates on
CUDA in bf16 (`--dtype fp32`: the local trainer's default; `--checkpointing`: activation
checkpointing on both roles), measured (torch.cuda.max_memory_allocated / max_memory_reserved)
against the estimate for the local trainer (one GPU, no FSDP sharding), written to a JSON
report.

Models: randomly initialised Qwen3 architectures from the estimate's shipped configs
(`qwen3-0.6b`, `qwen3-1.7b`, `qwen3-8b`; transformers `AutoModelForCausalLM.from_config`, no
download, no network). Per model and token budget (2K, 8K, 16K, 24K, 32K tokens per micro-batch
by default, past what fits on one H200, so out-of-memory cases check the estimate's `oom`; two
rows of half the budget, a 32-token prompt, no padding): one actor update with entropy off and
one with it on (0.01), and one critic update, after a warm-up step of both roles that creates
their AdamW moments (a PPO run holds both while either updates),
through the trainer's own per-role code (`forge_ppo.local._ppo_steps`: `actor_backward` /
`critic_backward` + `optimizer_step`, the inner loop of `PPOTrainer._ppo_epochs`). The forge
packages are imported from this tree (`packages/*/src`): nothing is installed. Each case is
judged against the estimate for this GPU's memory: a measured peak above the estimate's torch
peak, or an out-of-memory where the estimate said `fits` or `at_risk`, fails the run; an
out-of-memory where it said `oom` is recorded as the estimate's agreement (where it said
`at_risk`, as the margin it names). Any other failing case
is recorded and the run goes on; cases past `--time-limit-s` are skipped. Beside each peak the
memory the process holds outside torch's allocator (CUDA context, cuBLAS workspaces) is read
from `torch.cuda.mem_get_info`, against the estimate's `runtime` part. Last, one whole
`PPOTrainer.update` (16 rows of 2K tokens on the 0.6B shape, 8K budgets: no-grad passes, GAE,
both roles' PPO epochs, the update proof) and the adapter's export; its phases' times and its
peak against the estimate's larger role (`--no-update` skips it).

The device machine (torch 2.11 + CUDA, transformers, peft; no verl, vLLM or Ray) lacks pydantic
and orjson, which forge's modules import: carry their wheels. Here, once, in the repo root:

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
        -d .whl pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \\
        typing-inspection==0.4.5 typing-extensions==4.16.0 orjson==3.13.0

then the device `run` (carry [".whl"], timeout_s 540; about a minute of work on one H200):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \\
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; \\
    PYTHONUNBUFFERED=1 python3 tools/gpu_acceptance.py --out $OUT/gpu_acceptance.json

The fp32 and checkpointing terms (`attention_scores`, `optimizer_step`, `workspaces`) were fitted
on the 2026-12-04 run; the held-out check for them, in the same single `run` (two processes,
the update check left out; docs/gpu/ holds the reports they are judged beside):

    ... export PYTHONPATH=/tmp/site || exit; export PYTHONUNBUFFERED=1; \
    python3 tools/gpu_acceptance.py --dtype fp32 --budgets 4096,12288 --no-update \
        --out $OUT/held-out-fp32.json; \
    python3 tools/gpu_acceptance.py --checkpointing --budgets 8192,24576 --no-update \
        --out $OUT/held-out-checkpointing.json

Without CUDA it refuses (exit 2) unless `--dry-run`: the same code on the CPU with a tiny config
(what `tools/tests/test_gpu_acceptance.py` runs, so the script cannot rot). Exit 0 when every
case ran within its estimate or ran out of memory where the estimate said it would, 1 otherwise
(the report's `errors` and `summary` say which).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "forge-ppo/gpu-acceptance@1"
MODELS = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-8b")
BUDGETS = (2048, 8192, 16384, 24576, 32768)
DRY_BUDGETS = (64, 128, 256)
DRY_GPU_GB = 141.0  # the dry run's GPU for the estimate (an H200's nominal size)
ENTROPY = 0.01
# the whole-update check: tasks x attempts rows of ROW_TOKENS each, under an 8K budget
UPDATE = {"model": "qwen3-0.6b", "tasks": 8, "attempts": 2, "row_tokens": 2048, "budget": 8192}
DRY_UPDATE = {"model": "tiny", "tasks": 4, "attempts": 2, "row_tokens": 64, "budget": 256}
PROMPT_TOKENS = 32
ROWS = 2  # rows per micro-batch, each half the budget
TINY_CONFIG = {
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 512,
    "tie_word_embeddings": False,
    "max_position_embeddings": 1024,
}


def use_tree() -> None:
    """Import forge's packages from this checkout (nothing installed on the device)."""
    for src in sorted(ROOT.glob("packages/*/src"), reverse=True):
        if str(src) not in sys.path:
            sys.path.insert(0, str(src))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    default_out = Path(os.environ.get("OUT", ".")) / "gpu_acceptance.json"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=default_out, help="the JSON report")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny config: the same code")
    p.add_argument("--models", default=",".join(MODELS), help="shipped shapes, comma-separated")
    p.add_argument("--budgets", default=None, help="tokens per micro-batch, comma-separated")
    p.add_argument("--time-limit-s", type=float, default=420.0, help="skip cases after this")
    p.add_argument("--no-update", action="store_true", help="skip the whole-update check")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="models' dtype")
    p.add_argument(
        "--checkpointing", action="store_true", help="activation checkpointing, both roles"
    )
    return p.parse_args(argv)


def cuda_problem(torch: Any) -> str | None:
    """Why this machine cannot run the GPU check, or None."""
    if torch.cuda.is_available():
        return None
    return (
        "gpu_acceptance: expected a CUDA GPU (torch.cuda.is_available()); found none (torch "
        f"{torch.__version__}, CUDA build {torch.version.cuda}); fix: run it on the device "
        "machine (see this script's docstring), or pass --dry-run for the CPU check of the code"
    )


def model_config(name: str, dry_run: bool) -> tuple[dict[str, Any], Any]:
    """(config.json fields, ModelShape) of a shipped shape, or the tiny one on a dry run."""
    from forge_ppo.estimate import load_model_shape, shape_from_config
    from forge_ppo.estimate._shape import shipped_shape_path

    if dry_run:
        return dict(TINY_CONFIG), shape_from_config(TINY_CONFIG, source="tiny")
    raw = json.loads(shipped_shape_path(name).read_text(encoding="utf-8"))
    return raw, load_model_shape(name)


def build_trainer(raw: dict[str, Any], device: Any, spec: Any, dtype: str = "bf16") -> Any:
    """A PPOTrainer over a random Qwen3 actor (LoRA from spec.lora) and critic in `dtype` on
    device, activation checkpointing on where the spec asks (the local trainer's own switch)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from forge_ppo import Actor, PPOTrainer, ValueModel
    from forge_ppo.local._build import enable_gradient_checkpointing

    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    fields = {k: v for k, v in raw.items() if k not in ("architectures", "torch_dtype", "dtype")}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    with torch.device(device):
        base = AutoModelForCausalLM.from_config(config).to(torch_dtype)
        critic = ValueModel.from_config(config, base_model="random", dtype=torch_dtype)
    actor = Actor.from_model(base, spec.lora, base_model="random")
    if spec.actor.gradient_checkpointing:
        enable_gradient_checkpointing(actor.model)
    if spec.critic.gradient_checkpointing:
        enable_gradient_checkpointing(critic)
    return PPOTrainer(actor, critic, spec)


def _row(
    task: str, attempt: int, prompt: int, response: int, reward: float, vocab: int, generator: Any
) -> Any:
    """One sample row of random ids drawn from `generator`, every response token an action,
    the reward on the last one."""
    import torch

    from forge_rollout.rows import RowHeader, SampleRow

    rewards = torch.zeros(response, dtype=torch.float32)
    rewards[-1] = reward
    header = RowHeader(task_id=task, episode_id=f"{task}-{attempt}", attempt=attempt,
                       row_index=0, n_calls=1, reward=reward)  # fmt: skip
    return SampleRow(
        header=header,
        prompt_ids=torch.randint(vocab, (prompt,), generator=generator),
        response_ids=torch.randint(vocab, (response,), generator=generator),
        response_mask=torch.ones(response, dtype=torch.int64),
        rollout_log_probs=torch.full((response,), -12.0),
        token_level_rewards=rewards,
    )


def fake_rows(tokens: int, vocab: int) -> list[Any]:
    """ROWS rows of tokens / ROWS each: a short prompt (at most 32 tokens), every response
    token an action."""
    import torch

    length = tokens // ROWS
    prompt = min(PROMPT_TOKENS, length // 4)
    generator = torch.Generator().manual_seed(tokens)
    return [_row(f"t{k}", 0, prompt, length - prompt, 1.0, vocab, generator) for k in range(ROWS)]


def update_rows(tasks: int, attempts: int, row_tokens: int, vocab: int) -> list[Any]:
    """tasks x attempts rows as a rollout writes them: per task one success and one failure
    (reward on the last action token), every response token an action."""
    import torch

    prompt = min(PROMPT_TOKENS, row_tokens // 4)
    generator = torch.Generator().manual_seed(row_tokens)
    response = row_tokens - prompt
    return [
        _row(f"task{task}", attempt, prompt, response, float(attempt % 2 == 0), vocab, generator)
        for task in range(tasks)
        for attempt in range(attempts)
    ]


def whole_update(args: argparse.Namespace, gpu_gb: float) -> dict[str, Any]:
    """One `PPOTrainer.update` (no-grad passes, GAE, PPO epochs of both roles, the update
    proof, finite metrics) on the device, and the adapter exported from it: its phases' times,
    throughput and peak memory against the estimate's largest role."""
    import torch

    cuda = not args.dry_run
    plan = DRY_UPDATE if args.dry_run else UPDATE
    raw, shape = model_config(str(plan["model"]), args.dry_run)
    spec = spec_for(int(plan["budget"]), ENTROPY, args.checkpointing)
    device = torch.device("cuda" if cuda else "cpu")
    held = [build_trainer(raw, device, spec, args.dtype)]  # freed below
    rows = update_rows(
        int(plan["tasks"]), int(plan["attempts"]), int(plan["row_tokens"]), shape.vocab_size
    )
    out: dict[str, Any] = {"plan": plan}

    def step() -> None:
        result = held[0].update(rows, step=1)
        counts = ("rows", "tokens", "action_tokens", "actor_optimizer_steps",
                  "critic_optimizer_steps")  # fmt: skip
        out["result"] = {k: getattr(result, k) for k in counts}
        out["metrics"] = {
            k: round(v, 4)
            for k, v in sorted(result.metrics.items())
            if k.startswith(("timing_s/", "perf/", "actor/", "critic/"))
        }

    try:
        out["measured"] = measure(step, torch, cuda)
        with tempfile.TemporaryDirectory() as folder:
            held[0].export_adapter(Path(folder) / "adapter")
            written = sorted(f.name for f in (Path(folder) / "adapter").iterdir())
            out["adapter_files"] = written
    except Exception as exc:  # the report says what failed; the run fails
        out["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    finally:
        held.clear()
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    roles = [predict(spec, shape, role, gpu_gb, args.dtype) for role in ("actor", "critic")]
    out["predicted_torch_gb"] = max(r["torch_peak_gb"] for r in roles)
    if cuda and "error" not in out:
        peak = out["measured"]["peak_allocated_gb"]
        out["conservative"] = peak <= out["predicted_torch_gb"]
    print(json.dumps({k: out.get(k) for k in ("measured", "predicted_torch_gb", "error")}))
    return out


def update_data(rows: list[Any]) -> Any:
    """The tensors one update's PPO epochs read (old log-probs, values, advantages, returns)."""
    import torch

    from forge_ppo import collate
    from forge_ppo.local._ppo_steps import UpdateData

    full = collate(rows)
    shape = full.response_mask.shape
    generator = torch.Generator().manual_seed(1)
    return UpdateData(
        rows=rows,
        response_mask=full.response_mask,
        old_log_probs=torch.full(shape, -12.0),
        ref_log_probs=None,
        values=torch.zeros(shape),
        advantages=torch.randn(shape, generator=generator),
        returns=torch.ones(shape),
    )


def spec_for(tokens: int, entropy: float, checkpointing: bool = False) -> Any:
    """smoke-local with this budget, a window of one row, production LoRA (r=32, alpha=16)."""
    from forge_gates import read_config
    from forge_ppo.cli import apply_overrides
    from forge_ppo.estimate.cli import load_estimate_spec

    window = tokens // ROWS
    sets = [
        f"model.max_model_len={window}",
        f"context.window={window}",
        "context.reserve=0",
        f"context.actor_train_tokens={tokens}",
        f"context.critic_train_tokens={tokens}",
        f"context.critic_infer_tokens={tokens}",
        "lora.rank=32",
        "lora.alpha=16",
        f"ppo.entropy_coeff={entropy}",
        "ppo.actor_mini_batch_size=2",
        "ppo.critic_mini_batch_size=2",
        f"actor.gradient_checkpointing={str(checkpointing).lower()}",
        f"critic.gradient_checkpointing={str(checkpointing).lower()}",
    ]
    spec, _notes = load_estimate_spec(apply_overrides(read_config("smoke-local"), sets))
    assert spec is not None, "smoke-local with these overrides keeps its schema"
    return spec


def predict(spec: Any, shape: Any, role: str, gpu_gb: float, dtype: str = "bf16") -> dict[str, Any]:
    """`forge-ppo estimate` for the local trainer on one GPU of `gpu_gb` GiB, models in `dtype`
    (activation checkpointing as the spec asks)."""
    from forge_ppo.estimate import estimate, resolve_knobs

    knobs, sources = resolve_knobs(spec, {"actor.dtype": dtype, "critic.dtype": dtype})
    result = estimate(spec, shape, knobs=knobs, knob_sources=sources, gpu_memory_gb=gpu_gb)
    found = next(r for r in result.roles if r.role == role)
    torch_gb = found.peak_gb - found.parts["runtime"]  # what torch's allocator can see
    before = sum(found.parts[k] for k in ("parameters", "optimizer_states", "colocated_model"))
    return {
        "peak_gb": found.peak_gb,
        "torch_peak_gb": round(torch_gb, 3),
        "before_update_gb": round(before, 3),
        "parts": found.parts,
        "verdict": found.verdict,
    }


def measure(step: Callable[[], None], torch: Any, cuda: bool) -> dict[str, Any]:
    """Run one update; its peak allocated / reserved memory and what was allocated before."""
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if cuda else 0
    started = time.perf_counter()
    step()
    if cuda:
        torch.cuda.synchronize()
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - started, 3)}
    gib = 2**30
    if cuda:
        free, total = torch.cuda.mem_get_info()
        outside = total - free - torch.cuda.memory_reserved()
        out |= {
            "before_update_gb": round(before / gib, 3),
            "peak_allocated_gb": round(torch.cuda.max_memory_allocated() / gib, 3),
            "peak_reserved_gb": round(torch.cuda.max_memory_reserved() / gib, 3),
            "outside_torch_gb": round(outside / gib, 3),
        }
    return out


def role_step(trainer: Any, role: str, data: Any, groups: list[list[int]], ppo: Any) -> Callable:
    """One mini-batch of one role, as `PPOTrainer._ppo_epochs` runs it."""
    from forge_ppo.local._ppo_steps import actor_backward, critic_backward, optimizer_step

    def step() -> None:
        if role == "actor":
            actor_backward(trainer.actor, data, groups, ppo)
            optimizer_step(
                "actor", trainer.actor_parameters, trainer.actor_optimizer, ppo.grad_clip
            )
        else:
            critic_backward(trainer.critic, data, groups, ppo)
            optimizer_step(
                "critic", trainer.critic_parameters, trainer.critic_optimizer, ppo.grad_clip
            )

    return step


def cases(budgets: tuple[int, ...]) -> list[tuple[str, int, float]]:
    """(role, tokens, entropy_coeff): at every budget the actor without and with entropy, and
    the critic."""
    return [
        case
        for tokens in budgets
        for case in (("actor", tokens, 0.0), ("critic", tokens, 0.0), ("actor", tokens, ENTROPY))
    ]


def failure_outcome(exc: BaseException, verdict: str) -> str | None:
    """A failed case's outcome where the estimate foresaw it (an out-of-memory where it said
    `oom`, or `at_risk`: the margin it names), else None: an error of the run or the estimate.
    torch.OutOfMemoryError (a RuntimeError) is read by name: the CPU build raises it too."""
    oom = type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc)
    if oom and verdict == "oom":
        return "oom_as_predicted"
    if oom and verdict == "at_risk":
        return "oom_at_risk"
    return None


def failed(report: dict[str, Any]) -> bool:
    """The run fails on an unforeseen error, a measured peak above its estimate, or a whole
    update that failed or went above its estimate."""
    update = report.get("update") or {}
    bad_update = "error" in update or update.get("conservative") is False
    return bool(report["errors"] or report["summary"]["not_conservative"] or bad_update)


def free_after_failure(trainer: Any, torch: Any, cuda: bool) -> None:
    """Drop what a failed step left (partial gradients, the exception's frames)."""
    for optimizer in (trainer.actor_optimizer, trainer.critic_optimizer):
        optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def warm_up(trainer: Any, vocab: int, tokens: int, checkpointing: bool) -> None:
    """One step of each role at the smallest budget: AdamW creates its moments at a role's
    first step, and the other role's moments live beside every update of a PPO run (the
    estimate's `colocated_model`); measuring the actor before the critic has stepped would
    leave them out."""
    spec = spec_for(tokens, 0.0, checkpointing)
    assert spec.ppo is not None
    from forge_ppo import micro_batches

    rows = fake_rows(tokens, vocab)
    data = update_data(rows)
    groups = micro_batches(rows, range(len(rows)), tokens)
    trainer.actor.model.train()
    trainer.critic.train()
    for role in ("actor", "critic"):
        role_step(trainer, role, data, groups, spec.ppo)()


def run_model(
    name: str, budgets: tuple[int, ...], args: argparse.Namespace, deadline: float, gpu_gb: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(results, errors) of every case on one model: build, warm up both roles, measure, judge
    against the estimate for a GPU of `gpu_gb` GiB."""
    import torch

    from forge_ppo import micro_batches

    cuda = not args.dry_run
    device = torch.device("cuda" if cuda else "cpu")
    raw, shape = model_config(name, args.dry_run)
    trainer = build_trainer(
        raw, device, spec_for(min(budgets), 0.0, args.checkpointing), args.dtype
    )
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    warm_up(trainer, shape.vocab_size, min(budgets), args.checkpointing)
    for role, tokens, entropy in cases(budgets):
        case = {
            "model": name if not args.dry_run else "tiny",
            "role": role,
            "tokens": tokens,
            "entropy_coeff": entropy,
        }
        if time.monotonic() > deadline:
            errors.append(case | {"error": "skipped: past --time-limit-s"})
            continue
        spec = spec_for(tokens, entropy, args.checkpointing)
        assert spec.ppo is not None
        rows = fake_rows(tokens, shape.vocab_size)
        data = update_data(rows)
        groups = micro_batches(rows, range(len(rows)), tokens)
        step = role_step(trainer, role, data, groups, spec.ppo)
        predicted = predict(spec, shape, role, gpu_gb, args.dtype)
        trainer.actor.model.train()
        trainer.critic.train()
        try:
            measured = measure(step, torch, cuda)
        except (RuntimeError, ValueError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            free_after_failure(trainer, torch, cuda)
            outcome = failure_outcome(exc, predicted["verdict"])
            if outcome is not None:
                results.append(case | {"outcome": outcome, "predicted": predicted})
                print(json.dumps(case | {"outcome": outcome}), flush=True)
            else:
                error = f"{type(exc).__name__}: {str(exc)[:500]}"
                errors.append(case | {"error": error, "predicted": predicted})
            continue
        result = case | {
            "outcome": "ran",
            "micro_batches": len(groups),
            "measured": measured,
            "predicted": predicted,
        }
        if cuda:
            ratio = measured["peak_allocated_gb"] / predicted["torch_peak_gb"]
            result |= {
                "ratio_allocated": round(ratio, 3),
                "conservative": predicted["torch_peak_gb"] >= measured["peak_allocated_gb"],
            }
        results.append(result)
        print(
            json.dumps(
                {k: result[k] for k in ("model", "role", "tokens", "entropy_coeff")}
                | {"measured": measured, "predicted_torch_gb": predicted["torch_peak_gb"]}
            ),
            flush=True,
        )
    del trainer
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return results, errors


def machine(torch: Any, cuda: bool) -> dict[str, Any]:
    import peft
    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
    }
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info |= {"device": props.name, "total_memory_gb": round(props.total_memory / 2**30, 3)}
    return info


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    ran = [r for r in results if r["outcome"] == "ran"]
    ratios = [r["ratio_allocated"] for r in ran if "ratio_allocated" in r]
    outside = [r["measured"].get("outside_torch_gb") for r in ran]
    outside = [gb for gb in outside if gb is not None]
    return {
        "cases": len(results),
        "ran": len(ran),
        "oom_as_predicted": sum(1 for r in results if r["outcome"] == "oom_as_predicted"),
        "oom_at_risk": sum(1 for r in results if r["outcome"] == "oom_at_risk"),
        "conservative": sum(1 for r in ran if r.get("conservative")),
        "not_conservative": [
            {k: r[k] for k in ("model", "role", "tokens", "entropy_coeff", "ratio_allocated")}
            for r in ran
            if r.get("conservative") is False
        ],
        "ratio_allocated_min": min(ratios) if ratios else None,
        "ratio_allocated_max": max(ratios) if ratios else None,
        "outside_torch_gb_max": max(outside) if outside else None,
    }


def gpu_memory_gb(torch: Any, cuda: bool) -> float:
    """The GPU's memory in GiB (what torch reports), or the dry run's nominal size."""
    if not cuda:
        return DRY_GPU_GB
    return round(torch.cuda.get_device_properties(0).total_memory / 2**30, 3)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    use_tree()
    import torch

    problem = None if args.dry_run else cuda_problem(torch)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from forge_gates import atomic_write_json

    started, deadline = time.monotonic(), time.monotonic() + args.time_limit_s
    budgets: tuple[int, ...] = DRY_BUDGETS if args.dry_run else BUDGETS
    if args.budgets:
        budgets = tuple(int(b) for b in args.budgets.split(","))
    models = ("tiny",) if args.dry_run else tuple(args.models.split(","))
    gpu_gb = gpu_memory_gb(torch, not args.dry_run)
    report: dict[str, Any] = {
        "schema_version": SCHEMA,
        "dry_run": args.dry_run,
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(torch, not args.dry_run),
        "budgets": list(budgets),
        "gpu_memory_gb": gpu_gb,
        "dtype": args.dtype,
        "checkpointing": args.checkpointing,
        "results": [],
        "errors": [],
    }
    for name in models:
        results, errors = run_model(name, budgets, args, deadline, gpu_gb)
        report["results"] += results
        report["errors"] += errors
    report["summary"] = summary(report["results"])
    if not args.no_update:
        report["update"] = whole_update(args, gpu_gb)
    report["seconds"] = round(time.monotonic() - started, 1)
    atomic_write_json(args.out, report)
    bad = failed(report)
    print(
        f"GPU_ACCEPTANCE {'FAILED' if bad else 'OK'} cases={len(report['results'])} "
        f"oom_as_predicted={report['summary']['oom_as_predicted']} "
        f"not_conservative={len(report['summary']['not_conservative'])} "
        f"errors={len(report['errors'])} report={args.out}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
