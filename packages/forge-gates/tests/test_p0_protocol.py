"""The P0 protocol as shipped (DESIGN §4 "P0 protocol (production)"): a spec that claims the
production protocol has every production value, each difference named (expected, found, fix);
panels name a split or a task folder and a size; the base model is marked, not named."""

from __future__ import annotations

from typing import Any

import pytest

from forge_gates import P0_PRODUCTION, check_p0_production, load_spec, read_config, validate_config


def violations_of(data: dict[str, Any]) -> dict[str, Any]:
    spec, violations = validate_config(data)
    assert spec is None, "expected the spec to be refused"
    return {v.rule: v for v in violations}


def test_shipped_production_config_claims_and_has_the_production_protocol() -> None:
    spec = load_spec("p0-64k")
    ev = spec.eval
    assert ev is not None and ev.protocol == "production"
    assert [(p.name, p.split, p.tasks, p.size) for p in ev.panels] == [
        ("test38", "test", None, 38),  # the frozen split's test split (data.tasks)
        ("verified27", None, "tasks/swebench-verified-27", 27),  # a folder of task folders
    ]
    assert [(c.name, c.base) for c in ev.candidates] == [("sft", True), ("parent-step20", False)]
    local = load_spec("p0-local").eval
    assert local is not None and local.protocol == "local"
    assert [(p.name, p.split, p.size) for p in local.panels] == [
        ("validation", "validation", 3),
        ("test", "test", 3),
    ]
    assert [(c.name, c.base) for c in local.candidates] == [("base", True), ("smoke", False)]


def _window(data: dict[str, Any]) -> None:
    data["model"]["max_model_len"] = data["context"]["window"] = 32768


PRODUCTION_CHANGES = [
    ("window", _window, "window = 32768"),
    ("step_limit", lambda d: d["agent"].update(step_limit=100), "step_limit = 100"),
    ("temperature", lambda d: d["agent"].update(temperature=0.7), "temperature = 0.7"),
    ("top_p", lambda d: d["agent"].update(top_p=0.95), "top_p = 0.95"),
    ("seed", lambda d: d.update(seed=7), "seed = 7"),
    ("attempts", lambda d: d["eval"].update(attempts=4), "attempts = 4"),
    ("concurrency", lambda d: d["resources"].update(concurrency=4), "concurrency = 4"),
    (
        "panels",
        lambda d: d["eval"]["panels"][1].update(size=26),
        "panels = {'test38': 38, 'verified27': 26}",
    ),
    (
        "panels",
        lambda d: d["eval"].update(panels=d["eval"]["panels"][:1]),
        "panels = {'test38': 38}",
    ),
]


@pytest.mark.parametrize(("key", "change", "found"), PRODUCTION_CHANGES)
def test_every_production_value_is_enforced(key: str, change: Any, found: str) -> None:
    data = read_config("p0-64k")
    change(data)
    rules = violations_of(data)
    assert list(rules) == [f"p0.production.{key}"]
    v = rules[f"p0.production.{key}"]
    assert v.expected == f"{key} = {P0_PRODUCTION[key]!r} (the production P0 protocol)"
    assert v.found == found
    assert "eval.protocol = 'local'" in v.fix


def test_every_difference_is_listed_at_once() -> None:
    data = read_config("p0-local")
    data["eval"]["protocol"] = "production"
    rules = violations_of(data)
    assert list(rules) == [
        "p0.production.window",
        "p0.production.step_limit",
        "p0.production.panels",
        "p0.production.concurrency",
    ]
    assert rules["p0.production.window"].found == "window = 2048"
    assert rules["p0.production.step_limit"].fix.startswith("set agent.step_limit = 200")
    assert rules["p0.production.panels"].found == "panels = {'validation': 3, 'test': 3}"


def test_local_protocol_checks_only_the_generic_rules() -> None:
    data = read_config("p0-64k")
    data["eval"]["protocol"] = "local"
    data["agent"]["step_limit"] = 10
    data["seed"] = 1
    spec, violations = validate_config(data)
    assert violations == [] and spec is not None
    data["eval"]["retries"] = 1  # generic: any protocol
    assert list(violations_of(data)) == ["p0.retries"]


def test_generic_rules_are_not_reported_twice_under_production() -> None:
    data = read_config("p0-64k")
    data["eval"]["retries"] = 1
    data["agent"]["max_tokens"] = 512
    assert sorted(violations_of(data)) == ["p0.max_tokens", "p0.retries"]


def test_check_p0_production_on_the_values_used() -> None:
    assert check_p0_production(dict(P0_PRODUCTION)) == []
    used = {**P0_PRODUCTION, "top_p": 1.0, "panels": {"test38": 38, "verified27": 25}}
    del used["seed"]
    found = {v.rule: v.found for v in check_p0_production(used)}
    assert found == {
        "p0.production.top_p": "top_p = 1.0",
        "p0.production.seed": "seed = 'missing'",
        "p0.production.panels": "panels = {'test38': 38, 'verified27': 25}",
    }


def test_a_panel_names_a_split_or_a_task_folder() -> None:
    data = read_config("p0-local")
    data["eval"]["panels"][0] = {"name": "validation", "size": 3}
    v = violations_of(data)["p0.panel.validation"]
    assert v.found == "neither split nor tasks" and "split = ..." in v.fix


def test_bare_names_still_mean_a_split_and_a_checkpoint() -> None:
    data = read_config("p0-local")
    data["eval"].update(panels=["validation", "test"], candidates=["base", "smoke"])
    spec, violations = validate_config(data)
    assert violations == [] and spec is not None and spec.eval is not None
    assert [(p.name, p.split, p.tasks) for p in spec.eval.panels] == [
        ("validation", "validation", None),
        ("test", "test", None),
    ]
    # the name 'base' is not special: only base = true marks the base model
    assert [c.base for c in spec.eval.candidates] == [False, False]


def test_at_most_one_base_candidate() -> None:
    data = read_config("p0-local")
    data["eval"]["candidates"] = [{"name": "a", "base": True}, {"name": "b", "base": True}]
    v = violations_of(data)["p0.base"]
    assert v.found == "base = true on ['a', 'b']"
