# SPDX-License-Identifier: GPL-2.0
"""Kernel style of what the project adds to the kernel: every patch of the
series and every new C file pass scripts/checkpatch.pl --strict."""

import subprocess

import pytest

from conftest import BUILD, TOP

CHECKPATCH = BUILD / "linux/scripts/checkpatch.pl"


def series():
    lines = (TOP / "kernel/patches/series").read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]


def checkpatch(args, stdin=None):
    if not CHECKPATCH.exists():
        pytest.fail("build/linux is not prepared: run 'make source'")
    return subprocess.run([str(CHECKPATCH), "--strict", "--no-tree", "--color=never", *args],
                          input=stdin, capture_output=True, text=True, cwd=TOP)


def test_series_lists_every_patch():
    on_disk = sorted(p.name for p in (TOP / "kernel/patches").glob("*.patch"))
    assert sorted(series()) == on_disk


@pytest.mark.parametrize("patch", series())
def test_patch_style(patch):
    p = checkpatch(["-"], stdin=(TOP / "kernel/patches" / patch).read_text())
    assert p.returncode == 0, p.stdout


@pytest.mark.parametrize("path", sorted(str(p.relative_to(TOP)) for p in
                                        (TOP / "kernel/files").rglob("*.[ch]")) or ["(none)"])
def test_new_file_style(path):
    if path == "(none)":
        pytest.skip("no new C files yet")
    p = checkpatch(["-f", path])
    assert p.returncode == 0, p.stdout


def source_files():
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=TOP,
                         check=True).stdout.split()
    return [f for f in out
            if f.endswith((".py", ".sh", ".c", ".h")) or f.split("/")[-1] == "Makefile"
            or f in (".ci/run", "tests/guest/ksm-merge")]


def test_every_source_file_names_its_licence():
    # LICENSE is GPL-2.0; each source file says so in its first lines.
    missing = [f for f in source_files()
               if "SPDX-License-Identifier: GPL-2.0" not in
               "".join((TOP / f).read_text().splitlines(True)[:3])]
    assert not missing, f"no SPDX-License-Identifier line: {missing}"
    assert (TOP / "LICENSE").read_text().startswith(
        "                    GNU GENERAL PUBLIC LICENSE\n                       Version 2")
