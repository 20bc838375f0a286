"""Bodies of the `forge-data` sub-commands (argument parsing lives in `cli.py`).

Each returns the process exit code: 0 on success, 1 when the data fails a rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from forge_data._errors import DataError
from forge_data._progress import Progress, step
from forge_data.bulk._curate import curate
from forge_data.bulk._sandbox_jobs import SandboxRun
from forge_data.bundled._demo import write_demo_tasks
from forge_data.bundled._demo_split import demo_split_root, freeze_demo_split
from forge_data.curation._filter import FilterConfig, static_filter
from forge_data.curation._harbor_jobs import ingest_oracle_runs
from forge_data.curation._verdict_file import (
    VerdictRecord,
    append_verdicts,
    latest_verdicts,
    read_verdicts,
)
from forge_data.freeze._freeze import FreezeSpec, SplitTargets
from forge_data.freeze._freeze_run import freeze, freeze_check
from forge_data.freeze._manifest import load_manifest
from forge_data.freeze._oracle_plan import plan_oracle_batch
from forge_data.freeze._verify import verify_frozen
from forge_data.importers._import import import_rows
from forge_data.plans._epoch import plan_training
from forge_data.plans._task_set import task_set_folders
from forge_data.plans._validation import GREEDY_DECODING, choose_validation_subset, plan_schedule
from forge_data.tasks._harbor_tasks import harbor_task_dirs
from forge_data.tasks._models import ReadReport
from forge_data.tasks._sources import read_tasks, write_task_records
from forge_gates import Gate, atomic_write_json, gate


def _read(args: argparse.Namespace) -> ReadReport:
    progress = Progress(f"reading {args.tasks}", enabled=not args.quiet)
    report = read_tasks(args.tasks, progress=progress)
    progress.done(f"{len(report.tasks)} tasks, {len(report.problems)} bad records")
    for problem in report.problems:
        print(f"bad record: {problem}", file=sys.stderr)
    return report


def _spec(args: argparse.Namespace) -> FreezeSpec:
    return FreezeSpec(
        name=args.name,
        targets=SplitTargets(train=args.train, validation=args.validation, test=args.test),
        per_repo_cap=args.per_repo_cap,
        min_repositories=args.min_repositories,
        allow_shortage=getattr(args, "allow_shortage", False),
        seed=args.seed,
    )


def _verdicts(args: argparse.Namespace) -> dict[str, VerdictRecord] | None:
    if args.skip_oracle:
        return None
    if not args.verdicts:
        raise DataError(
            "oracle evidence",
            expected="--verdicts FILE or --skip-oracle",
            found="neither",
            fix="ingest NOP/oracle jobs first (forge-data ingest)",
        )
    return latest_verdicts(read_verdicts(args.verdicts))


def cmd_demo_tasks(args: argparse.Namespace) -> int:
    written = write_demo_tasks(args.out)
    for path in written:
        print(path)
    print(f"wrote {len(written)} demo tasks to {args.out}", file=sys.stderr)
    return 0


def cmd_demo_split(args: argparse.Namespace) -> int:
    if args.out is None:
        manifest = load_manifest(demo_split_root())
        print(f"{demo_split_root()} sha256={manifest.sha256}")
        print(json.dumps({s: list(ids) for s, ids in manifest.splits.items()}, indent=2))
        return 0
    step("checking every demo task locally (NOP, then oracle) and freezing", enabled=not args.quiet)
    manifest = freeze_demo_split(args.out)
    print(f"{args.out} sha256={manifest.sha256}")
    return 0


def cmd_candidates(args: argparse.Namespace) -> int:
    # 1. read, 2. filter, 3. write the kept candidates
    report = _read(args)
    config = FilterConfig(
        min_instruction_chars=args.min_instruction_chars,
        require_fail_to_pass=not args.allow_no_fail_to_pass,
        require_image=args.require_image,
        exclude_repositories=tuple(args.exclude_repo),
    )
    filtered = static_filter(report.tasks, config)
    for rejection in filtered.rejected:
        print(f"rejected {rejection.task_id}: {', '.join(rejection.reasons)}", file=sys.stderr)
    if args.out:
        write_task_records(args.out, filtered.kept)
    print(
        json.dumps(
            {
                "read": len(report.tasks),
                "bad_records": len(report.problems),
                "kept": len(filtered.kept),
                "rejected": filtered.counts,
            }
        )
    )
    return records_exit_code("candidates", len(report.problems), len(filtered.kept), args)


def cmd_import(args: argparse.Namespace) -> int:
    # 1. rows -> task folders, 2. every bad row named, 3. the JSON summary on stdout
    progress = Progress(f"importing {args.rows}", enabled=not args.quiet)
    summary = import_rows(
        args.kind, args.rows, args.out, overwrite=args.overwrite, progress=progress
    )
    progress.done(f"{len(summary.written)} task folders, {len(summary.problems)} bad rows")
    for problem in summary.problems:
        print(f"bad record: {problem}", file=sys.stderr)
    print(
        json.dumps(
            {
                "kind": summary.kind,
                "out": str(summary.out),
                "read": summary.read,
                "written": len(summary.written),
                "bad_records": len(summary.problems),
            }
        )
    )
    return records_exit_code("import", len(summary.problems), len(summary.written), args)


def records_exit_code(command: str, bad: int, kept: int, args: argparse.Namespace) -> int:
    """1 when nothing was kept, or a record could not be read (unless --keep-going); 0 else."""
    if kept == 0:
        print(
            f"error: {command}: expected at least one record kept; found none ({bad} could not "
            "be read); fix: check the input (each bad record is named above)",
            file=sys.stderr,
        )
        return 1
    if bad and not args.keep_going:
        print(
            f"error: {command}: expected every record readable; found {bad} that could not be "
            "read (named above); fix: correct them, or pass --keep-going to accept the rest",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    report = ingest_oracle_runs(args.nop, args.oracle, verifier_timeout_s=args.verifier_timeout)
    for problem in report.problems:
        print(f"unreadable trial: {problem}", file=sys.stderr)
    for task_id in report.only_nop + report.only_oracle:
        print(f"no verdict for {task_id}: it ran in only one of the two jobs", file=sys.stderr)
    appended = append_verdicts(args.verdicts, report.verdicts, supersede=args.supersede)
    kinds: dict[str, int] = {}
    for verdict in report.verdicts:
        kinds[verdict.verdict] = kinds.get(verdict.verdict, 0) + 1
    print(
        json.dumps(
            {
                "verdicts": kinds,
                "appended": len(appended),
                "unchanged": len(report.verdicts) - len(appended),
            }
        )
    )
    return 0


def cmd_oracle_plan(args: argparse.Namespace) -> int:
    report = _read(args)
    verdicts = latest_verdicts(read_verdicts(args.verdicts)) if args.verdicts else {}
    batch = plan_oracle_batch(report.tasks, verdicts, _spec(args), args.n)
    if args.out:
        atomic_write_json(args.out, batch.model_dump(mode="json"))
    for task_id in batch.task_ids:
        print(task_id)
    print(
        f"chose {len(batch.task_ids)} (gap {batch.gap} tasks, {batch.repository_gap} "
        f"repositories; {batch.pending} pending)",
        file=sys.stderr,
    )
    return 0


def cmd_curate(args: argparse.Namespace) -> int:
    if args.batch < 1 or args.max_infra_attempts < 1:
        raise DataError(
            "curate",
            expected="--batch >= 1 and --max-infra-attempts >= 1",
            found=f"--batch {args.batch}, --max-infra-attempts {args.max_infra_attempts}",
            fix="pass positive values",
        )
    run = SandboxRun(
        backend=args.backend,
        concurrency=args.concurrency,
        verifier_timeout_s=args.verifier_timeout,
        extra_args=tuple(args.sandbox_arg),
        quiet=args.quiet,
    )
    report = curate(
        args.tasks,
        args.out,
        _spec(args),
        run,
        batch_size=args.batch,
        max_infra_attempts=args.max_infra_attempts,
        max_batches=args.max_batches,
        freeze_to=args.freeze,
    )
    print(report.model_dump_json())
    return 0 if report.ready else 1


def cmd_freeze_check(args: argparse.Namespace) -> int:
    report = _read(args)
    freeze_check(report.tasks, _spec(args), verdicts=_verdicts(args), run_dir=args.run_dir)
    return 0


def _task_dirs(args: argparse.Namespace, report: ReadReport) -> dict[str, Path] | None:
    """The Harbor task folders `freeze` copies to `<out>/tasks/` (where training and `verify`
    look): --tasks-root, else --tasks when it is a folder. None when there are none, with a
    note when the candidates are Harbor tasks whose folders were not given."""
    dirs = harbor_task_dirs(args.tasks_root or args.tasks)
    if args.tasks_root and not dirs:
        raise DataError(
            "freeze --tasks-root",
            expected="a folder of Harbor task folders <root>/<id>/ (task.toml, instruction.md...)",
            found=f"none in {args.tasks_root}",
            fix="pass the folder the candidates were read from (forge-data candidates --tasks)",
        )
    if not dirs and any(task.source == "harbor" for task in report.tasks):
        print(
            f"note: {args.out} gets no tasks/ folder: {args.tasks} holds Harbor task records, "
            "not their folders, so training and `forge-data verify` will not find them at "
            "<out>/tasks/<id>/; fix: pass --tasks-root DIR (the folder the candidates were "
            "read from)",
            file=sys.stderr,
        )
    return dirs or None


def cmd_freeze(args: argparse.Namespace) -> int:
    quiet = args.quiet
    step("[1/3] reading candidates", enabled=not quiet)
    report = _read(args)
    step("[2/3] reading verdicts", enabled=not quiet)
    verdicts = _verdicts(args)
    step(f"[3/3] planning and writing {args.out}", enabled=not quiet)
    manifest = freeze(
        report.tasks,
        _spec(args),
        args.out,
        verdicts=verdicts,
        verdict_source=str(args.verdicts or "skipped (--skip-oracle)"),
        task_dirs=_task_dirs(args, report),  # Harbor folders travel with the split
    )
    print(
        json.dumps(
            {
                "out": str(args.out),
                "sha256": manifest.sha256,
                "counts": manifest.counts,
                "shortfall": manifest.shortfall.model_dump(),
            }
        )
    )
    return 0


def _split_and_tasks_root(ref: str, args: argparse.Namespace) -> tuple[Path, Path | None]:
    """The split folder and the task folders to check: --tasks-root, else the split's own
    (`<split>/tasks/`, the bundled tasks for `demo`); None only with --no-task-files."""
    folder, own_tasks = task_set_folders(ref)
    if args.no_task_files:
        return folder, None
    return folder, Path(args.tasks_root) if args.tasks_root else own_tasks


def cmd_verify(args: argparse.Namespace) -> int:
    folder, tasks_root = _split_and_tasks_root(args.folder, args)
    problems = verify_frozen(folder, tasks_root=tasks_root, expect_sha256=args.expect_sha256)
    fields = {
        "folder": str(args.folder),
        "task_files": "skipped" if tasks_root is None else str(tasks_root),
        "problems": len(problems),
    }
    gate(args.run_dir, Gate.DATA_SPLIT_VERIFIED, problems, fields)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    # 1. the frozen split, verified first
    folder, tasks_root = _split_and_tasks_root(args.split, args)
    problems = verify_frozen(folder, tasks_root=tasks_root)
    gate(args.run_dir, Gate.DATA_SPLIT_VERIFIED, problems, {"folder": str(args.split)})
    manifest = load_manifest(folder)
    train, validation = manifest.splits["train"], manifest.splits["validation"]
    # 2. epochs, 3. validation subset, 4. schedules
    plan = plan_training(
        train,
        args.batch_size,
        epochs=args.epochs,
        seed=args.seed,
        world_size=args.world_size,
        run_dir=args.run_dir,
    )
    subset = choose_validation_subset(
        validation,
        args.validation_tasks or len(validation),
        seed=args.seed,
        train_ids=train,
        run_dir=args.run_dir,
    )
    schedule = plan_schedule(
        plan.total_steps,
        test_freq=args.test_freq or plan.total_steps,
        save_freq=args.save_freq or plan.total_steps,
    )
    if args.out:
        atomic_write_json(
            args.out,
            {
                "schema_version": 1,
                "split_sha256": manifest.sha256,
                "training": plan.model_dump(mode="json"),
                "validation_contract": subset.contract(GREEDY_DECODING),
                "schedule": schedule.model_dump(mode="json"),
            },
        )
    print(
        f"validation_steps={list(schedule.validation_steps)} "
        f"save_steps={list(schedule.save_steps)}",
        file=sys.stderr,
    )
    return 0
