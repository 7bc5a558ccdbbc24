# SPDX-License-Identifier: GPL-2.0
"""What the commands share: the --help of their arguments, with each
one's default, and their common ending (the exit code of main(), Ctrl-C
said in one line instead of a traceback).  Imports nothing of the
package: `asyncfork deb-config` runs with the system's python3."""

import argparse
import copy
import sys
import textwrap


class HelpFormatter(argparse.HelpFormatter):
    """--help that says each option's default after its text, unless the
    text says it already (most say "default ...") or there is none to say:
    a flag, an option with no default, a hidden one."""

    @staticmethod
    def _shows_default(action: argparse.Action) -> bool:
        if action.help == argparse.SUPPRESS or action.nargs == 0:
            return False
        if action.default in (None, argparse.SUPPRESS, "", []):
            return False
        return bool(action.option_strings) or action.nargs in ("?", "*")

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and self._shows_default(action):
            action = copy.copy(action)
            action.help = "default: %(default)s"
        return super()._format_action(action)

    def _split_lines(self, text: str, width: int) -> list[str]:
        # A path is not broken at its hyphens (/work/wt-cli/...).
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not self._shows_default(action) or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


def parser(doc: str, **kw) -> argparse.ArgumentParser:
    """A command's argument parser: its description the first paragraph
    of @doc (its module's docstring), its --help with the defaults."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                   formatter_class=HelpFormatter, **kw)


def run(main, prog: str, argv: list[str] | None = None) -> int:
    """main(argv)'s exit code (None: 0); Ctrl-C ends it with one line,
    "PROG: interrupted", and 130."""
    try:
        return main(argv) or 0
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        return 130
