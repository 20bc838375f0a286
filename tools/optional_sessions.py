"""What the optional nox sessions (harbor, vllm_cpu, parity, ...) check before and after they
run, so a session that cannot do its work fails with the fix instead of passing silently.

- `find_interpreter("3.12")`: a working Python 3.12: `python3.12` on PATH when it really runs
  (a pyenv shim of an inactive version does not), else the newest pyenv install
  (`$PYENV_ROOT/versions/3.12.*/bin/python3.12`), else None.
- `missing_interpreter(...)`: the error naming where it looked and the fix.
- `skipped_tests(junit_xml)`: the tests a session's pytest run skipped (a session that exists
  to run them must not pass when they did not run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from pathlib import Path

Runner = Callable[[list[str]], bool]


def _runs(argv: list[str]) -> bool:
    """True when `argv` exits 0 within 20 s (a pyenv shim of an inactive version exits 127)."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pyenv_root(environ: Mapping[str, str], home: Path) -> Path:
    return Path(environ.get("PYENV_ROOT") or home / ".pyenv")


def _patch_key(path: Path) -> tuple[int, ...]:
    """`.../versions/3.12.10/bin/python3.12` -> (3, 12, 10), for picking the newest patch."""
    match = re.fullmatch(r"(\d+(?:\.\d+)*)", path.parents[1].name)
    return tuple(int(x) for x in match.group(1).split(".")) if match else ()


def find_interpreter(
    version: str,
    *,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    runs: Runner = _runs,
) -> str | None:
    """A Python `version` ("3.12") that runs here: PATH first, then pyenv's installs."""
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    check = [
        "-c",
        f"import sys; assert sys.version_info[:2] == {tuple(map(int, version.split('.')))}",
    ]
    on_path = shutil.which(f"python{version}", path=environ.get("PATH"))
    if on_path and runs([on_path, *check]):
        return on_path
    versions = pyenv_root(environ, home) / "versions"
    try:
        candidates = sorted(versions.glob(f"{version}.*/bin/python{version}"), key=_patch_key)
    except OSError:  # a PYENV_ROOT this user may not read (another user's, inherited by su)
        candidates = []
    for candidate in reversed(candidates):
        if runs([str(candidate), *check]):
            return str(candidate)
    return None


def missing_interpreter(
    version: str,
    session: str,
    *,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> str:
    """Why `nox -s <session>` cannot run, and the fix (the pyenv versions here, when any)."""
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else home
    root = pyenv_root(environ, home)
    installed = sorted(
        (p.name for p in (root / "versions").glob("*") if p.is_dir()),
        key=lambda name: tuple(int(x) for x in re.findall(r"\d+", name)),
    )
    nox_python = [v for v in installed if v.startswith("3.11.")][-1:] or ["3.11.7"]
    wanted = [v for v in installed if v.startswith(f"{version}.")][-1:] or [f"{version}.1"]
    return (
        f"nox -s {session}: expected a Python {version} interpreter; found none that runs "
        f"(python{version} on PATH, {root}/versions/{version}.*/bin/python{version}; pyenv "
        f"versions here: {installed or 'none'}). Fix: install one (`pyenv install {version}` "
        f"or `uv python install {version}`), or make pyenv's active: "
        f"`PYENV_VERSION={nox_python[0]}:{wanted[0]} nox -s {session}`"
    )


def skipped_tests(junit_xml: Path) -> list[str]:
    """`test id: reason` of every skipped test in a pytest `--junitxml` report."""
    tree = ElementTree.parse(junit_xml)
    out = []
    for case in tree.iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None:
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            out.append(f"{name}: {skipped.get('message', '')}")
    return out
