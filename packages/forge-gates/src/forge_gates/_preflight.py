"""Preflight checks: each returns a list of violations (empty = fine); `hint_*` only warn.

They look at the machine, not at the spec: free disk, GPUs, host memory, executables and
installed package versions. `preflight(spec, run_dir)` runs the ones a spec implies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from forge_gates._checks import Violation
from forge_gates._spec import RunSpec
from forge_gates._versions import installed_version, parse_specifier, version_satisfies

GIB = 1024**3
INSTALL_HINTS = {
    "bwrap": "apt-get install -y bubblewrap",
    "nvidia-smi": "install the NVIDIA driver (a GPU machine is needed)",
    "git": "apt-get install -y git",
    "tar": "apt-get install -y tar",
}


def free_disk_gib(path: str | os.PathLike[str]) -> float:
    """Free space (GiB) on the file system holding `path` (or its nearest existing parent)."""
    probe = Path(path).resolve()
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free / GIB


def check_free_disk(path: str | os.PathLike[str], min_gib: float) -> list[Violation]:
    free = free_disk_gib(path)
    if free >= min_gib:
        return []
    return [
        Violation(
            rule="preflight.disk",
            expected=f">= {min_gib:g} GiB free at {path}",
            found=f"{free:.2f} GiB free",
            fix="free space (old checkpoints, caches) or lower checkpoint.min_free_disk_gib",
        )
    ]


def gpu_count() -> int:
    """Number of NVIDIA GPUs `nvidia-smi -L` lists (0 when there is no driver)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def check_gpus(required: int, available: int | None = None) -> list[Violation]:
    """No error when nothing is required (CPU runs); otherwise at least `required` GPUs."""
    have = gpu_count() if available is None else available
    if required <= have:
        return []
    return [
        Violation(
            rule="preflight.gpus",
            expected=f">= {required} GPU(s) (trainer + rollout)",
            found=f"{have} GPU(s)",
            fix="run on a GPU machine, or use a *-local config (trainer_gpus = rollout_gpus = 0)",
        )
    ]


def host_memory_gib() -> float:
    """Available host memory in GiB (MemAvailable from /proc/meminfo)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024 / GIB
    raise RuntimeError("expected MemAvailable in /proc/meminfo; found none (not Linux?)")


def check_host_memory(min_gib: float, available: float | None = None) -> list[Violation]:
    have = host_memory_gib() if available is None else available
    if have >= min_gib:
        return []
    return [
        Violation(
            rule="preflight.memory",
            expected=f">= {min_gib:g} GiB available host memory",
            found=f"{have:.2f} GiB",
            fix="stop other jobs or lower resources.min_host_memory_gib",
        )
    ]


def check_executables(names: Sequence[str]) -> list[Violation]:
    """Each executable must be on PATH; the fix names the install command when known."""
    return [
        Violation(
            rule=f"preflight.executable.{name}",
            expected=f"{name} on PATH",
            found="not found",
            fix=INSTALL_HINTS.get(name, f"install {name}"),
        )
        for name in names
        if shutil.which(name) is None
    ]


def check_package_versions(requirements: Mapping[str, str]) -> list[Violation]:
    """`{"torch": "==2.13.0", "peft": ">=0.17"}`: installed versions must satisfy each (PEP 440)."""
    out = []
    for name, spec in requirements.items():
        parse_specifier(spec)  # a malformed requirement is a programming error: raise now
        have = installed_version(name)
        if have is None:
            out.append(
                Violation(
                    rule=f"preflight.package.{name}",
                    expected=f"{name}{spec}",
                    found="not installed",
                    fix=f"install {name}{spec} (nox does)",
                )
            )
        elif not version_satisfies(have, spec):
            out.append(
                Violation(
                    rule=f"preflight.package.{name}",
                    expected=f"{name}{spec}",
                    found=f"{name} {have}",
                    fix=f"install {name}{spec}",
                )
            )
    return out


def preflight(
    spec: RunSpec, run_dir: str | os.PathLike[str], executables: Sequence[str] = ()
) -> list[Violation]:
    """The machine checks a spec implies: disk at the run folder, GPUs, memory, executables."""
    return [
        *check_free_disk(run_dir, spec.checkpoint.min_free_disk_gib),
        *check_gpus(spec.resources.trainer_gpus + spec.resources.rollout_gpus),
        *check_host_memory(spec.resources.min_host_memory_gib),
        *check_executables(executables),
    ]


def hint_spec(spec: RunSpec) -> list[str]:
    """Warnings that never fail a run, e.g. settings the seed runs found risky."""
    hints = []
    if spec.phase == "smoke" and spec.ppo is not None and spec.ppo.kl_beta > 0:
        hints.append("kl_beta > 0 in a first smoke: the seeds ran the first smoke with KL off")
    if spec.phase == "soak" and spec.agent.max_timeout_ratio > 0.35:
        hints.append(f"agent.max_timeout_ratio {spec.agent.max_timeout_ratio} > 0.35 (seed value)")
    if spec.resources.concurrency > spec.resources.max_num_seqs:
        hints.append(
            f"concurrency {spec.resources.concurrency} > max_num_seqs "
            f"{spec.resources.max_num_seqs}: requests will queue at the server"
        )
    return hints
