"""The `--help` layout every Forge CLI shares: descriptions and epilogs as written, and each
option's default appended to its help (`(default: 4)`), unless the help already names it."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """RawDescriptionHelpFormatter + `(default: X)` on options whose default means something.

    Left out: positionals, defaults of None / False / [] (the option is simply off or absent),
    and help that already says "default" (an explicit text such as "(default: the config)")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "default" in text.lower()
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
        ):
            return action.help
        return f"{text} (default: %(default)s)".lstrip()


def use_help_formatter(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give `parser` and every sub-command parser under it the shared formatter (argparse
    does not pass a parent's formatter_class on to its sub-commands); returns `parser`."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                use_help_formatter(sub)
    return parser
