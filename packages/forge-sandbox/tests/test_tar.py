"""Tar transfer refusals, on crafted archives (no sandbox needed)."""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_sandbox import SandboxPathError
from forge_sandbox._tar import check_sandbox_path, pack, unpack, validate_members


def _archive(*members: tarfile.TarInfo, data: bytes = b"x") -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member in members:
            if member.isfile():
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
            else:
                tar.addfile(member)
    buffer.seek(0)
    return buffer


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    if kind == tarfile.DIRTYPE:
        info.mode = 0o755  # TarInfo's default, 0o644, is a folder only root may enter
    return info


@pytest.mark.parametrize(
    "member",
    [
        _member("/etc/passwd"),
        _member("out/../../evil"),
        _member("other/file"),
        _member("out/abs", tarfile.SYMTYPE, "/etc/passwd"),
        _member("out/up", tarfile.SYMTYPE, "../../etc"),
        _member("out/deep/up", tarfile.SYMTYPE, "../../x"),
        _member("out/hard", tarfile.LNKTYPE, "/etc/shadow"),
        _member("out/hard2", tarfile.LNKTYPE, "out/../../x"),
        _member("out/dev", tarfile.CHRTYPE),
        _member("out/fifo", tarfile.FIFOTYPE),
    ],
    ids=lambda m: f"{m.name}->{m.linkname}" if m.linkname else m.name,
)
def test_escaping_members_are_refused(member: tarfile.TarInfo, tmp_path: Path) -> None:
    with pytest.raises(SandboxPathError):
        unpack(_archive(_member("out", tarfile.DIRTYPE), member), "out", tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    assert list(tmp_path.iterdir()) == []  # no staging folder left behind


@pytest.mark.usefixtures("isolation")
def test_links_inside_the_root_are_kept(tmp_path: Path) -> None:
    archive = _archive(
        _member("out", tarfile.DIRTYPE),
        _member("out/sub", tarfile.DIRTYPE),
        _member("out/sub/f"),
        _member("out/rel", tarfile.SYMTYPE, "sub/f"),
        _member("out/sub/back", tarfile.SYMTYPE, "../rel"),
    )
    unpack(archive, "out", tmp_path / "dest")
    assert (tmp_path / "dest" / "rel").read_bytes() == b"x"
    assert (tmp_path / "dest" / "sub" / "back").is_symlink()


def test_pack_unpack_roundtrip_and_merge(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "f").write_text("1")
    (src / "l").symlink_to("a/f")
    buffer = io.BytesIO()
    pack(src, "tree", buffer)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep").write_text("k")
    unpack(buffer, "tree", dest)
    assert (dest / "a" / "f").read_text() == "1" and (dest / "keep").read_text() == "k"


def test_pack_refuses_escaping_links_and_missing_sources(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "abs").symlink_to("/etc/passwd")
    with pytest.raises(SandboxPathError, match="escapes"):
        pack(src, "x", io.BytesIO())
    (src / "abs").unlink()
    (src / "up").symlink_to("../../etc")
    with pytest.raises(SandboxPathError, match="escapes"):
        pack(src, "x", io.BytesIO())
    with pytest.raises(FileNotFoundError):
        pack(tmp_path / "missing", "x", io.BytesIO())


def test_file_over_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    with pytest.raises(SandboxPathError, match="is a folder"):
        unpack(_archive(_member("f")), "f", tmp_path / "dest")


@pytest.mark.parametrize("bad", ["relative", "", "/a/../b", "/..", "/", "//", "/x/\0"])
def test_check_sandbox_path_refuses(bad: str) -> None:
    with pytest.raises(SandboxPathError, match="fix:|expected"):
        check_sandbox_path(bad)


def test_check_sandbox_path_normalises() -> None:
    assert check_sandbox_path("/workspace//a/./b/") == "/workspace/a/b"
    assert check_sandbox_path("/", allow_root=True) == "/"


segment = st.sampled_from(["a", "b", "..", ".", "", "c d"])


@given(st.lists(segment, min_size=1, max_size=6), st.lists(segment, max_size=4))
def test_validated_members_never_leave_the_root(parts: list[str], link: list[str]) -> None:
    """Property: whatever a member's name and link, an accepted one stays under `root/`."""
    name = "/".join(["root", *parts])
    member = _member(name, tarfile.SYMTYPE, "/".join(link) or ".")
    try:
        validate_members([member], "root")
    except SandboxPathError:
        return
    normal = posixpath.normpath(name)
    target = posixpath.normpath(posixpath.join(posixpath.dirname(normal), member.linkname))
    for path in (normal, target):
        assert path == "root" or path.startswith("root/")
