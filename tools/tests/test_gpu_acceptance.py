"""tools/gpu_acceptance.py cannot rot: its `--dry-run` runs the same code on the CPU with a tiny
config and writes the report the device run writes; without CUDA it refuses, saying what to do;
its docstring's wheel list matches the lock."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import gpu_acceptance
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert gpu_acceptance.main(["--dry-run", "--out", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["schema_version"] == "forge-ppo/gpu-acceptance@1"
    assert report["dry_run"] is True and report["errors"] == []
    cases = {(r["role"], r["tokens"], r["entropy_coeff"]) for r in report["results"]}
    expected = {(role, t, 0.0) for t in gpu_acceptance.DRY_BUDGETS for role in ("actor", "critic")}
    assert cases == expected | {("actor", max(gpu_acceptance.DRY_BUDGETS), 0.01)}
    for result in report["results"]:
        assert result["micro_batches"] == 1  # two rows of half the budget: one micro-batch
        assert result["measured"]["seconds"] >= 0  # no CUDA: no memory figures
        predicted = result["predicted"]
        assert predicted["peak_gb"] > predicted["torch_peak_gb"] > 0
        assert {"parameters", "activations", "colocated_model", "runtime"} <= set(
            predicted["parts"]
        )
        assert ("logits" in predicted["parts"]) is (result["role"] == "actor")
    assert report["summary"]["cases"] == len(report["results"])


def test_without_cuda_it_refuses_with_the_fix(tmp_path: Path, capsys) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    out = tmp_path / "report.json"
    assert gpu_acceptance.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "expected a CUDA GPU" in err and "found none" in err
    assert "fix: run it on the device machine" in err and "--dry-run" in err
    assert not out.exists()


def test_the_docstring_carries_the_locked_wheels_and_the_device_command() -> None:
    doc = gpu_acceptance.__doc__ or ""
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    versions = {p["name"]: p["version"] for p in lock["package"]}
    wheels = re.findall(r"([a-z-]+)==([0-9.]+)", doc)
    assert {name for name, _ in wheels} == {
        "pydantic",
        "pydantic-core",
        "annotated-types",
        "typing-inspection",
        "typing-extensions",
        "orjson",
    }
    assert all(versions[name] == version for name, version in wheels), wheels
    assert (
        'carry [".whl"]' in doc and "tools/gpu_acceptance.py --out $OUT/gpu_acceptance.json" in doc
    )
