"""Atomic file writes: temp file in the same directory, fsync, rename, fsync the directory.

A reader never sees a half-written file: it sees the old content or the new one. A kill in the
middle of a write leaves at most a stray `.<name>.tmp-*` file, never a truncated target.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file or a directory by path (a directory fsync makes renames in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically (temp file + fsync + rename + directory fsync)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; written files are ordinary readable files
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_path(target.parent)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 `text` to `path` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write `obj` as indented, key-sorted JSON (with a trailing newline) atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
