"""The facts a run's provenance records, each read without failing and without a heavy import.

Code version (git, read-only: `--no-optional-locks`), package versions (distribution metadata,
never an import), the lock file's hash, the machine (/proc, `platform`, `nvidia-smi`), a
process's peaks (VmHWM, `getrusage`; GPU memory only through a torch this process already
imported and initialised CUDA in: reading it never creates a CUDA context), the folder's size.
Whatever cannot be read is recorded as None with a note, never raised.
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from forge_gates.files._canonical import file_sha256
from forge_gates.ledger._provenance import CodeVersion, Gpu, GpuPeak, LockFile, Machine, ProcessPeak

# the forge packages, then the third-party ones whose versions change results or memory
PACKAGES = (
    "forge-gates", "forge-data", "forge-eval", "forge-sandbox", "forge-rollout", "forge-ppo",
    "torch", "transformers", "peft", "accelerate", "safetensors", "verl", "vllm", "ray",
    "pydantic", "harbor", "mini-swe-agent",
)  # fmt: skip
HERE = Path(__file__).resolve()  # where forge-gates runs from: the clone, or site-packages
TIMEOUT_S = 10.0


def _run(args: list[str], cwd: Path | None = None) -> str | None:
    """stdout of `args` (stripped), or None when it is missing, fails or hangs."""
    try:
        done = subprocess.run(
            args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_version(start: Path = HERE) -> CodeVersion:
    """The git commit of the checkout holding `start` and its dirty flag (tracked files only:
    run folders and caches are untracked), or why there is none."""
    if shutil.which("git") is None:
        return CodeVersion(git=False, commit=None, dirty=None, root=None, note="git not found")
    folder = start if start.is_dir() else start.parent
    git = ["git", "--no-optional-locks", "-C", str(folder)]
    root = _run([*git, "rev-parse", "--show-toplevel"])
    commit = _run([*git, "rev-parse", "HEAD"]) if root else None
    if root is None or commit is None:
        note = f"not a git checkout: {folder}" if root is None else "a repository without commits"
        return CodeVersion(git=False, commit=None, dirty=None, root=root, note=note)
    status = _run([*git, "status", "--porcelain", "--untracked-files=no"])
    if status is None:
        return CodeVersion(git=True, commit=commit, dirty=None, root=root,
                           note="git status failed: dirty flag unknown")  # fmt: skip
    return CodeVersion(git=True, commit=commit, dirty=bool(status), root=root, note=None)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Distribution -> installed version (None: not installed), from metadata only."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def lock_file(start: Path = HERE, root: str | None = None) -> LockFile:
    """The SHA-256 of `uv.lock`: at the checkout's top, else in a folder above `start`."""
    folders = [Path(root)] if root else []
    folders += list((start if start.is_dir() else start.parent).parents)
    for folder in folders:
        path = folder / "uv.lock"
        if path.is_file():
            try:
                return LockFile(path=str(path), sha256=file_sha256(path), note=None)
            except OSError as exc:
                return LockFile(path=str(path), sha256=None, note=f"unreadable: {exc}")
    note = f"no uv.lock above {start.parent} (an installed package, not the workspace)"
    return LockFile(path=None, sha256=None, note=note)


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or "unknown"
    for key in ("model name", "Hardware", "cpu model", "Processor"):
        for line in text.splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key and value.strip():
                return value.strip()
    return platform.processor() or "unknown"


def _meminfo_bytes(key: str = "MemTotal") -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition(":")
            if name == key:
                return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def gpus() -> tuple[list[Gpu], str | None]:
    """Every GPU `nvidia-smi` lists (none without it), and a note when it failed."""
    if shutil.which("nvidia-smi") is None:
        return [], None
    query = "index,name,memory.total,driver_version"
    out = _run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"])
    if out is None:
        return [], "nvidia-smi failed"
    found = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            memory = int(parts[2]) if parts[2].isdigit() else None
            found.append(Gpu(index=int(parts[0]), name=parts[1], memory_total_mib=memory,
                             driver=parts[3] or None))  # fmt: skip
    return found, None


def machine() -> Machine:
    """This machine (CPU, memory, OS, Python, GPUs); CUDA only from a torch already loaded."""
    listed, note = gpus()
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return Machine(
        hostname=socket.gethostname(),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count() or 0,
        cpu_affinity=affinity or os.cpu_count() or 0,
        memory_bytes=_meminfo_bytes(),
        os=platform.platform(),
        kernel=platform.release(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        gpus=listed,
        cuda=str(cuda) if cuda else None,
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        note=note,
    )


def _peak_rss_bytes() -> int | None:
    """This process's peak RSS: VmHWM (/proc/self/status), else ru_maxrss (KiB on Linux)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def children_peak_rss_bytes() -> int | None:
    """The largest peak RSS among this process's reaped children (RUSAGE_CHILDREN)."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= 0:
        return None
    return peak if sys.platform == "darwin" else peak * 1024


def gpu_peaks() -> list[GpuPeak]:
    """Per device this process reserved memory on: torch's peak allocated and reserved bytes.
    Only through a torch already imported with CUDA initialised (no context is ever created)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return []
        peaks = [
            GpuPeak(
                device=i,
                peak_allocated_bytes=int(cuda.max_memory_allocated(i)),
                peak_reserved_bytes=int(cuda.max_memory_reserved(i)),
            )
            for i in range(cuda.device_count())
        ]
    except Exception:  # a broken driver must not fail the run's record
        return []
    return [p for p in peaks if p.peak_reserved_bytes > 0]


def process_peaks(role: str = "main", rank: int | None = None) -> ProcessPeak:
    """This process's peaks: host RSS and, where it used CUDA through torch, GPU memory."""
    return ProcessPeak(
        role=role, rank=rank, pid=os.getpid(), peak_rss_bytes=_peak_rss_bytes(), gpu=gpu_peaks()
    )


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under `folder` (links not followed; vanishing files skipped)."""
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def live_children() -> list[str]:
    """This process's child processes still alive: `pid command` each (from /proc)."""
    me, out = os.getpid(), []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != me:
                continue
            raw = (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip()
            out.append(f"{entry.name} {raw.decode('utf-8', 'replace')[:200]}")
        except (OSError, ValueError, IndexError):
            continue
    return sorted(out)
