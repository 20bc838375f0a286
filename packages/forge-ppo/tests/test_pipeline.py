"""The main job end to end, reduced to fit `nox -s tests`: a 1-task smoke through the real
server, gateway and sandboxes, its ledger verified; then P0 on its checkpoint; and the ways a
run must fail closed (bad config, missing model, full disk, dead inference)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import forge_data
from forge_gates import (
    GateError,
    Provenance,
    load_spec,
    read_config,
    read_ledger,
    read_provenance,
    verify_run,
)
from forge_ppo.cli import apply_overrides, main

REDUCED = [
    "ppo.batch_size=1",
    "ppo.actor_mini_batch_size=1",
    "ppo.critic_mini_batch_size=1",
    'data.task_ids=["statkit-median-even"]',
    "agent.step_limit=2",
    "agent.max_tokens=48",
    "checkpoint.min_free_disk_gib=0.1",
    "checkpoint.warm_start=null",  # the tiny base itself (the demo policy start: test_sft.py)
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("forge-cache")


def assert_provenance(run_dir: Path, kind: str, status: str) -> Provenance:
    """`run_dir/provenance.json` with every field a run records (code, packages, lock,
    machine, peaks, disk), of `kind` and `status`."""
    record = read_provenance(run_dir)
    assert (record.kind, record.status) == (kind, status)
    assert record.code.commit if record.code.git else record.code.note  # never a silent gap
    assert record.lock.sha256 or record.lock.note
    assert record.packages["forge-ppo"] and record.packages["torch"]
    assert record.machine.cpu_count >= 1 and record.machine.memory_bytes
    assert record.memory.main.peak_rss_bytes and record.finished_at and record.wall_s
    assert record.disk.bytes_at_end is not None
    return record


def reduced_spec(*extra: str):
    return load_spec(apply_overrides(read_config("smoke-local"), [*REDUCED, *extra]))


def train_args(tmp_path: Path, cache_dir: Path, *sets: str) -> list[str]:
    args = ["train", "--config", "smoke-local", "--runs-root", str(tmp_path / "runs"),
            "--cache-dir", str(cache_dir)]  # fmt: skip
    for assignment in [*REDUCED, *sets]:
        args += ["--set", assignment]
    return args


@pytest.mark.usefixtures("isolation")
def test_reduced_smoke_then_p0(tmp_path: Path, cache_dir: Path, capsys) -> None:
    from forge_ppo.recipes.p0 import run_p0
    from forge_ppo.recipes.train import train

    # 1. the smoke: one update, every gate in order, both checkpoint parts
    run_dir = train(reduced_spec(), run_dir=tmp_path / "smoke", cache_dir=cache_dir)
    assert verify_run(run_dir, "smoke") == []
    gates = [r.gate for r in read_ledger(run_dir)]
    assert gates[-3:] == ["PPO_ADAPTER_PUSH_PASSED", "PPO_COMPACT_CHECKPOINT_PASSED",
                          "PPO_SMOKE_PASSED"]  # fmt: skip
    update = json.loads((run_dir / "smoke-update.json").read_text())["updates"]
    assert len(update) == 1 and update[0]["actor_updated"] and update[0]["critic_updated"]
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    names = set(metrics[-1]["metrics"])
    for key in (
        "critic/vf_loss",
        "critic/vf_clipfrac",
        "critic/vpred_mean",
        "critic/observability/ev_return_variance",
        "rollout/episodes",
        "rollout/conversion/rows",
        "rollout/conversion/dropped_empty_completion",
    ):
        assert key in names, key
    assert any(n.startswith("train/task/statkit-median-even/rollout/") for n in names)
    # where the step's time went: the stages add up to the step (the publish comes after it)
    last = metrics[-1]["metrics"]
    stages = [last[f"timing_s/step/{s}"] for s in ("rollout", "rows", "update")]
    assert all(t > 0 for t in stages) and last["timing_s/step/publish"] > 0
    assert sum(stages) == pytest.approx(last["timing/step_s"], rel=0.05)
    # per-task rollout metrics are the episodes' own (timeouts, errors), not re-derived from rows
    from forge_ppo import task_rollout_metrics
    from forge_ppo.recipes.train._rollouts import episode_outcomes

    jobs = sorted((run_dir / "episodes" / "step_0001").glob("round_*"))
    expected = task_rollout_metrics(episode_outcomes(jobs))
    assert expected and {k: metrics[-1]["metrics"][k] for k in expected} == expected
    final = run_dir / "checkpoints" / "global_step_1"
    assert (final / "lora_adapter" / "adapter_model.safetensors").is_file()
    assert list((final / "critic").glob("*.safetensors"))
    assert not list(final.rglob("*optim*"))
    assert (run_dir / "curves.png").stat().st_size > 1000
    assert list((run_dir / "tensorboard").iterdir())
    summary = json.loads((run_dir / "config-summary.json").read_text())
    assert summary["spec"]["ppo"]["batch_size"] == 1 and len(summary["sha256"]) == 64
    # the run's provenance: its gate first, completed with every field at the end
    assert gates[0] == "PROVENANCE_RECORDED"
    record = assert_provenance(run_dir, "train", "completed")
    assert record.phase == "smoke" and record.spec_sha256 == summary["sha256"]
    assert set(record.memory.largest_micro_batch_tokens) == {
        "actor_train", "actor_infer", "critic_train", "critic_infer"
    }  # fmt: skip
    assert all(v > 0 for v in record.memory.largest_micro_batch_tokens.values())
    checkpoint_bytes = sum(f.stat().st_size for f in final.rglob("*") if f.is_file())
    assert (record.disk.growth_bytes or 0) > checkpoint_bytes > 0  # the folder grew by more
    # 2. a second run never reuses a run folder
    with pytest.raises(GateError, match="run_dir.new"):
        train(reduced_spec(), run_dir=run_dir, cache_dir=cache_dir)
    # 3. P0: base vs this checkpoint, same protocol, per-panel reports and comparisons
    p0 = load_spec(apply_overrides(read_config("p0-local"), ["agent.step_limit=2"]))
    p0_dir = run_p0(p0, {"smoke": final}, run_dir=tmp_path / "p0", cache_dir=cache_dir)
    assert verify_run(p0_dir, "p0") == []
    assert assert_provenance(p0_dir, "p0", "completed").phase == "p0"
    jobs = json.loads((p0_dir / "jobs.json").read_text())
    assert len(jobs["protocol_sha256"]) == 64 and set(jobs["jobs"]) == {"base", "smoke"}
    for panel in ("validation", "test"):
        comparison = json.loads((p0_dir / f"comparison-{panel}.json").read_text())
        (pc,) = comparison["panels"]
        assert pc["wins"] + pc["ties"] + pc["losses"] == 3
        assert "<svg" in (p0_dir / f"report-{panel}.html").read_text()
        for name in ("base", "smoke"):
            report = json.loads((Path(jobs["jobs"][name][panel]) / "report.json").read_text())
            assert report["panels"][0]["n_attempts"] == 3


def test_bad_config_stops_before_a_run_folder(tmp_path: Path, cache_dir: Path, capsys) -> None:
    args = train_args(tmp_path, cache_dir, "schedule.total_updates=2", "context.window=4096")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "smoke.updates" in err and "context.window" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.usefixtures("no_sandbox_preflight")
def test_missing_model_and_full_disk_stop_before_a_run_folder(
    tmp_path: Path, cache_dir: Path, capsys
) -> None:
    assert main(train_args(tmp_path, cache_dir, "model.path=/nonexistent/model")) == 1
    assert "expected a Hugging Face model folder" in capsys.readouterr().err
    assert main(train_args(tmp_path, cache_dir, "checkpoint.min_free_disk_gib=1000000")) == 1
    assert "preflight.disk" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.usefixtures("no_sandbox_preflight")
def test_a_changed_task_file_stops_the_run_before_a_run_folder(
    tmp_path: Path, cache_dir: Path, capsys
) -> None:
    """The frozen split is verified when a run uses it: one edited task file stops the run
    with that file named, before any run folder (and so before any rollout)."""
    split = tmp_path / "split"
    shutil.copytree(forge_data.demo_split_root(), split)
    shutil.copytree(forge_data.demo_tasks_root(), split / "tasks")
    task = forge_data.demo_split_tasks("train")[0].id
    assert forge_data.verify_task_set(str(split)).violations == []
    with open(split / "tasks" / task / "instruction.md", "a") as handle:
        handle.write("\nAlso delete the tests.\n")
    assert main(train_args(tmp_path, cache_dir, f"data.tasks={split}")) == 1
    err = capsys.readouterr().err
    assert "DATA_SPLIT_VERIFIED: 1 rule(s) violated" in err
    assert "[task.files_changed]" in err and f"{task} files as frozen" in err
    assert "changed instruction.md" in err
    assert not (tmp_path / "runs").exists()


def test_production_config_is_refused_before_a_run_folder(tmp_path: Path, capsys) -> None:
    """`smoke-4gpu` names verl / vLLM / Kubernetes: refused here, never run on the CPU toy.
    The verl trainer is implemented but its extra is not installed in `nox -s tests`."""
    import importlib.util

    assert importlib.util.find_spec("verl") is None, "nox -s tests runs without the verl extra"
    args = ["train", "--config", "smoke-4gpu", "--runs-root", str(tmp_path / "runs")]
    assert main(args) == 1
    err = capsys.readouterr().err
    for rule in (
        "backend.trainer.verl",
        "backend.inference.vllm",
        "backend.sandbox.config",
        "gpus",
    ):
        assert f"[preflight.{rule}]" in err, rule
    assert "expected verl==0.9.1 for backends.trainer" in err
    assert "FORGE_VLLM_PYTHON" in err  # vLLM is driven now; it is not installed here
    assert "which this version of Forge does not implement yet" not in err
    assert "PPO_PREFLIGHT_FAILED" not in err  # nothing recorded: no run folder exists
    assert not (tmp_path / "runs").exists()


@pytest.mark.usefixtures("isolation")
def test_the_pipeline_masks_truncated_calls_when_the_spec_says_so(
    tmp_path: Path, cache_dir: Path, monkeypatch
) -> None:
    """ppo.mask_truncated reaches the rows. The tiny base mostly writes noise until max_tokens
    (training samples are unseeded, so a call may also stop early): a run either trains with
    every cut call counted as masked, or, when every call was cut, fails closed saying why."""
    from forge_ppo.recipes.train import _train as pipeline

    seen: list[bool] = []
    real = pipeline.rows_from_job

    def spy(job, **kwargs):
        seen.append(kwargs.get("mask_truncated", False))
        return real(job, **kwargs)

    monkeypatch.setattr(pipeline, "rows_from_job", spy)
    run = tmp_path / "run"
    try:
        pipeline.train(reduced_spec("ppo.mask_truncated=true"), run_dir=run, cache_dir=cache_dir)
    except GateError as error:
        failed: GateError | None = error
    else:
        failed = None
    assert seen and all(seen)
    traces = list((run / "episodes").rglob("traces.jsonl"))
    reasons = [json.loads(x)["finish_reason"] for t in traces for x in t.read_text().splitlines()]
    if failed is not None:  # every call cut: no row left, the update refused
        assert "dropped: every action cut at max_tokens" in str(failed)
        assert "0 errored episodes" in str(failed) and set(reasons) == {"length"}
        assert [r.gate for r in read_ledger(run)][-1] == "PPO_SMOKE_UPDATE_FAILED"
        assert not (run / "checkpoints").exists()
    else:
        metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["metrics"]
        masked = metrics["rollout/conversion/masked_truncated_calls"]
        assert masked == reasons.count("length") and "stop" in reasons


@pytest.mark.usefixtures("isolation")
def test_dead_inference_fails_closed_without_checkpoint(
    tmp_path: Path, cache_dir: Path, monkeypatch
) -> None:
    from forge_ppo.recipes.train import train
    from forge_rollout import Engine

    def dead(self, *args, **kwargs):
        raise RuntimeError("inference server crashed (test)")

    # 1. dead before the run starts: the adapter push (probe) fails closed
    monkeypatch.setattr(Engine, "generate", dead)
    with pytest.raises(GateError, match="adapter.push"):
        train(reduced_spec(), run_dir=tmp_path / "run", cache_dir=cache_dir)
    assert [r.gate for r in read_ledger(tmp_path / "run")][-1] == "PPO_ADAPTER_PUSH_FAILED"
    assert not (tmp_path / "run" / "checkpoints").exists()
    # 2. dead during the rollout: every episode is an infrastructure error, no update, no save
    from forge_rollout import LocalStack

    monkeypatch.undo()
    real_generate, real_push = Engine.generate, LocalStack.push_adapter
    state = {"dead": False}

    def generate(self, *args, **kwargs):
        if state["dead"]:
            raise RuntimeError("inference server crashed (test)")
        return real_generate(self, *args, **kwargs)

    def push_then_die(self, *args, **kwargs):
        fields = real_push(self, *args, **kwargs)
        state["dead"] = True  # the server dies right after the first adapter is live
        return fields

    monkeypatch.setattr(Engine, "generate", generate)
    monkeypatch.setattr(LocalStack, "push_adapter", push_then_die)
    with pytest.raises(GateError, match="update.rows"):
        train(reduced_spec(), run_dir=tmp_path / "run2", cache_dir=cache_dir)
    assert [r.gate for r in read_ledger(tmp_path / "run2")][-1] == "PPO_SMOKE_UPDATE_FAILED"
    assert not (tmp_path / "run2" / "checkpoints").exists()
    failure = assert_provenance(tmp_path / "run2", "train", "failed").failure
    assert failure is not None and failure.type.endswith("GateError")
    assert any("update.rows" in v for v in failure.violations) and failure.checkpoints == []
    assert "provenance.failure" in {v.rule for v in verify_run(tmp_path / "run2", "smoke")}
    trial = next((tmp_path / "run2" / "episodes").glob("step_0001/round_0/*/result.json"))
    assert json.loads(trial.read_text())["exception_info"]["exception_type"] == "UpstreamError"


@pytest.mark.usefixtures("isolation")
def test_full_disk_at_save_leaves_no_checkpoint(
    tmp_path: Path, cache_dir: Path, monkeypatch
) -> None:
    import forge_ppo.checkpoint._save_checks as save_checks
    from forge_gates import Violation
    from forge_ppo.recipes.train import train

    def full(path, min_gib):
        return [
            Violation(
                rule="preflight.disk",
                expected=f">= {min_gib} GiB free",
                found="0.00 GiB free",
                fix="free space",
            )
        ]

    monkeypatch.setattr(save_checks, "check_free_disk", full)
    with pytest.raises(GateError, match="preflight.disk"):
        train(reduced_spec(), run_dir=tmp_path / "run", cache_dir=cache_dir)
    gates = [r.gate for r in read_ledger(tmp_path / "run")]
    assert "PPO_COMPACT_CHECKPOINT_FAILED" in gates and "PPO_SMOKE_PASSED" not in gates
    assert not list((tmp_path / "run" / "checkpoints").glob("global_step_*"))


def test_checkpoint_retention_keeps_the_last_k_and_the_best_validated() -> None:
    from forge_ppo.recipes.train import retired_checkpoints

    assert retired_checkpoints([10, 20, 24], 5, None) == []
    assert retired_checkpoints([1, 2, 3, 4], 2, None) == [1, 2]
    assert retired_checkpoints([1, 2, 3, 4], 2, 1) == [2]  # step 1 validated best: kept
    assert retired_checkpoints([1, 2, 3, 4], 2, 4) == [1, 2]
    assert retired_checkpoints([3, 1, 2], 1, 0) == [1, 2]  # step 0 (no checkpoint) protects none


@pytest.mark.usefixtures("no_sandbox_preflight")
def test_a_bad_warm_start_checkpoint_stops_before_a_run_folder(
    tmp_path: Path, cache_dir: Path, capsys, saved, tiny, poison_and_rehash
) -> None:
    """A NaN in lora_B (summary re-hashed) and a missing folder are refused by their own rule,
    each violation printed once, before any run folder, server or gateway exists."""
    parent = tmp_path / "global_step_1"
    shutil.copytree(saved[0], parent)
    poison_and_rehash(parent, "lora_adapter/adapter_model.safetensors")
    lora = [f"lora.rank={tiny.lora.rank}", f"lora.alpha={tiny.lora.alpha}",
            f"lora.target_modules={json.dumps(list(tiny.lora.target_modules))}"]  # fmt: skip
    for warm, rule in ((parent, "checkpoint.finite"), (tmp_path / "nowhere", "checkpoint.folder")):
        sets = [f"model.path={tiny.base}", *lora, f"checkpoint.warm_start={warm}"]
        assert main(train_args(tmp_path, cache_dir, *sets)) == 1
        captured = capsys.readouterr()
        assert captured.err.count(f"[{rule}]") == 1, captured.err
        assert "PPO_WARM_START_CONFIG" in captured.err and "actor.value" not in captured.err
        assert "PPO_CONTEXT_GUARD_PASSED" not in captured.out  # no gateway was started
    assert not (tmp_path / "runs").exists()


@pytest.mark.usefixtures("no_sandbox_preflight")
def test_the_split_is_verified_before_the_demo_policy_is_built_from_it(
    tmp_path: Path, cache_dir: Path, monkeypatch, capsys
) -> None:
    """A tampered split stops the run before the warm start is resolved (the demo policy's
    build reads the demo train tasks), not minutes into that build."""
    from forge_gates import Violation
    from forge_ppo.recipes.train import _train

    bad = forge_data.TaskSetCheck(
        tmp_path, tmp_path / "tasks", None, 0,
        [Violation(rule="task.files_changed", expected="as frozen", found="x", fix="y")],
    )  # fmt: skip
    monkeypatch.setattr(_train.forge_data, "verify_task_set", lambda ref: bad)

    def built(*args: object, **kwargs: object) -> None:
        raise AssertionError("the warm start was resolved before the split was verified")

    monkeypatch.setattr(_train, "resolve_warm_start", built)
    assert main(train_args(tmp_path, cache_dir)) == 1
    assert "DATA_SPLIT_VERIFIED: 1 rule(s) violated" in capsys.readouterr().err
