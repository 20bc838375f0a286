"""The agent's commands cannot ptrace or write another process's memory (local backend), and
the seccomp programs and profile every backend gets: a cBPF interpreter runs the local filter
over syscall numbers; real sandboxes run the attacks from inside; check_init reads the init."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_sandbox import LocalSandbox, SandboxError, SandboxSpec
from forge_sandbox.local import InitCheck, SandboxInitChangedError
from forge_sandbox.local._init import (
    ProcessMark,
    check_marks,
    install_init_programs,
    resolve_in_root,
)
from forge_sandbox.seccomp import (
    PROFILE_DENIED,
    PTRACE_SYSCALLS,
    SYSCALLS,
    decode,
    ptrace_filter,
    seccomp_profile,
)
from forge_sandbox.seccomp._bpf import (
    AUDIT_ARCH_AARCH64,
    AUDIT_ARCH_ARM,
    AUDIT_ARCH_I386,
    AUDIT_ARCH_X86_64,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
)

EPERM_RET = SECCOMP_RET_ERRNO | 1
X32_BIT = 0x40000000
# what each attack returns from inside: "ok" or the errno's name (run by the sandbox's python3)
PROBE = r"""
import ctypes, errno, json, os, platform, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": dict(ptrace=101, process_vm_readv=310, process_vm_writev=311, kcmp=312,
                     pidfd_open=434, pidfd_getfd=438),
      "aarch64": dict(ptrace=117, process_vm_readv=270, process_vm_writev=271, kcmp=272,
                      pidfd_open=434, pidfd_getfd=438)}[platform.machine()]
def call(name, *args):
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    return (ret, "ok") if ret >= 0 else (ret, errno.errorcode[ctypes.get_errno()])
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local = Iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
report = {"seccomp": libc.prctl(21, 0, 0, 0, 0)}  # PR_GET_SECCOMP
for pid in map(int, sys.argv[1:]):
    remote = Iovec(0x10000, 8)
    iov = (ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
    pidfd, _ = call("pidfd_open", pid, 0)
    try:
        open(f"/proc/{pid}/mem", "r+b").close()
        mem = "ok"
    except OSError as exc:
        mem = errno.errorcode[exc.errno]
    report[pid] = {
        "ptrace": call("ptrace", 16, pid, 0, 0)[1],  # PTRACE_ATTACH
        "process_vm_readv": call("process_vm_readv", pid, *iov)[1],
        "process_vm_writev": call("process_vm_writev", pid, *iov)[1],
        "pidfd_getfd": call("pidfd_getfd", pidfd, 0, 0)[1] if pidfd >= 0 else "no pidfd",
        "kcmp": call("kcmp", os.getpid(), pid, 0, 0, 0)[1],  # KCMP_FILE
        "proc_mem": mem,
    }
print(json.dumps(report))
"""
DENIED_ALL = {
    "ptrace": "EPERM",
    "process_vm_readv": "EPERM",
    "process_vm_writev": "EPERM",
    "pidfd_getfd": "EPERM",
    "kcmp": "EPERM",
}


def run(coro):
    return asyncio.run(coro)


# -- the cBPF program ------------------------------------------------------------------------


def run_filter(program: bytes, arch: int, nr: int) -> int:
    """A cBPF interpreter for what seccomp programs use: ld [k], jeq/jge k, ret k."""
    code = decode(program)
    data = {0: nr & 0xFFFFFFFF, 4: arch}
    accumulator, pc = 0, 0
    for _ in range(len(code) + 1):  # forward jumps only: every run ends within len(code)
        op = code[pc]
        if op.code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            accumulator = data[op.k]
            pc += 1
        elif op.code in (0x15, 0x35):  # BPF_JMP | BPF_JEQ / BPF_JGE | BPF_K
            taken = accumulator == op.k if op.code == 0x15 else accumulator >= op.k
            pc += 1 + (op.jt if taken else op.jf)
        elif op.code == 0x06:  # BPF_RET | BPF_K
            return op.k
        else:
            raise AssertionError(f"unexpected opcode {op.code:#x} at {pc}")
        assert pc < len(code), f"jump past the end at {pc}"
    raise AssertionError("the program did not return")


def expected(arch: int, nr: int) -> int:
    if arch not in SYSCALLS:
        return SECCOMP_RET_KILL_PROCESS  # another ABI's numbers would mean other syscalls
    if arch == AUDIT_ARCH_X86_64 and nr >= X32_BIT:
        return EPERM_RET  # every x32 syscall
    return EPERM_RET if nr in set(SYSCALLS[arch].values()) else SECCOMP_RET_ALLOW


ARCHES = st.sampled_from([*SYSCALLS, 0x40000008, 0x80000016, 0])  # + mips, s390x, nothing
NUMBERS = st.one_of(
    st.integers(0, 0xFFFFFFFF),
    st.integers(0, 600),
    st.sampled_from([n for table in SYSCALLS.values() for n in table.values()]),
)


@pytest.mark.hypothesis
@given(ARCHES, NUMBERS)
def test_exactly_the_ptrace_family_gets_eperm_on_every_abi(arch: int, nr: int) -> None:
    assert run_filter(ptrace_filter(), arch, nr) == expected(arch, nr)


def test_the_filter_by_hand() -> None:
    program = ptrace_filter()
    assert decode(program) and len(program) % 8 == 0
    cases = {
        (AUDIT_ARCH_X86_64, 101): EPERM_RET,  # ptrace
        (AUDIT_ARCH_X86_64, 311): EPERM_RET,  # process_vm_writev
        (AUDIT_ARCH_X86_64, 438): EPERM_RET,  # pidfd_getfd
        (AUDIT_ARCH_X86_64, 0): SECCOMP_RET_ALLOW,  # read
        (AUDIT_ARCH_X86_64, 117): SECCOMP_RET_ALLOW,  # setresuid (ptrace on aarch64)
        (AUDIT_ARCH_X86_64, X32_BIT | 521): EPERM_RET,  # x32 ptrace
        (AUDIT_ARCH_X86_64, X32_BIT | 1): EPERM_RET,  # x32 write: the whole ABI
        (AUDIT_ARCH_I386, 26): EPERM_RET,  # i386 ptrace
        (AUDIT_ARCH_I386, 101): SECCOMP_RET_ALLOW,  # i386 ioperm: not this filter's
        (AUDIT_ARCH_AARCH64, 117): EPERM_RET,
        (AUDIT_ARCH_AARCH64, 271): EPERM_RET,
        (AUDIT_ARCH_AARCH64, 101): SECCOMP_RET_ALLOW,  # nanosleep
        (AUDIT_ARCH_ARM, 377): EPERM_RET,
        (0x40000008, 26): SECCOMP_RET_KILL_PROCESS,  # mips: unexpected
    }
    assert {case: run_filter(program, *case) for case in cases} == cases
    assert set(PTRACE_SYSCALLS) == {
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "pidfd_getfd",
        "kcmp",
    }


def test_the_numbers_match_this_hosts_kernel_headers() -> None:
    """Where linux-libc-dev is installed, its tables agree with SYSCALLS (x86_64 here)."""
    headers = {
        AUDIT_ARCH_X86_64: "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
        AUDIT_ARCH_I386: "/usr/include/x86_64-linux-gnu/asm/unistd_32.h",
        AUDIT_ARCH_AARCH64: "/usr/include/asm-generic/unistd.h",
    }
    checked = 0
    for arch, header in headers.items():
        if not Path(header).exists():
            continue
        text = Path(header).read_text()
        for name, number in SYSCALLS[arch].items():
            assert f"#define __NR_{name} {number}\n" in text or (
                f"#define __NR3264_{name} {number}" in text
            ), (arch, name, number)
            checked += 1
    if Path(headers[AUDIT_ARCH_X86_64]).exists():
        assert checked >= 10


# -- the container profile (Docker, Kubernetes) -------------------------------------------------


def test_the_container_profile_denies_the_ptrace_family_and_keeps_the_defaults_protections() -> (
    None
):
    profile = seccomp_profile()
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    assert json.loads(json.dumps(profile)) == profile
    eperm = {
        name
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ERRNO" and rule["errnoRet"] == 1 and "args" not in rule
        for name in rule["names"]
    }
    assert eperm == set(PROFILE_DENIED)
    must = set(PTRACE_SYSCALLS) | {
        "mount", "umount2", "unshare", "setns", "pivot_root", "keyctl", "add_key",
        "request_key", "bpf", "perf_event_open", "kexec_load", "kexec_file_load",
        "open_by_handle_at", "name_to_handle_at", "init_module", "finit_module",
        "delete_module", "reboot", "swapon", "swapoff", "acct", "settimeofday",
        "clock_settime", "clock_adjtime", "adjtimex", "userfaultfd", "lookup_dcookie",
        "quotactl", "nfsservctl", "iopl", "ioperm", "vm86", "vm86old", "syslog", "uselib",
        "ustat", "sysfs", "_sysctl", "move_pages", "mbind", "create_module",
        "get_kernel_syms", "query_module",
    }  # fmt: skip
    assert must <= eperm, sorted(must - eperm)
    # left allowed on purpose: ordinary tools use them
    assert not {"personality", "get_mempolicy", "set_mempolicy", "chroot", "clone"} & eperm
    clone = [r for r in profile["syscalls"] if r["names"] == ["clone"]]
    user_ns = 0x10000000
    assert {"index": 0, "value": user_ns, "valueTwo": user_ns, "op": "SCMP_CMP_MASKED_EQ"} in [
        r["args"][0] for r in clone
    ]
    assert len(clone) == 7  # one rule per namespace flag
    clone3 = [r for r in profile["syscalls"] if r["names"] == ["clone3"]]
    assert clone3 == [{"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]
    assert "SCMP_ARCH_X86_64" in profile["architectures"]
    assert "SCMP_ARCH_AARCH64" in profile["architectures"]


# -- real sandboxes ----------------------------------------------------------------------------


@pytest.mark.usefixtures("isolation")
def test_inside_a_sandbox_ptrace_and_memory_writes_fail_and_ordinary_commands_work() -> None:
    async def main():
        async with LocalSandbox(SandboxSpec(storage_mb=32)) as sandbox:
            await sandbox.exec(["/bin/sh", "-c", f"cat > /tmp/probe.py <<'EOF'\n{PROBE}\nEOF"])
            init_sleep = await sandbox.exec("pgrep -o -x sleep")
            attacks = await sandbox.exec(
                f"sleep 60 & python3 /tmp/probe.py 1 {init_sleep.stdout.strip()} $!"
            )
            status = await sandbox.exec(["cat", "/proc/self/status"])
            tools = await sandbox.exec(
                "git init -q /tmp/r && git -C /tmp/r status --short && bash -c 'echo bash' && "
                "python3 -c 'print(6 * 7)' && (yes | head -c 3 >/dev/null; echo pipe $?)"
            )
            await sandbox.kill_processes()
            checked = await sandbox.check_init()
            return init_sleep, attacks, status, tools, checked

    init_sleep, attacks, status, tools, checked = run(main())
    report = json.loads(attacks.stdout)
    sleep_pid, sibling = int(init_sleep.stdout), max(int(k) for k in report if k.isdigit())
    assert report["seccomp"] == 2  # PR_GET_SECCOMP: filter mode
    for pid in (1, sleep_pid, sibling):  # pid 1, the init's sleep, the agent's own process
        assert {k: v for k, v in report[str(pid)].items() if k != "proc_mem"} == DENIED_ALL
    # the init's memory is closed through /proc too (non-dumpable); the agent's own is its own
    assert report["1"]["proc_mem"] == report[str(sleep_pid)]["proc_mem"] == "EACCES"
    fields = dict(line.split(":\t", 1) for line in status.stdout.splitlines())
    assert fields["Seccomp"] == "2" and fields["NoNewPrivs"] == "1"
    assert fields["SigIgn"] == "0000000000000000"  # the filter's helper restored SIGPIPE/XFSZ
    assert tools.stdout.split() == ["bash", "42", "pipe", "0"], tools
    assert isinstance(checked, InitCheck) and len(checked.pids) == 3  # bwrap, sh, sleep


def test_without_the_filter_the_same_probe_succeeds(tmp_path: Path) -> None:
    """The probe can fail: on the host (no filter), attaching to our own child works."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    child = subprocess.Popen(["sleep", "30"])
    try:
        out = subprocess.run(
            [sys.executable, str(script), str(child.pid)], capture_output=True, text=True
        )
    finally:
        child.kill()
        child.wait()
    report = json.loads(out.stdout)
    assert report["seccomp"] == 0
    assert report[str(child.pid)]["ptrace"] == "ok"
    assert report[str(child.pid)]["process_vm_writev"] != "EPERM"


# -- check_init ----------------------------------------------------------------------------------

SEIZE = (
    "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
    "assert libc.ptrace(0x4206, int(sys.argv[1]), 0, 0) == 0, ctypes.get_errno(); "
    "print('seized', flush=True); sys.stdin.read()"  # PTRACE_SEIZE; exit (detach) at EOF
)


@pytest.mark.usefixtures("isolation")
def test_check_init_finds_a_traced_or_replaced_init() -> None:
    async def main():
        async with LocalSandbox() as sandbox:
            sleep_mark = next(m for m in sandbox._init_marks if m.comm == "sleep")
            assert sleep_mark.settled, sleep_mark  # marked once it sleeps (its code is mapped)
            sleep_pid = sleep_mark.pid
            tracer = subprocess.Popen(
                [sys.executable, "-c", SEIZE, str(sleep_pid)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert tracer.stdout is not None and tracer.stdout.readline() == "seized\n"
            with pytest.raises(SandboxInitChangedError, match=f"traced by pid {tracer.pid}"):
                await sandbox.check_init()
            tracer.communicate("")  # the tracer exits: detached
            await sandbox.check_init()  # as start() left it again
            await sandbox.exec("kill $(pgrep -o -x sleep)")  # the loop starts another
            await asyncio.sleep(0.2)
            with pytest.raises(SandboxInitChangedError) as replaced:
                await sandbox.check_init()
            return str(replaced.value)

    message = run(main())
    assert "(sleep) is gone" in message and "(sleep) is new" in message
    assert "fix:" in message and "expected" in message


def _mark(**fields: object) -> ProcessMark:
    base: dict[str, object] = dict(
        pid=7, start_ticks=100, comm="sleep", exe="/.forge-init/sleep", code=("1-2 r-xp /x",),
        in_sandbox=True, tracer=0, seccomp=2, dumpable=False,
    )  # fmt: skip
    return ProcessMark(**{**base, **fields})  # type: ignore[arg-type]


def test_check_marks_names_every_difference() -> None:
    before = [_mark()]
    assert check_marks(before, [_mark()]) == []
    found = check_marks(
        before,
        [
            _mark(
                exe="/tmp/evil",
                code=("1-2 r-xp /x", "3-4 rwxp"),
                tracer=9,
                seccomp=0,
                dumpable=True,
            ),
            _mark(pid=8, comm="python3"),
        ],
    )
    text = " | ".join(found)
    for needle in (
        "runs /tmp/evil",
        "new code mappings: ['3-4 rwxp']",
        "traced by pid 9",
        "seccomp mode 0",
        "dumpable",
        "pid 8 (python3) is new",
    ):
        assert needle in text, needle
    assert check_marks(before, []) == ["pid 7 (sleep) is gone (or replaced)"]


@pytest.mark.usefixtures("isolation")
def test_the_init_programs_come_from_the_sandbox_s_own_root(tmp_path: Path) -> None:
    """Links are followed inside the rootfs (an image's busybox), never out to the host's."""
    root = tmp_path / "rootfs"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "bin").symlink_to("/usr/bin")  # absolute: the rootfs's, never the host's /usr/bin
    (root / "usr" / "bin" / "busybox").write_bytes(b"\x7fELF busybox")
    (root / "usr" / "bin" / "sh").symlink_to("busybox")
    (root / "usr" / "bin" / "sleep").symlink_to("/bin/busybox")  # absolute: inside the root
    assert resolve_in_root(root, "sh") == root / "usr" / "bin" / "busybox"
    assert resolve_in_root(root, "sleep") == root / "usr" / "bin" / "busybox"
    copies = install_init_programs(root, tmp_path / "init")
    for name in ("sh", "sleep"):
        assert (copies / name).stat().st_mode & 0o777 == 0o111  # execute-only: non-dumpable
        (copies / name).chmod(0o400)  # to read it back (as a user other than root)
        assert (copies / name).read_bytes() == b"\x7fELF busybox"
    (root / "usr" / "bin" / "sleep").unlink()
    with pytest.raises(SandboxError, match=r"expected /usr/bin/sleep or /bin/sleep.*fix:"):
        resolve_in_root(root, "sleep")
