"""The fresh-sandbox verifier: the agent's change carried (sources only, modes kept), the
listed tests read from the run's own output, and who caused a failure."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_sandbox import LocalSandbox, SandboxSpec, load_task, run_job
from forge_sandbox.testing.conformance import check_extract
from forge_sandbox.verify import _transfer
from forge_sandbox.verify._testlist import check_listed, listed_tests
from forge_sandbox.verify._transfer import (
    ARGV_MAX_BYTES,
    Change,
    ChangeError,
    Entry,
    Manifest,
    _as_argv,
    carry_change,
    check_change_archive,
    diff_manifests,
    take_manifest,
)

# -- the change between two manifests ----------------------------------------------------------

_names = st.sampled_from(["a", "b", "c", "d/e", "d/f", "d", "g/h/i", "g", "g/h"])
_entries = st.builds(
    Entry,
    kind=st.sampled_from(["f", "l"]),
    mode=st.sampled_from([0o644, 0o755]),
    content=st.sampled_from(["x", "y", "z"]),
)


def _tree(files: dict[str, Entry]) -> dict[str, Entry]:
    """A consistent tree: every parent of a file is a folder, no file under a file."""
    tree: dict[str, Entry] = {}
    for path, entry in sorted(files.items()):
        parts = path.split("/")
        parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if any(p in tree and tree[p].kind != "d" for p in parents) or path in tree:
            continue
        for parent in parents:
            tree[parent] = Entry("d", 0o755, "")
        tree[path] = entry
    return tree


def _apply(before: dict[str, Entry], after: dict[str, Entry], change: Change) -> dict[str, Entry]:
    """What the fresh sandbox holds after carry_change: delete (recursively), then copy."""
    result = {
        p: e
        for p, e in before.items()
        if not any(p == d or p.startswith(d + "/") for d in change.delete)
    }
    for path in change.copy:
        result[path] = after[path]
    return result


@given(st.dictionaries(_names, _entries), st.dictionaries(_names, _entries))
def test_applying_the_change_to_the_pristine_tree_gives_the_agents_tree(before, after) -> None:
    old, new = _tree(before), _tree(after)
    change = diff_manifests(Manifest("/w", old), Manifest("/w", new))
    assert _apply(old, new, change) == new
    assert change.empty == (old == new)


def test_a_changed_type_is_deleted_then_copied() -> None:
    before = Manifest("/w", {"x": Entry("d", 0o755, ""), "x/y": Entry("f", 0o644, "1")})
    after = Manifest("/w", {"x": Entry("f", 0o644, "2")})
    change = diff_manifests(before, after)
    assert change.delete == ("x",) and change.copy == ("x",)


def _archive(tmp_path: Path, members: list[tarfile.TarInfo]) -> Path:
    path = tmp_path / "change.tar"
    with tarfile.open(path, "w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"") if member.isfile() else None)
    return path


@pytest.mark.parametrize(
    ("name", "kind", "link", "why"),
    [
        ("other.py", tarfile.REGTYPE, "", "only the changed paths"),
        ("a.py", tarfile.SYMTYPE, "/logs/verifier/reward.txt", "inside the working tree"),
        ("a.py", tarfile.SYMTYPE, "../../etc/passwd", "inside the working tree"),
        ("a.py", tarfile.FIFOTYPE, "", "files, folders and links"),
    ],
)
def test_a_change_archive_with_anything_else_is_refused(tmp_path, name, kind, link, why) -> None:
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, link
    with pytest.raises(ChangeError, match=why):
        check_change_archive(_archive(tmp_path, [member]), Change(copy=("a.py",), delete=()))


# -- carried for real, local backend -----------------------------------------------------------


def test_short_plain_path_lists_go_on_the_command_line_others_in_a_file() -> None:
    assert _as_argv(("pkg/mod.py", "new/deep/blob.bin"))
    assert not _as_argv(("-rf.py",))  # an option to tar or rm
    assert not _as_argv(("café.py",)) and not _as_argv(("a\nb",)) and not _as_argv(("a\tb",))
    assert not _as_argv(tuple(f"p{i:06d}" for i in range(ARGV_MAX_BYTES // 8 + 1)))


@pytest.mark.usefixtures("isolation")
@pytest.mark.parametrize(
    ("odd", "wipe", "packed"),
    [(False, False, 0), (True, False, 0), (False, True, 1), (True, True, 1)],
    ids=["candidates", "candidates-odd-names", "packed-argv", "packed-list-files"],
)
@pytest.mark.parametrize("printed", [True, False], ids=["printed", "downloaded"])
def test_the_change_travels_sources_and_modes_not_bytecode_git_or_tmp(
    tmp_path: Path, monkeypatch, odd: bool, wipe: bool, packed: int, printed: bool
) -> None:
    """The change comes from the candidates packed with the after manifest (paths whose
    status changed since the mark), or, when the agent wiped /tmp (the mark with it), is
    packed on its own: names on the command line, or in list files when they cannot be."""
    calls = []
    real_pack = _transfer._pack_change

    async def pack(*args):
        calls.append(args)
        await real_pack(*args)

    monkeypatch.setattr(_transfer, "_pack_change", pack)
    fetched = []  # manifests too large to print (here: a 1 KiB output cap) are downloaded
    real_download = LocalSandbox.download

    async def download(self, source, local):
        fetched.append(source)
        await real_download(self, source, local)

    monkeypatch.setattr(LocalSandbox, "download", download)
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    (repo / "pkg" / "gone.py").write_text("y = 2\n")
    if odd:  # names that cannot go on a command line as they are: both lists travel as files
        (repo / "-gone dash.py").write_text("z = 3\n")
    (repo / "tool.sh").write_text("echo hi\n")
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    agent = (
        "printf 'x = 2\\n' > pkg/mod.py && rm pkg/gone.py && chmod 755 tool.sh && "
        "mkdir -p new/deep && printf '\\000\\001binary' > new/deep/blob.bin && "
        "ln -s ../pkg/mod.py new/link.py && mkdir -p pkg/__pycache__ && "
        "echo planted > pkg/__pycache__/mod.cpython-311.pyc && echo evil > .git/HEAD && "
        "echo 1 > /tmp/reward.txt && touch -d '2001-01-01' pkg/mod.py"  # an old mtime
    ) + (" && rm -- '-gone dash.py' && echo new > 'pkg/café -x.py'" if odd else "")
    agent += " && rm -rf /tmp/.forge-before" if wipe else ""

    async def go() -> tuple[Manifest, Manifest, str, str]:
        spec = SandboxSpec(workspace=repo, max_output_bytes=8 * 1024**2 if printed else 1024)
        async with LocalSandbox(spec) as box, LocalSandbox(spec) as fresh:
            before = await take_manifest(box, tmp_path, after_agent=False)
            assert (await box.exec(["sh", "-c", agent])).exit_code == 0
            after = await take_manifest(box, tmp_path, after_agent=True)
            await carry_change(box, fresh, diff_manifests(before, after), before, tmp_path, after)
            carried = await take_manifest(fresh, tmp_path, after_agent=False)
            head = (await fresh.exec(["cat", ".git/HEAD"])).stdout
            leftovers = (await fresh.exec(["sh", "-c", "ls -A /tmp pkg"])).stdout
            return after, carried, head, leftovers

    after, carried, head, leftovers = asyncio.run(go())
    assert carried.entries == after.entries
    assert carried.entries["tool.sh"].mode == 0o755
    assert carried.entries["new/link.py"] == Entry("l", carried.entries["new/link.py"].mode,
                                                   "../pkg/mod.py")  # fmt: skip
    assert "pkg/gone.py" not in carried.entries and "new/deep/blob.bin" in carried.entries
    assert head == "ref: refs/heads/main\n"  # .git is the task's own
    assert "__pycache__" not in leftovers and "reward.txt" not in leftovers
    assert ".forge-transfer" not in leftovers and ".forge-change" not in leftovers
    assert len(calls) == packed
    manifests = [f for f in fetched if f.endswith("manifest.tar")]
    assert len(manifests) == (0 if printed else 3)  # before, after, the check of the result
    if odd:
        assert "pkg/café -x.py" in carried.entries and "-gone dash.py" not in carried.entries


@pytest.mark.usefixtures("isolation")
def test_extract_unpacks_in_one_call_with_modes_and_the_exec_users_ownership(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        async with LocalSandbox() as box:
            await check_extract(box, tmp_path)

    asyncio.run(go())


@pytest.mark.usefixtures("isolation")
def test_a_change_without_deletions_reaches_the_fresh_sandbox_in_one_call(
    tmp_path: Path, monkeypatch
) -> None:
    """The fresh sandbox gets the checked archive through `extract` alone: no upload staged
    in its /tmp, no exec to unpack it (a round trip saved per trial: a pod exec on a cluster)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    calls: list[str] = []

    async def go() -> dict[str, Entry]:
        spec = SandboxSpec(workspace=repo)
        async with LocalSandbox(spec) as box, LocalSandbox(spec) as fresh:
            before = await take_manifest(box, tmp_path, after_agent=False)
            await box.exec(["sh", "-c", "echo 'x = 2' > a.py && mkdir -p b && echo y > b/c.py"])
            after = await take_manifest(box, tmp_path, after_agent=True)
            for name in ("exec", "upload", "extract"):
                real = getattr(fresh, name)

                def spy(*args, _name=name, _real=real, **kwargs):
                    calls.append(_name)
                    return _real(*args, **kwargs)

                monkeypatch.setattr(fresh, name, spy)
            await carry_change(box, fresh, diff_manifests(before, after), before, tmp_path, after)
            monkeypatch.undo()
            return (await take_manifest(fresh, tmp_path, after_agent=False)).entries

    carried = asyncio.run(go())
    assert calls == ["extract"]
    assert {p: e.kind for p, e in carried.items()} == {"a.py": "f", "b": "d", "b/c.py": "f"}


@pytest.mark.usefixtures("isolation")
@pytest.mark.parametrize(
    "unreadable", ["", "chmod 000 pkg/mod.py", "chmod 000 pkg"], ids=["readable", "file", "folder"]
)
def test_the_after_manifest_clears_tmp_and_fails_on_a_tree_the_agent_made_unreadable(
    tmp_path: Path, unreadable: str
) -> None:
    """One walk lists, hashes and finds the candidates: a file or folder the agent made
    unreadable fails it as the agent's doing (ChangeError: scored 0), never a manifest that
    silently lacks it; what it left in /tmp (any name) is removed, the mark kept."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    junk = "touch /tmp/a '/tmp/*' /tmp/.h /tmp/..x && mkdir -p /tmp/d/e && ln -s / /tmp/l"

    async def go() -> tuple[Manifest | ChangeError, str]:
        async with LocalSandbox(SandboxSpec(workspace=repo)) as box:
            before = await take_manifest(box, tmp_path, after_agent=False)
            assert set(before.entries) == {"pkg", "pkg/mod.py"}
            command = "echo 2 > new.py && " + junk + (f" && {unreadable}" if unreadable else "")
            assert (await box.exec(["sh", "-c", command])).exit_code == 0
            try:
                after: Manifest | ChangeError = await take_manifest(box, tmp_path, after_agent=True)
            except ChangeError as exc:
                after = exc
            left = (await box.exec(["ls", "-A", "/tmp"])).stdout.split()
            return after, left

    after, left = asyncio.run(go())
    assert sorted(left) == [".forge-before", ".forge-transfer"]
    if unreadable:
        assert isinstance(after, ChangeError) and "unreadable" in str(after)
        return
    assert isinstance(after, Manifest) and set(after.entries) == {"pkg", "pkg/mod.py", "new.py"}
    with tarfile.open(tmp_path / "after" / _transfer.CANDIDATES_TAR) as packed:
        assert packed.getnames() == ["new.py"]  # only what changed since the mark


# -- the listed tests, read from the output ----------------------------------------------------

UNITTEST = """\
test_a (__main__.FailToPass.test_a) ... ok
test_b (test_hidden.PassToPass.test_b)
A docstring line.
... FAIL
test_c (pkg.tests.Case) ... ok
"""
PYTEST = """\
PASSED tests/test_x.py::test_p[a b]
FAILED tests/test_x.py::test_q - assert 1 == 2
tests/test_y.py::test_v PASSED                                            [ 50%]
"""


def test_unittest_pytest_and_django_lines_are_read() -> None:
    report = check_listed(
        (
            "test_hidden.FailToPass.test_a",
            "test_hidden.PassToPass.test_b",
            "test_c (pkg.tests.Case)",
        ),
        UNITTEST,
        "",
    )
    assert report.passed == ("test_hidden.FailToPass.test_a", "test_c (pkg.tests.Case)")
    assert report.failed == ("test_hidden.PassToPass.test_b",) and not report.all_passed
    report = check_listed(
        ("tests/test_x.py::test_p[a b]", "tests/test_y.py::test_v", "tests/test_x.py::test_q",
         "tests/test_z.py::test_w"), PYTEST, "")  # fmt: skip
    assert report.passed == ("tests/test_x.py::test_p[a b]", "tests/test_y.py::test_v")
    assert report.failed == ("tests/test_x.py::test_q",)
    assert report.missing == ("tests/test_z.py::test_w",)


def test_a_failing_line_wins_over_a_forged_passing_one() -> None:
    forged = "PASSED tests/t.py::test_q\n"
    report = check_listed(("tests/t.py::test_q",), forged, "FAILED tests/t.py::test_q - boom\n")
    assert report.failed == ("tests/t.py::test_q",) and not report.all_passed
    assert check_listed((), "PASSED x::y\n", "").all_passed is False  # nothing listed


def test_listed_tests_come_from_task_toml_else_config_json(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "task.toml").write_text('[metadata]\nfail_to_pass = ["a"]\npass_to_pass = ["b"]\n')
    assert listed_tests(tmp_path) == ("a", "b")
    (tmp_path / "task.toml").write_text('version = "1.0"\n')
    (tmp_path / "tests" / "config.json").write_text(
        json.dumps({"FAIL_TO_PASS": json.dumps(["c"]), "PASS_TO_PASS": []})
    )
    assert listed_tests(tmp_path) == ("c",)


# -- who caused the failure ---------------------------------------------------------------------


@pytest.mark.usefixtures("isolation")
def test_an_empty_change_keeps_a_verifier_failure_infrastructure(make_task, tmp_path) -> None:
    """The fresh sandbox is the curated task itself when the agent changed nothing: a verifier
    that writes no reward then is the task's or the host's failure, never the agent's 0."""
    task = make_task("broken", "exit 0\n", solve_sh="true\n")
    summary = asyncio.run(run_job([load_task(task)], tmp_path / "job", "oracle"))
    assert summary.rewards == {"broken": None}
    assert summary.errors == {"broken": "RewardFileNotFoundError"}


@pytest.mark.usefixtures("isolation")
def test_a_verifier_failure_on_a_change_scores_0_labelled(make_task, tmp_path) -> None:
    task = make_task("broken", "[ -e /workspace/x ] || echo 1 > /logs/verifier/reward.txt\n",
                     solve_sh="touch /workspace/x\n")  # fmt: skip
    summary = asyncio.run(run_job([load_task(task)], tmp_path / "job", "oracle"))
    assert summary.rewards == {"broken": 0.0}
    assert summary.errors == {"broken": "AgentCausedFailure"}
    (trial,) = [json.loads(p.read_text()) for p in (tmp_path / "job").glob("*/result.json")]
    assert trial["exception_info"]["exception_message"].startswith("RewardFileNotFoundError")
    assert trial["verifier_environment_mode"] == "fresh"


def test_the_verifier_sandbox_runs_as_the_verifier_user(make_task) -> None:
    toml = 'version = "1.0"\n[agent]\nuser = "2000"\n[verifier]\nuser = "root"\n'
    task = load_task(make_task("users", "true\n", toml=toml))
    assert (task.sandbox_spec().uid, task.sandbox_spec().user) == (2000, None)
    assert task.verifier_spec().user == "root"
    assert "workdir" not in task.verifier_spec().model_fields_set  # the image's WORKDIR stays
    plain = load_task(
        make_task("plain", "true\n", toml='version = "1.0"\n[agent]\nuser = "2000"\n')
    )
    assert plain.verifier_spec() == plain.sandbox_spec()


def test_only_the_reward_file_the_tasks_scripts_name_is_read(tmp_path: Path) -> None:
    from forge_sandbox.verify._verifier import parse_rewards, reward_files_named

    tests, logs = tmp_path / "tests", tmp_path / "logs"
    tests.mkdir()
    logs.mkdir()
    (tests / "test.sh").write_text("run; echo 0 > /logs/verifier/reward.txt\n")
    (logs / "reward.txt").write_text("0\n")
    (logs / "reward.json").write_text('{"reward": 1}')  # planted by the code under test
    assert reward_files_named(tests) == {"reward.txt"}
    assert parse_rewards(logs, reward_files_named(tests)) == {"reward": 0.0}
    (tests / "grade.py").write_text("open('/logs/verifier/reward.json', 'w')\n")
    assert reward_files_named(tests) == frozenset()  # both named: Harbor's order
    assert parse_rewards(logs, reward_files_named(tests)) == {"reward": 1}


@pytest.mark.usefixtures("isolation")
def test_an_agent_that_reaches_its_sandboxs_init_scores_0(make_task, tmp_path) -> None:
    """The init's processes are checked unchanged after the agent (LocalSandbox.check_init):
    killing or replacing them is the agent's doing, scored 0 and labelled, never dropped."""
    task = make_task("init", "echo 1 > /logs/verifier/reward.txt\n", solve_sh="pkill sleep; true\n")
    summary = asyncio.run(run_job([load_task(task)], tmp_path / "job", "oracle"))
    assert summary.rewards == {"init": 0.0}
    assert summary.errors == {"init": "AgentCausedFailure"}
    (trial,) = [json.loads(p.read_text()) for p in (tmp_path / "job").glob("*/result.json")]
    assert "SandboxInitChangedError" in trial["exception_info"]["exception_message"]


def test_candidates_missing_a_changed_path_are_not_used_and_extras_never_travel(
    tmp_path: Path,
) -> None:
    candidates, archive = tmp_path / "candidates.tar", tmp_path / "change.tar"
    with tarfile.open(candidates, "w") as tar:
        for name, data in (("a.py", b"new"), ("same.py", b"unchanged, rewritten")):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    change = Change(copy=("a.py",), delete=())
    assert _transfer._change_from(candidates, change, archive) is True
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["a.py"] and tar.extractfile("a.py").read() == b"new"
    more = Change(copy=("a.py", "b.py"), delete=())  # b.py changed within the mark's tick
    assert _transfer._change_from(candidates, more, archive) is False
    assert _transfer._change_from(tmp_path / "none.tar", change, archive) is False
