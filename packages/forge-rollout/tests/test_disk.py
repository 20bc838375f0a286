"""The gateway's disk thread (`_disk.DiskThread`): order, outcomes, cancellation, shutdown."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from forge_rollout.gateway._disk import DiskThread


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_work_runs_in_order_in_one_thread_off_the_loop() -> None:
    disk = DiskThread("forge-test-order")
    done: list[tuple[int, str]] = []

    def job(index: int) -> int:
        time.sleep(0.002 if index % 3 == 0 else 0)
        done.append((index, threading.current_thread().name))
        return index * 10

    async def main() -> list[int]:
        loop_thread = threading.current_thread().name
        results = await asyncio.gather(*(disk.run(job, i) for i in range(40)))
        assert all(name != loop_thread for _, name in done)
        return list(results)

    assert _threads("forge-test-order") == []  # started on first use only
    assert asyncio.run(main()) == [i * 10 for i in range(40)]
    assert [i for i, _ in done] == list(range(40))
    assert {name for _, name in done} == {"forge-test-order"}
    disk.shutdown()
    assert _threads("forge-test-order") == []


def test_an_exception_reaches_the_awaiting_task_and_the_thread_goes_on() -> None:
    disk = DiskThread("forge-test-errors")

    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    def stop_iteration() -> None:
        raise StopIteration

    async def main() -> None:
        with pytest.raises(OSError, match="No space left"):
            await disk.run(full_disk)
        with pytest.raises(RuntimeError, match="StopIteration"):
            await disk.run(stop_iteration)
        assert await disk.run(sum, [1, 2, 3]) == 6

    asyncio.run(main())
    disk.shutdown()


def test_cancelled_awaiter_does_not_stop_its_work_or_the_next() -> None:
    """A client that went away: its write still happens; later work is answered."""
    disk = DiskThread("forge-test-cancel")
    gate = threading.Event()
    written: list[str] = []

    def slow_write() -> str:
        gate.wait(5)
        written.append("slow")
        return "slow"

    async def main() -> None:
        task = asyncio.ensure_future(disk.run(slow_write))
        await asyncio.sleep(0.01)
        task.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await disk.run(lambda: written.append("next") or "next") == "next"

    asyncio.run(main())
    assert written == ["slow", "next"]
    disk.shutdown()


def test_shutdown_runs_what_was_submitted_then_refuses_more() -> None:
    disk = DiskThread("forge-test-shutdown")
    written: list[int] = []

    def write(index: int) -> None:
        time.sleep(0.005)
        written.append(index)

    async def submit() -> None:
        for index in range(5):
            disk.run(write, index)  # not awaited: the loop ends before they run

    asyncio.run(submit())
    disk.shutdown()
    assert written == [0, 1, 2, 3, 4]
    assert _threads("forge-test-shutdown") == []
    disk.shutdown()  # idempotent

    async def late() -> None:
        with pytest.raises(RuntimeError, match="shut down"):
            disk.run(write, 9)

    asyncio.run(late())
    assert written == [0, 1, 2, 3, 4]


def test_run_small_runs_on_the_loop_when_nothing_is_queued() -> None:
    disk = DiskThread("forge-test-inline")

    async def main() -> None:
        loop_thread = threading.current_thread().name
        assert await disk.run_small(lambda: threading.current_thread().name) == loop_thread
        with pytest.raises(OSError, match="No space left"):
            await disk.run_small(_raise_enospc)

    asyncio.run(main())
    assert _threads("forge-test-inline") == []  # the thread never started
    assert disk.counts == {"inline": 2, "thread": 0, "stalls": 0}
    disk.shutdown()


def _raise_enospc() -> None:
    raise OSError(28, "No space left on device")


def test_run_small_waits_its_turn_behind_queued_work() -> None:
    """A write behind work still queued for the thread goes to the thread, after it: the
    session's lines keep their order."""
    disk = DiskThread("forge-test-turn")
    gate = threading.Event()
    done: list[tuple[str, str]] = []

    def write(name: str) -> str:
        if name == "queued":
            gate.wait(5)
        done.append((name, threading.current_thread().name))
        return name

    async def main() -> None:
        queued = disk.run(write, "queued")
        small = asyncio.ensure_future(disk.run_small(write, "small"))
        await asyncio.sleep(0.01)
        assert done == []  # not run on the loop ahead of the queued write
        gate.set()
        assert await queued == "queued" and await small == "small"
        # everything settled: the next one runs inline again
        assert await disk.run_small(write, "after") == "after"

    asyncio.run(main())
    assert [name for name, _ in done] == ["queued", "small", "after"]
    assert [thread for _, thread in done][:2] == ["forge-test-turn"] * 2
    assert done[2][1] != "forge-test-turn"
    assert disk.counts == {"inline": 1, "thread": 2, "stalls": 0}
    disk.shutdown()


def test_a_stalled_inline_call_sends_the_next_ones_to_the_thread_for_a_pause() -> None:
    where: list[str] = []

    def write(stall: float = 0.0) -> None:
        time.sleep(stall)
        where.append(threading.current_thread().name)

    async def calls(disk: DiskThread, stalls: list[float]) -> None:
        for stall in stalls:
            await disk.run_small(write, stall)

    disk = DiskThread("forge-test-stall", stall_s=0.2, pause_s=60.0)
    asyncio.run(calls(disk, [0.0, 0.3, 0.0, 0.0]))  # the disk stalled: the loop waited once
    assert where[2:] == ["forge-test-stall"] * 2
    assert "forge-test-stall" not in where[:2]
    assert disk.counts == {"inline": 2, "thread": 2, "stalls": 1}
    disk.shutdown()
    where.clear()
    over = DiskThread("forge-test-stall-over", stall_s=0.2, pause_s=0.0)  # the pause is over
    asyncio.run(calls(over, [0.3, 0.0]))
    assert "forge-test-stall-over" not in where
    assert over.counts == {"inline": 2, "thread": 0, "stalls": 1}
    over.shutdown()


def test_run_small_after_shutdown_is_refused() -> None:
    disk = DiskThread("forge-test-closed")
    disk.shutdown()

    async def late() -> None:
        with pytest.raises(RuntimeError, match="shut down"):
            await disk.run_small(lambda: None)

    asyncio.run(late())
