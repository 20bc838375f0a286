"""The gateway's disk thread: blocking file work off the event loop, in submission order.

`await disk.run(fn, *args)` runs `fn(*args)` in one worker thread and gives its result or
exception back to the awaiting task. It is `loop.run_in_executor` on a one-worker
`ThreadPoolExecutor` without the executor's future chaining (a `concurrent.futures.Future`
with its condition and callbacks, wrapped in an asyncio future): a queue in, one
`call_soon_threadsafe` out. On the 2-core dev VM the round trip of a 2 KB append after the
process idled 0.3 s takes 0.12 ms this way against 0.23 ms through the executor (0.05 ms
either way with hot caches), and every 32K-token gateway call waits for one.

`await disk.run_small(fn, *args)` is for a call that is quick unless the disk stalls (a trace
line's append without fsync): it runs `fn` on the loop's own thread when nothing is queued for
the thread (so order holds) and no such call stalled lately; else it goes through `run`. An
inline call slower than `stall_s` (50 ms) sends the next ones to the thread for `pause_s`
(10 s): a disk that stalls blocks the loop once per pause, not on every call. The hand-off
it saves is most of an awaited trace write after the process idled: at 32K-token prompts and
8 sessions on the dev VM the awaited write took 0.40-0.41 ms p50 through the thread and 0.16
ms inline, the gateway's added p50 2.93-2.99 ms against 2.68-2.73 ms (paired standalone runs
of `bench_gateway_32k`).

Work runs even when its awaiting task is cancelled (a client that went away: its trace is
still written, as before). `shutdown` runs everything already submitted, then stops the
thread; nothing is accepted after it. One event loop uses a DiskThread (the queued count that
keeps `run_small` in order is that loop's).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_STOP = object()
# an inline call slower than this: the disk stalls. Not 5 ms: in a full `nox -s bench` on the
# dev VM 3 of 79 inline appends took longer (a collector's pass or the VM's own pause falls
# inside a call as well), and their pauses sent 452 of 528 calls to the thread
STALL_S = 0.05
PAUSE_S = 10.0  # then calls go to the thread for this long


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class DiskThread:
    """One lazily started worker thread running blocking calls for an event loop, in order."""

    def __init__(self, name: str, stall_s: float = STALL_S, pause_s: float = PAUSE_S) -> None:
        self.name = name
        self.stall_s, self.pause_s = stall_s, pause_s
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._queued = 0  # submitted and not yet settled (the loop's thread counts it)
        self._thread_until = 0.0  # monotonic time before which run_small uses the thread
        self.counts = {"inline": 0, "thread": 0, "stalls": 0}  # calls run where; stalled

    async def run_small(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the calling loop's thread when nothing is queued and no inline call
        stalled in the last `pause_s`; else in the thread (`run`)."""
        if self._closed or self._queued or time.monotonic() < self._thread_until:
            return await self.run(fn, *args)
        self.counts["inline"] += 1
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            if time.perf_counter() - started > self.stall_s:
                self.counts["stalls"] += 1
                self._thread_until = time.monotonic() + self.pause_s

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue `fn(*args)`; the returned future (of the running loop) gets its outcome."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError(
                    f"expected the {self.name} thread to be running; found it shut down; "
                    "fix: submit disk work before the gateway stops"
                )
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._queue.put((fn, args, future, loop))
            self._queued += 1
            self.counts["thread"] += 1
        return future

    def _settle(self, future: asyncio.Future[Any], result: Any, error: Any) -> None:
        self._queued -= 1  # on the loop's thread, after fn returned
        _settle(future, result, error)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            fn, args, future, loop = item
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except StopIteration as stop:  # asyncio futures refuse StopIteration itself
                error = RuntimeError(f"{fn!r} raised StopIteration")
                error.__cause__ = stop
            except BaseException as caught:  # delivered to the awaiting task, never lost
                error = caught
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(self._settle, future, result, error)
            del item, fn, args, future, result, error

    def shutdown(self) -> None:
        """Run everything already submitted, then stop the thread (idempotent)."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(_STOP)
        if thread is not None:
            thread.join()
