"""forge-ppo: train PPO runs (smoke, soak, formal), run the P0 comparison, inspect checkpoints,
check adapters against vLLM's rules, plan micro-batches.

    forge-ppo inspect-checkpoint runs/x/checkpoints/global_step_10   # verifies every SHA-256
    forge-ppo check-adapter runs/x/checkpoints/global_step_10 --max-rank 64
    forge-ppo balance --budget 65536 --world-size 4 --equal-counts 40000 12000 9000 ...
    forge-ppo train --config smoke-local                       # one PPO update, gates verified
    forge-ppo train --config soak-local --set ppo.kl_beta=0.01 --warm-start CKPT
    forge-ppo sft --config smoke-local         # the demo policy (cached), its report
    forge-ppo learn --config formal-learn-local  # PPO from it, pass@1 before/after
    forge-ppo p0 --config p0-local --checkpoint smoke=RUN/checkpoints/global_step_1  # P0
    forge-ppo estimate --config soak-5gpu --model-config qwen3-8b   # per-GPU memory, no GPU
Exit status: 0 ok, 1 a check or gate failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from forge_gates import quiet_broken_pipe, use_help_formatter


def _inspect(args: argparse.Namespace) -> int:
    from forge_gates import GateError
    from forge_ppo.checkpoint._verify import verify_checkpoint

    try:
        summary = verify_checkpoint(args.checkpoint)
    except GateError as error:
        print(str(error), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary.model_dump(mode="json"), indent=2, sort_keys=True))
        return 0
    lora = summary.lora
    print(f"checkpoint   {Path(args.checkpoint).resolve()}")
    print(f"step         {summary.step}")
    print(f"base model   {summary.base_model}")
    print(f"lora         r={lora.rank} alpha={lora.alpha} targets={','.join(lora.target_modules)}")
    print(f"critic       {summary.critic_dtype} from {summary.critic_base_model}")
    parent = summary.parent
    print(f"parent       {'none (trained from scratch)' if parent is None else parent.path}")
    if parent is not None:
        print(f"restarted    {', '.join(parent.restarted)}")
    print(f"never saved  {', '.join(summary.never_saved)}")
    print(
        f"bytes        actor={summary.actor_bytes} critic={summary.critic_bytes} "
        f"total={summary.total_bytes}"
    )
    print(
        f"update       actor_steps={summary.update.actor_optimizer_steps} "
        f"critic_steps={summary.update.critic_optimizer_steps} "
        f"actor_delta_norm={summary.update.actor_delta_norm:.4g}"
    )
    for name, record in sorted(summary.files.items()):
        print(f"  ok  {record.sha256[:16]}  {record.bytes:>12}  {name}")
    print(f"files verified: {len(summary.files)} (sizes and SHA-256 match)")
    return 0


def _check_adapter(args: argparse.Namespace) -> int:
    from safetensors import safe_open

    from forge_ppo.checkpoint._adapter import (
        ADAPTER_CONFIG,
        ADAPTER_DIR,
        ADAPTER_WEIGHTS,
        check_adapter_rules,
    )

    folder = Path(args.path)
    if (folder / ADAPTER_DIR).is_dir():
        folder = folder / ADAPTER_DIR
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text("utf-8"))
        with safe_open(folder / ADAPTER_WEIGHTS, "pt") as handle:
            names = list(handle.keys())
    except (OSError, json.JSONDecodeError) as exc:
        print(
            f"{folder}: expected {ADAPTER_CONFIG} + {ADAPTER_WEIGHTS}; found {exc}", file=sys.stderr
        )
        return 1
    problems = check_adapter_rules(config, names, max_lora_rank=args.max_rank)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"adapter ok for vLLM: r={config['r']} <= {args.max_rank}, {len(names)} LoRA tensors")
    return 0


def _balance(args: argparse.Namespace) -> int:
    from forge_ppo.algo._errors import PPOInputError
    from forge_ppo.algo._microbatch import plan_micro_batches

    lengths = list(args.lengths)
    if args.lengths_file:
        text = Path(args.lengths_file).read_text("utf-8")
        lengths += [int(x) for x in text.replace(",", " ").split()]
    if not lengths:
        print("balance: expected sequence lengths (arguments or --lengths-file)", file=sys.stderr)
        return 2
    try:
        plan = plan_micro_batches(
            lengths,
            args.budget,
            args.world_size,
            equal_counts=args.equal_counts,
            same_count_across_ranks=not args.ragged,
        )
    except PPOInputError as error:
        print(str(error), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**plan.model_dump(mode="json"), "summary": plan.summary()}, indent=2))
        return 0
    for key, value in plan.summary().items():
        print(f"{key:24} {value}")
    for rank, micro_batches in enumerate(plan.ranks):
        for index, mb in enumerate(micro_batches):
            print(f"rank {rank} mb {index:3}  tokens={plan.load(mb):>8}  sequences={list(mb)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forge-ppo",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect-checkpoint", help="print a checkpoint summary, verify hashes")
    inspect.add_argument("checkpoint", help="a global_step_N folder")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.set_defaults(run=_inspect)
    adapter = sub.add_parser("check-adapter", help="check a LoRA adapter against vLLM's rules")
    adapter.add_argument("path", help="a lora_adapter folder or a checkpoint holding one")
    adapter.add_argument("--max-rank", type=int, default=64, help="vLLM --max-lora-rank")
    adapter.set_defaults(run=_check_adapter)
    balance = sub.add_parser("balance", help="plan micro-batches under a token budget")
    balance.add_argument("lengths", nargs="*", type=int, help="tokens per sequence")
    balance.add_argument("--lengths-file", help="file of lengths (whitespace/comma separated)")
    balance.add_argument("--budget", type=int, required=True, help="tokens per micro-batch")
    balance.add_argument("--world-size", type=int, default=1, help="data-parallel ranks")
    balance.add_argument("--equal-counts", action="store_true", help="same #sequences per rank")
    balance.add_argument("--ragged", action="store_true", help="allow different #micro-batches")
    balance.add_argument("--json", action="store_true", help="print the plan as JSON")
    balance.set_defaults(run=_balance)
    from forge_ppo.recipes.cli import add_recipe_commands, add_spec_options

    train = sub.add_parser("train", help="run a smoke, soak or formal PPO run end to end")
    add_spec_options(
        train,
        config=None,
        cache_help="where the tiny model is built once and reused",
        set_example="ppo.kl_beta=0.01",
    )
    train.add_argument("--run-dir", type=Path, help="new run folder (default: runs/PHASE/NAME-TS)")
    train.add_argument("--runs-root", type=Path, default=Path("runs"), help="parent of run dirs")
    train.add_argument("--warm-start", help="global_step_N checkpoint to warm start from")
    train.add_argument(
        "--curves",
        choices=("auto", "on", "off"),
        default="auto",
        help="TensorBoard events + curves.png: auto = when the 'curves' extra is installed; "
        "on = refuse to start without it",
    )
    train.set_defaults(run=_train)
    add_recipe_commands(sub, _quiet_libraries, apply_overrides)
    from forge_ppo.estimate.cli import add_estimate_command

    add_estimate_command(sub, apply_overrides)
    return use_help_formatter(parser)


def apply_overrides(data: dict, assignments: list[str]) -> dict:
    """`a.b=1` sets data['a']['b'] = 1 (values parsed as JSON, else kept as text)."""
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or not key:
            raise ValueError(f"--set: expected KEY=VALUE; found {assignment!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return data


def _quiet_libraries() -> None:
    """No download progress bars or deprecation chatter from the HF stack in run logs."""
    import os
    import warnings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")


def _train(args: argparse.Namespace) -> int:
    _quiet_libraries()
    from forge_gates import GateError, read_config, sigterm_as_interrupt, validate_config
    from forge_ppo.recipes.train import train

    # 1. the spec with its overrides: every violation listed, before any folder exists
    try:
        data = apply_overrides(read_config(args.config), args.set)
    except (GateError, ValueError) as error:
        print(str(error), file=sys.stderr)
        return 1
    if args.warm_start:
        data.setdefault("checkpoint", {})["warm_start"] = str(Path(args.warm_start).resolve())
    spec, violations = validate_config(data)
    if spec is None:
        print(f"INVALID {args.config}: {len(violations)} violation(s)", file=sys.stderr)
        for v in violations:
            print(f"  - {v}", file=sys.stderr)
        return 1
    # 2. the run; a failed gate is a clean exit 1 with every violation printed; Ctrl-C and
    #    SIGTERM (schedulers) stop every sandbox first, then exit 130 / 143
    with sigterm_as_interrupt() as interrupt:
        try:
            train(
                spec,
                run_dir=args.run_dir,
                runs_root=args.runs_root,
                cache_dir=args.cache_dir,
                curves=args.curves,
            )
        except (GateError, FileNotFoundError) as error:
            if not getattr(error, "printed", False):  # gate() printed its violations once
                print(str(error), file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(
                f"interrupted by {interrupt.name}: sandboxes stopped, server and gateway gone "
                "with this process; the run folder keeps what finished (no checkpoint of an "
                "unfinished update); start a new run",
                file=sys.stderr,
            )
            return interrupt.exit_code
    return 0


@quiet_broken_pipe
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    raise SystemExit(main())
