"""Names, labels and manifests of the Kubernetes backend (no cluster needed)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("kubernetes_validate", reason="install forge-sandbox[kubernetes]")

from forge_sandbox import SandboxSpec
from forge_sandbox.kubernetes import KubernetesConfig, check_manifest, label_value, pod_name, render
from forge_sandbox.kubernetes._names import LABEL_VALUE, name_problems

names = st.text(min_size=0, max_size=200)


@pytest.mark.hypothesis
@given(names, names)
def test_pod_names_are_valid_and_distinct(a: str, b: str) -> None:
    for name in (a, b):
        assert name_problems(pod_name(name), "pod") == []
        assert len(pod_name(name)) <= 63
        assert pod_name(name) == pod_name(name)  # deterministic
    if a != b:
        assert pod_name(a) != pod_name(b)


@pytest.mark.hypothesis
@given(names, names)
def test_label_values_are_valid_and_distinct(a: str, b: str) -> None:
    for value in (a, b):
        assert LABEL_VALUE.fullmatch(label_value(value)) and len(label_value(value)) <= 63
    if a != b:
        assert label_value(a) != label_value(b)


def test_long_names_sharing_a_prefix_do_not_collide() -> None:
    base = "swe-smith__" + "x" * 80
    assert pod_name(base + "1") != pod_name(base + "2")
    assert pod_name("Fix_Add") != pod_name("fix-add")  # same sanitised text, distinct hashes
    assert label_value("fix-add") == "fix-add"  # a valid value is kept readable


def _manifests(**spec: object) -> list[dict]:
    full = {"trial_name": "fix-add__Ab12345", "task_name": "fix-add", **spec}
    return render(
        SandboxSpec(**full), KubernetesConfig(), "registry.forge.internal/forge/task-07:x"
    )  # type: ignore[arg-type]


def test_rendered_pod_carries_every_security_field() -> None:
    pod, policy = _manifests()
    spec = pod["spec"]
    container = spec["containers"][0]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert (
        "runAsUser" not in spec["securityContext"]
    )  # the image's USER (non-root, kubelet-checked)
    forge_profile = {"type": "Localhost", "localhostProfile": "forge/seccomp.json"}
    assert spec["securityContext"]["seccompProfile"] == forge_profile  # not RuntimeDefault
    assert container["securityContext"]["seccompProfile"] == forge_profile  # it overrides
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert spec["imagePullSecrets"] == [{"name": "forge-registry"}]
    assert container["resources"]["limits"]["memory"] == "8192Mi"  # the 8Gi default
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert policy["kind"] == "NetworkPolicy" and policy["spec"]["egress"] == []
    assert (
        policy["spec"]["podSelector"]["matchLabels"]["forge.dev/trial"]
        == pod["metadata"]["labels"]["forge.dev/trial"]
    )


def test_task_memory_and_network_are_honoured() -> None:
    manifests = _manifests(memory_mb=512, network="host", storage_mb=64)
    assert len(manifests) == 1  # the task allows network: no deny policy
    resources = manifests[0]["spec"]["containers"][0]["resources"]
    assert resources["limits"]["memory"] == "512Mi"
    assert resources["limits"]["ephemeral-storage"] == "128Mi"


def test_strict_schema_and_forge_checks_catch_bad_manifests() -> None:
    pod = _manifests()[0]
    assert check_manifest(pod) == []
    typo = copy.deepcopy(pod)
    typo["spec"]["containers"][0]["securityContxt"] = {}  # strict: unknown field
    assert any(v.rule == "k8s.manifest.schema" for v in check_manifest(typo))
    bad = copy.deepcopy(pod)
    bad["metadata"]["name"] = "Forge_" + "x" * 70
    bad["metadata"]["labels"]["forge.dev/task"] = "y" * 64
    bad["spec"]["containers"][0]["resources"]["limits"]["memory"] = "8 GB"
    bad["spec"]["containers"][0]["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}
    bad["spec"]["automountServiceAccountToken"] = True
    found = " | ".join(v.found for v in check_manifest(bad))
    for needle in (
        "RFC 1123",
        "has 76 characters",
        "forge.dev/task",
        "'8 GB' is not a Kubernetes quantity",
        "capabilities must drop ALL",
        "automountServiceAccountToken",
    ):
        assert needle in found, needle
