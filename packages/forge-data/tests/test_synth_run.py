"""`forge-data synth` for real on the local sandbox: a fixture project (pure Python, pytest,
a src layout, importlib.metadata) -> tasks that Forge's own NOP / oracle judge 0 / 1 again
here, with the checks the issue's hidden run makes (no fix touches a test file, every
instruction says something, the same seed gives the same tasks), and the refusals: a suite
failing at baseline, a hanging suite. Installs pytest into each task's venv (uv: its cache,
else the package index)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forge_data.cli import main
from forge_data.synth import REPORT_NAME, SynthConfig, synth
from forge_data.tasks._harbor_tasks import harbor_task_dirs
from forge_gates import read_task_config, tree_files, tree_sha256
from forge_sandbox.testing.red_team_pytest import TEST_SIDE_ATTACKS

pytest.importorskip("swesmith", reason="install forge-data[synth]")
PROJECT = Path(__file__).parent / "fixtures" / "synth_project"
FORGE_SANDBOX = Path(sys.executable).parent / "forge-sandbox"


pytestmark = pytest.mark.usefixtures("sandbox_isolation")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("synth") / "tasks"
    assert main(["synth", str(PROJECT), "--out", str(out), "--seed", "7", "--max-tasks", "3",
                 "--quiet"]) == 0  # fmt: skip
    return out, json.loads((out / REPORT_NAME).read_text())


def _rewards(agent: str, tasks: Path, job: Path) -> dict[str, float | None]:
    subprocess.run([str(FORGE_SANDBOX), agent, str(tasks), "--out", str(job), "--concurrency",
                    "2"], capture_output=True, check=False)  # fmt: skip
    rewards = {}
    for result in job.glob("*/result.json"):
        data = json.loads(result.read_text())
        rewards[data["task_name"]] = ((data.get("verifier_result") or {}).get("rewards") or {}).get(
            "reward"
        )
    return rewards


def test_the_tasks_are_judged_again_oracle_1_nop_0(made: tuple[Path, dict], tmp_path: Path) -> None:
    out, report = made
    names = sorted(t["name"] for t in report["tasks"])
    assert len(names) == 3 and report["refused"] is None
    assert report["baseline"]["passing"] == report["baseline"]["tests"] == 33
    assert _rewards("oracle", out, tmp_path / "oracle") == {n: 1.0 for n in names}
    assert _rewards("nop", out, tmp_path / "nop") == {n: 0.0 for n in names}


def test_each_task_is_a_harbor_folder_with_a_fix_outside_the_tests(made: tuple[Path, dict]) -> None:
    out, report = made
    for task in report["tasks"]:
        folder = out / task["name"]
        config, _warnings = read_task_config(folder / "task.toml")
        meta = config.metadata
        assert meta["repository"] == "local/minicalc" and len(meta["fail_to_pass"]) >= 1
        assert not set(meta["fail_to_pass"]) & set(meta["pass_to_pass"])
        assert len(meta["fail_to_pass"]) + len(meta["pass_to_pass"]) <= 33
        row = json.loads((folder / "tests" / "config.json").read_text())
        assert (
            row["FAIL_TO_PASS"] == meta["fail_to_pass"]
            and row["base_commit"] == meta["base_commit"]
        )
        touched = re.findall(
            r"^\+\+\+ b/(\S+)", (folder / "solution" / "solve.sh").read_text(), re.M
        )
        assert touched == [task["path"]] and not touched[0].startswith("tests/")
        # the gold in the row is the one solve.sh applies (the carry's test side reads it)
        assert row["patch"] and row["patch"] in (folder / "solution" / "solve.sh").read_text()
        instruction = (folder / "instruction.md").read_text()
        assert len(instruction.split()) > 20 and meta["fail_to_pass"][0] in instruction
        assert "@@" not in instruction  # never the diff
        workspace = folder / "environment" / "workspace"
        log = subprocess.run(["git", "-C", str(workspace), "log", "--format=%H"],
                             capture_output=True, text=True, check=True)  # fmt: skip
        assert log.stdout.split() == [meta["base_commit"]]  # one commit, no history of the fix
        assert (workspace / ".venv" / "bin" / "python").is_symlink()
        docker = (folder / "environment" / "Dockerfile").read_text()
        assert docker.startswith("# Written by forge-data synth") and "\nFROM debian:" in docker
        assert "COPY workspace /workspace" in docker and "-r /opt/forge/requirements.txt" in docker
        pins = (folder / "environment" / "requirements.txt").read_text().splitlines()
        assert any(pin.startswith("pytest==") for pin in pins)
    assert len(harbor_task_dirs(out)) == 3


def test_the_same_seed_gives_the_same_tasks(made: tuple[Path, dict], tmp_path: Path) -> None:
    out, report = made
    again = synth(SynthConfig(source=str(PROJECT), out=tmp_path / "again", seed=7, max_tasks=3,
                              quiet=True, validate_tasks=False))  # fmt: skip
    assert [t["name"] for t in again.tasks] == [t["name"] for t in report["tasks"]]
    for task in report["tasks"]:
        first, second = (
            tree_files(out / task["name"]),
            tree_files(tmp_path / "again" / task["name"]),
        )
        assert [p for p in sorted(set(first) | set(second)) if first.get(p) != second.get(p)] == []
        assert tree_sha256(tmp_path / "again" / task["name"]) == tree_sha256(out / task["name"])


def test_a_suite_failing_at_baseline_is_refused(tmp_path: Path, capsys) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(PROJECT, broken)
    (broken / "src" / "minicalc" / "__init__.py").write_text("raise ImportError('broken')\n")
    code = main(["synth", str(broken), "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 1
    report = json.loads((tmp_path / "out" / REPORT_NAME).read_text())
    assert "pass at baseline" in report["refused"] or "no report" in report["refused"]
    assert not [p for p in (tmp_path / "out").iterdir() if p.is_dir() and p.name[0] != "."]
    assert "forge-data synth:" in capsys.readouterr().err


def test_a_hanging_suite_is_refused_naming_the_limit(tmp_path: Path) -> None:
    hanging = tmp_path / "hanging"
    shutil.copytree(PROJECT, hanging)
    (hanging / "tests" / "test_hang.py").write_text(
        "import time\n\ndef test_hang():\n    time.sleep(600)\n"
    )
    report = synth(SynthConfig(source=str(hanging), out=tmp_path / "out", quiet=True,
                               baseline_timeout_s=8))  # fmt: skip
    assert report.refused and "did not finish within 8 s" in report.refused


def test_a_suite_written_for_an_older_pytest_runs_under_one(tmp_path: Path) -> None:
    """boltons 24.1.0's conftest declares `pytest_ignore_collect(path, config)`: pytest 9
    refuses the hook and no test runs; the suite is tried again under an older pytest."""
    old = tmp_path / "old"
    shutil.copytree(PROJECT, old)
    (old / "tests" / "conftest.py").write_text(
        "def pytest_ignore_collect(path, config):\n    return None\n"
    )
    report = synth(SynthConfig(source=str(old), out=tmp_path / "out", seed=7, max_tasks=1,
                               quiet=True, validate_tasks=False))  # fmt: skip
    assert report.refused is None and len(report.tasks) == 1
    pytest_pin = next(p for p in report.pins if p.startswith("pytest=="))
    assert int(pytest_pin.split("==")[1].split(".")[0]) < 9


def test_a_relative_out_folder_works(tmp_path: Path, monkeypatch) -> None:
    """`--out tasks` from the working directory (the installer runs elsewhere)."""
    monkeypatch.chdir(tmp_path)
    assert main(["synth", str(PROJECT), "--out", "tasks", "--max-tasks", "1", "--no-validate",
                 "--quiet"]) == 0  # fmt: skip
    assert len([p for p in (tmp_path / "tasks").iterdir() if p.is_dir()]) == 1


def test_a_test_side_attack_scores_0_because_the_row_holds_the_gold(
    made: tuple[Path, dict], tmp_path: Path
) -> None:
    out, report = made
    name = report["tasks"][0]["name"]
    # the red team's: a new tests/__init__.py that rewrites pytest's reports to passed in
    # pytest's process (the CTRF plugin then records every listed test as passed)
    attack = "#!/bin/bash\ncd /workspace\n" + TEST_SIDE_ATTACKS["test-package-init-patches-reports"]
    for variant in ("row", "norow"):
        folder = tmp_path / "tasks" / f"{variant}-{name}"
        shutil.copytree(out / name, folder, symlinks=True)
        (folder / "solution" / "solve.sh").write_text(attack)
        if variant == "norow":  # a task synthesized before the row held its gold
            row = json.loads((folder / "tests" / "config.json").read_text())
            del row["patch"]
            (folder / "tests" / "config.json").write_text(json.dumps(row))
    rewards = _rewards("oracle", tmp_path / "tasks", tmp_path / "job")
    # the norow variant shows the attack works: the carry's test side is what stops it
    assert rewards == {f"row-{name}": 0.0, f"norow-{name}": 1.0}
