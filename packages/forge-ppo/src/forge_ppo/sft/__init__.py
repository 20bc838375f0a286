"""The demo policy: supervised LoRA warm start on the scripted oracle's episodes (train split),
with premature submits beside them (`SFTSpec.premature_submits`: reward-0 episodes that submit
without the fix, so the first call is a fix-or-give-up choice PPO can learn).

    from forge_ppo.sft import resolve_demo_policy, resolve_warm_start
    checkpoint = resolve_demo_policy(spec, model_dir, Path(".cache/forge"))  # built once
    spec = resolve_warm_start(spec, model_dir, cache_dir)  # warm_start "demo-policy" -> folder

`forge-ppo sft --config smoke-local` builds (or finds) it and prints its report;
`forge-ppo learn` runs PPO from it and measures pass@1 before and after (`_learn`).
"""

from forge_ppo.sft._build import DEMO_POLICY, build_demo_policy, resolve_demo_policy
from forge_ppo.sft._format_policy import FORMAT_POLICY, resolve_format_policy
from forge_ppo.sft._oracle import (
    OracleError,
    oracle_fix,
    oracle_replies,
    premature_submit_replies,
    record_scripted_episodes,
)
from forge_ppo.sft._sft import (
    SFTSpec,
    action_nll,
    first_turn_mask,
    first_turn_probability,
    fit_critic,
    train_sft,
)
from forge_ppo.sft._warm_starts import resolve_warm_start

__all__ = [
    "DEMO_POLICY",
    "FORMAT_POLICY",
    "OracleError",
    "SFTSpec",
    "action_nll",
    "build_demo_policy",
    "first_turn_mask",
    "first_turn_probability",
    "fit_critic",
    "oracle_fix",
    "oracle_replies",
    "premature_submit_replies",
    "record_scripted_episodes",
    "resolve_demo_policy",
    "resolve_format_policy",
    "resolve_warm_start",
    "train_sft",
]
