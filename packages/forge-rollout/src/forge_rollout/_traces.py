"""Token traces: one durable, append-only JSONL file per session, and a reader.

Layout: `<traces_dir>/<session_id>.jsonl`, one `Trace` per line, `seq` = 0, 1, 2, ... in file
order. A record is written with ONE `os.write` of the whole line to an `O_APPEND` descriptor
(so a killed writer leaves whole lines; a torn tail, if the disk fills up mid-write, is cut
back on the next open), and is visible to readers as soon as the call returns (optionally
fsynced). A line counts only with its newline: the reader skips an unterminated tail.
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import iter_jsonl

TRACE_SCHEMA: Final = "forge/trace@1"
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class TraceTiming(BaseModel):
    """When the call ran and where its time went."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    started_at: float = Field(description="Unix time the gateway received the request.")
    finished_at: float = Field(description="Unix time the upstream answer was complete.")
    count_ms: float = Field(description="Exact prompt counting for the guard (ms).")
    upstream_ms: float = Field(description="The upstream model call (ms).")
    total_ms: float = Field(description="Request received to trace written (ms).")


class Trace(BaseModel):
    """One model call as the policy saw it: exact token ids and their sampling log-probs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal["forge/trace@1"] = Field(
        default=TRACE_SCHEMA, description="Record format version."
    )
    session_id: str = Field(description="Agent session (the URL's /sessions/{session_id}).")
    seq: int = Field(ge=0, description="0, 1, 2, ... per session, in the order written.")
    request_id: str = Field(description="Gateway request id (shared by the n choices).")
    choice_index: int = Field(ge=0, description="Which of the request's n choices.")
    endpoint: Literal["chat.completions", "completions"] = Field(description="API called.")
    model: str = Field(description="Model the call asked for: base name or LoRA adapter name.")
    params: dict[str, Any] = Field(
        description="The client's request minus messages/prompt/tools (sampling parameters)."
    )
    prompt_token_ids: list[int] = Field(min_length=1, description="Exact prompt ids (server).")
    completion_token_ids: list[int] = Field(min_length=1, description="Sampled ids (server).")
    logprobs: list[float] = Field(description="Raw log-prob of each completion token.")
    finish_reason: str | None = Field(description="stop | length (upstream's word).")
    stop_reason: str | int | None = Field(default=None, description="Stop string or id hit.")
    completion_text: str = Field(default="", description="Decoded completion text.")
    timing: TraceTiming = Field(description="Where the time went.")


class TraceFormatError(ValueError):
    """A complete trace line that does not parse: the file was edited or is not a trace file."""


def check_session_id(session_id: str) -> str | None:
    """None if usable as a file name, else the reason (expected / found / fix)."""
    if SESSION_ID_RE.fullmatch(session_id):
        return None
    return (
        f"expected a session id of 1-128 characters [A-Za-z0-9._-] starting with a letter or "
        f"digit; found {session_id!r}; fix: percent-encode or hash the id"
    )


class TraceWriter:
    """Appends traces per session; keeps at most `max_open` files open (LRU)."""

    def __init__(
        self, directory: str | os.PathLike[str], *, fsync: bool = False, max_open: int = 256
    ):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.max_open = max_open
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._next_seq: dict[str, int] = {}

    def path(self, session_id: str) -> Path:
        return self.directory / f"{session_id}.jsonl"

    def _open(self, session_id: str) -> int:
        fd = self._fds.pop(session_id, None)
        if fd is None:
            path = self.path(session_id)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            if session_id not in self._next_seq:
                self._next_seq[session_id] = _recover(fd)
            while len(self._fds) >= self.max_open:
                os.close(self._fds.popitem(last=False)[1])
        self._fds[session_id] = fd
        return fd

    def append(self, session_id: str, build: Callable[[int], dict[str, Any]]) -> int:
        """Write `build(seq)` as the session's next line; returns the seq it got."""
        fd = self._open(session_id)
        seq = self._next_seq[session_id]
        line = (json.dumps(build(seq), separators=(",", ":")) + "\n").encode("utf-8")
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, line)
            while written < len(line):  # only on a full disk or a signal: finish or undo
                written += os.write(fd, line[written:])
            if self.fsync:
                os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)  # never leave a partial record behind
            raise
        self._next_seq[session_id] = seq + 1
        return seq

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])


def _recover(fd: int) -> int:
    """Cut an unterminated tail (a torn write) and return the next seq for the file."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    data = os.pread(fd, size, 0)
    end = data.rfind(b"\n") + 1
    if end < size:
        os.ftruncate(fd, end)
    if end == 0:
        return 0
    last = data[: end - 1].rsplit(b"\n", 1)[-1]
    return int(json.loads(last)["seq"]) + 1


def read_traces(directory: str | os.PathLike[str], session_id: str | None = None) -> list[Trace]:
    """Every complete trace under `directory` (one session, or all sorted by session, seq).

    Safe while a gateway is writing: an unterminated last line is not a record yet.
    Raises TraceFormatError for a complete line that is not a valid trace.
    """
    root = Path(directory)
    if session_id is not None:
        reason = check_session_id(session_id)
        if reason:
            raise ValueError(reason)
        paths = [root / f"{session_id}.jsonl"]
    else:
        paths = sorted(root.glob("*.jsonl"))
    traces: list[Trace] = []
    for path in paths:
        if not path.is_file():
            continue
        for line in iter_jsonl(path, torn_tail="skip"):
            try:
                if line.error is not None:
                    raise ValueError(line.error)
                traces.append(Trace.model_validate_json(line.text))
            except ValueError as error:
                raise TraceFormatError(
                    f"expected a {TRACE_SCHEMA} record on line {line.number} of {path}; found an "
                    f"invalid line ({str(error).splitlines()[0]}); fix: restore the file or "
                    "move it out of the traces folder"
                ) from error
    traces.sort(key=lambda t: (t.session_id, t.seq))
    return traces
