"""Shared fixtures of forge-data's tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FORGE_SANDBOX = Path(sys.executable).parent / "forge-sandbox"


@pytest.fixture(scope="module")
def sandbox_isolation() -> None:
    """The local backend needs bwrap + cgroups: skip where they cannot exist, never in CI."""
    doctor = subprocess.run([str(FORGE_SANDBOX), "doctor"], capture_output=True, text=True)
    if doctor.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide sandbox isolation: {doctor.stdout}")
        pytest.skip(f"no sandbox isolation here: {doctor.stdout[-400:]}")
