"""`start_ready`: the parent's side of the `<NAME>_READY url=...` line servers print."""

from __future__ import annotations

import sys
import time

import pytest

from forge_rollout._aio import NotReady, start_ready


def test_the_url_of_the_ready_line_comes_back_and_chatty_stderr_never_blocks() -> None:
    script = (
        "import sys, time\n"
        "sys.stderr.write('log line\\n' * 20000)\n"  # ~180 KB: more than a pipe holds
        "print('noise'); print('FORGE_X_READY url=http://127.0.0.1:1234', flush=True)\n"
        "time.sleep(30)\n"
    )
    process, url = start_ready([sys.executable, "-c", script], "FORGE_X", timeout=20)
    try:
        assert url == "http://127.0.0.1:1234"
    finally:
        process.kill()
        process.wait(10)


def test_a_server_that_exits_without_the_line_fails_with_its_stderr_tail() -> None:
    script = "import sys; sys.stderr.write('port in use\\n'); sys.exit(3)"
    clock = time.monotonic()
    with pytest.raises(NotReady) as caught:
        start_ready([sys.executable, "-c", script], "FORGE_X", timeout=60)
    assert time.monotonic() - clock < 30, "an ended process is not waited for until the timeout"
    message = str(caught.value)
    assert "expected FORGE_X_READY" in message and "port in use" in message
    assert "exit code 3" in message


def test_servers_run_on_uvloop_unless_told_otherwise(monkeypatch) -> None:

    from forge_rollout._aio import loop_name, run_loop

    seen: list[str] = []

    async def main() -> None:
        seen.append(loop_name())

    run_loop(main())
    monkeypatch.setenv("FORGE_EVENT_LOOP", "asyncio")
    run_loop(main())
    assert seen == ["uvloop", "asyncio"]
    monkeypatch.setenv("FORGE_EVENT_LOOP", "trio")
    coroutine = main()
    with pytest.raises(
        ValueError, match="expected FORGE_EVENT_LOOP=uvloop or asyncio; found 'trio'"
    ):
        run_loop(coroutine)
    coroutine.close()
