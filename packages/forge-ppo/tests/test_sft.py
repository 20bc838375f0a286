"""The demo policy's parts: oracle actions, SFT math, stopping rule inputs, cache resolution."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from types import SimpleNamespace

import pytest
import torch

import forge_data
from forge_gates import LoRASpec, load_spec, read_ledger, read_provenance
from forge_ppo import Actor
from forge_ppo.recipes import DEMO_POLICY, _demo_policy, resolve_warm_start
from forge_ppo.recipes._demo_policy import (
    REPORT_NAME,
    BuildProgress,
    cache_key,
    cached_build,
    resolve_demo_policy,
    train_task_ids,
)
from forge_ppo.sft import (
    OracleError,
    action_nll,
    first_turn_mask,
    first_turn_probability,
    oracle_fix,
)
from forge_ppo.sft._sft import SFTSpec, train_sft
from forge_rollout import resolve_tasks
from forge_rollout.rows import RowHeader, SampleRow


@pytest.mark.parametrize("task", resolve_tasks("demo:train"), ids=lambda t: t.name)
def test_oracle_fix_reproduces_the_oracle_file(task, tmp_path):
    """The derived sed command, run on the workspace, writes exactly what solve.sh writes."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder in (ours, theirs):
        shutil.copytree(task.path / "environment" / "workspace", folder)
    subprocess.run(["bash", "-c", oracle_fix(task)], cwd=ours, check=True)
    solve = task.path / "solution" / "solve.sh"
    subprocess.run(["bash", str(solve)], cwd=theirs, check=True,
                   env={"FORGE_WORKSPACE": str(theirs), "PATH": "/usr/bin:/bin"})  # fmt: skip
    changed = [p.relative_to(ours) for p in ours.rglob("*.py")]
    assert changed and all((ours / p).read_text() == (theirs / p).read_text() for p in changed)


def test_oracle_fix_refuses_an_oracle_that_is_not_line_for_line(tmp_path):
    from forge_sandbox import load_task

    task = resolve_tasks("demo:train")[0]
    copy = tmp_path / task.name
    shutil.copytree(task.path, copy)
    solve = copy / "solution" / "solve.sh"
    text = solve.read_text()
    cut = text.rindex("\nFORGE_EOF")
    solve.write_text(text[:cut] + "\nEXTRA = 1" + text[cut:])  # one added line: an insert
    with pytest.raises(OracleError, match="one for one"):
        oracle_fix(load_task(copy))


def test_first_turn_mask_and_probability_by_hand():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [0, 1, 1, 1, 0, 1]], dtype=torch.bool)
    first = first_turn_mask(mask)
    assert first.tolist() == [[1, 1, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0]]
    log_probs = torch.log(torch.tensor([[0.5, 0.5, 1, 1, 0.1, 1], [1, 0.9, 0.5, 0.5, 1, 0.2]]))
    log_probs = torch.where(mask, log_probs, 0.0)
    got = first_turn_probability(log_probs, mask)
    torch.testing.assert_close(got, torch.tensor([0.25, 0.225]), rtol=1e-6, atol=0)


def test_action_nll_is_the_token_mean_over_action_tokens_only():
    mask = torch.tensor([[1, 0, 1], [0, 1, 0]], dtype=torch.bool)
    log_probs = torch.tensor([[-1.0, 0.0, -2.0], [0.0, -3.0, 0.0]])
    assert float(action_nll(log_probs, mask)) == pytest.approx(2.0, rel=1e-7)
    # an observation or padding token never counts, whatever its value
    assert float(action_nll(torch.where(mask, log_probs, -99.0), mask)) == pytest.approx(2.0)


def test_demo_policy_trains_on_the_train_split_only():
    spec = load_spec("smoke-local")
    ids = train_task_ids(spec)
    held_out = {t.id for s in ("validation", "test") for t in forge_data.demo_split_tasks(s)}
    assert ids and not set(ids) & held_out
    other = spec.model_copy(update={"data": spec.data.model_copy(update={"train_split": "test"})})
    with pytest.raises(ValueError, match="train_split"):
        train_task_ids(other)


def test_shipped_local_configs_start_from_the_demo_policy_with_one_cache_entry(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    names = ("smoke-local", "soak-local", "formal-local", "formal-learn-local")
    specs = [load_spec(n) for n in names]
    assert {s.checkpoint.warm_start for s in specs} == {DEMO_POLICY}
    # one build serves them all: the key ignores phase, schedule and PPO knobs
    assert len({cache_key(s, model, SFTSpec()) for s in specs}) == 1
    assert cache_key(specs[0], model, SFTSpec(target=0.5)) != cache_key(specs[0], model, SFTSpec())


def test_resolve_warm_start_finds_the_cached_build_and_leaves_other_values(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = load_spec("smoke-local")
    key = cache_key(spec, model, SFTSpec())[:16]
    built = tmp_path / "cache" / f"{DEMO_POLICY}-{key}"
    (built / "checkpoint" / "global_step_1").mkdir(parents=True)
    (built / REPORT_NAME).write_text(json.dumps({"schema": "forge-ppo/demo-policy@1"}))
    resolved = resolve_warm_start(spec, model, tmp_path / "cache")
    assert resolved.checkpoint.warm_start == str(built / "checkpoint" / "global_step_1")
    assert resolve_demo_policy(spec, model, tmp_path / "cache") == built / "checkpoint" / (
        "global_step_1"
    )
    plain = spec.model_copy(
        update={"checkpoint": spec.checkpoint.model_copy(update={"warm_start": "/x"})}
    )
    assert resolve_warm_start(plain, model, tmp_path / "cache") is plain
    assert not list((tmp_path / "cache").glob(f".{DEMO_POLICY}-*"))  # nothing was built


def test_a_failed_builds_staging_is_swept_at_the_next_build(tmp_path):
    """A build that raised (or was killed) leaves `.demo-policy-<pid>-*`; the next build
    removes those of dead owners and keeps a live one's."""
    cache = tmp_path / "cache"
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs
    dead = [cache / f".{DEMO_POLICY}-{gone.pid}-x1", cache / f".{DEMO_POLICY}-{gone.pid}"]
    live = cache / f".{DEMO_POLICY}-{os.getpid()}-live"
    for folder in (*dead, live):
        (folder / "oracle").mkdir(parents=True)

    def fails(staging):
        (staging / "oracle").mkdir()
        raise RuntimeError("the sandbox went away")

    def builds(staging):
        (staging / "checkpoint" / "global_step_1").mkdir(parents=True)
        report = {"seconds": {"total": 1.0}, "ok": {"successes": 1, "attempts": 2}}
        (staging / REPORT_NAME).write_text(json.dumps(report))
        return report

    with pytest.raises(RuntimeError):
        cached_build(cache, DEMO_POLICY, "a" * 64, fails, success="ok")
    left = [p for p in cache.glob(f".{DEMO_POLICY}-{os.getpid()}-*") if p != live]
    assert len(left) == 1  # the failed build's staging, its owner (this test) still alive
    failed = read_provenance(left[0])  # the failure recorded where the build wrote
    assert failed.status == "failed" and failed.failure is not None
    assert failed.failure.message == "the sandbox went away"
    checkpoint = cached_build(cache, DEMO_POLICY, "a" * 64, builds, success="ok")
    assert checkpoint == cache / f"{DEMO_POLICY}-{'a' * 16}" / "checkpoint" / "global_step_1"
    built = read_provenance(checkpoint.parents[1])
    assert (built.kind, built.status, built.failure) == (DEMO_POLICY, "completed", None)
    assert read_ledger(checkpoint.parents[1])[0].gate == "PROVENANCE_RECORDED"
    assert checkpoint.is_dir() and not any(p.exists() for p in dead)
    assert live.is_dir() and left[0].is_dir()  # a live owner's staging is never taken


def test_build_progress_says_the_stage_elapsed_and_what_is_left(monkeypatch, capsys):
    clock = iter([100.0, 100.0, 120.0, 180.0])
    monkeypatch.setattr(_demo_policy, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    progress = BuildProgress((10.0, 20.0))
    progress.stage(0, "recording")
    progress.stage(1, "SFT")  # the first stage took 20 s, twice the typical 10 s: 2 x 20 s left
    progress.done()
    out, err = capsys.readouterr()
    assert out == ""  # stdout is the smoke's gate lines
    assert err.splitlines() == [
        "demo-policy: [1/2] recording (0 s elapsed, about 30 s left)",
        "demo-policy: [2/2] SFT (20 s elapsed, about 40 s left)",
        "demo-policy: built in 80 s",
    ]
    fast = iter([0.0, 2.0])  # a first stage 5x faster than typical: the SFT's typical stays
    monkeypatch.setattr(_demo_policy, "time", SimpleNamespace(perf_counter=lambda: next(fast)))
    quick = BuildProgress((10.0, 20.0))
    quick.stage(1, "SFT")
    assert (
        capsys.readouterr().err.strip() == "demo-policy: [2/2] SFT (2 s elapsed, about 20 s left)"
    )


def test_the_build_says_each_stage_on_stderr(monkeypatch, tmp_path, capsys):
    """The three stages of `build_demo_policy` (their work stubbed: minutes otherwise)."""
    stub = SimpleNamespace(
        model=None, model_dump=lambda **_: {}, seconds=1.0, steps=1, final_loss=0.0,
        action_tokens=1, estimated_success=0.0,
    )  # fmt: skip
    measured = _demo_policy.Measured(stub, [], 0.0, tmp_path / "global_step_1", 1.0)  # type: ignore[arg-type]
    for name, value in {
        "record_scripted_episodes": lambda *a, **k: ([], stub),
        "Actor": SimpleNamespace(from_pretrained=lambda *a: stub),
        "ValueModel": SimpleNamespace(from_pretrained=lambda *a, **k: stub),
        "critic_base": lambda *a: None,
        "UpdateTracker": lambda *a: stub,
        "_pad_id": lambda *a: 0,
        "train_sft": lambda *a, **k: stub,
        "measure_fit_save": lambda *a: measured,
        "t1_success": lambda *a: {},
    }.items():
        monkeypatch.setattr(_demo_policy, name, value)
    spec = load_spec("smoke-local")
    _demo_policy.build_demo_policy(spec, tmp_path, tmp_path / "out", SFTSpec())
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines] == [
        ["demo-policy:", "[1/3]"], ["demo-policy:", "[2/3]"], ["demo-policy:", "[3/3]"],
        ["demo-policy:", "built"],
    ]  # fmt: skip
    assert all("elapsed, about" in line for line in lines[:3]), lines


def _row(task: str, first: int, reward: float) -> SampleRow:
    """One call of three action tokens after a shared prompt; `first` is the decision token."""
    rewards = torch.zeros(3)
    rewards[-1] = reward
    header = RowHeader(task_id=task, episode_id=task, attempt=0, row_index=0, n_calls=1,
                       reward=reward)  # fmt: skip
    return SampleRow(
        header=header, prompt_ids=torch.tensor([5, 6, 7, 8]),
        response_ids=torch.tensor([first, 40, 41]), response_mask=torch.ones(3, dtype=torch.long),
        rollout_log_probs=torch.zeros(3), token_level_rewards=rewards,
    )  # fmt: skip


def _first_token_probs(actor: Actor, tokens: list[int]) -> list[float]:
    with torch.no_grad():
        logits = actor.model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits[0, -1]
    return logits.softmax(-1)[tokens].tolist()


def test_sft_with_a_premature_submit_row_is_a_one_to_one_choice_estimated_on_the_oracle(tiny):
    """A reward-0 decoy row with the oracle's prompt trains like any row (the first call becomes
    a 1 : 1 choice) and is left out of the success estimate."""
    lora = LoRASpec(rank=4, alpha=8, target_modules=("q_proj", "v_proj", "lm_head"))
    fix, submit = _row("fix", 30, 1.0), _row("submit", 31, 0.0)
    torch.manual_seed(0)
    actor = Actor.from_pretrained(tiny.base, lora)
    spec = SFTSpec(lr=2e-2, target=0.4, check_every=5, max_steps=300)
    result = train_sft(actor, [fix, submit], spec, pad_token_id=0)
    assert set(result.per_task_estimate) == {"fix"}
    assert result.estimated_success == pytest.approx(result.per_task_estimate["fix"])
    p_fix, p_submit = _first_token_probs(actor, [30, 31])
    assert p_fix + p_submit > 0.8 and 0.3 < p_fix < 0.7 and 0.3 < p_submit < 0.7
    # the oracle's first turn cannot pass ~1/2 beside its decoy: a higher target is never met
    torch.manual_seed(0)
    capped = Actor.from_pretrained(tiny.base, lora)
    with pytest.raises(RuntimeError, match="reach 0.7"):
        train_sft(capped, [fix, submit], spec.model_copy(update={"target": 0.7}), pad_token_id=0)


def test_sft_refuses_rows_without_a_rewarded_one(tiny):
    actor = Actor.from_pretrained(tiny.base, tiny.lora)
    with pytest.raises(ValueError, match="none rewarded"):
        train_sft(actor, [_row("submit", 31, 0.0)], SFTSpec(max_steps=1), pad_token_id=0)


def test_the_demo_policy_key_changes_with_its_premature_submits(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = load_spec("smoke-local")
    keys = {cache_key(spec, model, SFTSpec(premature_submits=k)) for k in (0, 1, 2)}
    assert len(keys) == 3


@pytest.mark.usefixtures("isolation")
def test_premature_submits_are_recorded_through_the_real_chain_with_reward_0(tmp_path):
    """Gateway, bubblewrap sandbox and verifier: each decoy episode is one call that submits,
    the verifier gives it 0, and it becomes one row whose action is exactly the submit reply;
    the same plan held to reward 1 (the oracle's bar) is refused."""
    from transformers import AutoTokenizer

    from forge_ppo.sft._oracle import (
        SUBMIT_REPLY,
        premature_submit_replies,
        record_scripted_episodes,
    )
    from forge_rollout import TinyModelSpec, agent_config_from_spec, make_tiny_model

    model = make_tiny_model(tmp_path / "tiny", TinyModelSpec(seed=0))
    spec = load_spec("smoke-local")
    tasks = resolve_tasks("demo:train")[:2]
    config = agent_config_from_spec(spec, "train")
    rows, _ = record_scripted_episodes(
        spec, tasks, model, tmp_path / "decoy", config, premature_submit_replies, reward=0.0
    )
    assert sorted(r.header.task_id for r in rows) == sorted(t.name for t in tasks)
    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    for row in rows:
        assert row.header.reward == 0.0 and row.header.n_calls == 1
        action = row.response_ids[row.response_mask.bool()].tolist()
        assert tokenizer.decode(action, skip_special_tokens=True) == SUBMIT_REPLY
    with pytest.raises(OracleError, match="reward 1.0"):
        record_scripted_episodes(
            spec, tasks, model, tmp_path / "held", config, premature_submit_replies, reward=1.0
        )


def _rows_of_lengths(lengths: list[int], seed: int) -> list[SampleRow]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for i, n in enumerate(lengths):
        rewards = torch.zeros(n)
        rewards[-1] = float(i % 2)
        header = RowHeader(task_id=f"t{i}", episode_id=f"e{i}", attempt=0, row_index=0,
                           n_calls=1, reward=float(i % 2))  # fmt: skip
        rows.append(
            SampleRow(
                header=header,
                prompt_ids=torch.randint(3, 250, (4,), generator=generator),
                response_ids=torch.randint(3, 250, (n,), generator=generator),
                response_mask=torch.ones(n, dtype=torch.long),
                rollout_log_probs=torch.zeros(n),
                token_level_rewards=rewards,
            )
        )
    return rows


def test_fit_critic_in_micro_batches_takes_the_full_batch_step(tiny):
    """Summed micro-batch gradients under a token budget give the full batch's loss and
    optimizer steps (the same weights after 3 steps), down to a budget of the longest row;
    a row over the budget is refused, named."""
    from forge_ppo.algo._errors import PPOInputError
    from forge_ppo.sft._sft import fit_critic

    rows = _rows_of_lengths([3, 9, 5, 12, 7, 4], seed=0)  # 4 prompt tokens each: 16 the longest
    spec = SFTSpec(critic_lr=1e-2, critic_steps=3)
    results = {}
    for budget in (None, 24, 16):
        torch.manual_seed(0)
        critic = tiny.critic()
        loss = fit_critic(critic, rows, spec, pad_token_id=0, token_budget=budget)
        results[budget] = (loss, [p.detach().clone() for p in critic.parameters()])
    full_loss, full_params = results[None]
    for budget in (24, 16):
        loss, params = results[budget]
        assert loss == pytest.approx(full_loss, rel=1e-5)
        for a, b in zip(params, full_params, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # lr 1e-2 per step
    torch.manual_seed(0)
    untouched = tiny.critic()
    before = [p.detach() for p in untouched.parameters()]
    moved = sum(float((a - b).abs().sum()) for a, b in zip(full_params, before, strict=True))
    assert moved > 0, "the fit changed the critic"
    with pytest.raises(PPOInputError, match="t3/e3"):
        fit_critic(tiny.critic(), rows, spec, pad_token_id=0, token_budget=15)
