import argparse
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from forge_gates import (
    HelpFormatter,
    named_paths,
    quiet_broken_pipe,
    read_config,
    shipped_configs,
)
from forge_gates.cli import main

PRODUCTION_BACKENDS = {"trainer": "verl", "inference": "vllm", "sandbox": "local"}


def _toml(data: dict) -> str:
    """Tiny TOML writer for two-level spec dicts (tests only)."""

    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    top = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    tables = [
        f"[{k}]\n" + "\n".join(f"{kk} = {value(vv)}" for kk, vv in v.items())
        for k, v in data.items()
        if isinstance(v, dict)
    ]
    return "\n".join(top) + "\n\n" + "\n\n".join(tables) + "\n"


def test_validate_accepts_every_shipped_config(capsys):
    assert main(["validate", *shipped_configs()]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(shipped_configs()) and all(line.startswith("VALID ") for line in out)


def test_validate_lists_all_three_broken_rules(tmp_path, capsys):
    data = read_config("soak-local")
    data["schedule"]["total_updates"] = 5
    data["resources"]["trainer_gpus"] = 3
    data["backends"] = PRODUCTION_BACKENDS  # GPUs need the engines that use them
    data["context"]["critic_train_tokens"] = 512
    path = tmp_path / "broken.toml"
    path.write_text(_toml(data))
    assert tomllib.loads(path.read_text())["schedule"]["total_updates"] == 5
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "3 violation(s)" in err
    for rule in ("soak.updates", "ppo.batch_size.world_size", "budget.critic_train_tokens"):
        assert f"[{rule}]" in err
    assert err.count("fix:") == 3


def test_show_prints_resolved_json(capsys):
    assert main(["show", "formal-5gpu"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["sha256"]) == 64
    assert payload["spec"]["schedule"]["validation_tasks"] == 21
    assert payload["spec"]["ppo"]["gae_lambda"] == 0.95


def test_console_script_help_and_bad_usage():
    done = subprocess.run(
        [sys.executable, "-m", "forge_gates.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "verify" in done.stdout and "exit codes" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "forge_gates.cli", "verify", "x", "--phase", "nope"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2


def test_list_and_ledger(tmp_path, capsys):
    assert main(["list"]) == 0
    assert "formal-5gpu" in capsys.readouterr().out
    from forge_gates import record_gate

    record_gate(tmp_path, "A_PASSED", {"k": 1})
    capsys.readouterr()
    assert main(["ledger", str(tmp_path)]) == 0
    assert "A_PASSED k=1" in capsys.readouterr().out
    assert main(["ledger", str(tmp_path / "none")]) == 1


def test_validate_yaml_names_the_formats_read_and_the_conversion(tmp_path, capsys):
    """forge-gates reads TOML and JSON only (no YAML parser: it stays pydantic-only)."""
    path = tmp_path / "x.yaml"
    path.write_text("phase: smoke\n")
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "valid YAML" not in err and "[config.format]" in err
    assert "TOML (.toml) or JSON (.json)" in err and "yaml.safe_load" in err
    assert str(tmp_path / "x.json") in err
    # the same spec as JSON is read
    data = read_config("smoke-local")
    (tmp_path / "x.json").write_text(json.dumps(data))
    assert main(["validate", str(tmp_path / "x.json")]) == 0


def test_named_paths_keeps_given_names_and_letters_the_rest() -> None:
    """`NAME=PATH` keeps its name (a path may hold `=`); a bare PATH is named by position."""
    got = named_paths(["base=runs/a", "runs/b", "x=y=z", "=runs/c"])
    assert got == [
        ("base", Path("runs/a")),
        ("B", Path("runs/b")),
        ("x", Path("y=z")),
        ("D", Path("=runs/c")),
    ]


def _into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `argv` with stdout a pipe whose reader has already gone (`| head -0`, no race)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            argv, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write_end)


def test_show_into_a_closed_pipe_exits_quietly():
    done = _into_closed_pipe([sys.executable, "-m", "forge_gates.cli", "show", "formal-5gpu"])
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141


def test_quiet_broken_pipe_on_output_beyond_the_buffer():
    script = (
        "from forge_gates import quiet_broken_pipe\n"
        "@quiet_broken_pipe\n"
        "def main() -> int:\n"
        "    for i in range(20000):\n"
        "        print('line', i)\n"
        "    return 0\n"
        "raise SystemExit(main())\n"
    )
    done = _into_closed_pipe([sys.executable, "-c", script])
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141


def test_quiet_broken_pipe_raises_a_broken_pipe_that_is_not_stdout():
    @quiet_broken_pipe
    def fails() -> int:
        raise BrokenPipeError("a sandbox's stdin")

    with pytest.raises(BrokenPipeError, match="sandbox"):
        fails()


def test_required_option_never_shows_a_default():
    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    parser.add_argument("--train", type=int, required=True, default=0, help="train tasks")
    parser.add_argument("--seed", type=int, default=0, help="tie-break seed")
    text = parser.format_help()
    assert "train tasks (default" not in text, text
    assert "tie-break seed (default: 0)" in text, text
