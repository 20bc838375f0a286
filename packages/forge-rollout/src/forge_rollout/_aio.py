"""Running aiohttp applications: in a background thread (tests, benches) or in the foreground.

Both bind loopback by default and accept port 0 (the OS picks a free port); the real URL is
returned, and the foreground runner prints it as `<NAME>_READY url=http://host:port` so a
parent process can read it from the child's stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
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

    asyncio.run(main())
    return 0
