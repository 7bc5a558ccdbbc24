#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Rewrite the diffs of kernel/patches from a kernel git tree whose commits
after BASE are the series, one commit per patch, in series order.

A patch keeps its From:, Subject: and message (edit them in the patch
file); only the part after the first "---" line is replaced.  A commit
whose subject names no patch of the series becomes a new patch, appended
to the series, with the commit's message.  Files that kernel/files holds
(added whole by prepare-source.sh) are left out of every diff.

Usage: refresh-series.py KERNEL_GIT_TREE BASE_COMMIT
"""
import re
import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
PATCHES = TOP / "kernel/patches"
AUTHOR = "Async-fork developers <async-fork@localhost>"


def git(tree, *args):
    return subprocess.run(["git", "-C", tree, *args], check=True,
                          capture_output=True, text=True).stdout


def patch_subject(path):
    """The subject of a patch file, without its [PATCH] tag."""
    head = path.read_text().split("\n\n", 1)[0]
    m = re.search(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n .*)*)", head, re.M)
    return m.group(1).replace("\n ", " ").strip() if m else None


def main(tree, base):
    series_file = PATCHES / "series"
    lines = series_file.read_text().splitlines()
    names = [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]
    own = [str(p.relative_to(TOP / "kernel/files")) for p in (TOP / "kernel/files").rglob("*")
           if p.is_file()]
    excl = [f":(exclude){f}" for f in own]
    by_subject = {patch_subject(PATCHES / n): n for n in names}
    commits = git(tree, "rev-list", "--reverse", f"{base}..HEAD").split()
    for c in commits:
        subject = git(tree, "log", "-1", "--format=%s", c).strip()
        diff = git(tree, "format-patch", "-1", "--stdout", "--no-signature",
                   "--zero-commit", c, "--", ".", *excl)
        body = diff.split("\n---\n", 1)[1]
        # A commit names its patch by the patch's file name (a tree made
        # by hand) or by the patch's subject (a tree made with git am).
        name = subject if subject in names else by_subject.get(subject)
        if name:
            path = PATCHES / name
            head = path.read_text().split("\n---\n", 1)[0]
        else:
            msg = git(tree, "log", "-1", "--format=%b", c).rstrip()
            num = len(names) + 1
            slug = re.sub(r"[^a-z0-9.]+", "-", subject.lower()).strip("-")[:60].rstrip("-")
            name = f"{num:04d}-{slug}.patch"
            names.append(name)
            lines.append(name)
            path = PATCHES / name
            sob = f"Signed-off-by: {AUTHOR}"
            if sob not in msg:
                msg += f"\n\n{sob}"
            head = f"From: {AUTHOR}\nSubject: [PATCH] {subject}\n\n{msg}"
        path.write_text(head + "\n---\n" + body)
        print(path.name)
    series_file.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: refresh-series.py KERNEL_GIT_TREE BASE_COMMIT")
    main(*sys.argv[1:])
