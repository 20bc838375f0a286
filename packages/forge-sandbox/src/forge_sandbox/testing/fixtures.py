"""pytest fixtures of the suites that start local sandboxes (forge-sandbox, forge-rollout,
forge-ppo): import them into a conftest (`from forge_sandbox.testing.fixtures import cgroups,
isolation`). Test-only: it imports pytest, which no package depends on at run time."""

from __future__ import annotations

import os
import shutil

import pytest

from forge_sandbox.testing._isolation import local_sandbox_problem


def _unless(problem: str | None) -> None:
    """Skip naming `problem`; under CI=true fail instead (CI provides every piece, so a skip
    there would hide a broken machine)."""
    if problem is not None:
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(problem)


@pytest.fixture(scope="session")
def isolation() -> None:
    """Real local sandboxes, or a skip that names what is missing."""
    _unless(local_sandbox_problem())


@pytest.fixture(scope="session")
def cgroups() -> None:
    """Local sandboxes bounded by cgroups (root, or a delegated cgroup), or a skip that says
    the limits here are rlimits."""
    _unless(local_sandbox_problem(cgroups=True))


@pytest.fixture(scope="session")
def node() -> None:
    """node and npm on the host (the local sandboxes see its /usr), or a skip naming the fix."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    _unless(f"needs {' and '.join(missing)}: apt-get install nodejs npm" if missing else None)
