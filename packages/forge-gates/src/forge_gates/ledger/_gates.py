"""Every gate a Forge pipeline records, in one registry that the phase contracts and the
emitters share (`Gate.PPO_SMOKE_PASSED`, never a string literal elsewhere: a test keeps it so),
and a test checks that every gate a contract requires has a code path that records it.
"""

from __future__ import annotations

from enum import StrEnum


class Gate(StrEnum):
    """Gate names (the marker printed and the `gate` of a ledger line)."""

    # every run folder: provenance.json written and read back (its first ledger line)
    PROVENANCE_RECORDED = "PROVENANCE_RECORDED"
    # every phase
    RUN_SPEC_GATE_PASSED = "RUN_SPEC_GATE_PASSED"
    DATA_SPLIT_VERIFIED = "DATA_SPLIT_VERIFIED"
    # training: preflight, serving, models
    PPO_PREFLIGHT_PASSED = "PPO_PREFLIGHT_PASSED"
    PPO_CONTEXT_GUARD_PASSED = "PPO_CONTEXT_GUARD_PASSED"
    PPO_SEPARATED_ROLLOUT_GATE_PASSED = "PPO_SEPARATED_ROLLOUT_GATE_PASSED"
    PPO_WARM_START_CONFIG_PASSED = "PPO_WARM_START_CONFIG_PASSED"
    PPO_ACTOR_LORA_LOAD_PASSED = "PPO_ACTOR_LORA_LOAD_PASSED"
    PPO_WARM_START_LOAD_PASSED = "PPO_WARM_START_LOAD_PASSED"
    # a distributed trainer: every rank holds exactly the loaded weights (fingerprints)
    PPO_TRAINER_RANKS_LOAD_PASSED = "PPO_TRAINER_RANKS_LOAD_PASSED"
    PPO_SMOKE_TOKEN_BUDGET_GATE_PASSED = "PPO_SMOKE_TOKEN_BUDGET_GATE_PASSED"
    PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED = "PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED"
    # offload, gradient checkpointing, fused kernels, dtypes, entropy: read back from the built
    # trainer and held to the spec's `[actor]` / `[critic]` / `ppo.entropy_coeff`
    PPO_TRAINER_SETTINGS_GATE_PASSED = "PPO_TRAINER_SETTINGS_GATE_PASSED"
    # training: updates, adapters, checkpoints, verdicts
    PPO_SMOKE_UPDATE_PASSED = "PPO_SMOKE_UPDATE_PASSED"
    PPO_ADAPTER_PUSH_PASSED = "PPO_ADAPTER_PUSH_PASSED"
    PPO_COMPACT_CHECKPOINT_PASSED = "PPO_COMPACT_CHECKPOINT_PASSED"
    PPO_SMOKE_PASSED = "PPO_SMOKE_PASSED"
    PPO_SOAK_PASSED = "PPO_SOAK_PASSED"
    PPO_FINAL_CHECKPOINT_PASSED = "PPO_FINAL_CHECKPOINT_PASSED"
    # formal phase: data plan, validation, coverage
    PPO_FORMAL_PHASE_GATE_PASSED = "PPO_FORMAL_PHASE_GATE_PASSED"
    TRAIN_VALIDATION_SUBSET_GATE_PASSED = "TRAIN_VALIDATION_SUBSET_GATE_PASSED"
    TRAIN_FULL_DATASET_GATE_PASSED = "TRAIN_FULL_DATASET_GATE_PASSED"
    PPO_VALIDATION_PASSED = "PPO_VALIDATION_PASSED"
    TRAIN_EPOCH_COVERAGE = "TRAIN_EPOCH_COVERAGE"
    # data curation
    BULK_ORACLE_FREEZE_READY = "BULK_ORACLE_FREEZE_READY"
    # P0 evaluation
    P0_PREFLIGHT_PASSED = "P0_PREFLIGHT_PASSED"
    P0_CANDIDATES_PASSED = "P0_CANDIDATES_PASSED"
    P0_PROTOCOL_GATE_PASSED = "P0_PROTOCOL_GATE_PASSED"
    P0_NEAR_WINDOW_PROBE_PASSED = "P0_NEAR_WINDOW_PROBE_PASSED"
    P0_ENDPOINT_GATE_PASSED = "P0_ENDPOINT_GATE_PASSED"
    P0_PANEL_COMPLETE = "P0_PANEL_COMPLETE"
    P0_COMPARISON_PASSED = "P0_COMPARISON_PASSED"


# required by a contract, recorded by a backend that is not built yet: the configs that require
# them name that backend, and preflight refuses those configs until it exists
PENDING: dict[Gate, str] = {}  # none now: the vLLM backend records the separated-rollout gate
