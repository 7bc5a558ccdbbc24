# SPDX-License-Identifier: GPL-2.0
"""Where things are: the checkout, the build folder and the results.

The package runs from its checkout (installed editable, or with
PYTHONPATH=TOP/python): TOP is the checkout.  BUILD is the folder that
make's BUILD= names, passed as ASYNCFORK_BUILD (the Makefile exports it;
a relative path is relative to TOP); default TOP/build.  Every module
takes the build folder from here.
"""

import os
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
PYTHON_DIR = TOP / "python"


def build_dir(env=None) -> Path:
    env = os.environ if env is None else env
    value = env.get("ASYNCFORK_BUILD", "").strip()
    if not value:
        return TOP / "build"
    path = Path(value)
    return path if path.is_absolute() else TOP / path


BUILD = build_dir()
RESULTS = BUILD / "results"         # every run's working files and its JSON record
DOCS_RESULTS = TOP / "docs/results"  # the committed records, plots made from them
VENV_PYTHON = TOP / ".venv/bin/python"


def python_command(module: str, *args: str, python: str | None = None) -> list[str]:
    """The command line that runs `python -m asyncfork.MODULE ARGS` where
    the environment is not this one (in a guest): the package and the
    build folder given explicitly, so that it imports this checkout's
    package with or without the editable install."""
    return ["env", f"PYTHONPATH={PYTHON_DIR}", f"ASYNCFORK_BUILD={BUILD}",
            python or str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable)),
            "-m", f"asyncfork.{module}", *args]
