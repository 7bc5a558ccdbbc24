# SPDX-License-Identifier: GPL-2.0
"""Where things are: the checkout, the build folder and the results.

The package runs from its checkout (installed editable, or with
PYTHONPATH=TOP/python): TOP is the checkout.  BUILD is the folder that
make's BUILD= names, passed as ASYNCFORK_BUILD (the Makefile exports it;
a relative path is relative to TOP); default TOP/build.  Every module
takes the build folder from here.

ARCH is the guest architecture, from make's ARCH= (the kernel's own
variable, in the environment): x86 (the default) or arm64.  An arm64 guest
runs under QEMU emulation with the root filesystem of
scripts/setup-arm64.sh, and everything built for it has its own folder in
BUILD (arm64-debug, arm64-selftests, ...): see arch_dir().
"""

import os
import platform
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


class ArchError(Exception):
    """An ARCH= that the harness does not know."""


ARCHES = {"": "x86", "x86": "x86", "x86_64": "x86", "arm64": "arm64", "aarch64": "arm64"}


def arch(env=None) -> str:
    """The guest architecture ARCH= names: "x86" or "arm64"."""
    env = os.environ if env is None else env
    value = env.get("ARCH", "").strip()
    if value not in ARCHES:
        raise ArchError(f"ARCH={value} is not an architecture this harness runs "
                        f"(x86 or arm64)")
    return ARCHES[value]


def foreign(guest_arch: str | None = None) -> bool:
    """Whether a guest of `guest_arch` (default ARCH) is of another
    architecture than this machine (so emulated, on its own root)."""
    here = platform.machine()
    return (guest_arch or ARCH) != ARCHES.get(here, here)


def arch_dir(name: str, build: Path | None = None, guest_arch: str | None = None) -> Path:
    """BUILD/NAME for x86, BUILD/arm64-NAME for arm64: where what is built
    for the guest architecture goes (kernels, selftests)."""
    build = BUILD if build is None else build
    guest_arch = ARCH if guest_arch is None else guest_arch
    return build / (name if guest_arch == "x86" else f"{guest_arch}-{name}")


BUILD = build_dir()
try:
    ARCH = arch()
except ArchError as e:
    sys.exit(f"asyncfork: {e}")
RESULTS = BUILD / "results"         # every run's working files and its JSON record
DOCS_RESULTS = TOP / "docs/results"  # the committed records, plots made from them
VENV_PYTHON = TOP / ".venv/bin/python"


def guest_python() -> str:
    """The python a guest command runs: this checkout's (the guest sees the
    host's root), or the root's own python3 in a guest of another
    architecture."""
    if foreign():
        return "/usr/bin/python3"
    return str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))


def python_command(verb: str, *args: str, python: str | None = None) -> list[str]:
    """The command line that runs `asyncfork VERB ARGS` (python -m
    asyncfork) where the environment is not this one (in a guest): the
    package and the build folder given explicitly, so that it imports this
    checkout's package with or without the editable install.  A guest of
    another architecture runs its root's python3 (scripts/setup-arm64.sh
    installs what the harness imports there)."""
    python = python or guest_python()
    return ["env", f"PYTHONPATH={PYTHON_DIR}", f"ASYNCFORK_BUILD={BUILD}", f"ARCH={ARCH}",
            python, "-m", "asyncfork", verb, *args]
