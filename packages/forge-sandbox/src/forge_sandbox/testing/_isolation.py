"""The test suites' `isolation` fixture: real local sandboxes, or the reason there are none."""

from __future__ import annotations

from forge_sandbox.local._bwrap import host_problems


def local_sandbox_problem() -> str | None:
    """None when this host can run local sandboxes (bwrap and its helpers; as root, writable
    cgroups); else each missing piece and its fix, for the fixture to skip with (or to fail
    with under CI=true: CI provides them all, so a skip there would hide a broken machine)."""
    problems = host_problems()
    if not problems:
        return None
    return "no local sandboxes here: " + "; ".join(
        f"[{v.rule}] {v.found} (fix: {v.fix})" for v in problems
    )
