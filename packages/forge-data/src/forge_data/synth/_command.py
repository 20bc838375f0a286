"""The `forge-data synth` command: arguments, the readable table, the exit code."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from forge_data.synth._synth import REPORT_NAME, SynthConfig, SynthReport, default_python, synth
from forge_data.synth._tier import REALREPO_TIER, build_realrepo, realrepo_ready
from forge_gates import realrepo_dir


def add_synth_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "synth", help="a real Python project -> validated tasks with procedural bugs (SWE-smith)"
    )
    p.add_argument("source", help="NAME==VERSION (its PyPI sdist) or a project folder / git repo")
    p.add_argument("--out", type=Path, required=True, help="folder for the task folders")
    p.add_argument("--seed", type=int, default=0, help="candidate order and modifier seed")
    p.add_argument("--max-tasks", type=int, default=6, help="stop after this many tasks")
    p.add_argument("--max-candidates", type=int, default=None, help="candidates evaluated at most")
    p.add_argument("--python", default=default_python(), help="the sandbox's Python (the venv's)")
    p.add_argument("--cache-dir", type=Path, default=Path(".cache/forge"), help="sdist cache")
    p.add_argument(
        "--backend",
        choices=("local", "docker", "kubernetes"),
        default="local",
        help="the sandbox of every test run",
    )
    p.add_argument("--concurrency", type=int, default=2, help="sandboxes at once")
    p.add_argument("--baseline-timeout", type=int, default=600, help="the suite's limit, s")
    p.add_argument("--no-validate", action="store_true", help="skip the NOP / oracle check")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_synth)


def render_table(report: SynthReport) -> str:
    rows = [("modifier", "candidates", "evaluated", "kept", "dropped")]
    for name, counts in sorted(report.modifiers.items()):
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(counts.dropped.items())) or "-"
        rows.append(
            (name, str(counts.candidates), str(counts.evaluated), str(counts.kept), dropped)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
        for row in rows
    ]
    head = f"{report.source}: {len(report.tasks)} task(s) kept"
    if report.refused:
        head += f"; refused: {report.refused}"
    base = report.baseline
    if base:
        head += f"\nbaseline: {base.get('tests')} tests, {base.get('passing')} pass"
    for name, why in sorted(report.validation_failed.items()):
        lines.append(f"validation dropped {name}: {why}")
    lines += [
        f"task {t['name']}: F2P {t['fail_to_pass']}, P2P {t['pass_to_pass']}" for t in report.tasks
    ]
    seconds = ", ".join(f"{k} {v:g} s" for k, v in report.seconds.items())
    return "\n".join([head, *lines, f"time: {seconds}"])


def cmd_synth(args: argparse.Namespace) -> int:
    config = SynthConfig(
        source=args.source,
        out=args.out,
        seed=args.seed,
        max_tasks=args.max_tasks,
        max_candidates=args.max_candidates,
        python=args.python,
        cache=args.cache_dir,
        backend=args.backend,
        concurrency=args.concurrency,
        validate_tasks=not args.no_validate,
        baseline_timeout_s=args.baseline_timeout,
        quiet=args.quiet,
    )
    report = synth(config)
    print(
        json.dumps(report.model_dump(mode="json"), indent=1) if args.json else render_table(report)
    )
    if report.refused:
        print(
            f"forge-data synth: {report.refused} (report: {args.out / REPORT_NAME})",
            file=sys.stderr,
        )
        return 1
    return 0


def add_realrepo_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("realrepo", help="the real-repository tier: build it, or say where it is")
    p.add_argument(
        "action",
        choices=("build", "path", "status"),
        help="build it (if missing or stale), print its split folder, or show its state",
    )
    p.add_argument(
        "--cache-dir", type=Path, default=None, help="default: $FORGE_CACHE or .cache/forge"
    )
    p.add_argument("--concurrency", type=int, default=2, help="sandboxes at once (build)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_realrepo)


def cmd_realrepo(args: argparse.Namespace) -> int:
    ready = realrepo_ready(REALREPO_TIER, args.cache_dir)
    split = realrepo_dir(args.cache_dir) / "split"
    if args.action == "build":
        if not ready:
            build_realrepo(
                REALREPO_TIER, args.cache_dir, concurrency=args.concurrency, quiet=args.quiet
            )
        print(split)
        return 0
    if args.action == "path":
        if not ready:
            print(
                f"forge-data realrepo: expected the tier built in {split.parent}; found it "
                "missing or built from another tier spec; fix: forge-data realrepo build "
                "(or nox -s synth)",
                file=sys.stderr,
            )
            return 1
        print(split)
        return 0
    tier = json.loads((split.parent / "tier.json").read_text()) if ready else {}
    print(
        json.dumps(
            {
                "ready": ready,
                "split": str(split),
                "fingerprint": REALREPO_TIER.fingerprint(),
                "built": tier.get("verdicts"),
            },
            indent=1,
        )
    )
    return 0
