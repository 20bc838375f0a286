"""What the nox sessions share, kept out of `noxfile.py` so the noxfile is only its sessions:

- `install_workspace(session, ...)`: every pinned dependency from `uv.lock` (torch as
  `tools/install_plan.py` decides, printed with the reason), then the workspace packages
  editable;
- `side_venv(session, name, requirement)`: a separate venv for an engine whose pins differ;
- `pytest_every_test_runs(session, ...)`: pytest for a session that exists to run its tests, so
  a skipped test fails it;
- `train(session, config, run_dir, phase, ...)`: `forge-ppo train`, then `forge-gates verify`;
- `Background(session, argv, ready_line=... | ready_file=...)`: a server the session needs
  (vLLM, the in-process Kubernetes API server) started, awaited until ready, and stopped on
  exit, never left running; `vllm_server`, `pipeline_vllm` (vLLM as the pipeline configs serve
  it) and `k8s_api` (the API server, no pod left after) are such servers.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import re
import subprocess
import threading
import time
from types import TracebackType
from typing import Any

import docker_daemon
import install_plan
import optional_sessions

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
# forge_gates.forge_cache_dir's rule: $FORGE_CACHE, else the clone's .cache/forge
CACHE = pathlib.Path(os.environ.get("FORGE_CACHE") or ROOT / ".cache" / "forge")


def stamp() -> str:
    """The UTC time as run folders are named: 20261202T193311Z."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


def pytest_every_test_runs(session: Any, *args: str, env: dict | None = None) -> None:
    """pytest for an optional session: it exists to run these tests, so a skipped one fails it
    (e.g. `importorskip` of the very engine the session installed)."""
    report = pathlib.Path(session.create_tmp()) / "junit.xml"
    session.run("pytest", f"--junitxml={report}", "-rs", *args, env=env)
    skipped = optional_sessions.skipped_tests(report)
    if skipped:
        session.error(
            f"expected every test of this session to run; found {len(skipped)} skipped: "
            + "; ".join(skipped[:5])
            + ". Fix: install what the skip reasons name (this session exists to run them)"
        )


def find_links_args() -> list[str]:
    """The machine's find-links folders as explicit uv arguments (uv never reads PIP_*)."""
    links = install_plan.split_find_links(dict(os.environ))
    return [arg for link in links for arg in ("--find-links", link)]


def export(session: Any, *args: str) -> str | None:
    """`uv export` of the lock as pinned requirement lines (None under `nox --no-install`)."""
    return session.run_install("uv", "export", *args, silent=True, external=True)


def install_torch_plan(session: Any, lines: list[str], only_torch: bool = False) -> Any:
    """Print and carry out tools/install_plan.py's plan for this session's interpreter."""
    import nox  # only inside a nox run

    # run_install: the probe is part of installing, so `nox --install-only` runs it too
    probe = session.run_install(
        "python", "-c", install_plan.INTERPRETER_PROBE, silent=True, log=False
    )
    machine = install_plan.machine_facts(json.loads(str(probe).strip().splitlines()[-1]))
    try:
        plan = install_plan.plan_install(lines, machine)
    except install_plan.PlanError as error:
        session.error(str(error))
    session.log(plan.describe())
    if plan.uninstall:
        session.run_install("uv", "pip", "uninstall", *plan.uninstall, external=True)
    tmp = pathlib.Path(session.create_tmp())
    for number, step in enumerate(plan.steps[-1:] if only_torch else plan.steps):
        session.log(f"install: {step.label} ({len(step.requirements)} requirements)")
        req = tmp / f"requirements-{number}.txt"
        req.write_text("\n".join(step.requirements) + "\n")
        argv = ("uv", "pip", "install", "--no-deps", *step.args, "-r", str(req))
        try:
            session.run_install(*argv, env=step.env, external=True)
        except nox.command.CommandFailed:
            session.error(f"{step.label} failed: {step.fix or 'see the uv output above'}")
    return plan


def install_workspace(session: Any, *, engines: bool = False, extras: tuple[str, ...] = ()):
    """Install every pinned dependency from uv.lock (torch per the install plan), then the
    workspace packages (editable). `engines`: also the engine extras (verl + Ray); `extras`:
    also these of install_plan.SESSION_EXTRAS (e.g. forge-rollout's `smollm2`)."""
    # 1. the lock, as a requirements list
    engine_extras = install_plan.ENGINE_EXTRAS if engines else ()
    exported = export(session, *install_plan.export_args(*engine_extras, *extras))
    if exported is None:  # `nox --no-install`: the venv is reused as it is
        return
    # 2. the pinned packages, then torch as the plan says; then prove torch imports as planned
    plan = install_torch_plan(session, exported.splitlines())
    session.run("python", "-c", install_plan.verify_code(plan), log=False)
    # 3. the workspace packages themselves
    editable = [arg for p in PACKAGES for arg in ("-e", str(p))]
    session.run_install("uv", "pip", "install", "--no-deps", *editable, external=True)


def side_venv(session: Any, name: str, requirement: str, drop: tuple[str, ...] = ()):
    """A separate venv under the session's tmp dir with one requirement (its deps differ)."""
    venv = pathlib.Path(session.create_tmp()) / name
    python = venv / "bin" / "python"
    if not python.exists():
        session.run_install("uv", "venv", str(venv), "-p", "3.11", external=True)
    session.run_install(
        "uv", "pip", "install", "--python", str(python), requirement, *find_links_args(),
        env=install_plan.NO_AMBIENT_FIND_LINKS, external=True,
    )  # fmt: skip
    if drop:
        session.run_install("uv", "pip", "uninstall", "--python", str(python), *drop, external=True)
    return python


def train(session: Any, config: str, run_dir: str, phase: str, *extra: str, env=None) -> str:
    """`forge-ppo train` into `run_dir`, then the ledger judged by `forge-gates verify`."""
    session.run(
        "forge-ppo", "train", "--config", config, "--run-dir", run_dir,
        "--cache-dir", str(CACHE), *extra, env=env,
    )  # fmt: skip
    session.run("forge-gates", "verify", run_dir, "--phase", phase)
    return run_dir


class Background:
    """A server process for the length of a `with` block: ready when a stdout line matches
    `ready_line` (its first group is `.found`) or when `ready_file` exists (`.found` = the
    path); `session.error` when it dies or is not ready within `timeout_s` (with `required=False`
    a warning instead, and `.found` stays None). `env` is added to the session's environment.
    On exit it is terminated and awaited; `.returncode` holds its exit status."""

    def __init__(
        self,
        session: Any,
        argv: list[str],
        *,
        ready_line: str | None = None,
        ready_file: pathlib.Path | None = None,
        timeout_s: float = 60.0,
        stop_timeout_s: float = 90.0,
        env: dict[str, str] | None = None,
        required: bool = True,
    ) -> None:
        if (ready_line is None) == (ready_file is None):
            raise ValueError("expected exactly one of ready_line or ready_file")
        self.session, self.argv = session, argv
        self.ready_line, self.ready_file = ready_line, ready_file
        self.timeout_s, self.stop_timeout_s = timeout_s, stop_timeout_s
        self.env = {**os.environ, **env} if env else None
        self.required = required
        self.found: str | None = None
        self.returncode: int | None = None
        self._ready = threading.Event()

    def _pump(self) -> None:
        """Echo the server's output, noting the ready line (draining keeps it from blocking)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            print(line, end="", flush=True)
            match = re.search(self.ready_line or "", line)
            if not self._ready.is_set() and match:
                self.found = match.group(1) if match.groups() else line.strip()
                self._ready.set()

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.ready_file is not None and self.ready_file.exists():
                self.found = str(self.ready_file)
                return True
            if self._ready.wait(0.1) or self.process.poll() is not None:
                return self._ready.is_set()
        return False

    def __enter__(self) -> Background:
        piped = self.ready_line is not None
        self.process = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE if piped else None, text=True, env=self.env
        )
        if piped:
            threading.Thread(target=self._pump, daemon=True).start()
        if not self._wait_ready():
            code = self.process.poll()
            self.stop()
            what = f"it exited {code}" if code is not None else f"none in {self.timeout_s:.0f} s"
            message = (
                f"expected `{' '.join(self.argv[:3])} ...` ready; found {what}. "
                "Fix: read its output above"
            )
            if self.required:
                self.session.error(message)
            self.session.warn(f"{message} (going on without it: .found is None)")
            self.found = None
        return self

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.returncode = self.process.wait(self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.returncode = self.process.wait()
        return self.returncode

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


class DockerDaemon(Background):
    """`tools/docker_daemon.py serve` (Debian's dockerd as root, offline, with a local registry)
    for the length of a `with` block; `.client_env` is what the session's commands need
    (DOCKER_HOST, FORGE_DOCKER_CONFIG, FORGE_DOCKER_CLI), empty when an optional daemon
    (`required=False`) did not start."""

    def __init__(self, session: Any, tmp: pathlib.Path, owner: str, *, required: bool = True):
        serve = [str(pathlib.Path(session.bin) / "python"), docker_daemon.__file__, "serve",
                 "--tmp", str(tmp / "daemon"), "--owner", owner]  # fmt: skip
        ready = docker_daemon.READY_LINE
        super().__init__(session, serve, ready_line=ready, timeout_s=1200, required=required)

    @property
    def client_env(self) -> dict[str, str]:
        return docker_daemon.ready_env(self.found) if self.found else {}


def no_container_left(session: Any, env: dict[str, str], after: str) -> None:
    """`forge-sandbox docker gc` lists by the session's owner label and removes what it finds."""
    gc = session.run("forge-sandbox", "docker", "gc", env=env, silent=True)
    if docker_daemon.gc_removed(str(gc)):
        session.error(f"expected no container left after {after}; gc found {gc}")


def oracle_and_nop(session: Any, tasks: pathlib.Path, out: pathlib.Path, *args: str, env=None):
    """`forge-sandbox oracle` then `nop` over `tasks` (jobs in out/oracle, out/nop; `args`: the
    backend's): each exits 0 only when every reward is 1 (oracle) / 0 (nop)."""
    for agent in ("oracle", "nop"):
        session.run("forge-sandbox", agent, str(tasks), "--out", str(out / agent), *args, env=env)


def imported_tasks(session: Any, out: pathlib.Path, env: dict[str, str]):
    """tools/swebench_image.py OUT on the daemon `env` names: `forge-data import`'s SWE-bench-,
    SWE-smith- and SWE-Gym-shaped tasks, FROM images built here; (OUT/tasks, `env` with the
    DockerConfig that rewrites each published name to its image)."""
    session.run("python", str(ROOT / "tools/swebench_image.py"), str(out), env=env)
    return out / "tasks", {**env, "FORGE_DOCKER_CONFIG": str(out / "docker.toml")}


def no_pod_left(session: Any, config: str, after: str) -> None:
    """`forge-sandbox k8s gc` lists by the session's owner label and deletes what it finds."""
    out = session.run("forge-sandbox", "k8s", "gc", "--k8s-config", config, silent=True)
    removed = json.loads(str(out).strip().splitlines()[-1])["removed"]
    if removed["pods"] or removed["networkpolicies"]:
        session.error(f"expected no pod or policy left after {after}; gc found {removed}")


def vllm_server(session: Any, python: pathlib.Path, log: pathlib.Path, *args: str, env=None):
    """`forge-rollout vllm-serve ARGS` in the background, ready at `FORGE_VLLM_READY url=`."""
    argv = [
        str(pathlib.Path(session.bin) / "forge-rollout"), "vllm-serve", *args,
        "--entrypoint", "module", "--python", str(python), "--log", str(log),
        "--ready-timeout", "600",
    ]  # fmt: skip
    return Background(
        session, argv, ready_line=r"FORGE_VLLM_READY url=(\S+)", timeout_s=660, env=env
    )


def pipeline_vllm(
    session: Any, python: pathlib.Path, log: pathlib.Path, port: int, env=None, model=None
):
    """One vLLM served as the pipeline's configs say (bf16, window 2048, 4 sequences, LoRA rank
    8, the run's seed) on the runs' own model folder (model.path = "tiny", built once under its
    lock; or the folder `model`, which the runs then get as model.path), its base model named
    `base`; runs reach it with `--set inference.url=...`."""
    if model is None:
        made = session.run(
            "forge-rollout", "make-model", "tiny", "--cache-dir", str(CACHE), silent=True
        )
        model = str(made).strip().splitlines()[-1].split("path=", 1)[1]
    return vllm_server(
        session, python, log,
        "--model", str(model), "--served-model-name", "base",
        "--max-model-len", "2048", "--max-num-seqs", "4", "--max-lora-rank", "8",
        "--dtype", "bfloat16", "--gpu-memory-utilization", "0.1", "--seed", "20260822",
        "--port", str(port), env=env,
    )  # fmt: skip


@contextlib.contextmanager
def k8s_api(
    session: Any, tasks: pathlib.Path, out: pathlib.Path, env: dict[str, str], runtime: str
):
    """The in-process Kubernetes API server over `tasks`, its pods `runtime`'s ("docker":
    containers on the daemon `env` names; "local": bubblewrap sandboxes over the tasks'
    workspaces); yields (its k8s.toml, the server). After: it exited 0 (no pod left) and, on
    docker, `docker gc` finds none of its containers."""
    serve = [str(pathlib.Path(session.bin) / "python"), "-m",
             "forge_sandbox.testing.kubernetes_api", "serve", "--runtime", runtime,
             "--tasks", str(tasks), "--out", str(out)]  # fmt: skip
    with Background(session, serve, ready_file=out / "ready", stop_timeout_s=60, env=env) as api:
        yield str(out / "k8s.toml"), api
    if api.returncode != 0:
        session.error(f"the in-process API server exited {api.returncode}: pods were left")
    if runtime == "docker":
        pods = docker_daemon.owner_env(env, docker_daemon.K8S_POD_OWNER)
        no_container_left(session, pods, f"the API server over {tasks.name} stopped")
