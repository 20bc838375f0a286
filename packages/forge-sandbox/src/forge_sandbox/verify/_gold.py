"""A task's gold patch, file by file: what each file it touches becomes.

The gold patch (the row's `patch`, or solution/*.patch: `_testside.py`) is the task's answer.
Where it changes a file the carry otherwise keeps as the task's (`_harness.py`: a runner's
config such as jest.config.js or tox.ini's pytest section, package.json's scripts), the agent's
version is carried when it is the gold's: the oracle then passes with its own change, and the
file can only become the answer. 27 of SWE-gen-JS's 1,000 fix patches touch such a file
(jest.config.js, .mocharc.js, vite and vitest configs, .babelrc, .npmrc, ...).

    diffs = file_diffs(patch)                         # {path: FileDiff}
    gold = apply_file_diff(original, diffs[path])     # bytes; None: the gold removes the file

Applying is strict: each hunk's context and removed lines must match the original exactly at
its line or at the nearest offset (as `git apply` and `patch` without fuzz); anything else is
GoldPatchError, and the file stays the task's. Lines split at '\n' only; text is UTF-8.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")
NO_NEWLINE = "\\"  # "\ No newline at end of file": the line before it has no newline
GIT_HEADER = "diff --git "


class GoldPatchError(ValueError):
    """The gold patch's section for a file does not apply to the file the task shipped."""


@dataclass(frozen=True)
class Hunk:
    """One `@@` hunk: the lines it expects (context and removed) and the lines it leaves."""

    old_start: int
    old: tuple[str, ...]
    new: tuple[str, ...]


@dataclass(frozen=True)
class FileDiff:
    """One file's section of a unified diff."""

    path: str
    hunks: tuple[Hunk, ...]
    creates: bool = False  # `--- /dev/null`
    deletes: bool = False  # `+++ /dev/null`
    source: str | None = None  # the `---` name when it differs (a rename)
    binary: bool = False  # a binary section: its content is not read here


def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def unquote_c(quoted: str) -> str:
    """A name git C-quoted (core.quotePath: a quote, backslash, control or non-ASCII byte in
    it): `"a/na\\303\\257ve.py"` -> `a/naïve.py` (C escapes, octal bytes as UTF-8; bytes
    that are not UTF-8 stay as surrogates)."""
    body = quoted.rstrip("\t")[1:].removesuffix('"')
    decoded: bytes = codecs.escape_decode(body.encode("utf-8"))[0]
    return decoded.decode("utf-8", "surrogateescape")


def _name(header: str) -> str | None:
    """The path of a `--- a/x` / `+++ b/x` header line; None for /dev/null. git ends a name
    holding a space with a tab, and C-quotes one holding a quote, backslash, control or
    non-ASCII byte."""
    raw = header[4:].rstrip("\n")
    name = unquote_c(raw) if raw.startswith('"') else raw.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def _hunk(lines: list[str], at: int) -> tuple[Hunk, int]:
    """The hunk whose `@@` line is lines[at], and the index after it."""
    head = _HUNK.match(lines[at])
    assert head is not None, "the caller matched its @@ line"
    old_len = int(head.group(2)) if head.group(2) is not None else 1
    new_len = int(head.group(4)) if head.group(4) is not None else 1
    old: list[str] = []
    new: list[str] = []
    last = ""
    i = at + 1
    while i < len(lines):
        line = lines[i]
        if line.startswith(NO_NEWLINE):  # after the old side's last line, or the new side's
            if last in (" ", "-") and old:
                old[-1] = old[-1].rstrip("\n")
            if last in (" ", "+") and new:
                new[-1] = new[-1].rstrip("\n")
            i += 1
            continue
        if len(old) >= old_len and len(new) >= new_len:
            break
        mark, body = (line[0], line[1:]) if line != "\n" else (" ", "\n")
        if mark == " ":
            old.append(body)
            new.append(body)
        elif mark == "-":
            old.append(body)
        elif mark == "+":
            new.append(body)
        else:
            break
        last = mark
        i += 1
    return Hunk(int(head.group(1)), tuple(old), tuple(new)), i


def _git_header_name(line: str) -> str | None:
    """The one name of a `diff --git a/x b/x` line whose two names are equal (a mode change, a
    binary file, a new or removed empty file); None when they differ or are quoted (then the
    section's `rename`/`copy` lines name them)."""
    rest = line[len(GIT_HEADER) :].rstrip("\n")
    half = (len(rest) - 1) // 2
    old, new = rest[:half], rest[half + 1 :]
    if len(rest) % 2 and old[:2] == "a/" and new[:2] == "b/" and old[2:] == new[2:]:
        return old[2:] or None
    return None


def _extended_name(line: str, key: str) -> str:
    """The name of a `rename from x` / `copy to x` line (no a/ or b/; C-quoted if needed)."""
    raw = line[len(key) :].rstrip("\n")
    return unquote_c(raw) if raw.startswith('"') else raw


def _section(lines: list[str], at: int) -> tuple[FileDiff | None, int]:
    """The section that starts at lines[at] (a `diff --git` line) when no `---`/`+++` pair
    names it (a pure rename or copy, a mode change, a binary file), and the index after its
    headers; None when the pair follows."""
    i = at + 1
    while i < len(lines) and not lines[i].startswith((GIT_HEADER, "--- ")):
        i += 1
    heads = lines[at + 1 : i]

    def named(key: str) -> str | None:
        return next((_extended_name(line, key) for line in heads if line.startswith(key)), None)

    def has(*keys: str) -> bool:
        return any(line.startswith(keys) for line in heads)

    path = named("rename to ") or named("copy to ") or _git_header_name(lines[at])
    if path is None or (i < len(lines) and lines[i].startswith("--- ")):
        return None, i
    binary = has("Binary files ", "GIT binary patch")
    return FileDiff(path, (), has("new file mode "), has("deleted file mode "),
                    named("rename from "), binary), i  # fmt: skip


def file_diffs(patch: str) -> dict[str, FileDiff]:
    """Each file's section of `patch`, by its path (the new name; the old one for a
    removal): its `---`/`+++` pair, else its `diff --git` line and `rename`/`copy` lines (a
    pure rename or copy, a mode change, a binary file: no hunks)."""
    lines = _lines(patch)
    found: dict[str, FileDiff] = {}
    i = 0
    while i < len(lines):
        if lines[i].startswith(GIT_HEADER):
            section, i = _section(lines, i)
            if section is not None:
                found[section.path] = section
            continue
        if not (lines[i].startswith("--- ") and i + 1 < len(lines)
                and lines[i + 1].startswith("+++ ")):  # fmt: skip
            i += 1
            continue
        old_name, new_name = _name(lines[i]), _name(lines[i + 1])
        i += 2
        hunks = []
        while i < len(lines) and _HUNK.match(lines[i]):
            hunk, i = _hunk(lines, i)
            hunks.append(hunk)
        path = new_name or old_name
        if path is not None:
            source = old_name if old_name not in (None, path) else None
            found[path] = FileDiff(path, tuple(hunks), old_name is None, new_name is None, source)
    return found


def patch_paths(patch: str) -> frozenset[str]:
    """Every path `patch` touches (both names of a rename; /dev/null is not a path). A name
    with a space ends at git's tab, not at the space."""
    return diff_paths(file_diffs(patch))


def diff_paths(diffs: Mapping[str, FileDiff]) -> frozenset[str]:
    """Every path the file sections `diffs` touch (both names of a rename)."""
    return frozenset(name for diff in diffs.values() for name in (diff.path, diff.source) if name)


def _at(lines: list[str], old: tuple[str, ...], want: int, floor: int) -> int:
    """Where `old` matches `lines` nearest to `want` (not before `floor`); -1 if nowhere."""
    width = len(old)
    for distance in range(len(lines) + 1):
        for start in (want - distance, want + distance) if distance else (want,):
            if floor <= start <= len(lines) - width and tuple(lines[start : start + width]) == old:
                return start
    return -1


def apply_file_diff(original: bytes | None, diff: FileDiff) -> bytes | None:
    """The file as the gold leaves it (None: it removes it). GoldPatchError when the section
    does not apply to `original` (None: the task has no such file)."""
    if diff.deletes:
        return None
    if diff.binary or (diff.source is not None and not diff.hunks):
        raise GoldPatchError(
            f"{diff.path}: expected a text diff of the file; found a binary or pure rename "
            "section (its content is not in the patch)"
        )
    if original is None and not diff.creates:
        raise GoldPatchError(f"{diff.path}: the gold patch edits it; the task has no such file")
    try:
        lines = _lines(original.decode("utf-8")) if original is not None else []
    except UnicodeDecodeError as exc:
        raise GoldPatchError(f"{diff.path}: expected UTF-8 text; found {exc}") from exc
    shift, floor = 0, 0  # how far the original's lines moved; where the next hunk may start
    for hunk in diff.hunks:
        expected = hunk.old_start - 1 if hunk.old else hunk.old_start  # `-5,0`: after line 5
        start = _at(lines, hunk.old, expected + shift, floor)
        if start < 0:
            raise GoldPatchError(
                f"{diff.path}: expected the hunk at line {hunk.old_start} to match the task's "
                "file; found no place where its context and removed lines match"
            )
        lines[start : start + len(hunk.old)] = hunk.new
        shift = start - expected + len(hunk.new) - len(hunk.old)
        floor = start + len(hunk.new)
    return "".join(lines).encode("utf-8")
