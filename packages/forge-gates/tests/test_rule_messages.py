"""Every run-spec rule of DESIGN §4: the exact violation it reports (rule, expected, found,
fix, with the numbers), and the boundary values it must still accept."""

from __future__ import annotations

from typing import Any

import pytest

from forge_gates import (
    P0_PRODUCTION,
    check_p0_production,
    check_spec,
    load_spec,
    p0_spec_values,
    read_config,
    validate_config,
)

PRODUCTION_BACKENDS = {"trainer": "verl", "inference": "vllm", "sandbox": "local"}


def violations_of(data: dict[str, Any]) -> list[dict[str, str]]:
    spec, violations = validate_config(data)
    assert spec is None, "expected the spec to be refused"
    return [v.model_dump() for v in violations]


def only(data: dict[str, Any]) -> dict[str, str]:
    found = violations_of(data)
    assert len(found) == 1, found
    return found[0]


def accepted(data: dict[str, Any]) -> None:
    spec, violations = validate_config(data)
    assert violations == [] and spec is not None
    assert check_spec(spec) == []


def v(rule: str, expected: str, found: str, fix: str) -> dict[str, str]:
    return {"rule": rule, "expected": expected, "found": found, "fix": fix}


# ------------------------------------------------------------------ context and budgets
def test_window_must_equal_max_model_len():
    data = read_config("smoke-local")
    data["context"]["window"] = 4096
    assert only(data) == v(
        "context.window",
        "context guard window == model.max_model_len (2048)",
        "context.window = 4096",
        "set context.window = 2048",
    )


def test_reserve_below_the_window():
    data = read_config("smoke-local")
    data["context"]["reserve"] = 2048
    data["agent"]["max_tokens"] = None
    assert only(data) == v(
        "context.reserve",
        "context.reserve < context.window (2048)",
        "context.reserve = 2048",
        "lower context.reserve (the seed system used 256)",
    )
    data["context"]["reserve"] = 2047
    accepted(data)


@pytest.mark.parametrize(
    "name", ["actor_train_tokens", "critic_train_tokens", "critic_infer_tokens"]
)
def test_each_token_budget_covers_max_model_len(name):
    data = read_config("smoke-local")
    data["context"][name] = 2047
    assert only(data) == v(
        f"budget.{name}",
        f"context.{name} >= model.max_model_len (2048)",
        f"context.{name} = 2047",
        f"set context.{name} >= 2048, or lower model.max_model_len",
    )
    data["context"][name] = 2048
    accepted(data)


def test_agent_max_tokens_fits_window_minus_reserve():
    data = read_config("smoke-local")  # window 2048, reserve 64
    data["agent"]["max_tokens"] = 1985
    assert only(data) == v(
        "agent.max_tokens",
        "agent.max_tokens <= window - reserve (1984)",
        "agent.max_tokens = 1985",
        "lower agent.max_tokens or leave it unset",
    )
    for fits in (1984, 1, None):
        data["agent"]["max_tokens"] = fits
        accepted(data)


# ------------------------------------------------------------------ resources
def test_separate_rollout_gpu_needs_trainer_gpus():
    data = read_config("smoke-local")
    data["resources"]["rollout_gpus"] = 1
    data["backends"] = PRODUCTION_BACKENDS  # GPUs need the engines that use them
    assert only(data) == v(
        "resources.separated_rollout",
        "a separate rollout GPU only beside trainer GPUs (trainer_gpus > 0)",
        "trainer_gpus = 0, rollout_gpus = 1",
        "set resources.trainer_gpus, or rollout_gpus = 0 for a CPU run",
    )
    data["resources"]["trainer_gpus"] = 1
    data["backends"] = PRODUCTION_BACKENDS  # GPUs need the engines that use them
    accepted(data)


def test_one_rollout_replica_on_the_separate_gpu():
    data = read_config("smoke-4gpu")
    data["resources"]["rollout_gpus"] = 1
    data["backends"] = PRODUCTION_BACKENDS  # GPUs need the engines that use them
    data["resources"]["rollout_replicas"] = 2
    assert only(data) == v(
        "resources.rollout_replicas",
        "one inference replica on the separate rollout GPU",
        "rollout_replicas = 2",
        "set resources.rollout_replicas = 1",
    )
    data["resources"]["rollout_gpus"] = 0  # no separate rollout GPU: replicas are not checked
    accepted(data)


def test_rollout_gpu_rules_only_apply_to_training():
    data = read_config("p0-local")
    data["resources"]["rollout_gpus"] = 1
    data["backends"] = PRODUCTION_BACKENDS  # GPUs need the engines that use them
    data["resources"]["rollout_replicas"] = 2
    accepted(data)


def test_training_is_synchronous():
    data = read_config("smoke-local")
    data["resources"]["async_training"] = True
    assert only(data) == v(
        "resources.async_training",
        "synchronous training (async = false)",
        "async_training = true",
        "set resources.async_training = false",
    )
    p0 = read_config("p0-local")
    p0["resources"]["async_training"] = True
    assert [x["rule"] for x in violations_of(p0)] == ["resources.async_training"]


# ------------------------------------------------------------------ training phases
def test_no_eval_section_in_training():
    data = read_config("smoke-local")
    data["eval"] = read_config("p0-local")["eval"]
    assert only(data) == v(
        "phase.eval_section",
        "no [eval] section in a smoke spec",
        "an [eval] section",
        "remove [eval]; paired evaluation is the p0 phase",
    )


def test_actor_checkpoints_are_lora_only():
    data = read_config("soak-local")
    data["lora"]["actor_lora_only"] = False
    assert only(data) == v(
        "lora.actor_lora_only",
        "actor checkpoints hold the LoRA adapter only",
        "lora.actor_lora_only = false",
        "set lora.actor_lora_only = true",
    )


def test_training_needs_a_ppo_section_and_stops_there():
    data = read_config("smoke-local")
    del data["ppo"]
    data["checkpoint"]["actor_max_mib"] = 1000  # would break checkpoint.caps: not reached
    assert only(data) == v(
        "phase.ppo_section",
        "a [ppo] section in a smoke spec",
        "none",
        "add [ppo] with batch_size and mini-batch sizes",
    )


def test_batch_size_divisible_by_world_size():
    data = read_config("smoke-local")
    data["resources"]["trainer_gpus"] = 3
    data["backends"] = PRODUCTION_BACKENDS  # GPUs need the engines that use them
    data["ppo"].update(batch_size=4, actor_mini_batch_size=4, critic_mini_batch_size=4)
    assert only(data) == v(
        "ppo.batch_size.world_size",
        "ppo.batch_size divisible by the trainer world size (3)",
        "ppo.batch_size = 4 (4 % 3 = 1)",
        "use a multiple of 3 for ppo.batch_size",
    )


@pytest.mark.parametrize("name", ["actor_mini_batch_size", "critic_mini_batch_size"])
@pytest.mark.parametrize("mini", [3, 8])
def test_mini_batches_divide_the_batch(name, mini):
    data = read_config("smoke-local")  # batch 4
    data["ppo"][name] = mini
    assert only(data) == v(
        f"ppo.{name}",
        f"ppo.{name} divides ppo.batch_size (4)",
        f"ppo.{name} = {mini}",
        "pick a divisor of 4",
    )
    data["ppo"][name] = 4
    accepted(data)


@pytest.mark.parametrize("part", ["actor_max_mib", "critic_max_mib"])
def test_checkpoint_part_caps_within_the_total(part):
    data = read_config("smoke-local")  # actor 16, critic 64, total 80
    data["checkpoint"][part] = 81
    actor = 81.0 if part == "actor_max_mib" else 16.0  # caps are floats (MiB)
    critic = 81.0 if part == "critic_max_mib" else 64.0
    assert only(data) == v(
        "checkpoint.caps",
        "actor and critic caps each <= the total cap",
        f"actor {actor} MiB, critic {critic} MiB, total 80.0 MiB",
        "raise checkpoint.total_max_mib or lower the part caps",
    )
    data["checkpoint"][part] = 80  # equal to the total is allowed
    accepted(data)


def test_smoke_is_one_update():
    data = read_config("smoke-local")
    data["schedule"]["total_updates"] = 2
    assert only(data) == v(
        "smoke.updates",
        "schedule.total_updates = 1 (a smoke is exactly one update)",
        "schedule.total_updates = 2",
        "set schedule.total_updates = 1; use the soak phase for 2-3 updates",
    )


@pytest.mark.parametrize("updates", [1, 4])
def test_soak_is_two_or_three_updates(updates):
    data = read_config("soak-local")
    data["schedule"]["total_updates"] = updates
    assert only(data) == v(
        "soak.updates",
        "schedule.total_updates in {2, 3}",
        f"schedule.total_updates = {updates}",
        "a soak only proves the loop: use 2 or 3 updates, and the formal phase for more",
    )


@pytest.mark.parametrize("phase", ["smoke-local", "soak-local"])
def test_a_fixed_batch_holds_batch_size_ids(phase):
    data = read_config(phase)
    size = data["ppo"]["batch_size"]
    data["data"]["task_ids"] = [f"t{i}" for i in range(size + 1)]
    assert only(data) == v(
        "data.task_ids",
        f"the fixed batch holds ppo.batch_size ({size}) task ids",
        f"{size + 1} task ids",
        "list exactly batch_size ids, or none to take the first batch of the split",
    )
    data["data"]["task_ids"] = [f"t{i}" for i in range(size)]
    accepted(data)


# ------------------------------------------------------------------ formal
FORMAL_RULES = [
    ("total_updates", 5, v("formal.total_updates", "unset (derived from the split)", "5",
                           "remove schedule.total_updates")),
    ("total_batches", 3, v("formal.total_batches", "-1 (every batch of the split)", "3",
                           "set schedule.total_batches = -1")),
    ("train_task_limit", 10, v("formal.train_task_limit", "0 (the whole train split)", "10",
                               "set schedule.train_task_limit = 0")),
    ("val_before_train", False, v("formal.val_before_train", "true", "false",
                                  "set schedule.val_before_train = true")),
    ("expected_train_tasks", None, v("formal.expected_train_tasks",
                                     "the train split size the run must cover", "unset",
                                     "set schedule.expected_train_tasks (e.g. 187)")),
]  # fmt: skip


@pytest.mark.parametrize(("field", "value", "expected"), FORMAL_RULES)
def test_formal_schedule_rules(field, value, expected):
    data = read_config("formal-local")
    data["schedule"][field] = value
    assert only(data) == expected


def test_formal_has_no_fixed_task_ids():
    data = read_config("formal-local")
    data["data"]["task_ids"] = ["a", "b"]
    assert only(data) == v("formal.task_ids", "no fixed task ids", "2 ids", "remove data.task_ids")


def test_formal_frequencies():
    data = read_config("formal-local")
    data["schedule"].update(test_freq=0, save_freq=0)
    assert violations_of(data) == [
        v("formal.test_freq", "> 0", "0", "set schedule.test_freq (e.g. 10)"),
        v("formal.save_freq", "> 0", "0", "set schedule.save_freq (e.g. 10)"),
        v(
            "formal.validation_checkpoint",
            "every validation step has a checkpoint (test_freq a multiple of save_freq)",
            "test_freq = 0, save_freq = 0",
            "make schedule.test_freq a multiple of schedule.save_freq",
        ),
    ]
    data["schedule"].update(test_freq=10, save_freq=4)
    assert only(data) == v(
        "formal.validation_checkpoint",
        "every validation step has a checkpoint (test_freq a multiple of save_freq)",
        "test_freq = 10, save_freq = 4",
        "make schedule.test_freq a multiple of schedule.save_freq",
    )
    data["schedule"].update(test_freq=8, save_freq=4)
    accepted(data)


def test_formal_validation_subset():
    data = read_config("formal-local")
    data["schedule"].update(validation_tasks=0)
    assert violations_of(data) == [
        v("formal.validation_tasks", "> 0 (fixed-seed subset)", "0",
          "set schedule.validation_tasks (e.g. 21)"),
        v("formal.full_validation_tasks", ">= validation_tasks (0)",
          str(data["schedule"]["full_validation_tasks"]),
          "set schedule.full_validation_tasks to the validation split size (e.g. 42)"),
    ]  # fmt: skip
    full = data["schedule"]["full_validation_tasks"]
    data["schedule"].update(validation_tasks=full + 1)
    assert only(data) == v(
        "formal.full_validation_tasks",
        f">= validation_tasks ({full + 1})",
        f"{full}",
        "set schedule.full_validation_tasks to the validation split size (e.g. 42)",
    )
    for ok in (1, full):  # one task, and the whole validation split, are both valid subsets
        data["schedule"].update(validation_tasks=ok)
        accepted(data)


# ------------------------------------------------------------------ p0
def test_p0_does_not_train():
    data = read_config("p0-local")
    data["ppo"] = read_config("smoke-local")["ppo"]
    assert only(data) == v(
        "p0.no_training",
        "no [ppo] section: P0 compares checkpoints, it does not train",
        "a [ppo] section",
        "remove [ppo]",
    )


def test_p0_needs_an_eval_section_and_stops_there():
    data = read_config("p0-local")
    del data["eval"]
    data["agent"]["max_tokens"] = 64  # would break p0.max_tokens: not reached
    assert only(data) == v(
        "p0.eval_section",
        "an [eval] section (panels, candidates, attempts)",
        "none",
        "add [eval] with panels and two candidates",
    )


P0_RULES = [
    ({"eval": {"retries": 2}}, v("p0.retries", "0", "2", "set eval.retries = 0")),
    ({"eval": {"near_window_probe": False}},
     v("p0.near_window_probe", "true", "false", "set eval.near_window_probe = true")),
    ({"agent": {"max_tokens": 64}},
     v("p0.max_tokens", "unset (provider decides)", "64", "remove agent.max_tokens")),
    ({"eval": {"panels": ["a", "b", "a"]}},
     v("p0.panels", "distinct panel names", "['a', 'b', 'a']", "list each panel once")),
    ({"eval": {"candidates": ["x", "x"]}},
     v("p0.candidates", "two different candidates", "['x', 'x']",
       "name two different checkpoints")),
]  # fmt: skip


@pytest.mark.parametrize(("change", "expected"), P0_RULES)
def test_p0_protocol_rules(change, expected):
    data = read_config("p0-local")
    for section, values in change.items():
        data[section].update(values)
    assert only(data) == expected


def test_every_shipped_config_breaks_no_rule():
    for name in ("smoke-local", "soak-local", "formal-local", "p0-local", "smoke-4gpu",
                 "soak-5gpu", "formal-5gpu", "p0-64k"):  # fmt: skip
        accepted(read_config(name))


# ------------------------------------------------------------------ backends
def test_trainer_gpus_need_the_distributed_trainer():
    data = read_config("smoke-4gpu")
    data["backends"]["trainer"] = "local"
    del data["actor"], data["critic"]  # the seed's offload: refused for the local trainer too
    assert only(data) == v(
        "backends.trainer",
        "trainer GPUs used by the distributed trainer (backends.trainer = verl)",
        "trainer_gpus = 4 with backends.trainer = 'local' (one process: every trainer GPU but "
        "one would be ignored)",
        "set backends.trainer = 'verl', or trainer_gpus = 0 for the local trainer",
    )


def test_trainer_backend_is_not_checked_outside_training():
    data = read_config("p0-64k")
    data["resources"]["trainer_gpus"] = 2
    data["backends"]["trainer"] = "local"
    accepted(data)


def test_rollout_gpus_need_vllm():
    data = read_config("p0-64k")
    data["backends"]["inference"] = "local"
    assert only(data) == v(
        "backends.inference",
        "rollout_gpus > 0 served by vLLM (backends.inference = vllm)",
        "rollout_gpus = 1 with backends.inference = 'local' (the local server runs in-process "
        "and would ignore them)",
        "set backends.inference = 'vllm', or rollout_gpus = 0 for the local server",
    )


# ------------------------------------------------------------------ p0 panels, base, production
def test_p0_panel_needs_a_split_or_a_task_folder():
    data = read_config("p0-local")
    data["eval"]["panels"][0] = {"name": "validation", "size": 3}
    assert only(data) == v(
        "p0.panel.validation",
        "a split of a frozen split (split = 'test', tasks = split folder or unset for "
        "data.tasks) or a task folder (tasks = DIR)",
        "neither split nor tasks",
        "add split = ... or tasks = ... to the panel 'validation'",
    )


def test_p0_has_at_most_one_base_candidate():
    data = read_config("p0-local")
    data["eval"]["candidates"] = [{"name": "a", "base": True}, {"name": "b", "base": True}]
    assert only(data) == v(
        "p0.base",
        "at most one base candidate (base = true)",
        "base = true on ['a', 'b']",
        "mark only the base model with base = true; the other is a checkpoint",
    )


def test_production_violation_text():
    (found,) = check_p0_production({**P0_PRODUCTION, "concurrency": 4})
    assert found.model_dump() == v(
        "p0.production.concurrency",
        "concurrency = 8 (the production P0 protocol)",
        "concurrency = 4",
        "set resources.concurrency = 8, or eval.protocol = 'local' for a run that does not "
        "claim the production protocol",
    )


def test_p0_spec_values_of_the_shipped_production_spec():
    assert p0_spec_values(load_spec("p0-64k")) == P0_PRODUCTION
    values = p0_spec_values(load_spec("p0-local"))
    assert values["max_tokens"] is None and values["retries"] == 0
    assert values["near_window_probe"] is True and values["attempts"] == 1


def test_p0_spec_values_without_an_eval_section():
    spec = load_spec("smoke-local")
    values = p0_spec_values(spec)
    assert {k: values[k] for k in ("attempts", "retries", "panels", "near_window_probe")} == {
        "attempts": None,
        "retries": None,
        "panels": {},
        "near_window_probe": None,
    }
    # the agent's own cap, read from the spec (not a copy of the shipped number)
    assert spec.agent.max_tokens is not None
    assert values["max_tokens"] == spec.agent.max_tokens and set(values) == set(P0_PRODUCTION)
