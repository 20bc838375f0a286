"""The format policy (forge_ppo.recipes._format_policy): built through the real chain on the easy
tier (tiny model, bubblewrap sandboxes, gateway, verifier), a strict warm start of the local
trainer, cached by a key that changes with the tasks, refused without tasks."""

from __future__ import annotations

import json

import pytest

import forge_data
from forge_gates import load_spec, read_provenance
from forge_ppo.local._build import build_local_trainer
from forge_ppo.recipes import _format_policy as fp
from forge_ppo.recipes import resolve_warm_start
from forge_ppo.sft._format_train import FormatSFTSpec
from forge_ppo.sft._sft import SFTSpec
from forge_rollout import TinyModelSpec, make_tiny_model


def _spec():
    spec = load_spec("smoke-local")
    checkpoint = spec.checkpoint.model_copy(update={"warm_start": fp.FORMAT_POLICY})
    return spec.model_copy(update={"checkpoint": checkpoint})


def test_format_policy_needs_the_tasks_it_is_measured_on(tmp_path):
    with pytest.raises(ValueError, match="forge-ppo learn --tasks"):
        resolve_warm_start(_spec(), tmp_path, tmp_path / "cache")


def test_format_policy_key_changes_with_tasks_and_specs(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec, fmt, fit = _spec(), FormatSFTSpec(), SFTSpec()
    one = forge_data.easy_tasks_root() / "easy-create-motd"
    keys = {
        fp.cache_key(spec, model, "easy", fmt, fit),
        fp.cache_key(spec, model, str(one), fmt, fit),
        fp.cache_key(spec, model, "easy", FormatSFTSpec(count=7), fit),
        fp.cache_key(spec, model, "easy", fmt, SFTSpec(attempts=1)),
    }
    assert len(keys) == 4
    assert fp.cache_key(spec, model, "easy", fmt, fit) == fp.cache_key(
        spec, model, "easy", fmt, fit
    )


@pytest.mark.usefixtures("isolation")
def test_format_policy_builds_through_the_real_chain_and_warm_starts(tmp_path, monkeypatch):
    model = make_tiny_model(tmp_path / "tiny", TinyModelSpec(seed=0))
    spec = _spec()
    fmt = FormatSFTSpec(count=4, held_out=2, epochs=1, batch_size=2, lora=spec.lora)
    fit = SFTSpec(attempts=1, critic_steps=2)
    cache = tmp_path / "cache"
    folder = fp.resolve_format_policy(spec, model, cache, "easy", fmt, fit)
    root = folder.parent.parent
    report = json.loads((root / fp.REPORT_NAME).read_text())
    assert report["schema"] == fp.REPORT_SCHEMA
    easy = sorted(p.name for p in forge_data.easy_tasks_root().iterdir())
    assert report["trained_on"]["task_ids"] == easy
    assert report["success_t1"]["attempts"] == len(easy)  # one T=1 episode per task
    assert sorted(report["success_t1"]["per_task"]) == easy
    assert report["sft_result"]["steps"] == 2 and report["critic_fit"]["rows"] > 0
    assert not list(cache.glob(f".{fp.FORMAT_POLICY}-*")), "no staging folder left"
    record = read_provenance(root)  # recorded from the build's start, peaks and growth
    assert (record.kind, record.status) == (fp.FORMAT_POLICY, "completed")
    assert record.disk.growth_bytes and record.memory.main.peak_rss_bytes
    # a strict warm start of the local trainer (it refuses a mismatched or partial checkpoint)
    started = spec.model_copy(
        update={"checkpoint": spec.checkpoint.model_copy(update={"warm_start": str(folder)})}
    )
    build_local_trainer(started, model, tmp_path / "run").close()
    # cached: the second resolve builds nothing
    monkeypatch.setattr(fp, "build_format_policy", lambda *a, **k: pytest.fail("rebuilt"))
    assert fp.resolve_format_policy(spec, model, cache, "easy", fmt, fit) == folder
