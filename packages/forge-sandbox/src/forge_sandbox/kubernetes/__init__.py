"""forge_sandbox.kubernetes: the Sandbox protocol on one Kubernetes pod per trial.

    from forge_sandbox import open_backend, run_job
    from forge_sandbox.kubernetes import KubernetesConfig

    backend = open_backend("kubernetes", config=KubernetesConfig.load("k8s.toml"))
    summary = await run_job(tasks, job_dir, "oracle", make_sandbox=backend)

The official `kubernetes` client is imported only when a backend talks to a cluster (install
`forge-sandbox[kubernetes]`). `forge_sandbox.kubernetes.testing` holds the in-process API server
the tests and `nox -s k8s` run against.
"""

from forge_sandbox.kubernetes._backend import (
    IMAGES_SCHEMA,
    ImageNotBuiltError,
    KubernetesBackend,
    read_images_report,
)
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._errors import (
    ExecProtocolError,
    ExecStreamLostError,
    ImagePullBackOffError,
    KubernetesAPIError,
    KubernetesError,
    KubernetesUnavailableError,
    ManifestError,
    PodEvictedError,
    PodFailedError,
    PodNameConflictError,
    PodOOMKilledError,
    PodPendingTimeoutError,
)
from forge_sandbox.kubernetes._manifests import check_manifest, render, selector
from forge_sandbox.kubernetes._names import label_value, pod_name
from forge_sandbox.kubernetes._sandbox import KubernetesSandbox

__all__ = [
    "IMAGES_SCHEMA",
    "ExecProtocolError",
    "ExecStreamLostError",
    "ImageNotBuiltError",
    "ImagePullBackOffError",
    "KubernetesAPIError",
    "KubernetesBackend",
    "KubernetesConfig",
    "KubernetesError",
    "KubernetesSandbox",
    "KubernetesUnavailableError",
    "ManifestError",
    "PodEvictedError",
    "PodFailedError",
    "PodNameConflictError",
    "PodOOMKilledError",
    "PodPendingTimeoutError",
    "check_manifest",
    "label_value",
    "pod_name",
    "read_images_report",
    "render",
    "selector",
]
