# SPDX-License-Identifier: GPL-2.0
"""The console commands' common ending: the exit code of main(), and
Ctrl-C said in one line instead of a traceback."""

import sys


def command(main, prog: str):
    """A console entry point (pyproject.toml's [project.scripts]) that runs
    main() and exits with what it returns."""
    def run() -> None:
        try:
            sys.exit(main())
        except KeyboardInterrupt:
            print(f"{prog}: interrupted", file=sys.stderr)
            sys.exit(130)
    return run
