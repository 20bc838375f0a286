"""Host-side preparation of a local sandbox: the private workspace copy, and bwrap's log."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from forge_sandbox._errors import SandboxError
from forge_sandbox.local._cgroup_detect import _alive

STATE_PREFIX = "forge-sbx-"  # a sandbox's state folder: forge-sbx-<owner pid>-<random>


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove a state folder, whatever modes the sandbox gave its files: as a user other than
    root, a folder the task made read-only (`chmod 555`) keeps its entries from the host's
    rmtree, which root's is not. Errors are left (the folder stays; the next start sweeps)."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path) or os.path.islink(path):
        return
    for folder, dirs, _files in os.walk(path, onerror=lambda _exc: None):
        for name in dirs:  # each before os.walk lists it (top-down)
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(folder, name), 0o700, follow_symlinks=False)
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def sweep_stale_folders(root: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove sandbox state folders `forge-sbx-<pid>-*` under `root` (default: the temp
    folder) whose owner process is gone (killed with -9, or a crash); their names. Folders of
    live owners, and ones without an owner pid in their name, are left alone."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = re.fullmatch(rf"{STATE_PREFIX}(\d+)-[A-Za-z0-9_]+", entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        if _alive(int(match.group(1))):
            continue
        remove_tree(entry.path)
        if not os.path.lexists(entry.path):
            removed.append(entry.name)
    return removed


def unreachable_folder(path: Path, uid: int, gid: int | None = None) -> Path | None:
    """The first folder on `path` (itself included) that `uid` cannot search (no x bit for
    it: a 0700 home owned by someone else), or None when it can reach `path`."""
    target = Path(os.path.abspath(path))
    for folder in [*reversed(target.parents), target]:
        try:
            info = os.stat(folder)
        except OSError:
            return folder
        if info.st_uid == uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif gid is not None and info.st_gid == gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return folder
    return None


FALLBACK_STATE_ROOTS = ("/tmp", "/var/tmp")


def state_root(root: str | os.PathLike[str] | None, host_uid: int | None) -> Path:
    """Where sandbox state folders go: `root` (default: the temp folder), unless the sandbox's
    host uid cannot reach it (a clone in a 0700 home puts nox's TMPDIR there): then /tmp (or
    /var/tmp). An explicit `root` it cannot reach is refused, naming the folder in the way."""
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    if host_uid is None:
        return base
    blocked = unreachable_folder(base, host_uid)
    if blocked is None:
        return base
    if root is None:
        for fallback in FALLBACK_STATE_ROOTS:
            if unreachable_folder(Path(fallback), host_uid) is None:
                return Path(fallback)
    raise SandboxError(
        f"sandbox state folder: expected a folder the sandbox's host uid {host_uid} can reach; "
        f"found {base}, where {blocked} is closed to it (mode "
        f"{stat.filemode(os.stat(blocked).st_mode) if blocked.exists() else 'missing'}); fix: "
        "set TMPDIR (or state_root) to a folder under /tmp, or give the folder in the way o+x"
    )


def prepare_workspace(source: Path | None, workspace: Path, host_uid: int | None) -> None:
    """Copy `source` (regular files, folders, links) into `workspace`, owned by host_uid."""
    if source is None:
        workspace.mkdir()
    else:
        if not Path(source).is_dir():
            raise SandboxError(
                f"workspace: expected a folder; found {source!r}; fix: point at the task's "
                "environment/workspace or a checkout"
            )
        shutil.copytree(source, workspace, symlinks=True, ignore=_special_files)
    if host_uid is None:
        return
    for directory, dirnames, filenames in os.walk(workspace):
        os.lchown(directory, host_uid, host_uid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(directory, name), host_uid, host_uid)


def _special_files(directory: str, names: list[str]) -> set[str]:
    skipped = set()
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.add(name)
    return skipped


def log_tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_bytes()[-limit:].decode(errors="replace").strip()
    except OSError:
        return ""
