"""Fixtures of the forge-sandbox tests: real sandboxes (skipped only where isolation cannot
exist, never in CI), a task factory, and a guard that every test leaves no cgroup behind."""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forge_sandbox import SandboxUnavailableError, detect_cgroups
from forge_sandbox.testing.fixtures import cgroups, isolation, node  # noqa: F401 (by name)

FIXTURES = Path(__file__).parent / "fixtures"


def _our_cgroups() -> list[str]:
    try:
        names = detect_cgroups().names()
    except SandboxUnavailableError:
        return []
    return [n for n in names if n.startswith(f"sbx-{os.getpid()}-")]


@pytest.fixture(autouse=True)
def no_leftover_cgroups() -> Iterator[None]:
    """After every test, no sandbox cgroup of this process remains (hence no process in one)."""
    yield
    assert _our_cgroups() == [], "a sandbox cgroup (and maybe its processes) was left behind"


@pytest.fixture
def fix_add(tmp_path: Path) -> Path:
    """A copy of the fixture task `fix-add` (bug in calc.add; oracle fixes it)."""
    return Path(shutil.copytree(FIXTURES / "tasks" / "fix-add", tmp_path / "fix-add"))


TaskFactory = Callable[..., Path]


@pytest.fixture
def make_task(tmp_path: Path) -> TaskFactory:
    """Write a Harbor-layout task with the given test.sh (and optional solve.sh). Its test.sh
    first prints SWE-bench's test-output markers (the verifier's evidence that tests ran)
    unless `evidence=False`."""

    def make(
        name: str, test_sh: str, solve_sh: str | None = None, toml: str = "", evidence: bool = True
    ) -> Path:
        task = tmp_path / "tasks" / name
        (task / "environment" / "workspace").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "task.toml").write_text(toml or 'version = "1.0"\n')
        (task / "instruction.md").write_text(f"Task {name}.\n")
        (task / "environment" / "workspace" / "README").write_text("workspace\n")
        markers = "echo '>>>>> Start Test Output'; echo '>>>>> End Test Output'\n"
        script = (markers if evidence else "") + textwrap.dedent(test_sh)
        (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + script)
        if solve_sh is not None:
            (task / "solution").mkdir()
            (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solve_sh))
        return task

    return make


collect_ignore_glob = ["fixtures/*"]  # task folders hold their own (sandboxed) test files
