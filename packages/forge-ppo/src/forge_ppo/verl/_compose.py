"""verl's own `ppo_trainer` config (`trainer/config/ppo_trainer.yaml`), composed by Hydra with
Forge's overrides (`_config.overrides`: the mapping, which needs neither verl nor Hydra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import verl
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from forge_gates import RunSpec
from forge_ppo.verl._config import VerlTopology, overrides


def compose(spec: RunSpec, model_dir: Path, critic_dir: str, topology: VerlTopology) -> Any:
    """verl's `ppo_trainer` config (an omegaconf DictConfig) with Forge's overrides."""
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose(
            "ppo_trainer", overrides=overrides(spec, model_dir, critic_dir, topology)
        )
