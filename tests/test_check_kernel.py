# SPDX-License-Identifier: GPL-2.0
"""make check-kernel's pure parts, without a build: which objects and
files of the series it checks, and which warnings count as new (a
pre-existing warning of 6.12 must not fail it, a new one must)."""

import os
import subprocess

import pytest

from conftest import TOP

SCRIPT = TOP / "scripts/check-kernel.sh"
PATCHES = TOP / "kernel/patches"
INHERITED = ("ARCH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CHECKS", "JOBS")


def run(*args, env=None, check=True):
    base = {k: v for k, v in os.environ.items() if k not in INHERITED}
    r = subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                       env={**base, **(env or {})}, timeout=60)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def series():
    lines = (PATCHES / "series").read_text().splitlines()
    return [PATCHES / line.split()[0] for line in lines
            if line.strip() and not line.startswith("#")]


def patch(tmp_path, name, *diffs):
    """A git format-patch file of DIFFS, each (header lines, path)."""
    text = ["From 0000 Mon Sep 17 00:00:00 2001", "Subject: [PATCH] x", "", "---"]
    for kind, path in diffs:
        text.append(f"diff --git a/{path} b/{path}")
        if kind == "added":
            text += ["new file mode 100644", "index 0000000..1111111", "--- /dev/null",
                     f"+++ b/{path}", "@@ -0,0 +1 @@", "+x"]
        elif kind == "deleted":
            text += ["deleted file mode 100644", "index 1111111..0000000", f"--- a/{path}",
                     "+++ /dev/null", "@@ -1 +0,0 @@", "-x"]
        else:
            # A changed line that looks like a header must not count.
            text += ["index 1111111..2222222 100644", f"--- a/{path}", f"+++ b/{path}",
                     "@@ -1,2 +1,2 @@", "--- a/not/a/file.c", "-x", "+y"]
    f = tmp_path / name
    f.write_text("\n".join(text) + "\n")
    return f


def test_files_added_changed_deleted(tmp_path):
    p1 = patch(tmp_path, "1.patch", ("added", "mm/new.c"), ("changed", "mm/memory.c"),
               ("added", "Documentation/mm/new.rst"), ("changed", "mm/old.c"))
    p2 = patch(tmp_path, "2.patch", ("changed", "mm/new.c"), ("deleted", "mm/old.c"),
               ("changed", "include/linux/mm.h"))
    out = run("files", p1, p2).stdout.splitlines()
    assert out == ["added Documentation/mm/new.rst", "changed include/linux/mm.h",
                   "changed mm/memory.c", "added mm/new.c"]


def test_objects_only_the_kernel_c_files_of_the_arch(tmp_path):
    p = patch(tmp_path, "1.patch",
              ("added", "mm/async_fork.c"), ("changed", "kernel/sched/fair.c"),
              ("changed", "arch/x86/mm/fault.c"), ("changed", "arch/arm64/mm/fault.c"),
              ("changed", "include/linux/mm.h"), ("changed", "mm/Kconfig"),
              ("added", "tools/testing/selftests/mm/async_fork.c"),
              ("changed", "Documentation/mm/x.c"), ("changed", "scripts/mod/modpost.c"))
    assert run("objects", "x86", p).stdout.split() == [
        "arch/x86/mm/fault.o", "kernel/sched/fair.o", "mm/async_fork.o"]
    assert "arch/arm64/mm/fault.o" in run("objects", "arm64", p).stdout.split()


def test_objects_of_the_series():
    objs = run("objects", "x86", *series()).stdout.split()
    assert {"mm/async_fork.o", "mm/memory.o", "kernel/fork.o", "mm/madvise.o"} <= set(objs)
    assert objs == sorted(set(objs))
    assert all(o.endswith(".o") and not o.startswith(("tools/", "arch/arm64/")) for o in objs)
    added = [line.split()[1] for line in run("files", *series()).stdout.splitlines()
             if line.startswith("added ")]
    assert {"mm/async_fork.c", "include/linux/async_fork.h",
            "Documentation/admin-guide/mm/async_fork.rst"} <= set(added)


OLD = """\
  CC      mm/memory.o
mm/memory.c:100:5: warning: no previous prototype for 'foo' [-Wmissing-prototypes]
  100 | int foo(void)
      |     ^~~
mm/memory.c:200: warning: Function parameter or struct member 'vma' not described in 'bar'
mm/memory.c:300:9: warning: incorrect type in argument 1 (different address spaces)
mm/memory.c:300:9:    expected void *p
mm/memory.c:300:9:    got void [noderef] __rcu *
mm/memory.o: warning: objtool: baz+0x1f: call to qux() leaves .noinstr.text section
Documentation/mm/index.rst:5: WARNING: unknown document: '../admin-guide/mm/index'
include/linux/mm.h:10:1: warning: context imbalance in 'lock_it' - wrong count at exit
"""

NEW = """\
  CC      mm/memory.o
mm/memory.c:130:5: warning: no previous prototype for 'foo' [-Wmissing-prototypes]
  130 | int foo(void)
      |     ^~~
mm/memory.c:140:6: warning: no previous prototype for 'added' [-Wmissing-prototypes]
mm/memory.c:230: warning: Function parameter or struct member 'vma' not described in 'bar'
mm/memory.c:330:9: warning: incorrect type in argument 1 (different address spaces)
mm/memory.c:330:9:    expected void *p
mm/memory.c:330:9:    got void [noderef] __rcu *
mm/memory.c:400:9: warning: incorrect type in argument 1 (different address spaces)
mm/memory.c:400:9:    expected void *q
mm/memory.c:400:9:    got void [noderef] __rcu *
mm/memory.o: warning: objtool: baz+0x2a: call to qux() leaves .noinstr.text section
Documentation/mm/index.rst:7: WARNING: unknown document: '../admin-guide/mm/index'
Documentation/mm/async_fork.rst: WARNING: document isn't included in any toctree
include/linux/mm.h:12:1: warning: context imbalance in 'lock_it' - wrong count at exit
include/linux/mm.h:12:1: warning: context imbalance in 'lock_it' - wrong count at exit
mm/async_fork.c:5:1: error: unknown type name 'pte'
"""


def test_new_warnings(tmp_path):
    (tmp_path / "old").write_text(OLD)
    (tmp_path / "new").write_text(NEW)
    out = run("new-warnings", tmp_path / "old", tmp_path / "new").stdout.splitlines()
    assert out == [
        # New: another function; the same sparse warning a second time.
        "mm/memory.c:140:6: warning: no previous prototype for 'added' [-Wmissing-prototypes]",
        "mm/memory.c:400:9: warning: incorrect type in argument 1 (different address spaces)",
        "mm/memory.c:400:9:    expected void *q",
        "mm/memory.c:400:9:    got void [noderef] __rcu *",
        "Documentation/mm/async_fork.rst: WARNING: document isn't included in any toctree",
        # Printed once before, twice now (a header included once more).
        "include/linux/mm.h:12:1: warning: context imbalance in 'lock_it' - wrong count at exit",
        "mm/async_fork.c:5:1: error: unknown type name 'pte'",
    ]


def test_new_warnings_without_old_ones(tmp_path):
    """An empty old log (no warning before) makes every warning new."""
    (tmp_path / "old").write_text("")
    (tmp_path / "new").write_text(NEW)
    out = run("new-warnings", tmp_path / "old", tmp_path / "new").stdout.splitlines()
    assert len([line for line in out if ": warning: " in line or "WARNING" in line
                or ": error: " in line]) == 11
    (tmp_path / "new").write_text(OLD)
    assert run("new-warnings", tmp_path / "new", tmp_path / "new").stdout == ""


@pytest.mark.parametrize("env,args,message", [
    ({"ARCH": "arm64"}, [], "x86 only"),
    ({"CHECKS": "kdoc bogus"}, [], "unknown check 'bogus'"),
    ({}, ["extra"], "usage"),
])
def test_refuses_bad_input(tmp_path, env, args, message):
    (tmp_path / "linux").mkdir()
    (tmp_path / "linux/Makefile").write_text("kernelversion:\n\t@echo 6.12.0\n")
    (tmp_path / "pristine.done").touch()
    r = run(tmp_path, *args, env=env, check=False)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "check-kernel/check-kernel.log").exists()


def test_refuses_an_unprepared_tree(tmp_path):
    r = run(tmp_path, check=False)
    assert r.returncode == 2 and "make source" in r.stderr


def test_make_help_and_readme_name_it():
    help_text = subprocess.run(["make", "-s", "help"], cwd=TOP, capture_output=True,
                               text=True, timeout=30).stdout
    assert "make check-kernel" in help_text
    assert "`make check-kernel`" in (TOP / "README.md").read_text()
