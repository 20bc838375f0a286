"""The official `kubernetes` client, wrapped: two ApiClients (plain calls; exec alone, its
handshake under a lock: the client's `stream()` swaps the ApiClient's `call_api` while it
connects, which broke concurrent plain calls on a shared client), the client's own retries off,
and Forge's bounded retry with exponential backoff on 5xx / 429 / no answer (Retry-After kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes
from pydantic import ValidationError

from forge_gates import Violation
from forge_sandbox.kubernetes._config import KubernetesConfig
from forge_sandbox.kubernetes._errors import (
    KubernetesAPIError,
    KubernetesUnavailableError,
    PodNameConflictError,
)

RETRIED = frozenset({0, 429, 500, 502, 503, 504})
T = TypeVar("T")


def _api_client(config: KubernetesConfig) -> Any:
    path = config.kubeconfig_path()
    if path is None:
        raise KubernetesUnavailableError(
            [
                Violation(
                    rule="k8s.kubeconfig",
                    expected="a kubeconfig (KubernetesConfig.kubeconfig, $KUBECONFIG or "
                    "~/.kube/config)",
                    found="none",
                    fix="export KUBECONFIG=/path/to/kubeconfig for the Forge namespace",
                )
            ]
        )
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(
            config_file=str(path),
            context=config.context,
            client_configuration=configuration,
            persist_config=False,
        )
    except Exception as exc:  # the loader raises ConfigException, ValueError, OSError...
        raise KubernetesUnavailableError(
            [
                Violation(
                    rule="k8s.kubeconfig",
                    expected=f"a loadable kubeconfig at {path}"
                    + (f" with context {config.context!r}" if config.context else ""),
                    found=type(exc).__name__,  # never its text: it may quote credentials
                    fix="check the file with `kubectl --kubeconfig FILE config view`",
                )
            ]
        ) from None
    configuration.retries = 0  # Forge retries, with backoff, a bounded number of times
    return kubernetes.client.ApiClient(configuration)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an ApiException (0: no answer), None for other exceptions."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


class KubeApi:
    """CoreV1 / NetworkingV1 / AppsV1 / AuthorizationV1 on one ApiClient, exec on another."""

    def __init__(self, config: KubernetesConfig) -> None:
        self.config = config
        self._plain = _api_client(config)
        self._exec = _api_client(config)
        self.core = kubernetes.client.CoreV1Api(self._plain)
        self.networking = kubernetes.client.NetworkingV1Api(self._plain)
        self.apps = kubernetes.client.AppsV1Api(self._plain)
        self.authorization = kubernetes.client.AuthorizationV1Api(self._plain)
        self.version = kubernetes.client.VersionApi(self._plain)
        self.exec_core = kubernetes.client.CoreV1Api(self._exec)
        self.exec_lock = threading.Lock()
        self.api_exception: type[Exception] = kubernetes.client.exceptions.ApiException
        self.calls = 0
        self.retries = 0

    def close(self) -> None:
        for client in (self._plain, self._exec):
            client.close()

    def delay(self, attempt: int, retry_after: str | None) -> float:
        """Backoff before retry `attempt` (1-based): doubled each time, capped, jittered;
        a Retry-After of the server is honoured up to the cap."""
        base = min(self.config.backoff_max_s, self.config.backoff_s * 2 ** (attempt - 1))
        if retry_after is not None:
            with contextlib.suppress(ValueError):
                base = min(self.config.backoff_max_s, max(base, float(retry_after)))
        return base * (0.8 + 0.4 * random.random())

    async def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in a thread, retried on 5xx / 429 / no answer."""
        kwargs.setdefault("_request_timeout", self.config.request_timeout_s)
        last = "nothing"
        for attempt in range(1, self.config.api_attempts + 1):
            self.calls += 1
            try:
                return await asyncio.to_thread(fn, *args, **kwargs)
            except self.api_exception as exc:
                status = status_of(exc)
                if status not in RETRIED:
                    raise self.error(what, exc) from None
                headers = getattr(exc, "headers", None) or {}
                retry_after = headers.get("Retry-After") if hasattr(headers, "get") else None
                last = f"HTTP {status} {getattr(exc, 'reason', '')}".strip()
            except ValidationError as exc:  # the client's models deserialise strictly
                raise KubernetesAPIError(
                    f"{what}: expected an answer the client's models accept; found "
                    f"{exc.error_count()} field error(s) in {exc.title}; fix: the API server's "
                    "version or a proxy mangles objects (kubectl get --raw to compare)"
                ) from None
            except OSError as exc:  # urllib3 errors that escape the client are OSErrors too
                retry_after, last = None, f"{type(exc).__name__} (no answer)"
            except Exception as exc:  # urllib3.exceptions.HTTPError (MaxRetryError, ...)
                if type(exc).__module__.split(".")[0] != "urllib3":
                    raise
                retry_after, last = None, f"{type(exc).__name__} (no answer)"
            if attempt < self.config.api_attempts:
                self.retries += 1
                await asyncio.sleep(self.delay(attempt, retry_after))
        raise KubernetesAPIError(
            f"{what}: expected an answer from the API server within {self.config.api_attempts} "
            f"attempts (backoff {self.config.backoff_s}-{self.config.backoff_max_s} s); found "
            f"{last} every time; fix: check the API server's health (`kubectl get --raw "
            "/readyz`), or raise api_attempts in the KubernetesConfig",
            status=None,
        )

    def error(self, what: str, exc: BaseException) -> KubernetesAPIError:
        """The typed error of a non-retried API answer, with expected / found / fix."""
        status = status_of(exc)
        reason = getattr(exc, "reason", "") or ""
        message = _status_message(getattr(exc, "body", None))
        found = f"HTTP {status} {reason}: {message}".strip()
        if status == 409:
            return PodNameConflictError(
                f"{what}: expected the name to be free; found {found}; fix: a leftover of an "
                "earlier run holds it: `forge-sandbox k8s gc`, then rerun",
                status=status,
            )
        fixes = {
            401: "refresh the kubeconfig's credentials",
            403: "grant the verb to the service account (`forge-sandbox doctor --backend "
            "kubernetes` lists every verb it needs)",
            404: f"check the namespace {self.config.namespace!r} exists",
            422: "the manifest was refused: run `forge-sandbox k8s render` and validate it",
        }
        return KubernetesAPIError(
            f"{what}: expected success; found {found}; fix: "
            + fixes.get(status or 0, "see the API server's message"),
            status=status,
        )


def _status_message(body: Any) -> str:
    """The `message` of a Kubernetes Status body (or the body, cut)."""
    if not body:
        return ""
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return str(body)[:200]
    return str(data.get("message", ""))[:300] if isinstance(data, dict) else str(data)[:200]
