"""`forge-ppo sft` (build or find the demo policy) and `forge-ppo learn` (PPO from it): a CLI
face, so its heavy imports stay inside the commands."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path


def _spec(args: argparse.Namespace, overrides: Callable[[dict, list[str]], dict]):
    from forge_gates import GateError, read_config, validate_config

    try:
        data = overrides(read_config(args.config), args.set)
    except (GateError, ValueError) as error:
        print(str(error), file=sys.stderr)
        return None
    spec, violations = validate_config(data)
    for v in violations:
        print(f"  - {v}", file=sys.stderr)
    return spec


def add_sft_commands(sub, quiet: Callable[[], None], overrides) -> None:
    """Register `sft` and `learn` on the forge-ppo subparsers."""

    def sft(args: argparse.Namespace) -> int:
        quiet()
        from forge_ppo.sft._build import REPORT_NAME, resolve_demo_policy
        from forge_rollout import resolve_model

        spec = _spec(args, overrides)
        if spec is None:
            return 1
        checkpoint = resolve_demo_policy(spec, resolve_model(spec, args.cache_dir), args.cache_dir)
        report = json.loads((checkpoint.parent.parent / REPORT_NAME).read_text())
        rate = report["train_success_t1"]
        print(
            json.dumps(report, indent=2)
            if args.json
            else (
                f"demo policy  {checkpoint}\nsft steps    {report['sft_result']['steps']} "
                f"(estimated T=1 success {report['sft_result']['estimated_success']:.3f})\n"
                f"train T=1    {rate['successes']}/{rate['attempts']} = {rate['rate']:.3f} "
                f"[{rate['wilson_low']:.3f}, {rate['wilson_high']:.3f}] (Wilson 95%)"
            )
        )
        return 0

    def learn(args: argparse.Namespace) -> int:
        quiet()
        from forge_ppo.sft._learn import run_learn

        spec = _spec(args, overrides)
        if spec is None:
            return 1
        run_learn(
            spec,
            out=args.out,
            cache_dir=args.cache_dir,
            attempts=args.attempts,
            max_updates=args.max_updates,
            budget_s=args.budget_s,
        )
        return 0

    for name, run, text in (
        ("sft", sft, "build (or find) the cached demo policy: LoRA SFT on oracle episodes"),
        ("learn", learn, "PPO from the demo policy on the train split; pass@1 before/after"),
    ):
        p = sub.add_parser(name, help=text)
        default = "smoke-local" if name == "sft" else "formal-learn-local"
        p.add_argument("--config", default=default, help="shipped config name or spec file")
        p.add_argument(
            "--cache-dir",
            type=Path,
            default=Path(".cache/forge"),
            help="where the tiny model and the demo policy are cached",
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override one spec field (repeatable), e.g. ppo.actor_lr=1e-4",
        )
        if name == "sft":
            p.add_argument("--json", action="store_true", help="print the whole report")
        else:
            p.add_argument(
                "--out",
                type=Path,
                default=Path("runs/learn/latest"),
                help="folder for learn.json, learn.md and learn.png",
            )
            p.add_argument("--attempts", type=int, default=8, help="T=1 episodes per task")
            p.add_argument("--max-updates", type=int, default=16, help="stopping rule: cap")
            p.add_argument("--budget-s", type=float, default=1500.0, help="stop updating after")
        p.set_defaults(run=run)
