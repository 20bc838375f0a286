"""Micro-batches under a per-device token budget, balanced across data-parallel ranks.

1. Rank split: longest-first onto the least-loaded rank (equal sequence counts per rank when
   required), then pairwise swaps / moves that lower the most-loaded rank.
2. Per rank, the fewest micro-batches: for k = lower bound, lower bound + 1, ...: first-fit
   decreasing, best-fit decreasing, then balanced (longest-first into k) with a move/swap
   repair; the first packing within the budget wins.
3. Ranks get the same micro-batch count (collectives run once per micro-batch) unless told not
   to; a rank with fewer sequences than that count gets empty micro-batches, reported as such.
Lower bound per rank: max(ceil(tokens / budget), #sequences longer than budget / 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_ppo.algo._errors import PPOInputError

Bins = list[list[int]]


def lower_bound(lengths: Sequence[int], token_budget: int, world_size: int = 1) -> int:
    """Fewest micro-batches any packing of `lengths` can use; with `world_size` > 1 ranks that
    run the same count each: world_size x the per-rank bound of the best possible split."""
    if not lengths:
        return 0
    big = sum(1 for n in lengths if 2 * n > token_budget)
    per_rank = max(
        math.ceil(sum(lengths) / (world_size * token_budget)), math.ceil(big / world_size)
    )
    return max(math.ceil(sum(lengths) / token_budget), big, world_size * per_rank)


def _first_fit(lengths: dict[int, int], budget: int, k: int, best: bool) -> Bins | None:
    bins: Bins = []
    loads: list[int] = []
    for i in sorted(lengths, key=lambda i: (-lengths[i], i)):
        fits = [j for j in range(len(bins)) if loads[j] + lengths[i] <= budget]
        if not fits:
            if len(bins) == k:
                return None
            bins.append([])
            loads.append(0)
            fits = [len(bins) - 1]
        j = max(fits, key=lambda j: (loads[j], -j)) if best else fits[0]
        bins[j].append(i)
        loads[j] += lengths[i]
    return bins


def _balanced(lengths: dict[int, int], k: int) -> Bins:
    """Longest first onto the least-loaded of k bins (LPT)."""
    bins: Bins = [[] for _ in range(k)]
    loads = [0] * k
    for i in sorted(lengths, key=lambda i: (-lengths[i], i)):
        j = min(range(k), key=lambda j: (loads[j], j))
        bins[j].append(i)
        loads[j] += lengths[i]
    return bins


def _improve(bins: Bins, lengths: dict[int, int], *, allow_moves: bool, rounds: int = 2000) -> Bins:
    """Lower the maximum bin load by single moves / pairwise swaps out of the fullest bin."""
    loads = [sum(lengths[i] for i in b) for b in bins]
    for _ in range(rounds):
        top = max(range(len(bins)), key=lambda j: (loads[j], -j))
        best: tuple[int, int, int, int | None] | None = None  # (new peak, other, a, b)
        for other in range(len(bins)):
            if other == top:
                continue
            for a in bins[top]:
                candidates: list[int | None] = [None] if allow_moves else []
                candidates += bins[other]
                for b in candidates:
                    delta = lengths[a] - (0 if b is None else lengths[b])
                    if delta <= 0:
                        continue
                    peak = max(loads[top] - delta, loads[other] + delta)
                    if peak < loads[top] and (best is None or peak < best[0]):
                        best = (peak, other, a, b)
        if best is None:
            break
        _, other, a, b = best
        bins[top].remove(a)
        bins[other].append(a)
        delta = lengths[a]
        if b is not None:
            bins[other].remove(b)
            bins[top].append(b)
            delta -= lengths[b]
        loads[top] -= delta
        loads[other] += delta
    return bins


def _candidates(lengths: dict[int, int], budget: int, k: int):
    yield _first_fit(lengths, budget, k, best=False)
    yield _first_fit(lengths, budget, k, best=True)
    yield _improve(_balanced(lengths, k), lengths, allow_moves=True)


def pack_rank(lengths: dict[int, int], token_budget: int, *, at_least: int = 0) -> Bins:
    """Pack sequences {index: tokens} into the fewest non-empty bins (at least
    min(`at_least`, #sequences)) whose token sums stay within the budget."""
    n = len(lengths)
    if not n:
        return []
    want = min(at_least, n)
    k = max(lower_bound(list(lengths.values()), token_budget), want)
    while True:
        for bins in _candidates(lengths, token_budget, k):
            if bins is None:
                continue
            full = [sorted(b) for b in bins if b]
            fits = all(sum(lengths[i] for i in b) <= token_budget for b in full)
            if fits and len(full) >= want:
                return full
        k += 1


class MicroBatchPlan(BaseModel):
    """Which sequences each data-parallel rank processes in which micro-batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal["forge-ppo/micro-batch-plan@1"] = Field(
        default="forge-ppo/micro-batch-plan@1", description="Schema of this plan."
    )
    token_budget: int = Field(gt=0, description="Max tokens per micro-batch (per device).")
    world_size: int = Field(gt=0, description="Data-parallel ranks.")
    lengths: tuple[int, ...] = Field(description="Tokens per sequence, by sequence index.")
    ranks: tuple[tuple[tuple[int, ...], ...], ...] = Field(
        description="rank -> micro-batch -> sequence indices (an empty micro-batch is padding)."
    )
    lower_bound: int = Field(ge=0, description="Lower bound on micro-batches over all ranks.")

    def load(self, micro_batch: Sequence[int]) -> int:
        return sum(self.lengths[i] for i in micro_batch)

    @property
    def micro_batches(self) -> int:
        """Micro-batches executed over all ranks (padding micro-batches included)."""
        return sum(len(r) for r in self.ranks)

    @property
    def empty_micro_batches(self) -> int:
        return sum(1 for r in self.ranks for mb in r if not mb)

    @property
    def fill(self) -> float:
        """Tokens / (micro-batches executed x budget)."""
        slots = self.micro_batches * self.token_budget
        return sum(self.lengths) / slots if slots else 0.0

    @property
    def rank_loads(self) -> tuple[int, ...]:
        return tuple(sum(self.load(mb) for mb in r) for r in self.ranks)

    def summary(self) -> dict[str, float | int]:
        loads = self.rank_loads
        mb_loads = [self.load(mb) for r in self.ranks for mb in r]
        mean = sum(loads) / len(loads)
        return {
            "sequences": len(self.lengths),
            "tokens": sum(self.lengths),
            "token_budget": self.token_budget,
            "world_size": self.world_size,
            "micro_batches": self.micro_batches,
            "micro_batches_per_rank": max(len(r) for r in self.ranks),
            "empty_micro_batches": self.empty_micro_batches,
            "lower_bound": self.lower_bound,
            "fill": round(self.fill, 6),
            "max_micro_batch_tokens": max(mb_loads) if mb_loads else 0,
            "max_rank_load": max(loads),
            "mean_rank_load": mean,
            "max_over_mean_load": round(max(loads) / mean, 6) if mean else 0.0,
        }


def split_ranks(lengths: Sequence[int], world_size: int, *, equal_counts: bool) -> Bins:
    """Balance sequence indices over ranks by tokens (equal counts per rank if asked)."""
    cap = len(lengths) // world_size if equal_counts else len(lengths)
    bins: Bins = [[] for _ in range(world_size)]
    loads = [0] * world_size
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        j = min((j for j in range(world_size) if len(bins[j]) < cap), key=lambda j: (loads[j], j))
        bins[j].append(i)
        loads[j] += lengths[i]
    table = dict(enumerate(lengths))
    return _improve(bins, table, allow_moves=not equal_counts)


def plan_micro_batches(
    lengths: Sequence[int],
    token_budget: int,
    world_size: int = 1,
    *,
    equal_counts: bool = False,
    same_count_across_ranks: bool = True,
    names: Sequence[str] | None = None,
) -> MicroBatchPlan:
    """Balance `lengths` over `world_size` ranks and pack each rank under `token_budget`.

    Raises PPOInputError naming the sequence when one is longer than the budget, and for
    counts that cannot be split (fewer sequences than ranks; equal counts not divisible).
    """
    # 1. contracts
    if token_budget <= 0 or world_size <= 0:
        raise PPOInputError(
            "token_budget" if token_budget <= 0 else "world_size",
            expected="> 0",
            found=f"token_budget={token_budget}, world_size={world_size}",
            fix="pass positive numbers",
        )
    lengths = [int(n) for n in lengths]
    label = (lambda i: f"sequence {i} ({names[i]!r})") if names else (lambda i: f"sequence {i}")
    for i, n in enumerate(lengths):
        if n <= 0 or n > token_budget:
            raise PPOInputError(
                label(i),
                expected=f"1..{token_budget} tokens (the micro-batch token budget)",
                found=f"{n} tokens",
                fix="raise the token budget to >= the max model length, or drop the sequence",
            )
    if len(lengths) < world_size or (equal_counts and len(lengths) % world_size):
        raise PPOInputError(
            "lengths",
            expected=f"at least {world_size} sequences"
            + (f", a multiple of {world_size} (equal counts per rank)" if equal_counts else ""),
            found=f"{len(lengths)} sequences",
            fix="make the batch size divisible by the trainer world size",
        )
    # 2. ranks, 3. micro-batches per rank, 4. the same count on every rank
    shares = split_ranks(lengths, world_size, equal_counts=equal_counts)
    packed = [pack_rank({i: lengths[i] for i in share}, token_budget) for share in shares]
    if same_count_across_ranks and world_size > 1:
        target = max(len(p) for p in packed)
        while any(len(p) < min(target, len(s)) for p, s in zip(packed, shares, strict=True)):
            packed = [
                pack_rank({i: lengths[i] for i in s}, token_budget, at_least=target) for s in shares
            ]
            target = max(len(p) for p in packed)
        packed = [p + [[]] * (target - len(p)) for p in packed]
    return MicroBatchPlan(
        token_budget=token_budget,
        world_size=world_size,
        lengths=tuple(lengths),
        ranks=tuple(tuple(tuple(mb) for mb in p) for p in packed),
        lower_bound=lower_bound(
            lengths, token_budget, world_size if same_count_across_ranks else 1
        ),
    )
