import shutil

import pytest

from forge_gates import (
    check_executables,
    check_free_disk,
    check_gpus,
    check_host_memory,
    check_package_versions,
    free_disk_gib,
    gpu_count,
    hint_spec,
    host_memory_gib,
    load_spec,
    preflight,
)


def test_free_disk(tmp_path):
    free = free_disk_gib(tmp_path)
    assert free == pytest.approx(shutil.disk_usage(tmp_path).free / 1024**3, rel=0.01)
    assert check_free_disk(tmp_path, 0) == []
    (v,) = check_free_disk(tmp_path / "not" / "yet", free + 1e6)
    assert v.rule == "preflight.disk" and "GiB free" in v.found


def test_gpus_zero_needed_is_fine_and_missing_gpus_reported():
    assert gpu_count() >= 0
    assert check_gpus(0, available=0) == []
    (v,) = check_gpus(5, available=0)
    assert v.expected.startswith(">= 5") and v.found == "0 GPU(s)" and "local" in v.fix


def test_memory():
    assert host_memory_gib() > 0
    assert check_host_memory(1, available=2) == []
    assert check_host_memory(64, available=2)[0].found == "2.00 GiB"


def test_executables_name_install_command():
    assert check_executables(["sh"]) == []
    (v,) = check_executables(["definitely-not-a-tool-xyz"])
    assert v.found == "not found"


def test_missing_bwrap_names_the_install_command(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    (v,) = check_executables(["bwrap"])
    assert v.rule == "preflight.executable.bwrap" and v.fix == "apt-get install -y bubblewrap"


def test_package_versions():
    assert check_package_versions({"pydantic": ">=2.0"}) == []
    (v,) = check_package_versions({"pydantic": "==1.0"})
    assert v.expected == "pydantic==1.0" and v.found.startswith("pydantic 2.")
    assert check_package_versions({"no-such-package-xyz": ">=1"})[0].found == "not installed"
    with pytest.raises(ValueError, match="expected a PEP 440 version specifier"):
        check_package_versions({"pydantic": "~2"})


def test_local_version_label_ignored(monkeypatch):
    from importlib import metadata

    monkeypatch.setattr(metadata, "version", lambda name: "2.13.0+cpu")
    assert check_package_versions({"torch": "==2.13.0"}) == []


def test_preflight_for_specs(tmp_path):
    assert preflight(load_spec("smoke-local"), tmp_path) == []
    gpu_rules = {v.rule for v in preflight(load_spec("soak-5gpu"), tmp_path)}
    if gpu_count() < 5:
        assert "preflight.gpus" in gpu_rules


def test_hints_warn_only():
    from forge_gates import read_config

    assert hint_spec(load_spec("smoke-local")) == []
    assert hint_spec(load_spec("p0-64k")) == []  # concurrency 8 <= max_num_seqs 10
    data = read_config("smoke-local")
    data["resources"]["concurrency"] = 8
    data["ppo"]["kl_beta"] = 0.1
    hints = hint_spec(load_spec(data))  # a valid spec: hints never refuse it
    assert len(hints) == 2
    assert any("max_num_seqs 4" in h for h in hints) and any("KL off" in h for h in hints)
