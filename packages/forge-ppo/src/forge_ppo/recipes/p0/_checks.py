"""P0's checks before and after the rollouts: the candidates (`P0_CANDIDATES_PASSED`), the
panels and the protocol values actually used (checked against production by the caller), the
endpoint the episodes will use (`P0_ENDPOINT_GATE_PASSED`: the gateway answers from the rollout
host, healthy, with the protocol's window and reserve), a panel's completeness
(`P0_PANEL_COMPLETE`: every attempt ran, not all infrastructure errors, its commands audited
into `hack-audit.json`) and the hack audit's hold on a comparison (`agent.max_hack_flagged_ratio`:
a candidate past it is marked, and `P0_COMPARISON_PASSED` fails)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_data import ensure_task_set, verify_task_set
from forge_eval import Comparison, Job, Report, read_job, score_job
from forge_gates import Check, Gate, RunSpec, Violation, atomic_write_text, gate, read_ledger
from forge_rollout import (
    AgentConfig,
    NetworkConnectionError,
    audit_job,
    check_endpoint,
    resolve_split,
    resolve_tasks,
)
from forge_sandbox import HarborTask


def resolve_candidates(
    spec: RunSpec, checkpoints: dict[str, Path], only: str | None = None
) -> dict[str, Path | None]:
    """Candidate name -> its `lora_adapter/` folder (None for the `base = true` candidate);
    gate `P0_CANDIDATES_PASSED` lists every candidate without a usable checkpoint. `only`: a
    single-candidate evaluation of that candidate (the base model or one checkpoint)."""
    assert spec.eval is not None
    check = Check(Gate.P0_CANDIDATES_PASSED)
    check.require(
        only is None or only in spec.eval.candidate_names,
        rule="candidate.only",
        expected=f"--only one of the candidates {list(spec.eval.candidate_names)}",
        found=repr(only),
        fix="name a candidate of the spec (or add it to [eval] candidates)",
    )
    adapters: dict[str, Path | None] = {}
    for candidate in spec.eval.candidates:
        if only is not None and candidate.name != only:
            continue
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
    names = list(spec.eval.candidate_names) if only is None else [only]
    unknown = sorted(set(checkpoints) - set(names))
    check.require(
        not unknown,
        rule="candidate.unknown",
        expected=f"--checkpoint names among the candidates evaluated {names}",
        found=f"{unknown}",
        fix="name each --checkpoint after a candidate of the spec",
    )
    gate(None, check.gate, check.violations, {"candidates": names})
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
                    problems += verify_task_set(ensure_task_set(ref)).violations
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


def endpoint_gate(
    spec: RunSpec,
    run_dir: Path,
    endpoint: str,
    probe: Callable[[str], dict[str, Any]] = check_endpoint,
) -> dict[str, Any]:
    """P0_ENDPOINT_GATE_PASSED: `GET <endpoint>/health` from this (the rollout) host answers,
    the gateway is healthy (`status` ok: its upstream answered 200 and its traces are
    writable) and guards the protocol's window and reserve; else P0_ENDPOINT_GATE_FAILED with
    what was expected and found, before any task runs. Returns the health answer."""
    check = Check(Gate.P0_ENDPOINT_GATE_PASSED)
    fix = "start the gateway and its inference server on this host (see the stack's log)"
    health: dict[str, Any] = {}
    try:
        health = probe(endpoint)
    except (NetworkConnectionError, OSError, ValueError) as error:
        check.add(
            Violation(
                rule="p0.endpoint.answers",
                expected=f"GET {endpoint}/health answered from the rollout host",
                found=f"{type(error).__name__}: {error}"[:300],
                fix=fix,
            )
        )
    gateway: dict[str, Any] = health.get("gateway") or {}
    upstream: dict[str, Any] = health.get("upstream") or {}
    if health:
        check.require(
            health.get("status") == "ok",
            rule="p0.endpoint.healthy",
            expected="status 'ok' (the upstream answered 200, the traces are writable)",
            found=f"status {health.get('status')!r}, upstream {upstream.get('status')!r} "
            f"{upstream.get('error') or ''}".strip(),
            fix=fix,
        )
        for key, want in (("window", spec.context.window), ("reserve", spec.context.reserve)):
            check.require(
                gateway.get(key) == want,
                rule=f"p0.endpoint.{key}",
                expected=f"the gateway's {key} = context.{key} ({want})",
                found=f"{gateway.get(key)!r}",
                fix=f"start the gateway with the spec's context.{key}",
            )
    fields = {
        "endpoint": endpoint,
        "status": health.get("status"),
        "upstream_status": upstream.get("status"),
        "window": gateway.get("window"),
        "reserve": gateway.get("reserve"),
    }
    gate(run_dir, check.gate, check.violations, fields)
    return health


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
    """Audit the commands of one (candidate, panel) job into `hack-audit.json`, score it into
    `report.json` (the audit included) and pass `P0_PANEL_COMPLETE` only when all `expected`
    attempts exist and not every one is an infrastructure error."""
    audit_job(job_dir)  # run_rollouts leaves the audit to its caller (`forge-rollout run` too)
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
    fields: dict[str, Any] = {
        "candidate": name,
        "panel": panel,
        "attempts": score.n_attempts,
        "solved": score.solved,
        "infra_errors": score.infra_errors,
    }
    audit = report.hack_audit  # episodes audited, and only then flagged ones (never a 0 unseen)
    fields["hack_audit_episodes"] = audit.episodes if audit else None
    fields["hack_audit_flagged"] = audit.flagged if audit and audit.episodes else None
    fields["hack_audit_flagged_share"] = audit.flagged_share if audit else None
    gate(run_dir, check.gate, check.violations, fields)
    return report


def check_hack_audit(
    spec: RunSpec, panel: str, comparison: Comparison
) -> tuple[Comparison, list[Violation]]:
    """Hold each candidate's hack audit on `panel` to `agent.max_hack_flagged_ratio` (1.0, the
    default: reported only). A candidate flagged past it, or not audited at all, is marked in
    the comparison (a panel warning: the printed table, `comparison-<panel>.json` and the page
    show it) and named in a violation for `P0_COMPARISON_PASSED`."""
    limit = spec.agent.max_hack_flagged_ratio
    marks: list[str] = []
    violations: list[Violation] = []
    for run in comparison.runs:
        audit, where = run.hack_audit, f"{run.job}/hack-audit.json"
        if limit >= 1.0:  # reported only: the shares are in the tables, nothing to hold
            break
        if audit is None or audit.flagged_share is None:
            found = f"no episode audited in {where} (no agent/trajectory.json)"
            mark = f"hack audit: {run.name} has no audited episode; the limit cannot be held"
        elif audit.flagged_share > limit:
            found = (
                f"{audit.flagged} of {audit.episodes} ({audit.flagged_share:.3f}), e.g. "
                f"{', '.join(audit.flagged_trials[:3])}"
            )
            mark = (
                f"hack audit: {run.name} flagged {audit.flagged_share:.3f} of its episodes, over "
                f"agent.max_hack_flagged_ratio {limit}: its solved tasks may come from the "
                "verifier, not from fixes"
            )
        else:
            continue
        marks.append(mark)
        violations.append(
            Violation(
                rule=f"p0.hack_audit.{panel}.{run.name}",
                expected=f"<= {limit} of {run.name}'s episodes on panel {panel!r} flagged by "
                "the hack audit (agent.max_hack_flagged_ratio)",
                found=found,
                fix=f"read {where} and the flagged trials' commands: the candidate reaches for "
                "the verifier's folders, the tests or git history, so its score is no fix rate",
            )
        )
    panels = [p.model_copy(update={"warnings": [*p.warnings, *marks]}) for p in comparison.panels]
    return comparison.model_copy(update={"panels": panels}), violations


# a single-candidate evaluation's ledger: P0's contract up to the panels (no comparison)
SINGLE_CANDIDATE_GATES = (
    Gate.RUN_SPEC_GATE_PASSED,
    Gate.DATA_SPLIT_VERIFIED,
    Gate.P0_PROTOCOL_GATE_PASSED,
    Gate.P0_NEAR_WINDOW_PROBE_PASSED,
    Gate.P0_ENDPOINT_GATE_PASSED,
)


def single_candidate_ledger(run_dir: Path, n_panels: int) -> list[Violation]:
    """A single-candidate evaluation judged from its ledger (`forge-gates verify --phase p0`
    wants the comparison of two): no failed gate, each of P0's gates before the panels exactly
    once and in order, and one `P0_PANEL_COMPLETE` per panel after them."""
    records = read_ledger(run_dir)
    gates = [str(r.gate) for r in records]
    out = [
        Violation(
            rule=f"gate.failed.{r.gate}",
            expected="no failed gate in a complete evaluation",
            found=f"{r.gate} {r.fields}"[:300],
            fix="fix the cause shown in the run's log and rerun into a new folder",
        )
        for r in records
        if r.failed
    ]
    wanted = [*map(str, SINGLE_CANDIDATE_GATES), *[str(Gate.P0_PANEL_COMPLETE)] * n_panels]
    found = [g for g in gates if g in wanted]
    if found != wanted:
        out.append(
            Violation(
                rule="p0.single_candidate.ledger",
                expected=f"the gates {wanted} in this order in {run_dir}/gates.jsonl",
                found=f"{found}",
                fix="rerun the evaluation into a new run folder",
            )
        )
    return out
