"""The agent's change to the repository, carried from its sandbox into a fresh verifier sandbox.

A trial verifies in a new sandbox made from the task's original environment (issue "Rewards
that cannot be gamed"): no process, /logs, /tests or /tmp state of the agent's sandbox carries
over, only its change to the working directory, found by comparing two manifests of it:

    before = await take_manifest(agent_box)   # before the agent acts (the pristine tree)
    ...the agent...
    after = await take_manifest(agent_box)    # after every process it left was killed
    change = diff_manifests(before, after)    # paths to copy (new or changed), paths to delete
    carried = await carry_change(agent_box, fresh_box, change, before, scratch, after)

A manifest lists every file, folder and symlink below the working directory with its mode and
its sha256 (files) or target (links); `.git`, bytecode (`__pycache__`, `*.pyc`) and tool caches
are left out, so they never travel: a planted `.pyc` next to unchanged sources stays behind, and
the repository's history in the verifier is the task's own. The change travels as a tar that is
checked on the host (only the listed paths, files / folders / links inside the tree) before it
is unpacked in the fresh sandbox, modes kept. It needs GNU find, sha256sum, base64, xargs and
tar in the image (every Debian / Ubuntu base has them). A manifest that fits the exec's output
is printed (base64) by the command that takes it; a larger one is downloaded.

`ChangeError` marks what the agent's own actions caused (its tree unreadable, a change too large
or refused): the trial scores 0 for it. Anything the backend raises stays infrastructure.
"""

from __future__ import annotations

import base64
import posixpath
import shlex
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from forge_sandbox._errors import SandboxError, SandboxTransferError
from forge_sandbox._protocol import Sandbox
from forge_sandbox.verify._harness import keep_shared_config, split_harness
from forge_sandbox.verify._testside import TestSide

STAGE = "/tmp/.forge-transfer"  # the manifest's files
BEFORE = "/tmp/.forge-before"  # the time mark of the manifest before the agent
CHANGE_TAR = "/tmp/.forge-change.tar"  # the change, in either sandbox (/tmp exists in all)
CHANGE_LIST = "/tmp/.forge-change.list"  # its paths, NUL-separated, when not on argv
DELETE_LIST = "/tmp/.forge-delete.list"
ARGV_MAX_BYTES = 32 * 1024
CANDIDATES_TAR = "candidates.tar"  # scratch/after/: what changed since the mark, if taken
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
_ENTRY = "'%y\\0%m\\0%P\\0%l\\0'"  # type, mode, path, link target: NUL-separated
# One walk of the tree writes the entries, hashes the files (sha256sum's output is the walk's)
# and, after the agent, lists the candidates: every path whose status changed since the mark
# (ctime: set by any write, chmod, rename or `touch -d`, never by a user to the past).
_WALK = (
    f"find . -mindepth 1 \\( {_PRUNE} \\) -prune -o \\( -type f -o -type d -o -type l \\) "
    f"-fprintf {STAGE}/entries {_ENTRY} {{changed}}"
    f"\\( -type f -exec sha256sum -b -z -- {{{{}}}} + \\) > {STAGE}/hashes; "
)
_CHANGED = f"\\( -cnewer {BEFORE}/mark -fprintf {STAGE}/changed '%P\\0' -o -true \\) "
_STAGE = (
    f"set -e; umask 077; if [ -e {STAGE} ]; then rm -rf {STAGE}; fi; mkdir -p {STAGE}; "
    f"pwd -P > {STAGE}/workdir; "
)
# before the agent: the tree, then a mark of the time, kept outside the stage (never travels)
MANIFEST_BEFORE = _STAGE + _WALK.format(changed="") + f"mkdir -p {BEFORE} && touch {BEFORE}/mark; "
# after it: the candidates packed with the manifest, the change is taken from them when they
# hold all of it (else carry_change packs the change); no mark (removed): no candidates
MANIFEST_AFTER = (
    _STAGE
    + f"if [ -e {BEFORE}/mark ]; then {_WALK.format(changed=_CHANGED)}"
    + f"tar -c -f {STAGE}/candidates.tar --hard-dereference --null --no-recursion "
    + f'-T {STAGE}/changed && [ "$(stat -c %s {STAGE}/candidates.tar)" -le '
    + f"{MAX_CHANGE_MB * 1024 * 1024} ] || rm -f {STAGE}/candidates.tar; "
    + f"else {_WALK.format(changed='')}fi; "
)
# the manifest's files, the candidates with them when taken
MANIFEST_TAR = (
    f"set -- workdir entries hashes; [ ! -e {STAGE}/candidates.tar ] || "
    f'set -- "$@" candidates.tar; tar -c -f {STAGE}/manifest.tar -C {STAGE} "$@"'
)
# printed when it fits the exec's output (one command, no download: most trees); `{then}`:
# what follows a print (the before manifest's stage goes in the same command)
PRINT = (
    f'; if [ "$(stat -c %s {STAGE}/manifest.tar)" -le {{fits}} ]; then '
    f"base64 -w 0 {STAGE}/manifest.tar{{then}}; fi"
)
# what the agent left in /tmp never travels: removed for room (shell built-ins unless there is
# something to remove), the mark kept
CLEAR_TMP = (
    'case "$(pwd -P)/" in /tmp/*) ;; *) for f in /tmp/* /tmp/.[!.]* /tmp/..?*; do '
    f'[ "$f" != {BEFORE} ] && {{ [ -e "$f" ] || [ -L "$f" ]; }} && rm -rf -- "$f" 2>/dev/null; '
    "done;; esac; "
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
    and paths to delete first (gone, or of another type now); `kept`: changed paths of the
    test harness that are not carried (`_harness.py`: the task's version stays)."""

    copy: tuple[str, ...]
    delete: tuple[str, ...]
    kept: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.copy and not self.delete


def _fields(raw: bytes) -> list[str]:
    return raw.decode("utf-8", errors="surrogateescape").split("\0")


def _decoded(printed: str) -> bytes | None:
    """The manifest tar the command printed in base64; None when it printed none."""
    try:
        data = base64.b64decode(printed.strip(), validate=True)
    except ValueError:
        return None
    return data or None


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
    fits = sandbox.spec.max_output_bytes * 3 // 4 - 4096  # base64 is 4/3 of the bytes
    if after_agent:  # what it left in /tmp never travels: room for the manifest
        printed = PRINT.format(fits=fits, then="")
        script = CLEAR_TMP + MANIFEST_AFTER + MANIFEST_TAR + printed
    else:  # printed, its stage is removed in the same command
        printed = PRINT.format(fits=fits, then=f" && rm -rf {STAGE}")
        script = MANIFEST_BEFORE + MANIFEST_TAR + printed
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
            "fresh-sandbox verifier: expected GNU find, sha256sum, xargs, tar and base64 in "
            f"the task's environment to list its working tree; found the manifest failed "
            f"({why}); fix: install coreutils, findutils and tar in the image"
        )
    local = scratch / ("after" if after_agent else "before")
    local.mkdir(parents=True, exist_ok=True)
    tar_bytes = None if run.output_truncated else _decoded(run.stdout)
    if tar_bytes is not None:
        (local / "manifest.tar").write_bytes(tar_bytes)
    else:  # too large to print (past max_output_bytes): fetched as a file
        await sandbox.download(f"{STAGE}/manifest.tar", local / "manifest.tar")
    with tarfile.open(local / "manifest.tar") as tar:
        parts = {}
        for name in ("workdir", "entries", "hashes"):
            member = tar.extractfile(name)
            if member is None:
                raise SandboxError(f"fresh-sandbox verifier: manifest lacks {name!r}")
            parts[name] = member.read()
        (local / CANDIDATES_TAR).unlink(missing_ok=True)
        if after_agent and CANDIDATES_TAR in tar.getnames():
            packed_member = tar.extractfile(CANDIDATES_TAR)
            if packed_member is not None:
                (local / CANDIDATES_TAR).write_bytes(packed_member.read())
    if tar_bytes is None and not after_agent:
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


def _as_argv(paths: tuple[str, ...]) -> bool:
    """Whether `paths` can go on a command line as they are: printable ASCII, none starting
    with '-', ARGV_MAX_BYTES in all (else they travel as a NUL-separated list file)."""
    size = sum(len(p) + 1 for p in paths)
    return size <= ARGV_MAX_BYTES and all(
        p.isascii() and p.isprintable() and not p.startswith("-") for p in paths
    )


def _nul_list(paths: tuple[str, ...]) -> bytes:
    return b"".join(p.encode("utf-8", errors="surrogateescape") + b"\0" for p in paths)


def _change_from(candidates: Path, change: Change, archive: Path) -> bool:
    """Write the change's archive from the candidates packed with the after manifest when
    they hold every changed path (checked as `_pack_change`'s); False: pack it instead (the
    mark was gone, a path changed within its clock tick, or the candidates were too large)."""
    if not candidates.is_file():
        return False
    try:
        with tarfile.open(candidates) as packed:
            members = {posixpath.normpath(m.name): m for m in packed.getmembers()}
            if any(path not in members for path in change.copy):
                return False
            with tarfile.open(archive, "w") as out:
                for path in change.copy:
                    member = members[path]
                    data = packed.extractfile(member) if member.isfile() else None
                    out.addfile(member, data)
    except (tarfile.TarError, OSError):
        return False
    check_change_archive(archive, change)
    return True


async def _pack_change(source: Sandbox, change: Change, scratch: Path) -> None:
    """The changed paths as a tar in `source` (the agent's sandbox), downloaded and checked."""
    limit = MAX_CHANGE_MB * 1024 * 1024
    size_ok = f'[ "$(stat -c %s {CHANGE_TAR})" -le {limit} ]'
    tar = f"tar -c -f {CHANGE_TAR} --hard-dereference --no-recursion"
    if _as_argv(change.copy):  # one exec: the names on its command line
        argv = ["sh", "-c", f'{tar} -- "$@" && {size_ok}', "sh", *change.copy]
    else:
        listing = scratch / "change.list"
        listing.write_bytes(_nul_list(change.copy))
        await source.upload(listing, CHANGE_LIST)
        argv = ["sh", "-c", f"{tar} --null -T {CHANGE_LIST} && {size_ok}"]
    run = await source.exec(argv, cwd=None)
    if run.exit_code != 0:
        raise ChangeError(
            f"agent's change: expected its {len(change.copy)} changed paths readable and "
            f"under {MAX_CHANGE_MB} MiB in all; found the archive failed or too large "
            f"(exit {run.exit_code}: {run.stderr.strip()[-300:]!r}); scored 0"
        )
    await source.download(CHANGE_TAR, scratch / "change.tar")
    check_change_archive(scratch / "change.tar", change)


async def carry_change(
    source: Sandbox,
    target: Sandbox,
    change: Change,
    before: Manifest,
    scratch: Path,
    after: Manifest,
    side: Callable[[str], bool] | None = None,
) -> Change:
    """Copy `change` (from `before` to `after`) from `source` (the agent's sandbox) into
    `target` (the fresh one) at `before.workdir`, less the test harness's files
    (`_harness.py`) and the task's test side (`side`: `_testside.py`), and return what was
    carried (with `kept`: the paths left out): delete
    first (short, plain path lists on the command line), then unpack the checked archive with
    its modes (`extract`: one round trip, nothing staged in `target`)."""
    workdir = before.workdir
    gold = side.diffs if isinstance(side, TestSide) else None
    change, kept = split_harness(change, before, after, side, gold)
    try:
        if change.copy:
            candidates = scratch / "after" / CANDIDATES_TAR
            if not _change_from(candidates, change, scratch / "change.tar"):
                await _pack_change(source, change, scratch)
    except SandboxTransferError as exc:  # tar failed in its sandbox on the change itself
        raise ChangeError(
            f"agent's change: expected its archive to copy out of its sandbox; found {exc} "
            "(unreadable files, or a change too large for the sandbox's storage_mb); scored 0"
        ) from exc
    if change.copy:
        change, config = await keep_shared_config(
            target, change, workdir, before, scratch / "change.tar", gold
        )
        kept = tuple(sorted({*kept, *config}))
    if change.delete:
        if _as_argv(change.delete):
            argv = ["sh", "-c", 'rm -rf -- "$@"', "sh", *change.delete]
        else:
            doomed = scratch / "delete.list"
            doomed.write_bytes(_nul_list(change.delete))
            await target.upload(doomed, DELETE_LIST)
            argv = ["sh", "-c", f"xargs -0 -r rm -rf -- < {DELETE_LIST} && rm -f {DELETE_LIST}"]
        run = await target.exec(argv, cwd=workdir)
        if run.exit_code != 0:
            raise ChangeError(
                f"agent's change: expected its deletions done in the fresh sandbox's {workdir}; "
                f"found exit {run.exit_code}: {run.stderr.strip()[-300:]!r}; scored 0"
            )
    if change.copy:
        try:
            await target.extract(scratch / "change.tar", workdir)
        except SandboxTransferError as exc:
            raise ChangeError(
                f"agent's change: expected it to unpack in the fresh sandbox's {workdir}; found "
                f"{exc} (a change too large for the sandbox's storage_mb?); scored 0"
            ) from exc
    return replace(change, kept=kept)
