"""Forge's seccomp profile for containers (Docker's `SecurityOpt seccomp=<json>`, and the file a
Kubernetes pod's `seccompProfile: Localhost` names): its deny list, as pure data.

Why Forge has its own: the container runtimes' defaults (Docker's, containerd's RuntimeDefault)
allow `ptrace`, `process_vm_readv` and `process_vm_writev` (kernel >= 4.8), so an agent's
command could inject code into the sandbox's `sleep infinity` (same uid). A custom profile
*replaces* the runtime's default, so this one also denies what the defaults deny an
unprivileged container and an agent could use: mounts and namespaces, the kernel's keyring,
BPF, perf, userfaultfd, modules, kexec, clocks, reboot, swap, raw I/O, NUMA page moves, vsock.

This is Forge's deny list, not a copy of Docker's allow list: the default action is ALLOW and
each denied syscall gets EPERM (clone3 gets ENOSYS, so glibc falls back to clone, whose flags
seccomp can check). Left allowed on purpose: `personality` (setarch, some test suites),
`get_mempolicy`/`set_mempolicy` (allocators probe them), `chroot` (fails without
CAP_SYS_CHROOT, which is dropped; a config that adds it back means it), `io_uring_*` and
`modify_ldt` (Docker's default allows them too).

The format is the subset Docker, containerd (OCI `LinuxSeccomp`) and CRI-O all read:
`defaultAction`, `architectures`, `syscalls[].names/action/errnoRet/args`.
"""

from __future__ import annotations

import json
from typing import Any

PTRACE_FAMILY = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "process_madvise",
)
DENIED_GROUPS: dict[str, tuple[str, ...]] = {
    "another process's memory, files or pages": PTRACE_FAMILY,
    "mounts and namespaces (a new user namespace regains capabilities)": (
        "mount",
        "umount",
        "umount2",
        "mount_setattr",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "pivot_root",
        "unshare",
        "setns",
    ),
    "the kernel's keyring (shared across containers)": ("keyctl", "add_key", "request_key"),
    "kernel attack surface": (
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "fanotify_init",
        "lookup_dcookie",
    ),
    "kernel modules and kexec": (
        "init_module",
        "finit_module",
        "delete_module",
        "create_module",
        "get_kernel_syms",
        "query_module",
        "kexec_load",
        "kexec_file_load",
    ),
    "file handles (open_by_handle_at escaped containers: 'shocker')": (
        "open_by_handle_at",
        "name_to_handle_at",
    ),
    "host-wide state: power, swap, accounting, clocks, logs, quotas": (
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "settimeofday",
        "stime",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "syslog",
        "quotactl",
        "quotactl_fd",
        "nfsservctl",
        "vhangup",
    ),
    "raw I/O and legacy modes (x86)": ("iopl", "ioperm", "vm86", "vm86old"),
    "obsolete interfaces that leak host information": ("uselib", "ustat", "sysfs", "_sysctl"),
    "moving another process's or the node's memory pages": (
        "move_pages",
        "migrate_pages",
        "mbind",
    ),
}
DENIED = tuple(name for names in DENIED_GROUPS.values() for name in names)
EPERM = 1
ENOSYS = 38
AF_VSOCK = 40  # a socket to the hypervisor / host
# clone(2) flags that create namespaces (Docker's default allows clone only without them)
NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
# x86_64 with its 32-bit and x32 ABIs; aarch64 with 32-bit arm: each ABI is checked with its
# own numbers (an ABI missing here would pass unfiltered, or be refused as a whole)
ARCHITECTURES = (
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X86",
    "SCMP_ARCH_X32",
    "SCMP_ARCH_AARCH64",
    "SCMP_ARCH_ARM",
)
# the Kubernetes Localhost profile: relative to the kubelet's seccomp root on every node
KUBELET_SECCOMP_ROOT = "/var/lib/kubelet/seccomp"
LOCALHOST_PROFILE = "forge/seccomp.json"


def seccomp_profile() -> dict[str, Any]:
    """The profile as a dict (Docker / OCI seccomp JSON)."""
    errno = {"action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}
    syscalls: list[dict[str, Any]] = [
        {"names": list(DENIED), **errno},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
    ]
    for flag in NAMESPACE_FLAGS.values():  # one rule per flag: (flags & FLAG) == FLAG
        masked = {"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}
        syscalls.append({"names": ["clone"], **errno, "args": [masked]})
    vsock = {"index": 0, "value": AF_VSOCK, "valueTwo": 0, "op": "SCMP_CMP_EQ"}
    syscalls.append({"names": ["socket"], **errno, "args": [vsock]})
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": list(ARCHITECTURES),
        "syscalls": syscalls,
    }


def profile_json(*, indent: int | None = None) -> str:
    """The profile as JSON text: compact for Docker's SecurityOpt, indented for a node's file."""
    separators = (",", ":") if indent is None else (",", ": ")
    text = json.dumps(seccomp_profile(), indent=indent, separators=separators)
    return text if indent is None else text + "\n"
