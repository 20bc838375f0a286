"""`gather_full`: the workers' one-collective gather of FSDP2 shards, against torch's own
tensor-by-tensor `get_model_state_dict`, on 2 gloo CPU ranks (no Ray: two plain processes
running `_gather_rank.py`).

Shapes include dim-0 sizes that do not divide by the ranks (5 rows: 3 + 2) and one smaller than
the ranks (1 row: rank 1 holds none), as FSDP2 shards them in `torch.chunk` order.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _gather_rank import WORLD, Net

SCRIPT = Path(__file__).with_name("_gather_rank.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gathered(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("gather")
    port = str(_free_port())
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ranks = [
        subprocess.Popen([sys.executable, str(SCRIPT), str(r), port, str(out)], env=env)
        for r in range(WORLD)
    ]
    try:
        codes = [p.wait(timeout=120) for p in ranks]
    finally:
        for p in ranks:
            p.kill()
    assert codes == [0] * WORLD, f"expected both ranks to exit 0; found {codes}"
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


def test_every_rank_gets_the_full_tensors_torch_gathers(gathered):
    for rank, both in enumerate(gathered):
        ours, theirs = both["ours"], both["theirs"]
        assert list(ours) == list(theirs), f"rank {rank}: the same keys in the same order"
        for name, tensor in theirs.items():
            got = ours[name]
            assert not hasattr(got, "placements"), f"{name}: a plain tensor, not a DTensor"
            assert got.shape == tensor.shape, f"rank {rank} {name}"
            assert got.dtype == tensor.dtype, f"rank {rank} {name}"
            assert torch.equal(got, tensor), f"rank {rank} {name}: values differ"


def test_the_uneven_and_empty_shards_are_reassembled_in_order(gathered):
    torch.manual_seed(0)
    reference = Net().state_dict()
    for both in gathered:
        for name in ("uneven.weight", "uneven.bias", "single", "even.weight", "steps"):
            assert torch.equal(both["ours"][name], reference[name]), name
