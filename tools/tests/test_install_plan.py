"""tools/install_plan.py: the torch choice in each machine case, from the exported lock lines.

Nothing is downloaded or installed: the plan is a pure function of the lines and the facts.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tomllib
import types
from importlib import metadata
from pathlib import Path

import install_plan as ip
import pytest

ROOT = Path(__file__).resolve().parents[2]
CUDA = [
    "cuda-bindings==13.5.0 ; python_full_version < '3.15' and sys_platform == 'linux'",
    "cuda-pathfinder==1.9.1 ; python_full_version < '3.15' and sys_platform == 'linux'",
    "cuda-toolkit==13.0.3.0 ; sys_platform == 'linux'",
    "nvidia-cublas==13.1.1.3 ; sys_platform == 'linux'",
    "nvidia-cudnn-cu13==9.20.0.48 ; sys_platform == 'linux'",
    "nvidia-nccl-cu13==2.29.7 ; sys_platform == 'linux'",
    "triton==3.7.1 ; python_full_version < '3.15' and sys_platform == 'linux'",
]
OTHERS = ["filelock==3.20.0", "numpy==2.3.5", "sympy==1.14.0", "typing-extensions==4.15.0"]
TORCH = "torch==2.13.0"
LINES = sorted([*CUDA, *OTHERS, TORCH])
WHEEL = "/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
CPU_BOX = ip.Machine(python_tag="cp311", platform="linux", machine="x86_64")
WHEEL_BOX = ip.Machine(
    python_tag="cp311", platform="linux", machine="x86_64", find_links=("/wheels",), wheels=(WHEEL,)
)
GPU_BOX = ip.Machine(
    python_tag="cp311", platform="linux", machine="x86_64", gpus=("GPU 0: NVIDIA H200 (UUID: x)",)
)


def _installed(plan: ip.Plan) -> list[str]:
    return [r for step in plan.steps for r in step.requirements]


def _cuda_in(plan: ip.Plan) -> list[str]:
    return [r for r in _installed(plan) if ip.is_cuda(ip.requirement_name(r))]


def test_case_a_cpu_wheel_offered_installs_that_file_and_no_cuda_wheel():
    plan = ip.plan_install(LINES, WHEEL_BOX)
    assert (plan.torch, plan.source) == ("cpu", WHEEL)
    pinned, torch = plan.steps
    assert torch.requirements == (WHEEL,) and _cuda_in(plan) == []
    assert sorted(pinned.requirements) == sorted(OTHERS)
    assert pinned.args == ("--find-links", "/wheels")  # the folder stays a source for the rest
    for step in plan.steps:  # the ambient variables never decide silently
        assert step.env == {"UV_FIND_LINKS": None, "PIP_FIND_LINKS": None}
    assert "the wheel matches" in plan.reason and plan.uninstall == ()


def test_case_b_gpu_machine_installs_the_locked_torch_with_every_cuda_wheel():
    plan = ip.plan_install(LINES, GPU_BOX)
    assert (plan.torch, plan.source) == ("cuda", "PyPI (the lock)")
    torch = plan.steps[-1]
    assert sorted(torch.requirements) == sorted([TORCH, *CUDA])
    assert "--find-links" not in torch.args and "--index-url" not in torch.args
    assert torch.env["UV_FIND_LINKS"] is None and "1 GPU" in plan.reason


def test_case_b_wins_over_an_offered_cpu_wheel_and_says_so():
    machine = ip.Machine(**{**vars(GPU_BOX), "find_links": ("/wheels",), "wheels": (WHEEL,)})
    plan = ip.plan_install(LINES, machine)
    assert plan.torch == "cuda" and "FORGE_TORCH=cpu uses it" in plan.reason
    assert WHEEL not in _installed(plan)


def test_case_c_cpu_machine_without_wheel_takes_torch_alone_from_the_cpu_index():
    plan = ip.plan_install(LINES, CPU_BOX)
    assert (plan.torch, plan.source) == ("cpu", ip.CPU_INDEX)
    pinned, torch = plan.steps
    assert torch.requirements == (TORCH,) and torch.args == ("--index-url", ip.CPU_INDEX)
    assert "--index-url" not in pinned.args and _cuda_in(plan) == []
    assert "FORGE_TORCH=cuda" in torch.fix and "PIP_FIND_LINKS" in torch.fix
    assert "no torch-2.13.0+cpu wheel for cp311 linux x86_64" in plan.reason
    assert "0.19 GB" in plan.describe() and "FORGE_TORCH" in plan.describe()


@pytest.mark.parametrize(
    ("machine", "forge_torch", "torch", "source"),
    [
        (GPU_BOX, "cpu", "cpu", ip.CPU_INDEX),
        (WHEEL_BOX, "cuda", "cuda", "PyPI (the lock)"),
        (CPU_BOX, "cuda", "cuda", "PyPI (the lock)"),
        (GPU_BOX, " AUTO ", "cuda", "PyPI (the lock)"),
        (WHEEL_BOX, "", "cpu", WHEEL),
    ],
)
def test_forge_torch_overrides_the_machine(machine, forge_torch, torch, source):
    plan = ip.plan_install(LINES, ip.Machine(**{**vars(machine), "forge_torch": forge_torch}))
    assert (plan.torch, plan.source) == (torch, source)
    if forge_torch.strip() in ("cpu", "cuda"):
        assert plan.reason.startswith(f"FORGE_TORCH={forge_torch}")
    assert (_cuda_in(plan) != []) == (torch == "cuda")


def test_unknown_override_and_a_lock_without_torch_are_refused():
    with pytest.raises(ip.PlanError, match=r"auto\|cpu\|cuda; found 'gpu'"):
        ip.plan_install(LINES, ip.Machine(**{**vars(CPU_BOX), "forge_torch": "gpu"}))
    with pytest.raises(ip.PlanError, match="one pinned torch line"):
        ip.plan_install(OTHERS, CPU_BOX)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl", "built for cp312"),
        ("torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "the lock pins 2.13.0"),
        ("torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl", "not a +cpu build"),
        ("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", "not a +cpu build"),
        ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_aarch64.whl", "runs linux x86_64"),
        ("torch-2.13.0+cpu-cp311-cp311-win_amd64.whl", "runs linux x86_64"),
    ],
)
def test_a_wheel_for_another_interpreter_or_version_is_not_used(name, why):
    machine = ip.Machine(**{**vars(CPU_BOX), "find_links": ("/w",), "wheels": (f"/w/{name}",)})
    assert why in (ip.cpu_wheel_problem(f"/w/{name}", "2.13.0", machine) or "")
    plan = ip.plan_install(LINES, machine)
    assert (
        plan.source == ip.CPU_INDEX and f"rejected: {name} (" in plan.reason and why in plan.reason
    )


def test_other_matching_wheel_names():
    aarch = ip.Machine(python_tag="cp311", platform="linux", machine="aarch64")
    assert (
        ip.cpu_wheel_problem(
            "torch-2.13.0+cpu-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
            "2.13.0",
            aarch,
        )
        is None
    )
    assert ip.cpu_wheel_problem(WHEEL.replace("+cpu", "+cpu.cxx11.abi"), "2.13.0", CPU_BOX) is None


def test_switching_builds_in_a_reused_venv_reinstalls_torch():
    # a CUDA torch left by an earlier run (or the old filter: CUDA torch without its libraries)
    plan = ip.plan_install(LINES, ip.Machine(**{**vars(WHEEL_BOX), "installed_torch": "2.13.0"}))
    assert plan.steps[-1].args == ("--reinstall-package", "torch")
    assert set(plan.uninstall) == {ip.requirement_name(line) for line in CUDA}
    # the CPU build already there: nothing to redo
    same = ip.plan_install(
        LINES, ip.Machine(**{**vars(WHEEL_BOX), "installed_torch": "2.13.0+cpu"})
    )
    assert same.steps[-1].args == () and same.uninstall == ()
    # CPU build there, CUDA wanted
    gpu = ip.plan_install(LINES, ip.Machine(**{**vars(GPU_BOX), "installed_torch": "2.13.0+cpu"}))
    assert gpu.steps[-1].args == ("--reinstall-package", "torch") and gpu.uninstall == ()


def test_off_linux_the_locked_torch_is_installed_and_cuda_is_refused():
    mac = ip.Machine(python_tag="cp311", platform="darwin", machine="arm64")
    plan = ip.plan_install(LINES, mac)
    assert plan.torch == "cpu" and plan.steps[-1].requirements == (TORCH,)
    with pytest.raises(ip.PlanError, match="CUDA wheels for Linux only; found darwin"):
        ip.plan_install(LINES, ip.Machine(**{**vars(mac), "forge_torch": "cuda"}))


def test_the_cuda_filter_matches_the_real_lock():
    """Every package torch pulls on Linux only (the CUDA build) and nothing else is CUDA."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    packages = {p["name"]: p for p in lock["package"]}
    todo = [
        (d["name"], tuple(d.get("extra", ())))
        for d in packages["torch"]["dependencies"]
        if "sys_platform == 'linux'" in d.get("marker", "")
    ]
    closure: set[str] = set()
    while todo:
        name, extras = todo.pop()
        closure.add(name)
        deps = list(packages[name].get("dependencies", []))
        for extra in extras:
            deps += packages[name].get("optional-dependencies", {}).get(extra, [])
        todo += [(d["name"], tuple(d.get("extra", ()))) for d in deps if d["name"] not in closure]
    assert closure, "expected PyPI's torch to pull CUDA wheels on Linux"
    assert closure == {name for name in packages if ip.is_cuda(name)}


def test_machine_facts_reads_find_links_folders_and_nvidia_smi(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / Path(WHEEL).name).write_bytes(b"")
    (wheels / "numpy-2.3.5-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-1)'\necho 'MIG 1g (UUID: x)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    probe = {"python_tag": "cp311", "platform": "linux", "machine": "x86_64", "torch": None}
    environ = {"UV_FIND_LINKS": f"{wheels}, https://example.invalid/links", "FORGE_TORCH": "cpu"}
    facts = ip.machine_facts(probe, environ)
    assert facts.find_links == (str(wheels), "https://example.invalid/links")
    assert facts.wheels == (str(wheels / Path(WHEEL).name),)
    assert facts.gpus == ("GPU 0: NVIDIA H200 (UUID: GPU-1)",) and facts.forge_torch == "cpu"
    # PIP_FIND_LINKS (whitespace-separated) only when UV_FIND_LINKS is unset
    assert ip.split_find_links({"PIP_FIND_LINKS": "/a  /b"}) == ("/a", "/b")
    assert ip.split_find_links({"UV_FIND_LINKS": "/u", "PIP_FIND_LINKS": "/p"}) == ("/u",)
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert ip.gpu_lines() == ()


def test_the_interpreter_probe_reports_this_interpreter():
    done = subprocess.run(
        [sys.executable, "-c", ip.INTERPRETER_PROBE], capture_output=True, text=True, check=True
    )
    facts = json.loads(done.stdout)
    assert facts["python_tag"] == f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert (facts["platform"], facts["machine"]) == (sys.platform, platform.machine())
    assert facts["torch"] == metadata.version("torch")  # the session venv has torch


@pytest.mark.parametrize(
    ("cuda", "want", "ok"),
    [(None, "cpu", True), ("13.0", "cpu", False), ("13.0", "cuda", True), (None, "cuda", False)],
)
def test_verify_code_fails_when_the_installed_build_is_not_the_plans(monkeypatch, cuda, want, ok):
    fake = types.SimpleNamespace(
        __version__="2.13.0",
        version=types.SimpleNamespace(cuda=cuda),
        cuda=types.SimpleNamespace(is_available=lambda: False),
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    code = ip.verify_code(ip.Plan(want, "x", "y", ()))
    if ok:
        exec(code, {})
    else:
        with pytest.raises(AssertionError, match=f"expected a {want} torch"):
            exec(code, {})


def test_the_default_export_leaves_every_optional_extra_out_and_sessions_add_theirs():
    """`nox -s tests` installs no optional extra; `engines=True` adds verl only; a session's
    own extra adds just that one; every optional extra is a real extra of the lock."""

    def left_out(args: tuple[str, ...]) -> set[str]:
        return {args[i + 1] for i, arg in enumerate(args) if arg == "--no-extra"}

    assert left_out(ip.EXPORT_ARGS) == {"verl", "smollm2"} == set(ip.OPTIONAL_EXTRAS)
    assert left_out(ip.EXPORT_ARGS_WITH_ENGINES) == {"smollm2"}
    assert left_out(ip.export_args("smollm2")) == {"verl"}
    assert ip.EXPORT_ARGS[:4] == ("--frozen", "--no-hashes", "--all-packages", "--all-extras")
    with pytest.raises(ip.PlanError, match=r"expected optional extras among .*found \['curves'\]"):
        ip.export_args("curves")
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    provided = {
        extra for p in lock["package"] for extra in p.get("metadata", {}).get("provides-extras", [])
    }
    assert set(ip.OPTIONAL_EXTRAS) <= provided
