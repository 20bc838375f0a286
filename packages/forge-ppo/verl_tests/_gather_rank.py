"""One rank of `test_gather.py` (run as a script: `python _gather_rank.py RANK PORT OUT`)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

from forge_ppo.verl._workers import gather_full

WORLD = 2


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.uneven = torch.nn.Linear(4, 5)  # weight (5, 4), bias (5,)
        self.single = torch.nn.Parameter(torch.randn(1, 3))  # rank 1 holds no row
        self.even = torch.nn.Linear(6, 8, bias=False)
        self.register_buffer("steps", torch.arange(3))  # a buffer stays a plain tensor


def main(rank: int, port: int, out: Path) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        torch.manual_seed(0)
        net = Net()
        fully_shard(net)
        ours = gather_full(net.state_dict())
        options = StateDictOptions(full_state_dict=True, cpu_offload=False)
        theirs = get_model_state_dict(net, options=options)
        torch.save({"ours": ours, "theirs": dict(theirs)}, out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
