"""`forge-data curate` for real: the bundled demo tasks judged through `forge-sandbox` jobs on
the local backend (small batches, concurrency 2): the stop rule, a kill and a resume, an edited
task judged again, infrastructure errors retried then recorded, the freeze carrying its tasks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import forge_data as fd
from forge_gates import GateError

FORGE_SANDBOX = Path(sys.executable).parent / "forge-sandbox"
RUN = fd.SandboxRun(backend="local", concurrency=2, quiet=True)
# one task from each of four repositories (plus, where asked, a broken copy of a fifth)
PICK = [
    "datekit-leap-century",
    "iniconf-bool-case",
    "statkit-median-even",
    "textkit-truncate-width",
]


pytestmark = pytest.mark.usefixtures("sandbox_isolation")


def _tasks(tmp_path: Path, ids: list[str], broken: bool = False) -> Path:
    root = tmp_path / "tasks"
    for task_id in ids:
        shutil.copytree(fd.demo_tasks_root() / task_id, root / task_id)
    if broken:  # its test.sh writes 0 and shows no sign of tests: a broken environment
        task = root / "lrukit-broken"
        shutil.copytree(fd.demo_tasks_root() / "lrukit-get-recency", task)
        (task / "tests" / "test.sh").write_text(
            "#!/usr/bin/env bash\nmkdir -p /logs/verifier\necho 0 > /logs/verifier/reward.txt\n"
        )
    return root


def _spec(train: int, validation: int, test: int, repositories: int) -> fd.FreezeSpec:
    targets = fd.SplitTargets(train=train, validation=validation, test=test)
    return fd.FreezeSpec(targets=targets, per_repo_cap=1, min_repositories=repositories)


def _gates(out: Path) -> list[str]:
    return [json.loads(line)["gate"] for line in (out / "gates.jsonl").read_text().splitlines()]


def test_stops_when_ready_and_freezes_with_its_task_folders(tmp_path: Path) -> None:
    tasks, out = _tasks(tmp_path, PICK), tmp_path / "curate"
    spec = _spec(1, 1, 1, 3)
    report = fd.curate(tasks, out, spec, RUN, batch_size=3, freeze_to=tmp_path / "split")
    # 1. one batch of 3 (one per repository) is enough: the stop rule ends it there
    assert report.ready and report.batches_run == 1 and report.verdicts == {"accepted": 3}
    assert _gates(out) == ["BULK_ORACLE_FREEZE_READY"]
    assert sorted(p.name for p in (out / "batches").iterdir()) == ["b0001"]
    records = fd.read_verdicts(out / "verdicts.jsonl")
    assert len(records) == 3 and all(r.fingerprint for r in records)
    # 2. the frozen split carries its task folders where training reads them, and verifies
    manifest = fd.load_manifest(tmp_path / "split")
    assert sorted(p.name for p in (tmp_path / "split" / "tasks").iterdir()) == sorted(
        manifest.tasks
    )
    assert fd.verify_frozen(tmp_path / "split") == []
    assert fd.task_set_folders(str(tmp_path / "split"))[1] == tmp_path / "split" / "tasks"
    # 3. a rerun judges nothing again
    again = fd.curate(tasks, out, spec, RUN, batch_size=3)
    assert again.ready and again.batches_run == 0
    assert len(fd.read_verdicts(out / "verdicts.jsonl")) == 3


def test_an_edited_task_is_judged_again(tmp_path: Path) -> None:
    tasks, out = _tasks(tmp_path, PICK[:3]), tmp_path / "curate"
    spec = _spec(1, 1, 1, 3)
    assert fd.curate(tasks, out, spec, RUN, batch_size=3).ready
    (tasks / PICK[0] / "instruction.md").write_text("Edited: the same bug, told again.\n")
    report = fd.curate(tasks, out, spec, RUN, batch_size=3)
    assert report.ready and report.batches_run == 1
    batch = json.loads((out / "batches" / "b0002" / "batch.json").read_text())
    assert batch["task_ids"] == [PICK[0]]
    records = fd.read_verdicts(out / "verdicts.jsonl")
    first, last = next(r for r in records if r.task_id == PICK[0]), records[-1]
    assert (last.task_id, last.verdict, last.supersedes) == (PICK[0], "accepted", first.seq)
    assert last.fingerprint != first.fingerprint


def test_infrastructure_is_retried_then_recorded_never_rejected(tmp_path: Path) -> None:
    tasks, out = _tasks(tmp_path, PICK[:3], broken=True), tmp_path / "curate"
    spec = _spec(2, 1, 1, 4)  # needs all four repositories: never ready without the broken one
    with pytest.raises(GateError, match="freeze.shortage"):
        fd.curate(tasks, out, spec, RUN, batch_size=4, max_infra_attempts=2)
    broken = [r for r in fd.read_verdicts(out / "verdicts.jsonl") if r.task_id == "lrukit-broken"]
    assert [r.verdict for r in broken] == ["infrastructure", "infrastructure"]
    assert all("VerifierNoEvidenceError" in r.reason and r.oracle_rewards == () for r in broken)
    assert json.loads((out / "batches" / "b0002" / "batch.json").read_text())["retries"] == [
        "lrukit-broken"
    ]
    assert _gates(out)[-1] == "BULK_ORACLE_FREEZE_READY_FAILED"


def _curate_cli(tasks: Path, out: Path) -> list[str]:
    return [
        str(Path(sys.executable).parent / "forge-data"),
        "curate",
        str(tasks),
        "--out",
        str(out),
        "--backend",
        "local",
        "--batch",
        "2",
        "--concurrency",
        "2",
        "--train",
        "2",
        "--validation",
        "1",
        "--test",
        "1",
        "--per-repo-cap",
        "1",
        "--min-repositories",
        "4",
    ]


def test_a_killed_run_resumes_without_losing_or_doubling_a_verdict(tmp_path: Path) -> None:
    tasks, out = _tasks(tmp_path, PICK), tmp_path / "curate"
    # 1. kill the whole run (curate and its forge-sandbox job) while the second batch runs
    proc = subprocess.Popen(
        _curate_cli(tasks, out),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not (out / "batches" / "b0002" / "nop").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "the second batch never started"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode != 0, "the run finished before it was killed"
    batch = json.loads((out / "batches" / "b0002" / "batch.json").read_text())
    assert batch["done"] is False
    # 2. rerun: it resumes b0002, then stops ready
    done = subprocess.run(_curate_cli(tasks, out), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resuming batch b0002" in done.stderr
    records = fd.read_verdicts(out / "verdicts.jsonl")  # checks seq and supersede chain
    assert sorted(r.task_id for r in records) == sorted(PICK)  # each exactly once
    assert {r.verdict for r in records} == {"accepted"}
    assert sorted(p.name for p in (out / "batches").iterdir()) == ["b0001", "b0002"]
    assert _gates(out) == ["BULK_ORACLE_FREEZE_READY"]
