"""The error table: one test per entry, written independently of the table, and the rules
that apply it (an agent-side failure with a valid reward keeps its reward)."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

from forge_eval import ERROR_TABLE, __version__, classify
from forge_eval._outcomes import NO_REWARD, NO_REWARD_AFTER_AGENT_ERROR, RULES

# (category, is a timeout) per exception type, as this package promises it in README.md
EXPECTED = {
    "EnvironmentStartTimeoutError": ("infra", True),
    "AgentSetupTimeoutError": ("infra", True),
    "VerifierTimeoutError": ("infra", True),
    "CancelledError": ("infra", False),
    "AddTestsDirError": ("infra", False),
    "DownloadVerifierDirError": ("infra", False),
    "RewardFileNotFoundError": ("infra", False),
    "RewardFileEmptyError": ("infra", False),
    "VerifierOutputParseError": ("infra", False),
    "RewardOutOfRangeError": ("infra", False),
    "ApiError": ("infra", False),
    "ApiRateLimitError": ("infra", False),
    "ApiUsageLimitError": ("infra", False),
    "ApiInternalServerError": ("infra", False),
    "ApiOverloadedError": ("infra", False),
    "ApiConnectionClosedError": ("infra", False),
    "ApiResponseStalledError": ("infra", False),
    "UnknownApiError": ("infra", False),
    "ApiProviderResourceNotFoundError": ("infra", False),
    "AgentAuthenticationError": ("infra", False),
    "ModelNotFoundError": ("infra", False),
    "NetworkConnectionError": ("infra", False),
    "SandboxError": ("infra", False),
    "SandboxUnavailableError": ("infra", False),
    "SandboxStartError": ("infra", False),
    "SandboxStateError": ("infra", False),
    "SandboxPathError": ("infra", False),
    "SandboxTransferError": ("infra", False),
    "VerifierError": ("infra", False),
    "VerifierNoEvidenceError": ("infra", False),
    "VerifierOOMError": ("infra", False),
    "VerifierPidsLimitError": ("infra", False),
    "VerifierFileSizeLimitError": ("infra", False),
    "SandboxOOMError": ("infra", False),
    "AgentResourceLimitError": ("agent", False),
    "AgentCausedFailure": ("agent", False),
    "TaskLayoutError": ("infra", False),
    "SandboxInitChangedError": ("infra", False),
    "VerifierLimitError": ("infra", False),
    "KubernetesError": ("infra", False),
    "KubernetesAPIError": ("infra", False),
    "PodNameConflictError": ("infra", False),
    "KubernetesUnavailableError": ("infra", False),
    "ManifestError": ("infra", False),
    "ImageNotBuiltError": ("infra", False),
    "ImagePullBackOffError": ("infra", False),
    "PodPendingTimeoutError": ("infra", True),
    "PodOOMKilledError": ("infra", False),
    "PodEvictedError": ("infra", False),
    "PodFailedError": ("infra", False),
    "SeccompProfileError": ("infra", False),
    "ExecStreamLostError": ("infra", False),
    "ExecProtocolError": ("infra", False),
    "DockerError": ("infra", False),
    "DockerUnavailableError": ("infra", False),
    "DockerDaemonError": ("infra", False),
    "ImagePullError": ("infra", False),
    "ImageBuildError": ("infra", False),
    "ImageNotAllowedError": ("infra", False),
    "ContainerStartError": ("infra", False),
    "ContainerOOMKilledError": ("infra", False),
    "ContainerDiedError": ("infra", False),
    "RegistryError": ("infra", False),
    "UpstreamError": ("infra", False),
    NO_REWARD: ("infra", False),
    NO_REWARD_AFTER_AGENT_ERROR: ("infra", False),
    "AgentTimeoutError": ("agent", True),
    "NonZeroAgentExitCodeError": ("agent", False),
    "ContextWindowExceededError": ("agent", False),
    "ContextLengthExceededError": ("agent", False),
    "OutputTokenExceededError": ("agent", False),
    "OutputLengthExceededError": ("agent", False),
    "AgentSafetyRefusalError": ("agent", False),
    "ContextExhausted": ("agent", False),
}


def test_table_has_exactly_the_tested_entries() -> None:
    names = [rule.exception_type for rule in ERROR_TABLE]
    assert len(names) == len(set(names)), "duplicate entry in ERROR_TABLE"
    assert set(names) == set(EXPECTED), "every table entry needs a line in EXPECTED (and README)"


@pytest.mark.parametrize("rule", ERROR_TABLE, ids=lambda r: r.exception_type)
def test_entry(rule) -> None:
    category, timeout = EXPECTED[rule.exception_type]
    assert (rule.category, rule.timeout) == (category, timeout)
    assert rule.reason and rule.raised_by
    if rule.exception_type in (NO_REWARD, NO_REWARD_AFTER_AGENT_ERROR):
        return  # derived by classify, never recorded by Harbor
    with_reward = classify(rule.exception_type, 1.0, verifier_started=True)
    without = classify(rule.exception_type, None, verifier_started=False)
    assert with_reward.timeout is timeout and with_reward.mapped
    if category == "infra":
        # reward invalid whatever the verifier said
        assert (with_reward.category, with_reward.reward) == ("infra", None)
        assert (without.category, without.reward) == ("infra", None)
    else:
        # the agent's own outcome: a valid reward is kept, none means failure
        assert (with_reward.category, with_reward.reward) == ("agent", 1.0)
        assert (without.category, without.reward) == ("agent", 0.0)
    assert with_reward.counted_type == rule.exception_type


def test_clean_trial_keeps_its_reward() -> None:
    outcome = classify(None, 0.0, verifier_started=True)
    assert (outcome.category, outcome.reward, outcome.counted_type) == ("ok", 0.0, None)


def test_missing_reward_without_exception_is_infra() -> None:
    outcome = classify(None, None, verifier_started=True)
    assert (outcome.category, outcome.reward, outcome.counted_type) == ("infra", None, NO_REWARD)


def test_agent_error_then_silent_verifier_is_infra() -> None:
    # Harbor verifies after AgentTimeoutError; no reward then means the verifier failed
    outcome = classify("AgentTimeoutError", None, verifier_started=True)
    assert (outcome.category, outcome.counted_type) == ("infra", NO_REWARD_AFTER_AGENT_ERROR)
    assert outcome.timeout


def test_unmapped_type_keeps_a_valid_reward_and_is_infra_without() -> None:
    kept = classify("SomeNewError", 1.0, verifier_started=True)
    lost = classify("SomeNewError", None, verifier_started=False)
    assert (kept.category, kept.reward, kept.mapped) == ("agent", 1.0, False)
    assert (lost.category, lost.reward, lost.mapped) == ("infra", None, False)
    assert classify("SandboxBootTimeoutError", None, verifier_started=False).timeout


def test_every_error_forge_sandbox_defines_is_in_the_table_as_infra() -> None:
    """A new SandboxError (e.g. of the Kubernetes backend) must get its row: unmapped, a trial
    that still has a reward would be scored as an agent outcome."""
    sandbox = pytest.importorskip("forge_sandbox", reason="forge-sandbox is not installed")
    pytest.importorskip("kubernetes", reason="install forge-sandbox[kubernetes]")
    pytest.importorskip("docker", reason="install forge-sandbox[docker]")
    importlib.import_module("forge_sandbox.kubernetes")
    importlib.import_module("forge_sandbox.images")
    importlib.import_module("forge_sandbox.docker")

    def subclasses(cls: type) -> set[type]:
        return {c for sub in cls.__subclasses__() for c in {sub, *subclasses(sub)}}

    names = {c.__name__ for c in subclasses(sandbox.SandboxError) | {sandbox.SandboxError}}
    assert sorted(names - set(RULES)) == []
    assert {n for n in names if RULES[n].category == "agent"} == {"AgentTimeoutError"}
    kubernetes = {n for n in names if RULES[n].raised_by == "forge-sandbox.kubernetes"}
    assert "PodOOMKilledError" in kubernetes and "ExecStreamLostError" in kubernetes
    docker = {n for n in names if RULES[n].raised_by == "forge-sandbox.docker"}
    assert "ContainerOOMKilledError" in docker and "ImagePullError" in docker
    assert RULES["PodPendingTimeoutError"].timeout


def test_rules_index_matches_table() -> None:
    assert {rule.exception_type: rule for rule in ERROR_TABLE} == RULES


def test_readme_documents_every_entry() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for rule in ERROR_TABLE:
        row = f"| {rule.exception_type} | {rule.category} | {'yes' if rule.timeout else 'no'} |"
        assert row in readme, f"README.md lacks the row for {rule.exception_type}"


def test_version_matches_pyproject() -> None:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert tomllib.loads(pyproject.read_text())["project"]["version"] == __version__


@pytest.mark.parametrize("reward", [1.5, -1.0, 2.0, -0.01])
@pytest.mark.parametrize("exception", [None, "AgentTimeoutError", "SomethingUnmapped"])
def test_reward_outside_0_1_is_an_infra_error_never_solved(
    reward: float, exception: str | None
) -> None:
    outcome = classify(exception, reward, True)
    assert (outcome.category, outcome.reward, outcome.counted_type) == (
        "infra",
        None,
        "RewardOutOfRangeError",
    )


@pytest.mark.parametrize("reward", [0.0, 0.5, 1.0])
def test_rewards_in_0_1_are_kept(reward: float) -> None:
    assert classify(None, reward, True).reward == reward
