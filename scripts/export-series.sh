#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Export Async-fork kernel work from a git work tree of the prepared source
# into the project: one patch per commit after BASE into kernel/patches
# (numbered from 0003, after the selftest fixes), and the files the commits
# add into kernel/files.  The series file is rewritten to match.
#
# Usage: export-series.sh KERNEL_GIT_TREE BASE_COMMIT
#
# A developer's tool: make a git tree of build/linux (git init; git add -f
# -A; commit as BASE), commit the kernel change there in series order, then
# run this.  Patch names come from the subjects; messages get the project's
# From: and Signed-off-by:.
set -euo pipefail

die() { echo "export-series: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: export-series.sh KERNEL_GIT_TREE BASE_COMMIT"
tree=$1
base=$2
top=$(cd "$(dirname "$0")/.." && pwd)
first=3
author="Async-fork developers <async-fork@localhost>"

git -C "$tree" rev-parse -q --verify "$base^{commit}" >/dev/null || die "no commit $base in $tree"
mapfile -t added < <(git -C "$tree" diff --name-only --diff-filter=A "$base" HEAD)
excl=()
for f in "${added[@]}"; do
	excl+=(":(exclude)$f")
	mkdir -p "$top/kernel/files/$(dirname "$f")"
	cp "$tree/$f" "$top/kernel/files/$f"
done

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
git -C "$tree" format-patch -q --no-signature --zero-commit --start-number "$first" \
	-o "$out" "$base..HEAD" -- . "${excl[@]}"

keep=$(printf '%04d' $((first - 1)))
for p in "$top"/kernel/patches/[0-9][0-9][0-9][0-9]-*.patch; do
	[[ "$(basename "$p")" > "$keep-~" ]] && rm -f "$p"
done
grep -v '^#' "$top/kernel/patches/series" | awk -v k="$keep" '$1 <= k "-~"' > "$out/series.head" || true
{
	grep '^#' "$top/kernel/patches/series"
	cat "$out/series.head"
} > "$out/series"

for f in "$out"/[0-9]*.patch; do
	python3 - "$f" "$top/kernel/patches" "$author" <<'PY'
import os, re, sys
path, dest, author = sys.argv[1:]
s = open(path).read()
head, _, body = s.partition("\n\n")
subj = re.search(r"^Subject: \[PATCH \d+/\d+\] (.*(?:\n .*)*)", head, re.M).group(1).replace("\n ", " ")
msg, _, diff = body.partition("\n---\n")
msg = msg.rstrip() + f"\n\nSigned-off-by: {author}\n"
num = os.path.basename(path)[:4]
slug = re.sub(r"[^a-z0-9.]+", "-", subj.lower()).strip("-")[:60].rstrip("-")
name = f"{num}-{slug}.patch"
open(os.path.join(dest, name), "w").write(f"From: {author}\nSubject: [PATCH] {subj}\n\n{msg}---\n{diff}")
print(name)
PY
done >> "$out/series"
cp "$out/series" "$top/kernel/patches/series"
echo "export-series: $(grep -vc '^#' "$top/kernel/patches/series") patches, ${#added[@]} new files"
