"""State of the in-process API server: objects, label selectors, injectable faults."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def matches(labels: dict[str, str], selector: str | None) -> bool:
    """Equality- and existence-based label selectors: `a=b`, `a==b`, `a!=b`, `a`, `!a`."""
    if not selector:
        return True
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A v1 Status, as the API server answers errors."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


@dataclass
class HttpFault:
    """Answer `status` to the next `times` requests whose METHOD + path match `pattern`."""

    pattern: str
    status: int
    times: int = 1
    retry_after: float | None = None


@dataclass
class Faults:
    """Failure states a test injects. Images are matched by their full reference."""

    pull_backoff: set[str] = field(default_factory=set)  # ImagePullBackOff forever
    pending: set[str] = field(default_factory=set)  # unschedulable: Pending forever
    oom_at_start: set[str] = field(default_factory=set)  # container OOMKilled right away
    http: list[HttpFault] = field(default_factory=list)
    drop_exec: int = 0  # the next N exec websockets close without a status
    evict_on_exec: int = 0  # the next N execs find the pod evicted
    kubelet_error_exec: int = 0  # the next N execs end with a Failure that has no exit code
    denied_verbs: set[tuple[str, str]] = field(default_factory=set)  # (verb, resource)
    v4_only: bool = False  # offer only v4.channel.k8s.io
    seccomp_missing: bool = False  # the node lacks every Localhost seccomp profile

    def http_fault(self, method: str, path: str) -> HttpFault | None:
        for fault in self.http:
            if fault.times > 0 and re.search(fault.pattern, f"{method} {path}"):
                fault.times -= 1
                return fault
        return None


@dataclass
class Cluster:
    """Objects by (namespace, name), plus what a test inspects afterwards."""

    namespaces: set[str] = field(default_factory=lambda: {"forge-sandbox"})
    secrets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    service_accounts: set[tuple[str, str]] = field(default_factory=set)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    policies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    daemonsets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # read only
    requests: list[str] = field(default_factory=list)  # "METHOD path"
    exec_protocols: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # pod names, in creation order
    resource_version: int = 1

    def next_version(self) -> str:
        self.resource_version += 1
        return str(self.resource_version)
