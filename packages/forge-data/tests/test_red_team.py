"""Red-team attacks on a demo task (forge_sandbox.testing.red_team), each as the oracle's
solve.sh on the local backend, through the path `forge-sandbox oracle` takes: every one must
score exactly 0.0 (neither above 0 nor "no reward"), the real fix still 1, and the change's
hack audit flags what a fix never needs. `nox -s docker` runs them on Docker and Kubernetes."""

from __future__ import annotations

import asyncio
import json

import pytest

from forge_data.bundled import demo_tasks_root
from forge_sandbox import LocalSandbox, load_task, run_job
from forge_sandbox.testing.red_team import (
    ATTACKS,
    AUDITED,
    REAL_FIX,
    RESOURCE_LIMITS,
    write_attack_tasks,
)

TASK = "statkit-median-even"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory, sandbox_isolation: None) -> dict:
    """One job: every attack as its own task (a copy of the demo task), plus the real fix."""
    root = tmp_path_factory.mktemp("red-team")
    tasks = [load_task(t) for t in write_attack_tasks(demo_tasks_root() / TASK, root / "tasks")]
    summary = asyncio.run(
        run_job(
            tasks,
            root / "job",
            "oracle",
            verifier_timeout_s=20,
            make_sandbox=lambda spec: LocalSandbox(spec.model_copy(update=RESOURCE_LIMITS)),
        )
    )
    return {"rewards": summary.rewards, "errors": summary.errors, "job": root / "job"}


def test_the_real_fix_still_scores_1(job: dict) -> None:
    assert job["rewards"][REAL_FIX] == 1.0, job["errors"].get(REAL_FIX)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_every_attack_scores_exactly_0(job: dict, attack: str) -> None:
    reward = job["rewards"][attack]
    assert reward == 0.0, (
        f"{attack}: expected reward 0.0 (neither above 0 nor no reward); found {reward!r} "
        f"({job['errors'].get(attack)})"
    )


def test_the_change_audit_flags_what_a_fix_never_needs(job: dict) -> None:
    """Each trial's agent/change-audit.json; forge-rollout's job audit merges these flags."""
    flags = {}
    for path in job["job"].glob("*/agent/change-audit.json"):
        result = json.loads((path.parent.parent / "result.json").read_text())
        flags[result["task_name"]] = json.loads(path.read_text())["flags"]
    for attack, rule in AUDITED.items():
        assert rule in flags[attack], (attack, flags[attack])
    assert flags[REAL_FIX] == {}


def test_every_demo_task_ships_the_same_worker_runner() -> None:
    """Each task folder stands alone (Harbor uploads only its tests/), so tests/_remote.py is
    copied into every demo task; the copies must never drift apart."""
    copies = {p.read_bytes() for p in demo_tasks_root().glob("*/tests/_remote.py")}
    assert len(list(demo_tasks_root().glob("*/tests/_remote.py"))) == 12 and len(copies) == 1
