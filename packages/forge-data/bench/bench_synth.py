"""forge-data synth's throughput and yield (a report, no target: issue 34 asks for the figures).

1. Measured here: `forge-data synth` on the tests' fixture project (src layout, 33 tests; its
   only dependency, pytest, from uv's cache or the index), 6 tasks, NOP / oracle validation
   included, on the local sandbox: validated tasks per hour on this machine, and where the time
   went (environment, baseline + candidates, writing, validation).
2. Read back, when the real-repository tier is built here (`nox -s synth`): its curation yield
   per swesmith modifier (kept / evaluated) and per project, and its synthesis time per task.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import forge_data as fd
from forge_gates import realrepo_dir

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "synth_project"


def _tier_yield() -> dict:
    try:
        built = json.loads((realrepo_dir() / "tier.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"built": False}
    evaluated: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    seconds, tasks = 0.0, 0
    for source in built.get("synth", {}):
        report_file = (
            realrepo_dir() / "build" / "synth" / source.split("==")[0] / "synth-report.json"
        )
        try:
            report = json.loads(report_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for name, counts in report.get("modifiers", {}).items():
            evaluated[name] += counts.get("evaluated", 0)
            kept[name] += counts.get("kept", 0)
        seconds += report.get("seconds", {}).get("total", 0.0)
        tasks += len(report.get("tasks", []))
    per_modifier = {
        name: {
            "evaluated": evaluated[name],
            "kept": kept[name],
            "yield": round(kept[name] / evaluated[name], 3) if evaluated[name] else None,
        }
        for name in sorted(evaluated)
    }
    return {
        "built": True,
        "verdicts": built.get("verdicts"),
        "synthesized_tasks": tasks,
        "synth_seconds": round(seconds, 1),
        "synth_tasks_per_hour": round(3600 * tasks / seconds, 1) if seconds else None,
        "yield_per_modifier": per_modifier,
    }


def run() -> dict:
    with tempfile.TemporaryDirectory(prefix="forge-synth-bench-") as tmp:
        start = time.perf_counter()
        report = fd.synthesize(
            fd.SynthConfig(
                source=str(FIXTURE), out=Path(tmp) / "tasks", seed=7, max_tasks=6, quiet=True
            )
        )
        wall = time.perf_counter() - start
    validated = len(report.tasks)
    per_hour = round(3600 * validated / wall, 1) if wall else None
    evaluated = sum(m.evaluated for m in report.modifiers.values())
    tier = _tier_yield()
    summary = (
        f"synth (fixture, 6 asked): {validated} validated tasks in {wall:.1f} s = {per_hour} "
        f"tasks/hour, {evaluated} candidates evaluated"
    )
    if tier.get("built"):
        summary += (
            f"; realrepo tier: {tier['synthesized_tasks']} tasks synthesized at "
            f"{tier['synth_tasks_per_hour']} tasks/hour (before curation)"
        )
    return {
        "summary": summary,
        "synth": {
            "validated_tasks": validated,
            "wall_seconds": round(wall, 2),
            "validated_tasks_per_hour": per_hour,
            "stages_seconds": report.seconds,
            "candidates_evaluated": evaluated,
            "dropped": report.dropped,
            "refused": report.refused,
            "realrepo": tier,
        },
    }
