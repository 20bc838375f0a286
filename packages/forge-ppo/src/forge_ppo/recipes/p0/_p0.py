"""The P0 comparison: two checkpoints, same protocol, separate panels, paired statistics.

A recipe (it drives rollouts): `forge-ppo p0`. Scoring, comparisons and the HTML page are
forge-eval's. Steps, each recorded in `<run_dir>/gates.jsonl`:

1. before any run folder: the machine (`P0_PREFLIGHT_PASSED`: the backends P0 drives, disk,
   GPUs, memory, bwrap for the local sandbox, a Kubernetes config or a Docker daemon for those),
   the candidates (`P0_CANDIDATES_PASSED`: a `base = true` candidate is the model itself, every
   other one needs `--checkpoint NAME=...`), the frozen split
   (`DATA_SPLIT_VERIFIED`), the panels (a split of a frozen split, or a task folder, of the
   size the spec names) and the protocol actually used, checked against every production value
   when the spec claims `eval.protocol = "production"`;
2. the run folder: `provenance.json` (code, packages, machine, peaks, disk growth; completed at
   the end, a failure included), spec, protocol (everything that changes outcomes, hashed) in
   `jobs.json` before any task runs (`P0_PROTOCOL_GATE_PASSED` with the values used);
3. the inference stack of `backends.inference` (the in-process server, or one vLLM) + gateway;
   a near-window request (window - 1,024 tokens at production windows) proves the server serves
   the configured window (`P0_NEAR_WINDOW_PROBE_PASSED`), the gateway answers
   (`P0_ENDPOINT_GATE_PASSED`);
   per candidate and panel, one Harbor job with the same agent settings and seed, its commands
   audited (`hack-audit.json`), scored per panel into `report.json` (never a mixed score);
   `P0_PANEL_COMPLETE` only when every attempt ran and not all of them are infrastructure errors;
4. per panel, the paired comparison (wins/ties/losses, exact McNemar, Newcombe interval) and an
   HTML page, each showing every candidate's hack-audit flagged share (`P0_COMPARISON_PASSED`;
   a candidate flagged past `agent.max_hack_flagged_ratio` is marked there and fails it); the
   ledger is then verified for the p0 phase.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from forge_data import TaskSetCheck, ensure_task_set, verify_task_set
from forge_eval import Report, compare_jobs, read_job, render_comparison, render_html
from forge_gates import (
    Gate,
    GateError,
    RunSpec,
    Violation,
    atomic_write_text,
    check_p0_production,
    gate,
    new_run_dir,
    preflight,
    record_gate,
    recorded_run,
    run_spec_gate,
    sha256_canonical,
    verify_run,
    visible_gpus,
    write_config_summary,
)
from forge_ppo.recipes._sandboxes import (
    SANDBOX_BACKENDS,
    close_sandboxes,
    open_sandboxes,
    sandbox_problems,
)
from forge_ppo.recipes.p0._checks import (
    check_hack_audit,
    endpoint_gate,
    panel_complete,
    protocol_values,
    resolve_candidates,
    resolve_panels,
    single_candidate_ledger,
)
from forge_rollout import (
    MINI_SWE_AGENT_VERSION,
    AgentConfig,
    InferenceStack,
    agent_config_from_spec,
    open_inference_stack,
    resolve_model,
    run_rollouts,
)
from forge_sandbox import HarborTask, SandboxFactory, task_checksum

JOBS_SCHEMA = "forge-eval/p0-jobs@1"  # the file format keeps its name (docs/architecture.md)
# the engines this runner drives, per concern (DESIGN §2); preflight refuses any other
BACKENDS: dict[str, tuple[str, ...]] = {"inference": ("local", "vllm"), "sandbox": SANDBOX_BACKENDS}
Panels = dict[str, list[HarborTask]]
Jobs = dict[str, dict[str, str]]  # candidate -> panel -> job folder


def run_p0(
    spec: RunSpec,
    checkpoints: dict[str, Path],
    *,
    run_dir: Path | None = None,
    runs_root: Path = Path("runs"),
    cache_dir: Path = Path(".cache/forge"),
    only: str | None = None,
) -> Path:
    """Run the P0 protocol of `spec` for its two candidates; returns the verified run folder.

    `checkpoints` maps candidate names to `global_step_N` folders; a `base = true` candidate
    needs none. `only`: a single-candidate evaluation (the seed's `ppo-eval-checkpoint`): that
    candidate alone on every panel, the same protocol, one scored Harbor job per panel
    (`jobs/<candidate>/<panel>/report.json`, what `forge-eval score` reads) and no comparison.
    """
    ev = spec.eval
    assert ev is not None, "a p0 spec has an [eval] section (rule p0.eval_section)"
    # 1. machine, candidates, split, panels and the protocol, before any folder exists
    gate(
        None,
        Gate.P0_PREFLIGHT_PASSED,
        [*preflight(spec, runs_root, implemented=BACKENDS), *sandbox_problems(spec)],
        {"phase": "p0"},
    )
    adapters = resolve_candidates(spec, checkpoints, only)
    split = verify_task_set(
        ensure_task_set(spec.data.tasks)
    )  # tamper check: a changed task file stops here
    gate(None, Gate.DATA_SPLIT_VERIFIED, split.violations, split.fields())
    panels, problems = resolve_panels(spec)
    config = agent_config_from_spec(spec, "eval")
    used = protocol_values(spec, config, panels)
    if ev.protocol == "production":
        problems += check_p0_production(used)
    if problems:  # fails here, before any folder; passes below, in the ledger, with the values
        gate(None, Gate.P0_PROTOCOL_GATE_PASSED, problems)
    model_dir = resolve_model(spec, cache_dir)
    protocol = protocol_record(spec, model_dir, adapters, config, used, panels)
    # 2. the run folder: its provenance (completed at the end, a failure included), spec,
    #    protocol, jobs.json
    run_dir = new_run_dir(spec, run_dir, runs_root)
    with recorded_run(run_dir, "p0", spec):
        jobs = _write_run_folder(spec, run_dir, split, protocol, used, adapters, panels)
        # 3. serving: near-window proof, endpoint proof, then every (candidate, panel) job
        reports = _run_panels(spec, model_dir, run_dir, adapters, panels, jobs, config)
        # 4. per panel: the paired comparison and its page; then the whole ledger
        if only is None:
            _compare_panels(spec, run_dir, panels, jobs, reports)
            problems = verify_run(run_dir, "p0")
        else:
            _print_scores(only, reports)
            problems = single_candidate_ledger(run_dir, len(panels))
        if problems:
            raise GateError("P0_LEDGER", problems)
    print(f"RUN_DIR {run_dir}", flush=True)
    return run_dir


def protocol_record(
    spec: RunSpec,
    model_dir: Path,
    adapters: dict[str, Path | None],
    config: AgentConfig,
    used: dict[str, Any],
    panels: Panels,
) -> dict[str, Any]:
    """Everything that changes outcomes (hashed into `jobs.json`): model, candidates' adapter
    digests, agent and its config, inference, context, seed, retries, attempts, panels' tasks."""
    assert spec.eval is not None
    return {
        "model": str(model_dir),
        "revision": spec.model.revision,
        "candidates": {n: (None if a is None else _adapter_digest(a)) for n, a in adapters.items()},
        "agent": {
            "name": "mini-swe-agent",
            "version": MINI_SWE_AGENT_VERSION,
            "config": config.model_dump(mode="json"),
        },
        "step_limit": config.step_limit,
        "inference": {
            "backend": spec.backends.inference,
            "dtype": spec.inference.dtype if spec.backends.inference == "vllm" else "float32",
        },
        "context_window": spec.context.window,
        "reserve": spec.context.reserve,
        "seed": config.seed,
        "retries": spec.eval.retries,
        "attempts": used["attempts"],
        "concurrency": used["concurrency"],
        "protocol": spec.eval.protocol,
        "panels": {p: sorted(_task_digest(t) for t in tasks) for p, tasks in panels.items()},
    }


def _write_run_folder(
    spec: RunSpec,
    run_dir: Path,
    split: TaskSetCheck,
    protocol: dict[str, Any],
    used: dict[str, Any],
    adapters: dict[str, Path | None],
    panels: Panels,
) -> Jobs:
    """Step 2: spec + hash, the verified split, `jobs.json` (protocol, its hash, every job
    folder) and `P0_PROTOCOL_GATE_PASSED` with the values used; returns the job folders."""
    sha = sha256_canonical(protocol)
    write_config_summary(run_dir, spec)
    run_spec_gate(run_dir, spec)  # the summary read back: this spec, every rule holding
    record_gate(run_dir, Gate.DATA_SPLIT_VERIFIED, split.fields())
    jobs = {n: {p: str(run_dir / "jobs" / n / p) for p in panels} for n in adapters}
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
        Gate.P0_PROTOCOL_GATE_PASSED,
        {
            "sha256": sha,
            "protocol": protocol["protocol"],
            **{k: v for k, v in used.items() if k != "panels"},
            "panels": [f"{p}:{n}" for p, n in used["panels"].items()],
            "candidates": [
                f"{n}:{'base' if a is None else 'adapter'}" for n, a in adapters.items()
            ],
        },
    )
    return jobs


def _run_panels(
    spec: RunSpec,
    model_dir: Path,
    run_dir: Path,
    adapters: dict[str, Path | None],
    panels: Panels,
    jobs: Jobs,
    config: AgentConfig,
) -> dict[str, dict[str, Report]]:
    """Step 3: one inference stack for both candidates (`backends.inference`: the in-process
    server or one vLLM on the first rollout GPU(s); base by its name, an adapter loaded by path
    under its own name), its near-window and endpoint proofs, then one job per (candidate,
    panel), each scored and held to `P0_PANEL_COMPLETE`. Returns panel -> candidate -> report."""
    reports: dict[str, dict[str, Report]] = {}
    rollout_gpus = visible_gpus()[: spec.resources.rollout_gpus]
    # the sandboxes of `backends.sandbox`, one backend for every job (its images built once)
    make_sandbox = open_sandboxes(spec, [t for tasks in panels.values() for t in tasks])
    try:
        with open_inference_stack(spec, model_dir, run_dir, rollout_gpus) as live:
            _serve_panels(
                spec, run_dir, live, adapters, panels, jobs, config, make_sandbox, reports
            )
    finally:
        close_sandboxes(make_sandbox)
    return reports


def _serve_panels(
    spec: RunSpec,
    run_dir: Path,
    live: InferenceStack,
    adapters: dict[str, Path | None],
    panels: Panels,
    jobs: Jobs,
    config: AgentConfig,
    make_sandbox: SandboxFactory,
    reports: dict[str, dict[str, Report]],
) -> None:
    """Step 3 on a live stack: the near-window and endpoint proofs, then one job per
    (candidate, panel) in `make_sandbox`'s sandboxes, each scored into `reports`."""
    assert spec.eval is not None
    attempts, concurrency = spec.eval.attempts, spec.resources.concurrency
    live.near_window_probe()  # records P0_NEAR_WINDOW_PROBE_PASSED, or fails
    endpoint_gate(spec, run_dir, live.gateway_url)  # P0_ENDPOINT_GATE_PASSED, or _FAILED
    for name, adapter in adapters.items():
        model = live.base_model
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
                    attempts=attempts,
                    concurrency=concurrency,
                    warm=spec.resources.warm_sandboxes,
                    traces_dir=live.traces_dir,
                    verifier_timeout_s=spec.agent.verifier_timeout_s,
                    make_sandbox=make_sandbox,
                )
            )
            expected = len(tasks) * attempts
            reports.setdefault(panel, {})[name] = panel_complete(
                run_dir, name, panel, job, expected
            )


def _print_scores(name: str, reports: dict[str, dict[str, Report]]) -> None:
    """A single-candidate evaluation's result: per panel, solved / attempts, Pass@1 and the
    hack audit's flagged share."""
    for panel, by_candidate in reports.items():
        (score,) = by_candidate[name].panels
        audit = by_candidate[name].hack_audit
        flagged = (
            "no audit"
            if audit is None or audit.flagged_share is None
            else f"{audit.flagged_share:.3f} ({audit.flagged}/{audit.episodes} episodes)"
        )
        print(
            f"== {name} on {panel}: solved {score.solved}/{score.n_attempts}, infrastructure "
            f"errors {score.infra_errors}, pass@1 {score.benchmark.pass_at_1}, hack audit "
            f"flagged share {flagged}",
            flush=True,
        )


def _compare_panels(
    spec: RunSpec,
    run_dir: Path,
    panels: Panels,
    jobs: Jobs,
    reports: dict[str, dict[str, Report]],
) -> None:
    """Step 4: per panel, `comparison-<panel>.json`, `report-<panel>.html` and the printed
    comparison, each with the candidates' hack-audit flagged shares (a share past
    `agent.max_hack_flagged_ratio` marked); `P0_COMPARISON_PASSED` with every panel's wins /
    ties / losses, p, delta and flagged shares, failed (after the files are written) by every
    candidate past that limit."""
    assert spec.eval is not None
    summary = {}
    problems: list[Violation] = []
    a, b = spec.eval.candidate_names
    for panel in panels:
        comparison = compare_jobs(
            read_job(Path(jobs[a][panel]), panel=panel),
            read_job(Path(jobs[b][panel]), panel=panel),
            names=(a, b),
        )
        comparison, hacks = check_hack_audit(spec, panel, comparison)
        problems += hacks
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
            "hack_flagged_share": {
                run.name: run.hack_audit.flagged_share if run.hack_audit else None
                for run in comparison.runs
            },
        }
    gate(
        run_dir,
        Gate.P0_COMPARISON_PASSED,
        problems,
        {"panels": list(panels), "a": a, "b": b, "summary": json.dumps(summary, sort_keys=True)},
    )


def _adapter_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def _task_digest(task: HarborTask) -> str:
    return f"{task.name}:{task_checksum(task.path)}"
