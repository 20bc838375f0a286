"""The root README tells a newcomer what the demo can and cannot show."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_says_the_demo_model_solves_nothing_and_where_learning_is_shown() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "The tiny demo model solves nothing." in text
    assert "every reward is 0" in text
    learning = "packages/forge-ppo/tests/test_learning.py"
    assert learning in text and (ROOT / learning).is_file()
    assert "A session `learn` on a real small model" in text
