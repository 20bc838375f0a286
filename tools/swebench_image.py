"""SWE-bench-, SWE-smith- and SWE-Gym-shaped published images on the session's daemon, for
`nox -s docker` and `nox -s k8s` (`nox_support.imported_tasks`).

One row of each kind, which `forge-data import` turns into task folders whose Dockerfiles build
FROM the rows' published names, so that the importer's image step (SWE-smith's checkout of the
instance branch, the history cut, the test side saved, the tree's list) and its test.sh (the
conda step, the test side put back, the test patch or the parent's tests, pytest, grade.py) run
in real containers: `forge-sandbox oracle` 1, `nop` 0.

    python tools/swebench_image.py OUT   # DOCKER_HOST, FORGE_DOCKER_CONFIG, FORGE_DOCKER_CLI set

writes OUT/<kind>.jsonl (the rows), OUT/tasks/ (`forge-data import` of them) and OUT/docker.toml
(the session's DockerConfig with each published name rewritten to the image built here from
OUT/<kind>/): the session's base with Debian's git and pytest (apt on the host's network, as
the synthesized tasks' builds), a conda layout whose `testbed` env is the base's python3
(test.sh activates it as in the published images), and /testbed: a small repository plus an
untracked file on its test side that a PASS_TO_PASS test reads (an install step's artefact:
test.sh's restore must keep it). SWE-bench's and SWE-Gym's at the row's base_commit (its test
patch adds the failing test); SWE-smith's on main with the instance branch (the bug as its tip
commit) and an `origin` remote in the image, which the adapter's `git fetch && git checkout
<id>` reads.
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
GYM_INSTANCE = "forge__calc-2"  # SWE-Gym's rows are SWE-bench's shape under its own images
SMITH_INSTANCE = "forge__calc.00000000.func_pm_op_swap__sub"
LOCAL_TAG = "forge-published/{kind}-calc:1"  # what each published name is rewritten to
OPS = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
FIXED_OPS = OPS[: OPS.rindex("a + b")] + "a - b\n"
TESTS = (
    "import pathlib\n\nfrom calc.ops import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    "\n\ndef test_data():  # an install step wrote it, untracked\n"
    "    assert pathlib.Path(__file__).with_name('data.txt').read_text() == 'built\\n'\n"
)
# the tests with the failing one (the test patch's, SWE-smith's clean commit's)
TESTS_WITH_SUB = TESTS.replace("import add\n", "import add, sub\n") + (
    "\n\ndef test_sub():\n    assert sub(3, 2) == 1\n"
)
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
COPY . /opt/published/
RUN mv /opt/published/testbed /testbed && if [ -d /opt/published/origin.git ]; then \
    mv /opt/published/origin.git /opt/origin.git; fi && rm -rf /opt/published
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


def _first_commit(testbed: pathlib.Path, files: dict[str, str], message: str) -> None:
    for rel, text in files.items():
        (testbed / rel).parent.mkdir(parents=True, exist_ok=True)
        (testbed / rel).write_text(text)
    _git(testbed, "init", "-q", "-b", "main")
    _git(testbed, "add", "-A")
    _git(testbed, "commit", "-qm", message)


def repository(testbed: pathlib.Path, instance: str = INSTANCE) -> dict[str, object]:
    """/testbed as the published image holds it, and the row (its gold and test patches)."""
    _first_commit(testbed, FILES, "base")
    patch = _diff(testbed, "calc/ops.py", FIXED_OPS)
    test_patch = _diff(testbed, "tests/test_ops.py", TESTS_WITH_SUB)
    (testbed / "tests" / "data.txt").write_text("built\n")  # untracked, on the test side
    return {
        "repo": "forge/calc",
        "instance_id": instance,
        "base_commit": _git(testbed, "rev-parse", "HEAD").strip(),
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "sub(3, 2) returns 5; it should return 1.",
        "FAIL_TO_PASS": ["tests/test_ops.py::test_sub"],
        "PASS_TO_PASS": ["tests/test_ops.py::test_add", "tests/test_ops.py::test_data"],
        "version": "1.0",
    }


def smith_repository(testbed: pathlib.Path) -> dict[str, object]:
    """/testbed as a SWE-smith image holds it: main clean (its tests include the failing one),
    the instance branch one commit on top with the bug, an `origin` (a bare clone at
    /opt/origin.git in the image); and the row (its patch: the bug, which the oracle reverses)."""
    clean = {**FILES, "calc/ops.py": FIXED_OPS, "tests/test_ops.py": TESTS_WITH_SUB}
    _first_commit(testbed, clean, "clean")
    _git(testbed, "checkout", "-q", "-b", SMITH_INSTANCE)
    (testbed / "calc/ops.py").write_text(OPS)
    _git(testbed, "commit", "-qam", "bug")
    patch = _git(testbed, "diff", "main", SMITH_INSTANCE)
    _git(testbed, "checkout", "-q", "main")
    _git(testbed.parent, "clone", "-q", "--bare", str(testbed), "origin.git")
    _git(testbed, "remote", "add", "origin", "/opt/origin.git")
    (testbed / "tests" / "data.txt").write_text("built\n")  # untracked, on the test side
    return {
        "instance_id": SMITH_INSTANCE,
        "repo": "swesmith/forge__calc.00000000",
        "image_name": "jyangballin/swesmith.x86_64.forge_1776_calc.00000000",
        "patch": patch,
        "problem_statement": "sub(3, 2) returns 5; it should return 1.",
        "FAIL_TO_PASS": ["tests/test_ops.py::test_sub"],
        "PASS_TO_PASS": ["tests/test_ops.py::test_add", "tests/test_ops.py::test_data"],
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


def _run(argv: list[str], what: str, fix: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, env=env, check=False)
    if done.returncode != 0:
        raise docker_daemon.DaemonError(
            f"{what}: expected exit 0; found {done.returncode} (its output above); fix: {fix}"
        )


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]).resolve()
    config = pathlib.Path(os.environ["FORGE_DOCKER_CONFIG"])
    text = config.read_text()
    dockerfile = DOCKERFILE.format(base=base_image(text))
    makers = {"swebench": repository, "swesmith": smith_repository,
              "swegym": lambda testbed: repository(testbed, GYM_INSTANCE)}  # fmt: skip
    for kind, make in makers.items():
        (out / kind / "testbed").mkdir(parents=True)
        row = make(out / kind / "testbed")
        (out / kind / "Dockerfile").write_text(dockerfile)
        tag = LOCAL_TAG.format(kind=kind)
        build = [os.environ["FORGE_DOCKER_CLI"], "build", "--network", "host", "--force-rm",
                 "-t", tag, str(out / kind)]  # fmt: skip
        _run(build, f"build the {kind}-shaped image", "apt in the build needs the Debian mirror",
             env={**os.environ, "DOCKER_BUILDKIT": "0"})  # fmt: skip
        (out / f"{kind}.jsonl").write_text(json.dumps(row) + "\n")
        imported = ["forge-data", "import", kind, str(out / f"{kind}.jsonl"), "--out",
                    str(out / "tasks"), "--quiet"]  # fmt: skip
        _run(imported, f"forge-data import {kind}", "the row this script wrote, or the importer")
        text = with_rewrite(text, published_image(kind, row), tag)
        print(f"swebench_image: {published_image(kind, row)} -> {tag}; {row['instance_id']}")
    (out / "docker.toml").write_text(text)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except docker_daemon.DaemonError as exc:
        print(f"swebench_image: {exc}", file=sys.stderr)
        sys.exit(1)
