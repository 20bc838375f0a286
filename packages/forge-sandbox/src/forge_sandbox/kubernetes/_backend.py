"""KubernetesBackend: the SandboxFactory of the Kubernetes backend, and `gc`.

One backend per job: it resolves each task's image (no image, no pod: there is no public
fallback) and shares one KubeApi (plain + exec clients) between the job's sandboxes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forge_gates import Violation
from forge_sandbox._spec import SandboxSpec
from forge_sandbox.kubernetes._api import KubeApi
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._errors import KubernetesError, KubernetesUnavailableError
from forge_sandbox.kubernetes._manifests import selector
from forge_sandbox.kubernetes._sandbox import KubernetesSandbox

IMAGES_SCHEMA = "forge-sandbox/images@1"


class ImageNotBuiltError(KubernetesError):
    """The task has no image in the backend's images (build it first; no public fallback)."""


def read_images_report(path: Path) -> dict[str, str]:
    """Task name -> image reference from a `forge-sandbox images build` report."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        if report.get("schema_version") != IMAGES_SCHEMA:
            raise ValueError(f"schema_version {report.get('schema_version')!r}")
        return {row["task"]: row["image"] for row in report["images"] if row.get("image")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KubernetesUnavailableError(
            [
                Violation(
                    rule="k8s.images_report",
                    expected=f"an images report ({IMAGES_SCHEMA}) at {path}",
                    found=f"{type(exc).__name__}: {exc}",
                    fix="write it with `forge-sandbox images build --report FILE`",
                )
            ]
        ) from None


class KubernetesBackend:
    """Call it with a SandboxSpec to get a KubernetesSandbox (a SandboxFactory)."""

    def __init__(self, config: KubernetesConfig | None = None) -> None:
        self.config = config or KubernetesConfig.load()
        images = read_images_report(self.config.images_report) if self.config.images_report else {}
        self.images = {**images, **self.config.images}
        self._api: KubeApi | None = None

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(self.config)
        return self._api

    def image_for(self, spec: SandboxSpec) -> str:
        if spec.image is not None:
            return spec.image
        image = self.images.get(spec.task_name or "")
        if image is None:
            known = sorted(self.images)[:5]
            raise ImageNotBuiltError(
                f"task {spec.task_name!r}: expected an image for it in the Kubernetes backend's "
                f"images ({len(self.images)} known, e.g. {known}); found none; fix: "
                "`forge-sandbox images build TASKS --report R.json` and set images_report "
                "(a task never falls back to a public image)"
            )
        return image

    def __call__(self, spec: SandboxSpec) -> KubernetesSandbox:
        return KubernetesSandbox(spec, self.config, self.image_for(spec), api=self.api)

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None

    async def list_pods(self) -> list[str]:
        """Names of the pods this config's label selector finds."""
        pods = await self.api.call(
            "list pods",
            self.api.core.list_namespaced_pod,
            self.config.namespace,
            label_selector=selector(self.config),
        )
        return [p.metadata.name for p in pods.items if p.metadata and p.metadata.name]

    async def gc(self) -> dict[str, list[str]]:
        """Delete every pod and NetworkPolicy the label selector still finds."""
        api, ns, sel = self.api, self.config.namespace, selector(self.config)
        removed: dict[str, list[str]] = {"pods": [], "networkpolicies": []}
        listing: list[tuple[str, Any, Any]] = [
            ("pods", api.core.list_namespaced_pod, api.core.delete_namespaced_pod),
            (
                "networkpolicies",
                api.networking.list_namespaced_network_policy,
                api.networking.delete_namespaced_network_policy,
            ),
        ]
        for kind, list_fn, delete_fn in listing:
            found = await api.call(f"list {kind}", list_fn, ns, label_selector=sel)
            for item in found.items:
                name = item.metadata.name
                try:
                    await api.call(
                        f"delete {kind} {name}", delete_fn, name, ns, grace_period_seconds=0
                    )
                except KubernetesError as exc:
                    if getattr(exc, "status", None) != 404:
                        raise
                removed[kind].append(name)
        return removed
