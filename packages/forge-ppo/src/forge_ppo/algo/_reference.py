"""Plain, slow reference implementations used by tests, parity and the bench. Not API.

`gae_reference` is Forge's GAE written as the textbook loop over one row's action tokens in
Python floats (float64). `gae_loop_verl_semantics` re-states verl 0.9.1's
`compute_gae_advantage_return` algorithm (a per-token loop over columns, vectorised over rows,
observation tokens carrying the next value and the running advantage, whitening at the end) so
the bench can time the loop where verl is not installed. It is a re-statement of the algorithm,
not verl's code.
"""

from __future__ import annotations

import torch


def gae_reference(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
    *,
    reward_on_observation: str = "raise",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Textbook GAE per row over action tokens, in Python floats. (B, T) -> two (B, T) float64."""
    rewards = token_level_rewards.to(torch.float64).tolist()
    vals = values.to(torch.float64).tolist()
    mask = (response_mask != 0).tolist()
    batch, length = len(rewards), len(rewards[0]) if rewards else 0
    advantages = [[0.0] * length for _ in range(batch)]
    returns = [[0.0] * length for _ in range(batch)]
    for b in range(batch):
        actions = [t for t in range(length) if mask[b][t]]
        step_reward = {t: rewards[b][t] for t in actions}
        previous = None
        for t in range(length):
            if mask[b][t]:
                previous = t
            elif rewards[b][t] != 0.0:
                if reward_on_observation != "previous_action" or previous is None:
                    raise ValueError(f"reward on observation token ({b}, {t})")
                step_reward[previous] += rewards[b][t]
        running, next_value = 0.0, 0.0
        for t in reversed(actions):
            delta = step_reward[t] + gamma * next_value - vals[b][t]
            running = delta + gamma * lam * running
            advantages[b][t] = running
            returns[b][t] = running + vals[b][t]
            next_value = vals[b][t]
    as_tensor = lambda rows: torch.tensor(rows, dtype=torch.float64).reshape(batch, length)  # noqa: E731
    return as_tensor(advantages), as_tensor(returns)


def gae_loop_verl_semantics(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
    *,
    whiten: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl 0.9.1's GAE algorithm re-stated: a reverse loop over the T token columns.

    Observation tokens keep the previous `nextvalues` / `lastgaelam`, so a reward placed on one
    is lost. Returns (advantages whitened over the mask when `whiten`, returns), (B, T) each.
    """
    mask = response_mask.to(values.dtype)
    next_values = torch.zeros_like(values[:, 0])
    last_gae = torch.zeros_like(values[:, 0])
    reversed_advantages = []
    for t in reversed(range(values.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_values - values[:, t]
        candidate = delta + gamma * lam * last_gae
        next_values = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_values
        last_gae = candidate * mask[:, t] + (1 - mask[:, t]) * last_gae
        reversed_advantages.append(last_gae)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    returns = advantages + values
    if whiten:
        selected = mask.bool()
        mean = advantages[selected].mean()
        var = advantages[selected].var(unbiased=True)
        advantages = (advantages - mean) * torch.rsqrt(var + 1e-8)
    return advantages, returns
