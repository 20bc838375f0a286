"""`forge-ppo train`: the phases (smoke, soak, formal) as numbered steps; they drive a `Trainer`
chosen by `backends.trainer` (`forge_ppo.build_trainer`) and never know which one.

    from forge_ppo.recipes.train import train
    run_dir = train(load_spec("smoke-local"))   # verified against the phase's ledger contract

`_train` (the steps and the `Run` they carry), `_checks` (every gate of the run), `_plan` (the
data plan), `_rollouts` (batches and validation through forge-rollout), `_placement` (GPUs,
separated rollout), `_runlog` (metrics, update files, curves).
"""

from forge_ppo.recipes.train._checks import budget_gates, check_micro_batches, settings_gate
from forge_ppo.recipes.train._train import Run, retired_checkpoints, train

__all__ = [
    "Run",
    "budget_gates",
    "check_micro_batches",
    "retired_checkpoints",
    "settings_gate",
    "train",
]
