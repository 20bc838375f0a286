"""Every option of every Forge CLI explains itself in --help, and shows its default (a required
option has none to show)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from forge_gates import HelpFormatter

CLIS = ["forge_data.cli", "forge_sandbox.cli", "forge_rollout.cli", "forge_ppo.cli",
        "forge_eval.cli", "forge_gates.cli"]  # fmt: skip


def _parsers(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, Any]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


@pytest.mark.parametrize("module", CLIS)
def test_every_option_has_help_and_its_default(module: str) -> None:
    root = importlib.import_module(module).build_parser()
    missing, no_default, required_default = [], [], []
    for name, parser in _parsers(root, root.prog):
        assert issubclass(parser.formatter_class, HelpFormatter), name
        parser.format_help()  # every help string formats (no stray % signs)
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not (action.help or "").strip():
                missing.append(label)
            off = action.default in (None, False, [], argparse.SUPPRESS)
            shown = not (action.required or off)  # a required option's default is never used
            help_text = formatter._get_help_string(action) or ""  # what --help prints
            if action.option_strings and shown and "default" not in help_text.lower():
                no_default.append(label)
            if action.required and "(default:" in help_text:
                required_default.append(label)
    assert missing == [], f"options without help: {missing}"
    assert no_default == [], f"options whose default --help does not show: {no_default}"
    assert required_default == [], f"required options --help gives a default: {required_default}"


def test_freeze_help_gives_no_default_to_its_required_counts() -> None:
    from forge_data.cli import build_parser

    freeze = dict(_parsers(build_parser(), "forge-data"))["forge-data freeze"]
    text = " ".join(freeze.format_help().split())
    assert "target number of train tasks (default" not in text, text
    assert "most tasks per repository (default: 20)" in text, text


def test_forge_ppo_help_names_every_command() -> None:
    from forge_ppo.cli import build_parser

    description = build_parser().description or ""
    assert description.startswith("forge-ppo: train PPO runs"), description
