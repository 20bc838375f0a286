"""The code under test runs in a worker process; these hidden tests never import it.

Nothing the workspace's code does when imported or called (patching unittest, os._exit,
atexit hooks, writing files) can reach the tests' assertions or the result lines this process
prints, which the harness reads. Use it in place of an import:

    from _remote import load
    median, mean = load("statkit", "median", "mean")

Each call travels as one JSON line to the worker (`python3 -I -B _remote.py --worker WS`, the
workspace WS last on its sys.path) and its result comes back as JSON: numbers, strings, lists,
tuples, dicts, dates and None by value, any other object as a handle whose methods, attributes
and `in` / `len` / `[]` are forwarded the same way. An exception comes back by type name: a
builtin exception type is raised again here (ValueError stays ValueError), any other as
RuntimeError. A worker that dies, hangs past WORKER_TIMEOUT_S or answers anything but the
protocol makes the call raise WorkerError, so the test errors. Standard library only.
"""

import builtins
import datetime
import json
import os
import select
import subprocess
import sys

WORKER_TIMEOUT_S = 60.0


class WorkerError(RuntimeError):
    """The worker died, hung or broke the protocol."""


def _encode(value, keep=None):
    """JSON for a value; `keep` (worker side) turns any other object into a handle."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, range)):
        return [_encode(item, keep) for item in value]
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(item, keep) for item in value]}
    if isinstance(value, dict):
        return {"__dict__": [[_encode(k, keep), _encode(v, keep)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"__set__": [_encode(item, keep) for item in value]}
    if isinstance(value, datetime.datetime):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"__date__": value.isoformat()}
    if isinstance(value, Remote):
        return {"__handle__": value._ref}
    if keep is not None:
        return {"__handle__": keep(value)}
    raise TypeError(f"cannot send {value!r} to the worker")


def _decode(value, resolve):
    """A value from JSON; `resolve` turns a handle into an object (worker) or a proxy."""
    if isinstance(value, list):
        return [_decode(item, resolve) for item in value]
    if not isinstance(value, dict):
        return value
    if "__tuple__" in value:
        return tuple(_decode(item, resolve) for item in value["__tuple__"])
    if "__dict__" in value:
        return {_decode(k, resolve): _decode(v, resolve) for k, v in value["__dict__"]}
    if "__set__" in value:
        return {_decode(item, resolve) for item in value["__set__"]}
    if "__datetime__" in value:
        return datetime.datetime.fromisoformat(value["__datetime__"])
    if "__date__" in value:
        return datetime.date.fromisoformat(value["__date__"])
    if "__handle__" in value:
        return resolve(value["__handle__"])
    raise WorkerError(f"unknown value {value!r}")


class _Worker:
    def __init__(self):
        workspace = os.environ.get("FORGE_WORKSPACE", "/workspace")
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-B", os.path.abspath(__file__), "--worker", workspace],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def ask(self, request):
        process = self.process
        try:
            process.stdin.write((json.dumps(request) + "\n").encode())
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], WORKER_TIMEOUT_S)
            line = process.stdout.readline() if ready else b""
        except OSError as exc:
            raise WorkerError(f"the worker is gone: {exc}") from None
        if not line:
            raise WorkerError("the worker died or hung (no answer)")
        try:
            answer = json.loads(line)
        except ValueError:
            raise WorkerError(f"the worker answered {line[:200]!r}") from None
        if not isinstance(answer, dict):
            raise WorkerError(f"the worker answered {line[:200]!r}")
        if "raise" in answer:
            kind = getattr(builtins, str(answer["raise"]), None)
            message = str(answer.get("message", ""))
            if isinstance(kind, type) and issubclass(kind, Exception):
                raise kind(message)
            raise RuntimeError(f"{answer['raise']}: {message}")
        if "callable" in answer:
            return Remote(answer["callable"])
        return _decode(answer.get("value"), Remote)


_WORKER = None


def _ask(request):
    global _WORKER
    if _WORKER is None:
        _WORKER = _Worker()
    return _WORKER.ask(request)


class Remote:
    """A function, class or object living in the worker."""

    def __init__(self, ref):
        self._ref = ref

    def __call__(self, *args, **kwargs):
        return _ask(
            {"op": "call", "ref": self._ref, "args": _encode(list(args)), "kwargs": _encode(kwargs)}
        )

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _ask({"op": "getattr", "ref": self._ref, "name": name})

    def __contains__(self, item):
        return bool(
            _ask(
                {"op": "dunder", "ref": self._ref, "name": "__contains__", "args": _encode([item])}
            )
        )

    def __len__(self):
        return int(_ask({"op": "dunder", "ref": self._ref, "name": "__len__", "args": []}))

    def __getitem__(self, key):
        return _ask(
            {"op": "dunder", "ref": self._ref, "name": "__getitem__", "args": _encode([key])}
        )


def load(module, *names):
    """The module's attributes `names` (functions and classes as proxies, values by value)."""
    found = [_ask({"op": "getattr", "ref": {"module": module}, "name": n}) for n in names]
    return found[0] if len(found) == 1 else tuple(found)


def _serve(workspace):
    """The worker: import and call on request; the protocol runs on private copies of the
    pipes, and what the code under test prints goes nowhere."""
    import importlib

    channel_in = os.fdopen(os.dup(0), "rb")
    channel_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    sys.stdout = sys.stdin = open(os.devnull, "r+")
    sys.path.append(workspace)
    objects = {}

    def keep(value):
        objects[len(objects) + 1] = value
        return len(objects)

    def target(ref):
        if isinstance(ref, dict):
            return importlib.import_module(ref["module"])
        return objects[ref]

    for line in channel_in:
        try:
            request = json.loads(line)
            obj = target(request["ref"])
            if request["op"] == "getattr":
                value = getattr(obj, request["name"])
                answer = (
                    {"callable": keep(value)}
                    if callable(value)
                    else {"value": _encode(value, keep)}
                )
            else:
                args = _decode(request.get("args", []), objects.__getitem__)
                kwargs = _decode(request.get("kwargs", {"__dict__": []}), objects.__getitem__)
                method = getattr(obj, request["name"]) if request["op"] == "dunder" else obj
                answer = {"value": _encode(method(*args, **kwargs), keep)}
        except BaseException as exc:  # the code under test's exception, by type name
            answer = {"raise": type(exc).__name__, "message": str(exc)}
        channel_out.write((json.dumps(answer) + "\n").encode())
        channel_out.flush()


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _serve(sys.argv[2])
