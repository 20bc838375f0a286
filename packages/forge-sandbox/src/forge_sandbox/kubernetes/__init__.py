"""forge_sandbox.kubernetes: the Sandbox protocol on one Kubernetes pod per trial.

    from forge_sandbox import open_backend, run_job
    from forge_sandbox.kubernetes import KubernetesConfig

    backend = open_backend("kubernetes", config=KubernetesConfig.load("k8s.toml"))
    summary = await run_job(tasks, job_dir, "oracle", make_sandbox=backend)

This subpackage needs the `kubernetes` extra (`pip install 'forge-sandbox[kubernetes]'`: the
official client, kubernetes-validate, PyYAML) and its modules import it at their top; importing
it without the extra raises KubernetesUnavailableError with that install command. `import
forge_sandbox` never imports it: `open_backend("kubernetes")` and the `k8s` CLI commands do.
`forge_sandbox.testing.kubernetes_api` holds the in-process API server the tests and `nox -s k8s`
run against (it also needs aiohttp, part of the extra).
"""

from forge_gates import Violation
from forge_sandbox.kubernetes._errors import INSTALL_KUBERNETES, KubernetesUnavailableError

try:  # the extra, checked once here with its fix (the modules below import it at their top)
    import kubernetes as _client  # noqa: F401
    import kubernetes_validate as _validate  # type: ignore[import-untyped]  # noqa: F401
    import yaml as _yaml  # noqa: F401
except ImportError as missing:
    raise KubernetesUnavailableError(
        [
            Violation(
                rule="k8s.client",
                expected="the `kubernetes` extra of forge-sandbox (kubernetes 37.0.2, "
                "kubernetes-validate 1.37.0, PyYAML)",
                found=f"{missing.name or missing} not installed",
                fix=INSTALL_KUBERNETES,
            )
        ]
    ) from None

from forge_sandbox.kubernetes._backend import (
    IMAGES_SCHEMA,
    ImageNotBuiltError,
    KubernetesBackend,
    read_images_report,
)
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._doctor import run_k8s_doctor
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
    SeccompProfileError,
)
from forge_sandbox.kubernetes._manifests import check_manifest, render, render_yaml, selector
from forge_sandbox.kubernetes._names import label_value, pod_name
from forge_sandbox.kubernetes._sandbox import KubernetesSandbox
from forge_sandbox.kubernetes._seccomp import render_seccomp_installer, seccomp_installer_yaml

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
    "SeccompProfileError",
    "check_manifest",
    "label_value",
    "pod_name",
    "read_images_report",
    "render",
    "render_seccomp_installer",
    "render_yaml",
    "run_k8s_doctor",
    "seccomp_installer_yaml",
    "selector",
]
