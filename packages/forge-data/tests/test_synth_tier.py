"""The real-repository tier's machinery on a small tier of three local projects (copies of the
synth fixture under three names): built once, curated with NOP / oracle, frozen with each
repository in one split, found again by every entry point (`realrepo`, `realrepo:<split>`,
`forge-data realrepo path`, `forge-sandbox oracle realrepo`), rebuilt only when the tier's
spec changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import forge_data as fd
from forge_data.cli import main
from forge_data.synth import _command, _tier

pytest.importorskip("swesmith", reason="install forge-data[synth]")
PROJECT = Path(__file__).parent / "fixtures" / "synth_project"
FORGE_SANDBOX = Path(sys.executable).parent / "forge-sandbox"


pytestmark = pytest.mark.usefixtures("sandbox_isolation")


def _project(root: Path, name: str) -> str:
    folder = root / name
    shutil.copytree(PROJECT, folder)
    toml = folder / "pyproject.toml"
    toml.write_text(toml.read_text().replace('name = "minicalc"', f'name = "{name}"'))
    init = folder / "src" / "minicalc" / "__init__.py"
    init.write_text(init.read_text().replace('version("minicalc")', f'version("{name}")'))
    return str(folder)


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> tuple[fd.TierSpec, Path]:
    root = tmp_path_factory.mktemp("tier")
    spec = fd.TierSpec(
        projects=tuple(_project(root / "projects", f"calc-{c}") for c in "abc"),
        seed=7,
        tasks_per_project=2,
        targets=fd.SplitTargets(train=2, validation=1, test=1),
        per_repo_cap=2,
        min_repositories=3,
    )
    os.environ["FORGE_REALREPO"] = str(root / "realrepo")
    try:
        split = fd.build_realrepo(spec, quiet=True)
    finally:
        del os.environ["FORGE_REALREPO"]
    assert split == root / "realrepo" / "split"
    return spec, root / "realrepo"


def test_the_tier_is_frozen_with_each_repository_in_one_split(tier) -> None:
    spec, folder = tier
    splits = {s: fd.read_split_tasks(folder / "split", s) for s in ("train", "validation", "test")}
    assert {s: len(t) for s, t in splits.items()} == {"train": 2, "validation": 1, "test": 1}
    owner = {}
    for split, tasks in splits.items():
        for task in tasks:
            assert owner.setdefault(task.repository, split) == split  # one split per repository
            assert (folder / "split" / "tasks" / task.id / "task.toml").is_file()
    assert fd.verify_task_set(str(folder / "split")).violations == []
    built = json.loads((folder / "tier.json").read_text())
    assert built["fingerprint"] == spec.fingerprint()
    assert fd.realrepo_ready(spec, None) is False  # FORGE_REALREPO is not set here


def test_every_entry_point_finds_the_built_tier(tier, monkeypatch, tmp_path: Path, capsys) -> None:
    spec, folder = tier
    monkeypatch.setenv("FORGE_REALREPO", str(folder))
    monkeypatch.setattr(_tier, "REALREPO_TIER", spec)
    from forge_rollout import resolve_split, resolve_tasks

    test_ids = [t.id for t in fd.read_split_tasks(folder / "split", "test")]
    assert [t.name for t in resolve_tasks("realrepo:test")] == test_ids
    assert [t.name for t in resolve_split("realrepo", "test")] == test_ids
    assert len(resolve_tasks("realrepo")) == 4
    assert fd.verify_task_set(fd.ensure_task_set("realrepo")).violations == []
    monkeypatch.setattr(_command, "REALREPO_TIER", spec)
    assert main(["realrepo", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(folder / "split")
    env = {**os.environ, "FORGE_REALREPO": str(folder)}
    oracle = subprocess.run(
        [str(FORGE_SANDBOX), "oracle", "realrepo", "--out", str(tmp_path / "job")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert oracle.returncode == 0 and "4 trial(s), 4 as expected (reward 1)" in oracle.stderr


def test_a_changed_tier_spec_is_not_ready_and_path_names_the_build(tier, monkeypatch, capsys):
    spec, folder = tier
    monkeypatch.setenv("FORGE_REALREPO", str(folder))
    changed = spec.model_copy(update={"seed": 8})
    assert fd.realrepo_ready(spec) and not fd.realrepo_ready(changed)
    monkeypatch.setattr(_command, "REALREPO_TIER", changed)
    assert main(["realrepo", "path"]) == 1
    assert "fix: forge-data realrepo build" in capsys.readouterr().err
