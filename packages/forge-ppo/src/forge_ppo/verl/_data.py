"""Forge's rows -> the padded tensors of a verl `DataProto` batch (pure torch, no verl import).

verl's layout (`ray_trainer.py`, `workers/utils/padding.py`): prompts LEFT-padded to P,
responses RIGHT-padded to R, `input_ids = [prompts | responses]` (B, P + R), `attention_mask`
1 on real tokens, `position_ids = cumsum(attention_mask) - 1` (0 on padding), and per response
token (B, R): `response_mask` (1 on action tokens the policy sampled, 0 on observation tokens
and padding), `rollout_log_probs`, `token_level_rewards` (the episode reward on the last action
token). `uid` names the task of each row (verl groups by it).

    tensors, uids = rows_to_tensors(rows, pad_token_id=0)
    batch = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})

Rows are padded to a multiple of the world size with rows whose masks are all 0 (`pad_rows`):
verl splits a batch evenly over its ranks, and a zero-mask row adds no token to any loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from forge_rollout.rows import SampleRow


def rows_to_tensors(
    rows: Sequence[SampleRow], *, pad_token_id: int = 0, pad_to: int = 1
) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """(tensors, uids) for `rows`, plus zero-mask padding rows up to a multiple of `pad_to`.

    tensors: prompts (B, P), responses (B, R), input_ids / attention_mask / position_ids
    (B, P + R) int64, response_mask (B, R) int64, rollout_log_probs and token_level_rewards
    (B, R) float32, `forge_real_row` (B,) bool (False on padding rows)."""
    if not rows:
        raise ValueError("rows: expected at least one row; found none; fix: pass rows")
    real = len(rows)
    total = -(-real // pad_to) * pad_to
    width_p = max(r.prompt_ids.numel() for r in rows)
    width_r = max(r.response_ids.numel() for r in rows)
    prompts = torch.full((total, width_p), pad_token_id, dtype=torch.int64)
    prompt_mask = torch.zeros((total, width_p), dtype=torch.int64)
    responses = torch.full((total, width_r), pad_token_id, dtype=torch.int64)
    response_attn = torch.zeros((total, width_r), dtype=torch.int64)
    response_mask = torch.zeros((total, width_r), dtype=torch.int64)
    log_probs = torch.zeros((total, width_r), dtype=torch.float32)
    rewards = torch.zeros((total, width_r), dtype=torch.float32)
    uids: list[str] = []
    for b in range(total):
        row = rows[b % real]  # a padding row copies a real row's tokens, with all masks 0
        p, r = row.prompt_ids.numel(), row.response_ids.numel()
        prompts[b, width_p - p :] = row.prompt_ids
        prompt_mask[b, width_p - p :] = 1
        responses[b, :r] = row.response_ids
        response_attn[b, :r] = 1
        if b < real:
            mask = (row.response_mask == 1).to(torch.int64)
            response_mask[b, :r] = mask
            log_probs[b, :r] = row.rollout_log_probs.float() * mask
            rewards[b, :r] = row.token_level_rewards.float()
        uids.append(row.header.task_id if b < real else f"forge-padding-{b}")
    attention_mask = torch.cat([prompt_mask, response_attn], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": response_mask,
        "rollout_log_probs": log_probs,
        "token_level_rewards": rewards,
        "forge_real_row": torch.arange(total) < real,
    }
    return tensors, np.array(uids, dtype=object)
