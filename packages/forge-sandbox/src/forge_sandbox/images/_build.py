"""Build the plan's images with `buildctl` against a remote BuildKit over mTLS, and check
that each exists (a registry manifest HEAD, with its digest) before training uses it.

The rewritten Dockerfile goes to a private staging folder (written atomically); the registry
credentials, when set, go to a private DOCKER_CONFIG folder for buildctl's push and are removed
after the build. Neither the password nor the key's contents reach a message or a report.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_gates import atomic_write_json, atomic_write_text
from forge_sandbox.images._config import ImagesConfig
from forge_sandbox.images._plan import ImagePlan, ImageRow
from forge_sandbox.images._registry import Registry, RegistryError

REPORT_SCHEMA = "forge-sandbox/images@1"  # = forge_sandbox.kubernetes.IMAGES_SCHEMA
Progress = Callable[[int, int, str], None]


def buildctl_argv(
    config: ImagesConfig, row: ImageRow, dockerfile_dir: Path, meta: Path
) -> list[str]:
    """buildctl's command line for one row: mTLS flags, the dockerfile.v0 frontend, push."""
    kit = config.buildkit
    argv = [kit.buildctl, "--addr", kit.addr]
    for flag, value in (
        ("--tlscacert", kit.ca),
        ("--tlscert", kit.cert),
        ("--tlskey", kit.key),
        ("--tlsservername", kit.server_name),
    ):
        if value is not None:
            argv += [flag, str(value)]
    argv += [
        "build",
        "--frontend",
        "dockerfile.v0",
        "--local",
        f"context={row.context}",
        "--local",
        f"dockerfile={dockerfile_dir}",
        "--opt",
        "filename=Dockerfile",
        "--output",
        f"type=image,name={row.image},push=true",
        "--metadata-file",
        str(meta),
        "--progress",
        "plain",
    ]
    return argv


def mtls_problems(config: ImagesConfig) -> list[str]:
    """Which mTLS files are missing or unreadable (their paths only, never their contents)."""
    kit = config.buildkit
    problems = []
    for name, path in (("ca", kit.ca), ("cert", kit.cert), ("key", kit.key)):
        if path is None:
            problems.append(f"buildkit.{name} is not set")
        elif not os.access(path, os.R_OK):
            problems.append(f"buildkit.{name} = {path} is not a readable file")
    if kit.server_name is None:
        problems.append("buildkit.server_name is not set")
    return problems


def _docker_config(config: ImagesConfig, folder: Path) -> dict[str, str]:
    """DOCKER_CONFIG for buildctl's push (only when credentials are set)."""
    password = config.password()
    if config.username is None or password is None:
        return {}
    auth = base64.b64encode(f"{config.username}:{password}".encode()).decode()
    path = folder / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"auths": {config.registry: {"auth": auth}}}, handle)
    return {"DOCKER_CONFIG": str(folder)}


def build_row(config: ImagesConfig, row: ImageRow, log: Callable[[str], None]) -> dict[str, Any]:
    """Build and push one image; a result row (status built / failed, digest, seconds)."""
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix="forge-image-"))
    try:
        atomic_write_text(staging / "Dockerfile", row.dockerfile)
        meta = staging / "metadata.json"
        env = {**os.environ, **_docker_config(config, staging)}
        argv = buildctl_argv(config, row, staging, meta)
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                text=True,
                errors="replace",
            )
        except OSError as exc:
            return _failed(
                row,
                started,
                f"buildctl could not start ({exc.strerror}); fix: "
                "install buildctl or set buildkit.buildctl",
            )
        assert proc.stdout is not None
        tail: list[str] = []
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-20:]
            log(line)
        try:
            code = proc.wait(config.buildkit.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            return _failed(row, started, f"buildctl ran past {config.buildkit.timeout_s} s")
        if code != 0:
            return _failed(row, started, f"buildctl exit {code}: " + " | ".join(tail[-3:]))
        try:
            digest = json.loads(meta.read_text()).get("containerimage.digest")
        except (OSError, ValueError):
            digest = None
        return {
            "task": row.task,
            "image": row.image,
            "status": "built",
            "digest": digest,
            "seconds": round(time.monotonic() - started, 3),
        }
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _failed(row: ImageRow, started: float, why: str) -> dict[str, Any]:
    return {
        "task": row.task,
        "image": row.image,
        "status": "failed",
        "error": why,
        "seconds": round(time.monotonic() - started, 3),
    }


def build_images(
    plan: ImagePlan,
    config: ImagesConfig,
    progress: Progress | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Build every row not already in the registry; the images report (REPORT_SCHEMA)."""
    rows = []
    for number, row in enumerate(plan.rows, 1):
        if row.exists:
            result = {"task": row.task, "image": row.image, "status": "exists", "seconds": 0.0}
        else:
            result = build_row(config, row, log)
        rows.append(result)
        if progress is not None:
            progress(number, len(plan.rows), f"{row.task}: {result['status']}")
    return {"schema_version": REPORT_SCHEMA, "registry": plan.registry, "images": rows}


def check_images(
    plan: ImagePlan, config: ImagesConfig, progress: Progress | None = None
) -> dict[str, Any]:
    """Prove each planned image exists: manifest HEAD (all four media types) -> digest."""
    registry = Registry(config)
    rows = []
    for number, row in enumerate(plan.rows, 1):
        try:
            digest = registry.manifest_digest(row.repository, row.tag)
            result = {
                "task": row.task,
                "image": row.image,
                "digest": digest,
                "status": "present" if digest else "missing",
            }
        except RegistryError as exc:
            result = {"task": row.task, "image": row.image, "status": "error", "error": str(exc)}
        rows.append(result)
        if progress is not None:
            progress(number, len(plan.rows), f"{row.task}: {result['status']}")
    return {"schema_version": REPORT_SCHEMA, "registry": plan.registry, "images": rows}


def write_report(path: str | os.PathLike[str], report: dict[str, Any]) -> Path:
    return atomic_write_json(path, report)
