"""The root README tells a newcomer what the demo can and cannot show."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_says_what_the_demo_policy_solves_and_where_learning_is_shown() -> None:
    """The local configs start from the demo policy (issue 18): the README says so, names its
    measured train success, that the first smoke builds it, and where learning is measured."""
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "The demo policy solves some tasks." in text
    assert "that solves nothing" in text  # the tiny base itself
    assert "demo-policy.json" in text and "Wilson 95%" in text
    assert "the first `nox -s ppo_smoke` pays for it" in text
    learning = "packages/forge-ppo/tests/test_learning.py"
    assert learning in text and (ROOT / learning).is_file()
    assert "| `learn` |" in text and "learn.json" in text
