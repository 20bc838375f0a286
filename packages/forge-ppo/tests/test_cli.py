"""forge-ppo CLI: inspect-checkpoint, check-adapter, balance."""

from __future__ import annotations

import json

import pytest

from forge_ppo.cli import main


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "inspect-checkpoint" in capsys.readouterr().out


def test_inspect_checkpoint_verifies_hashes(saved, checkpoint_copy, capsys):
    path, *_ = saved
    assert main(["inspect-checkpoint", str(path)]) == 0
    out = capsys.readouterr().out
    assert "files verified: 4 (sizes and SHA-256 match)" in out
    assert "never saved  optimizer, scheduler, rng, extra_state" in out
    assert main(["inspect-checkpoint", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 1
    config = checkpoint_copy / "lora_adapter" / "adapter_config.json"
    config.write_text(config.read_text().replace('"r": 4', '"r": 5'))
    assert main(["inspect-checkpoint", str(checkpoint_copy)]) == 1
    assert "checkpoint.sha256" in capsys.readouterr().err


def test_check_adapter(saved, capsys):
    path, *_ = saved
    assert main(["check-adapter", str(path)]) == 0
    assert "adapter ok for vLLM: r=4 <= 64" in capsys.readouterr().out
    assert main(["check-adapter", str(path), "--max-rank", "2"]) == 1
    assert "adapter.rank" in capsys.readouterr().err


def test_balance(tmp_path, capsys):
    assert main(["balance", "--budget", "100", "60", "40", "50", "50"]) == 0
    out = capsys.readouterr().out
    assert "micro_batches            2" in out and "fill                     1.0" in out
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("30, 40 50\n60 70 20")
    assert (
        main(
            [
                "balance",
                "--budget",
                "100",
                "--world-size",
                "2",
                "--equal-counts",
                "--json",
                "--lengths-file",
                str(lengths),
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["summary"]["world_size"] == 2 and len(plan["ranks"]) == 2
    assert main(["balance", "--budget", "100", "10", "130"]) == 1
    assert "sequence 1: expected 1..100 tokens" in capsys.readouterr().err
    assert main(["balance", "--budget", "100"]) == 2


def test_train_refuses_the_demo_policy_on_other_tasks_before_any_work(tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = ["train", "--config", "smoke-local", "--set", 'data.tasks="realrepo"']
    assert main([*argv, "--runs-root", str(runs), "--cache-dir", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err
    assert "checkpoint.warm_start.demo_policy" in err and "--warm-start CKPT" in err, err
    assert "Traceback" not in err
    assert not runs.exists() and not (tmp_path / "cache").exists()  # nothing built or started
