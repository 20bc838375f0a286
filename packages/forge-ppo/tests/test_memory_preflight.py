"""Preflight of a GPU spec runs the memory estimate: a foretold OOM or a failed exact check is
refused before any run folder exists; the seed's completed 40K shape passes; CPU specs skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_gates import load_spec
from forge_ppo.recipes.train._memory import memory_violations

SHAPES = Path(__file__).parents[1] / "src/forge_ppo/estimate/shapes"


def _soak(**context: int):
    spec = load_spec("soak-5gpu")
    return spec.model_copy(update={"context": spec.context.model_copy(update=context)})


def test_the_seeds_completed_40k_shape_passes_preflight(capsys) -> None:
    spec = load_spec("soak-5gpu")
    assert spec.resources.gpu_memory_gb == 80
    assert memory_violations(spec, SHAPES / "qwen3-8b.json") == []
    assert "memory estimate: actor fits" in capsys.readouterr().err


def test_a_64k_budget_is_refused_with_its_parts() -> None:
    budget = 65536
    spec = _soak(actor_train_tokens=budget, critic_train_tokens=budget, critic_infer_tokens=budget)
    found = memory_violations(spec, SHAPES / "qwen3-8b.json")
    assert found and found[0].rule == "preflight.memory.actor"
    assert "oom" in found[0].found and "logits" in found[0].found
    assert "largest that fits" in found[0].fix


def test_a_budget_below_the_window_is_refused_as_an_exact_check() -> None:
    found = memory_violations(_soak(critic_train_tokens=1024), SHAPES / "qwen3-8b.json")
    assert any(v.rule == "preflight.memory.critic" and "refused" in v.found for v in found)


@pytest.mark.parametrize("config", ["smoke-local", "soak-local"])
def test_a_cpu_spec_has_no_memory_preflight(config: str) -> None:
    assert memory_violations(load_spec(config), SHAPES / "qwen3-8b.json") == []


def test_an_fp32_gpu_spec_is_told_to_compute_in_bf16_first() -> None:
    """The local trainer's fp32 default on a GPU: its attention keeps every layer's matrices
    (measured on an H200: up to 2.6x the memory of the same update in bf16)."""
    spec = load_spec("smoke-local")
    budget = 16384
    spec = spec.model_copy(
        update={
            "resources": spec.resources.model_copy(
                update={"trainer_gpus": 1, "gpu_memory_gb": 141}
            ),
            "model": spec.model.model_copy(update={"max_model_len": budget // 2}),
            "context": spec.context.model_copy(
                update={"window": budget // 2, "reserve": 0, "actor_train_tokens": budget,
                        "critic_train_tokens": budget, "critic_infer_tokens": budget}
            ),
        }
    )  # fmt: skip
    assert spec.actor.dtype == "fp32" and spec.backends.trainer == "local"
    found = memory_violations(spec, SHAPES / "qwen3-0.6b.json")
    assert found and "attention_scores" in found[0].found
    assert found[0].fix.startswith("set actor.dtype and critic.dtype to bf16")
    bf16 = spec.model_copy(
        update={
            "actor": spec.actor.model_copy(update={"dtype": "bf16"}),
            "critic": spec.critic.model_copy(update={"dtype": "bf16"}),
        }
    )
    assert memory_violations(bf16, SHAPES / "qwen3-0.6b.json") == []  # 59 GB of 141: fits
