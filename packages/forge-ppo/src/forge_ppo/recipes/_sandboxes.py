"""The sandboxes of `backends.sandbox` for the recipes that roll out (train, P0, eval).

make_sandbox = open_sandboxes(spec, tasks)   # LocalSandbox, a KubernetesBackend or a
try:                                         # DockerBackend (a SandboxFactory)
    run_rollouts(tasks, job, ..., make_sandbox=make_sandbox)
finally:
    close_sandboxes(make_sandbox)
"""

from __future__ import annotations

from collections.abc import Iterable

from forge_gates import RunSpec, Violation
from forge_sandbox import HarborTask, SandboxFactory, local_host_problems, open_backend

# the sandbox engines the recipes drive (DESIGN §2); preflight refuses any other
SANDBOX_BACKENDS: tuple[str, ...] = ("local", "kubernetes", "docker")


def open_sandboxes(spec: RunSpec, tasks: Iterable[HarborTask] = ()) -> SandboxFactory:
    """bubblewrap on this machine ('local'), one pod per trial ('kubernetes', configured by the
    TOML $FORGE_KUBERNETES_CONFIG names) or one container per trial ('docker', on the daemon
    $DOCKER_HOST names, settings from $FORGE_DOCKER_CONFIG; `tasks` give their images).
    Preflight has refused a run that lacks them. Close it with `close_sandboxes`."""
    return open_backend(spec.backends.sandbox, tasks=tasks)


def close_sandboxes(make_sandbox: SandboxFactory) -> None:
    """Release a backend's connections (the Kubernetes / Docker clients); local has none."""
    close = getattr(make_sandbox, "close", None)
    if callable(close):
        close()


def sandbox_problems(spec: RunSpec) -> list[Violation]:
    """What this machine lacks for `backends.sandbox = 'local'` (bwrap and its helpers; as
    root, writable cgroups), each with its fix, for preflight: a run that could start no sandbox
    stops before its run folder, not with every episode an infrastructure error. The image
    backends are checked by preflight's backend rules (their daemon / cluster)."""
    return local_host_problems() if spec.backends.sandbox == "local" else []
