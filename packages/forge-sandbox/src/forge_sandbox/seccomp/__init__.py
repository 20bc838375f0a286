"""forge_sandbox.seccomp: what every backend denies the agent's commands (pure data, no I/O).

    from forge_sandbox.seccomp import ptrace_filter, profile_json
    program = ptrace_filter()   # cBPF bytes: bwrap --seccomp FD (the local backend)
    profile = profile_json()    # Docker SecurityOpt `seccomp=<json>`; a Kubernetes Localhost file

The local backend's filter denies the ptrace family (ptrace, process_vm_readv/writev,
pidfd_getfd, kcmp) with EPERM; the container profile denies those and what the runtimes'
defaults deny an unprivileged container (a custom profile replaces the default). See each
module's docstring for the list and why.
"""

from forge_sandbox.seccomp._bpf import (
    DENIED as PTRACE_SYSCALLS,
)
from forge_sandbox.seccomp._bpf import (
    SYSCALLS,
    Instruction,
    decode,
    filter_instructions,
    ptrace_filter,
)
from forge_sandbox.seccomp._profile import (
    DENIED as PROFILE_DENIED,
)
from forge_sandbox.seccomp._profile import (
    KUBELET_SECCOMP_ROOT,
    LOCALHOST_PROFILE,
    profile_json,
    seccomp_profile,
)

__all__ = [
    "KUBELET_SECCOMP_ROOT",
    "LOCALHOST_PROFILE",
    "PROFILE_DENIED",
    "PTRACE_SYSCALLS",
    "SYSCALLS",
    "Instruction",
    "decode",
    "filter_instructions",
    "profile_json",
    "ptrace_filter",
    "seccomp_profile",
]
