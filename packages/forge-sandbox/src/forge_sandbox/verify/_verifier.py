"""The verifier: run a task's tests/test.sh in a sandbox and read the reward, or fail typed.

Steps (Harbor's order): discard stale reward files; upload tests/ to /tests; run
`bash /tests/test.sh` in the sandbox's working directory (/workspace locally, the image's
WORKDIR in a container) under the timeout (the caller's override, else task.toml's
[verifier] timeout_sec, else 180 s); copy /logs/verifier out; read reward.json first, else
reward.txt; then require evidence that the tests ran (`_evidence.py`); where the task lists its
FAIL_TO_PASS / PASS_TO_PASS tests, the reward is 0 unless each is seen passing in test.sh's
own output (`_testlist.py`: files the code under test can write do not decide). Every way of not
getting a reward raises a VerifierError subclass named as Harbor names it; none becomes 0.
A reward without evidence (0 or 1: fail closed) is `VerifierNoEvidenceError`, infrastructure.
"""

from __future__ import annotations

import asyncio
import json
import math
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from forge_gates import atomic_write_json, atomic_write_text
from forge_sandbox._errors import (
    AddTestsDirError,
    DownloadVerifierDirError,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    SandboxError,
    TaskLayoutError,
    VerifierFileSizeLimitError,
    VerifierNoEvidenceError,
    VerifierOOMError,
    VerifierOutputParseError,
    VerifierPidsLimitError,
    VerifierTimeoutError,
)
from forge_sandbox._protocol import Sandbox
from forge_sandbox._spec import ExecResult
from forge_sandbox._task import HarborTask
from forge_sandbox.verify._evidence import EVIDENCE_FIX, Evidence, find_evidence
from forge_sandbox.verify._testlist import TestReport, check_listed, listed_tests

REWARD_JSON = "/logs/verifier/reward.json"
REWARD_TXT = "/logs/verifier/reward.txt"
RESET_VERIFIER_DIR = [
    "sh",
    "-c",
    'd=/logs/verifier; mkdir -p /logs && [ ! -L "$d" ] && mkdir -p "$d"'
    ' && chmod -R u+rwX "$d" && find "$d" -mindepth 1 -delete && [ -z "$(ls -A "$d")" ]',
]
EVIDENCE_SCHEMA = "forge-sandbox/evidence@1"
TESTS_SCHEMA = "forge-sandbox/listed-tests@1"


class VerifierResult(BaseModel):
    """A reward from a finished test run (Harbor's `verifier_result` plus run facts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rewards: dict[str, float | int] = Field(
        description="Reward name -> value; reward.txt gives {'reward': value}."
    )
    exit_code: int = Field(description="test.sh's exit status (informational: the file decides).")
    duration_s: float = Field(ge=0, description="Seconds test.sh ran.")
    stdout: str = Field(description="test.sh's standard output (capped).")
    stderr: str = Field(description="test.sh's standard error (capped).")
    evidence: Evidence | None = Field(
        default=None,
        description="How the run showed its tests ran; None only when the caller waived it.",
    )
    tests: TestReport | None = Field(
        default=None,
        description="The listed FAIL_TO_PASS / PASS_TO_PASS tests as read from the output (the "
        "reward is 0 unless all passed); None when the task lists none.",
    )

    @property
    def reward(self) -> float | None:
        """`rewards['reward']`, else the only value, else None."""
        if "reward" in self.rewards:
            return float(self.rewards["reward"])
        if len(self.rewards) == 1:
            return float(next(iter(self.rewards.values())))
        return None


REWARD_RANGE = (0.0, 1.0)  # the contract: terminal reward 1 = solved, 0 = not (see README)


def _check_range(where: str, value: float) -> None:
    """A reward outside [0, 1] is a broken verifier (infrastructure), never a score."""
    low, high = REWARD_RANGE
    if not low <= value <= high:
        raise VerifierOutputParseError(
            f"{where}: expected a reward in [{low:g}, {high:g}] (1 = solved, 0 = not); found "
            f"{value!r}; fix: the task's tests/test.sh must write 1 or 0"
        )


def reward_files_named(tests_dir: Path) -> frozenset[str]:
    """The reward files the task's own tests/ scripts name (reward.json, reward.txt): when
    they name only one, only that one is read, so a reward.json the code under test plants
    beside a test.sh that writes reward.txt is not read first. Empty: Harbor's order."""
    named: set[str] = set()
    for path in sorted(tests_dir.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= 1 << 20:
            text = path.read_bytes()
            named |= {name for name in ("reward.json", "reward.txt") if name.encode() in text}
    return frozenset(named) if len(named) == 1 else frozenset()


def parse_rewards(verifier_dir: Path, only: frozenset[str] = frozenset()) -> dict[str, float | int]:
    """Read `reward.json` (first) or `reward.txt` from a copied /logs/verifier folder; `only`
    (a task whose scripts name one of them) reads that one alone."""
    json_path, txt_path = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    read_json = only != {"reward.txt"}  # the file a task's scripts do not name is never read
    read_txt = only != {"reward.json"}
    if read_json and json_path.is_file():
        if json_path.stat().st_size == 0:
            raise RewardFileEmptyError(f"reward file is empty: {json_path}")
        try:
            rewards = json.loads(json_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise VerifierOutputParseError(
                f"reward.json: expected a JSON object of numbers; found invalid JSON ({exc})"
            ) from exc
        if not isinstance(rewards, dict) or not rewards:
            raise VerifierOutputParseError(
                f"reward.json: expected a non-empty JSON object of numbers; found {rewards!r}"
            )
        for key, value in rewards.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise VerifierOutputParseError(
                    f"reward.json: expected a number for {key!r}; found {value!r}"
                )
            if not math.isfinite(value):
                raise VerifierOutputParseError(
                    f"reward.json: expected a finite number for {key!r}; found {value!r}"
                )
            _check_range(f"reward.json {key!r}", value)
        return rewards
    if read_txt and txt_path.is_file():
        if txt_path.stat().st_size == 0:
            raise RewardFileEmptyError(f"reward file is empty: {txt_path}")
        text = txt_path.read_text(encoding="utf-8", errors="replace")
        try:
            value = float(text)
        except ValueError as exc:
            raise VerifierOutputParseError(
                f"reward.txt: expected one number; found {text[:80]!r}"
            ) from exc
        if not math.isfinite(value):
            raise VerifierOutputParseError(f"reward.txt: expected a finite number; found {value}")
        _check_range("reward.txt", value)
        return {"reward": value}
    raise RewardFileNotFoundError(
        f"no reward file: expected {REWARD_JSON} or {REWARD_TXT} after test.sh; found neither; "
        "fix: the task's tests/test.sh must write one of them"
    )


def _no_evidence(rewards: dict[str, float | int], truncated: bool) -> VerifierNoEvidenceError:
    cut = (
        " (its output passed the sandbox's max_output_bytes and was cut: raise it)"
        if truncated
        else ""
    )
    return VerifierNoEvidenceError(
        f"verifier: expected evidence that the tests ran (SWE-bench test-output markers, a "
        f"test runner's result lines or summary, a junit or CTRF report) with its reward; "
        f"found rewards {rewards} without any{cut}: a broken environment, not a verdict "
        f"(retried in curation, never a rejection); fix: {EVIDENCE_FIX}"
    )


def _check_run(run: ExecResult, sandbox: Sandbox, timeout: float) -> None:
    """A run that did not finish as written (timeout, OOM, pids, SIGXFSZ) has no reward."""
    if run.timed_out:
        raise VerifierTimeoutError(
            f"verifier: expected tests/test.sh to finish within {timeout:g} s; found it still "
            "running (killed with its process tree); fix: raise the verifier timeout "
            "(--verifier-timeout, or [verifier] timeout_sec in task.toml)"
        )
    if run.oom_killed:
        raise VerifierOOMError(
            f"verifier: expected tests/test.sh to run to completion; found a process of it "
            f"OOM-killed at the sandbox's {sandbox.spec.memory_mb} MiB memory limit (exit "
            f"{run.exit_code}): any reward it wrote first is not trusted; fix: raise the "
            "task's memory_mb, or see what filled memory (/tmp is charged to it)"
        )
    if run.pids_limit_hit:
        raise VerifierPidsLimitError(
            f"verifier: expected tests/test.sh to run to completion; found a process of it "
            f"refused a fork or thread at the sandbox's pids_max={sandbox.spec.pids_max} "
            f"(exit {run.exit_code}): any reward it wrote is not trusted; fix: raise the "
            "sandbox's pids_max (SandboxSpec.pids_max), or see what the tests spawn"
        )
    if run.file_size_limit_hit:
        raise VerifierFileSizeLimitError(
            f"verifier: expected tests/test.sh to run to completion; found it killed by "
            f"SIGXFSZ, a file written past file_size_mb={sandbox.spec.file_size_mb} (exit "
            f"{run.exit_code}): any reward it wrote is not trusted; fix: raise the sandbox's "
            "file_size_mb, or see what the tests write"
        )


def _write_outputs(out: Path, run: ExecResult) -> None:
    atomic_write_text(out / "test-stdout.txt", run.stdout)
    atomic_write_text(out / "test-stderr.txt", run.stderr)


def _grade_listed(
    task: HarborTask,
    run: ExecResult,
    sandbox: Sandbox,
    rewards: dict[str, float | int],
    out: Path,
) -> tuple[TestReport | None, dict[str, float | int]]:
    """The listed tests' report (None when the task lists none) and the rewards: all 0 unless
    every listed test was seen passing; a cut output cannot be trusted (no verdict)."""
    ids = listed_tests(task.path)
    if not ids:
        return None, rewards
    report = check_listed(ids, run.stdout, run.stderr)
    atomic_write_json(
        out / "listed-tests.json", {"schema_version": TESTS_SCHEMA, **report.model_dump()}
    )
    if run.output_truncated:
        raise VerifierNoEvidenceError(
            f"verifier: expected every result line of the task's {len(ids)} listed "
            f"tests in test.sh's output; found it cut at max_output_bytes="
            f"{sandbox.spec.max_output_bytes} (a flood can hide failing lines): no "
            "verdict; fix: raise the sandbox's max_output_bytes, or make the tests quieter"
        )
    if report.result_lines == 0:
        raise VerifierNoEvidenceError(
            f"verifier: expected result lines of the task's {len(ids)} listed tests in test.sh's "
            "output (pytest -rA or -v, unittest -v, SymPy's bin/test, go test -v, cargo test); "
            "found no test's result line in any of these: a runner whose per-test lines Forge "
            "does not read (jest, mocha, Maven), or a run that ended before its tests: no "
            "verdict (with the agent's change, its 0); fix: make test.sh print one of these "
            "formats, or list no tests in the task (its reward then decides)"
        )
    return report, rewards if report.all_passed else {name: 0.0 for name in rewards}


async def run_verifier(
    sandbox: Sandbox,
    task: HarborTask,
    *,
    timeout_s: float | None = None,
    logs_dir: Path | None = None,
    require_evidence: bool = True,
) -> VerifierResult:
    """Run `task`'s tests in `sandbox` (already started) and return its reward.

    logs_dir: where /logs/verifier is copied, with test-stdout.txt and test-stderr.txt
    (a trial's `verifier/` folder) and evidence.json; a temporary folder when None.
    require_evidence: a reward without evidence that the tests ran raises
    VerifierNoEvidenceError (False only for a caller that judges the run otherwise).
    """
    timeout = timeout_s or task.verifier_timeout_s
    if not (task.tests_dir / "test.sh").is_file():
        raise TaskLayoutError(
            f"task {task.name}: expected tests/test.sh; found none; fix: add the test script"
        )
    # 1. stale rewards and reports from an agent must not count: the folder is made writable
    #    again (the agent's uid owns it: `chmod 555` must not keep a planted reward) and emptied,
    #    and the verifier goes on only when it is an empty real folder
    reset = await sandbox.exec(RESET_VERIFIER_DIR, cwd="/")
    if reset.exit_code != 0:
        raise DownloadVerifierDirError(
            "expected /logs/verifier to be an empty folder before the tests; found it could not "
            f"be reset (a symlink, or files that cannot be removed): {reset.stderr[-300:]!r}"
        )
    # 2. tests/ -> /tests
    try:
        await sandbox.upload(task.tests_dir, "/tests")
    except (SandboxError, OSError) as exc:
        raise AddTestsDirError(f"uploading {task.tests_dir} to /tests failed: {exc}") from exc
    # 3. run the tests
    run = await sandbox.exec(
        ["bash", "/tests/test.sh"], cwd=None, env=task.verifier_env, timeout_s=timeout
    )
    with tempfile.TemporaryDirectory(prefix="forge-verifier-") as scratch:
        out = Path(logs_dir) if logs_dir is not None else Path(scratch) / "verifier"
        out.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(_write_outputs, out, run)
        _check_run(run, sandbox, timeout)
        # 4. /logs/verifier -> out, then 5. the reward
        try:
            await sandbox.download("/logs/verifier", out)
        except (SandboxError, OSError) as exc:
            raise DownloadVerifierDirError(f"copying /logs/verifier out failed: {exc}") from exc
        rewards = parse_rewards(out, reward_files_named(task.tests_dir))
        # 6. the evidence that the tests ran (a reward without it is no verdict)
        evidence = find_evidence(run.stdout, run.stderr, out)
        if evidence is None and require_evidence:
            raise _no_evidence(rewards, run.output_truncated)
        if evidence is not None:
            await asyncio.to_thread(
                atomic_write_json,
                out / "evidence.json",
                {"schema_version": EVIDENCE_SCHEMA, **evidence.model_dump()},
            )
        # 7. a task that lists its tests: each must be seen passing on the pipe we read
        report, rewards = _grade_listed(task, run, sandbox, rewards, out)
    return VerifierResult(
        evidence=evidence,
        tests=report,
        rewards=rewards,
        exit_code=run.exit_code,
        duration_s=run.duration_s,
        stdout=run.stdout,
        stderr=run.stderr,
    )
