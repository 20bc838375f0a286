"""The JavaScript red team (forge_sandbox.testing.red_team_js, SWE-gen-JS's shape) on the Docker
backend: each task's image built FROM the session's base with Debian's nodejs and npm (the apt
step on the host's network, the package mirror; one cached layer for every task), every attack
scores exactly 0.0 and the real fixes 1, as on the local backend (test_harness.py). Here the
tree reaches the verifier's container as a tar stream (node_modules' nested folders, .npmrc,
the lockfile), not as a shared folder, and the tests run as the image's user (root)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from forge_sandbox import discover_tasks, run_job
from forge_sandbox.docker import DockerBackend, DockerConfig
from forge_sandbox.testing import red_team_js

BASE_IMAGE = os.environ.get("FORGE_DOCKER_BASE", "forge-base:bookworm")

NODE_STEP = (
    "RUN apt-get update && apt-get install -y --no-install-recommends nodejs npm "
    "&& rm -rf /var/lib/apt/lists/*"
)
FIXES = {red_team_js.REAL_FIX, red_team_js.FIX_WITH_PACKAGE}


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
    tasks = discover_tasks(js_tasks)
    backend = DockerBackend(config.model_copy(update={"build_network": "host"}), tasks=tasks)
    try:
        summary = asyncio.run(
            run_job(
                tasks,
                tmp_path / "job",
                "oracle",
                concurrency=2,
                verifier_timeout_s=120,
                make_sandbox=backend,
            )
        )
    finally:
        left = backend.list_containers()
        backend.gc()
        backend.close()
    assert set(summary.rewards) == FIXES | set(red_team_js.ATTACKS) | set(
        red_team_js.TEST_SIDE_ATTACKS
    )
    for fix in sorted(FIXES):
        assert summary.rewards[fix] == 1.0, (fix, summary.errors.get(fix))
    wrong = {
        name: (reward, summary.errors.get(name))
        for name, reward in summary.rewards.items()
        if name not in FIXES and reward != 0.0
    }
    assert wrong == {}, f"expected every attack to score exactly 0.0; found {wrong}"
    assert left == [], f"containers left behind: {left}"
