"""The Docker backend's pure logic, no daemon: the container a task gets (user, workdir,
capabilities, limits, network, labels), the SDK error mapping, the exec wrapper's report, the
base-image rewrites and build tags, and where an image-only task is refused (local only).
The same backend against a real daemon: packages/forge-sandbox/docker_tests (`nox -s docker`)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from docker import errors as sdk_errors

from forge_sandbox import SandboxSpec, load_task, open_backend
from forge_sandbox.docker import (
    OWNER_LABEL,
    ContainerDiedError,
    ContainerStartError,
    DockerBackend,
    DockerConfig,
    DockerDaemonError,
    DockerUnavailableError,
    ImageBuildError,
    ImageNotAllowedError,
    ImagePullError,
    _exec,
    container_name,
    create_body,
    labels,
    map_docker_error,
)
from forge_sandbox.docker._backend import storage_quota_supported
from forge_sandbox.docker._create import exec_user, workdir
from forge_sandbox.docker._images import build_context, build_tag, rewrite_dockerfile
from forge_sandbox.docker._sandbox import owned_by
from forge_sandbox.seccomp import seccomp_profile

IMAGE_CONFIG = {"User": "", "WorkingDir": "/testbed", "Env": ["PATH=/opt/conda/bin:/usr/bin"]}


def _body(spec: SandboxSpec, config: DockerConfig | None = None, **image: Any) -> dict[str, Any]:
    return create_body(
        spec, config or DockerConfig(), "img:1", {**IMAGE_CONFIG, **image}, storage_opt=False
    )


def test_a_task_container_has_least_privilege_and_the_task_limits() -> None:
    spec = SandboxSpec(memory_mb=512, pids_max=99, cpus=1.5, file_size_mb=8, open_files=64)
    host = _body(spec)["HostConfig"]
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and host["CapAdd"] == []
    no_new_privileges, seccomp = host["SecurityOpt"]
    assert no_new_privileges == "no-new-privileges"
    assert json.loads(seccomp.removeprefix("seccomp=")) == seccomp_profile()
    assert host["Init"] is True
    assert host["Memory"] == host["MemorySwap"] == 512 * 1024 * 1024  # no swap escape
    assert host["PidsLimit"] == 99
    assert host["NanoCpus"] == 1_500_000_000
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
    assert ulimits == {"fsize": (8 << 20, 8 << 20), "nofile": (64, 64), "core": (0, 0)}
    assert "StorageOpt" not in host


def test_network_is_none_unless_the_spec_allows_the_host() -> None:
    closed = _body(SandboxSpec())
    assert closed["HostConfig"]["NetworkMode"] == "none" and closed["NetworkDisabled"] is True
    opened = _body(SandboxSpec(network="host"))
    assert opened["HostConfig"]["NetworkMode"] == "host" and opened["NetworkDisabled"] is False


def test_commands_run_as_the_image_user_in_the_image_workdir_unless_told() -> None:
    def command(spec: SandboxSpec, config: DockerConfig | None = None, **image: Any) -> tuple:
        image_config = {**IMAGE_CONFIG, **image}
        return exec_user(image_config, spec, config or DockerConfig()), workdir(image_config, spec)

    assert command(SandboxSpec()) == ("0", "/testbed")  # no USER: root
    assert command(SandboxSpec(), User="app")[0] == "app"
    assert command(SandboxSpec(), WorkingDir="")[1] == "/"
    assert command(SandboxSpec(uid=1234, gid=1234, workdir="/src")) == ("1234:1234", "/src")
    assert command(SandboxSpec(), DockerConfig(user="nobody"), User="app")[0] == "nobody"


def test_the_main_process_runs_as_a_uid_no_command_has() -> None:
    """pid 1 and `sleep infinity` as main_user in /: a command (another uid, no capability)
    cannot ptrace them or write their memory through /proc/PID/mem. main_user None: as a
    Kubernetes pod runs them (the commands' user, in their folder)."""
    cases: list[tuple[SandboxSpec, dict[str, Any]]] = [
        (SandboxSpec(), {}),
        (SandboxSpec(uid=1234, gid=1234), {"User": "app"}),
    ]
    for spec, image in cases:
        body = _body(spec, None, **image)
        assert (body["User"], body["WorkingDir"]) == ("65533:65533", "/")
        assert body["User"] != exec_user({**IMAGE_CONFIG, **image}, spec, DockerConfig())
    pod_like = _body(SandboxSpec(), DockerConfig(main_user=None), User="app")
    assert (pod_like["User"], pod_like["WorkingDir"]) == ("app", "/testbed")
    with pytest.raises(ValueError, match="main_user"):
        DockerConfig.model_validate({"main_user": "nobody"})


def test_the_image_entrypoint_is_replaced_by_the_sandbox_main_process() -> None:
    body = _body(SandboxSpec(env={"A": "1"}))
    assert (body["Entrypoint"], body["Cmd"]) == (["sleep"], ["infinity"])
    assert body["Env"] == ["A=1"]


def test_added_capabilities_and_storage_quota_come_from_config_and_driver() -> None:
    spec = SandboxSpec(storage_mb=300)
    host = create_body(spec, DockerConfig(cap_add=["CHOWN"]), "i", {}, storage_opt=True)[
        "HostConfig"
    ]
    assert host["CapAdd"] == ["CHOWN"] and host["StorageOpt"] == {"size": "300M"}
    assert storage_quota_supported(
        {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "xfs"]]}
    )
    assert not storage_quota_supported(
        {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}
    )


def test_labels_carry_the_owner_and_bounded_task_and_trial() -> None:
    spec = SandboxSpec(task_name="t" * 300, trial_name="fix-add__abc1234")
    got = labels(spec, DockerConfig(owner="ci-7"))
    assert got[OWNER_LABEL] == "ci-7"
    assert got["forge-sandbox.trial"] == "fix-add__abc1234"
    assert len(got["forge-sandbox.task"]) == 199
    assert container_name(spec, "0a1b2c3d") == "forge-fix-add__abc1234-0a1b2c3d"
    weird = SandboxSpec(trial_name="a b/c:d" * 20)
    name = container_name(weird, "ffffffff")
    assert len(name) <= 55 and " " not in name and "/" not in name


class _Response:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.reason = "x"


def _api_error(status: int, text: str) -> Exception:
    return sdk_errors.APIError("boom", response=_Response(status), explanation=text)  # type: ignore[arg-type]


def test_sdk_errors_become_typed_infrastructure_errors() -> None:
    pull = map_docker_error(sdk_errors.ImageNotFound("no such image: x"), "create", image="x")
    assert isinstance(pull, ImagePullError)
    build = map_docker_error(sdk_errors.BuildError("step 2 failed", []), "build")
    assert isinstance(build, ImageBuildError)
    died = map_docker_error(_api_error(409, "Container abc is not running"), "exec")
    assert isinstance(died, ContainerDiedError)
    gone = map_docker_error(_api_error(404, "No such container: abc"), "exec")
    assert isinstance(gone, ContainerDiedError)
    daemon = map_docker_error(_api_error(500, "devmapper: out of space"), "create")
    assert isinstance(daemon, DockerDaemonError) and daemon.status == 500
    down = map_docker_error(sdk_errors.DockerException("Error while fetching server API"), "x")
    assert isinstance(down, DockerUnavailableError) and "DOCKER_HOST" in str(down)
    for error in (pull, build, died, daemon):
        text = str(error)
        assert "expected" in text and "found" in text and "fix" in text


def test_the_wrapper_report_is_split_off_stderr_and_read() -> None:
    nonce = _exec.new_nonce()
    stderr = b"real error\n" + f"{nonce} 137 4 4 0 1\n".encode()
    rest, trailer = _exec.split_trailer(stderr, nonce)
    assert rest == b"real error\n" and trailer is not None
    assert (trailer.exit_code, trailer.oom_killed, trailer.pids_hit) == (137, True, False)
    _, forked = _exec.split_trailer(f"{nonce} 1 0 3 0 0\n".encode(), nonce)
    assert forked is not None and forked.pids_hit and not forked.oom_killed
    _, unread = _exec.split_trailer(f"{nonce} 0 - - - -\n".encode(), nonce)
    assert unread is not None and unread.pids_hit  # an unread counter is never "not hit"
    assert _exec.split_trailer(b"no report", nonce) == (b"no report", None)
    assert _exec.exec_env({"A": "1"}, nonce) == ["A=1", f"FORGE_SANDBOX_EXEC={nonce}"]


def test_bases_are_rewritten_and_a_missing_rewrite_is_refused_when_required() -> None:
    text = "FROM python:3.11-slim AS deps\nRUN true\nFROM deps\nFROM --platform=x busybox\n"
    config = DockerConfig(rewrites={"python:": "reg:5000/mirror/python:", "busybox": "reg/b:1"})
    out = rewrite_dockerfile(text, config, "task t")
    assert out.splitlines() == [
        "FROM reg:5000/mirror/python:3.11-slim AS deps",
        "RUN true",
        "FROM deps",
        "FROM --platform=x reg/b:1",
    ]
    assert rewrite_dockerfile(text, DockerConfig(), "t") == text  # no rewrites, not required
    with pytest.raises(
        ImageNotAllowedError, match="private-registry rewrite for base image 'busybox'"
    ):
        rewrite_dockerfile(
            text, DockerConfig(rewrites={"python:": "r/"}, require_rewrite=True), "t"
        )


def test_build_tag_follows_the_context_not_its_timestamps(tmp_path: Path) -> None:
    env = tmp_path / "environment"
    (env / "repo").mkdir(parents=True)
    (env / "repo" / "a.py").write_text("x = 1\n")
    first = build_tag("My_Task", build_context(env, "FROM b\n"))
    (env / "repo" / "a.py").touch()
    assert build_tag("My_Task", build_context(env, "FROM b\n")) == first
    assert first.startswith("forge-task/my_task:")
    assert build_tag("My_Task", build_context(env, "FROM c\n")) != first
    (env / "repo" / "a.py").write_text("x = 2\n")
    assert build_tag("My_Task", build_context(env, "FROM b\n")) != first


def test_uploads_are_owned_by_the_exec_user() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("d/f")
        info.size, info.uid = 3, 0
        tar.addfile(info, io.BytesIO(b"abc"))
    with tarfile.open(fileobj=io.BytesIO(owned_by(buffer.getvalue(), 1000, 1001))) as tar:
        (member,) = tar.getmembers()
        assert (member.uid, member.gid) == (1000, 1001)
        assert tar.extractfile(member).read() == b"abc"  # type: ignore[union-attr]


def test_open_backend_docker_connects_lazily_and_refuses_local_options() -> None:
    backend = open_backend("docker", config=DockerConfig(owner="lazy"))
    assert isinstance(backend, DockerBackend) and backend._api is None
    with pytest.raises(TypeError, match="expected only config= and tasks="):
        open_backend("docker", bwrap="x")
    with pytest.raises(ValueError, match="'local', 'kubernetes' or 'docker'"):
        open_backend("podman")


class _Info:
    def info(self) -> dict[str, Any]:
        return {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}


def test_storage_that_the_driver_cannot_cap_is_refused_or_warned() -> None:
    enforce = DockerBackend(DockerConfig(storage="enforce"))
    enforce._api = _Info()
    with pytest.raises(ContainerStartError, match="storage_mb=64: expected a storage driver"):
        enforce(SandboxSpec(storage_mb=64))
    lenient = DockerBackend(DockerConfig())
    lenient._api = _Info()
    with pytest.warns(UserWarning, match="storage_mb=64 is not enforced"):
        sandbox = lenient(SandboxSpec(storage_mb=64))
    assert sandbox.storage_opt is False
    assert lenient(SandboxSpec()).storage_opt is False  # no storage asked: no warning


def test_an_image_only_task_reaches_image_backends(tmp_path: Path, make_task) -> None:
    """The workspace requirement is the local backend's: sandbox_spec gives workspace=None
    (LocalSandbox refuses it at start, test_jobs.py), the Docker backend builds the image."""
    task = make_task("image-only", "exit 0\n")
    shutil.rmtree(task / "environment" / "workspace")
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11\nWORKDIR /testbed\n")
    spec = load_task(task).sandbox_spec(trial_name="image-only__1")
    assert spec.workspace is None and spec.task_name == "image-only"


def test_the_docker_config_file_is_read_and_a_bad_one_named(tmp_path: Path) -> None:
    good = tmp_path / "docker.toml"
    good.write_text('owner = "ci"\nrequire_rewrite = true\n[rewrites]\n"a:1" = "r/a:1"\n')
    config = DockerConfig.load(good)
    assert config.owner == "ci" and config.require_rewrite and config.rewrites == {"a:1": "r/a:1"}
    bad = tmp_path / "bad.toml"
    bad.write_text('ownr = "ci"\n')
    with pytest.raises(DockerUnavailableError, match="ownr"):
        DockerConfig.load(bad)
