"""The in-process API server's pods as real containers on the Docker daemon DOCKER_HOST names.

A pod's image is "pulled" by building its recipe (the task's environment/ folder and the
Dockerfile the images plan rewrote, epilogue included) through the daemon, tagged with the
pod's image reference, once per reference. The container is forge_sandbox.docker's
DockerSandbox, made from the pod's manifest: its limits, its network, the uid only when the pod
names runAsUser (else the image's USER), the workingDir only when the pod names one (else the
image's WORKDIR). runAsNonRoot is enforced as the kubelet does (an image whose user is root or
not numeric: CreateContainerConfigError). An exec runs like the kubelet's CRI exec: the argv as
given, stdin streamed, no timeout of its own; an exec that the memory cgroup OOM-kills takes the
container (cgroup v2 semantics).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from forge_sandbox._spec import SandboxSpec
from forge_sandbox._task import discover_tasks
from forge_sandbox.docker import DockerConfig, DockerSandbox, connect
from forge_sandbox.docker import _exec as docker_exec
from forge_sandbox.docker._images import ImageResolver, build_context
from forge_sandbox.images import ImagesConfig, plan_images

POD_OWNER = "forge-k8s-api"
OOM_COUNT = docker_exec.COUNT_FUNCTION + f'; cnt oom_kill {docker_exec.OOM_FILES}; echo "$s"'


@dataclass(frozen=True)
class ImageRecipe:
    """What the registry would serve for one image reference: a build of `dockerfile` (the
    images plan's rewritten text) over `context` (the task's environment/ folder)."""

    context: Path
    dockerfile: str


def recipes_for(tasks_dir: Path, rewrites: dict[str, str]) -> dict[str, tuple[str, ImageRecipe]]:
    """Task name -> (the image reference the images plan gives it, its recipe)."""
    tasks = discover_tasks(tasks_dir)
    plan = plan_images(tasks, ImagesConfig(rewrites=rewrites))
    return {
        row.task: (row.image, ImageRecipe(Path(row.context), row.dockerfile)) for row in plan.rows
    }


def non_root_problem(pod_security: dict[str, Any], image_user: str) -> str | None:
    """The kubelet's runAsNonRoot check (its messages): None when the container may start."""
    if not pod_security.get("runAsNonRoot"):
        return None
    if "runAsUser" in pod_security:
        return None if pod_security["runAsUser"] else "container's runAsUser breaks non-root policy"
    user = image_user.split(":", 1)[0]
    if user in ("", "0", "root"):
        return "container has runAsNonRoot and image will run as root"
    if not user.isdigit():
        return (
            f"container has runAsNonRoot and image has non-numeric user ({user}), "
            "cannot verify user is non-root"
        )
    return None


def spec_for(pod: dict[str, Any], image: str, network: str) -> SandboxSpec:
    """The DockerSandbox spec of one pod: what its manifest says, nothing more."""
    container = pod["spec"]["containers"][0]
    psc = pod["spec"].get("securityContext", {})
    limits = container.get("resources", {}).get("limits", {})
    fields: dict[str, Any] = {
        "image": image,
        "trial_name": pod["metadata"]["name"],
        "hostname": pod["spec"].get("hostname", "sandbox"),
        "network": network,
        "cpus": _cores(limits.get("cpu")),
        "memory_mb": _mebibytes(limits.get("memory")) or 8192,
    }
    if "runAsUser" in psc:
        fields.update(uid=psc["runAsUser"], gid=psc.get("runAsGroup", psc["runAsUser"]))
    if container.get("workingDir"):
        fields["workdir"] = container["workingDir"]
    return SandboxSpec(**fields)


class DockerPods:
    """Pods as containers on one daemon (labelled POD_OWNER: `gc` removes what is left)."""

    def __init__(self, recipes: dict[str, ImageRecipe]) -> None:
        self.recipes = dict(recipes)
        # main_user None: the pod's process runs as its commands' user, as a kubelet runs it
        self.config = DockerConfig(
            owner=POD_OWNER, pull=False, build_network="none", main_user=None
        )
        self.api = connect()
        self.resolver = ImageResolver(self.config)
        self._lock = threading.Lock()
        self._oom_baseline: dict[int, int] = {}

    def pull(self, image: str) -> dict[str, Any]:
        """The image's config (User, WorkingDir...), built from its recipe the first time."""
        with self._lock:
            try:
                return dict(self.api.inspect_image(image).get("Config") or {})
            except Exception as exc:
                if type(exc).__name__ not in ("ImageNotFound", "NotFound"):
                    raise
            recipe = self.recipes[image]
            context = build_context(recipe.context, recipe.dockerfile)
            log: list[str] = []
            for chunk in self.api.build(
                fileobj=io.BytesIO(context), custom_context=True, tag=image, rm=True,
                forcerm=True, pull=False, decode=True, network_mode="none",
            ):  # fmt: skip
                log.append(str(chunk.get("stream") or chunk.get("error") or "").strip())
                if "error" in chunk:
                    raise RuntimeError(f"build of {image}: {' | '.join(log[-6:])}")
            return dict(self.api.inspect_image(image).get("Config") or {})

    async def start(self, spec: SandboxSpec) -> DockerSandbox:
        sandbox = DockerSandbox(spec, self.config, self.api, self.resolver)
        await sandbox.start()
        self._oom_baseline[id(sandbox)] = await self._oom_kills(sandbox)
        return sandbox

    async def _oom_kills(self, sandbox: DockerSandbox) -> int:
        result = await sandbox._run(["/bin/sh", "-c", OOM_COUNT], "/", {}, 30.0, None)
        value = result.stdout.strip()
        return int(value) if value.isdigit() else 0

    async def exec(
        self,
        sandbox: DockerSandbox,
        argv: list[str],
        env: dict[str, str],
        stdin: IO[bytes] | None,
        sink: IO[bytes],
    ) -> tuple[bytes, int, bool]:
        """(stderr, exit code, OOM-killed): the CRI exec; stdout goes to `sink`."""
        stdin_fd = os.dup(stdin.fileno()) if stdin is not None else None
        stdout, stderr, code = await asyncio.to_thread(
            _run_exec, self.api, sandbox._id, argv, env, stdin_fd
        )
        sink.write(stdout)
        oom = False
        if code == 137:
            oom = await self._oom_kills(sandbox) > self._oom_baseline.get(id(sandbox), 0)
        return stderr, code, oom

    async def stop(self, sandbox: DockerSandbox) -> None:
        self._oom_baseline.pop(id(sandbox), None)
        await sandbox.stop()

    def gc(self) -> list[str]:
        found = self.api.containers(all=True, filters={"label": f"forge-sandbox.owner={POD_OWNER}"})
        for item in found:
            with contextlib.suppress(Exception):
                self.api.remove_container(item["Id"], force=True, v=True)
        return [str(c["Names"][0]).lstrip("/") for c in found]

    def close(self) -> None:
        self.api.close()


def _run_exec(
    api: Any, container: str | None, argv: list[str], env: dict[str, str], stdin_fd: int | None
) -> tuple[bytes, bytes, int]:
    created = api.exec_create(
        container, argv, stdin=stdin_fd is not None, stdout=True, stderr=True, tty=False,
        environment=[f"{k}={v}" for k, v in env.items()],
    )  # fmt: skip
    sock = api.exec_start(created["Id"], socket=True)
    raw = getattr(sock, "_sock", sock)
    if stdin_fd is not None:
        threading.Thread(target=_pump, args=(stdin_fd, raw), daemon=True).start()
    streamed = docker_exec.Streamed(None)
    docker_exec.read_frames(sock, streamed)
    code = docker_exec.wait_exit_code(api, created["Id"])
    with contextlib.suppress(OSError):
        sock.close()
    return bytes(streamed.stdout), bytes(streamed.stderr), 137 if code is None else code


def _pump(fd: int, raw: socket.socket) -> None:
    """The websocket's stdin (a pipe) into the exec; its end half-closes the exec's stdin."""
    try:
        while chunk := os.read(fd, 1 << 16):
            raw.sendall(chunk)
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the command ended first (e.g. `head -c N` had its bytes)
    finally:
        os.close(fd)


def _mebibytes(quantity: str | None) -> int | None:
    if not quantity:
        return None
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return max(16, int(float(quantity[: -len(unit)]) * factor))
    return max(16, int(float(quantity) / (1024 * 1024)))


def _cores(quantity: str | None) -> float:
    if not quantity:
        return 1.0
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
