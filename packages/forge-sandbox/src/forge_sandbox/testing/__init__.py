"""Test support: an in-process Kubernetes API server speaking the real wire protocol.

No API server can be had on the project's machines, so the Kubernetes backend's tests and
`nox -s k8s` drive the official client against `kubernetes_api.FakeApiServer` (pods, logs, the
exec websocket, status transitions, failure states, strict schema validation), whose pods run as
local sandboxes. It is the one place that uses both backends, so it sits above them.

    from forge_sandbox.testing.kubernetes_api import FakeApiServer

    python -m forge_sandbox.testing.kubernetes_api serve --tasks DIR --out DIR
"""

from forge_sandbox.testing._isolation import is_sandbox_process, local_sandbox_problem

__all__ = ["is_sandbox_process", "local_sandbox_problem"]
