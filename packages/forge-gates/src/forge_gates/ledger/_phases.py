"""Phase contracts: the ordered gates a complete run of each phase must show in its ledger.

A contract is a list of requirements, each a gate name with how many times it must appear.
Ordering rule: every occurrence of a requirement comes after every occurrence of the previous
(present) requirement. Gates not named in the contract are allowed anywhere. Any `*_FAILED`
record fails the run. The contract depends on the spec where the seeds make it conditional
(warm start, separated rollout, number of soak updates, epochs, P0 panels). A training run
(smoke, soak, formal) starts with `PROVENANCE_RECORDED` and its `provenance.json` must be
there, well-formed and without a recorded failure (P0 runs record it too; not required).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from forge_gates._checks import GateError, Violation
from forge_gates.files._atomic import atomic_write_json
from forge_gates.ledger._gates import Gate
from forge_gates.ledger._ledger import GateRecord, read_ledger
from forge_gates.ledger._provenance import check_provenance
from forge_gates.spec._config import spec_sha256
from forge_gates.spec._schedule import schedule_steps
from forge_gates.spec._spec import Phase, RunSpec

CONFIG_SUMMARY = "config-summary.json"
SUMMARY_SCHEMA = "forge-gates/config-summary@1"


TRAINING_PHASES = ("smoke", "soak", "formal")  # provenance.json required (`verify_run`)


class Requirement(NamedTuple):
    """A gate that must appear between `min_count` and `max_count` times (None = unbounded)."""

    gate: str
    min_count: int = 1
    max_count: int | None = 1


def _warm_start(spec: RunSpec | None) -> list[Requirement]:
    if spec is None or spec.checkpoint.warm_start is None:
        return []
    return [
        Requirement(Gate.PPO_WARM_START_CONFIG_PASSED),
        Requirement(Gate.PPO_ACTOR_LORA_LOAD_PASSED),
        Requirement(Gate.PPO_WARM_START_LOAD_PASSED),
    ]


def _ranks(spec: RunSpec | None) -> list[Requirement]:
    """A distributed trainer (verl) proves, once its workers are built, that every rank holds
    exactly the weights it was given (fresh or warm-started): after any warm start."""
    if spec is None or spec.backends.trainer != "verl":
        return []
    return [Requirement(Gate.PPO_TRAINER_RANKS_LOAD_PASSED)]


def _separated(spec: RunSpec | None) -> list[Requirement]:
    """A run served by vLLM (always so with a separate rollout GPU) proves its topology as
    launched: recorded once the trainer is built (its Ray resources), before any budget gate."""
    if spec is None or (spec.resources.rollout_gpus == 0 and spec.backends.inference != "vllm"):
        return []
    return [Requirement(Gate.PPO_SEPARATED_ROLLOUT_GATE_PASSED)]


def phase_contract(phase: Phase, spec: RunSpec | None = None) -> list[Requirement]:
    """The ordered requirements for `phase` (refined by `spec` when given)."""
    # every phase reads a frozen task set: verified (tamper check) before any rollout
    start = [Requirement(Gate.RUN_SPEC_GATE_PASSED), Requirement(Gate.DATA_SPLIT_VERIFIED)]
    if phase in TRAINING_PHASES:  # a training run's folder records its provenance first
        start.insert(0, Requirement(Gate.PROVENANCE_RECORDED))
    if phase in ("smoke", "soak"):
        updates = (1, 1) if phase == "smoke" else (2, 3)
        if spec is not None and spec.schedule.total_updates is not None:
            updates = (spec.schedule.total_updates, spec.schedule.total_updates)
        return [
            *start,
            Requirement(Gate.PPO_CONTEXT_GUARD_PASSED),
            *_warm_start(spec),
            *_ranks(spec),
            *_separated(spec),
            # read back from the built trainer, so after the models (and any warm start)
            Requirement(Gate.PPO_SMOKE_TOKEN_BUDGET_GATE_PASSED),
            Requirement(Gate.PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED),
            Requirement(Gate.PPO_TRAINER_SETTINGS_GATE_PASSED),
            Requirement(Gate.PPO_SMOKE_UPDATE_PASSED, *updates),
            Requirement(Gate.PPO_COMPACT_CHECKPOINT_PASSED),
            Requirement(Gate.PPO_SMOKE_PASSED if phase == "smoke" else Gate.PPO_SOAK_PASSED),
        ]
    if phase == "formal":
        epochs = (1, None) if spec is None else (spec.schedule.total_epochs,) * 2
        return [
            *start,
            Requirement(Gate.PPO_FORMAL_PHASE_GATE_PASSED),
            Requirement(Gate.TRAIN_VALIDATION_SUBSET_GATE_PASSED),
            Requirement(Gate.TRAIN_FULL_DATASET_GATE_PASSED),
            Requirement(Gate.PPO_CONTEXT_GUARD_PASSED),
            *_warm_start(spec),
            *_ranks(spec),
            *_separated(spec),
            Requirement(Gate.PPO_CRITIC_TOKEN_BUDGET_GATE_PASSED),
            Requirement(Gate.PPO_TRAINER_SETTINGS_GATE_PASSED),
            Requirement(Gate.TRAIN_EPOCH_COVERAGE, *epochs),
            Requirement(Gate.PPO_FINAL_CHECKPOINT_PASSED),
        ]  # plus one validation / checkpoint gate per scheduled step (`_schedule_rules`)
    if phase == "p0":
        panels: tuple[int, int | None] = (1, None)
        if spec is not None and spec.eval is not None:
            n = len(spec.eval.panels) * len(spec.eval.candidates)
            panels = (n, n)
        return [
            *start,
            Requirement(Gate.P0_PROTOCOL_GATE_PASSED),
            Requirement(Gate.P0_NEAR_WINDOW_PROBE_PASSED),
            Requirement(Gate.P0_ENDPOINT_GATE_PASSED),
            Requirement(Gate.P0_PANEL_COMPLETE, *panels),
            Requirement(Gate.P0_COMPARISON_PASSED),
        ]
    raise ValueError(f"phase must be one of smoke, soak, formal, p0; found {phase!r}")


def verify_ledger(
    records: list[GateRecord], phase: Phase, spec: RunSpec | None = None
) -> list[Violation]:
    """Every way `records` falls short of the phase contract (empty = complete run)."""
    violations = [
        Violation(
            rule=f"gate.failed.{r.gate}",
            expected="no failed gate in a complete run",
            found=f"{r.gate} at {r.at} {json.dumps(r.fields, default=str)}",
            fix="fix the cause shown in the run's log and rerun into a new folder",
        )
        for r in records
        if r.failed
    ]
    positions: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        positions.setdefault(record.gate, []).append(index)
    previous: Requirement | None = None
    for req in phase_contract(phase, spec):
        seen = positions.get(req.gate, [])
        if not seen:
            violations.append(
                Violation(
                    rule=f"gate.missing.{req.gate}",
                    expected=f"{req.gate} in the {phase} ledger",
                    found="absent",
                    fix="the run stopped before this gate or skipped it; see its log",
                )
            )
            continue
        upper = "any" if req.max_count is None else req.max_count
        if len(seen) < req.min_count or (req.max_count is not None and len(seen) > req.max_count):
            violations.append(
                Violation(
                    rule=f"gate.count.{req.gate}",
                    expected=f"{req.gate} {req.min_count}..{upper} times",
                    found=f"{len(seen)} times",
                    fix="a run records each update/epoch gate once; rerun into a new folder",
                )
            )
        if previous is not None and max(positions[previous.gate]) > min(seen):
            violations.append(
                Violation(
                    rule=f"gate.order.{req.gate}",
                    expected=f"{req.gate} after every {previous.gate}",
                    found=f"{req.gate} at line {min(seen) + 1}, {previous.gate} at line "
                    f"{max(positions[previous.gate]) + 1}",
                    fix="gates ran out of order: the pipeline is broken or the ledger was edited",
                )
            )
        previous = req
    if phase == "formal" and spec is not None:
        violations += _schedule_rules(records, spec)
    return violations


VALIDATION_GATE = Gate.PPO_VALIDATION_PASSED
CHECKPOINT_GATE = Gate.PPO_COMPACT_CHECKPOINT_PASSED


def _schedule_rules(records: list[GateRecord], spec: RunSpec) -> list[Violation]:
    """A formal ledger holds one validation gate per validation step and one checkpoint gate
    per save step of the schedule (computed from the recorded batches and the spec)."""
    dataset = [r for r in records if r.gate == Gate.TRAIN_FULL_DATASET_GATE_PASSED]
    if not dataset or not isinstance(dataset[-1].fields.get("batches_per_epoch"), int):
        return []  # the missing dataset gate is already a violation
    s = spec.schedule
    total = dataset[-1].fields["batches_per_epoch"] * s.total_epochs
    try:
        validation, saves = schedule_steps(
            total,
            test_freq=s.test_freq,
            save_freq=s.save_freq,
            validate_before_train=s.val_before_train,
        )
    except ValueError:
        return []  # spec rules refuse such a formal spec
    out = []
    for gate, expected in ((VALIDATION_GATE, validation), (CHECKPOINT_GATE, saves)):
        steps = [r.fields.get("step") for r in records if r.gate == gate]
        missing = sorted(set(expected) - set(steps))
        extra = sorted({x for x in steps if x not in expected}, key=str)
        repeated = sorted({x for x in steps if steps.count(x) > 1}, key=str)
        if missing or extra or repeated:
            out.append(
                Violation(
                    rule=f"schedule.{gate}",
                    expected=f"{gate} once at each of steps {list(expected)} ({total} steps)",
                    found=f"missing {missing}, unexpected {extra}, repeated {repeated}",
                    fix="the run skipped a scheduled validation or save; rerun into a new folder",
                )
            )
    return out


def new_run_dir(spec: RunSpec, run_dir: Path | None, runs_root: Path) -> Path:
    """A fresh run folder (default `runs_root/<phase>/<name>-<UTC time>`); an existing non-empty
    one is refused with GateError: runs never share a folder."""
    if run_dir is None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        run_dir = runs_root / spec.phase / f"{spec.name}-{stamp}"
    if run_dir.exists() and any(run_dir.iterdir()):
        raise GateError(
            "RUN_DIR",
            [
                Violation(
                    rule="run_dir.new",
                    expected="a new or empty run folder",
                    found=f"{run_dir} holds files",
                    fix="pass a new --run-dir (or none)",
                )
            ],
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def write_config_summary(run_dir: str | os.PathLike[str], spec: RunSpec) -> Path:
    """Write `<run_dir>/config-summary.json`: the resolved spec and its SHA-256 (atomic)."""
    payload = {"schema": SUMMARY_SCHEMA, "sha256": spec_sha256(spec), "spec": spec.summary()}
    return atomic_write_json(Path(run_dir) / CONFIG_SUMMARY, payload)


def read_config_summary(run_dir: str | os.PathLike[str]) -> RunSpec | None:
    """The spec recorded in `<run_dir>/config-summary.json`, or None when there is none."""
    path = Path(run_dir) / CONFIG_SUMMARY
    if not path.is_file():
        return None
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
        spec = RunSpec.model_validate(payload["spec"])
    except (json.JSONDecodeError, KeyError, TypeError, ValidationError) as exc:
        raise GateError(
            "CONFIG_SUMMARY",
            [
                Violation(
                    rule="config_summary.valid",
                    expected=f"a {SUMMARY_SCHEMA} file",
                    found=f"{path}: {str(exc).splitlines()[0]}",
                    fix="the summary was edited or truncated; rerun into a new folder",
                )
            ],
        ) from exc
    if payload.get("sha256") != spec_sha256(spec):
        raise GateError(
            "CONFIG_SUMMARY",
            [
                Violation(
                    rule="config_summary.sha256",
                    expected=spec_sha256(spec),
                    found=str(payload.get("sha256")),
                    fix="the summary was edited after the run started; do not trust this run",
                )
            ],
        )
    return spec


def verify_run(run_dir: str | os.PathLike[str], phase: Phase) -> list[Violation]:
    """Check a run folder's ledger against its phase contract (spec from config-summary.json)."""
    try:
        records = read_ledger(run_dir)
        spec = read_config_summary(run_dir)
    except GateError as exc:
        return list(exc.violations)
    violations: list[Violation] = []
    if spec is not None and spec.phase != phase:
        violations.append(
            Violation(
                rule="phase.match",
                expected=f"a {phase} run",
                found=f"config-summary.json says phase {spec.phase}",
                fix=f"verify with --phase {spec.phase}",
            )
        )
        spec = None
    if phase in TRAINING_PHASES:  # the file PROVENANCE_RECORDED points at, as it is now
        violations += check_provenance(run_dir)[0]
    return violations + verify_ledger(records, phase, spec)
