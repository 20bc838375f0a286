"""The manifests of one trial (a Pod and, unless the task allows network, an egress-denying
NetworkPolicy), and their validation: the Kubernetes 1.31 OpenAPI schema in strict mode
(kubernetes-validate, offline) plus Forge's own rules for what the schema does not check (RFC
1123 names, 63-character labels, quantity syntax) and for the security fields every pod carries.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # no type stubs
import yaml

from forge_gates import Violation
from forge_sandbox._spec import SandboxSpec
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._errors import ManifestError
from forge_sandbox.kubernetes._names import (
    label_problems,
    label_value,
    name_problems,
    pod_name,
    quantity_problems,
)
from forge_sandbox.seccomp import LOCALHOST_PROFILE

KUBERNETES_VERSION = "1.31"
CONTAINER = "sandbox"
MANAGED_BY = {"app.kubernetes.io/managed-by": "forge-sandbox"}
TRIAL_LABEL = "forge.dev/trial"
TASK_LABEL = "forge.dev/task"
OWNER_LABEL = "forge.dev/owner"
TRIAL_ANNOTATION = "forge.dev/trial-name"
# the pod's main process: `kill_processes` spares the oldest process with this command line
MAIN_COMMAND = ["sleep", "infinity"]


def selector(config: KubernetesConfig) -> str:
    """The label selector of every pod this config creates (what `gc` sweeps)."""
    owner = label_value(config.owner)
    return f"app.kubernetes.io/managed-by=forge-sandbox,{OWNER_LABEL}={owner}"


def trial_labels(spec: SandboxSpec, config: KubernetesConfig) -> dict[str, str]:
    trial = spec.trial_name or "adhoc"
    return {
        **MANAGED_BY,
        OWNER_LABEL: label_value(config.owner),
        TRIAL_LABEL: label_value(pod_name(trial)),
        TASK_LABEL: label_value(spec.task_name or "unknown"),
    }


def memory_mb(spec: SandboxSpec, config: KubernetesConfig) -> int:
    """The task's memory (+ storage, as the local backend charges tmpfs), else the default."""
    base = spec.memory_mb if "memory_mb" in spec.model_fields_set else config.default_memory_mb
    return base


def working_dir(spec: SandboxSpec) -> str | None:
    """The container's workingDir: the spec's explicit workdir, else /workspace for a task with
    a workspace folder (its image copies it there), else None: the image's WORKDIR (where an
    image-only task's image puts the repository, e.g. /testbed), as the runtime defaults it."""
    if "workdir" in spec.model_fields_set or spec.workspace is not None:
        return spec.workdir
    return None


def seccomp_profile(config: KubernetesConfig) -> dict[str, str]:
    """The pods' seccompProfile: Forge's profile from every node's kubelet seccomp root
    (`forge-sandbox k8s seccomp` installs it), or the runtime's default when opted out."""
    if config.seccomp_profile == "runtime-default":
        return {"type": "RuntimeDefault"}
    return {"type": "Localhost", "localhostProfile": LOCALHOST_PROFILE}


def pod_security_context(spec: SandboxSpec, config: KubernetesConfig) -> dict[str, Any]:
    """Non-root always (`runAsNonRoot`: the kubelet refuses an image whose user is root); the
    uid/gid only when the task says so (an explicit spec uid/gid), else the image's USER."""
    context: dict[str, Any] = {"runAsNonRoot": True}
    if "uid" in spec.model_fields_set or "gid" in spec.model_fields_set:
        context.update(runAsUser=spec.uid, runAsGroup=spec.gid)
    context.update(fsGroup=spec.gid, seccompProfile=seccomp_profile(config))
    return context


def render_pod(spec: SandboxSpec, config: KubernetesConfig, image: str) -> dict[str, Any]:
    """The Pod of one trial: the task's image in its working directory as its user (unless the
    spec names them), non-root, no privilege escalation, every capability dropped, Forge's
    seccomp profile (or RuntimeDefault), no service account token, requests = limits."""
    name = pod_name(spec.trial_name or "adhoc")
    memory = f"{memory_mb(spec, config)}Mi"
    cpu = f"{round(spec.cpus * 1000)}m"
    resources: dict[str, dict[str, str]] = {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu, "memory": memory},
    }
    scratch = {"sizeLimit": f"{spec.storage_mb}Mi"} if spec.storage_mb is not None else {}
    if spec.storage_mb is not None:
        storage = f"{spec.storage_mb * 2}Mi"  # /workspace layer + the scratch volumes
        resources["requests"]["ephemeral-storage"] = storage
        resources["limits"]["ephemeral-storage"] = storage
    volumes = [("tmp", "/tmp"), ("logs", "/logs"), ("tests", "/tests"), ("solution", "/solution")]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": config.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "hostname": spec.hostname,
        "terminationGracePeriodSeconds": 1,
        "securityContext": pod_security_context(spec, config),
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": MAIN_COMMAND,
                "env": [{"name": k, "value": v} for k, v in spec.base_env().items()],
                "resources": resources,
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": seccomp_profile(config),
                },
                "volumeMounts": [{"name": v, "mountPath": path} for v, path in volumes],
            }
        ],
        "volumes": [{"name": v, "emptyDir": dict(scratch)} for v, _ in volumes],
    }
    workdir = working_dir(spec)
    if workdir is not None:
        pod_spec["containers"][0]["workingDir"] = workdir
    if config.image_pull_secret:
        pod_spec["imagePullSecrets"] = [{"name": config.image_pull_secret}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": config.namespace,
            "labels": trial_labels(spec, config),
            "annotations": {TRIAL_ANNOTATION: spec.trial_name or "adhoc"},
        },
        "spec": pod_spec,
    }


def render_network_policy(spec: SandboxSpec, config: KubernetesConfig) -> dict[str, Any] | None:
    """Deny all egress and ingress of the trial's pod, unless the task allows network."""
    if spec.network == "host":
        return None
    labels = trial_labels(spec, config)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": pod_name(spec.trial_name or "adhoc"),
            "namespace": config.namespace,
            "labels": labels,
        },
        "spec": {
            "podSelector": {"matchLabels": {TRIAL_LABEL: labels[TRIAL_LABEL]}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [],
        },
    }


def render(spec: SandboxSpec, config: KubernetesConfig, image: str) -> list[dict[str, Any]]:
    """Every manifest of one trial, validated (ManifestError lists every violation)."""
    manifests = [render_pod(spec, config, image)]
    policy = render_network_policy(spec, config)
    if policy is not None:
        manifests.append(policy)
    problems = [v for m in manifests for v in check_manifest(m)]
    if problems:
        raise ManifestError(problems)
    return manifests


def render_yaml(spec: SandboxSpec, config: KubernetesConfig, image: str) -> str:
    """`render`'s manifests as one YAML stream (what `forge-sandbox k8s render` prints)."""
    return yaml.safe_dump_all(render(spec, config, image), sort_keys=False)


def _schema_problems(manifest: dict[str, Any], where: str) -> list[Violation]:
    try:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(p) for p in exc.path)
        return [
            Violation(
                rule="k8s.manifest.schema",
                expected=f"{where} valid against Kubernetes {KUBERNETES_VERSION} (strict)",
                found=f"{path or '.'}: {exc.message}",
                fix="fix the renderer (forge_sandbox.kubernetes._manifests)",
            )
        ]
    return []


def _seccomp_problems(profile: Any, where: str) -> list[str]:
    """Forge's profile (Localhost forge/seccomp.json) or RuntimeDefault; never Unconfined."""
    allowed = (
        {"type": "Localhost", "localhostProfile": LOCALHOST_PROFILE},
        {"type": "RuntimeDefault"},
    )
    if profile in allowed:
        return []
    return [f"{where}.seccompProfile must be one of {list(allowed)}, not {profile!r}"]


def _security_problems(pod: dict[str, Any]) -> list[str]:
    spec = pod.get("spec", {})
    problems = []
    if spec.get("automountServiceAccountToken") is not False:
        problems.append("spec.automountServiceAccountToken must be false")
    psc = spec.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True:
        problems.append("spec.securityContext.runAsNonRoot must be true")
    if "runAsUser" in psc and not psc["runAsUser"]:
        problems.append("spec.securityContext.runAsUser must be a non-root uid (not 0)")
    problems += _seccomp_problems(psc.get("seccompProfile"), "spec.securityContext")
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(f"spec.{flag} must be false")
    for c in spec.get("containers", []):
        sc = c.get("securityContext", {})
        name = c.get("name")
        if "seccompProfile" in sc:  # a container's profile overrides the pod's
            problems += _seccomp_problems(sc["seccompProfile"], f"container {name}")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"container {name}: allowPrivilegeEscalation must be false")
        if sc.get("privileged"):
            problems.append(f"container {name}: privileged must be false")
        if sc.get("capabilities", {}).get("drop") != ["ALL"] or sc["capabilities"].get("add"):
            problems.append(f"container {name}: capabilities must drop ALL and add none")
        limits = c.get("resources", {}).get("limits", {})
        if "memory" not in limits:
            problems.append(f"container {name}: a memory limit is required")
    return problems


def check_manifest(manifest: dict[str, Any]) -> list[Violation]:
    """Every violation of one manifest: the strict schema, then Forge's rules."""
    kind = manifest.get("kind", "?")
    meta = manifest.get("metadata", {})
    where = f"{kind} {meta.get('name')!r}"
    problems = name_problems(str(meta.get("name", "")), f"{kind} name")
    problems += name_problems(str(meta.get("namespace", "")), "namespace")
    problems += label_problems(meta.get("labels", {}))
    if kind == "Pod":
        for c in manifest.get("spec", {}).get("containers", []):
            for part in ("requests", "limits"):
                values = c.get("resources", {}).get(part, {})
                problems += quantity_problems(values, f"{c.get('name')}.resources.{part}")
        problems += _security_problems(manifest)
    if kind == "NetworkPolicy":
        problems += label_problems(manifest["spec"]["podSelector"].get("matchLabels", {}))
    own = [
        Violation(
            rule="k8s.manifest.forge",
            expected=f"{where} to follow Forge's pod rules",
            found=problem,
            fix="fix the renderer or the task's settings",
        )
        for problem in problems
    ]
    return _schema_problems(manifest, where) + own
