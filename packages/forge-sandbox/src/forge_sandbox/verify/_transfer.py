"""The agent's change to the repository, carried from its sandbox into a fresh verifier sandbox.

A trial verifies in a new sandbox made from the task's original environment (issue "Rewards
that cannot be gamed"): no process, /logs, /tests or /tmp state of the agent's sandbox carries
over, only its change to the working directory, found by comparing two manifests of it:

    before = await take_manifest(agent_box)   # before the agent acts (the pristine tree)
    ...the agent...
    after = await take_manifest(agent_box)    # after every process it left was killed
    change = diff_manifests(before, after)    # paths to copy (new or changed), paths to delete
    await carry_change(agent_box, fresh_box, change, scratch)

A manifest lists every file, folder and symlink below the working directory with its mode and
its sha256 (files) or target (links); `.git`, bytecode (`__pycache__`, `*.pyc`) and tool caches
are left out, so they never travel: a planted `.pyc` next to unchanged sources stays behind, and
the repository's history in the verifier is the task's own. The change travels as a tar that is
checked on the host (only the listed paths, files / folders / links inside the tree) before it
is unpacked in the fresh sandbox, modes kept. It needs GNU find, sha256sum, xargs and tar in the
image (every Debian / Ubuntu base has them).

`ChangeError` marks what the agent's own actions caused (its tree unreadable, a change too large
or refused): the trial scores 0 for it. Anything the backend raises stays infrastructure.
"""

from __future__ import annotations

import posixpath
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path

from forge_sandbox._errors import SandboxError, SandboxTransferError
from forge_sandbox._protocol import Sandbox

STAGE = "/tmp/.forge-transfer"
EXCLUDED = (
    ".git",
    "__pycache__",
    "*.pyc",
    "*.pyo",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
)
MAX_CHANGE_MB = 256
_PRUNE = " -o ".join(f"-name {shlex.quote(name)}" for name in EXCLUDED)
_FIND = f"find . \\( {_PRUNE} \\) -prune -o"
_ENTRY = "'%y\\0%m\\0%P\\0%l\\0'"  # type, mode, path, link target: NUL-separated
MANIFEST_SCRIPT = (
    f"set -e; umask 077; rm -rf {STAGE}; mkdir -p {STAGE}; pwd -P > {STAGE}/workdir; "
    f"{_FIND} \\( -type f -o -type d -o -type l \\) -printf {_ENTRY} > {STAGE}/entries; "
    f"{_FIND} -type f -print0 | xargs -0 -r sha256sum -b -z -- > {STAGE}/hashes; "
    f"tar -c -f {STAGE}/manifest.tar -C {STAGE} workdir entries hashes"
)


CLEAR_TMP = (
    'case "$(pwd -P)/" in /tmp/*) ;; *) find /tmp -mindepth 1 -maxdepth 1 '
    "-exec rm -rf -- {} + 2>/dev/null;; esac; "
)


class ChangeError(RuntimeError):
    """The agent's change could not be carried for a reason its own actions caused: its working
    tree could not be read (modes it set), the change is larger than MAX_CHANGE_MB, or it holds
    an entry the verifier refuses (a link out of the tree, a device). The trial scores 0."""


@dataclass(frozen=True)
class Entry:
    """One path of a manifest: its type ('f' file, 'd' folder, 'l' symlink), its permission
    bits, and its content (a file's sha256, a link's target, '' for a folder)."""

    kind: str
    mode: int
    content: str


@dataclass(frozen=True)
class Manifest:
    """The working directory's absolute path and its entries by relative path."""

    workdir: str
    entries: dict[str, Entry]


@dataclass(frozen=True)
class Change:
    """What the agent changed: paths to copy (new or changed, folders before what they hold)
    and paths to delete first (gone, or of another type now)."""

    copy: tuple[str, ...]
    delete: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.copy and not self.delete


def _fields(raw: bytes) -> list[str]:
    return raw.decode("utf-8", errors="surrogateescape").split("\0")


def parse_manifest(workdir: bytes, entries: bytes, hashes: bytes) -> Manifest:
    """A manifest from the script's three files (NUL-separated; see MANIFEST_SCRIPT)."""
    digests: dict[str, str] = {}
    for line in _fields(hashes):
        if not line:
            continue
        digest, _, name = line.partition(" *")
        digests[posixpath.normpath(name)] = digest
    fields = _fields(entries)
    found: dict[str, Entry] = {}
    for i in range(0, len(fields) - 3, 4):
        kind, mode, path, target = fields[i : i + 4]
        if not path:  # the working directory itself
            continue
        content = digests.get(path, "?") if kind == "f" else target if kind == "l" else ""
        found[path] = Entry(kind=kind, mode=int(mode, 8), content=content)
    where = workdir.decode("utf-8", errors="surrogateescape").strip()
    return Manifest(workdir=where, entries=found)


async def take_manifest(sandbox: Sandbox, scratch: Path, *, after_agent: bool) -> Manifest:
    """The manifest of `sandbox`'s working directory (read in the sandbox, parsed here).

    after_agent: a failure to read the tree is then the agent's doing (ChangeError); before
    the agent it is the task's image (a SandboxError naming the tools it needs)."""
    script = MANIFEST_SCRIPT
    if after_agent:  # what it left in /tmp never travels: room for the manifest
        script = CLEAR_TMP + script
    run = await sandbox.exec(["sh", "-c", script], cwd=None)
    if run.exit_code != 0:
        why = f"exit {run.exit_code}: {run.stderr.strip()[-300:]!r}"
        if after_agent:
            raise ChangeError(
                "agent's change: expected its working tree readable to carry it to the "
                f"verifier; found the manifest failed ({why}): files or folders the agent "
                "made unreadable, or a full /tmp; scored 0"
            )
        raise SandboxError(
            "fresh-sandbox verifier: expected GNU find, sha256sum, xargs and tar in the task's "
            f"environment to list its working tree; found the manifest failed ({why}); fix: "
            "install coreutils, findutils and tar in the image"
        )
    local = scratch / ("after" if after_agent else "before")
    await sandbox.download(f"{STAGE}/manifest.tar", local / "manifest.tar")
    with tarfile.open(local / "manifest.tar") as tar:
        parts = {}
        for name in ("workdir", "entries", "hashes"):
            member = tar.extractfile(name)
            if member is None:
                raise SandboxError(f"fresh-sandbox verifier: manifest lacks {name!r}")
            parts[name] = member.read()
    await sandbox.exec(["rm", "-rf", STAGE], cwd="/")
    return parse_manifest(parts["workdir"], parts["entries"], parts["hashes"])


def diff_manifests(before: Manifest, after: Manifest) -> Change:
    """What changed from `before` to `after`: new or changed paths (content, mode or type) to
    copy, and paths gone or of another type to delete. Deleting a folder deletes what it holds,
    so only the topmost deleted path is listed."""
    copy = sorted(
        path
        for path, entry in after.entries.items()
        if (old := before.entries.get(path)) is None or old != entry
    )
    gone = sorted(
        path
        for path, entry in before.entries.items()
        if path not in after.entries or after.entries[path].kind != entry.kind
    )
    delete: list[str] = []
    for path in gone:
        if not any(path.startswith(top + "/") for top in delete):
            delete.append(path)
    return Change(copy=tuple(copy), delete=tuple(delete))


def check_change_archive(archive: Path, change: Change) -> None:
    """Refuse a change tar holding anything but the listed paths as files, folders or links
    that stay inside the tree (ChangeError: the agent made it)."""
    wanted = set(change.copy)
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = posixpath.normpath(member.name)
            if name not in wanted or name.startswith("/") or ".." in name.split("/"):
                raise ChangeError(
                    f"agent's change: expected only the changed paths in its archive; found "
                    f"{member.name!r}; scored 0"
                )
            if member.issym():
                link = member.linkname
                target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
                if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
                    raise ChangeError(
                        f"agent's change: expected its links inside the working tree; found "
                        f"{name!r} -> {member.linkname!r}; the verifier does not follow it out "
                        "of the tree: scored 0"
                    )
            elif not (member.isfile() or member.isdir()):
                raise ChangeError(
                    f"agent's change: expected files, folders and links; found {name!r} of "
                    "another type (a device, fifo or hard link); scored 0"
                )


async def carry_change(
    source: Sandbox, target: Sandbox, change: Change, workdir: str, scratch: Path
) -> None:
    """Copy `change` from `source` (the agent's sandbox) into `target` (the fresh one) at
    `workdir`: delete first, then unpack the checked archive with its modes."""
    await target.exec(["mkdir", "-p", STAGE], cwd="/")  # Docker's upload needs the folder
    if change.copy:
        listing = scratch / "change.list"
        listing.write_bytes(
            b"".join(p.encode("utf-8", errors="surrogateescape") + b"\0" for p in change.copy)
        )
        await source.exec(["mkdir", "-p", STAGE], cwd="/")  # the manifest step removed it
        await source.upload(listing, f"{STAGE}/change.list")
        pack = (
            f"tar -c -f {STAGE}/change.tar --hard-dereference --null --no-recursion "
            f"-T {STAGE}/change.list && "
            f'[ "$(stat -c %s {STAGE}/change.tar)" -le {MAX_CHANGE_MB * 1024 * 1024} ]'
        )
        run = await source.exec(["sh", "-c", pack], cwd=None)
        if run.exit_code != 0:
            raise ChangeError(
                f"agent's change: expected its {len(change.copy)} changed paths readable and "
                f"under {MAX_CHANGE_MB} MiB in all; found the archive failed or too large "
                f"(exit {run.exit_code}: {run.stderr.strip()[-300:]!r}); scored 0"
            )
        try:
            await source.download(f"{STAGE}/change.tar", scratch / "change.tar")
            check_change_archive(scratch / "change.tar", change)
            await target.upload(scratch / "change.tar", f"{STAGE}/change.tar")
        except SandboxTransferError as exc:  # tar failed in a sandbox on the change itself
            raise ChangeError(
                f"agent's change: expected its archive to copy out of its sandbox and into the "
                f"fresh one; found {exc} (a change too large for the sandbox's storage_mb, or "
                "unreadable files); scored 0"
            ) from exc
    if change.delete:
        doomed = scratch / "delete.list"
        doomed.write_bytes(
            b"".join(p.encode("utf-8", errors="surrogateescape") + b"\0" for p in change.delete)
        )
        await target.upload(doomed, f"{STAGE}/delete.list")
    steps = []
    if change.delete:
        steps.append(f"xargs -0 -r rm -rf -- < {STAGE}/delete.list")
    if change.copy:
        steps.append(f"tar -x -p -f {STAGE}/change.tar --no-same-owner")
    steps.append(f"rm -rf {STAGE}")
    run = await target.exec(["sh", "-c", " && ".join(steps)], cwd=workdir)
    if run.exit_code != 0:
        raise ChangeError(
            f"agent's change: expected it to unpack in the fresh sandbox's {workdir}; found "
            f"exit {run.exit_code}: {run.stderr.strip()[-300:]!r}; scored 0"
        )
