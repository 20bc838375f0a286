"""The local backend's seccomp filter: a classic-BPF program (pure, built with `struct`).

It makes the syscalls that read or write another process's memory, or take its files, fail
with EPERM: `ptrace`, `process_vm_readv`, `process_vm_writev`, `pidfd_getfd` and `kcmp`.
Everything else is allowed (bubblewrap's namespaces, dropped capabilities and
`--disable-userns` already refuse mounts, new user namespaces and the like).

The program (seccomp(2), "the seccomp_data structure"; numbers from the kernel's syscall tables):

    ld  [4]                    arch
    jeq ARCH_i -> block_i      x86_64, i386, aarch64, arm (each with its own numbers)
    ret KILL_PROCESS           any other ABI: its numbers would mean other syscalls
  block_i:
    ld  [0]                    nr
    jge 0x40000000 -> errno    x86_64 only: every x32 syscall (the x32 ABI shares x86_64's arch)
    jeq NR_j -> errno          each denied syscall
    ret ALLOW
  errno:
    ret ERRNO | EPERM
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# <linux/filter.h>, <linux/bpf_common.h>
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = *(u32 *)(seccomp_data + k)
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: pc += (A == k) ? jt : jf
BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K: pc += (A >= k) ? jt : jf
BPF_RET_K = 0x06  # BPF_RET | BPF_K: return k
# <linux/seccomp.h>
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_DATA_NR = 0  # struct seccomp_data { int nr; __u32 arch; __u64 ip; __u64 args[6]; }
SECCOMP_DATA_ARCH = 4
EPERM = 1
# <linux/audit.h>: EM_* | __AUDIT_ARCH_64BIT (0x80000000) | __AUDIT_ARCH_LE (0x40000000)
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
AUDIT_ARCH_ARM = 0x40000028
X32_SYSCALL_BIT = 0x40000000  # arch/x86/include/uapi/asm/unistd.h

DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp")
# syscall numbers per ABI: asm/unistd_64.h, asm/unistd_32.h, asm-generic/unistd.h (aarch64),
# arch/arm/tools/syscall.tbl (32-bit arm, EABI)
SYSCALLS: Mapping[int, Mapping[str, int]] = {
    AUDIT_ARCH_X86_64: {
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "kcmp": 312,
        "pidfd_getfd": 438,
    },
    AUDIT_ARCH_I386: {
        "ptrace": 26,
        "process_vm_readv": 347,
        "process_vm_writev": 348,
        "kcmp": 349,
        "pidfd_getfd": 438,
    },
    AUDIT_ARCH_AARCH64: {
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "kcmp": 272,
        "pidfd_getfd": 438,
    },
    AUDIT_ARCH_ARM: {
        "ptrace": 26,
        "process_vm_readv": 376,
        "process_vm_writev": 377,
        "kcmp": 378,
        "pidfd_getfd": 438,
    },
}
ARCH_NAMES: Mapping[int, str] = {
    AUDIT_ARCH_X86_64: "x86_64",
    AUDIT_ARCH_I386: "i386",
    AUDIT_ARCH_AARCH64: "aarch64",
    AUDIT_ARCH_ARM: "arm",
}
_SOCK_FILTER = struct.Struct("=HBBI")  # struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }


@dataclass(frozen=True)
class Instruction:
    """One `struct sock_filter`: jt / jf are forward offsets from the next instruction."""

    code: int
    jt: int
    jf: int
    k: int


@dataclass(frozen=True)
class _Jump:
    """An instruction whose targets are labels, resolved by `_assemble`."""

    code: int
    k: int
    true: str | None  # None: fall through
    false: str | None


def _assemble(items: Sequence[Instruction | _Jump | str]) -> list[Instruction]:
    """Labels (str) mark the next instruction; each _Jump's labels become offsets."""
    where: dict[str, int] = {}
    index = 0
    for item in items:
        if isinstance(item, str):
            where[item] = index
        else:
            index += 1
    out: list[Instruction] = []
    for item in items:
        if isinstance(item, str):
            continue
        if isinstance(item, _Jump):
            here = len(out) + 1
            jt = 0 if item.true is None else where[item.true] - here
            jf = 0 if item.false is None else where[item.false] - here
            assert 0 <= jt <= 255 and 0 <= jf <= 255, f"jump out of range: {item}"
            out.append(Instruction(item.code, jt, jf, item.k))
        else:
            out.append(item)
    return out


def filter_instructions(denied: Sequence[str] = DENIED) -> list[Instruction]:
    """The program as instructions (see the module docstring), for every ABI in SYSCALLS."""
    unknown = sorted(set(denied) - set(SYSCALLS[AUDIT_ARCH_X86_64]))
    if unknown:
        raise ValueError(
            f"seccomp filter: expected syscalls out of {sorted(SYSCALLS[AUDIT_ARCH_X86_64])}; "
            f"found {unknown}; fix: add their numbers for every ABI to SYSCALLS"
        )
    items: list[Instruction | _Jump | str] = [Instruction(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH)]
    for arch in SYSCALLS:
        items.append(_Jump(BPF_JEQ_K, arch, f"arch-{arch:x}", None))
    items.append(Instruction(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS))
    for arch, numbers in SYSCALLS.items():
        items += [f"arch-{arch:x}", Instruction(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR)]
        if arch == AUDIT_ARCH_X86_64:
            items.append(_Jump(BPF_JGE_K, X32_SYSCALL_BIT, "errno", None))
        for name in denied:
            items.append(_Jump(BPF_JEQ_K, numbers[name], "errno", None))
        items.append(Instruction(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    items += ["errno", Instruction(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM)]
    return _assemble(items)


def encode(program: Sequence[Instruction]) -> bytes:
    """The bytes of a `struct sock_filter[]` (what bwrap's `--seccomp FD` reads)."""
    return b"".join(_SOCK_FILTER.pack(i.code, i.jt, i.jf, i.k) for i in program)


def decode(data: bytes) -> list[Instruction]:
    """`encode`'s inverse (tests, and a reader checking what a sandbox was given)."""
    if len(data) % _SOCK_FILTER.size:
        raise ValueError(
            f"seccomp program: expected a multiple of {_SOCK_FILTER.size} bytes; found "
            f"{len(data)}; fix: pass the bytes `ptrace_filter()` returns"
        )
    return [Instruction(*fields) for fields in _SOCK_FILTER.iter_unpack(data)]


def ptrace_filter() -> bytes:
    """The compiled program the local backend gives every sandbox process."""
    return encode(filter_instructions())
