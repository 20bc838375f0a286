"""Checks every backend's Sandbox passes, shared by the local, Kubernetes and Docker suites."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from forge_sandbox._errors import SandboxTransferError
from forge_sandbox._protocol import Sandbox

_MEMBERS = (  # name, kind, mode, content or link target
    ("d", tarfile.DIRTYPE, 0o700, b""),
    ("d/run.sh", tarfile.REGTYPE, 0o755, b"#!/bin/sh\necho ran\n"),
    ("secret", tarfile.REGTYPE, 0o600, b"s"),
    ("l", tarfile.SYMTYPE, 0o777, b"d/run.sh"),
)


async def check_extract(sandbox: Sandbox, scratch: Path) -> None:
    """`extract` unpacks a host tar into an existing folder in one call: modes kept (a 0700
    folder that was 0755, a 0755 script, a 0600 file), a link as a link, every member owned
    by the exec user (the archive says root); a folder that is not there is a
    SandboxTransferError."""
    archive = scratch / "extract-check.tar"
    with tarfile.open(archive, "w") as tar:
        for name, kind, mode, data in _MEMBERS:
            member = tarfile.TarInfo(name)
            member.type, member.mode, member.uid, member.gid = kind, mode, 0, 0
            if kind == tarfile.SYMTYPE:
                member.linkname = data.decode()
                tar.addfile(member)
            else:
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data) if data else None)
    # `d` is there already, 0755: the archive's 0700 must reach an existing folder too (a
    # change that tightened a folder of the repository)
    made = await sandbox.exec(
        ["sh", "-c", "mkdir -p /tmp/extracted/d && chmod 755 /tmp/extracted/d"]
    )
    assert made.exit_code == 0, made
    await sandbox.extract(archive, "/tmp/extracted")
    script = (
        'cd /tmp/extracted && stat -c "%n %a %u" d d/run.sh secret && readlink l && ./l && id -u'
    )
    run = await sandbox.exec(["sh", "-c", script])
    lines = run.stdout.splitlines()
    assert run.exit_code == 0 and len(lines) == 6, f"expected the unpacked tree; found {run}"
    uid = lines[5]
    assert lines[:3] == [f"d 700 {uid}", f"d/run.sh 755 {uid}", f"secret 600 {uid}"], lines
    assert lines[3:5] == ["d/run.sh", "ran"], lines
    try:
        await sandbox.extract(archive, "/nonexistent-folder")
    except SandboxTransferError:
        return
    raise AssertionError("expected SandboxTransferError for a folder that is not there")
