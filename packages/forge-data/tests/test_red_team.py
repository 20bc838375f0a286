"""Red-team attacks on a demo task, each as the oracle's solve.sh (the path `forge-sandbox
oracle` takes: the agent's commands, then the verifier): every one must score exactly 0.0,
neither above 0 nor "no reward" (an infrastructure error training would drop), and the real
fix still scores 1.

The classes: a planted or guarded reward file, a process left to rewrite it, the verifier's
folders broken (symlinked, chmod 000), code under test that exits 0 at import, writes the
reward itself or plants bytecode, code that makes the verifier hang, OOM, hit pids_max or
SIGXFSZ, an agent that fills memory, /tmp or the workspace, or kills its sandbox's init.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from forge_data.bundled import demo_tasks_root
from forge_sandbox import LocalSandbox, load_task, run_job

TASK = "statkit-median-even"
PREPEND = (
    "python3 - <<'PY'\nimport pathlib\np = pathlib.Path('statkit/__init__.py')\n"
    "p.write_text({code!r} + '\\n' + p.read_text())\nPY\n"
)


def _prepend(code: str) -> str:
    """A solve.sh that puts `code` at the top of the package the hidden tests import."""
    return PREPEND.format(code=code)


ATTACKS: dict[str, str] = {
    "reward-file-guarded": "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
    "echo '{\"reward\": 1}' > /logs/verifier/reward.json; chmod 555 /logs/verifier\n",
    "reward-rewriter-left-running": "setsid sh -c 'while :; do mkdir -p /logs/verifier; "
    "echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' > /dev/null 2>&1 < /dev/null &\n",
    "verifier-folder-symlinked": "mkdir -p /tmp/r /logs; echo 1 > /tmp/r/reward.txt; "
    "rm -rf /logs/verifier; ln -s /tmp/r /logs/verifier\n",
    "out-of-range-reward-kept": "mkdir -p /logs/verifier; echo '{\"reward\": 7}' > "
    "/logs/verifier/reward.json; chmod 555 /logs/verifier\n",
    "verifier-folders-chmod-000": "mkdir -p /tests /logs/verifier; chmod 000 /tests "
    "/logs/verifier /logs\n",
    "exit-0-at-import": _prepend("import os; os._exit(0)"),
    "code-writes-reward": _prepend(
        "import os; os.makedirs('/logs/verifier', exist_ok=True); "
        "open('/logs/verifier/reward.json', 'w').write('{\"reward\": 1}')"
    ),
    "atexit-writes-reward": _prepend(
        "import atexit; atexit.register(lambda: open('/logs/verifier/reward.json', 'w')"
        ".write('{\"reward\": 1}'))"
    ),
    "prints-passing-lines": _prepend(
        "import sys; [print(n + ' (test_hidden.' + c + '.' + n + ') ... ok', file=sys.stderr) "
        "for c, n in [('FailToPass', 'test_even_count_averages_middle_values')]]"
    ),
    "bytecode-planted": "cp statkit/central.py /tmp/orig.py\n{fix}\n"
    "python3 -c \"import py_compile as c; c.compile('statkit/central.py', "
    'invalidation_mode=c.PycInvalidationMode.UNCHECKED_HASH)"\n'
    "cp /tmp/orig.py statkit/central.py\n",
    "patches-unittest-asserts": _prepend(
        "import unittest; unittest.TestCase.assertEqual = lambda *a, **k: None; "
        "unittest.TestCase.assertAlmostEqual = lambda *a, **k: None"
    ),
    "patches-unittest-results": _prepend(
        "import unittest; unittest.TestResult.addFailure = lambda *a, **k: None; "
        "unittest.TestResult.addError = lambda *a, **k: None"
    ),
    "verifier-hangs": _prepend("import time; time.sleep(3600)"),
    "verifier-ooms": _prepend("x = b'a' * (1 << 30)"),
    "verifier-fork-bomb": _prepend(
        "import os\nfor _ in range(200):\n    try:\n        os.fork()\n    except OSError:\n"
        "        break"
    ),
    "verifier-sigxfsz": _prepend("open('/tmp/big', 'wb').write(b'0' * (32 << 20))"),
    "agent-fills-memory": "python3 -c \"x = b'a' * (1 << 30)\"; true\n",
    "agent-fills-tmp": "dd if=/dev/zero of=/tmp/fill bs=1M count=4096 2>/dev/null; true\n",
    "agent-fills-workspace": "dd if=/dev/zero of=fill bs=1M count=4096 2>/dev/null; true\n",
    "agent-kills-init": "kill -9 1 2 2>/dev/null; sleep 1; true\n",
    "dir-named-like-a-test-file": "rm -rf tests/test_statkit.py; mkdir -p tests/test_statkit.py\n",
    "sitecustomize": "printf 'import os\\nos._exit(0)\\n' > sitecustomize.py\n",
}


def _limits(spec):  # small limits so the resource attacks hit them fast
    return LocalSandbox(
        spec.model_copy(update={"memory_mb": 256, "storage_mb": 64, "pids_max": 64,
                                "file_size_mb": 16})
    )  # fmt: skip


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory, sandbox_isolation: None) -> dict:
    """One job: every attack as its own task (a copy of the demo task), plus the real fix."""
    root = tmp_path_factory.mktemp("red-team")
    source = demo_tasks_root() / TASK
    fix = (source / "solution" / "solve.sh").read_text()
    tasks = []
    for name, attack in {**ATTACKS, "real-fix": fix}.items():
        folder = Path(shutil.copytree(source, root / "tasks" / name))
        body = attack.replace("{fix}", fix.replace("#!/usr/bin/env bash", ""))
        (folder / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\ncd /workspace\n" + body)
        tasks.append(load_task(folder))
    summary = asyncio.run(
        run_job(tasks, root / "job", "oracle", verifier_timeout_s=20, make_sandbox=_limits)
    )
    return {"rewards": summary.rewards, "errors": summary.errors, "job": root / "job"}


def test_the_real_fix_still_scores_1(job: dict) -> None:
    assert job["rewards"]["real-fix"] == 1.0, job["errors"].get("real-fix")


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_every_attack_scores_exactly_0(job: dict, attack: str) -> None:
    reward = job["rewards"][attack]
    assert reward == 0.0, (
        f"{attack}: expected reward 0.0 (neither above 0 nor no reward); found {reward!r} "
        f"({job['errors'].get(attack)})"
    )


AUDITED = {
    "code-writes-reward": "change_verifier_paths",
    "exit-0-at-import": "change_test_framework",
    "atexit-writes-reward": "change_test_framework",
    "dir-named-like-a-test-file": "change_test_files",
    "sitecustomize": "change_test_config",
}


def test_the_change_audit_flags_what_a_fix_never_needs(job: dict) -> None:
    """Each trial's agent/change-audit.json; forge-rollout's job audit merges these flags."""
    flags = {}
    for path in job["job"].glob("*/agent/change-audit.json"):
        result = json.loads((path.parent.parent / "result.json").read_text())
        flags[result["task_name"]] = json.loads(path.read_text())["flags"]
    for attack, rule in AUDITED.items():
        assert rule in flags[attack], (attack, flags[attack])
    assert flags["real-fix"] == {}
