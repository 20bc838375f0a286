"""forge-data: curate, validate and freeze task splits that never leak; plan training batches.

Typical flow:
  forge-data import swebench rows.jsonl --out tasks/   # rows -> Harbor task folders
  forge-data synth inflection==0.5.1 --out tasks/ --seed 7   # a real project -> tasks
  forge-data candidates --tasks rows.jsonl --out candidates.jsonl   # read + static filter
  forge-data oracle-plan --tasks candidates.jsonl --verdicts v.jsonl -n 64 --train 187 ...
  forge-data ingest --nop jobs/nop-1 --oracle jobs/oracle-1 --verdicts v.jsonl
  forge-data curate tasks/ --backend docker --batch 40 --concurrency 10 --out runs/c --train 187 ...
  forge-data freeze-check --tasks candidates.jsonl --verdicts v.jsonl --train 187 ...
  forge-data freeze --tasks candidates.jsonl --tasks-root tasks/ --verdicts v.jsonl ... --out split/
  forge-data verify split/   # split files + every task file (and x bit) in split/tasks/
  forge-data plan --split split/ --batch-size 8 --validation-tasks 21 --test-freq 10 ...
`verify` and `plan` check the task folders too: `--tasks-root DIR`, else `<split>/tasks/` (the
bundled tasks for `demo`); no task folders is a violation unless `--no-task-files` is given.
Offline demo: `forge-data demo-tasks --out DIR`, `forge-data demo-split`, `forge-data verify demo`.
Exit codes: 0 ok, 1 a rule failed (every violation is printed), or a command that reads records
(`candidates`, `import`) could not read one (unless `--keep-going`) or kept none; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from forge_data import _commands as commands
from forge_data._errors import DataError
from forge_data.synth import add_realrepo_parser, add_synth_parser
from forge_gates import Gate, GateError, quiet_broken_pipe, use_help_formatter

_PRINTED_BY_GATE = {
    Gate.BULK_ORACLE_FREEZE_READY,
    Gate.DATA_SPLIT_VERIFIED,
    Gate.TRAIN_FULL_DATASET_GATE_PASSED,
    Gate.TRAIN_EPOCH_COVERAGE,
    Gate.TRAIN_VALIDATION_SUBSET_GATE_PASSED,
}


def _add_tasks(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tasks",
        required=True,
        help="Harbor task folder(s), rows .jsonl/.parquet, or a candidates .jsonl",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _add_keep_going(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="exit 0 even when a record could not be read (by default: exit 1); none kept "
        "still exits 1",
    )
    p.add_argument(
        "--strict", action="store_true", help="the default now (kept for old scripts): no-op"
    )


def _add_spec(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    g = p.add_argument_group("split spec")
    for split in ("train", "validation", "test"):
        g.add_argument(
            f"--{split}",
            type=int,
            required=required,
            default=0,
            help=f"target number of {split} tasks",
        )
    g.add_argument("--per-repo-cap", type=int, default=20, help="most tasks per repository")
    g.add_argument("--min-repositories", type=int, default=0, help="fewest repositories")
    g.add_argument("--seed", type=int, default=0, help="seed of every tie-break")
    g.add_argument("--name", default="split", help="name recorded in the manifest")


def _add_oracle(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--verdicts", help="verdict file (forge-data ingest): accepted tasks only")
    g.add_argument(
        "--skip-oracle",
        action="store_true",
        help="freeze without oracle verdicts (recorded in the manifest)",
    )
    p.add_argument("--run-dir", help="append gate records to RUN_DIR/gates.jsonl")


def _add_task_files(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--tasks-root",
        help="task folders <root>/<id>/ to check file by file (default: <split>/tasks/)",
    )
    g.add_argument(
        "--no-task-files",
        action="store_true",
        help="check the split files only, not the task folders (recorded in the marker)",
    )


def _add_candidates(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("candidates", help="read tasks, report bad records, apply the filter")
    _add_tasks(p)
    p.add_argument("--out", help="write kept candidates (Task records JSONL) here")
    p.add_argument(
        "--min-instruction-chars",
        type=int,
        default=20,
        help="a shorter instruction rejects the candidate",
    )
    p.add_argument(
        "--allow-no-fail-to-pass",
        action="store_true",
        help="keep candidates that list no FAIL_TO_PASS test",
    )
    p.add_argument(
        "--require-image", action="store_true", help="reject candidates without a Docker image"
    )
    p.add_argument(
        "--exclude-repo",
        action="append",
        default=[],
        metavar="REPO",
        help="reject this repository's candidates (repeat)",
    )
    _add_keep_going(p)
    p.set_defaults(func=commands.cmd_candidates)


def _add_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="SWE-bench / SWE-smith / SWE-Gym rows -> Harbor task folders")
    p.add_argument("kind", choices=["swebench", "swesmith", "swegym"], help="the rows' dataset")
    p.add_argument("rows", help="rows file: .jsonl, or .parquet (the `parquet` extra)")
    p.add_argument("--out", required=True, help="folder to write <instance_id>/ task folders into")
    p.add_argument("--overwrite", action="store_true", help="replace task folders that exist")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_keep_going(p)
    p.set_defaults(func=commands.cmd_import)


def _add_curate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "curate",
        help="NOP then oracle jobs in batches until BULK_ORACLE_FREEZE_READY (resumable)",
    )
    p.add_argument("tasks", help="folder of Harbor task folders")
    p.add_argument("--out", required=True, help="curation folder (verdicts, batches, ledger)")
    p.add_argument(
        "--backend",
        choices=["local", "docker", "kubernetes"],
        default="local",
        help="the sandbox backend `forge-sandbox nop|oracle` runs the jobs on",
    )
    p.add_argument("--batch", type=int, default=40, help="tasks per batch (default 40)")
    p.add_argument("--concurrency", type=int, default=10, help="sandboxes at once (default 10)")
    p.add_argument(
        "--verifier-timeout",
        type=float,
        default=180.0,
        help="curation's verifier limit, s (the seed's 180; other runs use each task's own)",
    )
    p.add_argument(
        "--max-infra-attempts", type=int, default=3, help="infrastructure errors before giving up"
    )
    p.add_argument("--max-batches", type=int, help="stop after N batches (default: until ready)")
    p.add_argument("--freeze", help="when ready, freeze into this new folder (task folders too)")
    p.add_argument(
        "--sandbox-arg",
        action="append",
        default=[],
        help="extra forge-sandbox argument, repeatable (e.g. --sandbox-arg=--docker-config=F)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_spec(p)
    p.set_defaults(func=commands.cmd_curate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forge-data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo-tasks", help="write the bundled demo tasks (Harbor layout)")
    p.add_argument("--out", required=True, help="folder to write <task-id>/ folders into")
    p.set_defaults(func=commands.cmd_demo_tasks)

    p = sub.add_parser("demo-split", help="show the shipped demo split, or re-freeze it")
    p.add_argument("--out", help="re-create the demo split here (runs every task locally)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=commands.cmd_demo_split)

    _add_candidates(sub)
    _add_import(sub)
    add_synth_parser(sub)
    add_realrepo_parser(sub)
    _add_curate(sub)

    p = sub.add_parser("ingest", help="NOP + oracle Harbor jobs -> verdicts (append-only)")
    p.add_argument("--nop", required=True, help="Harbor job folder of the NOP run")
    p.add_argument("--oracle", required=True, help="Harbor job folder of the oracle run")
    p.add_argument("--verdicts", required=True, help="verdict file to append to")
    p.add_argument(
        "--verifier-timeout", type=float, default=180.0, help="verifier timeout in seconds"
    )
    p.add_argument("--supersede", action="store_true", help="replace final verdicts explicitly")
    p.set_defaults(func=commands.cmd_ingest)

    p = sub.add_parser("oracle-plan", help="the next N candidates to validate")
    _add_tasks(p)
    _add_spec(p)
    p.add_argument("--verdicts", help="verdict file so far")
    p.add_argument("-n", type=int, required=True, help="batch size of the oracle run")
    p.add_argument("--out", help="write the batch as JSON here")
    p.set_defaults(func=commands.cmd_oracle_plan)

    for name, func, text in (
        ("freeze-check", commands.cmd_freeze_check, "simulate; BULK_ORACLE_FREEZE_READY if met"),
        ("freeze", commands.cmd_freeze, "freeze the splits into a new folder"),
    ):
        p = sub.add_parser(name, help=text)
        _add_tasks(p)
        _add_spec(p)
        _add_oracle(p)
        if name == "freeze":
            p.add_argument("--out", required=True, help="new folder (never overwritten)")
            p.add_argument(
                "--tasks-root",
                help="Harbor task folders <root>/<id>/ to copy into <out>/tasks/, where "
                "training reads them (default: --tasks when it is a folder)",
            )
            p.add_argument(
                "--allow-shortage",
                action="store_true",
                help="freeze what there is and record the shortfall",
            )
        p.set_defaults(func=func)

    p = sub.add_parser("verify", help="recompute a frozen folder; name every difference")
    p.add_argument("folder", help="frozen split folder, or `demo` (the shipped demo split)")
    _add_task_files(p)
    p.add_argument("--expect-sha256", help="the manifest sha256 you expect")
    p.add_argument("--run-dir", help="append the gate record to RUN_DIR/gates.jsonl")
    p.set_defaults(func=commands.cmd_verify)

    p = sub.add_parser("plan", help="epoch plan, validation subset and schedules")
    p.add_argument("--split", required=True, help="frozen split folder, or `demo`")
    _add_task_files(p)
    p.add_argument("--batch-size", type=int, required=True, help="tasks per PPO step")
    p.add_argument("--epochs", type=int, default=1, help="passes over the train split")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed of the batch order")
    p.add_argument("--world-size", type=int, default=1, help="trainer world size")
    p.add_argument("--validation-tasks", type=int, help="k of the validation split (all)")
    p.add_argument("--test-freq", type=int, help="validate every N steps (final only)")
    p.add_argument("--save-freq", type=int, help="save every N steps (final only)")
    p.add_argument("--run-dir", help="append gate records to RUN_DIR/gates.jsonl")
    p.add_argument("--out", help="write the plan JSON here")
    p.set_defaults(func=commands.cmd_plan)
    return use_help_formatter(parser)


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 a rule failed, 2 bad arguments)."""
    args = build_parser().parse_args(argv)
    if getattr(args, "run_dir", None):  # asked for a ledger: failures are recorded there too
        Path(args.run_dir).mkdir(parents=True, exist_ok=True)
    try:
        return int(args.func(args))
    except GateError as exc:
        if exc.gate not in _PRINTED_BY_GATE:  # forge_gates.gate() already printed these
            print(f"error: {exc}", file=sys.stderr)
        return 1
    except (DataError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
