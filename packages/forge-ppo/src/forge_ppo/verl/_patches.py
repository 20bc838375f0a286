"""The places where verl 0.9.1 has no hook for a CPU rank, patched at plugin load (only when
`VERL_PLATFORM=cpu`; see patches/README.md). Each patch names the upstream line it works
around and when it can go; `apply_cpu_patches` refuses any verl version but 0.9.1, and
`tests/verl/test_patches.py` shows each one is needed (verl fails without it).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

VERL_VERSION = "0.9.1"
APPLIED: list[str] = []


def check_version() -> None:
    """Refuse any verl but the one these patches and read-backs were written for."""
    found = metadata.version("verl")
    if found != VERL_VERSION:
        raise RuntimeError(
            f"forge_ppo.verl CPU patches: expected verl=={VERL_VERSION}; found {found}; fix: "
            "install forge-ppo's `verl` extra (it pins the version these patches were written for)"
        )


def gloo_process_group() -> None:
    """`verl/utils/distributed.py:89` builds the backend `"cpu:gloo,<device>:<nccl backend>"`,
    which on CPU is `"cpu:gloo,cpu:gloo"` and torch refuses ("Duplicate device type cpu").
    Default the backend to `cpu:gloo`. Drop when verl de-duplicates the device list."""
    import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray

    def initialize(timeout_second: Any = None, backend: str | None = None) -> Any:
        return original(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    distributed.initialize_global_process_group_ray = initialize  # the patch


def sdpa_value_model() -> None:
    """`verl/utils/model.py:649,674` load the critic with `attn_implementation=
    "flash_attention_2"` whatever the config says; flash-attn has no CPU kernel. Load the same
    `AutoModelForTokenClassification` with sdpa. Drop when verl honours `override_config`."""
    import verl.utils.model as model

    def load_valuehead_model(
        local_path: str, torch_dtype: Any, model_config: Any, trust_remote_code: bool
    ) -> Any:
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation="sdpa",
            trust_remote_code=trust_remote_code,
        )

    model.load_valuehead_model = load_valuehead_model  # the patch


def cpu_engines() -> None:
    """`workers/engine/fsdp/transformer_impl.py:1143,1594` register the FSDP engines for devices
    cuda and npu only. Register the same classes for `cpu` through verl's own
    `EngineRegistry.register` (a public hook, not a patch of verl's code)."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl as impl

    for model_type, cls in (
        ("language_model", impl.FSDPEngineWithLMHead),
        ("value_model", impl.FSDPEngineWithValueHead),
    ):
        EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device="cpu")(cls)


PATCHES = {
    "gloo_process_group": gloo_process_group,
    "sdpa_value_model": sdpa_value_model,
    "cpu_engines": cpu_engines,
}


def apply_cpu_patches(only: tuple[str, ...] | None = None) -> None:
    """Apply every CPU patch once (`only`: a subset, for the tests that show each is needed)."""
    check_version()
    for name, patch in PATCHES.items():
        if name in APPLIED or (only is not None and name not in only):
            continue
        patch()
        APPLIED.append(name)
