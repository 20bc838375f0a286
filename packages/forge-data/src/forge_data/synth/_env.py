"""The environment a synthesized task carries: `<workspace>/.venv`, a virtual environment of the
sandbox's own Python (the local sandbox binds the host's /usr read-only, so a venv over
/usr/bin/python3 runs there) holding the project's runtime and test dependencies, never the
project itself: a `.pth` file puts `/workspace` (or `/workspace/src`) on the path, and a small
dist-info answers `importlib.metadata.version(<project>)`, as an editable install would.

Installed at synth time (the network allowed then, never after) with uv, else pip. Made
relocatable and deterministic: console scripts start `/workspace/.venv/bin/python`, no
`activate` scripts (they hold the synth-time path), no `command` line in pyvenv.cfg, no bytecode.
The installed versions are pinned in `requirements.txt` beside the workspace, from which the
task's Dockerfile builds the same environment.
"""

from __future__ import annotations

import base64
import configparser
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from forge_data._errors import DataError
from forge_data.synth._source import Project, normalize

SANDBOX_WORKSPACE = "/workspace"
VENV = ".venv"
TEST_EXTRAS = ("test", "tests", "testing")
REQUIREMENT_FILES = (
    "requirements-test.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "test_requirements.txt",
    "requirements-tests.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "requirements/testing.txt",
    "tests/requirements.txt",
)
INSTALL_TIMEOUT_S = 900
TRAMPOLINE = b"'''exec' "  # uv's and pip's long-path script header, line 2


def _installer() -> list[str]:
    """uv (beside this Python, else on PATH), else this Python's pip."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found:
        return [found, "pip"]
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "pip"]
    raise DataError(
        "synth",
        expected="uv or pip to install the project's test dependencies",
        found=f"neither beside {sys.executable} nor on PATH",
        fix="pip install 'forge-data[synth]' (it brings uv)",
    )


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise DataError(
            "synth",
            expected=f"{what} within {INSTALL_TIMEOUT_S} s",
            found="it timed out",
            fix="check the network to the index",
        ) from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-12:])
        raise DataError(
            "synth",
            expected=f"{what} to succeed",
            found=f"`{' '.join(argv[:6])} ...` exited {done.returncode}:\n{tail}",
            fix="a project whose dependencies cannot install here cannot be synthesized; "
            "check its requirements (and the network to the index)",
        )
    return done.stdout


def test_extras(root: Path) -> list[str]:
    """The extras that name test dependencies (pyproject, setup.cfg, setup.py)."""
    found: set[str] = set()
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            found |= set(data.get("project", {}).get("optional-dependencies", {}))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            pass
    setup_cfg = root / "setup.cfg"
    if setup_cfg.is_file():
        parser = configparser.ConfigParser()
        try:
            parser.read(setup_cfg, encoding="utf-8")
            if parser.has_section("options.extras_require"):
                found |= set(parser.options("options.extras_require"))
        except configparser.Error:
            pass
    setup_py = root / "setup.py"
    if setup_py.is_file():
        text = setup_py.read_text(encoding="utf-8", errors="replace")
        if "extras_require" in text:
            found |= set(re.findall(r"""["'](tests?|testing)["']\s*:""", text))
    return sorted(found & set(TEST_EXTRAS))


def dependency_group_requirements(root: Path) -> list[str]:
    """PEP 735 `[dependency-groups]` test/tests/testing/dev entries (plain strings only)."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return []
    try:
        groups = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("dependency-groups", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    for name in (*TEST_EXTRAS, "dev"):
        entries = groups.get(name)
        if isinstance(entries, list):
            return [entry for entry in entries if isinstance(entry, str)]
    return []


def package_root(root: Path) -> str:
    """`/workspace/src` for a src layout, else `/workspace`."""
    src = root / "src"
    if src.is_dir() and any(
        (p / "__init__.py").is_file() or p.suffix == ".py" for p in src.iterdir()
    ):
        return f"{SANDBOX_WORKSPACE}/src"
    return SANDBOX_WORKSPACE


def _site_packages(venv: Path) -> Path:
    (found,) = sorted((venv / "lib").glob("python3*/site-packages"))
    return found


def _rehash_scripts(record: Path) -> None:
    """RECORD rows of the venv's scripts hold the synth-time shebang's hash: recompute them."""
    rows = []
    for line in record.read_text(encoding="utf-8").splitlines():
        path = line.rsplit(",", 2)[0]
        target = (record.parent.parent / path).resolve() if path.startswith("../") else None
        if target is not None and target.is_file() and not target.is_symlink():
            data = target.read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            line = f"{path},sha256={digest},{len(data)}"
        rows.append(line)
    record.write_text("\n".join(rows) + "\n", encoding="utf-8")


def _relocate(venv: Path) -> None:
    """Make the venv run at /workspace/.venv and byte-identical for the same installs."""
    for script in (venv / "bin").iterdir():
        if script.name.startswith("activate") or script.name.startswith("Activate"):
            script.unlink()
            continue
        if script.is_symlink() or not script.is_file():
            continue
        lines = script.read_bytes().split(b"\n")
        shebang = f"#!{SANDBOX_WORKSPACE}/{VENV}/bin/python".encode()
        if lines[0] == b"#!/bin/sh" and lines[1:2] and lines[1].startswith(TRAMPOLINE):
            # a path past the kernel's shebang limit: the installers' /bin/sh trampoline
            script.write_bytes(b"\n".join([shebang, *lines[3:]]))
        elif lines[0].startswith(b"#!") and b"python" in lines[0]:
            script.write_bytes(b"\n".join([shebang, *lines[1:]]))
    for record in sorted(_site_packages(venv).glob("*.dist-info/RECORD")):
        _rehash_scripts(record)
    config = venv / "pyvenv.cfg"
    kept = [line for line in config.read_text().splitlines() if not line.startswith("command")]
    config.write_text("\n".join(kept) + "\n")
    for cache in sorted(venv.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache, ignore_errors=True)
    for name in (".lock", "CACHEDIR.TAG", ".gitignore"):
        (venv / name).unlink(missing_ok=True)


def build_env(project: Project, workspace: Path, python: str, pytest: str = "pytest") -> list[str]:
    """Install the project's runtime and test dependencies (and `pytest`, a requirement:
    an older one for a suite written for it) into `workspace/.venv`; return the pinned
    requirements (`name==version`, sorted)."""
    venv = workspace.absolute() / VENV  # the installer runs in the project's folder
    if not Path(python).is_file():
        raise DataError(
            "synth",
            expected=f"the sandbox's Python at {python} (the local sandbox runs the host's /usr)",
            found="no such file",
            fix="give --python the interpreter the sandbox finds first on PATH "
            "(/usr/local/bin/python3 or /usr/bin/python3)",
        )
    _run([python, "-m", "venv", "--without-pip", str(venv)], "creating the task's venv")
    venv_python = str(venv / "bin" / "python")
    installer = _installer()

    def pip(sub: str, *args: str) -> list[str]:
        if installer[0].endswith("uv"):
            return [*installer, sub, "--python", venv_python, *args]
        return [*installer, "--python", venv_python, sub, *args]

    extras = test_extras(project.root)
    wanted = [f"{project.root}[{','.join(extras)}]" if extras else str(project.root), pytest]
    wanted += dependency_group_requirements(project.root)
    for name in REQUIREMENT_FILES:
        if (project.root / name).is_file():
            wanted += ["-r", str(project.root / name)]
    uv = installer[0].endswith("uv")
    flags = ["--link-mode", "copy", "--no-cache"] if uv else ["--no-compile"]
    _run(pip("install", *flags, *wanted), "installing the test dependencies", cwd=project.root)
    _run(pip("uninstall", *([] if uv else ["-y"]), project.name), "removing the project")
    freeze = _run(pip("freeze"), "listing the installed versions")
    pins = sorted(line.strip() for line in freeze.splitlines() if "==" in line)
    site = _site_packages(venv)
    (site / "_forge_project.pth").write_text(package_root(project.root) + "\n")
    dist_info = site / f"{normalize(project.name).replace('-', '_')}-{project.version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project.name}\nVersion: {project.version}\n"
    )
    (dist_info / "INSTALLER").write_text("forge-data synth\n")
    _relocate(venv)
    os.chmod(venv, 0o755)
    return pins
