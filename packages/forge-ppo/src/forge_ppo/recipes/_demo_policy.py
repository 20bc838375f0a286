"""The bundled demo policy: built once offline, cached, and the pipelines' default start.

`build_demo_policy` (what `forge-ppo sft` runs), as numbered steps:

1. record the scripted oracle policy's episodes on the TRAIN split only, through the real chain
   (`sft._oracle`), and, when `SFTSpec.premature_submits` > 0, its decoy episodes (submit without
   the fix, verified reward 0) repeated that many times; validation and test tasks are refused
   before anything runs;
2. SFT: LoRA (the run's `[lora]`) on the actor, loss on action tokens only, until the stopping
   rule (`sft._sft`);
3. measure the policy at temperature 1 on the train split through server + gateway + sandboxes
   + verifier (`attempts` episodes per task), Wilson 95% interval;
4. fit the critic to those episodes' returns;
5. write a Forge checkpoint (`save_checkpoint`, LoRA-only layout, `UpdateTracker` proof of a
   real change of both parts) and `demo-policy.json` (the SFT record and the measurement).

`resolve_demo_policy` caches it under `<cache>/demo-policy-<key>/` (under a file lock; the key
hashes everything that changes the result), like the tiny model. A cache without it first tries
the build the package ships (`_shipped_policy`: used only when its key is exactly this one and
every file verifies; `DEMO_POLICY_SHIPPED` on stdout, or on stderr why not), else builds it
here (`DEMO_POLICY_BUILT`); `FORGE_DEMO_POLICY=build` always builds. The build says on stderr
where it is (`demo-policy: [2/3] ...`, elapsed and an estimate of what is left), and the staging
folders a failed or killed build left are removed at the next one. A run spec whose
`checkpoint.warm_start` is the word `demo-policy` is resolved to that checkpoint by
`resolve_warm_start`. `python -m forge_ppo.recipes._demo_policy ship` packs a build as the
shipped artifact.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import forge_data
from forge_eval import wilson_interval
from forge_gates import (
    RunProvenance,
    RunSpec,
    atomic_write_json,
    load_spec,
    recorded_run,
    staging_dir,
    sweep_stale_staging,
)
from forge_ppo.checkpoint._save import save_checkpoint
from forge_ppo.checkpoint._summary import model_fingerprint
from forge_ppo.checkpoint._update import UpdateTracker
from forge_ppo.models._value_model import ValueModel, critic_base
from forge_ppo.policy._actor import Actor
from forge_ppo.recipes._shipped_policy import (
    BUILD_ENV,
    PROVENANCE_NAME,
    SHIPPED_DIR,
    pack_shipped,
    shipped_installer,
)
from forge_ppo.sft._oracle import (
    oracle_replies,
    premature_submit_replies,
    record_scripted_episodes,
)
from forge_ppo.sft._sft import SFTResult, SFTSpec, fit_critic, train_sft
from forge_rollout import (
    POLICY_NAME,
    AgentConfig,
    LocalStack,
    agent_config_from_spec,
    resolve_model,
    resolve_tasks,
    rows_from_job,
    run_rollouts,
)
from forge_rollout.rows import SampleRow
from forge_sandbox import HarborTask, JobSummary

DEMO_POLICY = "demo-policy"
REPORT_SCHEMA = "forge-ppo/demo-policy@1"
REPORT_NAME = f"{DEMO_POLICY}.json"  # cached_build looks for it
STEP = 1  # the checkpoint folder: checkpoint/global_step_1
SFT_THREADS = 1  # torch intra-op threads of the build (see build_demo_policy)
# typical seconds of the build's stages here (record, SFT, measure + critic fit + save; about
# 300-350 s in all, SFT ~250 s: docs/measurements.md); the estimate of what is left scales
# them by how fast the finished stages went
STAGE_SECONDS = (30.0, 250.0, 50.0)


def cache_key(spec: RunSpec, model_dir: Path, sft: SFTSpec) -> str:
    """SHA-256 over what decides the demo policy (`key_payload`)."""
    return payload_key(key_payload(spec, model_dir, sft))


def payload_key(payload: dict[str, Any]) -> str:
    """The cache key of a `key_payload`."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def key_payload(spec: RunSpec, model_dir: Path, sft: SFTSpec) -> dict[str, Any]:
    """What decides the demo policy: base model content, LoRA, agent sampling and limits,
    context, the train split's task ids, the SFT spec and the report schema."""
    return {
        "schema": REPORT_SCHEMA,
        "base_model": model_fingerprint(str(model_dir)),
        "critic_base": model_fingerprint(critic_base(spec, model_dir)),
        "critic_dtype": spec.model.critic_dtype,
        "lora": spec.lora.model_dump(mode="json"),
        "agent": agent_config_from_spec(spec, "train").model_dump(mode="json"),
        "verifier_timeout_s": spec.agent.verifier_timeout_s,
        "context": [spec.context.window, spec.context.reserve],
        "train_tasks": train_task_ids(spec),
        "sft": sft.model_dump(mode="json"),
    }


def train_task_ids(spec: RunSpec) -> list[str]:
    """The demo split's train ids; refuses another task set or a split that overlaps the
    validation / test splits (they are never trained on)."""
    if spec.data.tasks != "demo" or spec.data.train_split != "train":
        raise ValueError(
            f"demo policy: expected data.tasks = 'demo' and data.train_split = 'train'; found "
            f"{spec.data.tasks!r} / {spec.data.train_split!r}; fix: warm start from a checkpoint "
            "of your own SFT for other task sets"
        )
    train = [t.id for t in forge_data.demo_split_tasks("train")]
    held_out = {t.id for s in ("validation", "test") for t in forge_data.demo_split_tasks(s)}
    if set(train) & held_out:
        raise ValueError(
            f"demo policy: expected no train task in the validation/test splits; found "
            f"{sorted(set(train) & held_out)}; fix: the demo split is broken (re-freeze it)"
        )
    return train


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch intra-op threads of this thread set to `count` for the block, then restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _clock(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


class BuildProgress:
    """`demo-policy: [2/3] SFT ... (31 s elapsed, about 5.0 min left)` lines on stderr: the
    build is minutes of silence otherwise, and stdout carries the smoke's gate lines."""

    def __init__(self, stage_seconds: tuple[float, ...] = STAGE_SECONDS) -> None:
        self.stage_seconds, self.started = stage_seconds, time.perf_counter()

    def stage(self, index: int, text: str) -> None:
        """Stage `index` (0-based) starts now."""
        elapsed = time.perf_counter() - self.started
        typical_done = sum(self.stage_seconds[:index])
        # slower than typical scales the rest up; faster never promises less than typical (a
        # quick first stage says little about the SFT that follows)
        pace = max(1.0, elapsed / typical_done) if typical_done and elapsed else 1.0
        left = pace * sum(self.stage_seconds[index:])
        self._say(
            f"[{index + 1}/{len(self.stage_seconds)}] {text} ({_clock(elapsed)} elapsed, "
            f"about {_clock(left)} left)"
        )

    def done(self) -> None:
        self._say(f"built in {_clock(time.perf_counter() - self.started)}")

    def _say(self, line: str) -> None:
        print(f"{DEMO_POLICY}: {line}", file=sys.stderr, flush=True)


def build_demo_policy(spec: RunSpec, model_dir: Path, out: Path, sft: SFTSpec) -> dict[str, Any]:
    """Build the demo policy into `out` (see the module docstring); returns its report.

    Runs on one torch thread: the tiny model's matmuls are too small to share, and on this
    2-core machine under load 2 OpenMP threads made an SFT step > 20 s instead of ~1.9 s."""
    with torch_threads(SFT_THREADS):
        return _build(spec, model_dir, out, sft)


def _build(spec: RunSpec, model_dir: Path, out: Path, sft: SFTSpec) -> dict[str, Any]:
    started, progress = time.perf_counter(), BuildProgress()
    assert spec.lora is not None
    ids = train_task_ids(spec)
    tasks = resolve_tasks("demo:train")
    assert [t.name for t in tasks] == ids, "resolve_tasks and forge_data disagree on the split"
    config = agent_config_from_spec(spec, "train")
    # 1. the oracle's episodes through the real gateway -> rows (train split only)
    progress.stage(0, f"recording the oracle's episodes on {len(tasks)} train tasks")
    rows, conversion = record_scripted_episodes(
        spec, tasks, model_dir, out / "oracle", config, oracle_replies, reward=1.0
    )
    decoys: list[SampleRow] = []
    if sft.premature_submits:
        decoys, _ = record_scripted_episodes(
            spec, tasks, model_dir, out / "decoy", config, premature_submit_replies, reward=0.0
        )
    recorded = time.perf_counter()
    # 2. SFT of a fresh adapter; the tracker proves both parts really changed
    progress.stage(1, f"SFT of the LoRA adapter on {len(rows) + len(decoys)} episodes' rows")
    torch.manual_seed(sft.seed)
    actor = Actor.from_pretrained(model_dir, spec.lora)
    critic = ValueModel.from_pretrained(critic_base(spec, model_dir), dtype=torch.float32)
    tracker = UpdateTracker(actor.model, critic)
    pad = _pad_id(model_dir)
    result = train_sft(actor, [*rows, *decoys * sft.premature_submits], sft, pad_token_id=pad)
    # 3-5. the real T=1 success through the whole chain, the critic fitted to it, the checkpoint
    progress.stage(
        2, f"measuring {sft.attempts * len(tasks)} T=1 episodes, fitting the critic, saving"
    )
    measured = measure_fit_save(
        spec, model_dir, out, actor, critic, tracker, tasks, config, sft, result, pad
    )
    report = {
        "schema": REPORT_SCHEMA,
        "checkpoint": measured.checkpoint.name,
        "trained_on": {
            "split": "train",
            "task_ids": ids,
            "rows": len(rows),
            "premature_submit_rows": len(decoys) * sft.premature_submits,
        },
        "oracle_conversion": conversion.model_dump(),
        "sft": sft.model_dump(mode="json"),
        "sft_result": result.model_dump(mode="json"),
        "critic_fit": {"rows": len(measured.rows), "final_mse": measured.critic_loss},
        "train_success_t1": t1_success(measured.summary),
        "seconds": {
            "record": recorded - started,
            "sft": result.seconds,
            "measure": measured.seconds,
            "total": time.perf_counter() - started,
        },
    }
    atomic_write_json(out / REPORT_NAME, report)
    progress.done()
    return report


@dataclass(frozen=True)
class Measured:
    """A warm start measured, its critic fitted and saved (`measure_fit_save`)."""

    summary: JobSummary  # the measurement episodes
    rows: list[SampleRow]
    critic_loss: float
    checkpoint: Path
    seconds: float


def measure_fit_save(
    spec: RunSpec,
    model_dir: Path,
    out: Path,
    actor: Actor,
    critic: ValueModel,
    tracker: UpdateTracker,
    tasks: list[HarborTask],
    config: AgentConfig,
    sft: SFTSpec,
    result: SFTResult,
    pad: int,
) -> Measured:
    """Steps 3-5 of a warm start's build, after its SFT: `sft.attempts` T=1 episodes per task
    through server + gateway + sandboxes + verifier (`out/measure`), the critic fitted to their
    returns, and the Forge checkpoint `out/checkpoint/global_step_1` (the tracker proves both
    parts changed)."""
    measure, started = out / "measure", time.perf_counter()
    actor.save_adapter(measure / "adapter")
    with LocalStack(spec, model_dir, measure) as live:
        live.push_adapter(measure / "adapter", STEP)
        summary = asyncio.run(
            run_rollouts(
                tasks, measure / "job", endpoint=live.gateway_url, model=POLICY_NAME,
                config=config, attempts=sft.attempts, concurrency=spec.resources.concurrency,
                traces_dir=live.traces_dir, verifier_timeout_s=spec.agent.verifier_timeout_s,
            )
        )  # fmt: skip
    seconds = time.perf_counter() - started
    rows, _ = rows_from_job(measure / "job")
    budget = spec.context.critic_train_tokens
    critic_loss = fit_critic(critic, rows, sft, pad_token_id=pad, token_budget=budget)
    record = tracker.finish(
        step=STEP,
        actor_optimizer_steps=result.steps,
        critic_optimizer_steps=sft.critic_steps,
        actor_loss=result.final_loss,
        critic_loss=critic_loss,
        action_tokens=result.action_tokens,
    )
    checkpoint = save_checkpoint(
        out / "checkpoint", step=STEP, actor=actor.model, critic=critic, update=record,
        base_model=str(model_dir), lora_spec=spec.lora, checkpoint_spec=spec.checkpoint,
        critic_dtype=spec.model.critic_dtype, run_dir=out,
    )  # fmt: skip
    return Measured(summary, rows, critic_loss, checkpoint, seconds)


def t1_success(summary: JobSummary) -> dict[str, Any]:
    """A measurement's successes / attempts, Wilson 95% interval, per-task 1/0 and errors."""
    successes = sum(1 for r in summary.rewards.values() if r == 1.0)
    attempts = len(summary.rewards)
    low, high = wilson_interval(successes, attempts)
    per_task: dict[str, list[int]] = {}
    for key, reward in summary.rewards.items():
        per_task.setdefault(key.split("#")[0], []).append(int(reward == 1.0))
    return {
        "successes": successes,
        "attempts": attempts,
        "rate": successes / max(attempts, 1),
        "wilson_low": low,
        "wilson_high": high,
        "per_task": per_task,
        "errors": len(summary.errors),
    }


def _pad_id(model_dir: Path) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("pad_token_id") or 0)


def resolve_demo_policy(
    spec: RunSpec, model_dir: Path, cache_dir: Path, sft: SFTSpec | None = None
) -> Path:
    """The cached demo policy's checkpoint folder for `spec`: the shipped build when its key is
    this one and it verifies (`_shipped_policy`), else built here; once, under a lock."""
    sft = sft or SFTSpec()
    payload = key_payload(spec, model_dir, sft)
    key = payload_key(payload)
    return cached_build(
        cache_dir,
        DEMO_POLICY,
        key,
        lambda staging: build_demo_policy(spec, model_dir, staging, sft),
        success="train_success_t1",
        shipped=shipped_installer(
            key,
            payload,
            base_model=str(model_dir),
            critic_base_model=critic_base(spec, model_dir),
            lora_spec=spec.lora,
        ),
    )


def cached_build(
    cache_dir: Path,
    name: str,
    key: str,
    build: Callable[[Path], dict[str, Any]],
    success: str,
    shipped: Callable[[Path], dict[str, Any] | None] | None = None,
) -> Path:
    """`<cache_dir>/<name>-<key[:16]>/checkpoint/global_step_1`, when missing installed by
    `shipped(staging)` (None: not usable) or else built by `build(staging)` (each returns the
    report written there as `<name>.json`) under a file lock, then moved into place; prints
    `<NAME>_BUILT success=s/n seconds=... path=...` or `<NAME>_SHIPPED success=s/n key=...`.
    Either way the folder gets its `provenance.json` (a build's: recorded from its start)."""
    target = cache_dir / f"{name}-{key[:16]}"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / f"{name}.json").is_file():
            # what a failed or killed build left (`.<name>-<pid>-*`, its owner gone): under
            # the lock no other build is writing one
            sweep_stale_staging(cache_dir, f".{name}-*")
            staging = staging_dir(cache_dir, f".{name}-")
            report = shipped(staging) if shipped is not None else None
            how = ("SHIPPED", f"key={key[:16]}")
            if report is None:
                shutil.rmtree(staging)  # a refused install's partial copy never stays
                staging = staging_dir(cache_dir, f".{name}-")
                with recorded_run(staging, name):  # provenance.json, its failure included
                    report = build(staging)
                how = ("BUILT", f"seconds={report['seconds']['total']:.0f}")
            else:  # the install's own provenance (the build's: artifact.json and its
                #     ledger, copied as shipped and left as it is)
                RunProvenance.start(staging, f"{name}-shipped", ledger=False).finish()
            os.replace(staging, target)
            rate = report[success]
            print(
                f"{name.upper().replace('-', '_')}_{how[0]} "
                f"success={rate['successes']}/{rate['attempts']} {how[1]} path={target}",
                flush=True,
            )
    return target / "checkpoint" / f"global_step_{STEP}"


def ship_demo_policy(
    spec: RunSpec, model_dir: Path, cache_dir: Path, out: Path = SHIPPED_DIR
) -> Path:
    """The cached build of `spec`'s key packed as the shipped artifact at `out`
    (`_shipped_policy.pack_shipped`); an installed shipped copy is refused (not a build)."""
    payload = key_payload(spec, model_dir, SFTSpec())
    key = payload_key(payload)
    build = cache_dir / f"{DEMO_POLICY}-{key[:16]}"
    if (build / PROVENANCE_NAME).is_file():
        raise ValueError(
            f"demo policy artifact: expected a build at {build}; found the shipped artifact "
            f"installed there; fix: {BUILD_ENV}=build forge-ppo sft --cache-dir EMPTY_DIR, then "
            "ship from EMPTY_DIR"
        )
    return pack_shipped(build, out, key=key, payload=payload)


def main(argv: list[str] | None = None) -> int:
    """`python -m forge_ppo.recipes._demo_policy ship [--config C] [--cache-dir D]`: pack
    the demo policy built in D as the package's shipped artifact."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("command", choices=["ship"])
    parser.add_argument("--config", default="smoke-local", help="shipped config name or file")
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/forge"))
    args = parser.parse_args(argv)
    spec = load_spec(args.config)
    out = ship_demo_policy(spec, resolve_model(spec, args.cache_dir), args.cache_dir)
    print(f"DEMO_POLICY_ARTIFACT {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
