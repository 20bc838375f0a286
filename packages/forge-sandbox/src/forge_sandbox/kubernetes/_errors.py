"""Typed infrastructure errors of the Kubernetes backend.

Every one is a SandboxError (an infrastructure failure of the trial, recorded by class name in
`exception_info.exception_type`, never scored as reward 0). The start errors subclass the
backend-neutral ones (SandboxStartError, EnvironmentStartTimeoutError), an OOM kill subclasses
SandboxOOMError, so callers that handle those handle the Kubernetes cases too.
"""

from __future__ import annotations

from collections.abc import Iterable

from forge_gates import GateError, Violation
from forge_sandbox._errors import (
    EnvironmentStartTimeoutError,
    SandboxError,
    SandboxOOMError,
    SandboxStartError,
)

INSTALL_KUBERNETES = "pip install 'forge-sandbox[kubernetes]' (or `uv sync --all-extras`)"


class KubernetesError(SandboxError):
    """Base class: the Kubernetes backend could not do what was asked."""


class KubernetesAPIError(KubernetesError):
    """The API server answered with an error, or kept answering 5xx/429 past the retries."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class PodNameConflictError(KubernetesAPIError):
    """409 on create: a pod (or policy) of that name already exists in the namespace."""


class ImagePullBackOffError(SandboxStartError, KubernetesError):
    """The pod's image could not be pulled (ImagePullBackOff / ErrImagePull / InvalidImageName)."""


class PodPendingTimeoutError(EnvironmentStartTimeoutError, KubernetesError):
    """The pod was not Ready within the start timeout (unschedulable, slow pull...)."""


class PodOOMKilledError(SandboxOOMError, KubernetesError):
    """The pod's container was OOMKilled (exit 137) at its memory limit."""


class PodEvictedError(KubernetesError):
    """The kubelet evicted the pod (node pressure): everything in it is gone."""


class PodFailedError(KubernetesError):
    """The pod's container ended (Failed / terminated) while the trial still needed it."""


class SeccompProfileError(PodFailedError):
    """The kubelet could not load the pod's seccomp profile (Forge's Localhost profile is not
    installed on the node, or unreadable): no pod starts there until it is."""


class ExecStreamLostError(KubernetesError):
    """The exec websocket dropped before the status channel said how the command ended (a lost
    exit status is never taken as success)."""


class ExecProtocolError(KubernetesError):
    """The status channel carried something other than Success / an exit code (a kubelet or
    runtime error, e.g. the container is not running)."""


class ManifestError(GateError, KubernetesError):
    """A rendered manifest failed strict schema validation or Forge's own checks."""

    def __init__(self, violations: Iterable[Violation]) -> None:
        GateError.__init__(self, "K8S_MANIFEST", violations)


class KubernetesUnavailableError(GateError, KubernetesError):
    """The client is not installed, or no kubeconfig / backend config could be read."""

    def __init__(self, violations: Iterable[Violation]) -> None:
        GateError.__init__(self, "K8S_BACKEND", violations)
