"""`forge-sandbox doctor --backend kubernetes`: can this host run trials as pods here?"""

from __future__ import annotations

import asyncio
import socket
import urllib.parse
from typing import Any

from forge_sandbox._probe import Probe
from forge_sandbox.images import Registry, RegistryError, mtls_problems
from forge_sandbox.kubernetes._api import KubeApi
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._errors import KubernetesError
from forge_sandbox.kubernetes._seccomp import (
    DIGEST_ANNOTATION,
    INSTALL_COMMAND,
    INSTALLER,
    INSTALLER_NAMESPACE,
    profile_digest,
)
from forge_sandbox.seccomp import KUBELET_SECCOMP_ROOT, LOCALHOST_PROFILE

# every (verb, group, resource, subresource) the backend uses
VERBS = [
    ("create", "", "pods", ""),
    ("get", "", "pods", ""),
    ("list", "", "pods", ""),
    ("delete", "", "pods", ""),
    ("create", "", "pods", "exec"),
    ("get", "", "pods", "log"),
    ("create", "networking.k8s.io", "networkpolicies", ""),
    ("list", "networking.k8s.io", "networkpolicies", ""),
    ("delete", "networking.k8s.io", "networkpolicies", ""),
]


def _probe(name: str, ok: bool, found: str, fix: str = "") -> Probe:
    return Probe(name=name, ok=ok, required=True, found=found, fix="" if ok else fix)


async def _cluster_probes(config: KubernetesConfig) -> list[Probe]:
    try:
        api = KubeApi(config)
    except KubernetesError as exc:
        return [_probe("k8s-client", False, str(exc).splitlines()[-1], "see the message")]
    probes = [_probe("kubeconfig", True, str(config.kubeconfig_path()))]
    try:
        version = await api.call("GET /version", api.version.get_code)
        probes.append(_probe("k8s-api", True, f"{version.git_version}"))
    except KubernetesError as exc:
        api.close()
        return [*probes, _probe("k8s-api", False, str(exc), "check the kubeconfig's server")]
    ns = config.namespace
    checks: list[tuple[str, Any, tuple[Any, ...], str]] = [
        ("namespace", api.core.read_namespace, (ns,), f"kubectl create namespace {ns}"),
        (
            "service-account",
            api.core.read_namespaced_service_account,
            (config.service_account, ns),
            f"kubectl -n {ns} create serviceaccount {config.service_account}",
        ),
    ]
    if config.image_pull_secret:
        checks.append(
            (
                "pull-secret",
                api.core.read_namespaced_secret,
                (config.image_pull_secret, ns),
                f"kubectl -n {ns} create secret "
                f"docker-registry {config.image_pull_secret} --docker-server=... "
                "(from a secret store, never a file in the repo)",
            )
        )
    for name, fn, args, fix in checks:
        try:
            obj = await api.call(f"read {name}", fn, *args)
            found = f"{obj.metadata.name}" + (f" ({obj.type})" if name == "pull-secret" else "")
            ok = name != "pull-secret" or obj.type == "kubernetes.io/dockerconfigjson"
            probes.append(_probe(name, ok, found, fix))
        except KubernetesError as exc:
            probes.append(_probe(name, False, str(exc).split("; fix:")[0], fix))
    probes.append(await _seccomp_probe(api, config))
    for verb, group, resource, sub in VERBS:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": ns,
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "subresource": sub,
                }
            },
        }
        what = f"{verb} {resource}{'/' + sub if sub else ''}"
        try:
            review = await api.call(
                f"access review {what}", api.authorization.create_self_subject_access_review, body
            )
            status = review.status  # a review without a status allows nothing
            allowed = bool(status is not None and status.allowed)
            reason = status.reason if status is not None else "no status in the review"
            found = "allowed" if allowed else f"denied ({reason or 'no reason'})"
        except KubernetesError as exc:
            allowed, found = False, str(exc).split("; fix:")[0]
        probes.append(
            _probe(
                f"rbac {what}",
                allowed,
                found,
                f"grant `{verb}` on {resource}{'/' + sub if sub else ''} in {ns} "
                "to the kubeconfig's user (a Role + RoleBinding)",
            )
        )
    api.close()
    return probes


async def _seccomp_probe(api: KubeApi, config: KubernetesConfig) -> Probe:
    """Forge's seccomp profile on the nodes, as far as the API shows it: the installer
    DaemonSet ready on every node with the current profile. A warning, not a failure: the
    profile may come with the nodes' image instead (a pod on a node without it fails at
    start with SeccompProfileError, naming the same fix)."""
    fix = (
        f"`{INSTALL_COMMAND}` (or copy `forge-sandbox k8s seccomp` to "
        f"{KUBELET_SECCOMP_ROOT}/{LOCALHOST_PROFILE} on every node)"
    )
    if config.seccomp_profile == "runtime-default":
        found = "runtime-default (opted out: the runtime's default allows ptrace in pods)"
        return Probe(name="seccomp-profile", ok=False, required=False, found=found,
                     fix=f"set seccomp_profile = 'forge', then {fix}")  # fmt: skip
    where = f"{INSTALLER_NAMESPACE}/{INSTALLER}"
    try:
        ds = await api.call(
            f"read DaemonSet {where}",
            api.apps.read_namespaced_daemon_set,
            INSTALLER,
            INSTALLER_NAMESPACE,
        )
    except KubernetesError as exc:
        found = (
            f"pods need {LOCALHOST_PROFILE} in every node's kubelet seccomp root; no installer "
            f"DaemonSet {where} readable ({str(exc).split('; fix:')[0]})"
        )
        return Probe(name="seccomp-profile", ok=False, required=False, found=found, fix=fix)
    status = ds.status
    desired = (status.desired_number_scheduled or 0) if status is not None else 0
    ready = (status.number_ready or 0) if status is not None else 0
    meta = ds.spec.template.metadata
    annotations = (meta.annotations if meta is not None else None) or {}
    current = annotations.get(DIGEST_ANNOTATION) == profile_digest()
    ok = desired > 0 and ready == desired and current
    found = f"DaemonSet {where}: ready on {ready}/{desired} nodes" + (
        "" if current else "; it installs an older profile"
    )
    return Probe(name="seccomp-profile", ok=ok, required=False, found=found, fix="" if ok else fix)


def _buildkit_probe(images: Any) -> Probe:
    kit = images.buildkit
    problems = mtls_problems(images)
    url = urllib.parse.urlparse(kit.addr)
    try:
        with socket.create_connection((url.hostname or "", url.port or 1234), timeout=5):
            reachable = True
    except OSError as exc:
        reachable = False
        problems.append(f"{kit.addr} not reachable ({exc.strerror or type(exc).__name__})")
    found = f"{kit.addr} reachable" if reachable else kit.addr
    return _probe(
        "buildkit",
        not problems,
        "; ".join([found, *problems]) if problems else found,
        "start buildkitd with --tlscacert/--tlscert/--tlskey and set buildkit.addr, "
        "ca, cert, key, server_name in the images config",
    )


def _registry_probe(images: Any) -> Probe:
    try:
        answer = Registry(images).ping()
    except RegistryError as exc:
        return _probe("registry", False, str(exc).split("; fix:")[0], str(exc).split("fix: ")[-1])
    ok = answer == "ok"
    return _probe(
        "registry", ok, f"{images.registry}: {answer}", f"set username and {images.password_env}"
    )


def run_k8s_doctor(config: KubernetesConfig, images: Any = None) -> list[Probe]:
    """Every probe of the Kubernetes backend (and of BuildKit + the registry, given images)."""
    probes = asyncio.run(_cluster_probes(config))
    if images is not None:
        probes += [_buildkit_probe(images), _registry_probe(images)]
    return probes
