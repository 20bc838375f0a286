"""What every backend's sandbox shares: its lifecycle (new -> starting -> running -> stopping ->
stopped), and the kill of its processes where pids_max may be full.

    class DockerSandbox(SandboxLifecycle):
        async def _start(self) -> None: ...    # create what the sandbox is
        async def _cleanup(self) -> None: ...  # remove what it created (whatever state it is in)

`start()` runs `_start` once; when it fails or is cancelled, `_cleanup` runs to its end before the
error propagates, so a failed start leaves nothing. `stop()` is idempotent. A cleanup runs to its
end even when its caller is cancelled again meanwhile (Ctrl-C and SIGTERM cancel a job's trials,
and a cancelled await would leave a container, a pod or a cgroup behind); the cancellation is
re-raised once it is done.

`kill_in_one_process` runs a backend's kill script (shell built-ins, the exec's only process)
until it reports: a sandbox whose processes hold every pid (a fork bomb that respawns) leaves
the kill no room now and then, and one that never lets it run is a SandboxStateError, which a
trial scores 0 when its agent had the sandbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Self

from forge_sandbox._errors import SandboxStateError

KILL_PAUSES_S = (0.2, 0.5, 1.0)  # between tries of a kill that found no free pid


async def run_to_the_end(
    cleanup_coro: Coroutine[Any, Any, None], on_cancelled: Callable[[], None] | None = None
) -> None:
    """Await `cleanup_coro` to its end even when the caller is cancelled meanwhile, then re-raise
    the cancellation. `on_cancelled` runs first whenever a cancellation ends it (a last resort
    that cannot wait: the cleanup may have been cut short or have failed meanwhile)."""
    cleanup = asyncio.ensure_future(cleanup_coro)
    cancelled = False
    while not cleanup.done():
        try:
            await asyncio.shield(cleanup)
        except asyncio.CancelledError:
            if cleanup.cancelled():
                break
            cancelled = True
    if cancelled or cleanup.cancelled():
        if on_cancelled is not None:
            on_cancelled()
        raise asyncio.CancelledError
    cleanup.result()


class SandboxLifecycle:
    """start / stop / `async with` for a backend that implements `_start` and `_cleanup`."""

    _state = "new"  # "new" | "starting" | "running" | "stopping" | "stopped"

    async def _start(self) -> None:
        raise NotImplementedError

    async def _cleanup(self) -> None:
        raise NotImplementedError

    def _cleanup_cancelled(self) -> None:
        """What a backend can still do synchronously when its cleanup was cancelled."""

    async def _cleanup_to_the_end(self) -> None:
        await run_to_the_end(self._cleanup(), self._cleanup_cancelled)

    async def start(self) -> None:
        """Create the sandbox (typed errors on failure; nothing left behind)."""
        if self._state != "new":
            raise SandboxStateError(
                f"start: expected a new sandbox; found state {self._state!r}; fix: create a "
                f"new {type(self).__name__} for each trial"
            )
        self._state = "starting"
        try:
            await self._start()
        except BaseException:
            await self._cleanup_to_the_end()
            self._state = "stopped"
            raise
        self._state = "running"

    async def stop(self) -> None:
        """Kill every process of the sandbox and remove what it created. Idempotent."""
        if self._state in ("new", "stopped"):
            self._state = "stopped"
            return
        self._state = "stopping"
        try:
            await self._cleanup_to_the_end()
        finally:
            self._state = "stopped"

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def kill_in_one_process(
    run_once: Callable[[], Awaitable[tuple[int | None, bytes, bytes]]],
    where: str,
    pids_max: int,
    check_alive: Callable[[], Awaitable[None]],
) -> list[str]:
    """The words a kill script printed (its count first), from `run_once` (exit code or None,
    stdout, stderr), tried again after each of KILL_PAUSES_S until it exits 0 with a count.
    Then `check_alive` (a dead sandbox is the better explanation) and SandboxStateError."""
    said = ""
    for pause in (*KILL_PAUSES_S, None):
        code, stdout, stderr = await run_once()
        words = stdout.decode("utf-8", "replace").split()
        if code == 0 and words and words[0].isdigit():
            return words
        said = f"exit {code}: {stderr.strip()[-200:]!r}"
        if pause is not None:
            await asyncio.sleep(pause)
    await check_alive()
    raise SandboxStateError(
        f"kill_processes in {where}: expected its kill (one process, shell built-ins) to run; "
        f"found it could not in {len(KILL_PAUSES_S) + 1} tries ({said}): the sandbox's processes "
        f"hold every pid of pids_max={pids_max} (a fork bomb that respawns); fix: none needed, "
        "the trial scores 0 and stop() removes the sandbox"
    )
