"""`forge-data import`: SWE-bench / SWE-smith / SWE-Gym rows -> Harbor task folders in the
adapters' layout, deterministic, read back by forge-data's and forge-gates' own readers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import forge_data as fd
from forge_data.cli import main
from forge_gates import read_task_config, tree_files

SWE_BENCH_ROW = {
    "repo": "pallets/flask",
    "instance_id": "pallets__flask-5014",
    "base_commit": "7ee9ceb71e868944a46e1ff00b506772a53a4f1d",
    "patch": "diff --git a/src/flask/blueprints.py b/src/flask/blueprints.py\n+fix\n",
    "test_patch": (
        "diff --git a/tests/test_blueprints.py b/tests/test_blueprints.py\n"
        "--- a/tests/test_blueprints.py\n+++ b/tests/test_blueprints.py\n@@ -1 +1,2 @@\n"
        " old = 1\n+new = 2\n"
        "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_new.py\n@@ -0,0 +1 @@\n+added = 3\n"
    ),
    "problem_statement": "Require a non-empty name for Blueprints\n\nThings do not work.\n",
    "FAIL_TO_PASS": json.dumps(["tests/test_blueprints.py::test_empty_name_not_allowed"]),
    "PASS_TO_PASS": json.dumps(
        ["tests/test_blueprints.py::test_blueprint_specific_error_handling"]
    ),
    "version": "2.3",
    "difficulty": "<15 min fix",
}
SWE_SMITH_ROW = {
    "instance_id": "john-kurkowski__tldextract.3d1bf184.combine_file__49lzm22u",
    "repo": "swesmith/john-kurkowski__tldextract.3d1bf184",
    "patch": "diff --git a/tldextract/remote.py b/tldextract/remote.py\n-good\n+bug\n",
    "FAIL_TO_PASS": ["tests/main_test.py::test_american"],
    "PASS_TO_PASS": ["tests/main_test.py::test_british"],
    "image_name": "swesmith.x86_64.john-kurkowski__tldextract.3d1bf184",
    "problem_statement": "The domain of a URL with a port is wrong.",
}


def _rows(path: Path, *rows: object) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_swe_bench_rows_become_adapter_layout_folders(tmp_path: Path) -> None:
    rows = _rows(tmp_path / "rows.jsonl", SWE_BENCH_ROW)
    summary = fd.import_rows("swebench", rows, tmp_path / "tasks")
    assert summary.written == ("pallets__flask-5014",) and summary.problems == ()
    folder = tmp_path / "tasks" / "pallets__flask-5014"
    assert sorted(tree_files(folder)) == [
        "environment/Dockerfile",
        "instruction.md",
        "solution/solve.sh",
        "task.toml",
        "tests/config.json",
        "tests/grade.py",
        "tests/test.sh",
    ]
    dockerfile = (folder / "environment" / "Dockerfile").read_text()
    assert dockerfile.startswith(
        "FROM swebench/sweb.eval.x86_64.pallets_1776_flask-5014:latest\nWORKDIR /testbed\n"
        "# forge-data import: test files as of the task to /opt/forge/pristine, history cut\n"
        "RUN set -eu; \\\n"
    )  # the history cut: test_import_history.py
    assert f"source={SWE_BENCH_ROW['base_commit']}; \\\n" in dockerfile
    assert os.access(folder / "tests" / "test.sh", os.X_OK)
    assert os.access(folder / "solution" / "solve.sh", os.X_OK)
    assert SWE_BENCH_ROW["patch"] in (folder / "solution" / "solve.sh").read_text()
    test_sh = (folder / "tests" / "test.sh").read_text()
    assert SWE_BENCH_ROW["test_patch"] in test_sh and ">>>>> Start Test Output" in test_sh
    # the images' PATH holds conda's base env only: the adapters' test commands activate
    # testbed (laude-institute/harbor adapters/swebench/utils.py get_test_commands; swesmith
    # 0.0.6 swesmith/profiles/python.py PythonProfile.test_cmd)
    assert "source /opt/miniconda3/bin/activate && conda activate testbed" in test_sh
    # what the test patch touches reset to base_commit (adapters/swebench/utils.py), from the
    # copies the image build saved before cutting the history
    assert "for path in tests/test_blueprints.py tests/test_new.py; do rm -rf" in test_sh
    assert "git checkout" not in test_sh
    # read back by Forge's own readers, as Harbor's adapters' folders are
    config, warns = read_task_config(folder / "task.toml")
    assert (config.memory_mb, config.storage_mb, config.verifier_timeout_s) == (4096, 10240, 3000)
    assert warns == []
    task = fd.read_harbor_task(folder)
    assert task.repository == "pallets/flask"
    assert task.fail_to_pass == ("tests/test_blueprints.py::test_empty_name_not_allowed",)
    assert task.base_commit == SWE_BENCH_ROW["base_commit"]
    assert task.instruction.startswith("Require a non-empty name")
    assert task.base_image == "swebench/sweb.eval.x86_64.pallets_1776_flask-5014:latest"
    assert fd.static_filter([task], fd.FilterConfig()).kept == (task,)


def test_swe_bench_test_sh_resets_what_the_test_patch_touches_then_applies_it(
    tmp_path: Path,
) -> None:
    """As laude-institute/harbor adapters/swebench/utils.py get_test_commands: files the test
    patch changes go back to base_commit, ones it creates are removed, then it applies, whatever
    the agent did to them. Run for real on a scratch repository, its history cut first."""
    repo = tmp_path / "testbed"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_blueprints.py").write_text("old = 1\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    row = dict(SWE_BENCH_ROW, base_commit=base.stdout.strip())
    pristine = str(tmp_path / "pristine")
    # the image build: test files saved, history cut (the Dockerfile's last RUN, lines joined)
    dockerfile = fd.task_files("swebench", row)["environment/Dockerfile"][0]
    cut = dockerfile.replace("\\\n", "").splitlines()[-1].removeprefix("RUN ")
    build = subprocess.run(
        ["sh", "-c", cut.replace("/opt/forge/pristine", pristine)], cwd=repo, capture_output=True
    )
    assert build.returncode == 0, build.stderr
    (repo / "tests" / "test_blueprints.py").write_text("agent was here\n")
    (repo / "tests" / "test_new.py").write_text("agent's own file\n")
    script = fd.task_files("swebench", row)["tests/test.sh"][0]
    setup = script.split('echo ">>>>> Start Test Output"')[0]
    setup = setup.replace("/testbed", str(repo)).replace("/opt/forge/pristine", pristine)
    setup = "\n".join(line for line in setup.splitlines() if "conda" not in line)
    run = subprocess.run(["bash", "-c", setup], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (repo / "tests" / "test_blueprints.py").read_text() == "old = 1\nnew = 2\n"
    assert (repo / "tests" / "test_new.py").read_text() == "added = 3\n"


def test_same_rows_give_byte_identical_folders_whatever_the_column_order(tmp_path: Path) -> None:
    reordered = dict(reversed(list(SWE_BENCH_ROW.items())))
    fd.import_rows("swebench", _rows(tmp_path / "a.jsonl", SWE_BENCH_ROW), tmp_path / "a")
    fd.import_rows("swebench", _rows(tmp_path / "b.jsonl", reordered), tmp_path / "b")
    a, b = tmp_path / "a" / "pallets__flask-5014", tmp_path / "b" / "pallets__flask-5014"
    assert tree_files(a) == tree_files(b)  # contents and the executable bit
    modes = {p.relative_to(a): p.stat().st_mode for p in sorted(a.rglob("*"))}
    assert modes == {p.relative_to(b): p.stat().st_mode for p in sorted(b.rglob("*"))}


def test_swe_smith_row_uses_its_image_branch_and_reverses_the_bug(tmp_path: Path) -> None:
    fd.import_rows("swesmith", _rows(tmp_path / "r.jsonl", SWE_SMITH_ROW), tmp_path / "t")
    folder = tmp_path / "t" / SWE_SMITH_ROW["instance_id"]
    dockerfile = (folder / "environment" / "Dockerfile").read_text()
    assert dockerfile.startswith(
        "FROM jyangballin/swesmith.x86_64.john-kurkowski_1776_tldextract.3d1bf184\n"
        "WORKDIR /testbed\n"
        f"RUN git fetch && git checkout {SWE_SMITH_ROW['instance_id']}\n"
        "# forge-data import: test files as of the task to /opt/forge/pristine, history cut\n"
    )
    # SWE-smith's `patch` introduces the bug: the adapter's oracle applies it reversed
    # (laude-institute/harbor adapters/swesmith/template/solution/solve.sh: git apply --reverse)
    assert "git apply -v -R -" in (folder / "solution" / "solve.sh").read_text()
    # the adapter's test.sh: `git checkout <id>; git checkout HEAD~1; <test_cmd>`, the parent
    # of the branch tip holding the tests (adapters/swesmith/adapter.py): saved by the image
    # build before the history is cut, restored from there
    test_sh = (folder / "tests/test.sh").read_text()
    assert "for path in tests/main_test.py; do rm -rf" in test_sh
    assert "source=$(git rev-parse -q --verify 'HEAD~1^{commit}'" in dockerfile
    assert "conda activate testbed" in test_sh  # swesmith/profiles/python.py test_cmd
    task = fd.read_harbor_task(folder)
    assert task.repository == "john-kurkowski/tldextract"
    assert task.metadata["tags"] == ["debugging", "swe-bench", "swe-smith"]  # the adapter's
    assert task.pass_to_pass == ("tests/main_test.py::test_british",)


def test_swe_smith_image_is_lower_case_as_swesmith_names_it() -> None:
    # swesmith 0.0.6 swesmith/profiles/base.py RepoProfile.image_name:
    # f"{org_dh}/swesmith.{arch}.{owner}_1776_{repo}.{commit[:8]}".lower(), org_dh jyangballin
    row = {"instance_id": "x", "repo": "swesmith/Project-MONAI__MONAI.a09c1f08"}
    assert fd.published_image("swesmith", row) == (
        "jyangballin/swesmith.x86_64.project-monai_1776_monai.a09c1f08"
    )


# swebench 4.0.3 harness/test_spec/test_spec.py instance_image_key (namespace "swebench", as
# laude-institute/harbor adapters/swebench/utils.py get_image_names asks); SWE-Gym: the SWE-Gym
# team's images, harbor-framework/adapters src/swegym/README.md (e.g.
# xingyaoww/sweb.eval.x86_64.project-monai_s_monai-7604 for project-monai__monai-7604)
@pytest.mark.parametrize(
    ("kind", "image"),
    [
        ("swebench", "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"),
        ("swegym", "xingyaoww/sweb.eval.x86_64.django_s_django-11099:latest"),
    ],
)
def test_published_image_name_mangling(kind: str, image: str) -> None:
    assert fd.published_image(kind, {"instance_id": "django__django-11099"}) == image  # type: ignore[arg-type]
    assert fd.published_image(kind, {"instance_id": "Django__Django-1"}).islower()  # type: ignore[arg-type]


def test_tests_that_their_runner_cannot_select_give_no_reward_not_a_zero(tmp_path: Path) -> None:
    row = dict(SWE_BENCH_ROW, FAIL_TO_PASS=json.dumps(["test_x (utils.tests.Tests)"]))
    files = fd.task_files("swebench", row)
    script = files["tests/test.sh"][0]
    assert script.endswith("exit 2\n") and "reward.txt" not in script
    assert "python -m pytest" not in script and "no reward (an infrastructure error" in script
    django = dict(_DJANGO_ROW, test_patch="")  # Django's modules come from the test patch
    assert fd.task_files("swebench", django)["tests/test.sh"][0].endswith("exit 2\n")


_DJANGO_ROW = dict(
    SWE_BENCH_ROW,
    repo="django/django",
    instance_id="django__django-11099",
    test_patch=(
        "diff --git a/tests/auth_tests/test_validators.py b/tests/auth_tests/test_validators.py\n"
        "--- a/tests/auth_tests/test_validators.py\n+++ b/tests/auth_tests/test_validators.py\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    ),
    FAIL_TO_PASS=json.dumps(
        ["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"]
    ),
    PASS_TO_PASS=json.dumps(
        ["test_help_text (auth_tests.test_validators.MinimumLengthValidatorTest)"]
    ),
)
_SYMPY_ROW = dict(
    SWE_BENCH_ROW,
    repo="sympy/sympy",
    instance_id="sympy__sympy-20590",
    test_patch=(
        "diff --git a/sympy/core/tests/test_basic.py b/sympy/core/tests/test_basic.py\n"
        "--- a/sympy/core/tests/test_basic.py\n+++ b/sympy/core/tests/test_basic.py\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    ),
    FAIL_TO_PASS=json.dumps(["test_immutable"]),
    PASS_TO_PASS=json.dumps(["test__aresame"]),
)


def test_django_and_sympy_rows_run_their_projects_runners() -> None:
    """swebench 4.0.3's test_cmd and get_test_directives for Django and SymPy."""
    django = fd.task_files("swebench", _DJANGO_ROW)["tests/test.sh"][0]
    assert (
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 "
        "auth_tests.test_validators 2>&1 | tee /logs/verifier/test-output.txt" in django
    )
    assert "pytest" not in django and "git apply -v -" in django
    sympy = fd.task_files("swebench", _SYMPY_ROW)["tests/test.sh"][0]
    assert "bin/test -C --verbose sympy/core/tests/test_basic.py 2>&1 | tee" in sympy


def _grade(tmp_path: Path, row: dict, output: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "grade.py").write_text(fd.task_files("swebench", row)["tests/grade.py"][0])
    (tmp_path / "out.txt").write_text(output)
    (tmp_path / "config.json").write_text(json.dumps(row))
    (tmp_path / "reward.txt").unlink(missing_ok=True)
    return subprocess.run(
        [sys.executable, "grade.py", "out.txt", "config.json", "reward.txt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    ("output", "reward"),
    [
        ("PASSED tests/a.py::test_f\nPASSED tests/a.py::test_p\n", "1"),
        ("FAILED tests/a.py::test_f - assert\nPASSED tests/a.py::test_p\n", "0"),
        ("PASSED tests/a.py::test_p\n", "0"),  # the FAIL_TO_PASS test never ran
        ("XFAIL tests/a.py::test_f\nPASSED tests/a.py::test_p\n", "1"),  # swebench's rule
        ("ImportError: no module named x\n", None),  # no test ran: no verdict
    ],
)
def test_grade_script(tmp_path: Path, output: str, reward: str | None) -> None:
    row = dict(
        SWE_BENCH_ROW, FAIL_TO_PASS='["tests/a.py::test_f"]', PASS_TO_PASS=["tests/a.py::test_p"]
    )
    run = _grade(tmp_path, row, output)
    if reward is None:
        assert run.returncode == 2 and not (tmp_path / "reward.txt").exists()
        assert "the tests did not run" in run.stderr
    else:
        assert run.returncode == 0 and (tmp_path / "reward.txt").read_text() == reward + "\n"


DJANGO_OK = (
    "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok\n"
    "test_help_text (auth_tests.test_validators.MinimumLengthValidatorTest)\n"
    "Help text is shown. ... ok\n"  # a docstring line between the id and its status
    "----------------------------------------------------------------------\nRan 2 tests\n"
)


@pytest.mark.parametrize(
    ("row", "output", "reward"),
    [
        (_DJANGO_ROW, DJANGO_OK, "1"),
        (_DJANGO_ROW, DJANGO_OK.replace("Tests) ... ok", "Tests) ... FAIL"), "0"),
        (_DJANGO_ROW, DJANGO_OK.replace("Help text is shown. ... ok", "x ... ERROR"), "0"),
        (_SYMPY_ROW, "test__aresame ok\ntest_immutable ok\n", "1"),
        (_SYMPY_ROW, "test__aresame ok\ntest_immutable F\n", "0"),
        (_SYMPY_ROW, "test__aresame ok\n", "0"),  # the FAIL_TO_PASS test never ran
        (_SYMPY_ROW, "ImportError: cannot import name 'x'\n", None),
    ],
)
def test_grade_reads_django_and_sympy_verbose_runs(
    tmp_path: Path, row: dict, output: str, reward: str | None
) -> None:
    run = _grade(tmp_path, row, output)
    if reward is None:
        assert run.returncode == 2 and not (tmp_path / "reward.txt").exists()
    else:
        assert (tmp_path / "reward.txt").read_text() == reward + "\n", run.stderr


def test_cli_import_bad_rows_summary_progress_and_exit_codes(tmp_path: Path, capsys) -> None:
    incomplete = {k: v for k, v in SWE_BENCH_ROW.items() if k != "base_commit"}
    unsafe = dict(SWE_BENCH_ROW, instance_id="../escape")
    rows = _rows(tmp_path / "rows.jsonl", SWE_BENCH_ROW, "{bad", incomplete, unsafe)
    out = tmp_path / "tasks"
    assert main(["import", "swebench", str(rows), "--out", str(out)]) == 1  # bad rows
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {
        "kind": "swebench",
        "out": str(out),
        "read": 4,
        "written": 1,
        "bad_records": 3,
    }
    assert f"{rows}:2: not valid JSON" in captured.err
    assert (
        f"{rows}:3: expected the swebench columns" in captured.err and "base_commit" in captured.err
    )
    assert f"{rows}:4: instance_id: expected a folder-safe id" in captured.err
    assert "importing" in captured.err  # progress on stderr
    assert not (tmp_path / "escape").exists()
    # the folder exists now: refused (and nothing kept), unless --overwrite
    again = ["import", "swebench", str(rows), "--out", str(out), "--keep-going", "--quiet"]
    assert main(again) == 1
    assert "found the folder exists; fix: pass --overwrite" in capsys.readouterr().err
    assert main([*again, "--overwrite"]) == 0


def test_cli_import_parquet(tmp_path: Path, capsys) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([SWE_BENCH_ROW]), path)
    assert main(["import", "swebench", str(path), "--out", str(tmp_path / "p"), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["written"] == 1
    jsonl = _rows(tmp_path / "rows.jsonl", SWE_BENCH_ROW)
    fd.import_rows("swebench", jsonl, tmp_path / "j")
    name = "pallets__flask-5014"
    assert tree_files(tmp_path / "p" / name) == tree_files(tmp_path / "j" / name)


def test_import_refuses_an_unknown_kind_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(fd.DataError, match="one of"):
        fd.import_rows("swe-bench", tmp_path / "x.jsonl", tmp_path)
    with pytest.raises(fd.DataError, match="no file"):
        fd.import_rows("swebench", tmp_path / "x.jsonl", tmp_path)
