"""Real sandboxes: the isolation and limits the issue asks for, each proven from inside."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from forge_sandbox import (
    EnvironmentStartTimeoutError,
    LocalSandbox,
    Sandbox,
    SandboxError,
    SandboxSpec,
    SandboxStateError,
    SandboxUnavailableError,
)

pytestmark = pytest.mark.usefixtures("isolation")


def run(coro):
    return asyncio.run(coro)


def pids_in_namespace(inode: int) -> list[int]:
    """Host pids whose pid namespace is `inode` (the sandbox's): the process count."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/pid").st_ino == inode:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_local_sandbox_implements_the_protocol() -> None:
    assert isinstance(LocalSandbox(), Sandbox)


def test_no_network_host_loopback_listener_is_refused() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probe = (
            "import socket\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "    print('CONNECTED')\n"
            "except OSError as e:\n    print(type(e).__name__)\n"
            "print(open('/proc/net/dev').read().count(':'))\n"
        )

        async def main():
            async with LocalSandbox() as sandbox:
                return await sandbox.exec(["python3", "-c", probe])

        result = run(main())
    lines = result.stdout.split()
    assert lines[0] == "ConnectionRefusedError", result
    assert lines[1] == "1", "only the sandbox's own loopback interface exists"


def test_host_files_unwritable_and_workspace_is_a_private_copy(tmp_path: Path) -> None:
    source = tmp_path / "repo"
    source.mkdir()
    (source / "a.txt").write_text("original\n")

    async def main():
        async with LocalSandbox(SandboxSpec(workspace=source)) as sandbox:
            usr = await sandbox.exec("touch /usr/forge-escape")
            etc = await sandbox.exec("echo x >> /etc/hostname")
            root = await sandbox.exec("mkdir /escape")
            shadow = await sandbox.exec("head -c1 /etc/shadow")
            edit = await sandbox.exec("echo changed > a.txt && cat a.txt")
            mounts = await sandbox.exec("cat /proc/self/mountinfo")
            return usr, etc, root, shadow, edit, mounts

    usr, etc, root, shadow, edit, mounts = run(main())
    for result in (usr, etc, root):
        assert result.exit_code != 0, result
        assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr
    options = {line.split()[4]: line.split()[5] for line in mounts.stdout.splitlines()}
    for read_only in ("/", "/usr", "/etc"):
        assert options[read_only].startswith("ro,"), (read_only, options[read_only])
    assert options["/workspace"].startswith("rw,")
    assert shadow.exit_code != 0 and "Permission denied" in shadow.stderr
    assert edit.stdout == "changed\n"
    assert (source / "a.txt").read_text() == "original\n"
    assert not Path("/usr/forge-escape").exists()


def test_capabilities_empty_and_remount_refused() -> None:
    remount = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "MS_REMOUNT, MS_BIND = 32, 4096\n"
        "rc = libc.mount(b'none', b'/usr', None, MS_REMOUNT | MS_BIND, None)\n"
        "print(rc, os.strerror(ctypes.get_errno()))\n"
    )

    async def main():
        async with LocalSandbox() as sandbox:
            status = await sandbox.exec("grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status")
            mount = await sandbox.exec(["python3", "-c", remount])
            userns = await sandbox.exec("unshare --user --map-root-user true")
            ident = await sandbox.exec("id -u; id -g")
            return status, mount, userns, ident

    status, mount, userns, ident = run(main())
    fields = dict(line.split(":\t") for line in status.stdout.strip().splitlines())
    assert fields["CapEff"] == "0000000000000000"
    assert fields["CapPrm"] == "0000000000000000"
    assert fields["NoNewPrivs"] == "1"
    assert mount.stdout.startswith("-1 Operation not permitted"), mount
    assert userns.exit_code != 0, "a nested user namespace would hand back capabilities"
    assert ident.stdout.split() == ["1000", "1000"]


@pytest.mark.usefixtures("cgroups")
def test_memory_hog_is_oom_killed() -> None:
    async def main():
        async with LocalSandbox(SandboxSpec(memory_mb=64)) as sandbox:
            hog = await sandbox.exec(["python3", "-c", "x = b'a' * (512 << 20)"])
            after = await sandbox.exec("echo alive")
            return hog, after

    hog, after = run(main())
    assert hog.oom_killed and hog.exit_code == 137 and not hog.timed_out, hog
    assert after.stdout == "alive\n" and not after.oom_killed


def test_fork_bomb_hits_the_pids_limit() -> None:
    bomb = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(10000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('blocked', n, e.errno)\n"
    )
    spec = SandboxSpec(pids_max=32, cpus=0.5, memory_mb=256)

    async def main():
        async with LocalSandbox(spec) as sandbox:
            result = await sandbox.exec(["python3", "-c", bomb], timeout_s=30)
            alive = len(sandbox.host_pids())
            inode = int(sandbox.info["pid-namespace"])
        return result, alive, inode

    result, alive, inode = run(main())
    words = result.stdout.split()
    assert words[0] == "blocked" and int(words[1]) < 32 and words[2] == "11", result  # EAGAIN
    assert 20 < alive <= 32, alive  # the children still sleep, inside the limit
    assert pids_in_namespace(inode) == []


def test_timeout_kills_the_whole_tree_and_leaves_no_process() -> None:
    async def main():
        async with LocalSandbox() as sandbox:
            before = sandbox.host_pids()
            slow = await sandbox.exec(
                "sleep 300 & (sleep 300 &) ; setsid sleep 300 & sleep 300", timeout_s=1
            )
            after = sandbox.host_pids()
            listing = await sandbox.exec("ps -e -o comm=")
            return slow, before, after, listing

    slow, before, after, listing = run(main())
    assert slow.timed_out and slow.exit_code == 124 and 0.9 < slow.duration_s < 5
    assert after == before, "only the sandbox's init processes remain"
    # the init (pid 1's reaping sh and its sleep) and ps itself
    assert sorted(listing.stdout.split()) == ["ps", "sh", "sleep"]


def test_state_persists_between_execs_and_stop_leaves_nothing() -> None:
    async def main():
        sandbox = LocalSandbox()
        await sandbox.start()
        await sandbox.exec("echo tmp > /tmp/state; echo ws > /workspace/state; mkdir -p /logs/x")
        await sandbox.exec("nohup sleep 300 >/dev/null 2>&1 &")
        read = await sandbox.exec("cat /tmp/state /workspace/state; pgrep -c sleep")
        inode = int(sandbox.info["pid-namespace"])
        running = pids_in_namespace(inode)
        cgroup = sandbox.cgroup
        await sandbox.stop()
        await sandbox.stop()  # idempotent
        return read, running, inode, cgroup, sandbox

    read, running, inode, cgroup, sandbox = run(main())
    assert read.stdout.split() == ["tmp", "ws", "2"]  # init's sleep + the background one
    assert len(running) >= 3
    assert pids_in_namespace(inode) == []
    assert not cgroup.exists()
    with pytest.raises(SandboxStateError):
        run(sandbox.exec("true"))


def test_concurrent_execs_and_env_cwd() -> None:
    async def main():
        spec = SandboxSpec(env={"FROM_SPEC": "s"})
        async with LocalSandbox(spec) as sandbox:
            await sandbox.exec("mkdir -p /workspace/sub")
            many = await asyncio.gather(*(sandbox.exec(f"echo {i}") for i in range(8)))
            env = await sandbox.exec(
                'echo "$FROM_SPEC $X $HOME $PATH"; pwd', cwd="/workspace/sub", env={"X": "x"}
            )
            return many, env

    many, env = run(main())
    assert [r.stdout.strip() for r in many] == [str(i) for i in range(8)]
    assert env.stdout.splitlines() == ["s x /tmp /usr/local/bin:/usr/bin:/bin", "/workspace/sub"]


def test_upload_download_roundtrip_and_traversal_refused(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f.txt").write_text("hello\n")
    (tree / "link").symlink_to("sub/f.txt")
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "out").symlink_to("/etc/passwd")

    async def main():
        async with LocalSandbox() as sandbox:
            await sandbox.upload(tree, "/tmp/tree")
            await sandbox.upload(tree / "sub" / "f.txt", "/workspace/one.txt")
            listing = await sandbox.exec("cat /tmp/tree/link /workspace/one.txt")
            await sandbox.download("/tmp/tree", tmp_path / "back")
            await sandbox.download("/workspace/one.txt", tmp_path / "one.txt")
            errors = []
            for bad in ("/tmp/../etc/x", "relative/x", "/"):
                with pytest.raises(SandboxError) as info:
                    await sandbox.upload(tree, bad)
                errors.append(info.value)
            with pytest.raises(SandboxError):
                await sandbox.upload(evil, "/tmp/evil")
            await sandbox.exec("mkdir -p /tmp/esc && ln -s /etc/passwd /tmp/esc/abs")
            await sandbox.exec("mkdir -p /tmp/rel && ln -s ../../etc /tmp/rel/up")
            for escaping in ("/tmp/esc", "/tmp/rel"):
                with pytest.raises(SandboxError, match="escapes"):
                    await sandbox.download(escaping, tmp_path / "x")
            with pytest.raises(SandboxError):
                await sandbox.download("/nope", tmp_path / "nope")
            readonly = None
            try:
                await sandbox.upload(tree, "/usr/tree")
            except SandboxError as exc:
                readonly = exc
            return listing, errors, readonly

    listing, errors, readonly = run(main())
    assert listing.stdout == "hello\nhello\n"
    assert (tmp_path / "back" / "sub" / "f.txt").read_text() == "hello\n"
    assert os.readlink(tmp_path / "back" / "link") == "sub/f.txt"
    assert (tmp_path / "one.txt").read_text() == "hello\n"
    assert all("fix:" in str(e) for e in errors)
    assert readonly is not None and "writable" in str(readonly)
    assert not (tmp_path / "x").exists()


def test_missing_bwrap_fails_with_the_install_command() -> None:
    with pytest.raises(SandboxUnavailableError) as info:
        run(LocalSandbox(bwrap="/nonexistent/bwrap").start())
    assert "apt-get install -y bubblewrap" in str(info.value)


def test_image_without_rootfs_is_refused() -> None:
    with pytest.raises(SandboxError, match="rootfs"):
        run(LocalSandbox(SandboxSpec(image="python:3.11-slim")).start())


def test_rootfs_directory_mode() -> None:
    async def main():
        async with LocalSandbox(SandboxSpec(rootfs=Path("/"))) as sandbox:
            seen = await sandbox.exec("test -d /var && echo var; touch /var/x || echo ro")
            return seen

    seen = run(main())
    assert seen.stdout.split() == ["var", "ro"]


def test_output_is_capped() -> None:
    async def main():
        async with LocalSandbox(SandboxSpec(max_output_bytes=4096)) as sandbox:
            return await sandbox.exec("head -c 100000 /dev/zero | tr '\\0' a")

    result = run(main())
    assert result.output_truncated and result.stdout.startswith("a" * 4096)
    assert "truncated" in result.stdout


def test_start_timeout_is_typed_and_cleans_up() -> None:
    sandbox = LocalSandbox(SandboxSpec(start_timeout_s=0.001))
    with pytest.raises(EnvironmentStartTimeoutError, match="start_timeout_s"):
        run(sandbox.start())
    assert not sandbox.running and sandbox.host_pids() == set()


def test_cancelled_exec_kills_its_tree() -> None:
    async def main():
        async with LocalSandbox() as sandbox:
            before = sandbox.host_pids()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(sandbox.exec("sleep 300 & sleep 300"), 0.5)
            after = sandbox.host_pids()
            listing = await sandbox.exec("ps -e -o comm=")
            return before, after, listing

    before, after, listing = run(main())
    assert after == before
    # names only: the state column carries the priority too (`SN` under `nice`)
    assert sorted(listing.stdout.split()) == ["ps", "sh", "sleep"]


@pytest.mark.usefixtures("cgroups")
def test_kill_processes_frees_the_limits_and_keeps_init_and_files(tmp_path: Path) -> None:
    """A fork bomb fills pids_max and makes an upload fail (with the right fix); after
    kill_processes() only the init is left, the files are kept, and uploads work again."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("exit 0\n")
    spec = SandboxSpec(pids_max=64)

    async def main():
        async with LocalSandbox(spec) as sandbox:
            init = sandbox.cgroup.child("init").pids()
            await sandbox.exec("echo kept > /workspace/f; echo kept > /tmp/f")
            bomb = await sandbox.exec("{ :(){ :|:& };:; } >/dev/null 2>&1 &", timeout_s=10)
            upload_error = ""
            for _ in range(200):  # bounded: the bomb fills pids_max within a moment
                try:
                    await sandbox.upload(tmp_path / "tests", "/tests")
                except SandboxError as exc:
                    upload_error = str(exc)
                    break
                await asyncio.sleep(0.02)
            report = await sandbox.kill_processes()
            left = sandbox.host_pids()
            await sandbox.upload(tmp_path / "tests", "/tests")
            read = await sandbox.exec("cat /workspace/f /tmp/f /tests/test.sh")
            again = await sandbox.kill_processes()
            return bomb, init, upload_error, report, left, read, again

    bomb, init, upload_error, report, left, read, again = run(main())
    assert "pids_max=64" in upload_error and "kill_processes" in upload_error, upload_error
    assert report.pids_limit_hit and report.limits_hit == ["pids"] and report.killed > 30
    assert left == init, "only the init is left"
    assert read.stdout.split() == ["kept", "kept", "exit", "0"] and not read.pids_limit_hit
    assert again.killed == 0 and again.limits_hit == ["pids"]  # since start()
    assert bomb.exit_code == 0


@pytest.mark.usefixtures("cgroups")
def test_storage_mb_is_enforced_with_enospc_and_nothing_on_the_host_disk(tmp_path: Path) -> None:
    """storage_mb = 8: /workspace (the task's files copied in, modes kept) and /tmp are tmpfs of
    8 MiB; writing 16 MiB fails with ENOSPC; the host state folder holds no workspace."""
    source = tmp_path / "repo"
    source.mkdir()
    (source / "run.sh").write_text("echo ran\n")
    (source / "run.sh").chmod(0o755)
    (source / "link").symlink_to("/etc/hostname")
    spec = SandboxSpec(workspace=source, storage_mb=8, memory_mb=128)

    async def main():
        async with LocalSandbox(spec) as sandbox:
            ran = await sandbox.exec("./run.sh && readlink link")
            workspace = await sandbox.exec("head -c 16M /dev/zero > /workspace/big")
            tmp = await sandbox.exec("head -c 16M /dev/zero > /tmp/big")
            sizes = await sandbox.exec("stat -c %s /workspace/big /tmp/big")
            state = sorted(p.name for p in sandbox._dir.iterdir())  # type: ignore[union-attr]
            group = sandbox.cgroup
            memory = (
                group.paths["memory"] / "memory.limit_in_bytes"
                if group.version == 1
                else group.path / "memory.max"
            )
            limit = int(memory.read_text())
        return ran, workspace, tmp, sizes, state, limit

    ran, workspace, tmp, sizes, state, limit = run(main())
    assert limit == (128 + 8) << 20  # tmpfs is charged to memory: memory_mb + storage_mb
    assert ran.stdout.split() == ["ran", "/etc/hostname"]
    for result in (workspace, tmp):
        assert result.exit_code != 0 and "No space left on device" in result.stderr, result
    assert all(int(n) <= 8 << 20 for n in sizes.stdout.split()), sizes.stdout
    assert "workspace" not in state, state  # nothing of /workspace on the host disk
    assert not (source / "big").exists()


def _exec_leaves(sandbox: LocalSandbox) -> list[str]:
    folder = sandbox.cgroup.pids_folder
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("exec-"))


@pytest.mark.usefixtures("cgroups")
def test_an_empty_exec_leaf_serves_the_next_exec_and_counts_its_own_hits() -> None:
    """Execs that leave nothing running share their leaves (no mkdir/rmdir per exec); one
    with a background process keeps its leaf to itself; a refused fork is reported by the
    exec that hit it, not by the next one in the same leaf."""
    forks = (
        "import os, time\n"
        "kids = []\n"
        "try:\n"
        "    for _ in range(100):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(0.5); os._exit(0)\n"
        "        kids.append(pid)\n"
        "except OSError as e:\n"
        "    print('blocked', e.errno)\n"
        "for pid in kids:\n"
        "    os.waitpid(pid, 0)\n"
    )

    async def main():
        async with LocalSandbox(SandboxSpec(pids_max=24)) as sandbox:
            for i in range(10):
                await sandbox.exec(f"echo {i}")
            one = _exec_leaves(sandbox)
            await asyncio.gather(*(sandbox.exec("sleep 0.2") for _ in range(4)))
            four = _exec_leaves(sandbox)
            await asyncio.gather(*(sandbox.exec("sleep 0.2") for _ in range(4)))
            still_four = _exec_leaves(sandbox)
            bomb = await sandbox.exec(["python3", "-c", forks], timeout_s=30)
            after = await sandbox.exec("echo after")
            await sandbox.exec("nohup sleep 300 >/dev/null 2>&1 &")
            await asyncio.gather(*(sandbox.exec("sleep 0.2") for _ in range(4)))
            kept = await sandbox.exec("pgrep -c sleep")
            return one, four, still_four, bomb, after, kept, _exec_leaves(sandbox)

    one, four, still_four, bomb, after, kept, last = run(main())
    assert one == ["exec-1"], one
    assert four == still_four == ["exec-1", "exec-2", "exec-3", "exec-4"], (four, still_four)
    assert bomb.stdout.split() == ["blocked", "11"] and bomb.pids_limit_hit, bomb
    assert after.stdout == "after\n" and not after.pids_limit_hit, after
    # the background sleep holds its leaf: four execs at once had to make a fifth
    assert kept.stdout.split() == ["2"] and last == [f"exec-{i}" for i in range(1, 6)], last


@pytest.mark.usefixtures("cgroups")
def test_an_exec_killed_by_kill_processes_leaves_its_leaf_out_of_the_next_exec() -> None:
    """kill_processes removes the leaves it kills, the leaf of an exec still in flight among
    them; that exec's leaf must not serve the next exec (it would fail to join it)."""

    async def main():
        async with LocalSandbox() as sandbox:
            await sandbox.exec("true")  # exec-1, idle again
            busy = asyncio.ensure_future(sandbox.exec("sleep 300"))
            for _ in range(200):
                if len(sandbox.host_pids()) > len(sandbox.cgroup.child("init").pids()) + 1:
                    break
                await asyncio.sleep(0.02)
            report = await sandbox.kill_processes()
            killed = await busy
            nexts = [await sandbox.exec("echo ok") for _ in range(3)]
            return report, killed, nexts, _exec_leaves(sandbox)

    report, killed, nexts, leaves = run(main())
    assert report.killed >= 1 and killed.exit_code == 137, (report, killed)
    assert [r.stdout for r in nexts] == ["ok\n"] * 3, nexts
    assert leaves == ["exec-2"], leaves  # exec-1 went with the kill; the next ones share one
