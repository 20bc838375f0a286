"""tools/optional_sessions.py: optional nox sessions find their interpreter or fail with the
fix, and a pytest run whose tests were skipped is caught (no session passes without running)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import optional_sessions as opt
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _fake_python(path: Path, ok: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\nexit 0\n" if ok else "#!/bin/sh\necho 'pyenv: not active' >&2\nexit 127\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _runs(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def test_a_pyenv_shim_that_does_not_run_is_passed_over_for_the_newest_pyenv_install(
    tmp_path: Path,
) -> None:
    shim = _fake_python(tmp_path / "shims" / "python3.12", ok=False)  # inactive pyenv version
    root = tmp_path / "pyenv"
    _fake_python(root / "versions" / "3.12.1" / "bin" / "python3.12")
    newest = _fake_python(root / "versions" / "3.12.10" / "bin" / "python3.12")
    _fake_python(root / "versions" / "3.12.11" / "bin" / "python3.12", ok=False)  # broken
    environ = {"PATH": str(shim.parent), "PYENV_ROOT": str(root)}
    assert opt.find_interpreter("3.12", environ=environ, home=tmp_path, runs=_runs) == str(newest)


def test_python_on_path_that_runs_comes_first(tmp_path: Path) -> None:
    on_path = _fake_python(tmp_path / "bin" / "python3.12")
    _fake_python(tmp_path / ".pyenv" / "versions" / "3.12.1" / "bin" / "python3.12")
    environ = {"PATH": str(on_path.parent)}
    assert opt.find_interpreter("3.12", environ=environ, home=tmp_path, runs=_runs) == str(on_path)


def test_none_found_gives_the_fix(tmp_path: Path) -> None:
    environ = {"PATH": str(tmp_path / "nothing"), "PYENV_ROOT": str(tmp_path / "pyenv")}
    assert opt.find_interpreter("3.12", environ=environ, home=tmp_path, runs=_runs) is None
    (tmp_path / "pyenv" / "versions" / "3.11.9").mkdir(parents=True)
    message = opt.missing_interpreter("3.12", "harbor", environ=environ, home=tmp_path)
    assert "expected a Python 3.12 interpreter" in message and "['3.11.9']" in message
    assert "pyenv install 3.12" in message
    assert "PYENV_VERSION=3.11.9:3.12.1 nox -s harbor" in message


def test_the_real_interpreter_is_found() -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = opt.find_interpreter(version)
    if found is None:  # e.g. only `python3` on PATH: the helper must still find this one
        pytest.skip(f"no python{version} on PATH or under pyenv here")
    out = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == str(tuple(sys.version_info[:2]))


def test_skipped_tests_are_reported(tmp_path: Path) -> None:
    tests = tmp_path / "test_x.py"
    tests.write_text(
        "import pytest\n"
        "def test_runs():\n    pass\n"
        "def test_needs_engine():\n    pytest.importorskip('no_such_engine_here')\n"
    )
    report = tmp_path / "junit.xml"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={report}", str(tests)], cwd=tmp_path, env=env,
                   capture_output=True, check=True)  # fmt: skip
    (skipped,) = opt.skipped_tests(report)
    assert "test_needs_engine" in skipped and "no_such_engine_here" in skipped


def test_noxfile_fails_on_missing_interpreters_and_checks_harbor() -> None:
    text = (ROOT / "noxfile.py").read_text()
    assert "nox.options.error_on_missing_interpreters = True" in text
    assert "@nox.session(python=HARBOR_PYTHON or False)" in text
    assert 'optional_sessions.missing_interpreter("3.12", "harbor")' in text


def test_a_pyenv_root_this_user_cannot_read_is_no_interpreter_not_a_crash(
    tmp_path: Path, monkeypatch
) -> None:
    """`su alice -c nox ...` inherits root's PYENV_ROOT (/root/.pyenv, mode 0700): the
    noxfile, which looks for 3.12 when it loads, crashed for every session."""

    def denied(self: Path, pattern: str):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "glob", denied)
    environ = {"PATH": str(tmp_path / "nothing"), "PYENV_ROOT": "/root/.pyenv"}
    assert opt.find_interpreter("3.12", environ=environ, home=tmp_path, runs=_runs) is None
