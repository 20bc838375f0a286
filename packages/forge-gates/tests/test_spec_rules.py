import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_gates import (
    GateError,
    RunSpec,
    check_spec,
    load_spec,
    read_config,
    shipped_configs,
    spec_sha256,
    validate_config,
)

SHIPPED = [
    "smoke-local",
    "smoke-k8s-local",
    "smoke-docker-local",
    "smoke-verl-cpu",
    "smoke-vllm-local",
    "smoke-production-cpu",
    "soak-production-cpu",
    "soak-local",
    "formal-local",
    "formal-learn-local",
    "formal-learn-smollm2-local",
    "p0-local",
    "p0-vllm-local",
    "smoke-4gpu",
    "soak-5gpu",
    "formal-5gpu",
    "p0-64k",
]


def rules_of(data):
    spec, violations = validate_config(data)
    assert spec is None
    return {v.rule: v for v in violations}


def test_every_shipped_config_exists_and_validates():
    assert sorted(shipped_configs()) == sorted(SHIPPED)
    for name in SHIPPED:
        spec, violations = validate_config(name)
        assert violations == [], name
        assert spec.name == name
        assert spec.phase == name.split("-")[0]


def test_production_configs_carry_the_seed_numbers():
    formal = load_spec("formal-5gpu")
    assert (formal.ppo.gamma, formal.ppo.gae_lambda) == (1.0, 0.95)
    assert (formal.ppo.clip_ratio, formal.ppo.value_clip) == (0.2, 0.2)
    assert (formal.context.window, formal.context.reserve) == (40960, 256)
    assert (formal.schedule.validation_tasks, formal.schedule.full_validation_tasks) == (21, 42)
    assert (formal.schedule.test_freq, formal.schedule.save_freq) == (10, 10)
    assert (formal.lora.rank, formal.lora.alpha) == (32, 16)
    assert (formal.resources.trainer_gpus, formal.resources.rollout_gpus) == (4, 1)
    assert formal.resources.max_num_seqs == 10
    p0 = load_spec("p0-64k")
    assert p0.model.max_model_len == 65536 and p0.agent.step_limit == 200
    assert p0.agent.top_p is None and p0.agent.max_tokens is None
    assert p0.seed == 20260822 and p0.eval.panel_names == ("test38", "verified27")
    assert [p.size for p in p0.eval.panels] == [38, 27] and p0.eval.protocol == "production"
    soak = load_spec("soak-5gpu")
    assert soak.schedule.total_updates == 3 and soak.agent.max_timeout_ratio == 0.35


def test_smoke_must_be_exactly_one_update(smoke_data):
    smoke_data["schedule"]["total_updates"] = 2
    v = rules_of(smoke_data)["smoke.updates"]
    assert v.expected.startswith("schedule.total_updates = 1")
    assert v.found == "schedule.total_updates = 2"


@pytest.mark.parametrize("data", [{"tasks": "realrepo"}, {"train_split": "validation"}])
def test_demo_policy_warm_start_only_on_the_demo_train_split(smoke_data, data):
    assert smoke_data["checkpoint"]["warm_start"] == "demo-policy"
    smoke_data["data"].update(data)
    v = rules_of(smoke_data)["checkpoint.warm_start.demo_policy"]
    assert "data.tasks = 'demo'" in v.expected and repr(next(iter(data.values()))) in v.found
    assert "--warm-start CKPT" in v.fix and "SFT" in v.fix
    smoke_data["checkpoint"]["warm_start"] = "/ckpt/global_step_3"  # a checkpoint of one's own
    _, violations = validate_config(smoke_data)
    assert "checkpoint.warm_start.demo_policy" not in {v.rule for v in violations}


@pytest.mark.parametrize("updates", [1, 4, 20])
def test_soak_refuses_updates_outside_two_three(smoke_data, updates):
    smoke_data.update(phase="soak")
    smoke_data["schedule"]["total_updates"] = updates
    v = rules_of(smoke_data)["soak.updates"]
    assert v.found == f"schedule.total_updates = {updates}"
    assert "{2, 3}" in v.expected


def test_batch_must_divide_by_world_size(smoke_data):
    smoke_data["resources"]["trainer_gpus"] = 4
    smoke_data["ppo"]["batch_size"] = 6
    smoke_data["ppo"]["actor_mini_batch_size"] = 3
    smoke_data["ppo"]["critic_mini_batch_size"] = 3
    v = rules_of(smoke_data)["ppo.batch_size.world_size"]
    assert "(4)" in v.expected and "6 % 4 = 2" in v.found


def test_budgets_must_cover_max_model_len(smoke_data):
    smoke_data["context"]["critic_infer_tokens"] = 1024
    smoke_data["context"]["actor_train_tokens"] = 1000
    rules = rules_of(smoke_data)
    assert rules["budget.critic_infer_tokens"].found == "context.critic_infer_tokens = 1024"
    assert "(2048)" in rules["budget.actor_train_tokens"].expected
    assert "budget.critic_train_tokens" not in rules


def test_guard_window_equals_max_model_len(smoke_data):
    smoke_data["context"]["window"] = 4096
    v = rules_of(smoke_data)["context.window"]
    assert v.fix == "set context.window = 2048"


def test_reserve_and_max_tokens_fit_the_window(smoke_data):
    smoke_data["context"]["reserve"] = 2048
    smoke_data["agent"]["max_tokens"] = 4000
    rules = rules_of(smoke_data)
    assert "context.reserve" in rules and "agent.max_tokens" in rules


def test_mini_batches_divide_the_batch(smoke_data):
    smoke_data["ppo"]["actor_mini_batch_size"] = 3
    assert (
        rules_of(smoke_data)["ppo.actor_mini_batch_size"].found == "ppo.actor_mini_batch_size = 3"
    )


def test_fixed_batch_matches_batch_size(smoke_data):
    smoke_data["data"]["task_ids"] = ["a", "b"]
    assert rules_of(smoke_data)["data.task_ids"].found == "2 task ids"


def test_actor_lora_only_and_async_and_separated(smoke_data):
    smoke_data["lora"]["actor_lora_only"] = False
    smoke_data["resources"]["async_training"] = True
    smoke_data["resources"]["rollout_gpus"] = 1
    rules = rules_of(smoke_data)
    assert {
        "lora.actor_lora_only",
        "resources.async_training",
        "resources.separated_rollout",
    } <= set(rules)


def test_formal_rules_each_named():
    data = read_config("formal-5gpu")
    data["schedule"].update(
        total_updates=5,
        total_batches=3,
        train_task_limit=10,
        val_before_train=False,
        test_freq=10,
        save_freq=4,
        validation_tasks=50,
    )
    data["data"]["task_ids"] = ["x"]
    del data["schedule"]["expected_train_tasks"]
    rules = rules_of(data)
    assert {
        "formal.total_updates",
        "formal.total_batches",
        "formal.train_task_limit",
        "formal.task_ids",
        "formal.val_before_train",
        "formal.validation_checkpoint",
        "formal.full_validation_tasks",
        "formal.expected_train_tasks",
    } <= set(rules)
    assert rules["formal.validation_checkpoint"].found == "test_freq = 10, save_freq = 4"


def test_formal_needs_positive_frequencies():
    data = read_config("formal-local")
    data["schedule"].update(test_freq=0, save_freq=0, validation_tasks=0)
    rules = rules_of(data)
    assert {"formal.test_freq", "formal.save_freq", "formal.validation_tasks"} <= set(rules)


def test_p0_rules():
    data = read_config("p0-64k")
    data["eval"].update(retries=1, near_window_probe=False, candidates=["a", "a"])
    data["agent"]["max_tokens"] = 512
    data["ppo"] = copy.deepcopy(read_config("smoke-4gpu")["ppo"])
    rules = rules_of(data)
    assert {
        "p0.retries",
        "p0.near_window_probe",
        "p0.candidates",
        "p0.max_tokens",
        "p0.no_training",
    } <= set(rules)


def test_training_phase_needs_ppo_and_no_eval(smoke_data):
    del smoke_data["ppo"]
    smoke_data["eval"] = {"panels": ["x"], "candidates": ["a", "b"]}
    rules = rules_of(smoke_data)
    assert {"phase.ppo_section", "phase.eval_section"} <= set(rules)


def test_schema_errors_name_field_and_purpose(smoke_data):
    smoke_data["ppo"]["batch_size"] = "four"
    smoke_data["ppo"]["bach_size"] = 4
    smoke_data["model"].pop("max_model_len")
    rules = rules_of(smoke_data)
    assert "Tasks per update" in rules["schema.ppo.batch_size"].expected
    assert rules["schema.ppo.bach_size"].fix.startswith("remove ppo.bach_size")
    assert rules["schema.model.max_model_len"].found == "missing"


def test_load_spec_raises_listing_all(smoke_data):
    smoke_data["schedule"]["total_updates"] = 3
    smoke_data["context"]["window"] = 4096
    smoke_data["ppo"]["critic_mini_batch_size"] = 3
    with pytest.raises(GateError) as info:
        load_spec(smoke_data)
    assert {v.rule for v in info.value.violations} == {
        "smoke.updates",
        "context.window",
        "ppo.critic_mini_batch_size",
    }


def test_constructing_an_invalid_spec_directly_fails(smoke_data):
    smoke_data["schedule"]["total_updates"] = 3
    with pytest.raises(ValueError, match=r"smoke\.updates"):
        RunSpec.model_validate(smoke_data)


def test_spec_is_frozen_and_hash_stable():
    spec = load_spec("smoke-local")
    with pytest.raises(ValueError):
        spec.seed = 1
    assert spec_sha256(spec) == spec_sha256(load_spec("smoke-local"))
    assert spec_sha256(spec) != spec_sha256(load_spec("soak-local"))


def test_unknown_config_name_lists_shipped():
    spec, violations = validate_config("no-such-config")
    assert spec is None and "smoke-local" in violations[0].expected


def test_bad_toml_is_reported(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    spec, violations = validate_config(bad)
    assert spec is None and violations[0].rule == "config.syntax"


# -- properties -------------------------------------------------------------------------------


def _independent_rules_hold(spec: RunSpec) -> bool:
    """A re-statement of DESIGN.md §4, written without the rule module."""
    ctx, length = spec.context, spec.model.max_model_len
    ok = (
        ctx.window == length
        and min(ctx.actor_train_tokens, ctx.critic_train_tokens, ctx.critic_infer_tokens) >= length
    )
    if spec.ppo is not None:
        ok &= spec.ppo.batch_size % max(spec.resources.trainer_gpus, 1) == 0
    if spec.phase == "smoke":
        ok &= spec.schedule.total_updates == 1
    if spec.phase == "soak":
        ok &= spec.schedule.total_updates in (2, 3)
    if spec.phase == "formal":
        s = spec.schedule
        ok &= s.total_batches == -1 and s.val_before_train and s.test_freq > 0 and s.save_freq > 0
        ok &= s.test_freq % s.save_freq == 0
    return ok


@given(
    phase=st.sampled_from(["smoke", "soak"]),
    updates=st.integers(-2, 30),
    gpus=st.integers(0, 8),
    batch=st.integers(1, 32),
    window=st.sampled_from([1024, 2048, 4096]),
    budget=st.sampled_from([1024, 2048, 4096, 8192]),
)
def test_any_spec_that_validates_satisfies_every_rule(phase, updates, gpus, batch, window, budget):
    data = read_config("smoke-local")
    data["phase"] = phase
    data["schedule"]["total_updates"] = updates
    data["resources"]["trainer_gpus"] = gpus
    data["ppo"].update(batch_size=batch, actor_mini_batch_size=1, critic_mini_batch_size=1)
    data["model"]["max_model_len"] = window
    data["context"].update(window=window, critic_infer_tokens=budget)
    spec, violations = validate_config(data)
    if spec is not None:
        assert _independent_rules_hold(spec)
        assert check_spec(spec) == []
    else:
        assert violations


@given(updates=st.integers(-100, 100).filter(lambda n: n not in (2, 3)))
def test_soak_outside_two_three_always_refused(updates):
    data = read_config("soak-local")
    data["schedule"]["total_updates"] = updates
    spec, violations = validate_config(data)
    assert spec is None and "soak.updates" in {v.rule for v in violations}


@given(gpus=st.integers(1, 16), batch=st.integers(1, 256))
def test_batch_not_divisible_by_world_size_always_refused(gpus, batch):
    data = read_config("smoke-4gpu")
    data["resources"]["trainer_gpus"] = gpus
    data["ppo"].update(batch_size=batch, actor_mini_batch_size=1, critic_mini_batch_size=1)
    spec, violations = validate_config(data)
    refused = "ppo.batch_size.world_size" in {v.rule for v in violations}
    assert refused == (batch % gpus != 0)
    if batch % gpus:
        assert spec is None


def test_real_task_configs_use_each_tasks_own_verifier_limit() -> None:
    """The seed's 180 s is for curation's oracle / NOP runs only: a SWE-bench task's own
    3000 s must hold in training and P0 (no override unless a config sets one)."""
    from forge_gates import AgentSpec

    assert AgentSpec(step_limit=1).verifier_timeout_s is None
    for name in ("p0-64k", "formal-5gpu", "soak-5gpu", "smoke-4gpu"):
        assert load_spec(name).agent.verifier_timeout_s is None, name
