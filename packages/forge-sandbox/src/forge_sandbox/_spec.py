"""What a sandbox is asked to be (SandboxSpec) and what one command in it returned (ExecResult)."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
SCRATCH_DIRS = ("/tmp", "/logs", "/tests", "/solution")


def _absolute_posix(value: str, what: str) -> str:
    if not value.startswith("/") or ".." in value.split("/"):
        raise ValueError(
            f"{what} must be an absolute POSIX path without '..' (found {value!r}); "
            f"fix: write it like '/workspace'"
        )
    return posixpath.normpath(value)


class SandboxSpec(BaseModel):
    """One sandbox: its filesystem, limits, network policy, user and timeouts.

    The same spec drives every backend; a backend refuses what it cannot honour (the local
    backend cannot run an `image` and says how to get a rootfs instead).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str | None = Field(
        default=None,
        description="Container image reference, for image-based backends (Kubernetes). "
        "The local backend refuses it: give `rootfs` instead.",
    )
    rootfs: Path | None = Field(
        default=None,
        description="Local backend: a directory bound read-only as `/`. None binds the host's "
        "/usr and /etc read-only (plus the /bin, /lib... links), the demo-task convention.",
    )
    workspace: Path | None = Field(
        default=None,
        description="Host directory copied into a private writable /workspace at start "
        "(the source is never modified). None starts with an empty /workspace.",
    )
    workdir: str = Field(
        default="/workspace", description="Working directory of every exec unless cwd is given."
    )
    memory_mb: int = Field(
        default=2048, ge=16, description="Memory limit (RAM, no swap); going past it OOM-kills."
    )
    pids_max: int = Field(
        default=512, ge=8, description="Most processes + threads alive at once in the sandbox."
    )
    cpus: float = Field(default=1.0, gt=0, le=256, description="CPU quota in cores (CFS quota).")
    storage_mb: int | None = Field(
        default=None,
        ge=1,
        description="Disk limit, MiB: writing more to /workspace (or to /tmp) fails with ENOSPC. "
        "Local backend: /workspace and /tmp are tmpfs of this size (the workspace copied in), "
        "charged to the memory cgroup, whose limit becomes memory_mb + storage_mb. None: "
        "/workspace is a host folder without a size limit.",
    )
    file_size_mb: int = Field(
        default=2048, ge=1, description="RLIMIT_FSIZE: largest file a process may write, MiB."
    )
    open_files: int = Field(
        default=1024, ge=16, le=20000, description="RLIMIT_NOFILE: open files per process."
    )
    network: Literal["none", "host"] = Field(
        default="none",
        description="'none': a private network namespace with only loopback (default). "
        "'host': share the host network (opt-in; agents here never need it).",
    )
    user: str | None = Field(
        default=None,
        description="The task's user by name (task.toml `[agent] user`), for the Docker backend, "
        "which runs every exec as it (the image's /etc/passwd resolves it). A numeric user "
        "becomes uid/gid instead; the local and Kubernetes backends refuse a name (they take "
        "a UID).",
    )
    uid: int = Field(default=1000, ge=1, description="User id inside the sandbox (never 0).")
    gid: int = Field(default=1000, ge=1, description="Group id inside the sandbox (never 0).")
    hostname: str = Field(default="sandbox", description="Hostname inside the sandbox.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment for every exec, on top of the cleared base "
        "(PATH=/usr/local/bin:/usr/bin:/bin, HOME=/tmp).",
    )
    shell: str = Field(
        default="/bin/bash", description="Shell that runs string commands: SHELL -c COMMAND."
    )
    exec_timeout_s: float = Field(
        default=600.0, gt=0, description="Default timeout of one exec, seconds."
    )
    start_timeout_s: float = Field(
        default=30.0, gt=0, description="How long start() waits for the sandbox to be ready."
    )
    task_name: str | None = Field(
        default=None,
        description="The task this sandbox serves (HarborTask.sandbox_spec sets it): image-based "
        "backends look its image up by it and label their resources with it.",
    )
    trial_name: str | None = Field(
        default=None,
        description="The trial this sandbox serves (run_trial sets it): backends that name "
        "resources derive deterministic names from it (Kubernetes: the pod name).",
    )
    max_output_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="Per exec and stream, stdout/stderr beyond this are dropped (marked).",
    )

    @field_validator("workdir")
    @classmethod
    def _workdir_absolute(cls, value: str) -> str:
        return _absolute_posix(value, "workdir")

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not k or "=" in k or "\0" in k or "\0" in value[k]]
        if bad:
            raise ValueError(f"env names must be non-empty without '=' or NUL; found {bad!r}")
        return value

    def base_env(self) -> dict[str, str]:
        """The environment every exec starts from (then `env=` of the call is laid on top)."""
        return {"PATH": DEFAULT_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **self.env}


class ExecResult(BaseModel):
    """The outcome of one command in a sandbox.

    exit_code: the command's status; a signal N is reported as 128 + N (SIGKILL: 137, as an
    OOM kill shows); a timeout is reported as 124 with `timed_out=True` after the whole process
    tree of the exec was killed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stdout: str = Field(description="Standard output (UTF-8, undecodable bytes replaced).")
    stderr: str = Field(description="Standard error (UTF-8, undecodable bytes replaced).")
    exit_code: int = Field(description="Exit status; 128 + N for signal N; 124 on timeout.")
    timed_out: bool = Field(description="True when the exec ran past its timeout and was killed.")
    oom_killed: bool = Field(
        description="True when the kernel OOM killer killed a process of this exec."
    )
    pids_limit_hit: bool = Field(
        default=False,
        description="True when a process of this exec was refused a fork or thread at the "
        "sandbox's pids_max (its output may come from a partial run).",
    )
    file_size_limit_hit: bool = Field(
        default=False,
        description="True when the command ended with SIGXFSZ's status (128 + 25): it, or the "
        "last command of its script, wrote past file_size_mb and was killed (a descendant "
        "killed earlier is seen only through the command's own exit status).",
    )
    duration_s: float = Field(ge=0, description="Wall-clock seconds from spawn to exit.")
    output_truncated: bool = Field(
        default=False, description="True when stdout or stderr passed max_output_bytes."
    )

    @property
    def limit_hit(self) -> str | None:
        """The first sandbox limit this exec ran into ('memory', 'pids', 'file_size'), or None."""
        for name, hit in (
            ("memory", self.oom_killed),
            ("pids", self.pids_limit_hit),
            ("file_size", self.file_size_limit_hit),
        ):
            if hit:
                return name
        return None

    @property
    def ok(self) -> bool:
        """Exit code 0, no timeout, no OOM kill."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed


class KillReport(BaseModel):
    """What `Sandbox.kill_processes()` found: how many processes it killed (everything but the
    sandbox's init), and which limits any process of the sandbox ran into since start() (the
    execs that finished and the processes just killed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    killed: int = Field(ge=0, description="Processes killed (left running by earlier execs).")
    oom_killed: bool = Field(description="A process of the sandbox was OOM-killed.")
    pids_limit_hit: bool = Field(description="A fork or thread was refused at pids_max.")
    file_size_limit_hit: bool = Field(description="An exec ended with SIGXFSZ's status.")

    @property
    def limits_hit(self) -> list[str]:
        """The limits hit ('memory', 'pids', 'file_size'), in that order."""
        pairs = (
            ("memory", self.oom_killed),
            ("pids", self.pids_limit_hit),
            ("file_size", self.file_size_limit_hit),
        )
        return [name for name, hit in pairs if hit]
