"""Standalone install: no numpy/torch at run time, fast import, works from a fresh venv."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "torch", "scipy", "statsmodels", "pandas")
PROBE = """
import json, sys, time
t0 = time.perf_counter()
import forge_eval.cli
elapsed = time.perf_counter() - t0
print(json.dumps({"elapsed": elapsed, "modules": sorted(sys.modules)}))
"""


def test_runtime_import_pulls_nothing_heavy() -> None:
    runs = []
    for _ in range(3):  # best of 3: the machine is shared, timings are noisy
        done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                              check=True, timeout=60)  # fmt: skip
        runs.append(json.loads(done.stdout))
    modules = set(runs[0]["modules"])
    assert not {m for m in modules if m.split(".")[0] in HEAVY}, "heavy module imported"
    best = min(r["elapsed"] for r in runs)
    # reported, not asserted: a timed assertion fails on a loaded machine (1.18 s was measured
    # here with four heavy jobs running); what keeps the import fast is the module set above
    print(f"import forge_eval.cli: best of 3 = {best:.3f} s")  # shown with -s / -rA


def test_readme_install_command_installs_every_dependency() -> None:
    """The README's install line and dependency sentence follow pyproject: a clone's
    `pip install packages/forge-gates packages/forge-eval`, never a bare `pip install forge-eval`
    (which would look for forge-gates on an index)."""
    readme = " ".join((PACKAGE / "README.md").read_text().split())
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    names = [dep.split(">")[0].split("=")[0].strip() for dep in project["dependencies"]]
    assert names == ["pydantic", "forge-gates"], f"update the README too: {names}"
    assert "pip install packages/forge-gates packages/forge-eval" in readme
    assert "pip install forge-eval " not in readme
    assert "depends on pydantic and forge-gates" in readme


@pytest.mark.slow
def test_fresh_venv_install_runs_score(tmp_path: Path, harbor: SimpleNamespace) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv not on PATH")
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True,
                   timeout=60)  # fmt: skip
    python = venv / "bin" / "python"
    # forge-eval and the one sibling it needs (forge-gates: pydantic and packaging only)
    gates = PACKAGE.parent / "forge-gates"
    install = [uv, "pip", "install", "-q", "--python", str(python), str(gates), str(PACKAGE)]
    done = subprocess.run([*install, "--offline"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:  # not in uv's cache yet: allow the index once
        done = subprocess.run(install, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"cannot install without network access: {done.stderr[-300:]}")
    listed = subprocess.run([uv, "pip", "list", "--python", str(python), "--format", "json"],
                            capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"forge-eval", "forge-gates", "pydantic"} <= names
    assert not names & {"numpy", "torch", "scipy", "statsmodels", "pandas"}, names
    job = harbor.write_job(tmp_path, "run", harbor.panel_trials({"a"}, ["a", "b", "c"]))
    out = tmp_path / "report.json"
    score = subprocess.run([str(venv / "bin" / "forge-eval"), "score", str(job), "--json",
                            str(out)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert score.returncode == 0, score.stderr
    assert "0.333 [" in score.stdout
    assert json.loads(out.read_text())["panels"][0]["solved"] == 1
