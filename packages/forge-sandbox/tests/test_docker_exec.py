"""The Docker backend's exec, no daemon: the wrapper run by the host's /bin/sh, its report
(exit code, pids and OOM counters) read off stderr, the multiplexed stream read frame by frame
from a fake socket with stdout capped, the abort of a stuck stream, and the exit-code wait
against a fake docker-py APIClient (only `exec_inspect`, the one call it makes)."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forge_sandbox.docker import _exec


def _frame(stream: int, data: bytes) -> bytes:
    """One frame of the Engine API's multiplexed stream: stream, 0, 0, 0, size (big-endian)."""
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


class _Socket:
    """recv() hands out the given chunks in order, then b"" (EOF), or raises `error` there."""

    def __init__(self, chunks: list[bytes], error: OSError | None = None) -> None:
        self.chunks = list(chunks)
        self.error = error
        self.sizes: list[int] = []
        self.shutdowns: list[int] = []

    def recv(self, size: int) -> bytes:
        self.sizes.append(size)
        if self.chunks:
            return self.chunks.pop(0)
        if self.error is not None:
            raise self.error
        return b""

    def shutdown(self, how: int) -> None:
        if self.error is not None:
            raise self.error
        self.shutdowns.append(how)


class _SocketIO:
    """docker-py's exec_start(socket=True) answer: a SocketIO whose `_sock` is the socket."""

    def __init__(self, sock: _Socket) -> None:
        self._sock = sock

    def recv(self, size: int) -> bytes:  # never called: the reader unwraps `_sock`
        raise AssertionError("expected the reader to read the raw socket")

    def shutdown(self, how: int) -> None:
        raise AssertionError("expected abort to shut the raw socket down")


# ------------------------------------------------------------------ the wrapper, run by sh
def _run_wrapped(command: list[str], cwd: str) -> tuple[subprocess.CompletedProcess, str]:
    nonce = _exec.new_nonce()
    done = subprocess.run(_exec.wrap(command, cwd, nonce), capture_output=True, timeout=30)
    return done, nonce


def test_a_nonce_is_32_hex_digits_and_new_each_time() -> None:
    first, second = _exec.new_nonce(), _exec.new_nonce()
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second


def test_the_wrapper_runs_the_command_in_its_folder_and_reports_its_exit(tmp_path: Path) -> None:
    argv = _exec.wrap(["sh", "-c", "pwd; echo oops >&2; exit 3"], str(tmp_path), "n" * 32)
    assert argv[:2] == ["/bin/sh", "-c"] and argv[2] == _exec.WRAPPER
    assert argv[3:] == ["sh", "n" * 32, str(tmp_path), "sh", "-c", "pwd; echo oops >&2; exit 3"]
    done, nonce = _run_wrapped(["sh", "-c", "pwd; echo oops >&2; exit 3"], str(tmp_path))
    assert done.returncode == 3
    assert done.stdout == f"{tmp_path}\n".encode()
    stderr, trailer = _exec.split_trailer(done.stderr, nonce)
    assert stderr == b"oops\n"
    assert trailer is not None and trailer.exit_code == 3


def test_the_wrapper_refuses_a_missing_folder_with_125(tmp_path: Path) -> None:
    missing = str(tmp_path / "absent")
    done, nonce = _run_wrapped(["true"], missing)
    assert done.returncode == 125
    stderr, trailer = _exec.split_trailer(done.stderr, nonce)
    assert stderr == f"forge-sandbox: no folder {missing}\n".encode()
    assert trailer == _exec.Trailer(125, None, None, None, None)
    assert trailer.pids_hit and not trailer.oom_killed  # unread counters: pids never "not hit"


def test_the_counter_function_sums_a_key_over_the_readable_files(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "pids.events", tmp_path / "memory.oom_control"
    v2.write_text("max 3\n")
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    script = _exec.COUNT_FUNCTION + '; cnt "$@"; echo "$s"'
    for args, expected in (
        (["max", str(v2)], "3"),
        (["oom_kill", str(v1), str(tmp_path / "absent")], "4"),
        (["max", str(v2), str(v2)], "6"),
        (["max", str(tmp_path / "absent")], "-"),  # nothing readable: unknown, not 0
        (["absent_key", str(v2)], "0"),
    ):
        done = subprocess.run(["/bin/sh", "-c", script, "sh", *args], capture_output=True)
        assert done.stdout.decode().strip() == expected, args


# ------------------------------------------------------------------ the report on stderr
@pytest.mark.parametrize(
    ("before", "after", "hit"), [(4, 4, False), (4, 5, True), (5, 4, False), (None, 4, True)]
)
def test_pids_hit_when_the_counter_rose_or_could_not_be_read(before, after, hit) -> None:
    assert _exec.Trailer(0, before, after, 0, 0).pids_hit is hit
    assert _exec.Trailer(0, after, before, 0, 0).pids_hit is (
        before is None or (after is not None and before > after)
    )


@pytest.mark.parametrize(
    ("before", "after", "killed"),
    [(0, 0, False), (0, 1, True), (2, 1, False), (None, 1, False), (1, None, False)],
)
def test_oom_killed_only_when_the_counter_rose(before, after, killed) -> None:
    assert _exec.Trailer(137, 0, 0, before, after).oom_killed is killed


def test_the_report_is_the_last_nonce_line_and_every_field_is_read() -> None:
    nonce = "0123456789abcdef" * 2
    echoed = f"the command printed {nonce} itself\n".encode()
    stderr = echoed + f"{nonce} 7 1 2 3 5\n".encode()
    rest, trailer = _exec.split_trailer(stderr, nonce)
    assert rest == echoed
    assert trailer == _exec.Trailer(7, 1, 2, 3, 5)
    # an empty counter (a read cut short) is unknown, like '-'
    assert _exec.split_trailer(f"{nonce} 0  2 - 1".encode(), nonce)[1] == _exec.Trailer(
        0, None, 2, None, 1
    )


def test_a_stderr_without_the_report_is_kept_whole() -> None:
    nonce = "f" * 32
    for stderr in (b"", b"killed\n", f"{nonce} not a report\n".encode(), b"x" * 40):
        assert _exec.split_trailer(stderr, nonce) == (stderr, None)
    other = "e" * 32
    assert _exec.split_trailer(f"{other} 0 1 1 0 0\n".encode(), nonce)[1] is None


def test_the_exec_environment_carries_the_marker_last() -> None:
    assert _exec.exec_env({}, "n1") == ["FORGE_SANDBOX_EXEC=n1"]
    assert _exec.exec_env({"A": "1", "B": "x=y"}, "n2") == [
        "A=1",
        "B=x=y",
        "FORGE_SANDBOX_EXEC=n2",
    ]


# ------------------------------------------------------------------ output capping
def test_stdout_is_capped_at_max_bytes_and_stderr_never() -> None:
    out = _exec.Streamed(max_bytes=5)
    out.add(_exec.STDOUT, b"abc")
    assert (bytes(out.stdout), out.truncated) == (b"abc", False)
    out.add(_exec.STDOUT, b"de")  # exactly at the cap: not truncated
    assert (bytes(out.stdout), out.truncated) == (b"abcde", False)
    out.add(_exec.STDERR, b"E" * 20)
    assert (bytes(out.stderr), out.truncated) == (b"E" * 20, False)
    out.add(_exec.STDOUT, b"fg")
    assert (bytes(out.stdout), out.truncated) == (b"abcde", True)


def test_a_chunk_over_the_cap_keeps_what_fits() -> None:
    out = _exec.Streamed(max_bytes=4)
    out.add(_exec.STDOUT, b"abcdef")
    assert (bytes(out.stdout), out.truncated) == (b"abcd", True)
    uncapped = _exec.Streamed(max_bytes=None)
    uncapped.add(_exec.STDOUT, b"x" * 100_000)
    assert len(uncapped.stdout) == 100_000 and not uncapped.truncated
    zero = _exec.Streamed(max_bytes=0)
    zero.add(_exec.STDOUT, b"a")
    assert (bytes(zero.stdout), zero.truncated) == (b"", True)


# ------------------------------------------------------------------ the multiplexed stream
def test_frames_split_across_reads_are_reassembled_by_stream() -> None:
    wire = (
        _frame(1, b"hello ")
        + _frame(2, b"warn\n")
        + _frame(1, b"")
        + _frame(1, b"world")
        + _frame(2, b"x" * 70_000)
    )
    # cut mid-header and mid-payload
    chunks = [wire[:3], wire[3:10], wire[10:20], wire[20:]]
    sock = _Socket(chunks)
    called: list[bool] = []
    out = _exec.Streamed(max_bytes=None, on_done=lambda: called.append(out.done.is_set()))
    _exec.read_frames(_SocketIO(sock), out)
    assert bytes(out.stdout) == b"hello world"
    assert bytes(out.stderr) == b"warn\n" + b"x" * 70_000
    assert out.error is None and out.done.is_set() and called == [True]
    assert sock.sizes == [65536] * 5  # four chunks, then EOF


def test_a_frame_of_exactly_eight_bytes_and_a_partial_tail() -> None:
    out = _exec.Streamed(max_bytes=None)
    _exec.read_frames(_Socket([_frame(1, b"") + _frame(1, b"ab") + b"\x01\x00\x00"]), out)
    assert bytes(out.stdout) == b"ab" and out.done.is_set()
    out = _exec.Streamed(max_bytes=None)
    _exec.read_frames(_Socket([_frame(2, b"abc")[:-1]]), out)  # the payload never completes
    assert bytes(out.stderr) == b""
    for size in (300, (1 << 24) + 5):  # every one of the four size bytes counts
        big = b"y" * size
        out = _exec.Streamed(max_bytes=None)
        _exec.read_frames(_Socket([_frame(1, big), _frame(2, b"end")]), out)
        assert len(out.stdout) == size and bytes(out.stderr) == b"end"


def test_a_socket_error_is_kept_and_the_reader_still_finishes() -> None:
    error = ConnectionResetError("daemon went away")
    out = _exec.Streamed(max_bytes=None)
    _exec.read_frames(_Socket([_frame(1, b"part")], error=error), out)
    assert out.error is error and out.done.is_set() and bytes(out.stdout) == b"part"


def test_abort_shuts_the_raw_socket_down_and_ignores_a_closed_one() -> None:
    sock = _Socket([])
    _exec.abort(_SocketIO(sock))
    assert sock.shutdowns == [socket.SHUT_RDWR]
    plain = _Socket([])
    _exec.abort(plain)
    assert plain.shutdowns == [socket.SHUT_RDWR]
    _exec.abort(_Socket([], error=OSError("not connected")))  # no exception


# ------------------------------------------------------------------ the exit code
class _API:
    """The one docker-py APIClient call wait_exit_code makes."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        self.asked.append(exec_id)
        return self.answers[min(len(self.asked), len(self.answers)) - 1]


def test_the_exit_code_is_read_once_the_exec_has_stopped(monkeypatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(_exec.time, "sleep", slept.append)
    api = _API(
        [
            {"Running": True, "ExitCode": None},
            {"Running": False, "ExitCode": None},  # the daemon has not recorded it yet
            {"Running": True, "ExitCode": 0},
            {"Running": False, "ExitCode": 153},
        ]
    )
    assert _exec.wait_exit_code(api, "exec-1") == 153
    assert api.asked == ["exec-1"] * 4 and slept == [0.02] * 3
    assert _exec.wait_exit_code(_API([{"ExitCode": "0"}]), "e") == 0


def test_an_exit_code_that_never_comes_is_none_after_the_tries(monkeypatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(_exec.time, "sleep", slept.append)
    api = _API([{"Running": True, "ExitCode": None}])
    assert _exec.wait_exit_code(api, "exec-2") is None
    assert len(api.asked) == 50 and len(slept) == 50
    few = _API([{"Running": False}])
    assert _exec.wait_exit_code(few, "exec-3", tries=3) is None and len(few.asked) == 3
