"""What a trial's container is created with (pure: a SandboxSpec + the image's config in, the
Docker Engine API's create body out), and the name and labels it carries.

Least privilege that still runs a task as Harbor runs it: never privileged, every capability
dropped (the config may add some back), no-new-privileges, Forge's seccomp profile (no ptrace,
process_vm_readv/writev, pidfd_getfd or kcmp; no mounts or namespaces: forge_sandbox.seccomp),
tini as pid 1 (`init`) reaping what the agent leaves, `sleep infinity` as the one long-lived
process (both as `config.main_user`, a uid no command runs as: no ptrace and no /proc/PID/mem
across uids without CAP_SYS_PTRACE), the commands as the image's USER, memory
= swap limit (no swap escape), pids, CPU quota, rlimits, network none unless the spec allows
the host's.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any

from forge_sandbox._spec import SandboxSpec
from forge_sandbox.docker._config import OWNER_LABEL, TASK_LABEL, TRIAL_LABEL, DockerConfig
from forge_sandbox.seccomp import profile_json

MAIN_COMMAND = ["sleep", "infinity"]
_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def container_name(spec: SandboxSpec, suffix: str | None = None) -> str:
    """`forge-<trial or task, sanitised, <= 40>-<8 hex>`: valid for Docker, unique per start."""
    base = _UNSAFE.sub("-", spec.trial_name or spec.task_name or "sandbox").strip("-._")
    return f"forge-{base[:40] or 'sandbox'}-{suffix or secrets.token_hex(4)}"


def labels(spec: SandboxSpec, config: DockerConfig) -> dict[str, str]:
    """The owner label (what `docker gc` selects) and the task / trial (bounded, hashed)."""
    out = {OWNER_LABEL: config.owner}
    for key, value in ((TASK_LABEL, spec.task_name), (TRIAL_LABEL, spec.trial_name)):
        if value:
            digest = hashlib.sha256(value.encode()).hexdigest()[:10]
            out[key] = value if len(value) <= 200 else f"{value[:188]}-{digest}"
    return out


def exec_user(image_config: dict[str, Any], spec: SandboxSpec, config: DockerConfig) -> str:
    """Who runs the commands: the config's user, else the task's user (spec.user, a name),
    else an explicit spec uid, else the image's USER, else root (Docker's default for an image
    without USER)."""
    if config.user:
        return config.user
    if spec.user:
        return spec.user
    if "uid" in spec.model_fields_set or "gid" in spec.model_fields_set:
        return f"{spec.uid}:{spec.gid}"
    return str(image_config.get("User") or "") or "0"


def workdir(image_config: dict[str, Any], spec: SandboxSpec) -> str:
    """Where commands run: an explicit spec workdir, else the image's WORKDIR (where the image
    puts the repository, e.g. /testbed), else /."""
    if "workdir" in spec.model_fields_set:
        return spec.workdir
    return str(image_config.get("WorkingDir") or "") or "/"


def host_config(spec: SandboxSpec, config: DockerConfig, *, storage_opt: bool) -> dict[str, Any]:
    """The HostConfig of the create body (Engine API field names)."""
    memory = spec.memory_mb * 1024 * 1024
    body: dict[str, Any] = {
        "Init": True,
        "Privileged": False,
        "CapDrop": ["ALL"],
        "CapAdd": list(config.cap_add),
        # Forge's seccomp profile, not the daemon's default (which allows ptrace and
        # process_vm_writev): forge_sandbox.seccomp._profile says what it denies and why
        "SecurityOpt": ["no-new-privileges", f"seccomp={profile_json()}"],
        "NetworkMode": "host" if spec.network == "host" else "none",
        "Memory": memory,
        "MemorySwap": memory,  # = Memory: no swap
        "PidsLimit": spec.pids_max,
        "NanoCpus": int(spec.cpus * 1e9),
        "Ulimits": [
            {"Name": "fsize", "Soft": spec.file_size_mb << 20, "Hard": spec.file_size_mb << 20},
            {"Name": "nofile", "Soft": spec.open_files, "Hard": spec.open_files},
            {"Name": "core", "Soft": 0, "Hard": 0},
        ],
        "OomScoreAdj": 500,
        "ReadonlyRootfs": False,
        "AutoRemove": False,
    }
    if storage_opt and spec.storage_mb is not None:
        body["StorageOpt"] = {"size": f"{spec.storage_mb}M"}
    return body


def create_body(
    spec: SandboxSpec,
    config: DockerConfig,
    image: str,
    image_config: dict[str, Any],
    *,
    storage_opt: bool,
) -> dict[str, Any]:
    """The whole `POST /containers/create` body for one trial. Its User and WorkingDir are
    the main process's: `config.main_user` in / (each exec names its own user and cds to its
    folder), else the commands' user in their folder, as a Kubernetes pod runs."""
    user, folder = exec_user(image_config, spec, config), workdir(image_config, spec)
    if config.main_user is not None:  # a uid no command has (it may not enter `folder`)
        user, folder = config.main_user, "/"
    return {
        "Image": image,
        "Entrypoint": [MAIN_COMMAND[0]],  # the image's ENTRYPOINT is not the sandbox's init
        "Cmd": MAIN_COMMAND[1:],
        "User": user,
        "WorkingDir": folder,
        "Hostname": spec.hostname,
        "Env": [f"{k}={v}" for k, v in spec.env.items()],
        "Labels": labels(spec, config),
        "NetworkDisabled": spec.network != "host",
        "AttachStdin": False,
        "AttachStdout": False,
        "AttachStderr": False,
        "Tty": False,
        "HostConfig": host_config(spec, config, storage_opt=storage_opt),
    }
