"""The verifier: rewards from reward.json / reward.txt, and every typed error (never reward 0)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from forge_sandbox import (
    AddTestsDirError,
    AgentTimeoutError,
    DownloadVerifierDirError,
    LocalSandbox,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    VerifierError,
    VerifierOutputParseError,
    VerifierResult,
    VerifierTimeoutError,
    load_task,
    parse_rewards,
    run_oracle,
    run_verifier,
)

TaskFactory = Callable[..., Path]


def verify(task_dir: Path, timeout_s: float | None = None, logs: Path | None = None):
    task = load_task(task_dir)

    async def main() -> VerifierResult:
        async with LocalSandbox(task.sandbox_spec()) as sandbox:
            return await run_verifier(sandbox, task, timeout_s=timeout_s, logs_dir=logs)

    return asyncio.run(main())


# -- parse_rewards: pure ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"reward.txt": "1\n"}, {"reward": 1.0}),
        ({"reward.txt": " 0.25 "}, {"reward": 0.25}),
        ({"reward.json": '{"reward": 1, "style": 0.5}'}, {"reward": 1, "style": 0.5}),
        ({"reward.json": '{"reward": 0}', "reward.txt": "1"}, {"reward": 0}),  # json first
    ],
)
def test_parse_rewards(tmp_path: Path, files: dict[str, str], expected: dict) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert parse_rewards(tmp_path) == expected


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({}, RewardFileNotFoundError),
        ({"reward.txt": ""}, RewardFileEmptyError),
        ({"reward.json": ""}, RewardFileEmptyError),
        ({"reward.txt": "passed"}, VerifierOutputParseError),
        ({"reward.txt": "nan"}, VerifierOutputParseError),
        ({"reward.txt": "inf"}, VerifierOutputParseError),
        ({"reward.json": "{not json"}, VerifierOutputParseError),
        ({"reward.json": "[1]"}, VerifierOutputParseError),
        ({"reward.json": "{}"}, VerifierOutputParseError),
        ({"reward.json": '{"reward": "1"}'}, VerifierOutputParseError),
        ({"reward.json": '{"reward": true}'}, VerifierOutputParseError),
        ({"reward.json": '{"reward": NaN}'}, VerifierOutputParseError),
        ({"reward.json": '{"reward": 1e999}'}, VerifierOutputParseError),
        # outside [0, 1]: a broken verifier (infrastructure), never a score
        ({"reward.txt": "1.5"}, VerifierOutputParseError),
        ({"reward.txt": "-1"}, VerifierOutputParseError),
        ({"reward.json": '{"reward": 1, "style": -0.5}'}, VerifierOutputParseError),
        ({"reward.json": '{"reward": 2}'}, VerifierOutputParseError),
    ],
)
def test_parse_rewards_errors(tmp_path: Path, files: dict[str, str], error: type) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(error):
        parse_rewards(tmp_path)


def test_error_names_are_harbors() -> None:
    # the class name is what a trial's exception_info.exception_type records
    names = [e.__name__ for e in VerifierError.__subclasses__()]
    for harbor in (
        "VerifierTimeoutError",
        "RewardFileNotFoundError",
        "RewardFileEmptyError",
        "VerifierOutputParseError",
        "AddTestsDirError",
        "DownloadVerifierDirError",
    ):
        assert harbor in names


# -- through real sandboxes ---------------------------------------------------------------


@pytest.mark.usefixtures("isolation")
def test_fixture_task_rewards_and_logs(fix_add: Path, tmp_path: Path) -> None:
    logs = tmp_path / "verifier"
    before = verify(fix_add, logs=logs)
    assert before.rewards == {"reward": 0.0} and before.reward == 0.0
    assert (logs / "reward.txt").read_text().strip() == "0"
    assert "FAILED" in (logs / "test-stderr.txt").read_text()

    task = load_task(fix_add)

    async def solve_then_verify() -> VerifierResult:
        async with LocalSandbox(task.sandbox_spec()) as sandbox:
            run = await run_oracle(sandbox, task, logs_dir=tmp_path / "agent")
            assert run.exit_code == 0
            return await run_verifier(sandbox, task)

    assert asyncio.run(solve_then_verify()).reward == 1.0
    assert "patched" in (tmp_path / "agent" / "oracle.txt").read_text()


@pytest.mark.usefixtures("isolation")
@pytest.mark.parametrize(
    ("test_sh", "error"),
    [
        ("exit 0\n", RewardFileNotFoundError),
        ("touch /logs/verifier/reward.txt\n", RewardFileEmptyError),
        ("echo tests passed > /logs/verifier/reward.txt\n", VerifierOutputParseError),
        ('echo \'{"reward": "yes"}\' > /logs/verifier/reward.json\n', VerifierOutputParseError),
    ],
)
def test_verifier_error_types(make_task: TaskFactory, test_sh: str, error: type) -> None:
    with pytest.raises(error):
        verify(make_task("bad", test_sh))


@pytest.mark.usefixtures("isolation")
def test_verifier_timeout_kills_the_tests(make_task: TaskFactory) -> None:
    task = make_task("slow", "sleep 300 &\nsleep 300\necho 1 > /logs/verifier/reward.txt\n")
    with pytest.raises(VerifierTimeoutError, match="within 1 s"):
        verify(task, timeout_s=1)


@pytest.mark.usefixtures("isolation")
def test_stale_agent_reward_is_discarded(make_task: TaskFactory) -> None:
    task_dir = make_task("stale", "exit 1\n")
    task = load_task(task_dir)

    async def main() -> VerifierResult:
        async with LocalSandbox(task.sandbox_spec()) as sandbox:
            await sandbox.exec("echo 1 > /logs/verifier/reward.txt")  # an agent cheating
            return await run_verifier(sandbox, task)

    with pytest.raises(RewardFileNotFoundError):
        asyncio.run(main())


@pytest.mark.usefixtures("isolation")
def test_json_reward_and_task_toml_timeout(make_task: TaskFactory) -> None:
    toml = 'version = "1.0"\n[verifier]\ntimeout_sec = 1\n'
    fast = make_task("json", 'echo \'{"reward": 1, "lint": 0.5}\' > /logs/verifier/reward.json\n')
    assert verify(fast).rewards == {"reward": 1, "lint": 0.5}
    slow = make_task("slow-toml", "sleep 30\n", toml=toml)
    assert load_task(slow).verifier_timeout_s == 1
    with pytest.raises(VerifierTimeoutError):
        verify(slow)


@pytest.mark.usefixtures("isolation")
def test_oracle_timeout_is_agent_timeout(make_task: TaskFactory) -> None:
    task_dir = make_task("slow-oracle", "exit 0\n", solve_sh="sleep 30\n")
    task = load_task(task_dir)

    async def main() -> None:
        async with LocalSandbox(task.sandbox_spec()) as sandbox:
            await run_oracle(sandbox, task, timeout_s=1)

    with pytest.raises(AgentTimeoutError):
        asyncio.run(main())


@pytest.mark.usefixtures("isolation")
def test_escaping_link_in_tests_is_add_tests_dir_error(make_task: TaskFactory) -> None:
    task = make_task("evil-tests", "echo 1 > /logs/verifier/reward.txt\n")
    (task / "tests" / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(AddTestsDirError, match="escapes"):
        verify(task)


@pytest.mark.usefixtures("isolation")
def test_escaping_link_in_logs_is_download_verifier_dir_error(make_task: TaskFactory) -> None:
    script = "echo 1 > /logs/verifier/reward.txt\nln -s /etc/shadow /logs/verifier/loot\n"
    with pytest.raises(DownloadVerifierDirError, match="escapes"):
        verify(make_task("evil-logs", script))


@pytest.mark.usefixtures("cgroups")
def test_an_oom_killed_verifier_yields_no_reward(make_task, tmp_path: Path) -> None:
    """test.sh writes 0 first (as many do), then its python is OOM-killed: the 0 must not be
    taken as the reward; the trial is an infrastructure error."""
    from forge_sandbox import VerifierOOMError

    script = "echo 0 > /logs/verifier/reward.txt\npython3 -c \"x = b'a' * (512 << 20)\"\n"
    task_dir = make_task(
        "oom-verifier", script, toml='version = "1.0"\n[environment]\nmemory_mb = 64\n'
    )
    task = load_task(task_dir)
    assert task.memory_mb == 64

    async def go() -> VerifierResult:
        async with LocalSandbox(task.sandbox_spec()) as sandbox:
            return await run_verifier(sandbox, task, logs_dir=tmp_path / "verifier")

    with pytest.raises(VerifierOOMError, match="OOM-killed at the sandbox's 64 MiB"):
        asyncio.run(go())


FORK_UNTIL_REFUSED = """\
python3 - <<'PY'
import os, signal, time
kids = []
try:
    while True:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
except OSError:
    pass
for kid in kids:
    os.kill(kid, signal.SIGKILL)
    os.waitpid(kid, 0)
PY
"""


def _verify_with(task_dir: Path, **limits: int) -> VerifierResult:
    task = load_task(task_dir)

    async def go() -> VerifierResult:
        async with LocalSandbox(task.sandbox_spec(**limits)) as sandbox:
            return await run_verifier(sandbox, task)

    return asyncio.run(go())


@pytest.mark.usefixtures("cgroups")
def test_a_verifier_at_pids_max_yields_no_reward(make_task: TaskFactory) -> None:
    """test.sh writes 1 first, then its processes fill pids_max (forks refused): it did not run
    as written, so the 1 is not trusted; the trial is an infrastructure error."""
    from forge_sandbox import VerifierPidsLimitError

    script = "echo 1 > /logs/verifier/reward.txt\n" + FORK_UNTIL_REFUSED
    task_dir = make_task("pids-verifier", script)
    with pytest.raises(VerifierPidsLimitError, match="pids_max=32"):
        _verify_with(task_dir, pids_max=32)
    fine = make_task("pids-fine", "echo 1 > /logs/verifier/reward.txt\n")
    assert _verify_with(fine, pids_max=32).reward == 1.0


@pytest.mark.usefixtures("isolation")
def test_a_verifier_killed_at_the_file_size_limit_yields_no_reward(make_task) -> None:
    from forge_sandbox import VerifierFileSizeLimitError

    script = "echo 1 > /logs/verifier/reward.txt\nhead -c 3M /dev/zero > /tmp/big\n"
    with pytest.raises(VerifierFileSizeLimitError, match="file_size_mb=1"):
        _verify_with(make_task("fsize-verifier", script), file_size_mb=1)


@pytest.mark.usefixtures("cgroups")
def test_exec_records_the_limits_it_hit() -> None:
    from forge_sandbox import SandboxSpec

    async def go() -> list:
        async with LocalSandbox(SandboxSpec(pids_max=32, file_size_mb=1)) as sandbox:
            return [
                await sandbox.exec(FORK_UNTIL_REFUSED),
                await sandbox.exec("head -c 3M /dev/zero > /tmp/big"),
                await sandbox.exec("echo fine"),
            ]

    forks, big, fine = asyncio.run(go())
    assert forks.pids_limit_hit and forks.limit_hit == "pids" and not forks.file_size_limit_hit
    assert big.file_size_limit_hit and big.exit_code == 153 and big.limit_hit == "file_size"
    assert fine.limit_hit is None and not fine.pids_limit_hit and fine.ok


def test_task_toml_storage_mb_reaches_the_sandbox(make_task: TaskFactory) -> None:
    toml = 'version = "1.0"\n[environment]\nstorage_mb = 1024\n'
    task = load_task(make_task("disk", "exit 0\n", toml=toml))
    assert task.storage_mb == 1024 and task.sandbox_spec().storage_mb == 1024
    assert load_task(make_task("no-disk", "exit 0\n")).sandbox_spec().storage_mb is None
