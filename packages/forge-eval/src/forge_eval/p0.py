"""The P0 comparison: two checkpoints, same protocol, separate panels, paired statistics.

Optional (`pip install forge-eval[p0]` pulls forge-rollout); nothing else in forge-eval imports
this module. Steps, each recorded in `<run_dir>/gates.jsonl`:

1. before any run folder: the machine (`P0_PREFLIGHT_PASSED`: the backends P0 drives, disk,
   GPUs, memory, bwrap), the candidates (`P0_CANDIDATES_PASSED`: a `base = true` candidate is
   the model itself, every other one needs `--checkpoint NAME=...`), the frozen split
   (`DATA_SPLIT_VERIFIED`), the panels (a split of a frozen split, or a task folder, of the
   size the spec names) and the protocol actually used, checked against every production value
   when the spec claims `eval.protocol = "production"`;
2. the run folder: spec, protocol (everything that changes outcomes, hashed) in `jobs.json`
   before any task runs (`P0_PROTOCOL_GATE_PASSED` with the values used);
3. the inference stack of `backends.inference` (the in-process server, or one vLLM) + gateway;
   a near-window request (window - 1,024 tokens at production windows) proves the server serves
   the configured window (`P0_NEAR_WINDOW_PROBE_PASSED`), the gateway answers
   (`P0_ENDPOINT_GATE_PASSED`);
   per candidate and panel, one Harbor job with the same agent settings and seed, scored per
   panel into `report.json` (never a mixed score); `P0_PANEL_COMPLETE` only when every attempt
   ran and not all of them are infrastructure errors;
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
from forge_eval._reader import Job, read_job
from forge_eval._score import Report, score_job
from forge_eval._tables import render_comparison
from forge_gates import (
    Check,
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
    sha256_canonical,
    spec_sha256,
    verify_run,
    visible_gpus,
    write_config_summary,
)
from forge_rollout import (
    MINI_SWE_AGENT_VERSION,
    AgentConfig,
    agent_config_from_spec,
    check_endpoint,
    open_inference_stack,
    resolve_model,
    resolve_split,
    resolve_tasks,
    run_rollouts,
)
from forge_sandbox import HarborTask, task_checksum

JOBS_SCHEMA = "forge-eval/p0-jobs@1"
# the engines this runner drives, per concern (DESIGN §2); preflight refuses any other
BACKENDS: dict[str, tuple[str, ...]] = {"inference": ("local", "vllm"), "sandbox": ("local",)}


def _adapter_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def _task_digest(task: HarborTask) -> str:
    return f"{task.name}:{task_checksum(task.path)}"


def resolve_candidates(spec: RunSpec, checkpoints: dict[str, Path]) -> dict[str, Path | None]:
    """Candidate name -> its `lora_adapter/` folder (None for the `base = true` candidate);
    gate `P0_CANDIDATES_PASSED` lists every candidate without a usable checkpoint."""
    assert spec.eval is not None
    check = Check(Gate.P0_CANDIDATES_PASSED)
    adapters: dict[str, Path | None] = {}
    for candidate in spec.eval.candidates:
        name, folder = candidate.name, checkpoints.get(candidate.name)
        if candidate.base:
            check.require(
                folder is None,
                rule=f"candidate.{name}",
                expected=f"no checkpoint for the base candidate {name!r} (base = true)",
                found=str(folder),
                fix=f"drop --checkpoint {name}=..., or set base = false for it in the spec",
            )
            adapters[name] = None
            continue
        adapter = folder / "lora_adapter" if folder else None
        check.require(
            adapter is not None and (adapter / "adapter_config.json").is_file(),
            rule=f"candidate.{name}",
            expected=f"a checkpoint with lora_adapter/ for {name!r}",
            found=str(folder),
            fix=f"pass --checkpoint {name}=RUN/checkpoints/global_step_N (or mark the base "
            "model's candidate with base = true)",
        )
        adapters[name] = adapter
    unknown = sorted(set(checkpoints) - set(spec.eval.candidate_names))
    check.require(
        not unknown,
        rule="candidate.unknown",
        expected=f"--checkpoint names among the candidates {list(spec.eval.candidate_names)}",
        found=f"{unknown}",
        fix="name each --checkpoint after a candidate of the spec",
    )
    gate(None, check.gate, check.violations, {"candidates": list(spec.eval.candidate_names)})
    return adapters


def resolve_panels(spec: RunSpec) -> tuple[dict[str, list[HarborTask]], list[Violation]]:
    """Panel name -> its tasks: `split` of the frozen split `tasks` (default: data.tasks), or
    every task of the task folder `tasks`; a panel of another frozen split is verified too.
    Returns every problem (unresolvable panel, tampered split, wrong size) as a violation."""
    assert spec.eval is not None
    panels: dict[str, list[HarborTask]] = {}
    problems: list[Violation] = []
    for panel in spec.eval.panels:
        ref = panel.tasks or spec.data.tasks
        try:
            if panel.split is None:
                tasks = resolve_tasks(ref)
            else:
                if ref != spec.data.tasks:  # data.tasks is verified once, by the caller
                    problems += verify_task_set(ref).violations
                tasks = resolve_split(ref, panel.split)
        except (OSError, ValueError, KeyError) as error:
            where = f"split {panel.split!r} of {ref}" if panel.split else f"task folder {ref}"
            problems.append(
                Violation(
                    rule=f"p0.panel.{panel.name}",
                    expected=f"panel {panel.name!r} to resolve to the {where}",
                    found=f"{type(error).__name__}: {error}"[:400],
                    fix="point the panel's tasks/split at a frozen split (train, validation, "
                    "test) or a folder of Harbor task folders",
                )
            )
            continue
        panels[panel.name] = tasks
        if panel.size is not None and len(tasks) != panel.size:
            problems.append(
                Violation(
                    rule=f"p0.panel.{panel.name}.size",
                    expected=f"{panel.size} tasks in panel {panel.name!r} (size = {panel.size})",
                    found=f"{len(tasks)} tasks in {ref}" + (f":{panel.split}" * bool(panel.split)),
                    fix="use the task set the spec names, or correct the panel's size",
                )
            )
    return panels, problems


def protocol_values(
    spec: RunSpec, config: AgentConfig, panels: dict[str, list[HarborTask]]
) -> dict[str, Any]:
    """The protocol values this run uses (what the agent, server and runner get), keyed as
    `forge_gates.P0_PRODUCTION`; panels as name -> resolved task count."""
    assert spec.eval is not None
    return {
        "window": spec.context.window,
        "step_limit": config.step_limit,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_tokens": config.max_tokens,
        "seed": config.seed,
        "attempts": spec.eval.attempts,
        "retries": spec.eval.retries,
        "panels": {name: len(tasks) for name, tasks in panels.items()},
        "concurrency": spec.resources.concurrency,
        "near_window_probe": spec.eval.near_window_probe,
    }


def _first_infra_error(job: Job) -> str:
    messages = {
        t.trial_name: (t.exception_info.exception_message or "") if t.exception_info else ""
        for t in job.trials
    }
    for attempt in sorted(job.attempts, key=lambda a: a.trial_name):
        if attempt.outcome.category == "infra":
            text = f"{attempt.exception_type}: {messages.get(attempt.trial_name, '')}"
            return f"{text.strip()} ({attempt.trial_name})"[:300]
    return "none"


def panel_complete(run_dir: Path, name: str, panel: str, job_dir: Path, expected: int) -> Report:
    """Score one (candidate, panel) job into `report.json` and pass `P0_PANEL_COMPLETE` only
    when all `expected` attempts exist and not every one is an infrastructure error."""
    job = read_job(job_dir, panel=panel)
    report = score_job(job)
    atomic_write_text(
        job_dir / "report.json", report.model_dump_json(by_alias=True, indent=2) + "\n"
    )
    (score,) = report.panels
    check = Check(Gate.P0_PANEL_COMPLETE)
    check.require(
        score.n_attempts == expected,
        rule=f"p0.panel_complete.{panel}.attempts",
        expected=f"{expected} attempts of {name} on panel {panel!r} (tasks x attempts)",
        found=f"{score.n_attempts} attempts in {job_dir}",
        fix="rerun the panel; a missing attempt is not a failure to score",
    )
    check.require(
        score.n_attempts == 0 or score.infra_errors < score.n_attempts,
        rule=f"p0.panel_complete.{panel}.infra",
        expected=f"at least one attempt of {name} on panel {panel!r} without an "
        "infrastructure error",
        found=f"all {score.n_attempts} attempts were infrastructure errors; first: "
        f"{_first_infra_error(job)}",
        fix="fix the infrastructure (server, gateway, sandbox) and rerun: a panel of only "
        "infrastructure errors measures nothing",
    )
    fields = {
        "candidate": name,
        "panel": panel,
        "attempts": score.n_attempts,
        "solved": score.solved,
        "infra_errors": score.infra_errors,
    }
    gate(run_dir, check.gate, check.violations, fields)
    return report


def run_p0(
    spec: RunSpec,
    checkpoints: dict[str, Path],
    *,
    run_dir: Path | None = None,
    runs_root: Path = Path("runs"),
    cache_dir: Path = Path(".cache/forge"),
) -> Path:
    """Run the P0 protocol of `spec` for its two candidates; returns the verified run folder.

    `checkpoints` maps candidate names to `global_step_N` folders; a `base = true` candidate
    needs none.
    """
    ev = spec.eval
    assert ev is not None, "a p0 spec has an [eval] section (rule p0.eval_section)"
    # 1. machine, candidates, split, panels and the protocol, before any folder exists
    gate(
        None,
        Gate.P0_PREFLIGHT_PASSED,
        preflight(spec, runs_root, executables=["bwrap"], implemented=BACKENDS),
        {"phase": "p0"},
    )
    adapters = resolve_candidates(spec, checkpoints)
    split = verify_task_set(spec.data.tasks)  # tamper check: a changed task file stops here
    gate(None, Gate.DATA_SPLIT_VERIFIED, split.violations, split.fields())
    panels, problems = resolve_panels(spec)
    config = agent_config_from_spec(spec, "eval")
    used = protocol_values(spec, config, panels)
    if ev.protocol == "production":
        problems += check_p0_production(used)
    if problems:  # fails here, before any folder; passes below, in the ledger, with the values
        gate(None, Gate.P0_PROTOCOL_GATE_PASSED, problems)
    model_dir = resolve_model(spec, cache_dir)
    attempts, concurrency = used["attempts"], used["concurrency"]
    protocol = {
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
        "retries": ev.retries,
        "attempts": attempts,
        "concurrency": concurrency,
        "protocol": ev.protocol,
        "panels": {p: sorted(_task_digest(t) for t in tasks) for p, tasks in panels.items()},
    }
    sha = sha256_canonical(protocol)
    # 2. the run folder: spec, protocol, jobs.json
    run_dir = new_run_dir(spec, run_dir, runs_root)
    write_config_summary(run_dir, spec)
    record_gate(
        run_dir,
        Gate.RUN_SPEC_GATE_PASSED,
        {"phase": "p0", "name": spec.name, "sha256": spec_sha256(spec)},
    )
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
            "protocol": ev.protocol,
            **{k: v for k, v in used.items() if k != "panels"},
            "panels": [f"{p}:{n}" for p, n in used["panels"].items()],
            "candidates": [
                f"{n}:{'base' if a is None else 'adapter'}" for n, a in adapters.items()
            ],
        },
    )
    # 3. serving: near-window proof, endpoint proof, then every (candidate, panel) job
    reports: dict[str, dict[str, Any]] = {}
    # backends.inference: the in-process server or one vLLM (its first rollout GPU(s)), which
    # serves both candidates (base by its name, an adapter loaded by path under its own name)
    rollout_gpus = visible_gpus()[: spec.resources.rollout_gpus]
    with open_inference_stack(spec, model_dir, run_dir, rollout_gpus) as live:
        live.near_window_probe()  # records P0_NEAR_WINDOW_PROBE_PASSED, or fails
        health = check_endpoint(live.gateway_url)
        record_gate(
            run_dir,
            Gate.P0_ENDPOINT_GATE_PASSED,
            {"endpoint": live.gateway_url, "upstream_ok": bool(health)},
        )
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
                        traces_dir=live.traces_dir,
                        verifier_timeout_s=spec.agent.verifier_timeout_s,
                    )
                )
                expected = len(tasks) * attempts
                reports.setdefault(panel, {})[name] = panel_complete(
                    run_dir, name, panel, job, expected
                )
    # 4. per panel: the paired comparison and its page
    summary = {}
    a, b = ev.candidate_names
    for panel in panels:
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
        Gate.P0_COMPARISON_PASSED,
        {"panels": list(panels), "a": a, "b": b, "summary": json.dumps(summary, sort_keys=True)},
    )
    problems = verify_run(run_dir, "p0")
    if problems:
        raise GateError("P0_LEDGER", problems)
    print(f"RUN_DIR {run_dir}", flush=True)
    return run_dir
