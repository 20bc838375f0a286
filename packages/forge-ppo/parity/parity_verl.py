"""Parity of forge_ppo against verl 0.9.1, the test oracle for the PPO math.

Runs where `verl==0.9.1` (and torch 2.13) is installed next to forge_ppo (`nox -s parity`):

    python packages/forge-ppo/parity/parity_verl.py [--write-fixture] [--report parity.json]

1. GAE: random batches, ~50% observation tokens, rewards on action tokens only (verl drops a
   reward on an observation token, Forge refuses it), float64 and float32; verl's whitened
   advantages vs Forge's compute_gae + masked_whiten, returns on action tokens.
2. Policy loss (vanilla, clip 0.2, dual clip 3.0) and value loss (clip 0.2) in the three
   aggregation modes, loss and clip fractions.
3. Balancer: verl's rank split (`get_seqlen_balanced_partitions` on workloads, equal size) and
   `rearrange_micro_batches` per rank vs `forge_ppo.plan_micro_batches`, on lognormal workloads.
Exits 1 when a comparison fails. `--write-fixture` writes a few-KB JSON of small inputs and
verl's outputs to `tests/fixtures/verl_0_9_1_parity.json`, which `tests` checks without verl.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tensordict import TensorDict
from verl.trainer.ppo import core_algos
from verl.utils.seqlen_balancing import (
    calculate_workload,
    get_seqlen_balanced_partitions,
    rearrange_micro_batches,
)

from forge_ppo import compute_gae, masked_whiten, plan_micro_batches, policy_loss, value_loss
from forge_ppo.algo._workloads import lognormal_lengths

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixtures" / "verl_0_9_1_parity.json"
MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4}  # float32: verl's own rounding


class _ActorConfig(dict):
    """The attributes verl's vanilla policy loss reads from its ActorConfig."""

    __getattr__ = dict.__getitem__


def _batch(seed: int, batch: int, length: int, dtype: torch.dtype, round_to: int | None = None):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, length, generator=g) < 0.5
    mask[:, 0] = True
    values = torch.randn(batch, length, generator=g, dtype=torch.float64)
    rewards = torch.randn(batch, length, generator=g, dtype=torch.float64) * mask
    if round_to is not None:
        values, rewards = values.round(decimals=round_to), rewards.round(decimals=round_to)
    return rewards.to(dtype), values.to(dtype), mask


def gae_case(seed, batch, length, dtype, gamma=1.0, lam=0.95, round_to=None):
    rewards, values, mask = _batch(seed, batch, length, dtype, round_to)
    verl_adv, verl_ret = core_algos.compute_gae_advantage_return(
        rewards, values, mask.to(dtype), gamma, lam
    )
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    forge_adv = masked_whiten(adv, mask)
    diff = max(
        (forge_adv[mask] - verl_adv[mask]).abs().max().item(),
        (ret[mask] - verl_ret[mask]).abs().max().item(),
    )
    case = {
        "gamma": gamma,
        "lam": lam,
        "token_level_rewards": rewards.tolist(),
        "values": values.tolist(),
        "response_mask": mask.int().tolist(),
        "verl_advantages_whitened": verl_adv.tolist(),
        "verl_returns": verl_ret.tolist(),
    }
    return diff, case


def loss_case(seed, batch, length, mode, round_to=None):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, length, generator=g) < 0.7
    mask[:, 0] = True
    draw = lambda scale: torch.randn(batch, length, generator=g, dtype=torch.float64) * scale  # noqa: E731
    old, advantages, values, returns = draw(1.0) - 2, draw(1.0), draw(1.0), draw(1.0)
    log_probs, vpreds = old + draw(0.3), values + draw(0.3)
    if round_to is not None:
        rounded = [
            t.round(decimals=round_to)
            for t in (old, advantages, values, returns, log_probs, vpreds)
        ]
        old, advantages, values, returns, log_probs, vpreds = rounded
    config = _ActorConfig(
        clip_ratio=0.2,
        clip_ratio_low=None,
        clip_ratio_high=None,
        clip_ratio_c=3.0,
        global_batch_info={},
    )
    v_pg, v_metrics = core_algos.compute_policy_loss_vanilla(
        old, log_probs, advantages, mask.double(), loss_agg_mode=mode, config=config
    )
    v_vf, v_vf_clip = core_algos.compute_value_loss(
        vpreds, returns, values, mask.double(), cliprange_value=0.2, loss_agg_mode=mode
    )
    f_pg = policy_loss(
        log_probs, old, advantages, mask, clip_ratio=0.2, dual_clip=3.0, loss_agg_mode=mode
    )
    f_vf = value_loss(vpreds, values, returns, mask, value_clip=0.2, loss_agg_mode=mode)
    pairs = [
        (f_pg.loss.item(), v_pg.item()),
        (f_pg.clip_fraction.item(), v_metrics["actor/pg_clipfrac"]),
        (f_pg.clip_fraction_lower.item(), v_metrics["actor/pg_clipfrac_lower"]),
        (f_pg.approx_kl.item(), v_metrics["actor/ppo_kl"]),
        (f_vf.loss.item(), v_vf.item()),
        (f_vf.clip_fraction.item(), float(v_vf_clip)),
    ]
    rel = max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs)
    case = {
        "loss_agg_mode": mode,
        "clip_ratio": 0.2,
        "dual_clip": 3.0,
        "value_clip": 0.2,
        "response_mask": mask.int().tolist(),
        "old_log_probs": old.tolist(),
        "log_probs": log_probs.tolist(),
        "advantages": advantages.tolist(),
        "values": values.tolist(),
        "returns": returns.tolist(),
        "vpreds": vpreds.tolist(),
        "verl": {
            "pg_loss": v_pg.item(),
            "pg_clipfrac": v_metrics["actor/pg_clipfrac"],
            "pg_clipfrac_lower": v_metrics["actor/pg_clipfrac_lower"],
            "ppo_kl": v_metrics["actor/ppo_kl"],
            "vf_loss": v_vf.item(),
            "vf_clipfrac": float(v_vf_clip),
        },
    }
    return rel, case


def verl_plan(lengths: list[int], budget: int, world_size: int) -> dict:
    """verl 0.9.1: workload-balanced equal-size rank split, then rearrange_micro_batches per
    rank; ranks run the same (max) number of micro-batches (same_micro_num_in_dp)."""
    workloads = calculate_workload(torch.tensor(lengths)).tolist()
    if world_size > 1:
        ranks = get_seqlen_balanced_partitions(workloads, world_size, equal_size=True)
    else:
        ranks = [list(range(len(lengths)))]
    counts, loads, over = [], [], 0
    for rank in ranks:
        sub = [lengths[i] for i in rank]
        mask = torch.arange(max(sub))[None, :] < torch.tensor(sub)[:, None]
        batch = TensorDict(
            {"attention_mask": mask, "input_ids": mask.long()}, batch_size=[len(sub)]
        )
        _, index = rearrange_micro_batches(batch, max_token_len=budget)
        over += sum(sum(sub[i] for i in mb) > budget for mb in index)
        counts.append(len(index))
        loads.append(sum(sub))
    total = world_size * max(counts)
    return {
        "micro_batches": total,
        "max_rank_tokens": max(loads),
        "over_budget": over,
        "fill": sum(lengths) / (total * budget),
    }


def balancer_case(seed: int, world_size: int, budget: int = 65_536):
    lengths = lognormal_lengths(seed=seed, budget=budget)
    verl = verl_plan(lengths, budget, world_size)
    plan = plan_micro_batches(lengths, budget, world_size, equal_counts=world_size > 1)
    forge = {
        "micro_batches": plan.micro_batches,
        "max_rank_tokens": max(plan.rank_loads),
        "fill": plan.fill,
        "lower_bound": plan.lower_bound,
    }
    ok = forge["micro_batches"] <= verl["micro_batches"] and verl["over_budget"] == 0
    case = {
        "seed": seed,
        "world_size": world_size,
        "token_budget": budget,
        "lengths": lengths,
        "verl": verl,
    }
    return ok, forge, case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-fixture", action="store_true", help=f"write {FIXTURE.name}")
    parser.add_argument("--report", help="write the comparison report (JSON) here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    import verl

    report: dict = {
        "verl": verl.__version__,
        "torch": torch.__version__,
        "gae": [],
        "losses": [],
        "balancer": [],
    }
    failed = []
    # 1. GAE, random inputs, both dtypes
    for seed, (b, t) in enumerate([(4, 512), (8, 2048), (2, 8192)]):
        for dtype in (torch.float64, torch.float32):
            diff, _ = gae_case(seed, b, t, dtype)
            report["gae"].append({"shape": [b, t], "dtype": str(dtype), "max_abs_diff": diff})
            if not diff <= TOLERANCE[dtype]:
                failed.append(f"gae {b}x{t} {dtype}: {diff}")
    # 2. losses, every aggregation mode
    for seed in range(3):
        for mode in MODES:
            rel, _ = loss_case(100 + seed, 6, 64, mode)
            report["losses"].append({"mode": mode, "seed": seed, "max_rel_diff": rel})
            if not rel <= 1e-7:
                failed.append(f"losses {mode} seed {seed}: {rel}")
    # 3. balancer
    for seed in range(4):
        for world in (1, 4):
            ok, forge, case = balancer_case(seed, world)
            report["balancer"].append(
                {"seed": seed, "world_size": world, "verl": case["verl"], "forge": forge}
            )
            if not ok:
                failed.append(f"balancer seed {seed} world {world}: {forge} vs {case['verl']}")
    report["failed"] = failed
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        Path(args.report).write_text(text + "\n")
    if args.write_fixture:
        write_fixture(verl.__version__)
    return 1 if failed else 0


def write_fixture(verl_version: str) -> None:
    """Small cases (inputs rounded to 4 decimals to keep the file to a few KB)."""
    _, gae = gae_case(7, 2, 16, torch.float64, gamma=0.99, lam=0.95, round_to=4)
    losses = [loss_case(11 + i, 2, 8, mode, round_to=4)[1] for i, mode in enumerate(MODES)]
    balancer = [balancer_case(3, 1)[2], balancer_case(3, 4)[2]]
    fixture = {
        "schema_version": "forge-ppo/parity-fixture@1",
        "source": f"verl=={verl_version} outputs, produced by parity/parity_verl.py (real verl)",
        "torch": torch.__version__,
        "gae": gae,
        "losses": losses,
        "balancer": balancer,
    }
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    tmp = FIXTURE.with_suffix(".tmp")
    tmp.write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    tmp.replace(FIXTURE)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
