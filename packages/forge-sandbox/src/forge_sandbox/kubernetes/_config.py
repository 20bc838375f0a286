"""KubernetesConfig: where and how the Kubernetes backend creates its pods.

Read from TOML (`KubernetesConfig.load(path)`); every field has a default that suits one k3s
namespace set up for Forge. Secrets are never fields: the cluster token lives in the kubeconfig,
the registry password in the environment variable `password_env` names.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from forge_gates import Violation
from forge_sandbox.kubernetes._errors import KubernetesUnavailableError
from forge_sandbox.kubernetes._names import name_problems

CONFIG_ENV = "FORGE_KUBERNETES_CONFIG"


class KubernetesConfig(BaseModel):
    """The Kubernetes backend's settings (frozen; unknown keys refused)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kubeconfig: Path | None = Field(
        default=None,
        description="kubeconfig file; None: $KUBECONFIG, else ~/.kube/config. Its token or "
        "client key is read by the client only, never logged.",
    )
    context: str | None = Field(default=None, description="kubeconfig context; None: current.")
    namespace: str = Field(default="forge-sandbox", description="Namespace of every pod.")
    service_account: str = Field(
        default="forge-sandbox",
        description="Service account of the pods (its token is never mounted).",
    )
    image_pull_secret: str | None = Field(
        default="forge-registry",
        description="Secret (type kubernetes.io/dockerconfigjson) the pods pull with; None: none.",
    )
    images: dict[str, str] = Field(
        default_factory=dict,
        description="Task name -> image reference (from `forge-sandbox images build`). A task "
        "without an entry is refused: there is no public fallback.",
    )
    images_report: Path | None = Field(
        default=None,
        description="JSON report of `forge-sandbox images build`; its images are added to "
        "`images` (entries in `images` win).",
    )
    default_memory_mb: int = Field(
        default=8192, ge=16, description="Memory request = limit when the task sets none (8Gi)."
    )
    start_timeout_s: float = Field(
        default=300.0, gt=0, description="How long a pod may take to be Ready (pull included)."
    )
    poll_interval_s: float = Field(default=0.5, gt=0, description="Pod status poll interval.")
    api_attempts: int = Field(
        default=5, ge=1, le=20, description="Attempts per API call on 5xx / 429 / no answer."
    )
    backoff_s: float = Field(
        default=0.5, gt=0, description="First retry delay; doubled per attempt (capped)."
    )
    backoff_max_s: float = Field(default=8.0, gt=0, description="Longest retry delay.")
    request_timeout_s: float = Field(default=30.0, gt=0, description="Per API request timeout.")
    exec_grace_s: float = Field(
        default=15.0,
        gt=0,
        description="How long past an exec's timeout the websocket may stay silent before the "
        "exec is declared lost (the in-pod `timeout` kills the command at the timeout).",
    )
    owner: str = Field(
        default="forge",
        description="Value of the forge.dev/owner label: `gc` sweeps by it (one per run/user).",
    )
    seccomp_profile: Literal["forge", "runtime-default"] = Field(
        default="forge",
        description="'forge': seccompProfile Localhost forge/seccomp.json, Forge's profile (no "
        "ptrace, process_vm_readv/writev, pidfd_getfd, kcmp, mounts, namespaces...), which "
        "must be on every node under the kubelet's seccomp root (`forge-sandbox k8s seccomp "
        "--daemonset | kubectl apply -f -`). 'runtime-default': the runtime's default "
        "(RuntimeDefault), weaker: containerd's allows ptrace, so an agent's command can "
        "inject code into the pod's other processes.",
    )

    @field_validator("namespace", "service_account")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        problems = name_problems(value, "name")
        if problems:
            raise ValueError("; ".join(problems) + "; fix: use e.g. 'forge-sandbox'")
        return value

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> KubernetesConfig:
        """From TOML at `path` (else $FORGE_KUBERNETES_CONFIG, else the defaults)."""
        source = path if path is not None else os.environ.get(CONFIG_ENV)
        if not source:
            return cls()
        file = Path(source)
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
            return cls.model_validate(data)
        except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
            raise KubernetesUnavailableError(
                [
                    Violation(
                        rule="k8s.config",
                        expected=f"a readable TOML KubernetesConfig at {file}",
                        found=f"{type(exc).__name__}: {exc}",
                        fix="fix the file (fields: see `forge-sandbox k8s render --help`) or "
                        f"unset {CONFIG_ENV}",
                    )
                ]
            ) from None

    def kubeconfig_path(self) -> Path | None:
        """The kubeconfig this config uses (None: none found)."""
        if self.kubeconfig is not None:
            return self.kubeconfig
        for candidate in (os.environ.get("KUBECONFIG") or "").split(os.pathsep):
            if candidate and Path(candidate).is_file():
                return Path(candidate)
        default = Path.home() / ".kube" / "config"
        return default if default.is_file() else None
