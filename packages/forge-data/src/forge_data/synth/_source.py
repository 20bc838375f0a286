"""Where a synthesized task's project comes from: a PyPI release's sdist (downloaded once through
the index's simple API, sha256-checked, cached), or a local folder or git repository (a user's own
code; no network).

    project = fetch_project("inflection==0.5.1", work_dir, cache_dir)
    project.root         the unpacked tree (never modified afterwards)
    project.repository   "pypi/inflection" (the freeze's repository key) or "local/<name>"
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tomllib
import urllib.request
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from forge_data._errors import DataError

_REQUIREMENT = re.compile(
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*$"
)
_SKIP_DIRS = {
    ".git",
    ".hg",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    "build",
    "dist",
    ".eggs",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
}
DEFAULT_INDEX = "https://pypi.org/simple"


class Project(BaseModel):
    """One project to synthesize tasks from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The distribution name (normalized: lower case, '-').")
    version: str = Field(description="The release, or the local tree's version if it has one.")
    root: Path = Field(description="The project's files (an unpacked sdist or a copy).")
    repository: str = Field(description="`pypi/<name>` or `local/<name>`: the freeze's key.")
    source: str = Field(description="What the user asked for (NAME==VERSION or a path).")
    sha256: str | None = Field(default=None, description="The sdist's sha256 (PyPI only).")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def index_url() -> str:
    """The package index: $FORGE_PYPI_INDEX, $UV_INDEX_URL, $PIP_INDEX_URL, else PyPI."""
    for key in ("FORGE_PYPI_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(key, "").startswith(("http://", "https://")):
            return os.environ[key].rstrip("/")
    return DEFAULT_INDEX


def _sdist_entry(name: str, version: str) -> dict:
    url = f"{index_url()}/{normalize(name)}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.loads(response.read())["files"]
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(
            "synth",
            expected=f"the index's file list of {name} at {url}",
            found=f"{type(exc).__name__}: {exc}",
            fix="check the name and the network (the index is reachable at synth time only); "
            "or give a local folder of the project instead",
        ) from exc
    stem = re.compile(
        rf"^{'[-_.]'.join(re.escape(part) for part in normalize(name).split('-'))}-"
        rf"{re.escape(version)}"
        r"\.(tar\.gz|zip)$",
        re.I,
    )
    for entry in files:
        if stem.match(str(entry.get("filename", ""))) and not entry.get("yanked"):
            return entry
    raise DataError(
        "synth",
        expected=f"an sdist of {name}=={version} (a .tar.gz or .zip) on {index_url()}",
        found=f"{len(files)} files, none of them that sdist",
        fix="check the version (`pip index versions NAME`); a wheel-only release has no tests "
        "to synthesize from: give a local checkout of its repository instead",
    )


def download_sdist(name: str, version: str, cache: Path) -> tuple[Path, str]:
    """(the cached sdist, its sha256); downloaded once, checked against the index's hash."""
    folder = cache / "sdists" / f"{normalize(name)}-{version}"
    done = sorted(folder.glob("*.tar.gz")) + sorted(folder.glob("*.zip"))
    if done:
        return done[0], hashlib.sha256(done[0].read_bytes()).hexdigest()
    entry = _sdist_entry(name, version)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / entry["filename"]
    partial = folder / (entry["filename"] + ".part")
    with urllib.request.urlopen(entry["url"], timeout=300) as response:
        partial.write_bytes(response.read())
    digest = hashlib.sha256(partial.read_bytes()).hexdigest()
    wanted = (entry.get("hashes") or {}).get("sha256")
    if wanted and digest != wanted:
        partial.unlink()
        raise DataError(
            "synth",
            expected=f"{entry['filename']} with sha256 {wanted}",
            found=f"sha256 {digest}",
            fix="retry (a broken download); if it persists, the index serves another file",
        )
    os.replace(partial, target)
    return target, digest


def _unpack(archive: Path, into: Path) -> Path:
    """The sdist's single top folder, unpacked into `into` (members outside it refused)."""
    into.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zipped:
            for member in zipped.namelist():
                if member.startswith("/") or ".." in Path(member).parts:
                    raise DataError(
                        "synth",
                        expected="sdist members inside its folder",
                        found=member,
                        fix="use another release",
                    )
            zipped.extractall(into)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    tops = [p for p in into.iterdir() if p.is_dir()]
    return tops[0] if len(tops) == 1 else into


def _local_files(folder: Path) -> list[Path]:
    """The files of a local project: git's tracked files in a repository, else every file
    outside caches and environments."""
    if (folder / ".git").exists():
        command = ["git", "-C", str(folder), "ls-files", "-z", "--cached", "--others"]
        listed = subprocess.run([*command, "--exclude-standard"], capture_output=True, check=False)
        if listed.returncode == 0:
            return sorted(Path(p) for p in listed.stdout.decode().split("\0") if p)
    files = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not (set(relative.parts[:-1]) & _SKIP_DIRS) and not path.is_symlink():
            files.append(relative)
    return files


def _copy_local(folder: Path, into: Path) -> Path:
    target = into / folder.name
    for relative in _local_files(folder):
        source = folder / relative
        if source.is_file() and not source.is_symlink() and not (set(relative.parts) & _SKIP_DIRS):
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / relative)
    return target


def declared_name_version(root: Path) -> tuple[str | None, str | None]:
    """(name, version) from PKG-INFO, pyproject.toml or setup.cfg, when they say."""
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        text = pkg_info.read_text(encoding="utf-8", errors="replace")
        name = re.search(r"^Name:\s*(\S+)", text, re.M)
        version = re.search(r"^Version:\s*(\S+)", text, re.M)
        if name:
            return name[1], version[1] if version else None
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            project = {}
        if project.get("name"):
            return str(project["name"]), str(project.get("version") or "") or None
    setup_cfg = root / "setup.cfg"
    if setup_cfg.is_file():
        text = setup_cfg.read_text(encoding="utf-8", errors="replace")
        name = re.search(r"^name\s*=\s*(\S+)", text, re.M)
        if name:
            version = re.search(r"^version\s*=\s*([0-9][^\s]*)", text, re.M)
            return name[1], version[1] if version else None
    return None, None


def fetch_project(source: str, work: Path, cache: Path) -> Project:
    """The project named by `source`, unpacked or copied under `work`."""
    local = Path(source).expanduser()
    if local.is_dir():
        root = _copy_local(local.resolve(), work / "source")
        name, version = declared_name_version(root)
        name = normalize(name or local.resolve().name)
        return Project(
            name=name, version=version or "0", root=root, repository=f"local/{name}", source=source
        )
    match = _REQUIREMENT.match(source)
    if match is None:
        raise DataError(
            "synth",
            expected="SOURCE as NAME==VERSION (a PyPI release) or an existing project folder",
            found=repr(source),
            fix="e.g. forge-data synth inflection==0.5.1 ..., or forge-data synth ./my-project ...",
        )
    name, version = match[1], match[2]
    archive, digest = download_sdist(name, version, cache)
    root = _unpack(archive, work / "source")
    return Project(
        name=normalize(name),
        version=version,
        root=root,
        repository=f"pypi/{normalize(name)}",
        source=source,
        sha256=digest,
    )
