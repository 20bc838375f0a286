"""Run every package's benchmark, write one JSON report, print a table of targets; fail on a miss.

Each package may ship `packages/<pkg>/bench/bench_*.py` with `run() -> dict`: JSON-serialisable
results that state speed as ratios against a reference run measured in the same process (never
as timed assertions). A result names its targets in one list, which this runner judges:

    "targets": [{"name": "freeze_60k_over_read_sort", "measured": 3.2, "op": "<=",
                 "threshold": 5.0, "unit": "x"},
                {"name": "forge_rps_over_rllm", "measured": None, "op": ">=", "threshold": 3,
                 "unit": "x", "reason": "rllm-model-gateway not installed"}]

`measured: None` means the target could not be measured (with the reason): it is not met. A
target in milliseconds or seconds (its unit `ms` / `s`, or `ms` / `s` / `seconds` among the
words of its name) is an error, never judged: on a shared machine an absolute time says more
about the neighbours than the code (issue 37); state it against a peer or a floor measured in
the same run and report the time beside it. A
result without targets is a report: its `summary` line (or `skipped` reason) goes to the notes.
Exit status 1 when any target is missed or not measured, a benchmark raised, or a target is
malformed; `--allow-unmeasured` lets unmeasured targets pass (they stay in the table).
Usage: `python tools/bench.py [--out bench-report.json] [--only NAME] [--allow-unmeasured]`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import operator
import os
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "forge/bench-report@2"
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
FAILING = ("missed", "error")
ABSOLUTE_UNITS = frozenset({"ms", "s", "seconds"})  # absolute times: never judged here


@dataclass(frozen=True)
class Row:
    """One line of the table: a target of a benchmark, judged."""

    benchmark: str
    target: str  # "freeze_60k_over_read_sort <= 5 x"
    measured: float | None
    unit: str
    ratio: float | None  # measured / threshold
    status: str  # "met" | "missed" | "not measured" | "error" | "no target" | "report"
    note: str = ""


def _unit(unit: str) -> str:
    return f" {unit}" if unit else ""


def discover(only: str | None) -> list[Path]:
    files = sorted(ROOT.glob("packages/*/bench/bench_*.py"))
    return [f for f in files if only is None or only in f.stem]


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"forge_bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def judge(benchmark: str, target: object) -> Row:
    """A target dict -> its row; a malformed one is an error row, never a pass."""
    keys = {"name", "measured", "op", "threshold"}
    if not isinstance(target, dict) or not keys <= set(target):
        found = sorted(target) if isinstance(target, dict) else type(target).__name__
        note = f"expected keys {sorted(keys)}; found {found}"
        return Row(benchmark, "(malformed target)", None, "", None, "error", note)
    name, op, threshold = target["name"], target["op"], target["threshold"]
    unit = str(target.get("unit", ""))
    if op not in OPS or isinstance(threshold, bool) or not isinstance(threshold, int | float):
        note = f"expected op in {list(OPS)} and a numeric threshold; found {op!r}, {threshold!r}"
        return Row(benchmark, f"{name} {op} {threshold}", None, unit, None, "error", note)
    label = f"{name} {op} {threshold:g}{_unit(unit)}"
    absolute = ({unit} | set(str(name).split("_"))) & ABSOLUTE_UNITS
    if absolute:
        found = min(absolute)
        note = (
            f"expected a ratio against a peer or a floor measured in the same run; found an "
            f"absolute time in {found}; fix: report the {found} as a figure and target the ratio"
        )
        return Row(benchmark, label, None, unit, None, "error", note)
    measured = target["measured"]
    if measured is None:
        reason = str(target.get("reason") or "no reason given")
        return Row(benchmark, label, None, unit, None, "not measured", reason)
    if isinstance(measured, bool) or not isinstance(measured, int | float) or math.isnan(measured):
        return Row(benchmark, label, None, unit, None, "error", f"measured is {measured!r}")
    ratio = round(measured / threshold, 3) if threshold else None
    status = "met" if OPS[op](measured, threshold) else "missed"
    return Row(benchmark, label, measured, unit, ratio, status, str(target.get("note", "")))


def evaluate(benchmarks: dict[str, dict]) -> list[Row]:
    """Every target of every benchmark; a benchmark that raised is one error row."""
    rows: list[Row] = []
    for name, result in benchmarks.items():
        if "error" in result:
            last = (result["error"].strip().splitlines() or ["?"])[-1]
            rows.append(Row(name, "(benchmark raised)", None, "", None, "error", last))
            continue
        targets = result.get("targets", [])
        if not isinstance(targets, list):
            targets = [targets]
        if not targets:
            # why it was skipped, else its own one-line summary of the figures (a report)
            note = str(
                result.get("skipped")
                or result.get("summary")
                or "numbers only: see the JSON report"
            )
            rows.append(Row(name, "(no target)", None, "", None, "no target", note))
        rows += [judge(name, target) for target in targets]
        if targets and result.get("summary"):  # what the run measured beside its targets
            rows.append(Row(name, "(measured)", None, "", None, "report", str(result["summary"])))
    return rows


def failures(rows: list[Row], allow_unmeasured: bool = False) -> list[Row]:
    bad = FAILING if allow_unmeasured else (*FAILING, "not measured")
    return [row for row in rows if row.status in bad]


def exit_code(rows: list[Row], allow_unmeasured: bool = False) -> int:
    return 1 if failures(rows, allow_unmeasured) else 0


def format_table(rows: list[Row]) -> str:
    """Fixed-width table (benchmark, target, measured, ratio, met), then the notes."""
    header = ("benchmark", "target", "measured", "ratio", "met")
    met = {"met": "yes", "missed": "NO", "not measured": "NOT MEASURED", "error": "ERROR"}
    body = [
        (
            row.benchmark,
            row.target,
            "-" if row.measured is None else f"{row.measured:.4g}{_unit(row.unit)}",
            "-" if row.ratio is None else f"{row.ratio:.3g}",
            met.get(row.status, "-"),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, tuple("-" * w for w in widths), *body]
    ]
    notes = [
        f"  {r.benchmark} / {r.target}: {r.note}" for r in rows if r.note and r.status != "met"
    ]
    return "\n".join(lines + (["notes:", *notes] if notes else []))


def summary(rows: list[Row], allow_unmeasured: bool = False) -> str:
    counts = {
        s: sum(r.status == s for r in rows) for s in ("met", "missed", "not measured", "error")
    }
    text = ", ".join(f"{n} {s}" for s, n in counts.items())
    bad = failures(rows, allow_unmeasured)
    if not bad:
        allowed = " (unmeasured allowed by --allow-unmeasured)" if counts["not measured"] else ""
        return f"BENCH_PASSED targets={counts['met']}{allowed}: {text}"
    names = ", ".join(f"{r.benchmark}/{r.target.split(' ')[0]} ({r.status})" for r in bad)
    hint = ""
    if counts["not measured"] and not allow_unmeasured:
        hint = "; --allow-unmeasured lets unmeasured targets pass"
    return f"bench FAILED: {text}; failing: {names}{hint}"


def write_report(out: Path, report: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.tmp-")
    with os.fdopen(fd, "w") as handle:
        json.dump(report, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default="bench-report.json", help="JSON report path")
    parser.add_argument("--only", default=None, help="run only benchmarks whose name contains this")
    parser.add_argument(
        "--allow-unmeasured",
        action="store_true",
        help="targets that could not be measured (e.g. a comparison not installed) do not fail",
    )
    args = parser.parse_args(argv)
    report: dict = {
        "schema": SCHEMA,
        "at": datetime.now(UTC).isoformat(),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "benchmarks": {},
    }
    # 1. run every benchmark; one that raises must not hide the others
    paths = discover(args.only)
    if not paths:
        print(f"expected benchmarks matching {args.only!r} under packages/*/bench; found none")
        return 2
    for path in paths:
        name = path.stem.removeprefix("bench_")
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            result = load(path).run()
            result["wall_seconds"] = round(time.perf_counter() - started, 3)
            report["benchmarks"][name] = result
        except Exception:
            report["benchmarks"][name] = {"error": traceback.format_exc()}
    # 2. judge the targets, write the report with the verdict, print the table
    rows = evaluate(report["benchmarks"])
    report["targets"] = [asdict(row) for row in rows]
    report["allow_unmeasured"] = args.allow_unmeasured
    report["passed"] = exit_code(rows, args.allow_unmeasured) == 0
    out = Path(args.out)
    write_report(out, report)
    print(format_table(rows))
    print(f"report: {out}", file=sys.stderr)
    print(summary(rows, args.allow_unmeasured))
    return exit_code(rows, args.allow_unmeasured)


if __name__ == "__main__":
    raise SystemExit(main())
