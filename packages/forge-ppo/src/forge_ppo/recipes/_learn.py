"""`forge-ppo learn`: PPO from a warm start on a task set, measured before and after.

The default is the demo policy on the demo train split (`formal-learn-local`); `--config
formal-learn-smollm2-local --tasks easy` is the real small model's run (SmolLM2 from its format
policy on the bundled easy tier).

1. the warm start as a strict warm start of the local trainer: the demo policy (cached `forge-ppo
   sft`) or the format policy (`_format_policy`, cached), built when missing;
2. before: `attempts` episodes per train task at temperature 1 through the whole chain (server +
   gateway + sandboxes + verifier);
3. PPO updates, each on fresh episodes of every train task (`ppo.rollouts_per_task` each),
   until the stopping rule: `max_updates` done, the wall-time budget of the updates spent
   (counted from the first update: a warm start built on first use is not in it), or the last two
   updates' training episodes all solved;
4. after: the same measurement as before, with the final adapter;
5. learn.json (pass@1 with Wilson 95% intervals, per-task win/tie/loss, exact McNemar p on the
   (task, attempt) pairs, how the episodes ended before and after and per update, success,
   critic EV, policy entropy and the served-vs-trained log-prob gap per update), learn.md
   (table), learn.png.
The claim is what was measured: the report states the numbers, whatever they are.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from forge_eval import mcnemar_exact_p, wilson_interval
from forge_gates import (
    RunProvenance,
    RunSpec,
    atomic_write_json,
    atomic_write_text,
    recorded_run,
)
from forge_ppo.local._build import build_local_trainer
from forge_ppo.recipes._demo_policy import SFT_THREADS, torch_threads
from forge_ppo.recipes._warm_starts import resolve_warm_start
from forge_ppo.recipes.train._rollouts import episode_outcomes
from forge_rollout import (
    POLICY_NAME,
    LocalStack,
    agent_config_from_spec,
    resolve_model,
    resolve_tasks,
    rows_from_job,
    run_rollouts,
)
from forge_sandbox import reward_of

SCHEMA = "forge-ppo/learn@1"
DEMO_TRAIN = "demo:train"
EV = "critic/observability/ev"


def _episodes(spec: RunSpec, live: LocalStack, tasks, job: Path, attempts: int):
    return asyncio.run(
        run_rollouts(
            tasks, job, endpoint=live.gateway_url, model=POLICY_NAME,
            config=agent_config_from_spec(spec, "train"), attempts=attempts,
            concurrency=spec.resources.concurrency, traces_dir=live.traces_dir,
            verifier_timeout_s=spec.agent.verifier_timeout_s,
        )
    )  # fmt: skip


def outcomes(rewards: dict[str, float | None]) -> dict[str, list[int]]:
    """Per task, 1/0 per attempt in attempt order ('task#k' keys; an error counts as 0)."""
    per_task: dict[str, dict[int, int]] = {}
    for key, reward in rewards.items():
        task, _, k = key.partition("#")
        per_task.setdefault(task, {})[int(k or 0)] = int(reward == 1.0)
    return {t: [v[k] for k in sorted(v)] for t, v in sorted(per_task.items())}


def episode_endings(job: Path) -> dict[str, int]:
    """How a job's episodes ended: counts of '<agent exit status>/<solved|unsolved>' over its
    trials (`result.json`); an episode without an exit status (an infrastructure error) is
    'error/<...>'. E.g. 'Submitted/unsolved' is a submit the verifier failed."""
    counts: Counter[str] = Counter()
    for path in sorted(job.glob("*/result.json")):
        trial = json.loads(path.read_text())
        meta = (trial.get("agent_result") or {}).get("metadata") or {}
        reward = reward_of((trial.get("verifier_result") or {}).get("rewards"))
        solved = reward is not None and reward >= 1
        counts[f"{meta.get('exit_status') or 'error'}/{'solved' if solved else 'unsolved'}"] += 1
    return dict(sorted(counts.items()))


def pass_at_1(per_task: dict[str, list[int]]) -> dict[str, Any]:
    """Pass@1 over every attempt with its Wilson 95% interval."""
    n = sum(len(v) for v in per_task.values())
    x = sum(sum(v) for v in per_task.values())
    low, high = wilson_interval(x, n)
    return {"successes": x, "attempts": n, "pass_at_1": x / n, "wilson_low": low,
            "wilson_high": high}  # fmt: skip


def paired(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, Any]:
    """Per-task win/tie/loss on the success rate; exact McNemar on (task, attempt) pairs."""
    wins = ties = losses = b = c = 0
    for task in sorted(before):
        ra, rb = sum(before[task]) / len(before[task]), sum(after[task]) / len(after[task])
        wins, ties, losses = wins + (rb > ra), ties + (rb == ra), losses + (rb < ra)
        for x, y in zip(before[task], after[task], strict=True):
            b, c = b + (x == 1 and y == 0), c + (x == 0 and y == 1)
    return {"task_wins": wins, "task_ties": ties, "task_losses": losses,
            "pairs_before_only": b, "pairs_after_only": c,
            "mcnemar_exact_p": mcnemar_exact_p(b, c)}  # fmt: skip


def run_learn(
    spec: RunSpec,
    *,
    out: Path,
    cache_dir: Path,
    attempts: int,
    max_updates: int,
    budget_s: float,
    tasks: str = DEMO_TRAIN,
    threads: int = SFT_THREADS,
) -> dict[str, Any]:
    """Run the learn experiment on `tasks` into `out` (replaced); returns the report. On one
    torch thread by default, like the demo policy's build (`SFT_THREADS`: the tiny model's ops
    are too small to share); a real model (SmolLM2) wants every core (`threads`). `out` gets
    its `provenance.json` (forge-gates `recorded_run`), completed at the end or on a failure."""
    assert spec.ppo is not None, "learn needs a training spec with [ppo]"
    try:
        import matplotlib  # noqa: F401  (learn.png; checked before any episode runs)
    except ImportError as error:
        raise RuntimeError(
            "forge-ppo learn: expected matplotlib for learn.png; found it missing; fix: "
            "uv pip install 'forge-ppo[curves]'"
        ) from error
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with torch_threads(threads), recorded_run(out, "learn", spec) as provenance:
        return _run_learn(spec, out, cache_dir, attempts, max_updates, budget_s, tasks, provenance)


def _run_learn(
    spec: RunSpec,
    out: Path,
    cache_dir: Path,
    attempts: int,
    max_updates: int,
    budget_s: float,
    tasks_ref: str,
    provenance: RunProvenance,
) -> dict[str, Any]:
    started = time.perf_counter()
    # 1. the warm start (demo or format policy, built when missing) of the local trainer
    model_dir = resolve_model(spec, cache_dir)
    spec = resolve_warm_start(spec, model_dir, cache_dir, tasks_ref)
    tasks = resolve_tasks(tasks_ref)
    trainer = build_local_trainer(spec, model_dir, out)
    updates: list[dict[str, Any]] = []
    with LocalStack(spec, model_dir, out) as live:
        adapter = out / "served-adapter"
        trainer.export_adapter(adapter)
        live.push_adapter(adapter, 0)
        # 2. before
        before = outcomes(_episodes(spec, live, tasks, out / "before", attempts).rewards)
        endings = {"before": episode_endings(out / "before")}
        # 3. PPO updates until the stopping rule
        stop = "max_updates"
        updating = time.perf_counter()  # the budget covers the updates only
        for step in range(1, max_updates + 1):
            job = out / "episodes" / f"step_{step:04d}"
            assert spec.ppo is not None  # (spec was rebound above: mypy's narrowing is gone)
            summary = _episodes(spec, live, tasks, job, spec.ppo.rollouts_per_task)
            rows, _ = rows_from_job(job, mask_truncated=spec.ppo.mask_truncated)
            result = trainer.update(rows, step, episodes=episode_outcomes([job]))
            provenance.largest_micro_batch({
                b: result.metrics.get(f"perf/peak_padded_tokens/{b}")
                for b in trainer.budgets.model_dump()
            })  # fmt: skip
            trainer.export_adapter(adapter)
            live.push_adapter(adapter, step)
            solved = sum(1 for r in summary.rewards.values() if r == 1.0)
            updates.append({
                "step": step, "success": solved / len(summary.rewards),
                "episodes": len(summary.rewards), "endings": episode_endings(job),
                "ev": result.metrics.get(EV),
                "advantage_std": result.metrics.get("critic/observability/advantages_std"),
                "approx_kl": result.metrics.get("actor/ppo_kl"),
                "clipfrac": result.metrics.get("actor/pg_clipfrac"),
                "entropy": result.metrics.get("actor/entropy"),
                "rollout_log_prob_diff_max": result.metrics.get(
                    "actor/rollout_log_prob_diff_max"
                ),
                "seconds": time.perf_counter() - started,
            })  # fmt: skip
            print(f"LEARN_UPDATE {updates[-1]}", flush=True)
            if len(updates) >= 2 and all(u["success"] == 1.0 for u in updates[-2:]):
                stop = "converged"
                break
            if time.perf_counter() - updating > budget_s:
                stop = "budget"
                break
        # 4. after
        after = outcomes(_episodes(spec, live, tasks, out / "after", attempts).rewards)
        endings["after"] = episode_endings(out / "after")
    trainer.close()
    # 5. the report
    report = {
        "schema": SCHEMA, "model": str(model_dir), "tasks": tasks_ref,
        "warm_start": spec.checkpoint.warm_start, "attempts_per_task": attempts,
        "stopping_rule": {"max_updates": max_updates, "budget_s": budget_s, "stopped_by": stop},
        "before": pass_at_1(before) | {"per_task": before},
        "after": pass_at_1(after) | {"per_task": after},
        "paired": paired(before, after), "endings": endings, "updates": updates,
        "wall_s": time.perf_counter() - started,
    }  # fmt: skip
    before_rate, after_rate = pass_at_1(before), pass_at_1(after)
    report["intervals_apart"] = after_rate["wilson_low"] > before_rate["wilson_high"]
    atomic_write_json(out / "learn.json", report)
    atomic_write_text(out / "learn.md", table(report))
    plot(report, out / "learn.png")
    print(table(report), flush=True)
    return report


def table(report: dict[str, Any]) -> str:
    """The before/after table and the paired line (Markdown)."""
    lines = ["| policy | successes / attempts | pass@1 | Wilson 95% |", "|---|---|---|---|"]
    for name in ("before", "after"):
        r = report[name]
        lines.append(f"| {name} | {r['successes']} / {r['attempts']} | {r['pass_at_1']:.3f} | "
                     f"[{r['wilson_low']:.3f}, {r['wilson_high']:.3f}] |")  # fmt: skip
    endings = report.get("endings") or {}
    if endings:
        lines += ["", "| episode ended | before | after |", "|---|---|---|"]
        for kind in sorted(set(endings.get("before", {})) | set(endings.get("after", {}))):
            counts = [endings.get(name, {}).get(kind, 0) for name in ("before", "after")]
            lines.append(f"| {kind} | {counts[0]} | {counts[1]} |")
    p = report["paired"]
    stop = report["stopping_rule"]["stopped_by"]
    lines += [
        "",
        f"paired: tasks won/tied/lost {p['task_wins']}/{p['task_ties']}/{p['task_losses']}; "
        f"attempt pairs before-only {p['pairs_before_only']}, after-only "
        f"{p['pairs_after_only']}, exact McNemar p = {p['mcnemar_exact_p']:.4g}; intervals "
        f"apart: {report['intervals_apart']}; updates {len(report['updates'])} ({stop}); "
        f"wall {report['wall_s']:.0f} s",
        "",
    ]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Training success, critic EV and policy entropy per update; before/after pass@1 with
    Wilson bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    steps = [u["step"] for u in report["updates"]]
    left.plot(steps, [u["success"] for u in report["updates"]], "o-", label="train success")
    evs = [(u["step"], u["ev"]) for u in report["updates"] if u["ev"] is not None]
    left.plot([s for s, _ in evs], [e for _, e in evs], "s--", label="critic EV")
    ents = [(u["step"], u["entropy"]) for u in report["updates"] if u.get("entropy") is not None]
    left.plot([s for s, _ in ents], [e for _, e in ents], "^:", label="policy entropy (nats/token)")
    unsolved = [
        (u["step"], u["endings"].get("Submitted/unsolved", 0) / max(u["episodes"], 1))
        for u in report["updates"]
        if u.get("endings") is not None
    ]
    left.plot([s for s, _ in unsolved], [f for _, f in unsolved], "x-.", label="submitted unsolved")
    left.set_xlabel("PPO update")
    left.legend()
    for i, name in enumerate(("before", "after")):
        r = report[name]
        right.errorbar([i], [r["pass_at_1"]], yerr=[[r["pass_at_1"] - r["wilson_low"]],
                       [r["wilson_high"] - r["pass_at_1"]]], fmt="o", capsize=6)  # fmt: skip
    right.set_xticks([0, 1], ["before", "after"])
    right.set_ylim(0, 1)
    right.set_ylabel("pass@1 (T=1), Wilson 95%")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
