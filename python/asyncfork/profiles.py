# SPDX-License-Identifier: GPL-2.0
"""The guest kernel profiles: kernel/configs/profiles, the one list.

A profile is a guest kernel build (lean, debug, off, kasan, kcsan): a
name, the config fragments merged over tinyconfig, and what it is for.
scripts/build-kernel.sh builds profile NAME into BUILD/NAME (BUILD/arm64-NAME
for ARCH=arm64); the Makefile (make kernel-NAME, make clean) and the soak
(--kernel NAME) read the same list.  Debian's packaged kernels have
flavours (cloud-amd64, ...), which are no profiles.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from asyncfork.paths import TOP

PROFILES_FILE = TOP / "kernel/configs/profiles"
NAME_RE = re.compile(r"[a-z][a-z0-9_-]*")


@dataclass(frozen=True)
class Profile:
    name: str
    fragments: tuple[str, ...]  # names in kernel/configs, without .config
    purpose: str


def parse(text: str) -> dict[str, Profile]:
    """The profiles of a profiles file, in order: "NAME FRAGMENT... # what
    for" a line; comment lines and blank lines are skipped."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        body, _, purpose = line.partition("#")
        words = body.split()
        if not words:
            continue
        name = words[0]
        if not NAME_RE.fullmatch(name) or len(words) < 2 or name in out:
            raise ValueError(f"profiles line {n}: '{line.strip()}' is not "
                             f"'NAME FRAGMENT... # purpose' with a new lower-case NAME")
        out[name] = Profile(name, tuple(words[1:]), purpose.strip())
    return out


def read(path: Path = PROFILES_FILE) -> dict[str, Profile]:
    return parse(Path(path).read_text())


def names(path: Path = PROFILES_FILE) -> list[str]:
    return list(read(path))
