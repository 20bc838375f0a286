"""The Kubernetes backend against the in-process API server (official client, real wire
protocol, pods as local sandboxes): exec, files, and every injected failure as its typed
infrastructure error."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="install forge-sandbox[kubernetes]")
pytest.importorskip("aiohttp", reason="install forge-sandbox[kubernetes]")

from forge_sandbox import (
    SandboxPathError,
    SandboxSpec,
    SandboxStateError,
    load_task,
    run_job,
    trial_name_for,
)
from forge_sandbox.kubernetes import (
    ExecProtocolError,
    ExecStreamLostError,
    ImagePullBackOffError,
    KubernetesAPIError,
    KubernetesBackend,
    PodEvictedError,
    PodNameConflictError,
    PodPendingTimeoutError,
)
from forge_sandbox.testing._fake_state import HttpFault
from forge_sandbox.testing.conformance import check_extract
from forge_sandbox.testing.kubernetes_api import FakeApiServer

pytestmark = pytest.mark.usefixtures("cgroups")  # its pods are local sandboxes shown their cgroup
FIXTURES = Path(__file__).parent / "fixtures" / "tasks"
IMAGE = "registry.forge.internal/forge/task-01:fix-add-0123456789ab"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApiServer]:
    workspace = FIXTURES / "fix-add" / "environment" / "workspace"
    with FakeApiServer({IMAGE: workspace}) as fake:
        yield fake


@pytest.fixture
def backend(server: FakeApiServer) -> Iterator[KubernetesBackend]:
    server.faults.__init__()  # type: ignore[misc]  # every test starts without faults
    backend = KubernetesBackend(server.backend_config(images={"fix-add": IMAGE}))
    yield backend
    backend.close()
    assert server.live_pods() == [], "a pod was left behind"
    assert server.cluster.policies == {}, "a NetworkPolicy was left behind"


def spec(name: str = "t", **fields: object) -> SandboxSpec:
    return SandboxSpec(task_name="fix-add", trial_name=f"fix-add__{name}", **fields)  # type: ignore[arg-type]


def run(coro):
    return asyncio.run(coro)


def test_exec_exit_codes_streams_cwd_env_and_protocols(
    backend: KubernetesBackend, server: FakeApiServer
) -> None:
    async def go() -> None:
        async with backend(spec("exec", env={"GREETING": "hi"})) as sandbox:
            result = await sandbox.exec(
                "echo out; echo err >&2; echo $GREETING $FOO; pwd; id -u; exit 3",
                env={"FOO": "bar"},
            )
            assert (result.stdout, result.stderr, result.exit_code) == (
                "out\nhi bar\n/workspace\n1000\n",
                "err\n",
                3,
            )
            assert (await sandbox.exec(["/bin/pwd"], cwd="/tmp")).stdout == "/tmp\n"
            timed = await sandbox.exec("sleep 30", timeout_s=1)
            assert timed.timed_out and timed.exit_code == 124 and timed.duration_s < 10
            fsize = await sandbox.exec("kill -XFSZ $$")
            assert fsize.file_size_limit_hit and fsize.exit_code == 153

    run(go())
    assert "v5.channel.k8s.io" in server.cluster.exec_protocols
    server.faults.v4_only = True
    sandbox = backend(spec("v4"))

    async def v4() -> None:
        async with sandbox:
            assert (await sandbox.exec("exit 7")).exit_code == 7

    run(v4())
    assert server.cluster.exec_protocols[-1] == "v4.channel.k8s.io"


def test_files_are_binary_safe_and_traversal_is_refused(
    backend: KubernetesBackend, tmp_path: Path
) -> None:
    blob = bytes(range(256)) * 512 + b"\r\n\x00\xff"
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "blob.bin").write_bytes(blob)

    async def go() -> None:
        async with backend(spec("files")) as sandbox:
            await sandbox.upload(tmp_path / "up", "/tmp/up")  # over v5 and via head -c N
            assert (await sandbox.exec("sha256sum /tmp/up/blob.bin")).stdout.split()[
                0
            ] == __import__("hashlib").sha256(blob).hexdigest()
            await sandbox.download("/tmp/up", tmp_path / "down")
            assert (tmp_path / "down" / "blob.bin").read_bytes() == blob
            await sandbox.exec("mkdir -p /tmp/evil && ln -s /etc/passwd /tmp/evil/link")
            with pytest.raises(SandboxPathError, match="escapes"):
                await sandbox.download("/tmp/evil", tmp_path / "evil")
            with pytest.raises(SandboxPathError):
                await sandbox.upload(tmp_path / "up", "/tmp/../etc")
            await check_extract(sandbox, tmp_path)

    run(go())


def test_oom_kill_is_typed_and_never_a_reward(backend: KubernetesBackend) -> None:
    async def go() -> None:
        async with backend(spec("oom", memory_mb=64)) as sandbox:
            result = await sandbox.exec("python3 -c 'x = bytearray(512 * 1024 * 1024)'")
            assert result.oom_killed and result.exit_code == 137
            report = await sandbox.kill_processes()
            assert report.oom_killed

    run(go())


RESPAWN = (  # forks again the moment a pid frees: pids_max stays full
    "python3 -c 'import os,time\nwhile True:\n  try: os.fork() or time.sleep(60)\n"
    "  except OSError: pass'"
)


def test_kill_processes_clears_a_fork_bomb_that_respawns(backend: KubernetesBackend) -> None:
    """A detached loop that forks again whenever a pid frees: the kill is one process of shell
    built-ins (it forked per process, under the wrapper's `timeout` and `env`, before), and
    every later exec works."""
    count = "ls -d /proc/[0-9]* | wc -l"

    async def go() -> None:
        async with backend(spec("respawn", pids_max=48)) as sandbox:
            before = await sandbox.exec(count)
            started = await sandbox.exec(
                "nohup setsid bash -c 'while :; do sleep 60 & done' >/dev/null 2>&1 & "
                "sleep 3; echo started",
                timeout_s=20,
            )
            assert started.stdout == "started\n"
            report = await sandbox.kill_processes()
            assert report.killed >= 30 and report.pids_limit_hit, report
            after = await sandbox.exec(count)
            # no more processes than at the start (one still ending from the pod's own start
            # may be counted before: seen once in five runs)
            assert after.exit_code == 0 and int(after.stdout) <= int(before.stdout), (
                before,
                after,
            )

    run(go())


def test_a_bomb_that_leaves_no_pid_for_the_kill_is_an_error_and_scores_0(
    backend: KubernetesBackend, make_task, tmp_path: Path
) -> None:
    """The fake's pod execs fork inside the pod (nsenter; a real runtime attaches its exec's
    process past pids.max), so a tight respawner leaves no room for any command, the kill
    included: SandboxStateError naming pids_max (it reported killed=0 before), and a trial is
    the agent's doing, scored 0 even by a verifier that would pass: never a dropped episode."""

    async def go() -> None:
        async with backend(spec("tight", pids_max=48)) as sandbox:
            await sandbox.exec(f"nohup setsid {RESPAWN} >/dev/null 2>&1 & sleep 3", timeout_s=20)
            with pytest.raises(SandboxStateError, match="pids_max=48"):
                await sandbox.kill_processes()

    run(go())
    task = make_task(
        "tight",
        "echo 'PASSED t::x'; echo 1 > /logs/verifier/reward.txt\n",
        solve_sh=f"echo fixed > README\nnohup setsid {RESPAWN} >/dev/null 2>&1 &\nsleep 3\n",
    )
    backend.images["tight"] = IMAGE
    summary = run(run_job([load_task(task)], tmp_path / "job", "oracle", make_sandbox=backend))
    assert summary.rewards == {"tight": 0.0}
    assert summary.errors == {"tight": "AgentCausedFailure"}


def test_a_trial_whose_agent_fills_memory_is_its_outcome_scored_by_the_verifier(
    backend: KubernetesBackend, make_task, tmp_path: Path
) -> None:
    """The agent's own memory hog is its outcome (labelled), never a dropped episode: the
    verifier (in a fresh pod) scores what it left."""
    task = make_task(
        "hog",
        "echo 'PASSED t::x'; echo 0 > /logs/verifier/reward.txt\n",
        solve_sh="python3 -c 'x = bytearray(512 * 1024 * 1024)'\n",
        toml='version = "1.0"\n[environment]\nmemory_mb = 64\n',
    )
    backend.images["hog"] = IMAGE
    summary = run(run_job([load_task(task)], tmp_path / "job", "oracle", make_sandbox=backend))
    assert summary.rewards == {"hog": 0.0}
    assert summary.errors == {"hog": "AgentResourceLimitError"}


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        ("pull_backoff", ImagePullBackOffError, "ErrImagePull|ImagePullBackOff"),
        ("pending", PodPendingTimeoutError, "Unschedulable"),
    ],
)
def test_start_failures_are_typed(
    backend: KubernetesBackend,
    server: FakeApiServer,
    fault: str,
    error: type[Exception],
    message: str,
) -> None:
    getattr(server.faults, fault).add(IMAGE)
    backend.config = backend.config.model_copy(update={"start_timeout_s": 1.0})

    async def go() -> None:
        with pytest.raises(error, match=message):
            await backend(spec(fault)).start()

    run(go())  # and the backend fixture checks the pod and its policy were deleted


def test_unknown_image_is_a_pull_failure_and_a_task_without_image_is_refused(
    backend: KubernetesBackend, tmp_path: Path
) -> None:
    async def go() -> None:
        with pytest.raises(ImagePullBackOffError, match="ErrImagePull|ImagePullBackOff"):
            await backend(spec("noimg", image="registry.forge.internal/forge/task-02:nope")).start()

    run(go())
    from forge_sandbox.kubernetes import ImageNotBuiltError

    with pytest.raises(ImageNotBuiltError, match="no public|never falls back"):
        backend(SandboxSpec(task_name="unplanned", trial_name="unplanned__1"))


def test_eviction_dropped_websocket_and_kubelet_errors_are_typed(
    backend: KubernetesBackend, server: FakeApiServer
) -> None:
    async def go() -> None:
        async with backend(spec("drop")) as sandbox:
            server.faults.drop_exec = 1
            with pytest.raises(ExecStreamLostError, match="status"):
                await sandbox.exec("echo hi")  # a lost exit status is never success
            server.faults.kubelet_error_exec = 1
            with pytest.raises(ExecProtocolError, match="InternalError"):
                await sandbox.exec("true")
            assert (await sandbox.exec("echo still")).stdout == "still\n"
            server.faults.evict_on_exec = 1
            with pytest.raises(PodEvictedError, match="Evicted"):
                await sandbox.exec("true")

    run(go())


def test_api_5xx_and_429_are_retried_with_backoff_a_bounded_number_of_times(
    backend: KubernetesBackend, server: FakeApiServer
) -> None:
    server.faults.http.append(HttpFault(r"^POST .*/pods$", 503, times=2))
    server.faults.http.append(
        HttpFault(r"^GET .*/pods/forge-[^/]*$", 429, times=2, retry_after=0.1)
    )

    async def go() -> None:
        async with backend(spec("retry")) as sandbox:
            assert (await sandbox.exec("true")).exit_code == 0

    run(go())
    assert backend.api.retries >= 4
    server.faults.http.append(HttpFault(r"^POST .*/pods$", 500, times=100))

    async def exhausted() -> None:
        with pytest.raises(KubernetesAPIError, match="within 5 attempts"):
            await backend(spec("exhausted")).start()

    run(exhausted())
    server.faults.http.clear()


def test_name_collision_is_a_409_error_and_leaves_the_other_pod(
    backend: KubernetesBackend, server: FakeApiServer
) -> None:
    async def go() -> None:
        async with backend(spec("same")):
            with pytest.raises(PodNameConflictError, match="k8s gc"):
                await backend(spec("same")).start()
            assert len(server.live_pods()) == 1  # the first trial's pod is untouched

    run(go())


def test_cancelled_trials_delete_their_pods_and_gc_sweeps_by_label(
    backend: KubernetesBackend, server: FakeApiServer
) -> None:
    async def go() -> None:
        sandboxes = [backend(spec(f"cancel{i}")) for i in range(3)]
        for sandbox in sandboxes:
            await sandbox.start()

        async def work(sandbox) -> None:
            try:
                await sandbox.exec("sleep 60")
            finally:
                await sandbox.stop()

        tasks = [asyncio.ensure_future(work(s)) for s in sandboxes]
        await asyncio.sleep(1.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert server.live_pods() == []
        leftover = backend(spec("leftover"))
        await leftover.start()  # a crashed run: nobody stops it
        assert await backend.list_pods() == [leftover.pod_name]
        removed = await backend.gc()
        assert removed["pods"] == [leftover.pod_name] and removed["networkpolicies"] == [
            leftover.pod_name
        ]
        assert await backend.list_pods() == []

    run(go())


def test_egress_is_denied_unless_the_task_allows_network(backend: KubernetesBackend) -> None:
    probe = "tail -n +3 /proc/net/dev | cut -d: -f1"

    async def go() -> None:
        async with backend(spec("nonet")) as sandbox:  # the NetworkPolicy denies egress
            assert (await sandbox.exec(probe)).stdout.split() == ["lo"]
        async with backend(spec("net", network="host")) as sandbox:  # no policy rendered
            assert len((await sandbox.exec(probe)).stdout.split()) > 1

    run(go())


def test_oracle_job_through_kubernetes_scores_and_records(
    backend: KubernetesBackend, tmp_path: Path, server: FakeApiServer
) -> None:
    task = load_task(FIXTURES / "fix-add")
    summary = run(run_job([task], tmp_path / "job", "oracle", make_sandbox=backend))
    assert summary.rewards == {"fix-add": 1.0} and summary.errors == {}
    trial = next((tmp_path / "job").glob("fix-add__*"))
    assert json.loads((trial / "result.json").read_text())["exception_info"] is None
    for config in (tmp_path / "job" / "config.json", trial / "config.json"):
        assert json.loads(config.read_text())["environment"] == {
            "import_path": None,  # not Forge's Harbor environment (the local backend's)
            "forge_sandbox": "forge_sandbox.kubernetes._backend:KubernetesBackend",
        }
    created = server.cluster.created[-1]
    assert created.startswith("forge-fix-add-") and len(created) <= 63


def test_a_warm_pod_evicted_while_it_waits_is_replaced_never_used(
    backend: KubernetesBackend, tmp_path: Path, server: FakeApiServer
) -> None:
    task = load_task(FIXTURES / "fix-add")
    victim = trial_name_for(task.name, 1)  # the second attempt's pod waits in the warm queue

    def make(sandbox_spec: SandboxSpec):
        box = backend(sandbox_spec)
        if sandbox_spec.trial_name == victim:
            real = box.check_alive

            async def evicted_then_checked() -> None:
                server.evict(box.pod_name)
                await real()

            box.check_alive = evicted_then_checked  # type: ignore[method-assign]
        return box

    job = tmp_path / "job"
    summary = run(run_job([task], job, "oracle", attempts=2, concurrency=1, warm=1,
                          make_sandbox=make))  # fmt: skip
    assert summary.rewards == {"fix-add#0": 1.0, "fix-add#1": 1.0} and summary.errors == {}
    starts = json.loads((job / victim / "result.json").read_text())["sandbox_starts"]
    assert starts["agent"].startswith("replaced: PodEvictedError") and "Evicted" in starts["agent"]
    assert starts["verifier"] == "prestarted"
    first = json.loads((job / trial_name_for(task.name, 0) / "result.json").read_text())
    assert first["sandbox_starts"]["agent"] == "warm"
    assert first["sandbox_starts"]["verifier"] == "prestarted"


def test_canary_secrets_never_reach_logs_run_folders_or_traces(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    canary = "CANARY-" + os.urandom(8).hex()
    workspace = FIXTURES / "fix-add" / "environment" / "workspace"
    os.environ["FORGE_REGISTRY_PASSWORD"] = canary + "-registry"
    try:
        with FakeApiServer({IMAGE: workspace}, token=canary) as fake:
            backend = KubernetesBackend(fake.backend_config(images={"fix-add": IMAGE}))
            task = load_task(FIXTURES / "fix-add")
            run(run_job([task], tmp_path / "job", "oracle", make_sandbox=backend))
            fake.faults.http.append(HttpFault(r"^POST .*/pods$", 403, times=1))
            run(run_job([task], tmp_path / "job403", "oracle", make_sandbox=backend))
            from forge_sandbox.cli import main

            config = tmp_path / "k8s.toml"
            config.write_text(f'kubeconfig = "{fake.kubeconfig}"\n')
            main(["doctor", "--backend", "kubernetes", "--k8s-config", str(config), "--json"])
            backend.close()
    finally:
        del os.environ["FORGE_REGISTRY_PASSWORD"]
    captured = capfd.readouterr()
    assert canary not in captured.out + captured.err + caplog.text
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "k8s.toml":
            assert canary.encode() not in path.read_bytes(), path
    errors = json.loads(next((tmp_path / "job403").glob("fix-add__*/result.json")).read_text())
    assert errors["exception_info"]["exception_type"] == "KubernetesAPIError"


def test_doctor_checks_every_verb_namespace_and_pull_secret(
    server: FakeApiServer, tmp_path: Path
) -> None:
    from forge_sandbox.kubernetes import KubernetesConfig
    from forge_sandbox.kubernetes._doctor import VERBS, run_k8s_doctor

    server.faults.__init__()  # type: ignore[misc]
    config = KubernetesConfig(kubeconfig=server.kubeconfig)
    probes = {p.name: p for p in run_k8s_doctor(config)}
    assert all(p.ok for p in probes.values()), [p for p in probes.values() if not p.ok]
    assert sum(name.startswith("rbac ") for name in probes) == len(VERBS)
    server.faults.denied_verbs.add(("create", "pods/exec"))
    denied = {
        p.name: p for p in run_k8s_doctor(config.model_copy(update={"image_pull_secret": "absent"}))
    }
    assert (
        not denied["rbac create pods/exec"].ok
        and "grant `create` on pods/exec" in denied["rbac create pods/exec"].fix
    )
    assert (
        not denied["pull-secret"].ok
        and "create secret docker-registry" in denied["pull-secret"].fix
    )
    server.faults.__init__()  # type: ignore[misc]
