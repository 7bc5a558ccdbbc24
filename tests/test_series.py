# SPDX-License-Identifier: GPL-2.0
"""The kernel series as a reviewer gets it: whole patches that git am
reproduces the tested kernel from, in two series with cover letters that
name their base and recipients and no placeholder, the knobs that enable
Async-fork in the last patch that changes the kernel, and an export that
refuses to run without the submitter's identity."""

import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD, TOP, missing, need

PATCHES = TOP / "kernel/patches"
TARBALL = "/usr/src/linux-source-6.12.tar.xz"


def series():
    lines = (PATCHES / "series").read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]


def files_of(patch):
    return re.findall(r"^\+\+\+ b/(\S+)", (PATCHES / patch).read_text(), re.M)


SERIES = ["selftests-mm", "async-fork", "mm-fixes"]


def test_three_series_in_order():
    names = series()
    dirs = [n.split("/")[0] for n in names]
    assert dirs == sorted(dirs, key=SERIES.index)
    assert dirs.count("selftests-mm") == 3
    # The selftest fixes touch only the selftests; Async-fork is in none of them.
    for n in names[:3]:
        assert all(f.startswith("tools/testing/selftests/mm/") for f in files_of(n)), n
        assert "async_fork" not in (PATCHES / n).read_text().lower(), n
    # Nor in the fixes to 6.12 itself, which apply to the base alone.
    for n in names:
        if n.startswith("mm-fixes/"):
            assert "async_fork" not in (PATCHES / n).read_text().lower(), n


def test_mm_fixes_apply_to_the_base_alone(tmp_path):
    """The fixes to 6.12 come last in the series file, but must not need
    the series before them: they apply to the pristine tree alone."""
    fixes = [n for n in series() if n.startswith("mm-fixes/")]
    if not fixes:
        pytest.skip("no mm-fixes series")
    pristine = BUILD / "pristine"
    if not (pristine / "Makefile").exists():
        missing("build/pristine is not unpacked: run 'make source'")
    # In order, on a copy of the files they touch: a later patch may change
    # a file an earlier one adds.
    tree = tmp_path / "tree"
    for f in {f for n in fixes for f in files_of(n)}:
        if (pristine / f).exists():
            (tree / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(pristine / f, tree / f)
    for n in fixes:
        r = subprocess.run(["patch", "-p1", "--batch", "--forward", "-d", str(tree),
                            "-i", str(PATCHES / n)], capture_output=True, text=True)
        assert r.returncode == 0, n + ": " + r.stdout + r.stderr


@pytest.mark.parametrize("folder", SERIES)
def test_cover_letter(folder):
    letter = (PATCHES / folder / "0000-cover-letter.patch").read_text()
    head = letter.split("\n\n", 1)[0]
    assert "*** SUBJECT HERE ***" not in letter and "*** BLURB HERE ***" not in letter
    assert re.search(r"^base-commit: [0-9a-f]{40}$", letter, re.M)
    assert re.search(r"^To: \S+@", head, re.M)
    n = len([p for p in series() if p.startswith(folder + "/")])
    assert re.search(rf"^Subject: \[PATCH 0+/{n}\] \S", head, re.M)


def test_no_placeholder_author():
    for p in sorted(PATCHES.glob("*/*.patch")):
        text = p.read_text()
        assert "async-fork@localhost" not in text, p.name
        assert "Async-fork developers" not in text, p.name
        m = re.search(r"^From: (.*(?:\n .*)*)", text, re.M)
        author = m.group(1).replace("\n ", " ")
        if not p.name.startswith("0000-"):
            assert f"Signed-off-by: {author}" in text, p.name


def debug_only(patch: str, path: str) -> bool:
    """Does @patch change @path only by adding blocks of
    #ifdef CONFIG_ASYNC_FORK_DEBUG ... #endif?"""
    text = (PATCHES / patch).read_text()
    diff = text.split(f"+++ b/{path}\n", 1)[1].split("\ndiff --git ", 1)[0]
    runs, run = [], []
    for line in diff.splitlines():
        if line.startswith("-") and not line.startswith("---"):
            return False
        if line.startswith("+"):
            run.append(line[1:])
        elif run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return bool(runs) and all(r[0] == "#ifdef CONFIG_ASYNC_FORK_DEBUG" and r[-1].startswith("#endif")
                              for r in runs)


def test_knobs_only_in_last_kernel_patch():
    # No prefix of the series can enable Async-fork before every path that
    # changes PTEs copies first: the sysctl, the prctl and the cgroup file
    # come in the last patch that changes generic kernel code outside
    # Async-fork's own files.  Only an architecture's enablement (files
    # under arch/ alone: the helpers of a mark) and changes to Async-fork's
    # own files (the debug switch: no caller elsewhere, so no path that
    # changes PTEs) may follow it.
    # A generic file may change after it only inside CONFIG_ASYNC_FORK_DEBUG.
    own = ("mm/async_fork.c", "include/linux/async_fork.h", "mm/Kconfig")
    af = [p for p in series() if p.startswith("async-fork/")]
    code = [p for p in af if any(not f.startswith(("Documentation/", "tools/testing/",
                                                   "MAINTAINERS", "arch/") + own)
                                 and not debug_only(p, f) for f in files_of(p))]
    knobs = code[-1]
    for p in af:
        added = "\n".join(line for line in (PATCHES / p).read_text().splitlines()
                          if line.startswith("+"))
        has = any(k in added for k in ('.procname\t= "async_fork"', "case PR_SET_ASYNC_FORK",
                                       '.name = "async_fork"'))
        assert has == (p == knobs), p


def test_export_needs_the_submitters_identity(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}

    def git(*args):
        subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, env=env)
    git("init", "-q")
    (tree / "f").write_text("x\n")
    git("add", "f")
    git("commit", "-q", "-m", "base")
    git("tag", "asyncfork-base")
    git("tag", "selftests-mm-fixes")
    git("tag", "async-fork-end")
    before = {p: p.read_text() for p in PATCHES.rglob("*") if p.is_file()}
    r = subprocess.run([str(TOP / "scripts/export-series.sh"), str(tree)], capture_output=True,
                       text=True, env=env)
    assert r.returncode != 0
    assert "git config user.name is not set" in r.stderr
    assert {p: p.read_text() for p in PATCHES.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_git_am_reproduces_the_tested_kernel(tmp_path):
    """git am of the exported series on the tarball gives build/linux, the
    tree every kernel of the project is built from (but for the release
    suffix file the build adds)."""
    need(BUILD / "linux/Makefile", "build/linux is not prepared: run 'make source'")
    tree = tmp_path / "linux"
    r = subprocess.run([str(TOP / "scripts/kernel-git.sh"), TARBALL, str(tree)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # The guest builds also carry kernel/harness (an LKDTM crash point):
    # never part of a series, applied after it by prepare-source.sh.
    for patch in sorted((TOP / "kernel/harness").glob("*.patch")):
        with open(patch) as f:
            subprocess.run(["patch", "-d", str(tree), "-p1", "--batch", "--quiet"], stdin=f,
                           check=True)
    # Not compared: what the builds write into the tree (the mm selftests'
    # configuration probe) and the release suffix of the project's kernels.
    skip = [".git", "localversion-asyncfork", "local_config.h", "local_config.mk"]
    diff = subprocess.run(["diff", "-r", "-q", *(f"-x{x}" for x in skip),
                           str(tree), str(BUILD / "linux")], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout[-3000:]
    n = subprocess.run(["git", "-C", str(tree), "rev-list", "--count", "asyncfork-base..HEAD"],
                       capture_output=True, text=True, check=True).stdout.strip()
    assert int(n) == len(series())
    # The cover letters' base is this base, for everyone who makes it.
    base = subprocess.run(["git", "-C", str(tree), "rev-parse", "asyncfork-base"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for folder in SERIES:
        assert f"base-commit: {base}" in (PATCHES / folder / "0000-cover-letter.patch").read_text()
