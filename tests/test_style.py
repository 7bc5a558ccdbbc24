# SPDX-License-Identifier: GPL-2.0
"""Kernel style of what the project adds to the kernel: every patch of the
series and every new C file pass scripts/checkpatch.pl --strict."""

import io
import re
import subprocess
import tokenize

import pytest

from conftest import BUILD, TOP, need

CHECKPATCH = BUILD / "linux/scripts/checkpatch.pl"
PATCHES = TOP / "kernel/patches"


def series():
    """The series file's patches, as paths relative to kernel/patches."""
    lines = (PATCHES / "series").read_text().splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]


def new_files():
    """{file the series adds to the kernel tree: the patch that adds it}."""
    out = {}
    for p in series():
        for m in re.finditer(r"^diff --git a/(\S+) b/\S+\nnew file mode", (PATCHES / p).read_text(), re.M):
            out[m.group(1)] = p
    return out


def message(patch):
    """The commit message of a patch, on one line."""
    return " ".join((PATCHES / patch).read_text().split("\n---\n", 1)[0].split())


def checkpatch(args, stdin=None):
    need(CHECKPATCH, "build/linux is not prepared: run 'make source'")
    # UNKNOWN_COMMIT_ID: checkpatch looks a Fixes: hash up in the git tree
    # it runs in, and neither this repository nor kernel-git.sh's tree (one
    # commit of the tarball) has upstream history.
    return subprocess.run([str(CHECKPATCH), "--strict", "--no-tree", "--color=never",
                           "--ignore", "UNKNOWN_COMMIT_ID", *args],
                          input=stdin, capture_output=True, text=True, cwd=TOP)


def test_series_lists_every_patch():
    on_disk = sorted(str(p.relative_to(PATCHES)) for p in PATCHES.glob("*/0*.patch")
                     if not p.name.startswith("0000-"))
    assert sorted(series()) == on_disk


def unexplained(report, message):
    """checkpatch's reports whose text the commit message does not quote:
    a report kept on purpose is named, and explained, in the message."""
    out = []
    for m in re.finditer(r"^(WARNING|ERROR|CHECK): (.*)$", report, re.M):
        text = m.group(2).split(" (ctx:")[0].split(": see ")[0].strip()
        if m.group(1) == "ERROR" or f'"{text}' not in message.replace("\n", " "):
            out.append(m.group(0))
    return out


@pytest.mark.parametrize("patch", series())
def test_patch_style(patch):
    p = checkpatch(["-"], stdin=(PATCHES / patch).read_text())
    assert not unexplained(p.stdout, message(patch)), p.stdout


def test_unexplained_report_is_caught():
    report = ("WARNING: Use of volatile is usually wrong: see Documentation/x.rst\n"
              "CHECK: spaces preferred around that '*' (ctx:WxV)\n"
              "ERROR: do not use assignment in if condition\n")
    message = 'keeps "spaces preferred around that \'*\'" after FIXTURE_DATA()'
    assert unexplained(report, message) == [
        "WARNING: Use of volatile is usually wrong: see Documentation/x.rst",
        "ERROR: do not use assignment in if condition"]


@pytest.mark.parametrize("path", [f for f in new_files() if f.endswith((".c", ".h"))])
def test_new_file_style(path):
    # The whole file, as the prepared tree has it after the series; a
    # report is kept only if the message of the patch that adds it says so.
    p = checkpatch(["-f", str(BUILD / "linux" / path)])
    assert not unexplained(p.stdout, message(new_files()[path])), p.stdout


def source_files():
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=TOP,
                         check=True).stdout.split()
    return [f for f in out
            if f.endswith((".py", ".sh", ".c", ".h")) or f.split("/")[-1] == "Makefile"
            or f in (".ci/run", "tests/guest/ksm-merge")]


def test_every_source_file_names_its_licence():
    # LICENSE is GPL-2.0; each source file says so in its first lines (a
    # file taken from elsewhere keeps its own header: QEMU's plugin API,
    # bench/qemu/qemu-plugin.h, GPL-2.0-or-later, says so on line 8).
    missing = [f for f in source_files()
               if "SPDX-License-Identifier: GPL-2.0" not in
               "".join((TOP / f).read_text().splitlines(True)[:10])]
    assert not missing, f"no SPDX-License-Identifier line: {missing}"
    assert (TOP / "LICENSE").read_text().startswith(
        "                    GNU GENERAL PUBLIC LICENSE\n                       Version 2")


def python_files():
    return [f for f in source_files() if f.endswith(".py")]


def path_edits(name, text):
    """The lines of a Python file whose code (not its strings or comments)
    names sys.path or site.addsitedir."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type in (tokenize.NAME, tokenize.OP)]
    return [f"{name}:{a.start[0]}: {a.line.strip()}"
            for a, dot, b in zip(toks, toks[1:], toks[2:])
            if dot.string == "." and (a.string, b.string) in (("sys", "path"),
                                                                ("site", "addsitedir"))]


def test_path_edit_is_caught():
    text = ('import sys\n# sys.path is not edited here\n"""nor sys.path here"""\n'
            "sys.path.insert(0, 'bench')\nimport site; site.addsitedir('x')\n")
    assert path_edits("f.py", text) == ["f.py:4: sys.path.insert(0, 'bench')",
                                        "f.py:5: import site; site.addsitedir('x')"]


def test_no_python_file_edits_the_import_path():
    # The harness is a package (python/asyncfork, pyproject.toml): its
    # modules, the tests and the scripts import it; none edits the path.
    assert "python/asyncfork/vm.py" in python_files()
    edits = [e for f in python_files() for e in path_edits(f, (TOP / f).read_text())]
    assert not edits, "import path edited in:\n" + "\n".join(edits)


def test_make_help_lists_every_target_once():
    # make help prints the Makefile's header and a line per kernel profile:
    # one line per target of .PHONY (as make reads it: kernel-NAME for each
    # profile of kernel/configs/profiles).
    db = subprocess.run(["make", "-pn", "help"], capture_output=True, text=True, cwd=TOP,
                        check=True).stdout
    targets = re.search(r"^\.PHONY:(.*)$", db, re.M).group(1).split()
    out = subprocess.run(["make", "-s", "help"], capture_output=True, text=True, cwd=TOP,
                         check=True).stdout.splitlines()
    named = [line.split()[1] for line in out if line.startswith("  make ")]
    assert len(targets) > 30 and sorted(named) == sorted(targets), \
        (set(targets) - set(named), set(named) - set(targets))


def test_every_script_is_executable():
    # A file with a #! line is run by its path (the docs say to): mode 755.
    staged = subprocess.run(["git", "ls-files", "-s"], capture_output=True, text=True,
                            cwd=TOP, check=True).stdout.splitlines()
    not_exec = [line.split("\t", 1)[1] for line in staged
                if not line.startswith("100755") and (TOP / line.split("\t", 1)[1]).is_file()
                and (TOP / line.split("\t", 1)[1]).read_bytes()[:2] == b"#!"]
    assert not not_exec, f"a #! line but not executable: {not_exec}"
    assert not [f for f in python_files() if f.startswith("python/") and
                (TOP / f).read_bytes()[:2] == b"#!"], "package modules run with python -m"
