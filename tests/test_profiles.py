# SPDX-License-Identifier: GPL-2.0
"""The guest kernel profiles are one list (kernel/configs/profiles) that the
Makefile, the build scripts and the soak all read; make clean removes every
build a target can make, for both architectures.  Host-only, seconds."""

import os
import re
import subprocess

import pytest

from asyncfork import profiles, soak
from conftest import TOP

CONFIGS = TOP / "kernel/configs"
# What a calling make passes down (see test_harness.INHERITED).
INHERITED = ("ARCH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def run(*args):
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    return subprocess.run(args, cwd=TOP, capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_parse():
    text = ("# a comment\n\nlean  lean   # benchmarks\n"
            "kasan lean debug kasan\n")
    got = profiles.parse(text)
    assert list(got) == ["lean", "kasan"]
    assert got["lean"] == profiles.Profile("lean", ("lean",), "benchmarks")
    assert got["kasan"].fragments == ("lean", "debug", "kasan") and got["kasan"].purpose == ""


@pytest.mark.parametrize("bad", ["lean\n", "Lean lean\n", "lean lean\nlean debug\n"])
def test_parse_refuses(bad):
    with pytest.raises(ValueError, match="profiles line"):
        profiles.parse(bad)


def test_the_list():
    got = profiles.read()
    assert {"lean", "debug", "off", "kasan", "kcsan"} <= set(got)
    for p in got.values():
        assert p.purpose, p.name
        for f in p.fragments:
            assert (CONFIGS / f"{f}.config").is_file(), (p.name, f)


def test_build_scripts_read_the_list():
    r = run("scripts/profiles.sh", "names")
    assert r.returncode == 0 and r.stdout.strip() == "lean, debug, off, kasan or kcsan", r
    for p in profiles.read().values():
        r = run("scripts/profiles.sh", "fragments", p.name)
        assert r.stdout.split() == [str(CONFIGS / f"{f}.config") for f in p.fragments]
    r = run("scripts/profiles.sh", "fragments", "tsan")
    assert r.returncode == 1 and not r.stdout


def test_make_has_a_target_per_profile(tmp_path):
    for name in profiles.names():
        r = run("make", "-n", f"kernel-{name}", f"BUILD={tmp_path}")
        assert r.returncode == 0, r.stderr
        assert f"scripts/build-kernel.sh {name} {tmp_path}" in r.stdout
    r = run("make", "kernel-tsan", f"BUILD={tmp_path}")
    assert r.returncode != 0 and "no profile 'tsan'" in r.stderr and "kcsan" in r.stderr
    r = run("make", "soak", "KERNEL=tsan", f"BUILD={tmp_path}")
    assert r.returncode != 0 and "no profile 'tsan'" in r.stderr
    shown = run("make", "help").stdout
    for p in profiles.read().values():
        assert re.search(rf"^  make kernel-{p.name} +{re.escape(p.purpose)}$", shown, re.M), p.name


def test_soak_takes_a_profile():
    for name in profiles.names() + ["deb", "/x/build/debug"]:
        assert soak.unknown_kernel(name) is None, name
    why = soak.unknown_kernel("tsan")
    assert "not a profile" in why and "kasan" in why
    assert set(soak.TIMEOUT_FACTOR) <= set(profiles.names())


# What make clean keeps in BUILD: the source, what setup-like targets fetch
# or make once, and the tree of make kernel-git (one edits it).
KEPT = {"linux", "pristine", "pristine.done", "stage", "source.sum", "arm64-root",
        "arm64-root.log", "linux-config-arm64", "tools", "kgit",
        # make base: verified downloads of a kernel base (over a GB), kept
        # as the source is; make distclean removes them.
        "bases",
        # Another base's build folder: make clean empties it of builds
        # (test_make_clean_empties_another_base) and keeps its source.
        "base-7.3"}
DEBIAN_FLAVOURS = ("cloud-amd64", "amd64", "cloud-arm64", "arm64")


def expand(name: str) -> set[str]:
    """The BUILD entries a name with shell variables stands for."""
    name = name.strip("}\"'")
    for var, values in ((r"\$\{?prefix\}?|\$kdir", ("", "arm64-")),
                        (r"\$\{?profile\}?", profiles.names()),
                        (r"\$\{?flavour\}?", DEBIAN_FLAVOURS)):
        if re.search(var, name):
            return set().union(*(expand(re.sub(var, v, name, count=1)) for v in values))
    assert "$" not in name, f"a BUILD entry named with an unknown variable: {name}"
    return {name}


def written_entries() -> set[str]:
    """Every top-level entry of BUILD that the scripts, the harness and the
    Makefile name."""
    found = set()
    for f in TOP.glob("scripts/*.sh"):
        for m in re.finditer(r"\$build/([A-Za-z0-9_.${}-]+)", f.read_text()):
            found |= expand(m.group(1))
    for f in TOP.glob("python/asyncfork/*.py"):
        text = f.read_text()
        found |= set(re.findall(r'\b(?:BUILD|build) / "([^"/]+)', text))
        for m in re.findall(r'arch_dir\("([^"]+)"', text):
            found |= {m, f"arm64-{m}"}
    for m in re.finditer(r"\$\(BUILD\)\)?/(\$\(ARCH_DIR\))?([a-z][a-z0-9_.-]*)",
                         (TOP / "Makefile").read_text()):
        found |= {m.group(2), f"arm64-{m.group(2)}"} if m.group(1) else {m.group(2)}
    # Patterns (arm64-*, deb-*), not names.
    return {n for n in found if not n.endswith("-")}


def test_make_clean_removes_every_build(tmp_path):
    entries = written_entries()
    # Not all of them are named literally.
    for name in profiles.names():
        assert {name, f"arm64-{name}"} <= entries
    assert {"bench", "arm64-bench", "series-check", "unpatched", "results", "debs",
            "deb-cloud-amd64", "test-deb"} <= entries
    for name in entries:
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").touch()
    r = run("make", "-s", "clean", f"BUILD={tmp_path}")
    assert r.returncode == 0, r.stderr
    left = {p.name for p in tmp_path.iterdir()}
    assert left == entries & KEPT, (f"make clean left {sorted(left - KEPT)}, "
                                    f"removed {sorted(entries & KEPT - left)}")


def test_make_clean_empties_another_base(tmp_path):
    # make clean removes the builds in another base's folder too and keeps
    # that base's source and tree.
    other = tmp_path / "base-7.3"
    for name in ("debug", "lean", "selftests", "results", "linux", "kgit", "source.sum"):
        (other / name).mkdir(parents=True)
    r = run("make", "-s", "clean", f"BUILD={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in other.iterdir()) == ["kgit", "linux", "source.sum"]
