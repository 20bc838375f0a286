"""Reading JSON with precise errors (canonical JSON and atomic writes live in forge-gates)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forge_eval._errors import ForgeEvalError


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
