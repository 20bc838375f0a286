"""One table maps every known exception type to infrastructure error or agent outcome.

An infrastructure error makes the reward invalid: the attempt counts as a failure in the
benchmark Pass@1 and is left out of the scoreable Pass@1. An agent outcome is the policy's
own result: a valid reward is kept, and without one the attempt is a failure (reward 0).

The groups follow Harbor's own error policy: Harbor runs the verifier after
`AgentTimeoutError` and `NonZeroAgentExitCodeError` (reward kept), aborts the trial on
everything else, never retries timeouts or reward-file errors, and classifies provider
failures (`ApiError` subclasses, network, auth) apart from the agent's own exits.
Forge's sandbox and rollout record their exceptions the same way; their types are listed too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Category = Literal["infra", "agent"]

NO_REWARD = "NoReward"
"""Pseudo type: the trial ended without an exception but its verifier left no reward."""

NO_REWARD_AFTER_AGENT_ERROR = "NoRewardAfterAgentError"
"""Pseudo type: an agent outcome, then verification started and produced no reward."""

REWARD_OUT_OF_RANGE = "RewardOutOfRangeError"
"""Pseudo type: the recorded reward is outside [0, 1] (the binary contract): a broken verifier."""


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """How one exception type is scored."""

    exception_type: str
    category: Category
    timeout: bool
    raised_by: str
    reason: str


_T = ErrorRule
ERROR_TABLE: tuple[ErrorRule, ...] = (
    # --- infrastructure: the environment, the verifier or the model provider failed ---
    _T("EnvironmentStartTimeoutError", "infra", True, "trial/trial.py",
       "environment did not build/start in time"),
    _T("AgentSetupTimeoutError", "infra", True, "trial/trial.py",
       "agent install/setup in the environment timed out"),
    _T("VerifierTimeoutError", "infra", True, "trial/trial.py",
       "verifier did not finish; no valid reward"),
    _T("CancelledError", "infra", False, "asyncio (job cancelled)",
       "trial cancelled before it finished"),
    _T("AddTestsDirError", "infra", False, "verifier/verifier.py",
       "tests could not be copied into the environment"),
    _T("DownloadVerifierDirError", "infra", False, "verifier/verifier.py",
       "verifier output could not be downloaded"),
    _T("RewardFileNotFoundError", "infra", False, "verifier/verifier.py",
       "no reward.json / reward.txt written"),
    _T("RewardFileEmptyError", "infra", False, "verifier/verifier.py", "reward file empty"),
    _T("VerifierOutputParseError", "infra", False, "verifier/verifier.py",
       "reward file unparsable"),
    _T("ApiError", "infra", False, "agents/installed/base.py", "model provider API error"),
    _T("ApiRateLimitError", "infra", False, "agents/installed/base.py", "provider rate limit"),
    _T("ApiUsageLimitError", "infra", False, "agents/installed/base.py",
       "provider usage quota exhausted"),
    _T("ApiInternalServerError", "infra", False, "agents/installed/base.py", "provider HTTP 500"),
    _T("ApiOverloadedError", "infra", False, "agents/installed/base.py",
       "provider overloaded/unavailable"),
    _T("ApiConnectionClosedError", "infra", False, "agents/installed/base.py",
       "provider closed the connection mid-response"),
    _T("ApiResponseStalledError", "infra", False, "agents/installed/base.py",
       "provider stream stalled"),
    _T("UnknownApiError", "infra", False, "agents/installed/base.py",
       "unclassified provider API error"),
    _T("ApiProviderResourceNotFoundError", "infra", False, "agents/installed/base.py",
       "provider resource not found"),
    _T("AgentAuthenticationError", "infra", False, "agents/installed/base.py",
       "agent not logged in / missing API key"),
    _T("ModelNotFoundError", "infra", False, "agents/installed/base.py",
       "model unknown or unavailable to the account"),
    _T("NetworkConnectionError", "infra", False, "agents/installed/base.py",
       "network/TLS transport failure"),
    # Forge's own sandbox and rollout (same trial layout, same exception_type field)
    _T("SandboxError", "infra", False, "forge-sandbox", "sandbox failure (base class)"),
    _T("SandboxUnavailableError", "infra", False, "forge-sandbox",
       "isolation missing on the host (bwrap, cgroups)"),
    _T("SandboxStartError", "infra", False, "forge-sandbox", "sandbox did not come up"),
    _T("SandboxStateError", "infra", False, "forge-sandbox", "sandbox used outside its life"),
    _T("SandboxPathError", "infra", False, "forge-sandbox", "transfer path refused"),
    _T("SandboxTransferError", "infra", False, "forge-sandbox", "upload/download failed"),
    _T("VerifierError", "infra", False, "forge-sandbox", "verifier produced no reward"),
    _T("VerifierNoEvidenceError", "infra", False, "forge-sandbox",
       "a reward without evidence that the tests ran (markers, test report): no verdict"),
    _T("VerifierOOMError", "infra", False, "forge-sandbox",
       "a verifier process was OOM-killed: its reward is not trusted"),
    _T("VerifierPidsLimitError", "infra", False, "forge-sandbox",
       "the verifier hit pids_max (fork refused): its reward is not trusted"),
    _T("VerifierFileSizeLimitError", "infra", False, "forge-sandbox",
       "the verifier was killed by SIGXFSZ (file_size_mb): its reward is not trusted"),
    _T("SandboxOOMError", "infra", False, "forge-sandbox",
       "an agent command was OOM-killed at the sandbox's memory limit"),
    _T("TaskLayoutError", "infra", False, "forge-sandbox", "task directory malformed"),
    _T("SandboxInitChangedError", "infra", False, "forge-sandbox",
       "the sandbox's init processes changed (a trial scores it 0 as AgentCausedFailure)"),
    _T("VerifierLimitError", "infra", False, "forge-sandbox",
       "the verifier hit a sandbox limit (base class): its reward is not trusted"),
    # the Kubernetes backend and the image pipeline (each a SandboxError, never reward 0)
    _T("KubernetesError", "infra", False, "forge-sandbox.kubernetes",
       "Kubernetes backend failure (base class)"),
    _T("KubernetesAPIError", "infra", False, "forge-sandbox.kubernetes",
       "API server error, or 5xx/429 past the bounded retries"),
    _T("PodNameConflictError", "infra", False, "forge-sandbox.kubernetes",
       "409 on create: a pod of that name exists (name collision)"),
    _T("KubernetesUnavailableError", "infra", False, "forge-sandbox.kubernetes",
       "client not installed, or no kubeconfig / backend config"),
    _T("ManifestError", "infra", False, "forge-sandbox.kubernetes",
       "a rendered manifest failed strict schema validation or Forge's checks"),
    _T("ImageNotBuiltError", "infra", False, "forge-sandbox.kubernetes",
       "the task has no built image (no public fallback)"),
    _T("ImagePullBackOffError", "infra", False, "forge-sandbox.kubernetes",
       "the pod's image could not be pulled (ImagePullBackOff / ErrImagePull)"),
    _T("PodPendingTimeoutError", "infra", True, "forge-sandbox.kubernetes",
       "the pod was not Ready within the start timeout (Pending)"),
    _T("PodOOMKilledError", "infra", False, "forge-sandbox.kubernetes",
       "the pod's container was OOMKilled (exit 137) at its memory limit"),
    _T("PodEvictedError", "infra", False, "forge-sandbox.kubernetes",
       "the kubelet evicted the pod (node pressure)"),
    _T("PodFailedError", "infra", False, "forge-sandbox.kubernetes",
       "the pod's container ended while the trial still needed it"),
    _T("SeccompProfileError", "infra", False, "forge-sandbox.kubernetes",
       "the node lacks Forge's seccomp profile (forge-sandbox k8s seccomp --daemonset)"),
    _T("ExecStreamLostError", "infra", False, "forge-sandbox.kubernetes",
       "the exec websocket dropped before the exit status (never success)"),
    _T("ExecProtocolError", "infra", False, "forge-sandbox.kubernetes",
       "the status channel carried no exit code (kubelet/runtime error)"),
    # the Docker backend (each a SandboxError, never reward 0)
    _T("DockerError", "infra", False, "forge-sandbox.docker",
       "Docker backend failure (base class)"),
    _T("DockerUnavailableError", "infra", False, "forge-sandbox.docker",
       "the SDK is not installed, or no daemon answers at DOCKER_HOST"),
    _T("DockerDaemonError", "infra", False, "forge-sandbox.docker",
       "the daemon answered with an error (5xx, a conflict) or the connection broke"),
    _T("ImagePullError", "infra", False, "forge-sandbox.docker",
       "the task's image is not on the daemon and could not be pulled"),
    _T("ImageBuildError", "infra", False, "forge-sandbox.docker",
       "environment/Dockerfile failed to build (the log's tail in the message)"),
    _T("ImageNotAllowedError", "infra", False, "forge-sandbox.docker",
       "a base image without a private-registry rewrite where the run requires one"),
    _T("ContainerStartError", "infra", False, "forge-sandbox.docker",
       "the container was created but did not come up"),
    _T("ContainerOOMKilledError", "infra", False, "forge-sandbox.docker",
       "the container itself was OOMKilled at its memory limit"),
    _T("ContainerDiedError", "infra", False, "forge-sandbox.docker",
       "the container stopped while the trial still needed it"),
    _T("RegistryError", "infra", False, "forge-sandbox.images",
       "the private registry refused or did not answer"),
    _T("UpstreamError", "infra", False, "forge-rollout",
       "model endpoint answered with an error"),
    _T(NO_REWARD, "infra", False, "forge-eval (derived)",
       "no exception recorded, but verifier_result has no reward"),
    _T(NO_REWARD_AFTER_AGENT_ERROR, "infra", False, "forge-eval (derived)",
       "agent outcome, then the verifier started and left no reward"),
    _T(REWARD_OUT_OF_RANGE, "infra", False, "forge-eval (derived)",
       "the recorded reward is outside [0, 1]: the verifier is broken, nothing is scored"),
    # --- agent outcomes: the policy's own behaviour; a valid reward is kept ---
    _T("AgentTimeoutError", "agent", True, "trial/trial.py",
       "agent used its whole time budget (verifier still runs)"),
    _T("NonZeroAgentExitCodeError", "agent", False, "agents/installed/base.py",
       "agent process exited non-zero (verifier still runs)"),
    _T("ContextWindowExceededError", "agent", False, "agents/installed/base.py",
       "agent exhausted the context window"),
    _T("ContextLengthExceededError", "agent", False, "llms/base.py",
       "agent exhausted the context window"),
    _T("OutputTokenExceededError", "agent", False, "agents/installed/base.py",
       "response exceeded the output token limit"),
    _T("OutputLengthExceededError", "agent", False, "llms/base.py",
       "response exceeded the output length limit"),
    _T("AgentSafetyRefusalError", "agent", False, "agents/installed/base.py",
       "model refused on safety grounds (a real outcome)"),
    _T("ContextExhausted", "agent", False, "forge-rollout",
       "gateway refused the next call: context window used up"),
    _T("AgentResourceLimitError", "agent", False, "forge-sandbox",
       "agent's processes hit a limit (memory, pids_max, file_size_mb); verifier still runs"),
    _T("AgentCausedFailure", "agent", False, "forge-sandbox",
       "the verifier failed on the agent's change in a fresh sandbox (a hang, a limit, no "
       "reward or evidence, a change that cannot be carried): reward 0, a verdict"),
)  # fmt: skip
RULES: dict[str, ErrorRule] = {rule.exception_type: rule for rule in ERROR_TABLE}


@dataclass(frozen=True, slots=True)
class Outcome:
    """One attempt after the table was applied."""

    category: Literal["ok", "infra", "agent"]
    reward: float | None
    """The reward that counts (None for an infrastructure error: reward invalid)."""
    counted_type: str | None
    """The exception type the attempt is counted under (recorded or pseudo), or None."""
    mapped: bool
    """False when the recorded exception type is not in the table."""
    timeout: bool


def classify(exception_type: str | None, reward: float | None, verifier_started: bool) -> Outcome:
    """Apply the table to one attempt.

    exception_type: `exception_info.exception_type` or None; reward: the verifier's valid
    reward or None; verifier_started: the trial's `verifier.started_at` is set.
    Unmapped types keep a valid reward (the verifier ran) and are infrastructure errors
    without one (nothing can be scored); callers warn about them. A reward outside [0, 1]
    is never valid: an infrastructure error (RewardOutOfRangeError), never solved.
    """
    if reward is not None and not 0.0 <= reward <= 1.0:
        return Outcome("infra", None, REWARD_OUT_OF_RANGE, True, False)
    if exception_type is None:
        if reward is None:
            return Outcome("infra", None, NO_REWARD, True, False)
        return Outcome("ok", reward, None, True, False)
    rule = RULES.get(exception_type)
    if rule is None:
        timeout = exception_type.endswith("TimeoutError")
        if reward is None:
            return Outcome("infra", None, exception_type, False, timeout)
        return Outcome("agent", reward, exception_type, False, timeout)
    if rule.category == "infra":
        return Outcome("infra", None, exception_type, True, rule.timeout)
    if reward is not None:
        return Outcome("agent", reward, exception_type, True, rule.timeout)
    if verifier_started:
        return Outcome("infra", None, NO_REWARD_AFTER_AGENT_ERROR, True, rule.timeout)
    return Outcome("agent", 0.0, exception_type, True, rule.timeout)
