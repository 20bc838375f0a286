"""Violations, the one error every gate raises, and the collector that builds it.

A check never stops at the first problem: it collects every violated rule, each with what was
expected, what was found and how to fix it, and fails once, listing them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Violation(BaseModel):
    """One broken rule: what the rule is, what it expected, what it found, and the fix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str = Field(description="Short stable name of the rule, e.g. 'soak.updates'.")
    expected: str = Field(description="What the rule requires, with the numbers.")
    found: str = Field(description="What was actually there, with the numbers.")
    fix: str = Field(description="What to change so the rule holds.")

    def __str__(self) -> str:
        return f"[{self.rule}] expected {self.expected}; found {self.found}; fix: {self.fix}"


class GateError(RuntimeError):
    """A gate failed: carries every violation; the message lists them all. `printed` is True
    when `forge_gates.gate` already wrote that message to stderr (a CLI must not repeat it)."""

    def __init__(self, gate: str, violations: Iterable[Violation]) -> None:
        self.gate = gate
        self.violations: tuple[Violation, ...] = tuple(violations)
        self.printed = False
        lines = [f"{gate}: {len(self.violations)} rule(s) violated"]
        lines += [f"  - {v}" for v in self.violations]
        super().__init__("\n".join(lines))


class Check:
    """Collects violations for one gate.

    >>> check = Check("PPO_SMOKE_TOKEN_BUDGET_GATE")
    >>> check.require(4 % 2 == 0, rule="batch.divisible", expected="4 % 2 == 0",
    ...               found="4 % 2 = 0", fix="change batch_size")
    >>> check.ok
    True
    """

    def __init__(self, gate: str) -> None:
        self.gate = gate
        self.violations: list[Violation] = []

    def require(self, condition: bool, *, rule: str, expected: Any, found: Any, fix: str) -> None:
        """Record a violation unless `condition` holds."""
        if not condition:
            self.add(Violation(rule=rule, expected=str(expected), found=str(found), fix=fix))

    def add(self, violation: Violation) -> None:
        self.violations.append(violation)

    def extend(self, violations: Iterable[Violation]) -> None:
        self.violations.extend(violations)

    @property
    def ok(self) -> bool:
        return not self.violations

    def raise_if_failed(self) -> None:
        """Raise one GateError listing every collected violation (no-op when there are none)."""
        if self.violations:
            raise GateError(self.gate, self.violations)
