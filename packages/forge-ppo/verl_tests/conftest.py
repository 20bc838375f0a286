"""Tests of the verl backend (`nox -s verl`): verl 0.9.1's real FSDP2 workers on 2 CPU ranks.

Not collected by `nox -s tests` (verl and Ray are not installed there). Workers take about a
minute to start on 2 cores, so one trainer per module is shared by its tests where they only
read it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("VERL_PLATFORM", "cpu")  # before anything imports verl
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the local trainer's test helpers (rows) and this folder's own modules (spec_for)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The default tiny model folder (built offline, deterministic)."""
    from forge_rollout import make_tiny_model

    out = tmp_path_factory.mktemp("model") / "tiny"
    return make_tiny_model(out)
