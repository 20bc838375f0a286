"""A SWE-bench-shaped published image on the session's daemon, for `nox -s docker`.

One row that `forge-data import swebench` turns into a task folder whose Dockerfile builds FROM
the row's published name, so that the importer's image step (the history cut, the test side
saved, the tree's list) and its test.sh (the conda step, the test side put back, the test
patch, pytest, grade.py) run in real containers: `forge-sandbox oracle` 1, `nop` 0.

    python tools/swebench_image.py OUT   # DOCKER_HOST, FORGE_DOCKER_CONFIG, FORGE_DOCKER_CLI set

writes OUT/rows.jsonl (the row), OUT/tasks/ (`forge-data import swebench` of it) and
OUT/docker.toml (the session's DockerConfig with the row's published name rewritten to the
image built here), and builds that image from OUT/published/:
the session's base with Debian's git and pytest (apt on the host's network, as the synthesized
tasks' builds), a conda layout whose `testbed` env is the base's python3 (test.sh activates it
as in the published images), and /testbed: a small repository at the row's base_commit plus an
untracked file on its test side that a PASS_TO_PASS test reads (an install step's artefact:
test.sh's restore must keep it).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import docker_daemon  # tools/ is a folder of scripts (this one runs from it)

from forge_data import published_image

INSTANCE = "forge__calc-1"
LOCAL_TAG = "forge-published/swebench-calc:1"  # what the published name is rewritten to
OPS = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
TESTS = (
    "import pathlib\n\nfrom calc.ops import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    "\n\ndef test_data():  # an install step wrote it, untracked\n"
    "    assert pathlib.Path(__file__).with_name('data.txt').read_text() == 'built\\n'\n"
)
TEST_SUB = "\n\ndef test_sub():\n    assert sub(3, 2) == 1\n"  # the test patch's
FILES = {"calc/__init__.py": "", "calc/ops.py": OPS, "tests/test_ops.py": TESTS}
_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
             "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "@1700000000 +0000",
             "GIT_COMMITTER_DATE": "@1700000000 +0000"}  # fmt: skip
DOCKERFILE = """\
FROM {base}
RUN apt-get update && apt-get install -y --no-install-recommends git python3-pytest \\
    && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /opt/miniconda3/bin /opt/miniconda3/envs/testbed/bin \\
    && ln -s /usr/bin/python3 /opt/miniconda3/envs/testbed/bin/python \\
    && printf 'conda() {{ PATH=/opt/miniconda3/envs/testbed/bin:$PATH; }}\\n' \\
        > /opt/miniconda3/bin/activate
COPY testbed/ /testbed/
WORKDIR /testbed
"""


def _git(repo: pathlib.Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo.parent),
           "GIT_CONFIG_NOSYSTEM": "1", **_IDENTITY}  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise docker_daemon.DaemonError(
            f"git {' '.join(args)}: expected exit 0; found {done.returncode}: {done.stderr}; "
            "fix: install git"
        )
    return done.stdout


def _diff(repo: pathlib.Path, path: str, text: str) -> str:
    """`git diff` of `path` rewritten as `text`, the file left as it was."""
    original = (repo / path).read_text()
    (repo / path).write_text(text)
    diff = _git(repo, "diff", "--", path)
    (repo / path).write_text(original)
    return diff


def repository(testbed: pathlib.Path) -> dict[str, object]:
    """/testbed as the published image holds it, and the row (its gold and test patches)."""
    for rel, text in FILES.items():
        (testbed / rel).parent.mkdir(parents=True, exist_ok=True)
        (testbed / rel).write_text(text)
    _git(testbed, "init", "-q", "-b", "main")
    _git(testbed, "add", "-A")
    _git(testbed, "commit", "-qm", "base")
    patch = _diff(testbed, "calc/ops.py", OPS[: OPS.rindex("a + b")] + "a - b\n")
    tests = TESTS.replace("import add\n", "import add, sub\n")
    test_patch = _diff(testbed, "tests/test_ops.py", tests + TEST_SUB)
    (testbed / "tests" / "data.txt").write_text("built\n")  # untracked, on the test side
    return {
        "repo": "forge/calc",
        "instance_id": INSTANCE,
        "base_commit": _git(testbed, "rev-parse", "HEAD").strip(),
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "sub(3, 2) returns 5; it should return 1.",
        "FAIL_TO_PASS": ["tests/test_ops.py::test_sub"],
        "PASS_TO_PASS": ["tests/test_ops.py::test_add", "tests/test_ops.py::test_data"],
        "version": "1.0",
    }


def base_image(config_text: str) -> str:
    """The image the session's DockerConfig rewrites the public base to (the local base)."""
    found = re.search(r'(?m)^"[^"]+" = "([^"]+)"$', config_text)
    if found is None:
        raise docker_daemon.DaemonError(
            "the session's DockerConfig: expected a rewrite of the public base; found none; "
            "fix: start the daemon with tools/docker_daemon.py serve"
        )
    return found.group(1)


def with_rewrite(config_text: str, public: str, local: str) -> str:
    """The DockerConfig text with `public` rewritten to `local` (a table's last line)."""
    if "\n[rewrites]\n" not in config_text:
        raise docker_daemon.DaemonError("the session's DockerConfig: expected a [rewrites] table")
    return f'{config_text.rstrip()}\n"{public}" = "{local}"\n'


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]).resolve()
    config = pathlib.Path(os.environ["FORGE_DOCKER_CONFIG"])
    cli = os.environ["FORGE_DOCKER_CLI"]
    published = out / "published"
    (published / "testbed").mkdir(parents=True)
    row = repository(published / "testbed")
    (published / "Dockerfile").write_text(DOCKERFILE.format(base=base_image(config.read_text())))
    argv = [cli, "build", "--network", "host", "--force-rm", "-t", LOCAL_TAG, str(published)]
    done = subprocess.run(argv, env={**os.environ, "DOCKER_BUILDKIT": "0"}, check=False)
    if done.returncode != 0:
        raise docker_daemon.DaemonError(
            f"build the published SWE-bench-shaped image: expected exit 0; found "
            f"{done.returncode} (its output above); fix: apt in the build needs the Debian mirror"
        )
    (out / "rows.jsonl").write_text(json.dumps(row) + "\n")
    imported = subprocess.run(["forge-data", "import", "swebench", str(out / "rows.jsonl"),
                               "--out", str(out / "tasks"), "--quiet"], check=False)  # fmt: skip
    if imported.returncode != 0:
        raise docker_daemon.DaemonError(
            f"forge-data import swebench: expected exit 0; found {imported.returncode} (its "
            "output above); fix: the row this script writes, or the importer"
        )
    public = published_image("swebench", row)
    (out / "docker.toml").write_text(with_rewrite(config.read_text(), public, LOCAL_TAG))
    print(f"swebench_image: {public} -> {LOCAL_TAG}; row {INSTANCE} in {out / 'rows.jsonl'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except docker_daemon.DaemonError as exc:
        print(f"swebench_image: {exc}", file=sys.stderr)
        sys.exit(1)
