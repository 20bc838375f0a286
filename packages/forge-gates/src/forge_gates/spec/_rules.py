"""Every cross-field rule of DESIGN.md §4 for run specs, as one function returning violations.

`check_spec` never stops early: a spec with three broken rules yields three violations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from forge_gates._checks import Check, Violation
from forge_gates.spec._memory import check_memory_knobs

if TYPE_CHECKING:
    from forge_gates.spec._spec import RunSpec

TRAINING_PHASES = ("smoke", "soak", "formal")
SOAK_UPDATES = (2, 3)
DEMO_POLICY = "demo-policy"  # the warm start forge-ppo builds by SFT on the demo train split


def check_spec(spec: RunSpec) -> list[Violation]:
    """Return every rule `spec` breaks (empty when it is valid)."""
    check = Check("RUN_SPEC")
    _check_context(spec, check)
    _check_resources(spec, check)
    _check_backends(spec, check)
    _check_warm_start(spec, check)
    check_memory_knobs(spec, check)
    if spec.phase in TRAINING_PHASES:
        _check_training(spec, check)
    if spec.phase == "smoke":
        _check_smoke(spec, check)
    elif spec.phase == "soak":
        _check_soak(spec, check)
    elif spec.phase == "formal":
        _check_formal(spec, check)
    elif spec.phase == "p0":
        _check_p0(spec, check)
    return check.violations


def _check_context(spec: RunSpec, check: Check) -> None:
    window, length = spec.context.window, spec.model.max_model_len
    check.require(
        window == length,
        rule="context.window",
        expected=f"context guard window == model.max_model_len ({length})",
        found=f"context.window = {window}",
        fix=f"set context.window = {length}",
    )
    check.require(
        spec.context.reserve < window,
        rule="context.reserve",
        expected=f"context.reserve < context.window ({window})",
        found=f"context.reserve = {spec.context.reserve}",
        fix="lower context.reserve (the seed system used 256)",
    )
    for name in ("actor_train_tokens", "critic_train_tokens", "critic_infer_tokens"):
        budget = getattr(spec.context, name)
        check.require(
            budget >= length,
            rule=f"budget.{name}",
            expected=f"context.{name} >= model.max_model_len ({length})",
            found=f"context.{name} = {budget}",
            fix=f"set context.{name} >= {length}, or lower model.max_model_len",
        )
    cap = spec.agent.max_tokens
    if cap is not None:
        check.require(
            cap <= window - spec.context.reserve,
            rule="agent.max_tokens",
            expected=f"agent.max_tokens <= window - reserve ({window - spec.context.reserve})",
            found=f"agent.max_tokens = {cap}",
            fix="lower agent.max_tokens or leave it unset",
        )


def _check_resources(spec: RunSpec, check: Check) -> None:
    res = spec.resources
    if res.rollout_gpus > 0 and spec.phase in TRAINING_PHASES:
        check.require(
            res.trainer_gpus > 0,
            rule="resources.separated_rollout",
            expected="a separate rollout GPU only beside trainer GPUs (trainer_gpus > 0)",
            found=f"trainer_gpus = {res.trainer_gpus}, rollout_gpus = {res.rollout_gpus}",
            fix="set resources.trainer_gpus, or rollout_gpus = 0 for a CPU run",
        )
        check.require(
            res.rollout_replicas == 1,
            rule="resources.rollout_replicas",
            expected="one inference replica on the separate rollout GPU",
            found=f"rollout_replicas = {res.rollout_replicas}",
            fix="set resources.rollout_replicas = 1",
        )
    check.require(
        not res.async_training,
        rule="resources.async_training",
        expected="synchronous training (async = false)",
        found="async_training = true",
        fix="set resources.async_training = false",
    )


def _check_backends(spec: RunSpec, check: Check) -> None:
    """The topology fields must be served by a backend that uses them (no field ignored)."""
    res, back = spec.resources, spec.backends
    if spec.phase in TRAINING_PHASES:
        check.require(
            res.trainer_gpus == 0 or back.trainer == "verl",
            rule="backends.trainer",
            expected="trainer GPUs used by the distributed trainer (backends.trainer = verl)",
            found=f"trainer_gpus = {res.trainer_gpus} with backends.trainer = {back.trainer!r} "
            "(one process: every trainer GPU but one would be ignored)",
            fix="set backends.trainer = 'verl', or trainer_gpus = 0 for the local trainer",
        )
        check.require(
            res.trainer_cpu_ranks == 0 or (back.trainer == "verl" and res.trainer_gpus == 0),
            rule="backends.trainer.cpu_ranks",
            expected="trainer_cpu_ranks only for the verl trainer without trainer GPUs",
            found=f"trainer_cpu_ranks = {res.trainer_cpu_ranks}, trainer_gpus = "
            f"{res.trainer_gpus}, backends.trainer = {back.trainer!r}",
            fix="set backends.trainer = 'verl' and trainer_gpus = 0, or trainer_cpu_ranks = 0",
        )
    check.require(
        res.rollout_gpus == 0 or back.inference == "vllm",
        rule="backends.inference",
        expected="rollout_gpus > 0 served by vLLM (backends.inference = vllm)",
        found=f"rollout_gpus = {res.rollout_gpus} with backends.inference = {back.inference!r} "
        "(the local server runs in-process and would ignore them)",
        fix="set backends.inference = 'vllm', or rollout_gpus = 0 for the local server",
    )


def _check_warm_start(spec: RunSpec, check: Check) -> None:
    """The word `demo-policy` is built on the demo split's train tasks only (forge-ppo)."""
    if spec.checkpoint.warm_start != DEMO_POLICY:
        return
    data = spec.data
    check.require(
        data.tasks == "demo" and data.train_split == "train",
        rule="checkpoint.warm_start.demo_policy",
        expected="checkpoint.warm_start = 'demo-policy' with data.tasks = 'demo' and "
        "data.train_split = 'train' (it is an SFT on the demo split's train tasks)",
        found=f"data.tasks = {data.tasks!r}, data.train_split = {data.train_split!r}",
        fix="warm start from a checkpoint of your own (forge-ppo train --warm-start CKPT, a "
        "global_step_N folder), or build one with SFT on your tasks first (forge-ppo "
        "sft-format); or train on data.tasks = 'demo'",
    )


def _check_training(spec: RunSpec, check: Check) -> None:
    check.require(
        spec.eval is None,
        rule="phase.eval_section",
        expected=f"no [eval] section in a {spec.phase} spec",
        found="an [eval] section",
        fix="remove [eval]; paired evaluation is the p0 phase",
    )
    check.require(
        spec.lora.actor_lora_only,
        rule="lora.actor_lora_only",
        expected="actor checkpoints hold the LoRA adapter only",
        found="lora.actor_lora_only = false",
        fix="set lora.actor_lora_only = true",
    )
    if spec.ppo is None:
        check.add(
            Violation(
                rule="phase.ppo_section",
                expected=f"a [ppo] section in a {spec.phase} spec",
                found="none",
                fix="add [ppo] with batch_size and mini-batch sizes",
            )
        )
        return
    ppo, world = spec.ppo, spec.resources.trainer_world_size
    if ppo.reference == "warm_start":
        check.require(
            spec.backends.trainer == "local",
            rule="ppo.reference.trainer",
            expected="ppo.reference = 'warm_start' with the local trainer (verl's reference "
            "pass is the actor with its adapter off)",
            found=f"backends.trainer = {spec.backends.trainer!r}",
            fix="set ppo.reference = 'base', or backends.trainer = 'local'",
        )
        check.require(
            spec.checkpoint.warm_start is not None,
            rule="ppo.reference.warm_start",
            expected="checkpoint.warm_start with ppo.reference = 'warm_start' (KL to the policy "
            "the run starts from)",
            found="no checkpoint.warm_start",
            fix="set checkpoint.warm_start, or ppo.reference = 'base'",
        )
    check.require(
        ppo.batch_size % world == 0,
        rule="ppo.batch_size.world_size",
        expected=f"ppo.batch_size divisible by the trainer world size ({world})",
        found=f"ppo.batch_size = {ppo.batch_size} ({ppo.batch_size} % {world} = "
        f"{ppo.batch_size % world})",
        fix=f"use a multiple of {world} for ppo.batch_size",
    )
    for name in ("actor_mini_batch_size", "critic_mini_batch_size"):
        mini = getattr(ppo, name)
        check.require(
            mini <= ppo.batch_size and ppo.batch_size % mini == 0,
            rule=f"ppo.{name}",
            expected=f"ppo.{name} divides ppo.batch_size ({ppo.batch_size})",
            found=f"ppo.{name} = {mini}",
            fix=f"pick a divisor of {ppo.batch_size}",
        )
    check.require(
        spec.checkpoint.actor_max_mib <= spec.checkpoint.total_max_mib
        and spec.checkpoint.critic_max_mib <= spec.checkpoint.total_max_mib,
        rule="checkpoint.caps",
        expected="actor and critic caps each <= the total cap",
        found=f"actor {spec.checkpoint.actor_max_mib} MiB, critic "
        f"{spec.checkpoint.critic_max_mib} MiB, total {spec.checkpoint.total_max_mib} MiB",
        fix="raise checkpoint.total_max_mib or lower the part caps",
    )


def _check_fixed_batch(spec: RunSpec, check: Check) -> None:
    ids, size = spec.data.task_ids, spec.ppo.batch_size if spec.ppo else None
    if ids and size is not None:
        check.require(
            len(ids) == size,
            rule="data.task_ids",
            expected=f"the fixed batch holds ppo.batch_size ({size}) task ids",
            found=f"{len(ids)} task ids",
            fix="list exactly batch_size ids, or none to take the first batch of the split",
        )


def _check_smoke(spec: RunSpec, check: Check) -> None:
    check.require(
        spec.schedule.total_updates == 1,
        rule="smoke.updates",
        expected="schedule.total_updates = 1 (a smoke is exactly one update)",
        found=f"schedule.total_updates = {spec.schedule.total_updates}",
        fix="set schedule.total_updates = 1; use the soak phase for 2-3 updates",
    )
    _check_fixed_batch(spec, check)


def _check_soak(spec: RunSpec, check: Check) -> None:
    updates = spec.schedule.total_updates
    check.require(
        updates in SOAK_UPDATES,
        rule="soak.updates",
        expected="schedule.total_updates in {2, 3}",
        found=f"schedule.total_updates = {updates}",
        fix="a soak only proves the loop: use 2 or 3 updates, and the formal phase for more",
    )
    _check_fixed_batch(spec, check)


def _check_formal(spec: RunSpec, check: Check) -> None:
    s = spec.schedule
    rules = [
        (
            s.total_updates is None,
            "formal.total_updates",
            "unset (derived from the split)",
            f"{s.total_updates}",
            "remove schedule.total_updates",
        ),
        (
            s.total_batches == -1,
            "formal.total_batches",
            "-1 (every batch of the split)",
            f"{s.total_batches}",
            "set schedule.total_batches = -1",
        ),
        (
            s.train_task_limit == 0,
            "formal.train_task_limit",
            "0 (the whole train split)",
            f"{s.train_task_limit}",
            "set schedule.train_task_limit = 0",
        ),
        (
            not spec.data.task_ids,
            "formal.task_ids",
            "no fixed task ids",
            f"{len(spec.data.task_ids)} ids",
            "remove data.task_ids",
        ),
        (
            s.val_before_train,
            "formal.val_before_train",
            "true",
            "false",
            "set schedule.val_before_train = true",
        ),
        (
            s.test_freq > 0,
            "formal.test_freq",
            "> 0",
            f"{s.test_freq}",
            "set schedule.test_freq (e.g. 10)",
        ),
        (
            s.save_freq > 0,
            "formal.save_freq",
            "> 0",
            f"{s.save_freq}",
            "set schedule.save_freq (e.g. 10)",
        ),
        (
            s.save_freq > 0 and s.test_freq % s.save_freq == 0,
            "formal.validation_checkpoint",
            "every validation step has a checkpoint (test_freq a multiple of save_freq)",
            f"test_freq = {s.test_freq}, save_freq = {s.save_freq}",
            "make schedule.test_freq a multiple of schedule.save_freq",
        ),
        (
            s.validation_tasks > 0,
            "formal.validation_tasks",
            "> 0 (fixed-seed subset)",
            f"{s.validation_tasks}",
            "set schedule.validation_tasks (e.g. 21)",
        ),
        (
            s.full_validation_tasks >= s.validation_tasks > 0,
            "formal.full_validation_tasks",
            f">= validation_tasks ({s.validation_tasks})",
            f"{s.full_validation_tasks}",
            "set schedule.full_validation_tasks to the validation split size (e.g. 42)",
        ),
        (
            s.expected_train_tasks is not None,
            "formal.expected_train_tasks",
            "the train split size the run must cover",
            "unset",
            "set schedule.expected_train_tasks (e.g. 187)",
        ),
    ]
    for ok, rule, expected, found, fix in rules:
        check.require(ok, rule=rule, expected=expected, found=found, fix=fix)


# DESIGN §4 "P0 protocol (production)": every value, checked on the spec and on what a P0 run
# actually uses (`forge_eval.p0`); a difference is one violation (expected, found, fix)
P0_PRODUCTION: dict[str, Any] = {
    "window": 65536,
    "step_limit": 200,
    "temperature": 1.0,
    "top_p": None,
    "max_tokens": None,
    "seed": 20260822,
    "attempts": 1,
    "retries": 0,
    "panels": {"test38": 38, "verified27": 27},
    "concurrency": 8,
    "near_window_probe": True,
}
_P0_FIXES = {
    "window": "set model.max_model_len = context.window = 65536 (and every token budget)",
    "step_limit": "set agent.step_limit = 200",
    "temperature": "set agent.temperature = 1.0",
    "top_p": "remove agent.top_p (the provider's default top-p)",
    "max_tokens": "remove agent.max_tokens (the provider decides)",
    "seed": "set seed = 20260822",
    "attempts": "set eval.attempts = 1",
    "retries": "set eval.retries = 0",
    "panels": "list exactly the panels test38 (size = 38) and verified27 (size = 27)",
    "concurrency": "set resources.concurrency = 8",
    "near_window_probe": "set eval.near_window_probe = true",
}
# already P0 rules for every protocol (p0.retries, p0.max_tokens, p0.near_window_probe)
_GENERIC_P0 = ("max_tokens", "retries", "near_window_probe")


def p0_spec_values(spec: RunSpec) -> dict[str, Any]:
    """The P0 protocol values a spec asks for, keyed as `P0_PRODUCTION`."""
    ev = spec.eval
    return {
        "window": spec.context.window,
        "step_limit": spec.agent.step_limit,
        "temperature": spec.agent.temperature,
        "top_p": spec.agent.top_p,
        "max_tokens": spec.agent.max_tokens,
        "seed": spec.seed,
        "attempts": ev.attempts if ev else None,
        "retries": ev.retries if ev else None,
        "panels": {p.name: p.size for p in ev.panels} if ev else {},
        "concurrency": spec.resources.concurrency,
        "near_window_probe": ev.near_window_probe if ev else None,
    }


def check_p0_production(
    found: Mapping[str, Any], keys: Sequence[str] = tuple(P0_PRODUCTION)
) -> list[Violation]:
    """Every value of `found` (keyed as `P0_PRODUCTION`) that differs from the production P0
    protocol, one violation each (rule `p0.production.<key>`); a missing key is a difference."""
    out = []
    for key in keys:
        expected, value = P0_PRODUCTION[key], found.get(key, "missing")
        if value != expected:
            out.append(
                Violation(
                    rule=f"p0.production.{key}",
                    expected=f"{key} = {expected!r} (the production P0 protocol)",
                    found=f"{key} = {value!r}",
                    fix=f"{_P0_FIXES[key]}, or eval.protocol = 'local' for a run that does not "
                    "claim the production protocol",
                )
            )
    return out


def _check_p0(spec: RunSpec, check: Check) -> None:
    check.require(
        spec.ppo is None,
        rule="p0.no_training",
        expected="no [ppo] section: P0 compares checkpoints, it does not train",
        found="a [ppo] section",
        fix="remove [ppo]",
    )
    if spec.eval is None:
        check.add(
            Violation(
                rule="p0.eval_section",
                expected="an [eval] section (panels, candidates, attempts)",
                found="none",
                fix="add [eval] with panels and two candidates",
            )
        )
        return
    ev = spec.eval
    panels, candidates = list(ev.panel_names), list(ev.candidate_names)
    bases = [c.name for c in ev.candidates if c.base]
    rules = [
        (ev.retries == 0, "p0.retries", "0", f"{ev.retries}", "set eval.retries = 0"),
        (
            ev.near_window_probe,
            "p0.near_window_probe",
            "true",
            "false",
            "set eval.near_window_probe = true",
        ),
        (
            spec.agent.max_tokens is None,
            "p0.max_tokens",
            "unset (provider decides)",
            f"{spec.agent.max_tokens}",
            "remove agent.max_tokens",
        ),
        (
            len(set(panels)) == len(panels),
            "p0.panels",
            "distinct panel names",
            f"{panels}",
            "list each panel once",
        ),
        (
            candidates[0] != candidates[1],
            "p0.candidates",
            "two different candidates",
            f"{candidates}",
            "name two different checkpoints",
        ),
        (
            len(bases) <= 1,
            "p0.base",
            "at most one base candidate (base = true)",
            f"base = true on {bases}",
            "mark only the base model with base = true; the other is a checkpoint",
        ),
    ]
    for ok, rule, expected, found, fix in rules:
        check.require(ok, rule=rule, expected=expected, found=found, fix=fix)
    for panel in ev.panels:
        check.require(
            panel.split is not None or panel.tasks is not None,
            rule=f"p0.panel.{panel.name}",
            expected="a split of a frozen split (split = 'test', tasks = split folder or unset "
            "for data.tasks) or a task folder (tasks = DIR)",
            found="neither split nor tasks",
            fix=f"add split = ... or tasks = ... to the panel {panel.name!r}",
        )
    if ev.protocol == "production":
        keys = [k for k in P0_PRODUCTION if k not in _GENERIC_P0]
        for violation in check_p0_production(p0_spec_values(spec), keys):
            check.add(violation)
