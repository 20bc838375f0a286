"""Problem statements without a language model: an issue-like text built from the failing
tests alone (their names, the first failures' messages, the test files' own traceback lines),
never from the bug's diff or the source lines it changed. Deterministic.
"""

from __future__ import annotations

from forge_data.synth._report_plugin import ReportedTest

SHOWN_TESTS = 8
SHOWN_FAILURES = 2
MESSAGE_CHARS = 600


def _title(failing: list[ReportedTest]) -> str:
    files = sorted({test.name.split("::", 1)[0] for test in failing})
    where = files[0] if len(files) == 1 else f"{len(files)} test files"
    count = len(failing)
    return f"{count} test{'s' if count != 1 else ''} in {where} fail{'s' if count == 1 else ''}"


def problem_statement(project: str, failing: list[ReportedTest]) -> str:
    """The instruction.md text for a bug whose FAIL_TO_PASS tests are `failing` (sorted)."""
    failing = sorted(failing, key=lambda test: test.name)
    lines = [
        f"# {project}: {_title(failing)}",
        "",
        f"Something in {project} is broken. These tests fail, and passed before:",
        "",
    ]
    lines += [f"- `{test.name}`" for test in failing[:SHOWN_TESTS]]
    if len(failing) > SHOWN_TESTS:
        lines.append(f"- ... and {len(failing) - SHOWN_TESTS} more")
    for test in failing[:SHOWN_FAILURES]:
        message = test.message.strip()[:MESSAGE_CHARS]
        if not message and not test.trace.strip():
            continue
        lines += ["", f"`{test.name}` fails with:", "", "```"]
        if test.trace.strip():
            lines += test.trace.strip().splitlines()
        if message and message.splitlines()[0] not in test.trace:  # pytest's E lines hold it
            lines.append(message)
        lines.append("```")
    lines += [
        "",
        "Find the cause in the project's code and fix it so that these tests pass again, "
        "without breaking the tests that pass now. The tests are correct: do not change them.",
        "The project's environment is `.venv`: run the tests with `.venv/bin/python -m pytest`.",
    ]
    return "\n".join(lines) + "\n"
