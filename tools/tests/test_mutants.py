"""tools/mutants.py without running mutmut: every target's module and test files exist, a
function-restricted target selects exactly its functions' mutants (mutmut's mangled names),
diffs and names are read as the equivalents file expects, and every reviewed equivalent names a
target, a function of it, and a reason."""

from __future__ import annotations

import tomllib
from pathlib import Path

import mutants
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_target_names_an_existing_module_and_test_files() -> None:
    modules = [t.module for t in mutants.TARGETS]
    assert len(modules) == len(set(modules)), "one Target per module"
    for target in mutants.TARGETS:
        package = ROOT / "packages" / target.package
        assert (package / target.source).is_file(), target.module
        missing = [n for n in target.tests if not (package / "tests" / n).is_file()]
        assert not missing, f"{target.module}: {missing}"
        source = (package / target.source).read_text()
        for function in target.functions:
            name = function.rpartition(".")[2]
            assert f"def {name}(" in source, f"{target.module}: no function {function}"


def test_function_targets_select_their_mutants_by_mangled_name() -> None:
    target = mutants.Target("pkg._m", "pkg", ("t.py",), functions=("reward_of", "_State.decide"))
    assert target.patterns() == ["pkg._m.x_reward_of*", "pkg._m.x\u01c1_State\u01c1decide*"]
    codes = {
        "pkg._m.x_reward_of__mutmut_1": 0,
        "pkg._m.x_reward_of_more__mutmut_1": 0,  # the glob's neighbour: not selected
        "pkg._m.x\u01c1_State\u01c1decide__mutmut_2": 1,
        "pkg._m.x_other__mutmut_1": None,
    }
    assert mutants.selected(target, codes) == {
        "pkg._m.x_reward_of__mutmut_1": 0,
        "pkg._m.x\u01c1_State\u01c1decide__mutmut_2": 1,
    }
    whole = mutants.Target("pkg._m", "pkg", ("t.py",))
    assert whole.patterns() == [] and mutants.selected(whole, codes) == codes


@pytest.mark.parametrize(
    ("name", "function"),
    [
        ("forge_x._m.x_reward_of__mutmut_3", "reward_of"),
        ("forge_x._m.x__caused_by_change__mutmut_12", "_caused_by_change"),
        ("forge_x._m.x\u01c1Streamed\u01c1add__mutmut_1", "Streamed.add"),
    ],
)
def test_mutant_names_give_their_function(name, function) -> None:
    assert mutants.function_of(name) == function


def test_a_diff_gives_its_original_and_mutated_lines() -> None:
    diff = "--- a\n+++ b\n@@ -1,3 +1,3 @@\n-    x = 1\n-    y = 2\n+    x = 2\n+    y = 3\n z\n"
    assert mutants.changed_lines(diff) == ("x = 1 / y = 2", "x = 2 / y = 3")


def test_every_reviewed_equivalent_names_a_target_function_and_a_reason() -> None:
    entries = tomllib.loads(mutants.EQUIVALENT_FILE.read_text())["equivalent"]
    targets = {t.module: t for t in mutants.TARGETS}
    for entry in entries:
        assert set(entry) == {"module", "function", "original", "mutant", "why"}, entry
        target = targets.get(entry["module"])
        assert target is not None, f"no Target for {entry['module']}"
        assert not target.functions or entry["function"] in target.functions, entry
        assert entry["original"] != entry["mutant"] and len(entry["why"]) > 20, entry
    keys = [(e["module"], e["function"], e["original"], e["mutant"]) for e in entries]
    assert len(keys) == len(set(keys)), "an equivalent is listed twice"
    assert mutants.load_equivalents(mutants.EQUIVALENT_FILE).keys() <= targets.keys()
