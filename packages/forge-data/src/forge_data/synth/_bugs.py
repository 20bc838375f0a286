"""Bug candidates from SWE-smith's procedural modifiers (`swesmith.bug_gen.procedural.python`,
libcst-based), applied to the project's functions and classes, never to a test file.

Deterministic for a seed: the files are read in sorted order, every (entity, modifier) pair a
modifier accepts is listed, the pairs are shuffled by `random.Random(seed)`, and every modifier
is a fresh instance seeded with the same seed (its own coin flips), as swesmith's `generate.py`
does with `--interleave`. A rewrite that does not compile is dropped (counted), as is one that
changes nothing or repeats an earlier candidate's file text.

swesmith 0.0.9 imports every language's tree-sitter grammar when its Python modules are
imported (its package `__init__`s do); they install as wheels, so the `synth` extra pins them.
"""

from __future__ import annotations

import difflib
import hashlib
import random
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forge_data._errors import DataError

_NOT_SOURCE_DIRS = {
    "docs",
    "doc",
    "examples",
    "example",
    "benchmarks",
    "benchmark",
    "bench",
    "scripts",
    "tools",
    "ci",
    ".venv",
    "build",
    "dist",
    "site-packages",
}
_NOT_SOURCE_FILES = {
    "setup.py",
    "conftest.py",
    "noxfile.py",
    "tasks.py",
    "fabfile.py",
    "__main__.py",
    "_version.py",
    "version.py",
}


def is_test_path(relative: str) -> bool:
    """A test file or test support file, never modified, never a bug site: any file whose path
    has a word (split at `/ _ . -`) starting with `test` (tests/, testing.py, test_x.py,
    x_test.py, testutils/...) or equal to `conftest`; data files under such folders too."""
    words = re.split(r"[/_.\-]", relative.lower())
    return any(word.startswith("test") or word == "conftest" for word in words)


def source_files(root: Path) -> list[str]:
    """The project's own Python modules (relative POSIX paths, sorted): bug sites."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        parts = PurePosixPath(relative).parts
        if is_test_path(relative) or path.name in _NOT_SOURCE_FILES:
            continue
        if set(parts[:-1]) & _NOT_SOURCE_DIRS or any(p.startswith(".") for p in parts):
            continue
        found.append(relative)
    return found


class Candidate(BaseModel):
    """One procedural bug: a whole new text of one source file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, description="Position in the seeded order.")
    path: str = Field(description="The modified file, relative to the project root.")
    entity: str = Field(description="The function or class changed, `name@line`.")
    modifier: str = Field(description="swesmith's modifier name (e.g. func_pm_remove_cond).")
    text: str = Field(description="The file's text with the bug.")
    bug_diff: str = Field(description="Unified diff original -> buggy (for the report only).")

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.path}\0{self.text}".encode()).hexdigest()[:10]


def _swesmith() -> tuple[Any, list[Any]]:
    try:
        from swesmith.bug_gen.adapters.python import get_entities_from_file_py
        from swesmith.bug_gen.procedural.python import MODIFIERS_PYTHON
    except ImportError as exc:
        raise DataError(
            "synth",
            expected="swesmith's procedural modifiers (the forge-data `synth` extra)",
            found=f"{type(exc).__name__}: {exc}",
            fix="pip install 'forge-data[synth]'",
        ) from exc
    return get_entities_from_file_py, MODIFIERS_PYTHON


def modifier_names() -> list[str]:
    return [m.name for m in _swesmith()[1]]


def _apply(original: str, entity: Any, rewrite: str) -> str:
    """The file text with the entity's lines replaced by the indented rewrite."""
    lines = original.splitlines(keepends=True)
    indent = " " * (entity.indent_level * entity.indent_size)
    change = [indent + x if x.strip() else x for x in rewrite.splitlines(keepends=True)]
    if change and not change[-1].endswith("\n"):
        change[-1] += "\n"
    return "".join(lines[: entity.line_start - 1] + change + lines[entity.line_end :])


def candidates(
    root: Path, seed: int, max_pairs: int, counts: dict[str, Counter[str]]
) -> Iterator[Candidate]:
    """Bug candidates in the seeded order; `counts[modifier]` tallies what happened to each
    pair (`candidate`, `no_change`, `syntax_error`, `duplicate`, `modifier_error`)."""
    get_entities, modifiers = _swesmith()
    fresh = [type(m)(likelihood=m.likelihood, seed=seed) for m in modifiers]
    texts: dict[str, str] = {}
    entities: list[Any] = []
    for relative in source_files(root):
        try:
            texts[relative] = (root / relative).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        found: list[Any] = []
        get_entities(found, str(root / relative))
        for entity in found:
            entity.file_path = relative
        entities += found
    pairs = [(e, m) for m in fresh for e in entities if m.can_change(e)]
    random.Random(seed).shuffle(pairs)
    seen: set[str] = set()
    index = 0
    for entity, modifier in pairs[:max_pairs]:
        tally = counts.setdefault(modifier.name, Counter())
        try:
            bug = modifier.modify(entity)
        except Exception:
            tally["modifier_error"] += 1
            continue
        if bug is None:
            tally["no_change"] += 1
            continue
        original = texts[entity.file_path]
        text = _apply(original, entity, bug.rewrite)
        if text == original:
            tally["no_change"] += 1
            continue
        try:
            compile(text, entity.file_path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            tally["syntax_error"] += 1
            continue
        digest = hashlib.sha256(f"{entity.file_path}\0{text}".encode()).hexdigest()
        if digest in seen:
            tally["duplicate"] += 1
            continue
        seen.add(digest)
        tally["candidate"] += 1
        diff = "".join(
            difflib.unified_diff(
                original.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"a/{entity.file_path}",
                f"b/{entity.file_path}",
            )
        )
        yield Candidate(
            index=index,
            path=entity.file_path,
            entity=f"{entity.name}@{entity.line_start}",
            modifier=modifier.name,
            text=text,
            bug_diff=diff,
        )
        index += 1
