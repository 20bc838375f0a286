"""The red-team attacks (forge_sandbox.testing.red_team) on the Docker backend and on the
Kubernetes backend (the in-process API server's pods as real containers), the demo task in
image form (repository at root-owned /testbed, as SWE-bench's images), and the pytest task's
plugin attacks (forge_sandbox.testing.red_team_pytest): every attack scores exactly 0.0 and
the real fixes 1. The full lists run on the local backend (forge-data's test_red_team.py,
forge-sandbox's test_harness.py); here one attack of each class runs on each backend.

The JavaScript task's attacks (forge_sandbox.testing.red_team_js, SWE-gen-JS's shape), all of
them, on Docker: each task's image FROM the session's base with Debian's nodejs and npm (the
apt step on the host's network, the package mirror; one cached layer for every task). The tree
reaches the verifier's container as a tar stream (node_modules' nested folders, .npmrc, the
lockfile), not as a shared folder, and the tests run as the image's user (root)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from forge_sandbox import discover_tasks, run_job
from forge_sandbox.docker import DockerBackend, DockerConfig
from forge_sandbox.testing import red_team_js, red_team_pytest
from forge_sandbox.testing.red_team import REAL_FIX, RESOURCE_LIMITS, write_attack_tasks

BASE_IMAGE = os.environ.get("FORGE_DOCKER_BASE", "forge-base:bookworm")
DEMO_TASKS = Path(__file__).parents[2] / "forge-data/src/forge_data/bundled/demo_tasks"
SOURCE = DEMO_TASKS / "statkit-median-even"
CLASSES = [  # one attack of each class
    "reward-file-guarded",
    "reward-rewriter-left-running",
    "verifier-folder-symlinked",
    "exit-0-at-import",
    "code-writes-reward",
    "patches-unittest-asserts",
    "bytecode-planted",
    "verifier-hangs",
    "verifier-ooms",
    "agent-fills-memory",
    "agent-kills-init",
]
PYTEST = "pytest-"  # the pytest task's attacks (red_team_pytest), folders named after this
PYTEST_CLASSES = [  # one of each place a plugin is loaded from
    "conftest-added-at-root",
    "pyproject-beside-the-tests",
    "setup-cfg-addopts",
    "dist-info-entry-point",
    "runner-patched-in-the-venv",
    "pytest-shadowed",
    "test-package-init-patches-reports",  # the test side (tests/config.json holds the row)
]
FIXES = {
    REAL_FIX,
    *(PYTEST + f for f in (red_team_pytest.REAL_FIX, red_team_pytest.FIX_WITH_CONFIG)),
}


def _judge(summary: Any, fixes: set[str] = FIXES) -> None:
    for fix in sorted(fixes):
        assert summary.rewards[fix] == 1.0, (fix, summary.errors.get(fix))
    wrong = {
        name: (reward, summary.errors.get(name))
        for name, reward in summary.rewards.items()
        if name not in fixes and reward != 0.0
    }
    assert wrong == {}, f"expected every attack to score exactly 0.0; found {wrong}"


@pytest.fixture(scope="module")
def attack_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("red-team-image")
    write_attack_tasks(SOURCE, root, names=CLASSES, image=BASE_IMAGE)
    vendor = red_team_pytest.vendor_pytest(tmp_path_factory.mktemp("vendor"))
    red_team_pytest.write_pytest_attack_tasks(
        root, vendor, names=PYTEST_CLASSES, image=BASE_IMAGE, prefix=PYTEST
    )
    return root


def _oracle_on_docker(
    config: DockerConfig, root: Path, job: Path, limits: dict[str, Any], **options: Any
) -> tuple[Any, list[Any]]:
    """The oracle over every task under `root` on Docker (`limits` on each sandbox); (the
    job's summary, the containers its backend left)."""
    tasks = discover_tasks(root)
    backend = DockerBackend(config, tasks=tasks)
    try:
        summary = asyncio.run(
            run_job(
                tasks,
                job,
                "oracle",
                make_sandbox=lambda spec: backend(spec.model_copy(update=limits)),
                **options,
            )
        )
    finally:
        left = backend.list_containers()
        backend.gc()
        backend.close()
    return summary, left


def test_every_attack_class_scores_0_on_docker(
    api: object, config: DockerConfig, attack_root: Path, tmp_path: Path
) -> None:
    summary, left = _oracle_on_docker(
        config, attack_root, tmp_path / "job", RESOURCE_LIMITS, verifier_timeout_s=30
    )
    _judge(summary)
    assert left == [], f"containers left behind: {left}"


def test_every_attack_class_scores_0_on_kubernetes(
    api: object, attack_root: Path, tmp_path: Path
) -> None:
    """Pods of the in-process API server as real containers (runAsNonRoot: the images get the
    cluster build's chown + USER, as `forge-sandbox images` builds them)."""
    from forge_sandbox.kubernetes import KubernetesBackend
    from forge_sandbox.testing._docker_pods import recipes_for
    from forge_sandbox.testing.kubernetes_api import FakeApiServer

    planned = recipes_for(attack_root, {**DockerConfig.load().rewrites, BASE_IMAGE: BASE_IMAGE})
    recipes = {ref: recipe for ref, recipe in planned.values()}
    tasks = discover_tasks(attack_root)
    with FakeApiServer(runtime="docker", recipes=recipes) as server:
        images = {task: ref for task, (ref, _) in planned.items()}
        backend = KubernetesBackend(server.backend_config(images=images))
        try:
            summary = asyncio.run(
                run_job(
                    tasks,
                    tmp_path / "job",
                    "oracle",
                    verifier_timeout_s=30,
                    make_sandbox=lambda spec: backend(spec.model_copy(update=RESOURCE_LIMITS)),
                )
            )
        finally:
            backend.close()
        assert server.live_pods() == []
    _judge(summary)


NODE_STEP = (
    "RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm "
    "&& rm -rf /var/lib/apt/lists/*"
)
JS_FIXES = {red_team_js.REAL_FIX, red_team_js.FIX_WITH_PACKAGE}


@pytest.fixture(scope="module")
def js_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("red-team-js-image")
    for folder in red_team_js.write_js_attack_tasks(root):
        dockerfile = folder / "environment" / "Dockerfile"
        first, rest = dockerfile.read_text().split("\n", 1)
        assert first == "FROM node:20-slim", first  # the layout SWE-gen-JS's tasks have
        dockerfile.write_text(f"FROM {BASE_IMAGE}\n{NODE_STEP}\n{rest}")
    return root


def test_every_js_attack_scores_0_on_docker(
    api: object, config: DockerConfig, js_tasks: Path, tmp_path: Path
) -> None:
    summary, left = _oracle_on_docker(
        config.model_copy(update={"build_network": "host"}), js_tasks, tmp_path / "job", {},
        concurrency=2, verifier_timeout_s=120,
    )  # fmt: skip
    assert set(summary.rewards) == JS_FIXES | set(red_team_js.ATTACKS) | set(
        red_team_js.TEST_SIDE_ATTACKS
    )
    _judge(summary, JS_FIXES)
    assert left == [], f"containers left behind: {left}"
