"""Running aiohttp applications: in a background thread (tests, benches) or in the foreground.

Both bind loopback by default and accept port 0 (the OS picks a free port); the real URL is
returned, and the foreground runner prints it as `<NAME>_READY url=http://host:port` so a
parent process can read it from the child's stdout (`start_ready` is that parent's side).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web


async def _start(
    app: web.Application, host: str, port: int, cancel: bool
) -> tuple[web.AppRunner, str]:
    # in-flight requests get 5 s to finish at shutdown (aiohttp's default is 60 s)
    runner = web.AppRunner(app, handler_cancellation=cancel, access_log=None, shutdown_timeout=5)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    return runner, f"http://{bound_host}:{bound_port}"


@contextlib.contextmanager
def run_app_in_thread(
    app: web.Application,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    handler_cancellation: bool = False,
    startup_timeout: float = 30.0,
) -> Iterator[str]:
    """Serve `app` from a daemon thread with its own event loop; yields the base URL.

    Leaving the context shuts the server down (runner cleanup, loop stop, thread join).
    """
    loop = asyncio.new_event_loop()
    started = threading.Event()
    runner: web.AppRunner | None = None
    url = ""
    error: BaseException | None = None

    def main() -> None:
        nonlocal runner, url, error
        asyncio.set_event_loop(loop)
        try:
            runner, url = loop.run_until_complete(_start(app, host, port, handler_cancellation))
        except BaseException as exc:  # surfaced to the caller below
            error = exc
            started.set()
            return
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=main, name="forge-aiohttp", daemon=True)
    thread.start()
    if not started.wait(startup_timeout):
        raise TimeoutError(f"expected the app to start within {startup_timeout}s; it did not")
    if error is not None:
        raise RuntimeError(f"the app did not start: {error!r}") from error
    assert runner is not None, "main() sets the runner before `started` unless it sets the error"
    try:
        yield url
    finally:
        future = asyncio.run_coroutine_threadsafe(runner.cleanup(), loop)
        with contextlib.suppress(Exception):
            future.result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()


def serve_forever(
    app: web.Application,
    host: str,
    port: int,
    ready_name: str,
    *,
    handler_cancellation: bool = False,
    on_ready: Callable[[str], Awaitable[None]] | None = None,
) -> int:
    """Serve `app` until SIGINT/SIGTERM; prints `<ready_name>_READY url=...` once listening."""

    async def main() -> None:
        runner, url = await _start(app, host, port, handler_cancellation)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            if on_ready is not None:
                await on_ready(url)
            print(f"{ready_name}_READY url={url}", flush=True)
            await stop.wait()
        finally:
            await runner.cleanup()

    run_loop(main())
    return 0


def run_loop(main: Awaitable[None]) -> None:
    """Run a server's main coroutine on uvloop where it is installed (a dependency on Linux
    and macOS), else on asyncio's loop. uvloop's socket transports take about a third off the
    gateway's added latency per call (measured at 32K-token prompts, `nox -s bench`);
    `FORGE_EVENT_LOOP=asyncio` keeps the standard loop (e.g. to compare)."""
    choice = os.environ.get("FORGE_EVENT_LOOP", "uvloop")
    if choice not in ("uvloop", "asyncio"):
        raise ValueError(
            f"expected FORGE_EVENT_LOOP=uvloop or asyncio; found {choice!r}; "
            "fix: set one of them or unset it"
        )
    if choice == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(main)  # type: ignore[arg-type]
            return
    asyncio.run(main)  # type: ignore[arg-type]


def loop_name() -> str:
    """The running event loop's kind (`uvloop` or `asyncio`), for /health."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


class NotReady(RuntimeError):
    """A server process did not print its `<NAME>_READY url=...` line in time."""


def start_ready(
    argv: list[str], ready_name: str, timeout: float = 90.0
) -> tuple[subprocess.Popen[str], str]:
    """Start a server process (`forge-rollout serve|gateway|stub-upstream ...`) and wait for
    the `<ready_name>_READY url=...` line `serve_forever` prints; returns (process, url).

    Both pipes are drained by daemon threads (a chatty server never blocks on a full pipe);
    the last stderr lines go into the error when no ready line came (the process is killed)."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    found: dict[str, str] = {}
    ready = threading.Event()
    tail: deque[str] = deque(maxlen=20)
    pattern = re.compile(rf"{re.escape(ready_name)}_READY url=(\S+)")

    def read_stdout() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            match = pattern.search(line)
            if match and not ready.is_set():
                found["url"] = match.group(1)
                ready.set()
        ready.set()  # stdout closed: the process ended (no need to wait out the timeout)

    def read_stderr() -> None:
        for line in process.stderr:  # type: ignore[union-attr]
            tail.append(line.rstrip())

    threading.Thread(target=read_stdout, daemon=True).start()
    errors = threading.Thread(target=read_stderr, daemon=True)
    errors.start()
    ready.wait(timeout)
    if "url" not in found:
        process.kill()
        process.wait(10)
        errors.join(2)
        last = "\n".join(tail) or "(nothing on stderr)"
        raise NotReady(
            f"expected {ready_name}_READY from {' '.join(argv[:5])} within {timeout:.0f} s; "
            f"found none (exit code {process.returncode}); its stderr ends:\n{last}"
        )
    return process, found["url"]
