"""cgroup detection and drivers. The v2 driver runs against a fake cgroupfs folder (this
machine is v1); the v1 driver runs for real in the isolation tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from forge_sandbox import CgroupLimits, SandboxUnavailableError, detect_cgroups
from forge_sandbox.local import _cgroup_detect as detect
from forge_sandbox.local import _cgroups as cg

HYBRID = """\
25 1 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids
33 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 25 0:30 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
35 25 0:31 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
"""

LIMITS = CgroupLimits(memory_bytes=256 << 20, pids_max=64, cpu_quota_us=50_000)


def test_parse_mountinfo_hybrid() -> None:
    v1, v2 = detect.parse_mountinfo(HYBRID)
    assert v1["memory"] == Path("/sys/fs/cgroup/memory")
    assert v1["cpu"] == v1["cpuacct"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert v1["freezer"] == Path("/sys/fs/cgroup/freezer")
    assert v2 == [Path("/sys/fs/cgroup/unified")]


def test_parse_mountinfo_unescapes_spaces() -> None:
    v1, v2 = detect.parse_mountinfo("1 1 0:1 / /a\\040b rw - cgroup2 cgroup2 rw\n")
    assert v2 == [Path("/a b")] and v1 == {}


def _fake_v2(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "cgroup2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma\n")
    (root / "cgroup.subtree_control").write_text("")
    return root, f"40 1 0:40 / {root} rw,nosuid - cgroup2 cgroup2 rw\n"


def test_v2_chosen_when_unified_has_the_controllers(tmp_path: Path) -> None:
    _root, mountinfo = _fake_v2(tmp_path)
    driver = detect_cgroups(mountinfo + HYBRID.replace("/sys/fs", str(tmp_path / "none")))
    assert driver.version == 2


def test_v1_chosen_on_a_hybrid_host_whose_unified_mount_has_no_controllers(tmp_path) -> None:
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("\n")
    mountinfo = HYBRID.replace("/sys/fs/cgroup/unified", str(unified))
    mountinfo = mountinfo.replace("/sys/fs/cgroup/", str(tmp_path) + "/")
    for name in ("memory", "pids", "cpu,cpuacct", "freezer"):
        (tmp_path / name).mkdir()
    driver = detect_cgroups(mountinfo)
    assert driver.version == 1
    assert sorted(driver.root.paths) == ["cpu", "freezer", "memory", "pids"]


def test_v2_driver_writes_limits_and_kills(tmp_path: Path, monkeypatch) -> None:
    root, mountinfo = _fake_v2(tmp_path)
    driver = detect_cgroups(mountinfo, parent="forge-test")
    group = driver.create("sbx-1-ab", LIMITS)
    base = root / "forge-test" / "sbx-1-ab"
    assert (root / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (root / "forge-test" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (base / "memory.max").read_text() == str(256 << 20)
    assert (base / "pids.max").read_text() == "64"
    assert (base / "cpu.max").read_text() == "50000 100000"
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids"
    leaf = group.child("exec-1")
    assert leaf.procs_files == [base / "exec-1" / "cgroup.procs"]
    (base / "exec-1" / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert leaf.oom_kills() == 1
    (base / "exec-1" / "cgroup.kill").write_text("")
    (base / "exec-1" / "cgroup.procs").write_text("")
    leaf.kill()
    assert (base / "exec-1" / "cgroup.kill").read_text() == "1"
    assert driver.names() == ["sbx-1-ab"]
    monkeypatch.setattr(cg, "_rmdir", lambda path: shutil.rmtree(path, ignore_errors=True))
    group.remove()
    assert not base.exists()


def test_v2_kill_without_cgroup_kill_freezes(tmp_path: Path) -> None:
    _root, mountinfo = _fake_v2(tmp_path)
    group = detect_cgroups(mountinfo).create("sbx-2-cd", LIMITS)
    group.kill()  # no process listed: returns at once, never freezing for nothing
    assert not (group.path / "cgroup.freeze").exists()


def test_v2_swap_is_disabled_when_the_file_exists(tmp_path: Path) -> None:
    root, mountinfo = _fake_v2(tmp_path)
    base = root / "forge-sandbox" / "sbx-3-ef"
    base.mkdir(parents=True)
    (base / "memory.swap.max").write_text("max")
    detect_cgroups(mountinfo).create("sbx-3-ef", LIMITS)
    assert (base / "memory.swap.max").read_text() == "0"


def test_detection_failure_says_expected_found_fix(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailableError) as info:
        detect_cgroups("1 1 0:1 / /proc rw - proc proc rw\n")
    text = str(info.value)
    assert "cgroups.controllers" in text and "expected" in text and "fix:" in text


def test_sweep_stale_removes_only_dead_owners(tmp_path: Path, monkeypatch) -> None:
    _root, mountinfo = _fake_v2(tmp_path)
    driver = detect_cgroups(mountinfo)
    driver.create(f"sbx-{os.getpid()}-aa", LIMITS)
    driver.create("sbx-999999999-bb", LIMITS)  # no such pid
    driver.create("unrelated", LIMITS)
    monkeypatch.setattr(cg, "_rmdir", lambda path: shutil.rmtree(path, ignore_errors=True))
    assert detect.sweep_stale(driver) == ["sbx-999999999-bb"]
    assert driver.names() == [f"sbx-{os.getpid()}-aa", "unrelated"]


def test_pids_limit_hits_read_the_forking_cgroups_own_counter(tmp_path: Path) -> None:
    """v1 and v2 before Linux 6.15: `pids.events` of the leaf; v2 since: `pids.events.local`
    (its `pids.events` then counts limits hit in its subtree, not its refused forks)."""
    leaf = tmp_path / "v2-leaf"
    leaf.mkdir()
    (leaf / "pids.events").write_text("max 0\n")
    assert cg.CgroupV2(leaf).pids_limit_hits() == 0
    (leaf / "pids.events").write_text("max 3\n")
    assert cg.CgroupV2(leaf).pids_limit_hits() == 3
    (leaf / "pids.events.local").write_text("max 5\n")
    assert cg.CgroupV2(leaf).pids_limit_hits() == 5
    v1 = tmp_path / "pids" / "leaf"
    v1.mkdir(parents=True)
    (v1 / "pids.events").write_text("max 2\n")
    assert cg.CgroupV1({"pids": v1, "memory": tmp_path}).pids_limit_hits() == 2
