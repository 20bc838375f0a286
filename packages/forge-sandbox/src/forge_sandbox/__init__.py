"""forge_sandbox: the Sandbox protocol, a real local backend (bubblewrap + cgroups), the
verifier, the oracle/NOP agents, and Harbor-layout jobs.

Run commands in a pod-like sandbox (state in /workspace and /tmp persists until stop)::

    import asyncio
    from forge_sandbox import LocalSandbox, SandboxSpec

    async def main():
        spec = SandboxSpec(workspace="tasks/fix-add/environment/workspace", memory_mb=512)
        async with LocalSandbox(spec) as sandbox:
            result = await sandbox.exec("python3 -m unittest -q", timeout_s=60)
            print(result.exit_code, result.timed_out, result.oom_killed)

    asyncio.run(main())

Verify a Harbor task (a reward, or a typed error such as VerifierTimeoutError; never 0)::

    from forge_sandbox import load_task, run_verifier
    task = load_task("tasks/fix-add")
    async with LocalSandbox(task.sandbox_spec()) as sandbox:
        result = await run_verifier(sandbox, task)   # result.reward

Oracle/NOP validation into a Harbor job directory: `forge-sandbox oracle TASKS --out JOB`, or
`await run_job(discover_tasks(TASKS), JOB, "oracle")`. The Harbor environment plugin lives in
`forge_sandbox.harbor` (optional; Python >= 3.12 with harbor installed) and is never imported
by this package.

Pick the backend by name (`backends.sandbox`): `make_sandbox = open_backend("kubernetes",
config="k8s.toml")` (forge_sandbox.kubernetes: one pod per trial) or `open_backend("local")`.
"""

from forge_sandbox._agents import AgentRun, run_agent, run_nop, run_oracle
from forge_sandbox._backends import open_backend
from forge_sandbox._errors import (
    AddTestsDirError,
    AgentTimeoutError,
    DownloadVerifierDirError,
    EnvironmentStartTimeoutError,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    SandboxError,
    SandboxOOMError,
    SandboxPathError,
    SandboxStartError,
    SandboxStateError,
    SandboxTransferError,
    SandboxUnavailableError,
    TaskLayoutError,
    VerifierError,
    VerifierFileSizeLimitError,
    VerifierLimitError,
    VerifierNoEvidenceError,
    VerifierOOMError,
    VerifierOutputParseError,
    VerifierPidsLimitError,
    VerifierTimeoutError,
)
from forge_sandbox._job import JobSummary, Progress, run_job, trial_name_for
from forge_sandbox._probe import Probe
from forge_sandbox._protocol import Sandbox, SandboxFactory
from forge_sandbox._spec import ExecResult, KillReport, SandboxSpec
from forge_sandbox._task import HarborTask, discover_tasks, load_task, task_checksum
from forge_sandbox._trial import (
    AgentCausedFailure,
    AgentOutcomeError,
    AgentReport,
    AgentResourceLimitError,
    TrialAgent,
    reward_of,
    run_trial,
)
from forge_sandbox.local._bwrap import host_problems as local_host_problems
from forge_sandbox.local._cgroup_detect import detect_cgroups
from forge_sandbox.local._cgroups import CgroupLimits
from forge_sandbox.local._doctor import run_doctor
from forge_sandbox.local._sandbox import LocalSandbox
from forge_sandbox.verify._audit import CHANGE_AUDIT_RULES
from forge_sandbox.verify._evidence import Evidence, find_evidence
from forge_sandbox.verify._verifier import VerifierResult, parse_rewards, run_verifier

__all__ = [
    "AddTestsDirError",
    "AgentCausedFailure",
    "AgentOutcomeError",
    "AgentReport",
    "AgentResourceLimitError",
    "AgentRun",
    "AgentTimeoutError",
    "CHANGE_AUDIT_RULES",
    "CgroupLimits",
    "DownloadVerifierDirError",
    "EnvironmentStartTimeoutError",
    "Evidence",
    "ExecResult",
    "HarborTask",
    "JobSummary",
    "KillReport",
    "Progress",
    "SandboxFactory",
    "LocalSandbox",
    "Probe",
    "RewardFileEmptyError",
    "RewardFileNotFoundError",
    "Sandbox",
    "SandboxError",
    "SandboxOOMError",
    "SandboxPathError",
    "SandboxSpec",
    "SandboxStartError",
    "SandboxStateError",
    "SandboxTransferError",
    "SandboxUnavailableError",
    "TaskLayoutError",
    "TrialAgent",
    "VerifierError",
    "VerifierFileSizeLimitError",
    "VerifierLimitError",
    "VerifierNoEvidenceError",
    "VerifierOutputParseError",
    "VerifierPidsLimitError",
    "VerifierResult",
    "VerifierOOMError",
    "VerifierTimeoutError",
    "detect_cgroups",
    "local_host_problems",
    "discover_tasks",
    "find_evidence",
    "load_task",
    "open_backend",
    "parse_rewards",
    "reward_of",
    "run_agent",
    "run_doctor",
    "run_job",
    "run_nop",
    "run_oracle",
    "run_trial",
    "run_verifier",
    "task_checksum",
    "trial_name_for",
]
