"""forge_sandbox.local: the bubblewrap + cgroups backend of the Sandbox protocol.

    from forge_sandbox.local import LocalSandbox
    async with LocalSandbox(SandboxSpec(workspace="repo")) as sandbox:
        result = await sandbox.exec("python3 -m unittest -q")

`forge_sandbox` re-exports these names (LocalSandbox, CgroupLimits, detect_cgroups,
run_doctor: what `forge-sandbox doctor` probes for this backend; local_host_problems: what
this host lacks for it, each with its fix, for a preflight). After the agent,
`await sandbox.check_init()` returns an InitCheck, or raises SandboxInitChangedError when the
sandbox's init processes were replaced, traced or joined.
"""

from forge_sandbox.local._bwrap import host_problems as local_host_problems
from forge_sandbox.local._cgroup_detect import detect_cgroups
from forge_sandbox.local._cgroups import CgroupLimits
from forge_sandbox.local._doctor import run_doctor
from forge_sandbox.local._init import InitCheck, SandboxInitChangedError
from forge_sandbox.local._sandbox import LocalSandbox

__all__ = [
    "CgroupLimits",
    "InitCheck",
    "LocalSandbox",
    "SandboxInitChangedError",
    "detect_cgroups",
    "local_host_problems",
    "run_doctor",
]
