"""The P0 comparison: two checkpoints, same protocol, separate panels, paired statistics.

Optional (`pip install forge-eval[p0]` pulls forge-rollout); nothing else in forge-eval imports
this module. Steps, each recorded in `<run_dir>/gates.jsonl`:

1. the run spec (phase p0) and the protocol: everything that changes outcomes, hashed;
   `jobs.json` records it before any task runs (`P0_PROTOCOL_GATE_PASSED`);
2. the local server + gateway; a near-window request proves the server serves the configured
   window (`P0_NEAR_WINDOW_PROBE_PASSED`), the gateway answers (`P0_ENDPOINT_GATE_PASSED`);
3. per candidate and panel, one Harbor job with the same agent settings and seed
   (`P0_PANEL_COMPLETE`), scored per panel into `report.json` (never a mixed score);
4. per panel, the paired comparison (wins/ties/losses, exact McNemar, Newcombe interval) and an
   HTML page (`P0_COMPARISON_PASSED`); the ledger is then verified for the p0 phase.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from forge_data import verify_task_set
from forge_eval._compare import compare_jobs
from forge_eval._html import render_html
from forge_eval._reader import read_job
from forge_eval._score import score_job
from forge_eval._tables import render_comparison
from forge_gates import (
    Check,
    GateError,
    RunSpec,
    atomic_write_text,
    gate,
    new_run_dir,
    record_gate,
    sha256_canonical,
    spec_sha256,
    verify_run,
    write_config_summary,
)
from forge_rollout import (
    MINI_SWE_AGENT_VERSION,
    LocalStack,
    agent_config_from_spec,
    check_endpoint,
    resolve_model,
    resolve_split,
    run_rollouts,
)
from forge_sandbox import HarborTask, task_checksum

JOBS_SCHEMA = "forge-eval/p0-jobs@1"
BASE = "base"


def _adapter_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def _task_digest(task: HarborTask) -> str:
    return f"{task.name}:{task_checksum(task.path)}"


def run_p0(
    spec: RunSpec,
    checkpoints: dict[str, Path],
    *,
    run_dir: Path | None = None,
    runs_root: Path = Path("runs"),
    cache_dir: Path = Path(".cache/forge"),
) -> Path:
    """Run the P0 protocol of `spec` for its two candidates; returns the verified run folder.

    `checkpoints` maps candidate names to `global_step_N` folders; the name 'base' needs none.
    """
    ev = spec.eval
    assert ev is not None, "a p0 spec has an [eval] section (rule p0.eval_section)"
    # 1. candidates, panels and the protocol, before any folder exists
    check = Check("P0_PROTOCOL_GATE_PASSED")
    adapters: dict[str, Path | None] = {}
    for name in ev.candidates:
        folder = None if name == BASE else checkpoints.get(name)
        if name != BASE:
            adapter = (folder / "lora_adapter") if folder else None
            check.require(
                adapter is not None and (adapter / "adapter_config.json").is_file(),
                rule=f"candidate.{name}",
                expected=f"a checkpoint with lora_adapter/ for {name!r}",
                found=str(folder),
                fix=f"pass --checkpoint {name}=RUN/checkpoints/global_step_N",
            )
            folder = adapter
        adapters[name] = folder
    gate(None, "P0_CANDIDATES_PASSED", check.violations, {"candidates": list(ev.candidates)})
    model_dir = resolve_model(spec, cache_dir)
    split = verify_task_set(spec.data.tasks)  # tamper check: a changed task file stops here
    gate(None, "DATA_SPLIT_VERIFIED", split.violations, split.fields())
    panels = {panel: resolve_split(spec.data.tasks, panel) for panel in ev.panels}
    config = agent_config_from_spec(spec, "eval")
    protocol = {
        "model": str(model_dir),
        "revision": spec.model.revision,
        "candidates": {n: (None if a is None else _adapter_digest(a)) for n, a in adapters.items()},
        "agent": {
            "name": "mini-swe-agent",
            "version": MINI_SWE_AGENT_VERSION,
            "config": config.model_dump(mode="json"),
        },
        "step_limit": spec.agent.step_limit,
        "context_window": spec.context.window,
        "reserve": spec.context.reserve,
        "seed": spec.seed,
        "retries": ev.retries,
        "attempts": ev.attempts,
        "panels": {p: sorted(_task_digest(t) for t in tasks) for p, tasks in panels.items()},
    }
    sha = sha256_canonical(protocol)
    # 2. the run folder: spec, protocol, jobs.json
    run_dir = new_run_dir(spec, run_dir, runs_root)
    write_config_summary(run_dir, spec)
    record_gate(
        run_dir,
        "RUN_SPEC_GATE_PASSED",
        {"phase": "p0", "name": spec.name, "sha256": spec_sha256(spec)},
    )
    record_gate(run_dir, "DATA_SPLIT_VERIFIED", split.fields())
    jobs = {n: {p: str(run_dir / "jobs" / n / p) for p in ev.panels} for n in ev.candidates}
    atomic_write_text(
        run_dir / "jobs.json",
        json.dumps(
            {"schema": JOBS_SCHEMA, "protocol": protocol, "protocol_sha256": sha, "jobs": jobs},
            indent=2,
            sort_keys=True,
        )
        + "\n",
    )
    record_gate(
        run_dir,
        "P0_PROTOCOL_GATE_PASSED",
        {"sha256": sha, "panels": list(ev.panels), "candidates": list(ev.candidates)},
    )
    # 3. serving: near-window proof, endpoint proof, then every (candidate, panel) job
    reports: dict[str, dict[str, Any]] = {}
    with LocalStack(spec, model_dir, run_dir) as live:
        probe = live.near_window_probe()
        record_gate(run_dir, "P0_NEAR_WINDOW_PROBE_PASSED", probe)
        health = check_endpoint(live.gateway_url)
        record_gate(
            run_dir,
            "P0_ENDPOINT_GATE_PASSED",
            {"endpoint": live.gateway_url, "upstream_ok": bool(health)},
        )
        for name, adapter in adapters.items():
            model = live.engine.served_model_name
            if adapter is not None:
                live.load_adapter(name, adapter)
                model = name
            for panel, tasks in panels.items():
                job = Path(jobs[name][panel])
                print(f"[p0] {name} on {panel}: {len(tasks)} tasks", file=sys.stderr, flush=True)
                asyncio.run(
                    run_rollouts(
                        tasks,
                        job,
                        endpoint=live.gateway_url,
                        model=model,
                        config=config,
                        attempts=ev.attempts,
                        concurrency=spec.resources.concurrency,
                        traces_dir=live.traces_dir,
                        verifier_timeout_s=spec.agent.verifier_timeout_s,
                    )
                )
                report = score_job(read_job(job, panel=panel))
                atomic_write_text(
                    job / "report.json", report.model_dump_json(by_alias=True, indent=2) + "\n"
                )
                (score,) = report.panels
                reports.setdefault(panel, {})[name] = report
                record_gate(
                    run_dir,
                    "P0_PANEL_COMPLETE",
                    {
                        "candidate": name,
                        "panel": panel,
                        "attempts": score.n_attempts,
                        "solved": score.solved,
                        "infra_errors": score.infra_errors,
                    },
                )
    # 4. per panel: the paired comparison and its page
    summary = {}
    a, b = ev.candidates
    for panel in ev.panels:
        comparison = compare_jobs(
            read_job(Path(jobs[a][panel]), panel=panel),
            read_job(Path(jobs[b][panel]), panel=panel),
            names=(a, b),
        )
        out = run_dir / f"comparison-{panel}.json"
        atomic_write_text(out, comparison.model_dump_json(by_alias=True, indent=2) + "\n")
        runs = [(f"{n}/{panel}", reports[panel][n]) for n in (a, b)]
        atomic_write_text(run_dir / f"report-{panel}.html", render_html(runs, comparison))
        print(f"== {panel}: {a} vs {b}\n{render_comparison(comparison)}\n", flush=True)
        (pc,) = comparison.panels
        summary[panel] = {
            "wins": pc.wins,
            "ties": pc.ties,
            "losses": pc.losses,
            "mcnemar_p": pc.mcnemar_p,
            "delta": pc.delta,
        }
    record_gate(
        run_dir,
        "P0_COMPARISON_PASSED",
        {"panels": list(ev.panels), "a": a, "b": b, "summary": json.dumps(summary, sort_keys=True)},
    )
    problems = verify_run(run_dir, "p0")
    if problems:
        raise GateError("P0_LEDGER", problems)
    print(f"RUN_DIR {run_dir}", flush=True)
    return run_dir
