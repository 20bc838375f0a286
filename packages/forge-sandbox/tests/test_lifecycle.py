"""The lifecycle the three backends share (`_lifecycle.py`): a failed or cancelled start leaves
nothing, stop is idempotent, and a cleanup runs to its end through a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from forge_sandbox import LocalSandbox, SandboxStateError
from forge_sandbox._lifecycle import SandboxLifecycle, run_to_the_end
from forge_sandbox.docker import DockerSandbox
from forge_sandbox.kubernetes import KubernetesSandbox


class Box(SandboxLifecycle):
    """A backend whose start and cleanup are scripted; it records what ran."""

    def __init__(self, start_fails: bool = False, cleanup_s: float = 0.0) -> None:
        self.start_fails, self.cleanup_s = start_fails, cleanup_s
        self.events: list[str] = []

    async def _start(self) -> None:
        self.events.append("start")
        await asyncio.sleep(0)
        if self.start_fails:
            raise OSError("no room")

    async def _cleanup(self) -> None:
        self.events.append("cleanup begun")
        await asyncio.sleep(self.cleanup_s)
        self.events.append("cleanup done")

    def _cleanup_cancelled(self) -> None:
        self.events.append("last resort")


@pytest.mark.parametrize("backend", [LocalSandbox, DockerSandbox, KubernetesSandbox])
def test_every_backend_has_the_shared_lifecycle(backend: type) -> None:
    assert issubclass(backend, SandboxLifecycle)
    for name in ("_start", "_cleanup"):  # each implements its own half
        assert getattr(backend, name) is not getattr(SandboxLifecycle, name), (backend, name)


def test_a_failed_start_cleans_up_and_raises() -> None:
    box = Box(start_fails=True)
    with pytest.raises(OSError, match="no room"):
        asyncio.run(box.start())
    assert box.events == ["start", "cleanup begun", "cleanup done"]
    assert box._state == "stopped"
    asyncio.run(box.stop())  # idempotent: nothing more runs
    assert box.events == ["start", "cleanup begun", "cleanup done"]


def test_start_once_stop_once() -> None:
    async def main() -> Box:
        async with Box() as box:
            assert box._state == "running"
            with pytest.raises(SandboxStateError, match="create a new Box for each trial"):
                await box.start()
        await box.stop()
        return box

    box = asyncio.run(main())
    assert box.events == ["start", "cleanup begun", "cleanup done"]
    assert box._state == "stopped"


def test_stop_of_a_box_never_started_runs_nothing() -> None:
    box = Box()
    asyncio.run(box.stop())
    assert box.events == [] and box._state == "stopped"
    with pytest.raises(SandboxStateError, match="found state 'stopped'"):
        asyncio.run(box.start())


def test_a_stop_cancelled_meanwhile_still_cleans_up_to_the_end() -> None:
    async def main() -> Box:
        box = Box(cleanup_s=0.2)
        await box.start()
        stopping = asyncio.ensure_future(box.stop())
        await asyncio.sleep(0.05)
        stopping.cancel()  # Ctrl-C while the sandbox is being removed
        with pytest.raises(asyncio.CancelledError):
            await stopping
        return box

    box = asyncio.run(main())
    assert box.events == ["start", "cleanup begun", "cleanup done", "last resort"]
    assert box._state == "stopped"


def test_run_to_the_end_returns_the_cleanups_error_and_its_result() -> None:
    async def fails() -> None:
        raise RuntimeError("daemon gone")

    with pytest.raises(RuntimeError, match="daemon gone"):
        asyncio.run(run_to_the_end(fails()))

    async def main() -> list[str]:
        seen: list[str] = []

        async def cleanup() -> None:
            await asyncio.sleep(0.1)
            seen.append("done")

        task = asyncio.ensure_future(run_to_the_end(cleanup(), lambda: seen.append("resort")))
        await asyncio.sleep(0.01)
        for _ in range(3):  # cancelled again and again: still one cleanup, to its end
            task.cancel()
            await asyncio.sleep(0.01)
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    assert asyncio.run(main()) == ["done", "resort"]
