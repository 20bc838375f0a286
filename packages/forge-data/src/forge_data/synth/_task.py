"""The folders synthesis writes: probe tasks (the suite at baseline, or with one candidate bug,
run by `forge-sandbox nop` in the sandbox) and the final Harbor task folders.

A final task folder:

    task.toml            [metadata] repository, base_commit, fail_to_pass, pass_to_pass, modifier
    instruction.md       the problem statement (from the failing tests, never the diff)
    environment/workspace/         a git repository, one commit at the buggy state, + .venv
    environment/Dockerfile         builds the same environment from requirements.txt
    environment/requirements.txt   the installed versions, pinned
    environment/venv-extras/       the .pth and dist-info that put /workspace on the path
    tests/test.sh        restores the test files, runs them with the CTRF plugin, grades
    tests/grade.py       reward 1 when every listed test passed in the report; no report: exit 2
    tests/config.json    repo, instance_id, base_commit, FAIL_TO_PASS, PASS_TO_PASS, patch
    tests/_forge/forge_report.py   the plugin;   tests/pristine/   the project's test files
    solution/solve.sh    `git apply` of the fix (the bug's reverse patch)
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import struct
import subprocess
from pathlib import Path

from forge_data.synth._bugs import Candidate, is_test_path
from forge_data.synth._env import SANDBOX_WORKSPACE, VENV
from forge_data.synth._report_plugin import PLUGIN, PLUGIN_MODULE

GIT_DATE = "2000-01-01T00:00:00+00:00"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "forge-data synth",
    "GIT_AUTHOR_EMAIL": "synth@forge.invalid",
    "GIT_COMMITTER_NAME": "forge-data synth",
    "GIT_COMMITTER_EMAIL": "synth@forge.invalid",
    "GIT_AUTHOR_DATE": GIT_DATE,
    "GIT_COMMITTER_DATE": GIT_DATE,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
EXCLUDE = f"{VENV}/\n__pycache__/\n*.pyc\n.pytest_cache/\n"
PATCH_END = "FORGE_PATCH_END"
GRADE_PY = '''\
"""Grade a CTRF report (written by forge-data synth): reward 1 when every FAIL_TO_PASS and
PASS_TO_PASS test passed. No report, or one without tests, is no verdict: exit 2 without a
reward file (an infrastructure error, never a reward 0)."""

import json
import sys

try:
    with open(sys.argv[1], encoding="utf-8") as report:
        tests = json.load(report)["results"]["tests"]
    status = {test["name"]: test["status"] for test in tests}
except (OSError, ValueError, KeyError, TypeError) as exc:
    why = f"no per-test report ({type(exc).__name__})"
    print(f"grade: {why}: the tests did not run", file=sys.stderr)
    sys.exit(2)
if not status:
    print("grade: the report lists no test: the tests did not run", file=sys.stderr)
    sys.exit(2)
with open(sys.argv[2], encoding="utf-8") as config:
    row = json.load(config)
wanted = row["FAIL_TO_PASS"] + row["PASS_TO_PASS"]
failed = [name for name in wanted if status.get(name) != "passed"]
for name in failed[:20]:
    print(f"grade: {name}: {status.get(name, 'not run')}", file=sys.stderr)
with open(sys.argv[3], "w") as reward:
    reward.write("0\\n" if failed else "1\\n")
print(f"grade: {len(failed)} of the listed tests did not pass")
'''


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def link_tree(source: Path, target: Path) -> None:
    """A copy of `source` whose files are hard links where the filesystem allows (cheap)."""
    shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)


def pytest_command(timeout_s: int, files: list[str] | None = None) -> str:
    """The suite's command line in the sandbox (bash): the workspace's venv, the CTRF plugin,
    no bytecode, no cache, the project's addopts cancelled, a hard time limit, and `-rA` result
    lines on test.sh's own stdout (teed to a file): the harness grades the listed tests from
    that pipe, which the code under test cannot take back (a report file it could rewrite)."""
    paths = " ".join(shlex.quote(f) for f in files or [])
    return (
        f"PYTHONDONTWRITEBYTECODE=1 FORGE_CTRF=/logs/verifier/ctrf.json PYTHONPATH=/tests/_forge "
        f"timeout -k 5 {timeout_s} {SANDBOX_WORKSPACE}/{VENV}/bin/python -m pytest "
        f"-p {PLUGIN_MODULE} -p no:cacheprovider -o addopts= --continue-on-collection-errors "
        f"-q -rA {paths}".rstrip()
        + " 2>&1 | tee /logs/verifier/pytest-output.txt; "
        "echo ${PIPESTATUS[0]} > /logs/verifier/pytest-exit.txt"
    )


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)


def _common(folder: Path, name: str, toml_extra: str, verifier_timeout_s: int) -> None:
    _write(
        folder / "task.toml",
        f'version = "1.0"\n\n{toml_extra}'
        f"[verifier]\ntimeout_sec = {float(verifier_timeout_s)}\n\n"
        "[agent]\ntimeout_sec = 1800.0\n\n"
        "[environment]\nbuild_timeout_sec = 1200.0\ncpus = 1\nmemory = '2G'\nstorage = '2G'\n",
    )
    _write(folder / "tests" / "_forge" / f"{PLUGIN_MODULE}.py", PLUGIN)


def write_probe(folder: Path, workspace: Path, candidate: Candidate | None, timeout_s: int) -> None:
    """A task whose verifier runs the whole suite (with the candidate's file when given) and
    keeps the CTRF report; its reward means only that a report was written."""
    link_tree(workspace, folder / "environment" / "workspace")
    _common(folder, folder.name, "", timeout_s + 60)
    _write(folder / "instruction.md", "A forge-data synth probe: no task for an agent.\n")
    _write(folder / "solution" / "solve.sh", "#!/bin/bash\ntrue\n", 0o755)
    lines = [
        "#!/bin/bash",
        "set -u",
        "mkdir -p /logs/verifier",
        f"cd {SANDBOX_WORKSPACE} || exit 2",
    ]
    if candidate is not None:
        _write(folder / "tests" / "bug" / candidate.path, candidate.text)
        quoted = shlex.quote(candidate.path)
        lines.append(f"cp /tests/bug/{quoted} {quoted} || exit 2")
    lines += [
        pytest_command(timeout_s),
        "[ -s /logs/verifier/ctrf.json ] || exit 2",
        "echo 1 > /logs/verifier/reward.txt",
    ]
    _write(folder / "tests" / "test.sh", "\n".join(lines) + "\n", 0o755)


def normalize_git_index(index: Path) -> None:
    """Zero the index entries' stat fields (times, device, inode, uid, gid) and recompute its
    checksum: byte-identical for the same files on any machine. git then compares contents
    once (a clean tree stays clean) and refreshes the stat data on its next write."""
    data = bytearray(index.read_bytes()[:-20])
    signature, version, count = struct.unpack(">4sII", data[:12])
    if signature != b"DIRC" or version not in (2, 3):
        return
    offset = 12
    for _ in range(count):
        flags = struct.unpack(">H", data[offset + 60 : offset + 62])[0]
        header = 62 + (2 if version == 3 and flags & 0x4000 else 0)
        end = data.index(b"\0", offset + header)
        data[offset : offset + 24] = bytes(24)  # ctime, mtime, dev, ino
        data[offset + 28 : offset + 36] = bytes(8)  # uid, gid
        offset += (end - offset + 8) & ~7
    index.write_bytes(bytes(data) + hashlib.sha1(data).digest())  # git's own checksum


def _git(workspace: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(workspace), *args],
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def init_git(workspace: Path, message: str) -> str:
    """One commit of the workspace (its .venv excluded), deterministic; the commit's sha."""
    _git(workspace, "init", "-q", "--template=", "-b", "main")
    (workspace / ".git" / "info").mkdir(exist_ok=True)
    (workspace / ".git" / "info" / "exclude").write_text(EXCLUDE)
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-q", "--no-gpg-sign", "-m", message)
    shutil.rmtree(workspace / ".git" / "logs", ignore_errors=True)
    normalize_git_index(workspace / ".git" / "index")
    return _git(workspace, "rev-parse", "HEAD").strip()


def fix_patch(workspace: Path, candidate: Candidate, original: str) -> str:
    """`git diff` of the fix (buggy -> original) in the committed workspace; the file is left
    buggy again."""
    target = workspace / candidate.path
    target.write_text(original, encoding="utf-8")
    try:
        return _git(workspace, "diff", "--no-color", "--no-ext-diff", "HEAD", "--", candidate.path)
    finally:
        target.write_text(candidate.text, encoding="utf-8")
        normalize_git_index(workspace / ".git" / "index")


def task_name(project: str, candidate: Candidate) -> str:
    short = candidate.modifier.removeprefix("func_pm_").replace("_", "-")
    return f"{project}-{short}-{candidate.key[:8]}"


def _test_sh(test_files: list[str], run_files: list[str], timeout_s: int) -> str:
    quoted = " ".join(shlex.quote(f) for f in test_files)
    return (
        "\n".join(
            [
                "#!/bin/bash",
                "# Written by forge-data synth: restore the project's test files, run them with a",
                "# per-test report, grade the listed tests from it (tests/grade.py).",
                "set -u",
                "mkdir -p /logs/verifier",
                f"cd {SANDBOX_WORKSPACE} || exit 2",
                "# the test files as the task shipped them: an edit, a deletion or a new",
                "# conftest.py by the agent is undone",
                f"for f in {quoted}; do",
                '  chmod -R u+rwx -- "$f" 2>/dev/null; rm -rf -- "$f"',
                '  mkdir -p -- "$(dirname -- "$f")" && cp -- "/tests/pristine/$f" "$f" || exit 2',
                "done",
                "find . -path ./.venv -prune -o -name conftest.py -print | while read -r f; do",
                '  [ -e "/tests/pristine/$f" ] || rm -f -- "$f"',
                "done",
                pytest_command(timeout_s, run_files),
                'echo "pytest exit $(cat /logs/verifier/pytest-exit.txt)"',
                "python3 -I -B /tests/grade.py /logs/verifier/ctrf.json /tests/config.json "
                "/logs/verifier/reward.txt",
            ]
        )
        + "\n"
    )


def dockerfile() -> str:
    """The image form: Debian bookworm's python3 (3.11, the one the workspace's venv is made
    with on a Debian host) and git for solve.sh (apt only when the base lacks them), the
    workspace with its venv. The venv is used as
    it is when it runs there (no package index needed); else it is rebuilt from the pinned
    requirements (a host whose python3 differs)."""
    venv = f"{SANDBOX_WORKSPACE}/{VENV}"
    purelib = "'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'"
    return (
        "# Written by forge-data synth: the workspace and the same pinned environment.\n"
        "FROM debian:bookworm-slim\n"
        "RUN if ! (command -v git && python3 -c 'import ensurepip, venv') >/dev/null 2>&1; "
        "then apt-get update && apt-get install -y --no-install-recommends python3 "
        "python3-venv git ca-certificates && rm -rf /var/lib/apt/lists/*; fi\n"
        "COPY requirements.txt /opt/forge/requirements.txt\n"
        "COPY venv-extras/ /opt/forge/venv-extras/\n"
        f"COPY workspace {SANDBOX_WORKSPACE}\n"
        f'RUN if ! {venv}/bin/python -c "import pytest" 2>/dev/null; then '
        f"rm -rf {venv} && python3 -m venv {venv} "
        f"&& {venv}/bin/pip install --no-cache-dir -r /opt/forge/requirements.txt "
        f'&& cp -r /opt/forge/venv-extras/. "$({venv}/bin/python -c {purelib})"/; fi\n'
        f"WORKDIR {SANDBOX_WORKSPACE}\n"
    )


def workspace_test_files(workspace: Path) -> list[str]:
    """Every test file of the project in the workspace (relative, sorted), data files under
    test folders included; the venv and git's folder excluded."""
    found = []
    for path in sorted(workspace.rglob("*")):
        relative = path.relative_to(workspace).as_posix()
        if relative.split("/", 1)[0] in (VENV, ".git") or not path.is_file():
            continue
        if is_test_path(relative):
            found.append(relative)
    return found


def _toml_list(values: list[str]) -> str:
    return json.dumps(values)  # a JSON array of strings is a TOML array of basic strings


def write_task(
    out_root: Path,
    name: str,
    workspace: Path,
    candidate: Candidate,
    original: str,
    meta: dict[str, str],
    tests: tuple[list[str], list[str]],
    statement: str,
    timeout_s: int,
) -> Path:
    """Write one final task folder (built beside, renamed into place); its folder.

    `meta`: repository, source, version, venv (the synth-time venv holding the extras), pins.
    `tests`: (FAIL_TO_PASS, PASS_TO_PASS), node ids, sorted.
    """
    fail_to_pass, pass_to_pass = tests
    final = out_root / name
    folder = out_root / f".{name}.partial"
    shutil.rmtree(folder, ignore_errors=True)
    ws = folder / "environment" / "workspace"
    shutil.copytree(workspace, ws, symlinks=True)
    (ws / candidate.path).write_text(candidate.text, encoding="utf-8")
    commit = init_git(ws, f"{meta['repository']} {meta['version']}")
    patch = fix_patch(ws, candidate, original)
    test_files = workspace_test_files(ws)
    for relative in test_files:
        (folder / "tests" / "pristine" / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ws / relative, folder / "tests" / "pristine" / relative)
    run_files = sorted({test.split("::", 1)[0] for test in fail_to_pass + pass_to_pass})
    row = {
        "repo": meta["repository"],
        "instance_id": name,
        "base_commit": commit,
        "FAIL_TO_PASS": fail_to_pass,
        "PASS_TO_PASS": pass_to_pass,
        # the gold, as SWE-bench's rows hold it: the verifier's carry then keeps the test side
        # (a new tests/__init__.py, a helper) as the task's (forge-sandbox `verify/_testside`)
        "patch": patch,
        "modifier": candidate.modifier,
        "source": meta["source"],
        "version": meta["version"],
    }
    _write(folder / "tests" / "config.json", json.dumps(row, indent=1, sort_keys=True) + "\n")
    metadata = (
        "[metadata]\n"
        f"repository = {json.dumps(meta['repository'])}\n"
        f"base_commit = {json.dumps(commit)}\n"
        f"instance_id = {json.dumps(name)}\n"
        f"source = {json.dumps('forge-data synth ' + meta['source'])}\n"
        f"modifier = {json.dumps(candidate.modifier)}\n"
        'category = "debugging"\n'
        'tags = ["debugging", "synthesized", "swe-smith-procedural"]\n'
        f"fail_to_pass = {_toml_list(fail_to_pass)}\n"
        f"pass_to_pass = {_toml_list(pass_to_pass)}\n\n"
    )
    _common(folder, name, metadata, timeout_s + 120)
    _write(folder / "instruction.md", statement)
    _write(folder / "tests" / "grade.py", GRADE_PY)
    _write(folder / "tests" / "test.sh", _test_sh(test_files, run_files, timeout_s), 0o755)
    solve = (
        f"#!/bin/bash\nset -euo pipefail\ncd {SANDBOX_WORKSPACE}\ngit apply -v - <<'{PATCH_END}'\n"
    )
    _write(folder / "solution" / "solve.sh", f"{solve}{patch}{PATCH_END}\n", 0o755)
    environment = folder / "environment"
    _write(environment / "Dockerfile", dockerfile())
    _write(environment / "requirements.txt", meta["pins"])
    site = next(iter(sorted((ws / VENV / "lib").glob("python3*/site-packages"))))
    extras = environment / "venv-extras"
    extras.mkdir()
    for path in sorted(site.iterdir()):
        if path.name == "_forge_project.pth" or (
            path.name.endswith(".dist-info")
            and (path / "INSTALLER").is_file()
            and (path / "INSTALLER").read_text().strip() == "forge-data synth"
        ):
            if path.is_dir():
                shutil.copytree(path, extras / path.name)
            else:
                shutil.copy2(path, extras / path.name)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(folder, final)
    return final
