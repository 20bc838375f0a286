"""Errors that say what was expected, what was found, and how to fix it; and reading JSON files
with such errors (canonical JSON and atomic writes live in forge-gates)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

M = TypeVar("M", bound=BaseModel)


class ForgeEvalError(Exception):
    """Bad input: a missing or malformed file, a wrong type, an empty job.

    The message always names where (file and field), what was expected, what was found
    and the fix, so a researcher can act on it without reading the source.
    """

    def __init__(self, where: str, *, expected: str, found: str, fix: str) -> None:
        self.where = where
        self.expected = expected
        self.found = found
        self.fix = fix
        super().__init__(self._message())

    def _message(self) -> str:
        return f"{self.where}: expected {self.expected}; found {self.found}. Fix: {self.fix}"


class NotComparableError(ForgeEvalError):
    """Two runs that are not like for like (protocols, panels or task sets differ).

    `differences` lists one human-readable line per difference (`field: A=... B=...`).
    """

    def __init__(self, where: str, differences: list[str], *, fix: str) -> None:
        self.differences = list(differences)
        super().__init__(
            where,
            expected="runs with the same protocol, panels and task sets",
            found=f"{len(differences)} difference(s)",
            fix=fix,
        )

    def _message(self) -> str:
        shown = "".join(f"\n  {line}" for line in self.differences)
        return (
            f"{self.where}: expected {self.expected}; found {self.found}:{shown}\nFix: {self.fix}"
        )


def read_json(path: Path) -> Any:
    """Parse a JSON file; a missing, unreadable or malformed file raises `ForgeEvalError`."""
    if not path.is_file():
        raise ForgeEvalError(
            str(path),
            expected="a JSON file",
            found="no such file",
            fix="check the path; a Harbor job directory holds config.json and one "
            "directory per trial with result.json",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ForgeEvalError(
            str(path), expected="a readable UTF-8 file", found=repr(exc), fix="re-export it"
        ) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ForgeEvalError(
            f"{path} (line {exc.lineno}, column {exc.colno})",
            expected="valid JSON",
            found=exc.msg,
            fix="the file is truncated or hand-edited; re-run the trial or restore it",
        ) from exc


_UNION_TAG = re.compile(r"^(int|float|str|bool|none|[a-z-]+\[.*\])$")
"""Location parts pydantic adds for union members (`float`, `int`, `dict[str,...]`)."""


def validate_file(model: type[M], data: Any, path: Path, *, fix: str | None = None) -> M:
    """Validate parsed JSON against a model; the error names the file and the field.

    fix: the fix to print (default: correct or regenerate the file, a Harbor model's)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems: dict[str, ErrorDetails] = {}
        for error in exc.errors():
            parts = [str(p) for p in error["loc"] if not _UNION_TAG.match(str(p))]
            problems.setdefault(".".join(parts) or "(top level)", error)
        field, first = next(iter(problems.items()))
        given = first.get("input")
        found = f"{given!r}"[:80] + f" ({type(given).__name__})"
        expected = first["msg"].removeprefix("Input should be ")
        if first["type"] == "missing":
            expected, found = "this required field", "no such field"
        more = f" (and {len(problems) - 1} more field(s))" if len(problems) > 1 else ""
        raise ForgeEvalError(
            f"{path}: field {field}{more}",
            expected=expected,
            found=found,
            fix=fix
            or f"correct or regenerate {path.name}; field names follow Harbor's "
            f"{model.__name__} model",
        ) from exc
