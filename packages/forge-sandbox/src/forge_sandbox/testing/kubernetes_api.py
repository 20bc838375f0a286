"""An in-process Kubernetes API server for tests: the real wire protocol, local pods.

It speaks what the official client uses: pods (create / get / list with label selectors /
delete, status transitions, logs), exec over the websocket (v5.channel.k8s.io and
v4.channel.k8s.io framing, status on channel 3), NetworkPolicies, Secrets, ServiceAccounts,
Namespaces and SelfSubjectAccessReviews, behind a bearer token. A pod runs on one of two
runtimes (`runtime=`; `pod_runtime()` picks "docker" when DOCKER_HOST is set): "local", a
bubblewrap sandbox (LocalSandbox) over the workspace folder its image stands for, with the pod's
memory / CPU / uid / storage, its pids cgroup shown at /sys/fs/cgroup as a container runtime
would; or "docker", a real container from the pod's image built from its recipe (the images
plan's Dockerfile) on the daemon, as the image's user in its WORKDIR unless the pod names them,
runAsNonRoot enforced (see _docker_pods). Either gets network only when no NetworkPolicy denies
its egress. An exec that is OOM-killed kills
the container (pod Failed, OOMKilled, exit 137), as on cgroup v2. Faults are injected through
`server.faults` (see _fake_state.Faults). Created pods are strictly schema-validated (422).

    with FakeApiServer({"reg/task-01:fix-add-1": Path("tasks/fix-add/environment/workspace")}) as s:
        config = s.backend_config()   # a KubernetesConfig on this server's kubeconfig
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import signal
import tempfile
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from forge_gates import atomic_write_text
from forge_sandbox._spec import SandboxSpec
from forge_sandbox._task import discover_tasks
from forge_sandbox.docker import DockerConfig
from forge_sandbox.images import ImagesConfig, plan_images
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._manifests import check_manifest
from forge_sandbox.kubernetes._seccomp import (
    INSTALLER,
    INSTALLER_NAMESPACE,
    render_seccomp_installer,
)
from forge_sandbox.local._sandbox import LocalSandbox
from forge_sandbox.seccomp import KUBELET_SECCOMP_ROOT, LOCALHOST_PROFILE
from forge_sandbox.testing._docker_pods import (
    DockerPods,
    ImageRecipe,
    non_root_problem,
    recipes_for,
    spec_for,
)
from forge_sandbox.testing._fake_state import Cluster, Faults, matches, now, status_body

RUNTIMES = ("local", "docker")


def pod_runtime(asked: str | None = None) -> str:
    """The pods' runtime: `asked`, else $FORGE_K8S_POD_RUNTIME, else "docker" when DOCKER_HOST
    names a daemon, else "local" (bubblewrap: the plain `nox -s tests` run needs no daemon)."""
    chosen = asked or os.environ.get("FORGE_K8S_POD_RUNTIME")
    chosen = chosen or ("docker" if os.environ.get("DOCKER_HOST") else "local")
    if chosen not in RUNTIMES:
        raise ValueError(
            f"pod runtime: expected one of {RUNTIMES}; found {chosen!r}; fix: set "
            "FORGE_K8S_POD_RUNTIME to local or docker"
        )
    return chosen


PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
FRAME = 1 << 20
NS = r"/api/v1/namespaces/{ns}"
VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-forge-inprocess",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2026-12-01T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _mebibytes(quantity: str | None) -> int | None:
    if not quantity:
        return None
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return max(1, int(float(quantity[: -len(unit)]) * factor))
    return max(1, int(float(quantity) / (1024 * 1024)))


def _cores(quantity: str | None) -> float:
    if not quantity:
        return 1.0
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _installed_daemonset() -> dict[str, Any]:
    """Forge's seccomp installer as `kubectl apply` leaves it on this one-node cluster: ready
    (the node holds the profile: pods with seccomp_profile 'forge' start)."""
    daemonset = render_seccomp_installer()[1]
    daemonset["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=now())
    daemonset["status"] = {
        "currentNumberScheduled": 1,
        "desiredNumberScheduled": 1,
        "numberMisscheduled": 0,
        "numberReady": 1,
    }
    return daemonset


class FakeApiServer:
    """The server, on its own event loop thread. `images`: image reference -> the folder its
    /workspace holds (what the task's Dockerfile copies; the "local" runtime); `recipes`: image
    reference -> how to build it (the "docker" runtime)."""

    def __init__(
        self,
        images: Mapping[str, Path] | None = None,
        *,
        token: str | None = None,
        state_root: str | None = None,
        runtime: str = "local",
        recipes: Mapping[str, ImageRecipe] | None = None,
    ) -> None:
        self.runtime = pod_runtime(runtime)
        self.images: dict[str, Any] = dict(images or {})
        if self.runtime == "docker":
            self.images = dict(recipes or {})
        self.pods: DockerPods | None = None
        self.token = token or secrets.token_hex(16)
        self.cluster = Cluster()
        self.cluster.secrets[("forge-sandbox", "forge-registry")] = {
            "type": "kubernetes.io/dockerconfigjson"
        }
        self.cluster.service_accounts.add(("forge-sandbox", "forge-sandbox"))
        self.cluster.daemonsets[(INSTALLER_NAMESPACE, INSTALLER)] = _installed_daemonset()
        self.faults = Faults()
        self.sandboxes: dict[tuple[str, str], Any] = {}  # LocalSandbox | DockerSandbox
        self._state_root = state_root
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._dir = Path(tempfile.mkdtemp(prefix="forge-k8s-api-"))
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> FakeApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self.runtime == "docker":
            self.pods = DockerPods(self.images)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(30)
        self.kubeconfig = self._dir / "kubeconfig"
        self.kubeconfig.write_text(self.kubeconfig_text())
        os.chmod(self.kubeconfig, 0o600)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        with contextlib.suppress(OSError):
            for path in self._dir.iterdir():
                path.unlink()
            self._dir.rmdir()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig_text(self) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "inprocess", "cluster": {"server": self.url}}],
                "users": [{"name": "forge", "user": {"token": self.token}}],
                "contexts": [
                    {
                        "name": "inprocess",
                        "context": {
                            "cluster": "inprocess",
                            "user": "forge",
                            "namespace": "forge-sandbox",
                        },
                    }
                ],
                "current-context": "inprocess",
            }
        )

    def backend_config(self, **fields: Any) -> KubernetesConfig:
        """A KubernetesConfig for this server (fast polls, short backoff; overridable)."""
        defaults: dict[str, Any] = {
            "kubeconfig": self.kubeconfig,
            "poll_interval_s": 0.05,
            "backoff_s": 0.05,
            "backoff_max_s": 0.2,
            "start_timeout_s": 20.0,
            "exec_grace_s": 5.0,
        }
        return KubernetesConfig(**{**defaults, **fields})

    def evict(self, name: str, namespace: str = "forge-sandbox") -> None:
        """Evict pod `name` now (as node pressure does): phase Failed, reason Evicted, its
        sandbox stopped; the pod object stays until deleted."""

        async def evict() -> None:
            pod = self.cluster.pods[(namespace, name)]
            pod["status"].update(
                phase="Failed", reason="Evicted", message="The node was low on resource: memory."
            )
            await self._retire(namespace, name)

        asyncio.run_coroutine_threadsafe(evict(), self._loop).result(timeout=30)

    def live_pods(self, selector: str | None = None) -> list[str]:
        return [
            n
            for (_, n), p in self.cluster.pods.items()
            if matches(p["metadata"].get("labels", {}), selector)
        ]

    async def _serve(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=1024**3)
        pods = NS + "/pods"
        app.router.add_get("/version", self._version)
        app.router.add_get("/version/", self._version)
        app.router.add_get(NS, self._get_namespace)
        app.router.add_get(NS + "/secrets/{name}", self._get_secret)
        app.router.add_get(NS + "/serviceaccounts/{name}", self._get_service_account)
        app.router.add_post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", self._ssar)
        app.router.add_post(pods, self._create_pod)
        app.router.add_get(pods, self._list_pods)
        app.router.add_get(pods + "/{name}", self._get_pod)
        app.router.add_delete(pods + "/{name}", self._delete_pod)
        app.router.add_get(pods + "/{name}/log", self._log)
        app.router.add_get(pods + "/{name}/exec", self._exec)
        app.router.add_post(pods + "/{name}/exec", self._exec)
        app.router.add_get("/apis/apps/v1/namespaces/{ns}/daemonsets/{name}", self._get_daemonset)
        policies = "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
        app.router.add_post(policies, self._create_policy)
        app.router.add_get(policies, self._list_policies)
        app.router.add_delete(policies + "/{name}", self._delete_policy)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]  # an asyncio Server

    async def _shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for sandbox in list(self.sandboxes.values()):
            with contextlib.suppress(Exception):
                await sandbox.stop()
        self.sandboxes.clear()
        if self.pods is not None:
            await asyncio.to_thread(self.pods.gc)
            self.pods.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- plumbing --------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.cluster.requests.append(f"{request.method} {request.path}")
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _json(status_body(401, "Unauthorized", "Unauthorized"), 401)
        fault = self.faults.http_fault(request.method, request.path)
        if fault is not None:
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
            reason = {429: "TooManyRequests"}.get(fault.status, "InternalError")
            body = status_body(fault.status, reason, f"injected HTTP {fault.status}")
            return _json(body, fault.status, headers)
        return await handler(request)

    def _missing(self, kind: str, name: str) -> web.Response:
        return _json(status_body(404, "NotFound", f'{kind} "{name}" not found'), 404)

    async def _version(self, request: web.Request) -> web.Response:
        return _json(VERSION)

    async def _get_namespace(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        if ns not in self.cluster.namespaces:
            return self._missing("namespaces", ns)
        return _json(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns},
                "status": {"phase": "Active"},
            }
        )

    async def _get_secret(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        secret = self.cluster.secrets.get((ns, name))
        if secret is None:
            return self._missing("secrets", name)
        return _json(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": secret["type"],
                "metadata": {"name": name, "namespace": ns},
            }
        )

    async def _get_service_account(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if (ns, name) not in self.cluster.service_accounts:
            return self._missing("serviceaccounts", name)
        return _json(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": ns},
            }
        )

    async def _ssar(self, request: web.Request) -> web.Response:
        body = await request.json()
        attrs = body.get("spec", {}).get("resourceAttributes", {})
        resource = attrs.get("resource", "")
        if attrs.get("subresource"):
            resource += "/" + attrs["subresource"]
        denied = (attrs.get("verb"), resource) in self.faults.denied_verbs
        body["status"] = {"allowed": not denied, **({"reason": "RBAC: denied"} if denied else {})}
        return _json(body, 201)

    # -- network policies ------------------------------------------------------------------

    async def _create_policy(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        body = await request.json()
        name = body["metadata"]["name"]
        if (ns, name) in self.cluster.policies:
            return _json(
                status_body(409, "AlreadyExists", f'networkpolicies "{name}" already exists'), 409
            )
        body["metadata"].update(
            uid=str(uuid.uuid4()),
            creationTimestamp=now(),
            resourceVersion=self.cluster.next_version(),
        )
        self.cluster.policies[(ns, name)] = body
        return _json(body, 201)

    async def _list_policies(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        selector = request.query.get("labelSelector")
        items = [
            p
            for (n, _), p in self.cluster.policies.items()
            if n == ns and matches(p["metadata"].get("labels", {}), selector)
        ]
        return _json(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicyList",
                "metadata": {},
                "items": items,
            }
        )

    async def _delete_policy(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        if self.cluster.policies.pop((ns, name), None) is None:
            return self._missing("networkpolicies", name)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})

    def _egress_denied(self, ns: str, labels: dict[str, str]) -> bool:
        for (policy_ns, _), policy in self.cluster.policies.items():
            spec = policy.get("spec", {})
            selected = spec.get("podSelector", {}).get("matchLabels", {})
            selects = policy_ns == ns and all(labels.get(k) == v for k, v in selected.items())
            if selects and "Egress" in spec.get("policyTypes", []) and not spec.get("egress"):
                return True
        return False

    # -- pods ------------------------------------------------------------------------------

    async def _create_pod(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        body = await request.json()
        problems = check_manifest(body)
        if problems:
            message = "Pod is invalid: " + "; ".join(str(p) for p in problems)
            return _json(status_body(422, "Invalid", message), 422)
        name = body["metadata"]["name"]
        if (ns, name) in self.cluster.pods:
            return _json(status_body(409, "AlreadyExists", f'pods "{name}" already exists'), 409)
        container = body["spec"]["containers"][0]
        body["metadata"].update(
            uid=str(uuid.uuid4()),
            creationTimestamp=now(),
            resourceVersion=self.cluster.next_version(),
        )
        body["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [
                self._container_status(container, waiting=("ContainerCreating", ""))
            ],
        }
        self.cluster.pods[(ns, name)] = body
        self.cluster.created.append(name)
        self._spawn(self._kubelet(ns, name))
        return _json(body, 201)

    def _container_status(
        self,
        container: dict[str, Any],
        *,
        waiting: tuple[str, str] | None = None,
        running: bool = False,
        terminated: tuple[str, int] | None = None,
    ) -> dict[str, Any]:
        image = container["image"]
        digest = hashlib.sha256(image.encode()).hexdigest()
        state: dict[str, Any]
        if terminated is not None:
            state = {
                "terminated": {
                    "reason": terminated[0],
                    "exitCode": terminated[1],
                    "finishedAt": now(),
                }
            }
        elif running:
            state = {"running": {"startedAt": now()}}
        else:
            reason, message = waiting or ("ContainerCreating", "")
            state = {"waiting": {"reason": reason, "message": message}}
        return {
            "name": container["name"],
            "image": image,
            "imageID": f"{image.split(':')[0]}@sha256:{digest}" if running else "",
            "ready": running,
            "started": running,
            "restartCount": 0,
            "state": state,
        }

    async def _kubelet(self, ns: str, name: str) -> None:
        pod = self.cluster.pods[(ns, name)]
        container = pod["spec"]["containers"][0]
        image = container["image"]
        status = pod["status"]
        if image in self.faults.pending:
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: insufficient memory (injected)",
                }
            ]
            status["containerStatuses"] = []
            return
        await asyncio.sleep(0.01)
        if image in self.faults.pull_backoff or image not in self.images:
            reason = "ErrImagePull"
            status["containerStatuses"] = [
                self._container_status(
                    container, waiting=(reason, f'failed to pull image "{image}": not found')
                )
            ]
            await asyncio.sleep(0.05)
            status["containerStatuses"] = [
                self._container_status(
                    container, waiting=("ImagePullBackOff", f'Back-off pulling image "{image}"')
                )
            ]
            return
        if image in self.faults.oom_at_start:
            self._terminate(pod, "OOMKilled", 137)
            return
        missing = self._missing_seccomp_profile(pod)
        if missing is not None:  # as containerd says it; the kubelet retries, the pod waits
            waiting = ("CreateContainerError", missing)
            status["containerStatuses"] = [self._container_status(container, waiting=waiting)]
            return
        labels = pod["metadata"].get("labels", {})
        network = "none" if self._egress_denied(ns, labels) else "host"
        try:
            if self.pods is not None:
                sandbox = await self._start_container(pod, network)
                if sandbox is None:
                    return
            else:
                sandbox = LocalSandbox(self._local_spec(pod, network), cgroup_view=True,
                                       state_root=self._state_root)  # fmt: skip
                await sandbox.start()
        except Exception as exc:
            self._terminate(pod, "StartError", 128, str(exc)[:300])
            return
        if (ns, name) not in self.cluster.pods:  # deleted while starting
            await sandbox.stop()
            return
        self.sandboxes[(ns, name)] = sandbox
        status["phase"] = "Running"
        status["conditions"] = [
            {"type": t, "status": "True"}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status["containerStatuses"] = [self._container_status(container, running=True)]

    def _missing_seccomp_profile(self, pod: dict[str, Any]) -> str | None:
        """containerd's message when the pod's Localhost seccomp profile is not on the node
        (this node holds Forge's, as `forge-sandbox k8s seccomp --daemonset` installs it,
        unless `faults.seccomp_missing`). The pods' runtimes apply Forge's filter either way:
        a LocalSandbox its ptrace filter, a DockerSandbox Forge's whole profile."""
        container = pod["spec"]["containers"][0]
        profile = container.get("securityContext", {}).get("seccompProfile") or pod["spec"].get(
            "securityContext", {}
        ).get("seccompProfile", {})
        if profile.get("type") != "Localhost":
            return None
        name = profile.get("localhostProfile", "")
        if name == LOCALHOST_PROFILE and not self.faults.seccomp_missing:
            return None
        path = f"{KUBELET_SECCOMP_ROOT}/{name}"
        return (
            f'failed to create containerd container: cannot load seccomp profile "{path}": '
            f"open {path}: no such file or directory"
        )

    async def _get_daemonset(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        found = self.cluster.daemonsets.get((ns, name))
        return _json(found) if found is not None else self._missing("daemonsets.apps", name)

    async def _start_container(self, pod: dict[str, Any], network: str) -> Any:
        """The docker runtime: pull (build) the image, check runAsNonRoot as the kubelet does
        (CreateContainerConfigError, the pod stays Pending), start the container."""
        assert self.pods is not None
        container = pod["spec"]["containers"][0]
        image_config = await asyncio.to_thread(self.pods.pull, container["image"])
        psc = pod["spec"].get("securityContext", {})
        problem = non_root_problem(psc, str(image_config.get("User") or ""))
        if problem is not None:
            waiting = ("CreateContainerConfigError", problem)
            pod["status"]["containerStatuses"] = [
                self._container_status(container, waiting=waiting)
            ]
            return None
        return await self.pods.start(spec_for(pod, container["image"], network))

    def _local_spec(self, pod: dict[str, Any], network: str) -> SandboxSpec:
        container = pod["spec"]["containers"][0]
        limits = container.get("resources", {}).get("limits", {})
        psc = pod["spec"].get("securityContext", {})
        volumes = pod["spec"].get("volumes", [])
        storage = next(
            (
                _mebibytes(v["emptyDir"].get("sizeLimit"))
                for v in volumes
                if v.get("emptyDir", {}).get("sizeLimit")
            ),
            None,
        )
        return SandboxSpec(
            workspace=self.images[container["image"]],
            memory_mb=_mebibytes(limits.get("memory")) or 8192,
            cpus=_cores(limits.get("cpu")),
            storage_mb=storage,
            uid=psc.get("runAsUser", 1000),
            gid=psc.get("runAsGroup", 1000),
            hostname=pod["spec"].get("hostname", "sandbox"),
            network=network,
        )

    def _terminate(self, pod: dict[str, Any], reason: str, code: int, message: str = "") -> None:
        container = pod["spec"]["containers"][0]
        pod["status"]["phase"] = "Failed"
        pod["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "False",
                "reason": "PodFailed",
                "message": message or reason,
            }
        ]
        pod["status"]["containerStatuses"] = [
            self._container_status(container, terminated=(reason, code))
        ]

    async def _retire(self, ns: str, name: str) -> None:
        sandbox = self.sandboxes.pop((ns, name), None)
        if sandbox is not None:
            await sandbox.stop()

    async def _list_pods(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        selector = request.query.get("labelSelector")
        items = [
            p
            for (n, _), p in self.cluster.pods.items()
            if n == ns and matches(p["metadata"].get("labels", {}), selector)
        ]
        return _json(
            {
                "apiVersion": "v1",
                "kind": "PodList",
                "metadata": {"resourceVersion": str(self.cluster.resource_version)},
                "items": items,
            }
        )

    async def _get_pod(self, request: web.Request) -> web.Response:
        pod = self.cluster.pods.get((request.match_info["ns"], request.match_info["name"]))
        return _json(pod) if pod is not None else self._missing("pods", request.match_info["name"])

    async def _delete_pod(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        pod = self.cluster.pods.pop(key, None)
        if pod is None:
            return self._missing("pods", key[1])
        await self._retire(*key)
        pod["metadata"]["deletionTimestamp"] = now()
        return _json(pod)

    async def _log(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.cluster.pods:
            return self._missing("pods", key[1])
        running = key in self.sandboxes
        return web.Response(
            text=f"in-process kubelet: pod {key[1]} {'running' if running else 'not running'}\n"
        )

    # -- exec ------------------------------------------------------------------------------

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        key = (request.match_info["ns"], request.match_info["name"])
        pod = self.cluster.pods.get(key)
        if pod is None:
            return self._missing("pods", key[1])
        sandbox = self.sandboxes.get(key)
        if sandbox is None:
            message = f"container not running in pod {key[1]} ({pod['status']['phase']})"
            return _json(status_body(400, "BadRequest", message), 400)
        protocols = PROTOCOLS[1:] if self.faults.v4_only else PROTOCOLS
        ws = web.WebSocketResponse(protocols=protocols, max_msg_size=0)
        await ws.prepare(request)
        self.cluster.exec_protocols.append(ws.ws_protocol or "")
        v5 = ws.ws_protocol == PROTOCOLS[0]
        command = request.query.getall("command")
        wants_stdin = request.query.get("stdin") in ("true", "1")
        try:
            await self._run_exec(ws, v5, key, pod, sandbox, command, wants_stdin)
        finally:
            await ws.close()
        return ws

    async def _run_exec(
        self,
        ws: web.WebSocketResponse,
        v5: bool,
        key: tuple[str, str],
        pod: dict[str, Any],
        sandbox: Any,
        command: list[str],
        wants_stdin: bool,
    ) -> None:
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        read_fd, write_fd = os.pipe() if wants_stdin else (None, None)
        stdin = os.fdopen(read_fd, "rb", buffering=0) if read_fd is not None else None
        writer = os.fdopen(write_fd, "wb", buffering=0) if write_fd is not None else None
        sink = tempfile.TemporaryFile()  # noqa: SIM115  (closed after the send, below)

        async def pump() -> None:  # websocket stdin -> the command's stdin
            async for msg in ws:
                if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                    break
                data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                if not data:
                    continue
                if v5 and data[0] == 255 and data[1:2] == b"\x00":
                    break
                if data[0] == 0 and writer is not None:
                    with contextlib.suppress(OSError):
                        await asyncio.to_thread(writer.write, data[1:])
            if writer is not None:
                with contextlib.suppress(OSError):
                    writer.close()

        pumping = asyncio.ensure_future(pump())
        try:
            if self.faults.evict_on_exec > 0:
                self.faults.evict_on_exec -= 1
                pod["status"].update(
                    phase="Failed",
                    reason="Evicted",
                    message="The node was low on resource: memory.",
                )
                await self._retire(*key)
                return
            if self.faults.drop_exec > 0:
                self.faults.drop_exec -= 1
                await ws.send_bytes(b"\x01partial output")
                await ws.close(code=1011)  # no status frame: the exit status is lost
                return
            if self.pods is not None:
                err, code, oom = await self.pods.exec(sandbox, command, env, stdin, sink)
            else:
                result = await sandbox._run(
                    command,
                    container.get("workingDir", "/workspace"),
                    env,
                    3600.0,
                    stdin=stdin,
                    stdout_sink=sink,
                )
                err, code, oom = result.stderr.encode(), result.exit_code, result.oom_killed
        finally:
            if writer is not None:
                with contextlib.suppress(OSError):
                    writer.close()
            if stdin is not None:
                stdin.close()
            pumping.cancel()
        sink.seek(0)
        stdout = sink.read()
        sink.close()
        for channel, data in ((1, stdout), (2, err)):
            for at in range(0, len(data), FRAME):
                await ws.send_bytes(bytes([channel]) + data[at : at + FRAME])
        if oom:  # cgroup v2 semantics: the OOM kill takes the container
            self._terminate(pod, "OOMKilled", 137)
            await self._retire(*key)
            code = 137
        if self.faults.kubelet_error_exec > 0:
            self.faults.kubelet_error_exec -= 1
            status = status_body(500, "InternalError", "error: container runtime failed (injected)")
        elif code == 0:
            status = {"metadata": {}, "status": "Success"}
        else:
            status = status_body(
                500,
                "NonZeroExitCode",
                f"command terminated with non-zero exit code: exit status {code}",
                causes=[{"reason": "ExitCode", "message": str(code)}],
            )
            status.pop("code")
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=dict(headers or {}))


DEMO_REWRITES = {"python:": "registry.forge.internal/mirror/python:"}


def images_for(tasks_dir: Path) -> dict[str, tuple[str, Path]]:
    """Task name -> (image reference the image plan gives it, its workspace folder), planned
    offline with the demo rewrite table (what `forge-sandbox images build` would push)."""
    tasks = discover_tasks(tasks_dir)
    plan = plan_images(tasks, ImagesConfig(rewrites=DEMO_REWRITES))
    by_name = {t.name: t for t in tasks}
    return {row.task: (row.image, by_name[row.task].workspace_dir) for row in plan.rows}


def main(argv: list[str] | None = None) -> int:
    """`python -m forge_sandbox.testing.kubernetes_api serve --tasks DIR --out DIR`: serve until
    SIGTERM / Ctrl-C; writes OUT/k8s.toml (a KubernetesConfig with the kubeconfig and every
    task's image), then OUT/ready."""
    parser = argparse.ArgumentParser(prog="python -m forge_sandbox.testing.kubernetes_api")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--tasks", type=Path, required=True, help="folder of task folders")
    parser.add_argument("--out", type=Path, required=True, help="folder for k8s.toml + ready")
    parser.add_argument("--runtime", choices=RUNTIMES, help="pods' runtime (default: docker "
                        "when DOCKER_HOST is set, else local)")  # fmt: skip
    args = parser.parse_args(argv)
    if pod_runtime(args.runtime) == "docker":  # the images plan's builds, bases as the daemon's
        planned = recipes_for(args.tasks, DockerConfig.load().rewrites)
        images = {task: (ref, Path()) for task, (ref, _) in planned.items()}
        recipes = {ref: recipe for ref, recipe in planned.values()}
        server = FakeApiServer(runtime="docker", recipes=recipes)
    else:
        images = images_for(args.tasks)
        server = FakeApiServer({ref: workspace for ref, workspace in images.values()})
    server.start()
    args.out.mkdir(parents=True, exist_ok=True)
    table = "\n".join(f'"{task}" = "{ref}"' for task, (ref, _) in sorted(images.items()))
    atomic_write_text(
        args.out / "k8s.toml",
        f'kubeconfig = "{server.kubeconfig}"\npoll_interval_s = 0.1\nstart_timeout_s = 60\n'
        f'owner = "nox-k8s"\n\n[images]\n{table}\n',
    )
    atomic_write_text(args.out / "ready", f"{server.url}\n")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"in-process Kubernetes API server at {server.url}", flush=True)
    stop.wait()
    left = server.live_pods()
    server.stop()
    print(f"stopped; pods left at exit: {len(left)} {left}", flush=True)
    return 0 if not left else 1


if __name__ == "__main__":
    raise SystemExit(main())
