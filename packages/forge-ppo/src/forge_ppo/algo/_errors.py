"""The error every PPO input check raises: it names the tensor, what was expected, what was
found (with values) and the fix."""

from __future__ import annotations


class PPOInputError(ValueError):
    """A tensor handed to forge_ppo breaks a contract (shape, mask, finiteness, placement)."""

    def __init__(self, tensor: str, *, expected: str, found: str, fix: str) -> None:
        self.tensor = tensor
        self.expected = expected
        self.found = found
        self.fix = fix
        super().__init__(f"{tensor}: expected {expected}; found {found}; fix: {fix}")
