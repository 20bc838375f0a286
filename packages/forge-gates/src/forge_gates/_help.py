"""What every Forge CLI shares: the `--help` layout (descriptions and epilogs as written, each
optional option's default appended to its help, `(default: 4)`, unless the help already names
it), the `NAME=PATH` argument form of runs and checkpoints, and a quiet exit when the reader of
stdout goes away (`forge-gates show X | head`)."""

from __future__ import annotations

import argparse
import functools
import os
import select
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ParamSpec

P = ParamSpec("P")

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """RawDescriptionHelpFormatter + `(default: X)` on options whose default means something.

    Left out: positionals, required options (their default is never used), defaults of None /
    False / [] (the option is simply off or absent), and help that already says "default" (an
    explicit text such as "(default: the config)")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or action.required
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


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (the write end then polls POLLERR)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
    except AttributeError:
        return True  # no poll() on this platform: take the usual idiom's word for it
    except (OSError, ValueError):
        return False  # stdout is no file (replaced, captured): the broken pipe was another one
    return any(event & select.POLLERR for _, event in poller.poll(0))


def quiet_broken_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """Wrap a CLI's `main` so `forge-x ... | head` ends quietly: when the reader of stdout goes
    away, stdout is pointed at /dev/null (the interpreter's last flush then has nowhere to fail)
    and the exit status is 141, as for any command a closed pipe stops. A BrokenPipeError from
    another pipe (a subprocess, a socket) is raised as before."""

    @functools.wraps(main)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:
                sys.stdout.flush()  # buffered output meets the closed pipe here, not at exit
        except BrokenPipeError:
            if not _stdout_reader_gone():
                raise
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return EXIT_BROKEN_PIPE

    return wrapper


def named_paths(specs: Sequence[str]) -> list[tuple[str, Path]]:
    """`NAME=PATH` or `PATH` (named A, B, C... by position)."""
    out = []
    for i, spec in enumerate(specs):
        name, sep, path = spec.partition("=")
        out.append((name, Path(path)) if sep and name else (chr(ord("A") + i), Path(spec)))
    return out
