#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Make a kernel git tree to work on the series in: Debian's linux-source
# tarball as one commit (tag asyncfork-base), then `git am` of
# kernel/patches/series (tag selftests-mm-fixes after the selftest fixes,
# async-fork-end after Async-fork, before the fixes to 6.12 itself).
#
# The base commit is made with a fixed author, committer, date and message,
# so that its hash, which the cover letters give as base-commit:, is the
# same for everyone who runs this on the same tarball.  Edit the series in
# the tree (git rebase -i, commit --fixup), then export it with
# scripts/export-series.sh TREE.
#
# Usage: kernel-git.sh TARBALL TREE
set -euo pipefail

die() { echo "kernel-git: $*" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: kernel-git.sh TARBALL TREE"
tarball=$1
tree=$2
top=$(cd "$(dirname "$0")/.." && pwd)
patches=$top/kernel/patches

[ -r "$tarball" ] || die "kernel source $tarball not found: run 'make setup'"
[ -e "$tree" ] && die "$tree exists: remove it, or work in it"
mkdir -p "$tree"
tar -xJf "$tarball" -C "$tree" --strip-components=1
cd "$tree"
git init -q
version=$(make -s kernelversion)
git add -A -f
GIT_AUTHOR_NAME="linux-source-6.12" GIT_AUTHOR_EMAIL="linux-source@debian.invalid" \
GIT_AUTHOR_DATE="@0 +0000" GIT_COMMITTER_NAME="linux-source-6.12" \
GIT_COMMITTER_EMAIL="linux-source@debian.invalid" GIT_COMMITTER_DATE="@0 +0000" \
	git -c commit.gpgsign=false commit -q -m "Debian linux-source-6.12 $version ($(basename "$tarball"))"
git tag asyncfork-base
# git am records a committer: the submitter's identity when git config has
# one; otherwise a stand-in for this command only, never written to the
# tree's config, so that export-series.sh still refuses to export without
# the submitter's own.
if ! git config user.name >/dev/null || ! git config user.email >/dev/null; then
	export GIT_COMMITTER_NAME="kernel-git.sh" GIT_COMMITTER_EMAIL="kernel-git@invalid"
fi
while read -r p _; do
	case "$p" in ''|'#'*) continue ;; esac
	case "$p" in
	async-fork/*)
		git rev-parse -q --verify selftests-mm-fixes >/dev/null || git tag selftests-mm-fixes ;;
	mm-fixes/*)
		git rev-parse -q --verify async-fork-end >/dev/null || git tag async-fork-end ;;
	esac
	git am -q --keep-cr "$patches/$p" || die "git am $p failed"
done < "$patches/series"
git rev-parse -q --verify selftests-mm-fixes >/dev/null || git tag selftests-mm-fixes
git rev-parse -q --verify async-fork-end >/dev/null || git tag async-fork-end
echo "kernel-git: $tree: base $(git rev-parse --short asyncfork-base), $(git rev-list --count asyncfork-base..HEAD) commits"
