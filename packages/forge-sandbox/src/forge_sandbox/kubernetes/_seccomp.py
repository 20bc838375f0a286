"""Forge's seccomp profile on every node: what `forge-sandbox k8s seccomp` prints.

A pod whose seccompProfile is `Localhost forge/seccomp.json` starts only on a node whose kubelet
seccomp root (/var/lib/kubelet/seccomp by default, k3s included) holds that file; elsewhere the
kubelet answers CreateContainerError. Two ways to put it there, both printed, never applied:

    forge-sandbox k8s seccomp > seccomp.json          # copy to <root>/forge/ on each node
    forge-sandbox k8s seccomp --daemonset | kubectl apply -f -

The DaemonSet (kube-system by default: its hostPath volume is refused in a namespace under the
baseline or restricted Pod Security level) writes the ConfigMap's profile atomically on every
node, tainted ones included, from an init container (root: the folder is root's; no capability,
no privilege escalation), then idles. The pod template carries the profile's digest, so applying
a changed profile rolls it out.
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from forge_sandbox.kubernetes._errors import ManifestError
from forge_sandbox.kubernetes._manifests import MANAGED_BY, check_manifest
from forge_sandbox.seccomp import KUBELET_SECCOMP_ROOT, LOCALHOST_PROFILE, profile_json

INSTALLER = "forge-seccomp"
INSTALLER_NAMESPACE = "kube-system"
INSTALLER_IMAGE = "busybox:1.36"
INSTALL_COMMAND = "forge-sandbox k8s seccomp --daemonset | kubectl apply -f -"
DIGEST_ANNOTATION = "forge.dev/seccomp-sha256"
_RESOURCES = {
    "requests": {"cpu": "10m", "memory": "16Mi"},
    "limits": {"cpu": "100m", "memory": "32Mi"},
}


def profile_digest() -> str:
    """sha256 of the profile the installer writes (its pod template carries it)."""
    return hashlib.sha256(profile_json(indent=2).encode()).hexdigest()


def _install_script(root: str) -> str:
    folder, name = LOCALHOST_PROFILE.rsplit("/", 1)
    target = f"/host/{folder}"
    return (
        f"mkdir -p {target} && cp /profile/seccomp.json {target}/.{name}.tmp && "
        f"mv -f {target}/.{name}.tmp {target}/{name} && echo installed {root}/{LOCALHOST_PROFILE}"
    )


def render_seccomp_installer(
    namespace: str = INSTALLER_NAMESPACE,
    image: str = INSTALLER_IMAGE,
    seccomp_root: str = KUBELET_SECCOMP_ROOT,
) -> list[dict[str, Any]]:
    """The ConfigMap holding the profile and the DaemonSet that installs it, validated."""
    profile = profile_json(indent=2)
    labels = {**MANAGED_BY, "app.kubernetes.io/name": INSTALLER}
    meta = {"name": INSTALLER, "namespace": namespace, "labels": labels}
    restricted = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    install = {
        "name": "install",
        "image": image,
        "command": ["/bin/sh", "-c", _install_script(seccomp_root)],
        "securityContext": {**restricted, "runAsUser": 0, "runAsNonRoot": False},
        "resources": _RESOURCES,
        "volumeMounts": [
            {"name": "kubelet-seccomp", "mountPath": "/host"},
            {"name": "profile", "mountPath": "/profile", "readOnly": True},
        ],
    }
    idle = {
        "name": "idle",
        "image": image,
        "command": ["sleep", "2147483647"],
        "securityContext": {**restricted, "runAsUser": 65534, "runAsNonRoot": True},
        "resources": _RESOURCES,
    }
    pod_spec = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 1,
        "tolerations": [{"operator": "Exists"}],  # every node a sandbox pod may land on
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [install],
        "containers": [idle],
        "volumes": [
            {
                "name": "kubelet-seccomp",
                "hostPath": {"path": seccomp_root, "type": "DirectoryOrCreate"},
            },
            {"name": "profile", "configMap": {"name": INSTALLER}},
        ],
    }
    digest = profile_digest()
    manifests: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"seccomp.json": profile},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": meta,
            "spec": {
                "selector": {"matchLabels": {"app.kubernetes.io/name": INSTALLER}},
                "template": {
                    "metadata": {"labels": labels, "annotations": {DIGEST_ANNOTATION: digest}},
                    "spec": pod_spec,
                },
            },
        },
    ]
    problems = [v for m in manifests for v in check_manifest(m)]
    if problems:
        raise ManifestError(problems)
    return manifests


def seccomp_installer_yaml(
    namespace: str = INSTALLER_NAMESPACE,
    image: str = INSTALLER_IMAGE,
    seccomp_root: str = KUBELET_SECCOMP_ROOT,
) -> str:
    """`render_seccomp_installer` as one YAML stream (`kubectl apply -f -` takes it)."""
    return yaml.dump_all(
        render_seccomp_installer(namespace, image, seccomp_root),
        Dumper=_PlainDumper,
        sort_keys=False,
    )


class _PlainDumper(yaml.SafeDumper):
    """Every mapping written out in full (no `&id001` anchors for shared dicts)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
