"""SampleRows -> padded tensors for the actor and the critic (right padding).

For B rows, row b with P_b prompt and R_b response tokens, L = max_b (P_b + R_b), R = max_b R_b:

    input_ids[b]             prompt_b + response_b, then pad                      (B, L) int64
    attention_mask[b]        1 on the P_b + R_b real tokens, 0 on padding         (B, L) int64
    response_positions[b, j] P_b + j - 1 for j < R_b, 0 on padding                (B, R) int64
    response_ids, response_mask (bool), rollout_log_probs, token_level_rewards     (B, R)

`response_positions` maps response token j to the position whose output belongs to it: the
logits at position t predict token t + 1, and the critic's value for action j is the value of
the state before it (verl's `values[:, -R - 1:-1]`). Everything response-aligned is right-padded
with 0 / False.

Why right padding: every real token keeps the position id it has alone (0..P+R-1, no shift), and
under causal attention a real token never attends to a later pad token, so a row's log-probs and
values do not depend on the rows it is batched with (tested as a property).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from forge_ppo.algo._errors import PPOInputError
from forge_rollout.rows import SampleRow

DROP_REASONS = ("empty_prompt", "no_action_tokens")


def _row_name(row: SampleRow) -> str:
    h = row.header
    return f"row {h.task_id!r}/{h.episode_id}#{h.row_index}"


def check_row(row: SampleRow) -> str | None:
    """Why `row` carries no training signal ("empty_prompt" / "no_action_tokens") or None.

    Raises PPOInputError for a corrupt row (tensors of different lengths, a mask that is not
    0/1, non-finite rewards or rollout log-probs on action tokens): that is a conversion bug,
    never something to drop silently.
    """
    name = _row_name(row)
    width = row.response_ids.numel()
    for field in ("response_mask", "rollout_log_probs", "token_level_rewards"):
        tensor = getattr(row, field)
        if tensor.dim() != 1 or tensor.numel() != width:
            raise PPOInputError(
                f"{name}.{field}",
                expected=f"a 1-D tensor of {width} entries (one per response token)",
                found=f"shape {tuple(tensor.shape)}",
                fix="rebuild the row with forge_rollout episode_to_rows",
            )
    mask = row.response_mask
    if bool(((mask != 0) & (mask != 1)).any()):
        raise PPOInputError(
            f"{name}.response_mask",
            expected="only 0 (observation) and 1 (action) entries",
            found=f"values {sorted(set(mask.tolist()))}",
            fix="build the mask from token roles",
        )
    action = mask == 1
    checks = (
        ("rollout_log_probs", action & ~torch.isfinite(row.rollout_log_probs)),
        ("token_level_rewards", ~torch.isfinite(row.token_level_rewards)),
    )
    for field, bad in checks:
        if bool(bad.any()):
            raise PPOInputError(
                f"{name}.{field}",
                expected="finite values",
                found=f"{int(bad.sum())} non-finite value(s) at {bad.nonzero().flatten()[:5]}",
                fix="find where the trace or the reward became NaN/inf",
            )
    if row.prompt_ids.numel() == 0:
        return "empty_prompt"
    if not bool(action.any()):
        return "no_action_tokens"
    return None


def split_rows(rows: Sequence[SampleRow]) -> tuple[list[SampleRow], dict[str, int]]:
    """(rows with >= 1 action token and a prompt, count of dropped rows per reason)."""
    kept: list[SampleRow] = []
    dropped: Counter[str] = Counter({reason: 0 for reason in DROP_REASONS})
    for row in rows:
        reason = check_row(row)
        if reason is None:
            kept.append(row)
        else:
            dropped[reason] += 1
    return kept, dict(dropped)


def row_length(row: SampleRow) -> int:
    """Tokens the row occupies in `input_ids` (prompt + response)."""
    return row.prompt_ids.numel() + row.response_ids.numel()


@dataclass(frozen=True)
class Batch:
    """Right-padded tensors for B rows (see the module docstring for the layout)."""

    input_ids: torch.Tensor  # (B, L) int64
    attention_mask: torch.Tensor  # (B, L) int64
    response_positions: torch.Tensor  # (B, R) int64
    response_ids: torch.Tensor  # (B, R) int64
    response_mask: torch.Tensor  # (B, R) bool
    rollout_log_probs: torch.Tensor  # (B, R) float32
    token_level_rewards: torch.Tensor  # (B, R) float32
    task_ids: tuple[str, ...]  # (B,)

    @property
    def response_width(self) -> int:
        return self.response_ids.shape[1]

    @property
    def tokens(self) -> int:
        """Real (unpadded) tokens."""
        return int(self.attention_mask.sum())

    def to(self, device: torch.device | str) -> Batch:
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return Batch(**moved, task_ids=self.task_ids)


def collate(rows: Sequence[SampleRow], *, pad_token_id: int = 0) -> Batch:
    """Right-pad `rows` into a Batch. Rows must be valid (`check_row` returns None)."""
    if not rows:
        raise PPOInputError("rows", expected="at least one row", found="0", fix="pass rows")
    n = len(rows)
    width = max(r.response_ids.numel() for r in rows)
    length = max(row_length(r) for r in rows)
    input_ids = torch.full((n, length), pad_token_id, dtype=torch.int64)
    attention_mask = torch.zeros((n, length), dtype=torch.int64)
    positions = torch.zeros((n, width), dtype=torch.int64)
    response_ids = torch.zeros((n, width), dtype=torch.int64)
    response_mask = torch.zeros((n, width), dtype=torch.bool)
    rollout_log_probs = torch.zeros((n, width), dtype=torch.float32)
    rewards = torch.zeros((n, width), dtype=torch.float32)
    for b, row in enumerate(rows):
        p, r = row.prompt_ids.numel(), row.response_ids.numel()
        input_ids[b, :p] = row.prompt_ids
        input_ids[b, p : p + r] = row.response_ids
        attention_mask[b, : p + r] = 1
        positions[b, :r] = torch.arange(p - 1, p + r - 1)
        response_ids[b, :r] = row.response_ids
        response_mask[b, :r] = row.response_mask == 1
        rollout_log_probs[b, :r] = row.rollout_log_probs.float() * (row.response_mask == 1)
        rewards[b, :r] = row.token_level_rewards.float()
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_positions=positions,
        response_ids=response_ids,
        response_mask=response_mask,
        rollout_log_probs=rollout_log_probs,
        token_level_rewards=rewards,
        task_ids=tuple(r.header.task_id for r in rows),
    )


def gather_response(outputs: torch.Tensor, response_positions: torch.Tensor) -> torch.Tensor:
    """Per-position outputs -> response-aligned: out[b, j] = outputs[b, response_positions[b, j]].

    outputs: (B, L) or (B, L, H); response_positions: (B, R) -> (B, R) or (B, R, H).
    """
    index = response_positions
    if outputs.dim() == 3:
        index = index.unsqueeze(-1).expand(-1, -1, outputs.shape[-1])
    return outputs.gather(1, index)


def take(x: torch.Tensor, index: Sequence[int], width: int) -> torch.Tensor:
    """Rows `index` of a whole-batch response-aligned tensor, cut to `width` columns.

    x: (N, R) -> (len(index), width); valid because every row is right-padded.
    """
    return x[torch.as_tensor(list(index), dtype=torch.long, device=x.device), :width]


def padded_tokens(lengths: Sequence[int]) -> int:
    """Tokens a right-padded batch of these lengths occupies (rows x longest)."""
    return len(lengths) * max(lengths) if lengths else 0


def assert_finite_metrics(metrics: dict[str, float]) -> None:
    """Every metric is a finite float, or PPOInputError naming the bad ones."""
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad:
        raise PPOInputError(
            "metrics",
            expected="finite values for every metric",
            found=f"{len(bad)} non-finite: {dict(sorted(bad.items())[:8])}",
            fix="inspect the batch and lower the learning rates; the update is not accepted",
        )
