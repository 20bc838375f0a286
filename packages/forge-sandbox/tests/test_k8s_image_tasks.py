"""Image-only tasks on Kubernetes (pure): the pod runs the task's image in the image's working
directory as the image's user, unless the task says otherwise; the security fields stay."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

pytest.importorskip("kubernetes_validate", reason="install forge-sandbox[kubernetes]")

from forge_sandbox import SandboxSpec, load_task
from forge_sandbox.kubernetes import (
    KubernetesBackend,
    KubernetesConfig,
    KubernetesSandbox,
    check_manifest,
    render,
)
from forge_sandbox.kubernetes._exec import wrap

IMAGE = "registry.forge.internal/forge/task-03:fix-add-0123456789ab"
FIXTURES = Path(__file__).parent / "fixtures" / "tasks"


def image_only_task(tmp_path: Path) -> Path:
    """fix-add in SWE-bench's layout: the repository in the image, no workspace folder."""
    task = tmp_path / "fix-add"
    for source in (FIXTURES / "fix-add").rglob("*"):
        relative = source.relative_to(FIXTURES / "fix-add")
        if source.is_file() and relative.parts[:2] != ("environment", "workspace"):
            (task / relative).parent.mkdir(parents=True, exist_ok=True)
            (task / relative).write_bytes(source.read_bytes())
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /testbed\n")
    return task


def pod(spec: SandboxSpec) -> dict:
    return render(spec, KubernetesConfig(), IMAGE)[0]


def test_an_image_only_task_gets_a_pod_from_its_image_never_a_workspace_refusal(
    tmp_path: Path,
) -> None:
    task = load_task(image_only_task(tmp_path))
    spec = task.sandbox_spec(trial_name="fix-add__Ab12345")
    assert spec.workspace is None
    config = KubernetesConfig(images={"fix-add": IMAGE})
    image = KubernetesBackend(config).image_for(spec)
    sandbox = KubernetesSandbox(spec, config, image)  # no TaskLayoutError: that is local's rule
    container = sandbox.manifests[0]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert "workingDir" not in container  # the runtime starts it in the image's WORKDIR
    assert "runAsUser" not in sandbox.manifests[0]["spec"]["securityContext"]
    assert [m for p in sandbox.manifests for m in check_manifest(p)] == []


def test_workdir_and_user_come_from_the_task_when_it_names_them() -> None:
    psc_default = pod(SandboxSpec(task_name="t", trial_name="t__1"))["spec"]["securityContext"]
    assert psc_default["runAsNonRoot"] is True and "runAsUser" not in psc_default
    named = pod(SandboxSpec(task_name="t", trial_name="t__1", uid=1234, gid=2345, workdir="/app"))
    assert named["spec"]["securityContext"]["runAsUser"] == 1234
    assert named["spec"]["securityContext"]["runAsGroup"] == 2345
    assert named["spec"]["containers"][0]["workingDir"] == "/app"
    with_workspace = pod(SandboxSpec(task_name="t", trial_name="t__1", workspace=FIXTURES))
    assert with_workspace["spec"]["containers"][0]["workingDir"] == "/workspace"


def test_the_security_fields_stay_checked_without_a_uid() -> None:
    manifest = pod(SandboxSpec(task_name="t", trial_name="t__1"))
    rooted = copy.deepcopy(manifest)
    rooted["spec"]["securityContext"]["runAsNonRoot"] = False
    assert any("runAsNonRoot must be true" in v.found for v in check_manifest(rooted))
    zero = copy.deepcopy(manifest)
    zero["spec"]["securityContext"]["runAsUser"] = 0
    assert any("runAsUser" in str(v) for v in check_manifest(zero))
    escalating = copy.deepcopy(manifest)
    escalating["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    assert any("allowPrivilegeEscalation" in v.found for v in check_manifest(escalating))


def test_an_exec_without_cwd_stays_in_the_containers_working_directory(tmp_path: Path) -> None:
    import subprocess

    argv = wrap(["/bin/pwd"], "", {"PATH": "/usr/bin:/bin"}, 10, "0" * 32)
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.stdout == f"{tmp_path}\n" and done.returncode == 0
    named = wrap(["/bin/pwd"], "/", {"PATH": "/usr/bin:/bin"}, 10, "0" * 32)
    moved = subprocess.run(named, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert moved.stdout == "/\n"


def test_a_user_name_is_refused_before_any_pod_exists() -> None:
    """runAsUser takes a number: a task's user by name fails its trial (TaskLayoutError, named,
    with the fix) before the API is called."""
    import asyncio

    from forge_sandbox import TaskLayoutError

    spec = SandboxSpec(task_name="t", trial_name="t__1", user="app")
    calls: list[str] = []

    class Api:  # records every call; a real one would create the pod
        async def call(self, what: str, *args: object, **kwargs: object) -> None:
            calls.append(what)

    sandbox = KubernetesSandbox(spec, KubernetesConfig(), IMAGE, api=Api())  # type: ignore[arg-type]
    with pytest.raises(TaskLayoutError, match=r"found user 'app'; fix: give \[agent\] user"):
        asyncio.run(sandbox.start())
    assert [c for c in calls if c.startswith("create")] == []
