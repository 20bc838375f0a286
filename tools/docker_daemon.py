"""A real Docker daemon for `nox -s docker`, offline: Debian's packages, run as root, stopped after.

    python tools/docker_daemon.py serve [--tmp DIR]     # prints FORGE_DOCKER_READY ... when ready
    python tools/docker_daemon.py image-form TASKS      # demo tasks -> image-only (/testbed)

`serve`: 1. `apt-get download docker.io containerd runc tini` once into .cache/forge/docker/debs
and `dpkg -x` them (cached); 2. dockerd as root with `--bridge=none --iptables=false`, its
data-root, exec-root and socket under a fresh tmp folder, tini as docker-init; 3. a base image
(Debian bookworm `debootstrap --variant=minbase` + python3, its rootfs tar cached) imported with
`docker import`; 4. Debian's `docker-registry` on 127.0.0.1 holding it as
`<registry>/forge/base:bookworm` (removed from the daemon, so a build pulls it from there);
5. a DockerConfig TOML (owner label, `rewrites` of `python:3.11-slim` to that image,
require_rewrite) and one line `FORGE_DOCKER_READY DOCKER_HOST=unix://... config=...`; then it
waits. On SIGTERM / Ctrl-C every container is removed, the registry and dockerd are stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "forge" / "docker"
PACKAGES = ("docker.io", "containerd", "runc", "tini")
BASE_TAR = "base-bookworm-minbase-python3.tar"
BASE_IMAGE = "forge-base:bookworm"
PUBLIC_BASE = "python:3.11-slim"  # what the demo Dockerfiles name; rewritten to the registry
READY = "FORGE_DOCKER_READY"
READY_LINE = rf"{READY} (DOCKER_HOST=\S+ config=\S+)"  # nox_support.Background's ready_line
K8S_POD_OWNER = "forge-k8s-api"  # the owner label of the in-process API server's pod containers


class DaemonError(RuntimeError):
    """A step could not be done; the message says expected / found / fix."""


def dockerd_argv(unpacked: pathlib.Path, tmp: pathlib.Path, run: pathlib.Path) -> list[str]:
    """dockerd offline: no bridge, no iptables, tini as docker-init; its data under `tmp`, its
    sockets under `run` (a short absolute path: unix sockets are limited to 107 bytes)."""
    return [
        str(unpacked / "usr/sbin/dockerd"),
        "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
        f"--data-root={tmp / 'data'}", f"--exec-root={run / 'exec'}",
        f"--pidfile={tmp / 'dockerd.pid'}", f"--host=unix://{run / 'docker.sock'}",
        "--containerd-namespace=forge", "--containerd-plugins-namespace=forge-plugins",
        f"--init-path={unpacked / 'usr/bin/tini-static'}",
    ]  # fmt: skip


def daemon_path(unpacked: pathlib.Path) -> str:
    """PATH for dockerd: the unpacked containerd, runc and shims first."""
    return f"{unpacked / 'usr/sbin'}:{unpacked / 'usr/bin'}:{os.environ.get('PATH', '')}"


def registry_config(storage: pathlib.Path, port: int) -> str:
    """The distribution registry's YAML config: filesystem storage, plain HTTP on 127.0.0.1."""
    return (
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )


def docker_config(owner: str, registry: str) -> str:
    """The session's DockerConfig TOML: the public base rewritten to the local registry."""
    return (
        f'owner = "{owner}"\nrequire_rewrite = true\nbuild_network = "none"\n\n'
        f'[rewrites]\n"{PUBLIC_BASE}" = "{registry}/forge/base:bookworm"\n'
    )


def ready_env(found: str) -> dict[str, str]:
    """The environment the session's commands get from the ready line's group:
    DOCKER_HOST and FORGE_DOCKER_CONFIG (and FORGE_DOCKER_CLI, the daemon's own `docker`)."""
    fields = dict(part.split("=", 1) for part in found.split())
    env = {"DOCKER_HOST": fields["DOCKER_HOST"], "FORGE_DOCKER_CONFIG": fields["config"]}
    cli = CACHE / "root" / "usr" / "bin" / "docker"  # the unpacked CLI of the same daemon
    return {**env, "FORGE_DOCKER_CLI": str(cli)} if cli.is_file() else env


def owner_env(env: dict[str, str], owner: str) -> dict[str, str]:
    """`env` (from `ready_env`) with FORGE_DOCKER_CONFIG pointing at a copy of its DockerConfig
    whose owner label is `owner` (written beside it), so that `forge-sandbox docker gc` lists and
    removes that owner's containers, e.g. K8S_POD_OWNER's."""
    config = pathlib.Path(env["FORGE_DOCKER_CONFIG"])
    text, found = re.subn(r'(?m)^owner = ".*"$', f'owner = "{owner}"', config.read_text(), count=1)
    if found != 1:
        raise DaemonError(f"{config}: expected one top-level `owner = ...` line; found none")
    copy = config.with_name(f"{config.stem}-{owner}.toml")
    copy.write_text(text)
    return {**env, "FORGE_DOCKER_CONFIG": str(copy)}


SYNTH_BASE = "debian:bookworm-slim"  # what forge-data synth's Dockerfiles name


def synth_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with FORGE_DOCKER_CONFIG pointing at a copy of its DockerConfig for synthesized
    tasks: their base (SYNTH_BASE) rewritten to the same local image, and build steps on the
    host's network (their Dockerfile apt-installs python3-venv and git when the base lacks
    them; the package mirrors are the one network these machines reach)."""
    config = pathlib.Path(env["FORGE_DOCKER_CONFIG"])
    text = config.read_text()
    base = re.search(r'(?m)^"[^"]+" = ("[^"]+")$', text)
    text, found = re.subn(r'(?m)^build_network = ".*"$', 'build_network = "host"', text, count=1)
    if base is None or found != 1:
        raise DaemonError(f"{config}: expected a rewrite and a `build_network` line; found none")
    copy = config.with_name(f"{config.stem}-synth.toml")
    copy.write_text(f'{text.rstrip()}\n"{SYNTH_BASE}" = {base.group(1)}\n')
    return {**env, "FORGE_DOCKER_CONFIG": str(copy)}


def gc_removed(output: str) -> list[str]:
    """The containers `forge-sandbox docker gc` removed (its last line is JSON)."""
    return list(json.loads(output.strip().splitlines()[-1])["removed"])


def image_form(task: pathlib.Path) -> None:
    """One demo task as SWE-bench lays it out: the repository in the image at root-owned
    /testbed (environment/repo/, copied by the Dockerfile), no environment/workspace/, and the
    scripts pointed there by FORGE_WORKSPACE ([verifier.env], [solution.env])."""
    environment = task / "environment"
    workspace = environment / "workspace"
    if not workspace.is_dir():
        raise DaemonError(f"image-form {task}: expected environment/workspace/; found none")
    workspace.rename(environment / "repo")
    (environment / "Dockerfile").write_text(
        f"# Demo task, image form: the repository at root-owned /testbed (SWE-bench's layout).\n"
        f"FROM {PUBLIC_BASE}\nCOPY repo/ /testbed/\nWORKDIR /testbed\n"
    )
    toml = task / "task.toml"
    config = tomllib.loads(toml.read_text())
    text = toml.read_text().rstrip("\n") + "\n"
    for table in ("verifier", "solution"):
        if "env" in config.get(table, {}):
            raise DaemonError(f"image-form {toml}: expected no [{table}] env; found one")
        text += f'\n[{table}.env]\nFORGE_WORKSPACE = "/testbed"\n'
    toml.write_text(text)


def _run(argv: list[str], what: str, fix: str, **kwargs: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise DaemonError(
            f"{what}: expected `{' '.join(argv[:4])} ...` to succeed; found exit "
            f"{done.returncode}: {(done.stderr or done.stdout).strip()[-600:]}; fix: {fix}"
        )
    return str(done.stdout)


def unpack_packages(cache: pathlib.Path = CACHE) -> pathlib.Path:
    """The Debian packages downloaded (once) and unpacked (once) under `cache`."""
    unpacked = cache / "root"
    if (unpacked / "usr/sbin/dockerd").is_file() and (unpacked / "usr/bin/tini-static").is_file():
        return unpacked
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    if len(list(debs.glob("*.deb"))) < len(PACKAGES):
        _run(["apt-get", "download", *PACKAGES], "download Docker's Debian packages",
             "`apt-get update` (needs the Debian mirror), or put the .debs in " + str(debs),
             cwd=debs)  # fmt: skip
    staging = pathlib.Path(tempfile.mkdtemp(dir=cache, prefix=".root-"))
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg", "-x", str(deb), str(staging)], f"unpack {deb.name}", "apt-get install dpkg")
    shutil.rmtree(unpacked, ignore_errors=True)
    staging.rename(unpacked)
    return unpacked


def base_rootfs_tar(cache: pathlib.Path = CACHE) -> pathlib.Path:
    """The minbase + python3 rootfs as a tar (debootstrap once, cached)."""
    tar = cache / BASE_TAR
    if tar.is_file():
        return tar
    if shutil.which("debootstrap") is None:
        _run(["apt-get", "install", "-y", "debootstrap"], "install debootstrap", "apt-get update")
    rootfs = pathlib.Path(tempfile.mkdtemp(prefix="forge-base-"))
    try:
        _run(["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(rootfs),
              "http://deb.debian.org/debian"], "debootstrap the base image",
             "needs the Debian mirror once (the tar is cached after)")  # fmt: skip
        partial = tar.with_suffix(".partial")
        _run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], "pack the rootfs", "disk space")
        partial.rename(tar)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return tar


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(check: object, seconds: float, what: str, log: pathlib.Path) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if check():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
    raise DaemonError(f"{what}: expected it ready within {seconds:.0f} s; found not; log: {tail}")


class Daemon:
    """dockerd + the registry under one tmp folder, for a `with` block (stopped on exit)."""

    def __init__(self, tmp: pathlib.Path, owner: str) -> None:
        self.tmp, self.owner = tmp.resolve(), owner
        self.procs: list[subprocess.Popen[bytes]] = []

    def docker(self, *args: str, what: str, stdin: pathlib.Path | None = None) -> str:
        cli = str(self.unpacked / "usr/bin/docker")
        if stdin is None:
            return _run([cli, *args], what, "read the daemon's log", env=self.env)
        with stdin.open("rb") as handle:
            return _run([cli, *args], what, "read the daemon's log", env=self.env, stdin=handle)

    def __enter__(self) -> Daemon:
        try:
            return self._start()
        except BaseException:  # a step failed after dockerd started: stop what is running
            self.__exit__(None, None, None)
            raise

    def _start(self) -> Daemon:
        if os.geteuid() != 0:
            raise DaemonError(
                "dockerd: expected to run as root (it makes mounts and cgroups); found euid "
                f"{os.geteuid()}; fix: run the session as root, or point DOCKER_HOST at a daemon"
            )
        self.unpacked = unpack_packages()
        self.run = pathlib.Path(tempfile.mkdtemp(prefix="forge-dockerd-", dir="/tmp"))
        self.sock = self.run / "docker.sock"
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.sock}"}
        tar = base_rootfs_tar()
        started = time.monotonic()
        log = self.tmp / "dockerd.log"
        env = {**os.environ, "PATH": daemon_path(self.unpacked)}
        with log.open("wb") as out:
            argv = dockerd_argv(self.unpacked, self.tmp, self.run)
            self.procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
        _wait_for(self._pings, 60, "dockerd", log)
        self.start_s = time.monotonic() - started
        port = _free_port()
        (self.tmp / "registry.yml").write_text(registry_config(self.tmp / "registry", port))
        with (self.tmp / "registry.log").open("wb") as out:
            self.procs.append(subprocess.Popen(
                ["docker-registry", "serve", str(self.tmp / "registry.yml")],
                stdout=out, stderr=subprocess.STDOUT))  # fmt: skip
        self.registry = f"127.0.0.1:{port}"
        _wait_for(lambda: _port_open(port), 30, "docker-registry", self.tmp / "registry.log")
        pushed = f"{self.registry}/forge/base:bookworm"
        self.docker("import", "-", BASE_IMAGE, what="docker import the base", stdin=tar)
        self.docker("tag", BASE_IMAGE, pushed, what="tag the base")
        self.docker("push", pushed, what="push the base to the local registry")
        self.docker("rmi", pushed, what="untag (a build pulls it from the registry)")
        self.config = self.tmp / "docker.toml"
        self.config.write_text(docker_config(self.owner, self.registry))
        return self

    def _pings(self) -> bool:
        if self.procs[0].poll() is not None:
            raise DaemonError(
                f"dockerd: expected it running; found it exited {self.procs[0].returncode}; "
                f"log: {(self.tmp / 'dockerd.log').read_text(errors='replace')[-1500:]}"
            )
        probe = subprocess.run([str(self.unpacked / "usr/bin/docker"), "version"],
                               env=self.env, capture_output=True, check=False)  # fmt: skip
        return probe.returncode == 0

    def __exit__(self, *exc: object) -> None:
        if getattr(self, "unpacked", None) is not None and self.procs:
            cli = str(self.unpacked / "usr/bin/docker")
            ids = subprocess.run(
                [cli, "ps", "-aq"], env=self.env, capture_output=True, text=True, check=False
            )
            if ids.stdout.split():
                subprocess.run([cli, "rm", "-f", *ids.stdout.split()], env=self.env, check=False)
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        run = getattr(self, "run", None)
        if run is None:
            return
        # dockerd leaves its network namespace's bind mount (exec/netns/default) behind
        for point in mounts_under(run, pathlib.Path("/proc/mounts").read_text()):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        if not mounts_under(run, pathlib.Path("/proc/mounts").read_text()):
            shutil.rmtree(run, ignore_errors=True)


def mounts_under(folder: pathlib.Path, mounts: str) -> list[str]:
    """The mount points at or below `folder` in a /proc/mounts text, deepest first."""
    top = folder.as_posix()
    points = [line.split()[1] for line in mounts.splitlines() if len(line.split()) > 1]
    inside = [p for p in points if p == top or p.startswith(top + "/")]
    return sorted(inside, key=lambda p: p.count("/"), reverse=True)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def serve(tmp: pathlib.Path, owner: str) -> int:
    stop = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tmp.mkdir(parents=True, exist_ok=True)
    with Daemon(tmp, owner) as daemon:
        print(f"dockerd ready in {daemon.start_s:.1f} s; registry {daemon.registry}", flush=True)
        print(f"{READY} DOCKER_HOST=unix://{daemon.sock} config={daemon.config}", flush=True)
        while not stop["now"]:
            time.sleep(0.2)
    print("dockerd, the registry and every container stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="start dockerd + registry, wait, stop on SIGTERM")
    run.add_argument("--tmp", type=pathlib.Path, help="folder for everything (default: new)")
    run.add_argument("--owner", default="forge-nox", help="DockerConfig owner label value")
    form = sub.add_parser("image-form", help="turn demo tasks into image-only tasks")
    form.add_argument("tasks", type=pathlib.Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "image-form":
            tasks = sorted(p for p in args.tasks.iterdir() if (p / "task.toml").is_file())
            for task in tasks:
                image_form(task)
            print(f"image-form: {len(tasks)} task(s) in {args.tasks}")
            return 0
        tmp = args.tmp or pathlib.Path(tempfile.mkdtemp(prefix="forge-dockerd-"))
        return serve(tmp, args.owner)
    except DaemonError as exc:
        print(f"docker_daemon: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
