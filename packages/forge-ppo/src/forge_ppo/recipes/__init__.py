"""Recipes: the pipelines that orchestrate forge-ppo's components (and drive rollouts through
forge-rollout), each read top to bottom as numbered steps. Nothing below imports them.

    train/        `forge-ppo train`: smoke, soak, formal PPO runs (`train`)
    p0/           `forge-ppo p0`: two candidates on the P0 panels, paired statistics (`run_p0`)
    _learn        `forge-ppo learn`: PPO from a warm start, pass@1 before and after
    _demo_policy  `forge-ppo sft`: the demo policy (oracle episodes -> SFT -> measured -> saved)
    _demo_model   the demo policy merged into its base: a model folder vLLM serves as the base
    _format_policy  the format policy (SmolLM2's action-format warm start, measured, saved)
    _format_sft   `forge-ppo sft-format`: the format SFT alone, first-turn rates before/after
    _warm_starts  `checkpoint.warm_start = "demo-policy" | "format-policy"` -> built checkpoints

    from forge_ppo.recipes import resolve_warm_start, run_p0
    from forge_ppo.recipes.train import train     # (the subpackage `train` shadows the name here)
    spec = resolve_warm_start(spec, model_dir, cache_dir)    # "demo-policy" -> its checkpoint
    run_dir = train(spec)                                    # verified run folder

Names resolve on first use, so the command line (`recipes/cli.py`) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below resolve lazily (see __getattr__)
    from forge_ppo.recipes._demo_policy import DEMO_POLICY, build_demo_policy, resolve_demo_policy
    from forge_ppo.recipes._format_policy import (
        FORMAT_POLICY,
        build_format_policy,
        resolve_format_policy,
    )
    from forge_ppo.recipes._format_sft import run_format_sft
    from forge_ppo.recipes._learn import run_learn
    from forge_ppo.recipes._warm_starts import resolve_warm_start
    from forge_ppo.recipes.p0 import run_p0

_LAZY: dict[str, str] = {
    "DEMO_POLICY": "forge_ppo.recipes._demo_policy",
    "FORMAT_POLICY": "forge_ppo.recipes._format_policy",
    "build_demo_policy": "forge_ppo.recipes._demo_policy",
    "build_format_policy": "forge_ppo.recipes._format_policy",
    "resolve_demo_policy": "forge_ppo.recipes._demo_policy",
    "resolve_format_policy": "forge_ppo.recipes._format_policy",
    "resolve_warm_start": "forge_ppo.recipes._warm_starts",
    "run_format_sft": "forge_ppo.recipes._format_sft",
    "run_learn": "forge_ppo.recipes._learn",
    "run_p0": "forge_ppo.recipes.p0",
}

__all__ = [
    "DEMO_POLICY",
    "FORMAT_POLICY",
    "build_demo_policy",
    "build_format_policy",
    "resolve_demo_policy",
    "resolve_format_policy",
    "resolve_warm_start",
    "run_format_sft",
    "run_learn",
    "run_p0",
]


def __getattr__(name: str) -> Any:
    """Import on first use (torch, peft, the rollout stack load only when a recipe runs)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'forge_ppo.recipes' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
