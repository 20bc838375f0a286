"""Each CPU patch is needed: verl 0.9.1 fails at its break point without it, and works with it
(patches/README.md rules). Each case runs in a fresh interpreter with verl's entry-point plugins
off (`VERL_USE_EXTERNAL_PLUGINS=none`), the CPU platform registered by hand, and then only the
patch under test applied or not."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import os, sys
os.environ.pop("VERL_PLATFORM", None)  # importing _platform now registers nothing
os.environ["VERL_USE_EXTERNAL_PLUGINS"] = "none"  # nor does verl's entry-point discovery
import verl
from forge_ppo.verl import _platform, _patches
assert not _patches.APPLIED
os.environ["VERL_PLATFORM"] = "cpu"  # verl resolves its platform on first use, after this
_platform.register_platform()
if sys.argv[1] == "patched":
    _patches.apply_cpu_patches(only=(sys.argv[2],))
"""

CASES = {
    "gloo_process_group": (
        """
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
        import torch.distributed as dist
        from verl.utils import distributed
        distributed.initialize_global_process_group_ray()
        assert dist.get_backend() in ("gloo", "cpu:gloo"), dist.get_backend()
        print("OK")
        """,
        "Duplicate device type",
    ),
    "sdpa_value_model": (
        """
        from transformers import AutoConfig
        import torch
        from verl.utils import model
        config = AutoConfig.from_pretrained(sys.argv[3], num_labels=1)
        module = model.load_valuehead_model(sys.argv[3], torch.float32, config, False)
        assert type(module).__name__.endswith("ForTokenClassification")
        print("OK")
        """,
        "flash",
    ),
    "cpu_engines": (
        """
        from verl.workers.engine.base import EngineRegistry
        import verl.workers.engine.fsdp.transformer_impl  # registers cuda / npu
        for kind in ("language_model", "value_model"):
            EngineRegistry.get_engine_cls(kind, "fsdp2")
        print("OK")
        """,
        "",
    ),
}


def _run(case: str, mode: str, model: str) -> subprocess.CompletedProcess[str]:
    code = PRELUDE + textwrap.dedent(CASES[case][0])
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    return subprocess.run(
        [sys.executable, "-c", code, mode, case, model],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_verl_fails_without_the_patch_and_works_with_it(case, tiny_model):
    bare = _run(case, "bare", str(tiny_model))
    assert bare.returncode != 0 and "OK" not in bare.stdout, bare.stdout[-2000:]
    assert CASES[case][1].lower() in (bare.stderr + bare.stdout).lower(), bare.stderr[-2000:]
    patched = _run(case, "patched", str(tiny_model))
    assert patched.returncode == 0 and "OK" in patched.stdout, patched.stderr[-3000:]


def test_the_patches_refuse_another_verl_version(monkeypatch):
    from forge_ppo.verl import _patches

    monkeypatch.setattr(_patches.metadata, "version", lambda name: "0.9.2")
    with pytest.raises(RuntimeError, match=r"expected verl==0\.9\.1; found 0\.9\.2"):
        _patches.apply_cpu_patches()


LATE = """
import os
os.environ.pop("VERL_PLATFORM", None)
import verl  # its entry-point plugins run now: forge_cpu registers nothing without the variable
from verl.plugin.platform.platform_manager import PlatformRegistry, _create_platform
assert PlatformRegistry.get("cpu") is None
os.environ["VERL_PLATFORM"] = "cpu"  # set later, as a process that imported verl first does
from forge_ppo.verl import _platform
_platform.ensure_registered()
_platform.ensure_registered()  # twice: a no-op
assert _create_platform("cpu").device_name == "cpu"
print("OK")
"""


def test_a_process_that_imported_verl_first_still_gets_the_cpu_platform():
    """`nox -s bench` imported verl for the GAE reference before the verl trainer set
    VERL_PLATFORM: "Unknown platform 'cpu'" until the trainer registered it itself."""
    done = subprocess.run([sys.executable, "-c", LATE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-3000:]
