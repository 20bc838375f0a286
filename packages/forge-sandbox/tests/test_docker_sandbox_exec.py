"""DockerSandbox's exec against a fake docker-py APIClient (no daemon): how an exec's report
becomes an ExecResult (exit status, OOM kill, pids limit, SIGXFSZ, capped output), the limits
kill_processes reports afterwards, a missing report explained by a dead container, and a
timeout's kill by the exec's marker.

The fake runs nothing: `exec_create` reads the wrapper's argv (nonce, folder, command) and
answers the command from a table the test gives, as the multiplexed stream the Engine API
sends, the wrapper's report line included."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from forge_sandbox import SandboxSpec, SandboxStateError
from forge_sandbox._spec import ExecResult, KillReport
from forge_sandbox.docker import ContainerDiedError, DockerConfig, DockerDaemonError, _exec
from forge_sandbox.docker._errors import ContainerOOMKilledError
from forge_sandbox.docker._sandbox import DockerSandbox

SPEC = SandboxSpec(memory_mb=256, pids_max=64, max_output_bytes=4096, exec_timeout_s=30)


@dataclass
class Reply:
    """What the fake container answers to one command."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int = 0
    counters: tuple[str, str, str, str] | None = ("3", "3", "0", "0")  # None: no report line
    hang: bool = False  # runs until the exec's marker is killed
    broken: bool = False  # the stream fails (a reset) after what it carried
    stuck: bool = False  # and a detached process holds its stream open past the kill


def _frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


class _Stream:
    """The exec's socket: the frames, then EOF; a hanging exec's EOF waits for its kill."""

    def __init__(self, data: bytes, release: threading.Event | None, broken: bool = False) -> None:
        self.data, self.release, self.broken = data, release, broken
        self.shutdowns = 0

    def recv(self, size: int) -> bytes:
        if self.data:
            chunk, self.data = self.data[:size], self.data[size:]
            return chunk
        if self.broken:
            raise ConnectionResetError("connection reset by peer")
        if self.release is not None:
            self.release.wait(10)
        return b""

    def shutdown(self, how: int) -> None:
        self.shutdowns += 1
        if self.release is not None:
            self.release.set()


class FakeAPI:
    """The docker-py APIClient calls DockerSandbox makes, on one pretend container."""

    def __init__(self, answer: Callable[[list[str]], Reply]) -> None:
        self.answer = answer
        self.state: Any = {"Running": True, "Status": "running", "ExitCode": 0}
        self.execs: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.hung: list[tuple[str, threading.Event]] = []
        self.marked_reply: bytes | None = None  # what KILL_MARKED prints (default: its count)
        self.inspected: list[str] = []
        self.inspect_error: BaseException | None = None
        self.containers_inspected = 0

    # the container
    def create_container_from_config(self, body: dict, name: str) -> dict:
        self.created.append(body)
        return {"Id": "c1"}

    def start(self, container: str) -> None:
        assert container == "c1"

    def put_archive(self, container: str, path: str, data: bytes) -> bool:
        return True

    def inspect_container(self, container: str) -> dict:
        assert container == "c1", "the sandbox inspects its own container"
        self.containers_inspected += 1
        if isinstance(self.state, BaseException):
            raise self.state
        return {"State": dict(self.state)}

    def remove_container(self, container: str, force: bool, v: bool) -> None:
        self.state = {"Running": False, "Status": "removed"}

    # execs: argv is `/bin/sh -c WRAPPER sh NONCE FOLDER COMMAND...`, but the kills run bare
    # (`/bin/sh -c KILL_... sh ARGS...`: one process, no report line)
    def exec_create(self, container: str, argv: list[str], **kwargs: Any) -> dict:
        exec_id = f"e{len(self.execs)}"
        bare = argv[2] in (_exec.KILL_ALL, _exec.KILL_MARKED)
        nonce, command = ("", argv) if bare else (argv[4], argv[6:])
        self.execs[exec_id] = {"argv": argv, "command": command, **kwargs}
        if command[:3] == ["/bin/sh", "-c", _exec.KILL_MARKED]:
            killed = [e for e, release in self.hung if not release.is_set()]
            for other, release in self.hung:
                self.execs[other]["exit_code"] = 137  # SIGKILL, the wrapper with it: no report
                if not self.execs[other]["stuck"]:
                    release.set()
            reply = Reply(stdout=self.marked_reply or f"{len(killed)}\n".encode())
        else:
            reply = self.answer(command)
        stderr = reply.stderr
        if reply.counters is not None and not reply.hang and not bare:
            stderr += f"{nonce} {reply.exit_code} {' '.join(reply.counters)}\n".encode()
        data = _frame(1, reply.stdout) + _frame(2, stderr)
        release = threading.Event() if reply.hang else None
        if release is not None:
            self.hung.append((exec_id, release))
        self.execs[exec_id].update(
            stream=_Stream(data, release, reply.broken),
            exit_code=reply.exit_code,
            stuck=reply.stuck,
        )
        return {"Id": exec_id}

    def exec_start(self, exec_id: str, socket: bool) -> _Stream:
        assert socket
        return self.execs[exec_id]["stream"]

    def exec_inspect(self, exec_id: str) -> dict:
        self.inspected.append(exec_id)
        if isinstance(self.inspect_error, BaseException):
            raise self.inspect_error
        return {"Running": False, "ExitCode": self.execs[exec_id]["exit_code"]}


class _Resolver:
    def ensure(self, api: Any, spec: SandboxSpec) -> tuple[str, dict]:
        return "img:1", {"User": "app", "WorkingDir": "/testbed"}


def _answer(table: dict[str, Reply]) -> Callable[[list[str]], Reply]:
    """Replies by the command's last word; the start's probe gets pids and ids."""

    def answer(command: list[str]) -> Reply:
        if command[:3] == ["/bin/sh", "-c", _exec.MAIN_PIDS]:
            return Reply(stdout=b"7 \n1000\n1000\n")
        if command[:3] == ["/bin/sh", "-c", _exec.KILL_ALL]:
            return Reply(stdout=b"2 5\n")
        return table[command[-1]]

    return answer


def _exec_in(table: dict[str, Reply], *commands: str, **kwargs: Any):
    """Start a sandbox on the fake, run `commands`, then kill_processes; (results, report,
    api)."""
    api = FakeAPI(_answer(table))
    sandbox = DockerSandbox(SPEC, DockerConfig(exec_grace_s=1.0), api, _Resolver())  # type: ignore[arg-type]

    async def main() -> tuple[list[ExecResult], KillReport]:
        async with sandbox:
            results = [await sandbox.exec(command, **kwargs) for command in commands]
            return results, await sandbox.kill_processes()

    results, report = asyncio.run(main())
    return results, report, api


def test_a_plain_exec_reports_its_output_and_exit() -> None:
    results, report, api = _exec_in(
        {"ok": Reply(stdout=b"out\n", stderr=b"err\n", exit_code=3)}, "ok", cwd="/src"
    )
    result = results[0]
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert not (result.timed_out or result.oom_killed or result.pids_limit_hit)
    assert not (result.file_size_limit_hit or result.output_truncated)
    assert report == KillReport(
        killed=2, oom_killed=False, pids_limit_hit=False, file_size_limit_hit=False
    )
    call = next(e for e in api.execs.values() if e["command"][-1] == "ok")
    assert call["argv"][5] == "/src" and call["command"] == [SPEC.shell, "-c", "ok"]
    assert call["user"] == "app"
    assert call["environment"][-1].startswith("FORGE_SANDBOX_EXEC=")


@pytest.mark.parametrize(
    ("reply", "oom", "pids", "file_size", "hits"),
    [
        (Reply(exit_code=137, counters=("3", "3", "0", "1")), True, False, False, ["memory"]),
        # both counters rose: the OOM kill explains the refused fork
        (Reply(exit_code=137, counters=("3", "4", "1", "2")), True, False, False, ["memory"]),
        (Reply(exit_code=1, counters=("3", "9", "0", "0")), False, True, False, ["pids"]),
        (Reply(exit_code=1, counters=("-", "-", "-", "-")), False, True, False, ["pids"]),
        (Reply(exit_code=153), False, False, True, ["file_size"]),
        (Reply(exit_code=137), False, False, False, []),  # killed, but not by the OOM killer
    ],
)
def test_the_report_line_classifies_the_limits(reply, oom, pids, file_size, hits) -> None:
    results, report, _ = _exec_in({"cmd": reply}, "cmd")
    result = results[0]
    assert (result.oom_killed, result.pids_limit_hit, result.file_size_limit_hit) == (
        oom,
        pids,
        file_size,
    )
    assert result.exit_code == reply.exit_code and not result.timed_out
    assert report.limits_hit == hits and report.killed == 2


def test_limits_hit_by_any_exec_are_reported_until_the_end() -> None:
    table = {
        "oom": Reply(exit_code=137, counters=("3", "3", "0", "1")),
        "fork": Reply(exit_code=1, counters=("3", "5", "1", "1")),
        "big": Reply(exit_code=153),
        "fine": Reply(),
    }
    results, report, _ = _exec_in(table, "oom", "fork", "big", "fine")
    assert [r.exit_code for r in results] == [137, 1, 153, 0]
    assert report.limits_hit == ["memory", "pids", "file_size"]


def test_stdout_is_capped_at_the_specs_max_output_bytes() -> None:
    results, _, _ = _exec_in({"flood": Reply(stdout=b"y" * 5000, stderr=b"e" * 5000)}, "flood")
    assert results[0].stdout == "y" * 4096 and results[0].output_truncated
    assert results[0].stderr == "e" * 5000


def test_without_a_report_the_exit_code_decides_and_pids_count_as_hit() -> None:
    results, report, _ = _exec_in(
        {"gone": Reply(exit_code=137, counters=None), "crash": Reply(exit_code=2, counters=None)},
        "gone",
        "crash",
    )
    gone, crash = results
    assert (gone.exit_code, gone.oom_killed, gone.pids_limit_hit) == (137, True, False)
    assert (crash.exit_code, crash.oom_killed, crash.pids_limit_hit) == (2, False, True)
    assert report.limits_hit == ["memory", "pids"]


def test_frames_the_http_reader_took_in_with_the_headers_are_read_first() -> None:
    """docker-py hands over the socket under the response's buffered reader, which may already
    hold the first frames (a short command's whole output and report): read through it."""
    import io
    from types import SimpleNamespace

    frames = _frame(1, b"hello\n") + _frame(2, b"report\n")
    socket_part = _Stream(frames[5:], None)  # what is left on the socket after the headers
    buffered = io.BufferedReader(io.BytesIO(frames))  # the reader holds them all
    socket_part._response = SimpleNamespace(raw=SimpleNamespace(_fp=SimpleNamespace(fp=buffered)))
    out = _exec.Streamed(None)
    _exec.read_frames(socket_part, out)
    assert (bytes(out.stdout), bytes(out.stderr), out.error) == (b"hello\n", b"report\n", None)
    plain = _exec.Streamed(None)  # a socket with no response under it is read as it is
    _exec.read_frames(_Stream(frames, None), plain)
    assert bytes(plain.stdout) == b"hello\n"


@pytest.mark.parametrize(
    "reply",
    [
        Reply(stdout=b"PASSED t.py::test_a\n", exit_code=0, counters=None),
        Reply(stdout=b"PASSED t.py::test_a\n", exit_code=0, counters=None, broken=True),
        Reply(stdout=b"partial", exit_code=1, counters=None, broken=True),
    ],
    ids=["ended-early", "reset", "reset-nonzero"],
)
def test_a_stream_that_lost_the_report_is_a_daemon_error_never_an_outcome(reply) -> None:
    """The wrapper exits 0 only after its report line: exit 0 without it, or a stream that
    broke, means output was lost. Read as an outcome, a verifier's lost test lines would
    score a fix 0 (no evidence: the change's doing); it is the daemon's failure instead."""
    with pytest.raises(DockerDaemonError, match="expected its whole output"):
        _exec_in({"x": reply}, "x")


def test_a_missing_report_from_a_dead_container_is_its_death() -> None:
    api = FakeAPI(_answer({"x": Reply(exit_code=137, counters=None)}))
    sandbox = DockerSandbox(SPEC, DockerConfig(), api, _Resolver())  # type: ignore[arg-type]

    async def main(state: dict[str, Any]) -> None:
        async with sandbox:
            api.state = state
            await sandbox.exec("x")

    name = sandbox.name
    with pytest.raises(ContainerOOMKilledError) as oom:
        asyncio.run(main({"Running": False, "OOMKilled": True, "ExitCode": 137}))
    assert str(oom.value) == (
        f"container {name}: expected it running; found it OOMKilled (exit 137) at 256 MiB; fix: "
        "raise the task's memory_mb ([environment] in task.toml)"
    )
    sandbox = DockerSandbox(SPEC, DockerConfig(), api, _Resolver())  # type: ignore[arg-type]
    api.state = {"Running": True, "Status": "running"}
    with pytest.raises(ContainerDiedError) as died:
        asyncio.run(main({"Running": False, "Status": "exited", "ExitCode": 1, "Error": ""}))
    assert str(died.value) == (
        f"container {sandbox.name}: expected it running for exec; found status 'exited' (exit "
        "1, no error); fix: the trial cannot continue (not scored); something killed its init"
    )


def test_a_timeout_kills_the_exec_by_its_marker() -> None:
    results, report, api = _exec_in({"sleep": Reply(hang=True)}, "sleep", timeout_s=0.2)
    result = results[0]
    assert result.timed_out and result.exit_code == 124
    assert not result.pids_limit_hit
    kills = [e for e in api.execs.values() if e["command"][2:3] == [_exec.KILL_MARKED]]
    assert len(kills) == 1
    slept = next(e for e in api.execs.values() if e["command"][-1] == "sleep")
    marker = slept["environment"][-1].removeprefix("FORGE_SANDBOX_EXEC=")
    assert kills[0]["command"][3:] == ["sh", marker]  # the kill names this exec's marker
    assert report.killed == 2


def test_a_timeout_is_not_an_oom_kill() -> None:
    results, report, _ = _exec_in({"sleep": Reply(hang=True)}, "sleep", timeout_s=0.2)
    assert not results[0].oom_killed
    assert report.limits_hit == []


# ------------------------------------------------------------------ the exec call itself
def _started(table: dict[str, Reply], spec: SandboxSpec = SPEC) -> tuple[DockerSandbox, FakeAPI]:
    api = FakeAPI(_answer(table))
    sandbox = DockerSandbox(spec, DockerConfig(exec_grace_s=1.0), api, _Resolver())  # type: ignore[arg-type]
    asyncio.run(sandbox.start())
    return sandbox, api


def _last(api: FakeAPI) -> dict[str, Any]:
    return list(api.execs.values())[-1]


def test_an_argv_is_run_as_strings_in_the_folder_given_else_the_workdir() -> None:
    spec = SPEC.model_copy(update={"env": {"A": "spec", "B": "spec"}})
    sandbox, api = _started({"3": Reply(), "x": Reply()}, spec)
    asyncio.run(sandbox.exec(["echo", 3], env={"B": "call", "C": "call"}))  # type: ignore[list-item]
    call = _last(api)
    assert call["command"] == ["echo", "3"] and call["argv"][5] == "/testbed"
    assert call["environment"][:3] == ["A=spec", "B=call", "C=call"]
    asyncio.run(sandbox.exec("x", cwd="/"))
    assert _last(api)["argv"][5] == "/"


def test_an_empty_argv_and_bad_environment_names_are_refused() -> None:
    sandbox, api = _started({})
    before = len(api.execs)
    with pytest.raises(ValueError) as empty:
        asyncio.run(sandbox.exec([]))
    assert str(empty.value) == "exec: expected a command; found an empty argv"
    for env, bad in (
        ({"": "1", "OK": "1"}, [""]),
        ({"A=B": "1"}, ["A=B"]),
        ({"A\0": "1"}, ["A\0"]),
    ):
        with pytest.raises(ValueError) as refused:
            asyncio.run(sandbox.exec(["true"], env=env))
        assert str(refused.value) == f"exec env: expected names without '=' or NUL; found {bad!r}"
    assert len(api.execs) == before  # nothing ran


def test_the_kills_run_in_root_with_their_own_limit_and_read_their_counts(monkeypatch) -> None:
    from forge_sandbox.docker import _sandbox

    waited: list[float] = []
    wait = _sandbox._wait

    async def recording_wait(done: Any, timeout_s: float) -> bool:
        waited.append(timeout_s)
        return await wait(done, timeout_s)

    monkeypatch.setattr(_sandbox, "_wait", recording_wait)
    sandbox, api = _started({})
    waited.clear()
    assert asyncio.run(sandbox._kill_marked("n" * 32)) == 0  # nothing carried the marker
    kill = _last(api)  # the exec's only process (no wrapper: one pid), with a marker of its own
    assert kill["argv"] == ["/bin/sh", "-c", _exec.KILL_MARKED, "sh", "n" * 32]
    [marker] = kill["environment"]  # no spec env
    assert marker.startswith("FORGE_SANDBOX_EXEC=") and marker != "FORGE_SANDBOX_EXEC=" + "n" * 32
    assert waited == [60.0]
    waited.clear()
    report = asyncio.run(sandbox.kill_processes())
    assert _last(api)["argv"] == ["/bin/sh", "-c", _exec.KILL_ALL, "sh", "7"]
    assert waited == [60.0] and report.killed == 2


@pytest.mark.parametrize(("printed", "count"), [(b"3 9\n", 3), (b"4\n", 4), (b"", 0), (b"x", 0)])
def test_the_kill_counts_printed_are_read(printed, count) -> None:
    api = FakeAPI(_answer({}))
    api.marked_reply = printed or b" "
    sandbox = DockerSandbox(SPEC, DockerConfig(), api, _Resolver())  # type: ignore[arg-type]

    async def main() -> int:
        async with sandbox:
            return await sandbox._kill_marked("n" * 32)

    assert asyncio.run(main()) == count


def _kill_answers(*printed: bytes) -> tuple[DockerSandbox, FakeAPI]:
    """A sandbox whose kill_processes prints `printed` in turn (exit 2 for anything but a count:
    no free pid for it), then `2 5`."""
    replies = iter(printed)

    def answer(command: list[str]) -> Reply:
        if command[:3] == ["/bin/sh", "-c", _exec.MAIN_PIDS]:
            return Reply(stdout=b"7 \n1000\n1000\n")
        out = next(replies, b"2 5\n")
        return Reply(stdout=out, exit_code=0 if out[:1].isdigit() else 2, stderr=b"Cannot fork")

    api = FakeAPI(answer)
    sandbox = DockerSandbox(SPEC, DockerConfig(), api, _Resolver())  # type: ignore[arg-type]
    asyncio.run(sandbox.start())
    return sandbox, api


def test_a_kill_that_found_no_free_pid_is_tried_again(monkeypatch) -> None:
    from forge_sandbox import _lifecycle

    monkeypatch.setattr(_lifecycle, "KILL_PAUSES_S", (0.0, 0.0, 0.0))
    sandbox, api = _kill_answers(b"", b"x 2\n")
    report = asyncio.run(sandbox.kill_processes())
    kills = [e for e in api.execs.values() if e["command"][2:3] == [_exec.KILL_ALL]]
    assert len(kills) == 3 and report.killed == 2


def test_a_kill_that_never_runs_is_a_sandbox_state_error_and_a_pids_hit(monkeypatch) -> None:
    from forge_sandbox import _lifecycle

    monkeypatch.setattr(_lifecycle, "KILL_PAUSES_S", (0.0, 0.0, 0.0))
    sandbox, api = _kill_answers(*[b""] * 4)
    with pytest.raises(SandboxStateError) as failed:
        asyncio.run(sandbox.kill_processes())
    kills = [e for e in api.execs.values() if e["command"][2:3] == [_exec.KILL_ALL]]
    assert len(kills) == 4
    assert "could not in 4 tries (exit 2: b'Cannot fork')" in str(failed.value)
    assert "pids_max=64" in str(failed.value)
    assert "pids" in sandbox._hits
    assert api.containers_inspected >= 1  # a dead container would have been named instead


def test_an_exec_without_a_timeout_gets_the_specs() -> None:
    spec = SPEC.model_copy(update={"exec_timeout_s": 0.2})
    sandbox, _ = _started({"sleep": Reply(hang=True)}, spec)
    result = asyncio.run(sandbox.exec("sleep"))
    assert result.timed_out and result.exit_code == 124


def test_a_container_that_cannot_be_inspected_is_named() -> None:
    from docker import errors as sdk_errors

    class _Response:
        status_code, reason = 404, "Not Found"

    sandbox, api = _started({"x": Reply(counters=None)})
    api.state = sdk_errors.NotFound(
        "gone", response=_Response(), explanation="No such container: c1"
    )  # type: ignore[arg-type]
    with pytest.raises(ContainerDiedError) as gone:
        asyncio.run(sandbox.exec("x"))
    assert str(gone.value) == (
        f"exec: inspect {sandbox.name}: expected the trial's container running; found No such "
        "container: c1; fix: the trial cannot continue (not scored); see `docker logs` / the "
        "daemon's log"
    )
    api.state = {"Running": False, "Status": "exited", "ExitCode": 137, "Error": "init died"}
    with pytest.raises(ContainerDiedError) as died:
        asyncio.run(sandbox.exec("x"))
    assert "found status 'exited' (exit 137, init died)" in str(died.value)


def _recording_waits(monkeypatch) -> list[float | None]:
    from forge_sandbox.docker import _sandbox

    waited: list[float | None] = []
    wait = _sandbox._wait

    async def recording_wait(done: Any, timeout_s: float) -> bool:
        waited.append(timeout_s)
        return await wait(done, timeout_s)

    monkeypatch.setattr(_sandbox, "_wait", recording_wait)
    return waited


def test_a_stream_the_kill_ends_is_not_aborted(monkeypatch) -> None:
    waited = _recording_waits(monkeypatch)
    sandbox, api = _started({"sleep": Reply(hang=True)})
    waited.clear()
    result = asyncio.run(sandbox.exec("sleep", timeout_s=0.2))
    slept = next(e for e in api.execs.values() if e["command"][-1] == "sleep")
    assert result.timed_out and slept["stream"].shutdowns == 0
    assert waited == [0.2, 60.0, 1.0]  # the exec, the kill exec, the grace for the stream
    assert 0.2 <= result.duration_s < 5


def test_a_stream_held_open_past_the_kill_is_aborted_after_the_grace(monkeypatch) -> None:
    waited = _recording_waits(monkeypatch)
    api = FakeAPI(_answer({"sleep": Reply(hang=True, stuck=True)}))
    sandbox = DockerSandbox(SPEC, DockerConfig(exec_grace_s=0.1), api, _Resolver())  # type: ignore[arg-type]
    asyncio.run(sandbox.start())
    waited.clear()
    result = asyncio.run(sandbox.exec("sleep", timeout_s=0.2))
    slept = next(e for e in api.execs.values() if e["command"][-1] == "sleep")
    assert result.timed_out and result.exit_code == 124 and slept["stream"].shutdowns == 1
    assert waited == [0.2, 60.0, 0.1, 5.0]  # ... the grace ran out: abort, then 5 s at most
    assert result.duration_s < 5


def test_the_reader_thread_never_keeps_the_process_alive(monkeypatch) -> None:
    from forge_sandbox.docker import _sandbox

    daemons: list[bool] = []

    class Recording(threading.Thread):
        def start(self) -> None:
            if getattr(self, "_target", None) is _exec.read_frames:  # not asyncio's workers
                daemons.append(self.daemon)
            super().start()

    monkeypatch.setattr(_sandbox.threading, "Thread", Recording)
    _exec_in({"x": Reply()}, "x")
    assert daemons and all(daemons)


def test_a_report_line_means_the_container_is_not_inspected() -> None:
    sandbox, api = _started({"x": Reply(), "y": Reply(exit_code=2, counters=None)})
    before = api.containers_inspected
    asyncio.run(sandbox.exec("x"))
    assert api.containers_inspected == before
    asyncio.run(sandbox.exec("y"))  # no report: is the container still there?
    assert api.containers_inspected == before + 1


def test_an_exit_code_the_daemon_never_gives_is_read_as_a_kill(monkeypatch) -> None:
    monkeypatch.setattr(_exec.time, "sleep", lambda seconds: None)
    sandbox, api = _started({"x": Reply(counters=None, exit_code=None)})  # type: ignore[arg-type]
    result = asyncio.run(sandbox.exec("x"))
    assert result.exit_code == 137 and result.oom_killed
    assert len([i for i in api.inspected if i == list(api.execs)[-1]]) == 50


def test_a_failed_exec_inspect_is_a_typed_daemon_error() -> None:
    from docker import errors as sdk_errors

    class _Response:
        status_code, reason = 500, "Server Error"

    sandbox, api = _started({"x": Reply()})
    api.inspect_error = sdk_errors.APIError("boom", response=_Response(), explanation="disk full")  # type: ignore[arg-type]
    with pytest.raises(DockerDaemonError) as failed:
        asyncio.run(sandbox.exec("x"))
    assert str(failed.value).startswith(
        f"inspect exec {sandbox.name}: expected the daemon to succeed; found APIError 500: "
        "disk full"
    )


def test_undecodable_output_is_replaced_and_the_raw_stdout_kept() -> None:
    sandbox, _ = _started({"bin": Reply(stdout=b"ok\xff\n", stderr=b"\xfe!")})
    result = asyncio.run(sandbox.exec("bin"))
    assert (result.stdout, result.stderr) == ("ok\ufffd\n", "\ufffd!")
    assert sandbox.last_stdout_bytes == b"ok\xff\n"
