"""Forge's seccomp profile on Kubernetes: the pods name it (or opt out), `forge-sandbox k8s
seccomp` prints it and the DaemonSet that installs it on every node, a node without it fails
the pod's start with the install command, and the doctor looks for the installer."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="install forge-sandbox[kubernetes]")
pytest.importorskip("aiohttp", reason="install forge-sandbox[kubernetes]")

import yaml

from forge_sandbox import SandboxSpec
from forge_sandbox.kubernetes import (
    KubernetesBackend,
    KubernetesConfig,
    PodFailedError,
    SeccompProfileError,
    check_manifest,
    render,
    render_seccomp_installer,
)
from forge_sandbox.kubernetes._cli import run_k8s
from forge_sandbox.kubernetes._doctor import run_k8s_doctor
from forge_sandbox.kubernetes._seccomp import DIGEST_ANNOTATION, INSTALL_COMMAND, profile_digest
from forge_sandbox.seccomp import profile_json, seccomp_profile
from forge_sandbox.testing.kubernetes_api import FakeApiServer

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"
IMAGE = "registry.forge.internal/forge/task-01:fix-add-0123456789ab"
FORGE = {"type": "Localhost", "localhostProfile": "forge/seccomp.json"}
SPEC = SandboxSpec(task_name="fix-add", trial_name="fix-add__seccomp")


def _pod(config: KubernetesConfig) -> dict:
    return render(SPEC, config, IMAGE)[0]


def test_pods_name_forge_s_profile_unless_the_config_opts_out() -> None:
    pod = _pod(KubernetesConfig())
    assert pod["spec"]["securityContext"]["seccompProfile"] == FORGE
    assert pod["spec"]["containers"][0]["securityContext"]["seccompProfile"] == FORGE
    weaker = _pod(KubernetesConfig(seccomp_profile="runtime-default"))
    assert weaker["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert weaker["spec"]["containers"][0]["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }
    with pytest.raises(ValueError, match="seccomp_profile"):
        KubernetesConfig.model_validate({"seccomp_profile": "unconfined"})


def test_an_unconfined_pod_or_container_is_refused() -> None:
    pod = _pod(KubernetesConfig())
    assert check_manifest(pod) == []
    for where in ("pod", "container"):
        bad = copy.deepcopy(pod)
        target = bad["spec"] if where == "pod" else bad["spec"]["containers"][0]
        target["securityContext"]["seccompProfile"] = {"type": "Unconfined"}
        found = " | ".join(v.found for v in check_manifest(bad))
        assert "seccompProfile must be one of" in found and "Unconfined" in found, found


def test_the_installer_writes_the_profile_on_every_node() -> None:
    config_map, daemonset = render_seccomp_installer()  # validated: strict schema, 1.31
    assert (config_map["kind"], daemonset["kind"]) == ("ConfigMap", "DaemonSet")
    assert json.loads(config_map["data"]["seccomp.json"]) == seccomp_profile()
    template = daemonset["spec"]["template"]
    assert template["metadata"]["annotations"][DIGEST_ANNOTATION] == profile_digest()
    pod = template["spec"]
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert {v["name"]: v for v in pod["volumes"]}["kubelet-seccomp"]["hostPath"] == {
        "path": "/var/lib/kubelet/seccomp",
        "type": "DirectoryOrCreate",
    }
    (install,) = pod["initContainers"]
    script = install["command"][-1]
    assert "mv -f /host/forge/.seccomp.json.tmp /host/forge/seccomp.json" in script  # atomic
    assert install["securityContext"]["allowPrivilegeEscalation"] is False
    assert install["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in json.dumps(pod).replace('"privileged": false', "")
    other = render_seccomp_installer("forge-system", "mirror.internal/busybox:1.36", "/k/seccomp")
    assert other[1]["metadata"]["namespace"] == "forge-system"
    assert other[1]["spec"]["template"]["spec"]["containers"][0]["image"].startswith("mirror")
    assert (
        "/k/seccomp/forge/seccomp.json"
        in other[1]["spec"]["template"]["spec"]["initContainers"][0]["command"][-1]
    )


def test_the_seccomp_command_prints_the_profile_or_the_daemonset(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = {"k8s_command": "seccomp", "namespace": None, "image": None, "seccomp_root": None}
    assert run_k8s(argparse.Namespace(daemonset=False, **base)) == 0
    printed = capsys.readouterr().out
    assert printed == profile_json(indent=2) and json.loads(printed) == seccomp_profile()
    assert run_k8s(argparse.Namespace(daemonset=True, **base)) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ConfigMap", "DaemonSet"]
    assert docs == render_seccomp_installer()  # the defaults: kube-system, busybox, kubelet's
    mirrored = {**base, "namespace": "ops", "image": "mirror.internal/busybox:1.36"}
    assert run_k8s(argparse.Namespace(daemonset=True, **mirrored)) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs == render_seccomp_installer("ops", "mirror.internal/busybox:1.36")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeApiServer]:
    workspace = FIXTURES / "fix-add" / "environment" / "workspace"
    with FakeApiServer({IMAGE: workspace}) as fake:
        yield fake


@pytest.mark.usefixtures("cgroups")  # pods: local sandboxes shown their cgroup
def test_a_node_without_the_profile_fails_the_start_with_the_install_command(
    server: FakeApiServer,
) -> None:
    server.faults.__init__()  # type: ignore[misc]
    server.faults.seccomp_missing = True
    backend = KubernetesBackend(server.backend_config(images={"fix-add": IMAGE}))

    async def go() -> str:
        with pytest.raises(SeccompProfileError) as info:
            await backend(SPEC).start()
        return str(info.value)

    try:
        message = asyncio.run(go())
    finally:
        server.faults.__init__()  # type: ignore[misc]
        backend.close()
    assert issubclass(SeccompProfileError, PodFailedError)  # an infrastructure error
    assert "CreateContainerError" in message and "/var/lib/kubelet/seccomp/forge/" in message
    assert INSTALL_COMMAND in message and "expected" in message
    assert server.live_pods() == []

    async def fine() -> str:  # the node has it: the pod starts and runs commands
        async with backend(SPEC) as sandbox:
            return (await sandbox.exec("echo ok")).stdout

    backend = KubernetesBackend(server.backend_config(images={"fix-add": IMAGE}))
    try:
        assert asyncio.run(fine()) == "ok\n"
    finally:
        backend.close()


def test_the_doctor_looks_for_the_installer(server: FakeApiServer) -> None:
    server.faults.__init__()  # type: ignore[misc]
    config = KubernetesConfig(kubeconfig=server.kubeconfig)
    probe = {p.name: p for p in run_k8s_doctor(config)}["seccomp-profile"]
    assert probe.ok and "ready on 1/1 nodes" in probe.found
    key = ("kube-system", "forge-seccomp")
    installed = server.cluster.daemonsets.pop(key)
    try:
        missing = {p.name: p for p in run_k8s_doctor(config)}["seccomp-profile"]
        stale = copy.deepcopy(installed)
        stale["spec"]["template"]["metadata"]["annotations"][DIGEST_ANNOTATION] = "0" * 64
        server.cluster.daemonsets[key] = stale
        older = {p.name: p for p in run_k8s_doctor(config)}["seccomp-profile"]
    finally:
        server.cluster.daemonsets[key] = installed
    assert not missing.ok and not missing.required and INSTALL_COMMAND in missing.fix
    assert "forge/seccomp.json" in missing.found and "404" in missing.found
    assert not older.ok and "older profile" in older.found
    opted_out = config.model_copy(update={"seccomp_profile": "runtime-default"})
    weaker = {p.name: p for p in run_k8s_doctor(opted_out)}["seccomp-profile"]
    assert not weaker.ok and not weaker.required and "allows ptrace" in weaker.found
