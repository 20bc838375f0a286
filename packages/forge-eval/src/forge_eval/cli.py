"""`forge-eval`: score Harbor jobs, compare two runs, select a checkpoint, write an HTML report.

Exit status: 0 done; 1 bad input (missing or malformed file, empty job); 2 runs not
comparable, a usage error, or `p0` (moved to `forge-ppo p0`: the P0 pipeline is a recipe).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from forge_eval import __version__
from forge_eval._compare import compare_jobs
from forge_eval._errors import ForgeEvalError, NotComparableError
from forge_eval._html import render_html
from forge_eval._protocol import Protocol
from forge_eval._reader import read_job
from forge_eval._score import score_job
from forge_eval._select import DEFAULT_PATIENCE, select_checkpoint
from forge_eval._tables import render_comparison, render_report, render_selection
from forge_gates import atomic_write_text, named_paths, quiet_broken_pipe, use_help_formatter

P0_MOVED = (
    "the P0 pipeline drives rollouts, so it is a recipe of forge-ppo (forge-eval keeps "
    "scoring, statistics and reports, with no dependency heavier than forge-gates)"
)
EPILOG = """examples:
  forge-eval score jobs/2026-11-29__10-00-00
  forge-eval score jobs/run-a --json run-a.report.json
  forge-eval compare --run sft=jobs/sft --run rl=jobs/rl-step24 --json compare.json
  forge-eval select runs/ppo/validation-metrics.jsonl
  forge-eval report sft=jobs/sft rl=jobs/rl-step24 --html report.html
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forge-eval",
        description="Honest scoring of agent evaluations on Harbor job "
        "directories: per-panel Pass@1 with Wilson intervals, paired McNemar comparisons, "
        "checkpoint selection.",
        epilog=EPILOG,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"forge-eval {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    score = sub.add_parser("score", help="score one Harbor job directory, per panel")
    score.add_argument("path", type=Path, metavar="PATH", help="Harbor job directory")
    _common(score)

    compare = sub.add_parser("compare", help="paired comparison of two runs on the same tasks")
    compare.add_argument(
        "--run",
        action="append",
        required=True,
        metavar="NAME=PATH",
        help="a run; give it twice: baseline first, candidate second",
    )
    compare.add_argument(
        "--allow-diff",
        action="append",
        default=[],
        metavar="FIELD",
        help="protocol field allowed to differ besides model/revision/adapter",
    )
    _common(compare)

    select = sub.add_parser("select", help="pick a checkpoint from validation-metrics.jsonl")
    select.add_argument(
        "metrics", type=Path, metavar="METRICS_JSONL", help="a run's validation-metrics.jsonl"
    )
    select.add_argument(
        "--patience",
        type=int,
        default=DEFAULT_PATIENCE,
        help=f"validations without improvement before stopping (default {DEFAULT_PATIENCE})",
    )
    select.add_argument(
        "--checkpoints",
        type=Path,
        metavar="DIR",
        help="the run's checkpoints folder (default: checkpoints/ beside METRICS_JSONL, else "
        "every step but 0); only steps with a checkpoint can be selected",
    )
    select.add_argument("--json", metavar="OUT", help="write JSON to OUT ('-' for stdout)")

    report = sub.add_parser("report", help="one self-contained HTML page for one or more runs")
    report.add_argument(
        "runs",
        nargs="+",
        metavar="PATH",
        help="job directory or NAME=PATH; with exactly two, a paired comparison is added",
    )
    report.add_argument("--html", required=True, metavar="OUT", type=Path, help="HTML file")
    report.add_argument("--panel", help="panel name for every attempt (see score --help)")
    report.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="skip unfinished trials instead of refusing the job",
    )

    p0 = sub.add_parser(
        "p0",
        help="moved: run `forge-ppo p0` (the P0 pipeline is a recipe of forge-ppo)",
        description=P0_MOVED,
    )
    # today's options still parse, so the message can name the forge-ppo command to run
    p0.add_argument("--config", help=argparse.SUPPRESS)
    p0.add_argument("--checkpoint", action="append", default=[], help=argparse.SUPPRESS)
    p0.add_argument("--run-dir", help=argparse.SUPPRESS)
    p0.add_argument("--cache-dir", help=argparse.SUPPRESS)
    return use_help_formatter(parser)


def _p0(args: argparse.Namespace) -> int:
    """`forge-eval p0` moved to forge-ppo: say where, with the command to run; exit 2."""
    command = ["forge-ppo", "p0", "--config", args.config or "SPEC"]
    for checkpoint in args.checkpoint:
        command += ["--checkpoint", checkpoint]
    for flag, value in (("--run-dir", args.run_dir), ("--cache-dir", args.cache_dir)):
        if value is not None:
            command += [flag, value]
    print(
        f"forge-eval p0 moved: {P0_MOVED}; expected `forge-ppo p0`; found `forge-eval p0`; fix: "
        f"run `{shlex.join(command)}` (same options)",
        file=sys.stderr,
    )
    return 2


def _common(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--json", metavar="OUT", help="write JSON to OUT ('-' for stdout)")
    sub.add_argument(
        "--panel",
        help="panel name for every attempt (default: the trial's "
        "dataset, else the job's only dataset, else the job directory name)",
    )
    sub.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="skip unfinished trials (no result.json) instead of refusing the job",
    )


def _emit(model: BaseModel, json_out: str | None, text: str) -> None:
    if json_out is None:
        print(text)
        return
    payload = model.model_dump_json(by_alias=True, indent=2) + "\n"
    if json_out == "-":
        sys.stdout.write(payload)
    else:
        atomic_write_text(Path(json_out), payload)
        print(text)
        print(f"\nwrote {json_out}")


def _run(args: argparse.Namespace) -> int:
    if args.command == "p0":
        return _p0(args)
    options = (
        {"panel": args.panel, "allow_incomplete": args.allow_incomplete}
        if args.command != "select"
        else {}
    )
    if args.command == "score":
        report = score_job(read_job(args.path, **options))
        _emit(report, args.json, render_report(report))
    elif args.command == "compare":
        runs = named_paths(args.run)
        if len(runs) != 2:
            print(
                f"forge-eval compare: expected exactly 2 --run options; found {len(runs)}. "
                "Fix: --run A=PATH --run B=PATH",
                file=sys.stderr,
            )
            return 2
        unknown = sorted(set(args.allow_diff) - set(Protocol.model_fields))
        if unknown:
            panel_hint = (
                "; panels are named with --panel NAME, not allowed to differ"
                if {"panel", "panels", "dataset"} & set(unknown)
                else ""
            )
            print(
                f"forge-eval compare: expected --allow-diff FIELD among the protocol fields "
                f"{sorted(Protocol.model_fields)}; found {unknown}{panel_hint}",
                file=sys.stderr,
            )
            return 2
        (name_a, path_a), (name_b, path_b) = runs
        comparison = compare_jobs(
            read_job(path_a, **options),
            read_job(path_b, **options),
            names=(name_a, name_b),
            allow_diff=tuple(args.allow_diff),
        )
        _emit(comparison, args.json, render_comparison(comparison))
    elif args.command == "select":
        selection = select_checkpoint(
            args.metrics, patience=args.patience, checkpoints=args.checkpoints
        )
        _emit(selection, args.json, render_selection(selection))
    else:
        runs = named_paths(args.runs)
        jobs = [(name, read_job(path, **options)) for name, path in runs]
        reports = [(name, score_job(job)) for name, job in jobs]
        comparison, refusal = None, None
        if len(jobs) == 2:
            try:
                comparison = compare_jobs(jobs[0][1], jobs[1][1], names=(jobs[0][0], jobs[1][0]))
            except NotComparableError as exc:
                refusal = str(exc)
                print(f"forge-eval report: comparison left out: {exc}", file=sys.stderr)
        atomic_write_text(args.html, render_html(reports, comparison, refusal))
        for name, report in reports:
            print(f"== {name}\n{render_report(report)}\n")
        print(f"wrote {args.html}")
    return 0


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `forge-eval` console script."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except NotComparableError as exc:
        print(f"forge-eval {args.command}: not comparable: {exc}", file=sys.stderr)
        return 2
    except ForgeEvalError as exc:
        print(f"forge-eval {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
