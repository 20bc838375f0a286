"""`gather_full`: the workers' one-collective gather of FSDP2 shards, against torch's own
tensor-by-tensor `get_model_state_dict`, on 2 gloo CPU ranks (no Ray: plain processes).

Shapes include dim-0 sizes that do not divide by the ranks (5 rows: 3 + 2) and one smaller than
the ranks (1 row: rank 1 holds none), as FSDP2 shards them in `torch.chunk` order.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.uneven = torch.nn.Linear(4, 5)  # weight (5, 4), bias (5,)
        self.single = torch.nn.Parameter(torch.randn(1, 3))  # rank 1 holds no row
        self.even = torch.nn.Linear(6, 8, bias=False)
        self.register_buffer("steps", torch.arange(3))  # a buffer stays a plain tensor


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, out: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    from forge_ppo.verl._workers import gather_full

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        torch.manual_seed(0)
        net = _Net()
        fully_shard(net)
        ours = gather_full(net.state_dict())
        options = StateDictOptions(full_state_dict=True, cpu_offload=False)
        theirs = get_model_state_dict(net, options=options)
        torch.save({"ours": ours, "theirs": dict(theirs)}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def gathered(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("gather")
    mp.start_processes(_rank, args=(_free_port(), str(out)), nprocs=WORLD, start_method="spawn")
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
    reference = _Net().state_dict()
    for both in gathered:
        for name in ("uneven.weight", "uneven.bias", "single", "even.weight", "steps"):
            assert torch.equal(both["ours"][name], reference[name]), name
