"""verl's CPU platform: device `cpu`, collective backend `gloo`, Ray resource `CPU`.

Registered through verl's plugin mechanism (the `verl.plugins` entry point of forge-ppo, loaded
by `import verl` in the driver and in every Ray worker) and active only when
`VERL_PLATFORM=cpu`: on a GPU machine this module registers nothing and verl picks `nvidia`.
It is how CI runs verl's real FSDP2 workers on CPU ranks (FACTS.md, "verl 0.9.1 workers on
CPU"). The three places where verl 0.9.1 offers no hook are patched in `_patches.py`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch

from forge_ppo.verl._patches import apply_cpu_patches

ENV = "VERL_PLATFORM"
NAME = "cpu"


class _CPUDeviceModule(ModuleType):
    """`torch.cpu` plus the memory queries verl calls on a device module (`torch.cuda`'s
    names): a CPU rank has no device memory pool, so they report 0 and do nothing."""

    def __init__(self) -> None:
        super().__init__("forge_ppo.verl.cpu_device")

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("memory_", "max_memory_")) or name in ("memory_stats",):
            return lambda *args, **kwargs: {} if name == "memory_stats" else 0
        if name.startswith("reset_") or name in ("empty_cache", "ipc_collect"):
            return lambda *args, **kwargs: None
        if name == "mem_get_info":
            return lambda *args, **kwargs: (0, 0)
        if name == "get_device_name":  # verl's MFU table: "CPU" -> no peak FLOPS known
            return lambda *args, **kwargs: "CPU"
        return getattr(torch.cpu, name)


CPU_DEVICE_MODULE = _CPUDeviceModule()


def cpu_requested() -> bool:
    """True when verl was asked for the CPU platform (`VERL_PLATFORM=cpu`)."""
    return os.environ.get(ENV, "").strip().lower() == NAME


def register() -> None:
    """Register the platform, the FSDP engines for device `cpu` and the CPU patches; a no-op
    unless `VERL_PLATFORM=cpu`."""
    if not cpu_requested():
        return
    register_platform()
    apply_cpu_patches()


def ensure_registered() -> None:
    """`register()` now, for a process that imported verl before `VERL_PLATFORM=cpu` was set
    (verl runs its plugins once, at its first import: the entry point was then a no-op, and
    verl would fail with "Unknown platform 'cpu'"); a no-op when already registered."""
    from verl.plugin.platform.platform_manager import PlatformRegistry

    if cpu_requested() and PlatformRegistry.get(NAME) is None:
        register()


def register_platform() -> None:
    """Only the platform class (the patches' tests use this to see verl fail without them)."""
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    @PlatformRegistry.register(platform=NAME)
    class PlatformCPU(PlatformBase):
        """Ranks are processes on one host; tensors stay on `cpu`; collectives over gloo."""

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> ModuleType:
            return CPU_DEVICE_MODULE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return cpu_requested()

        # a device *string*: verl does `.to(get_device_id())`, and an int means accelerator 0
        def current_device(self) -> Any:
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_cpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None


register()
