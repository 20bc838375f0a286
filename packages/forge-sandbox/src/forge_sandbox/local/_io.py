"""Output capture for execs: capped, and closable while a background process still holds it.

A command may leave a background process holding its stdout; the exec returns when the command
exits, keeps reading for a short grace, then closes the pipe (a later write by that process
gets EPIPE). Output beyond the cap is counted, not kept.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence


class _Collect(asyncio.Protocol):
    def __init__(self, pipe: OutputPipe) -> None:
        self.pipe = pipe

    def data_received(self, data: bytes) -> None:
        self.pipe._feed(data)

    def eof_received(self) -> bool:
        self.pipe._eof.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.pipe._eof.set()


class OutputPipe:
    """A pipe whose write end goes to a child and whose read end is collected, capped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.read_fd, self.write_fd = os.pipe()
        self._chunks: list[bytes] = []
        self._size = 0
        self.truncated = False
        self._eof = asyncio.Event()
        self._transport: asyncio.BaseTransport | None = None

    def _feed(self, data: bytes) -> None:
        room = self.cap - self._size
        if room > 0:
            self._chunks.append(data[:room])
            self._size += min(room, len(data))
        if len(data) > max(room, 0):
            self.truncated = True

    async def start_reading(self) -> None:
        """Close our copy of the write end (the child has it) and start collecting."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
        loop = asyncio.get_running_loop()
        handle = os.fdopen(self.read_fd, "rb", buffering=0)
        self._transport, _ = await loop.connect_read_pipe(lambda: _Collect(self), handle)

    def close(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1
        if self._transport is not None:
            self._transport.close()
        elif self.read_fd >= 0:
            os.close(self.read_fd)
        self.read_fd = -1

    def text(self) -> str:
        data = b"".join(self._chunks).decode("utf-8", errors="replace")
        if self.truncated:
            data += f"\n[forge-sandbox: output truncated at {self.cap} bytes]\n"
        return data


async def drain(pipes: Sequence[OutputPipe], grace_s: float) -> None:
    """Wait for EOF on every pipe, at most `grace_s` seconds."""
    waits = [asyncio.ensure_future(p._eof.wait()) for p in pipes]
    if not waits:
        return
    _done, pending = await asyncio.wait(waits, timeout=grace_s)
    for task in pending:
        task.cancel()
