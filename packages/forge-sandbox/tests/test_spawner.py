"""The local backend's exec spawner: filtered once, every exec its child, restarted after death."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from forge_sandbox import LocalSandbox, SandboxError, SandboxSpec
from forge_sandbox.local import _spawner
from forge_sandbox.local._bwrap import FILTER_HEX


def _status_fields(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


async def _run(argv: list[str], tmp_path: Path, stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    """Spawn through the spawner with files for stdin / stdout / stderr; (code, out, err)."""
    files = [tmp_path / name for name in ("in", "out", "err")]
    files[0].write_bytes(stdin)
    with open(files[0], "rb") as i, open(files[1], "wb") as o, open(files[2], "wb") as e:
        fds = [i.fileno(), o.fileno(), e.fileno()]
        proc = await _spawner.spawn(sys.executable, FILTER_HEX, argv, {"PATH": "/bin"}, fds)
    code = await proc.wait()
    assert proc.returncode == code
    return code, files[1].read_bytes(), files[2].read_bytes()


def _spawner_pid() -> int:
    (spawner,) = [s for s in _spawner._spawners.values() if s.dead is None]
    return spawner.process.pid


@pytest.mark.usefixtures("isolation")
def test_children_get_the_filter_their_descriptors_a_session_and_default_signals(
    tmp_path: Path,
) -> None:
    code, out, err = asyncio.run(
        _run(
            ["/bin/sh", "-c", "cat; cat /proc/self/status; echo oops >&2; exit 3"],
            tmp_path,
            b"from stdin\n",
        )
    )
    assert code == 3 and err == b"oops\n"
    assert out.startswith(b"from stdin\n")
    fields = _status_fields(out.decode())
    assert fields["Seccomp"] == "2" and fields["NoNewPrivs"] == "1"
    assert fields["SigIgn"] == "0000000000000000"  # SIGPIPE / SIGXFSZ back to their defaults
    code, out, _ = asyncio.run(_run(["/bin/sh", "-c", "ps -o sid= -p $$; echo $$"], tmp_path))
    sid, pid = out.split()
    assert code == 0 and sid == pid  # a session of its own: a timeout kills its group
    code, out, _ = asyncio.run(_run(["/bin/sh", "-c", "ls /proc/$$/fd; true"], tmp_path))
    assert out.split() == [b"0", b"1", b"2"]  # no copy of the spawner's or the host's files


def test_a_signal_is_a_negative_returncode_and_a_missing_program_an_error(
    tmp_path: Path,
) -> None:
    code, _, _ = asyncio.run(_run(["/bin/sh", "-c", "kill -KILL $$"], tmp_path))
    assert code == -signal.SIGKILL
    with pytest.raises(SandboxError, match="expected the command to start.*no-such-program"):
        asyncio.run(_run(["/no-such-program"], tmp_path))
    assert asyncio.run(_run(["/bin/true"], tmp_path))[0] == 0  # and the spawner carries on


def test_a_dead_spawner_fails_its_waiting_execs_and_the_next_exec_starts_another(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        waiting = asyncio.ensure_future(_run(["/bin/sleep", "30"], tmp_path / "a"))
        await asyncio.sleep(0.3)
        first = _spawner_pid()
        os.kill(first, signal.SIGKILL)
        with pytest.raises(SandboxError, match="the exec spawner .* is gone"):
            await waiting
        code, out, _ = await _run(["/bin/echo", "again"], tmp_path / "b")
        assert code == 0 and out == b"again\n" and _spawner_pid() != first

    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    asyncio.run(scenario())


def test_execs_from_many_threads_and_event_loops_each_get_their_own_answer(
    tmp_path: Path,
) -> None:
    results: dict[int, tuple[int, bytes, bytes]] = {}

    def worker(n: int) -> None:
        folder = tmp_path / str(n)
        folder.mkdir()
        results[n] = asyncio.run(_run(["/bin/sh", "-c", f"echo {n}; exit {n}"], folder))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {n: (code, out) for n, (code, out, _) in results.items()} == {
        n: (n, f"{n}\n".encode()) for n in range(12)
    }


def test_the_spawner_exits_with_its_host_process(tmp_path: Path) -> None:
    host = (
        "import asyncio, sys; from forge_sandbox.local import _spawner; "
        "from forge_sandbox.local._bwrap import FILTER_HEX; "
        "asyncio.run(_spawner.spawn(sys.executable, FILTER_HEX, ['/bin/true'], {}, [0, 1, 2])); "
        "(s,) = _spawner._spawners.values(); print(s.process.pid)"
    )
    done = subprocess.run(  # no pipe on stderr: the spawner inherits it
        [sys.executable, "-c", host],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        check=True,
        timeout=60,
    )
    pid = int(done.stdout)
    for _ in range(100):  # it reads the closed socket and exits; its parent's init reaps it
        if not Path(f"/proc/{pid}").exists() or "Z" in _state(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"expected the spawner (pid {pid}) gone after its host exited")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # gone: ENOENT, or ESRCH mid-read
        return "Z"


@pytest.mark.usefixtures("isolation")
def test_a_sandbox_exec_whose_spawner_died_is_infrastructure_and_the_sandbox_goes_on() -> None:
    async def scenario() -> None:
        async with LocalSandbox(SandboxSpec()) as sandbox:
            waiting = asyncio.ensure_future(sandbox.exec("sleep 30"))
            await asyncio.sleep(0.5)
            os.kill(_spawner_pid(), signal.SIGKILL)
            with pytest.raises(SandboxError, match="the exec spawner .* is gone"):
                await waiting
            descriptors = await sandbox.exec("ls /proc/$$/fd; true")  # the shell's, not ls's
            assert descriptors.stdout.split() == ["0", "1", "2"]
            again = await sandbox.exec("echo fine; pgrep -c -x sleep")
            # the killed exec's sleep went with its leaf; the init's own sleep is the one left
            assert again.exit_code == 0 and again.stdout.split() == ["fine", "1"]

    asyncio.run(scenario())


def test_a_join_that_fails_runs_nothing_and_says_so(tmp_path: Path) -> None:
    """The child joins the leaf before it execs: a leaf it cannot join (here: gone) is a
    SandboxError naming the join, and the command never ran."""
    marker = tmp_path / "ran"
    files = [tmp_path / name for name in ("in", "out", "err")]
    files[0].write_bytes(b"")

    async def spawn() -> None:
        with open(files[0], "rb") as i, open(files[1], "wb") as o, open(files[2], "wb") as e:
            join = {"procs": [str(tmp_path / "gone" / "cgroup.procs")], "rlimits": []}
            await _spawner.spawn(
                sys.executable,
                FILTER_HEX,
                ["/bin/touch", str(marker)],
                {},
                [i.fileno(), o.fileno(), e.fileno()],
                join,
            )

    with pytest.raises(SandboxError, match="cgroup leaf, rlimits and user namespace") as error:
        asyncio.run(spawn())
    assert "gone/cgroup.procs" in str(error.value)
    assert not marker.exists()


def test_the_join_sets_each_rlimit_before_the_command(tmp_path: Path) -> None:
    files = [tmp_path / name for name in ("in", "out", "err")]
    files[0].write_bytes(b"")

    async def spawn() -> int:
        with open(files[0], "rb") as i, open(files[1], "wb") as o, open(files[2], "wb") as e:
            join = {"rlimits": [["nofile", 37], ["fsize", 4096], ["nproc", 5000]]}
            proc = await _spawner.spawn(
                sys.executable,
                FILTER_HEX,
                ["/bin/sh", "-c", "ulimit -n; ulimit -f; ulimit -p"],
                {"PATH": "/bin"},
                [i.fileno(), o.fileno(), e.fileno()],
                join,
            )
        return await proc.wait()

    assert asyncio.run(spawn()) == 0
    # dash: -f in 512-byte blocks, -p processes
    assert files[1].read_text().split() == ["37", "8", "5000"]
