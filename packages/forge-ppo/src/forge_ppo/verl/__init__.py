"""The verl trainer (`backends.trainer = "verl"`): verl 0.9.1's FSDP2 LoRA actor and critic as
Ray worker groups behind Forge's `Trainer` protocol; needs forge-ppo's `verl` extra.

    from forge_ppo.verl import build_verl_trainer
    trainer = build_verl_trainer(spec, model_dir, run_dir)

On CPU ranks (CI, laptops) set `VERL_PLATFORM=cpu`: `_platform` (loaded by verl's plugin entry
point) registers the CPU platform and the patches listed in patches/README.md. This package's
names are imported lazily: verl imports `forge_ppo.verl._platform` while it is itself importing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forge_ppo.verl._ray import RayUnavailableError
    from forge_ppo.verl._trainer import VerlTrainer, VerlWorkerError, build_verl_trainer

__all__ = ["RayUnavailableError", "VerlTrainer", "VerlWorkerError", "build_verl_trainer"]
_MODULES = {"RayUnavailableError": "forge_ppo.verl._ray"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'forge_ppo.verl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULES.get(name, "forge_ppo.verl._trainer")), name)
    globals()[name] = value
    return value
