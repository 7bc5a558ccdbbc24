#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Make the kernel tree that every build uses:
#
#   BUILD/linux = Debian's linux-source-6.12 tarball
#               + kernel/patches/ (quilt-style "series", applied in order:
#                 whole patches, new files included, as git am applies them)
#               + kernel/harness/*.patch (what the test harness needs of the
#                 kernel and no series carries: an LKDTM crash point that
#                 lockdep reports)
#               + localversion-asyncfork (the "-asyncfork" in the release of
#                 the project's builds; not part of the series)
#
# The tree is assembled in BUILD/stage and then synced into BUILD/linux by
# content, so a rebuild recompiles only what a change touched.  A patch that
# does not apply stops everything before BUILD/linux is changed.
#
# Usage: prepare-source.sh TARBALL BUILD_DIR
set -euo pipefail

die() { echo "prepare-source: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: prepare-source.sh TARBALL BUILD_DIR"
tarball=$1
build=$2
top=$(cd "$(dirname "$0")/.." && pwd)
patches=${ASYNC_FORK_PATCHES:-$top/kernel/patches}
harness=${ASYNC_FORK_HARNESS:-$top/kernel/harness}

[ -r "$tarball" ] || die "kernel source $tarball not found: run 'make setup' (installs Debian's linux-source-6.12) or set KERNEL_TARBALL=/path/to/linux-source-6.12.tar.xz"
[ -r "$patches/series" ] || die "no series file in $patches"

mkdir -p "$build"
build=$(cd "$build" && pwd)

# Skip all the work when nothing that goes into the tree has changed.
inputs=$( { stat -c '%n %s %Y' "$tarball"
	    cd "$top" && find "$patches" "$harness" -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum)
if [ -f "$build/linux/Makefile" ] && [ "$(cat "$build/source.sum" 2>/dev/null)" = "$inputs" ]; then
	exit 0
fi

pristine=$build/pristine
if [ ! -f "$build/pristine.done" ] || [ "$tarball" -nt "$build/pristine.done" ]; then
	echo "prepare-source: unpacking $tarball"
	rm -rf "$pristine" "$build/pristine.done"
	mkdir -p "$pristine"
	tar -xJf "$tarball" -C "$pristine" --strip-components=1
	touch "$build/pristine.done"
fi

stage=$build/stage
rm -rf "$stage"
mkdir -p "$stage"
# Hard links are cheap; cp --remove-destination and patch both replace a
# file instead of writing through the link, so the pristine tree stays intact.
cp -al "$pristine"/. "$stage"/

n=0
while read -r p _; do
	case "$p" in ''|'#'*) continue ;; esac
	[ -r "$patches/$p" ] || die "series names $p, which is not in $patches"
	if ! out=$(patch -d "$stage" -p1 --batch --forward --no-backup-if-mismatch \
			-r - < "$patches/$p" 2>&1); then
		echo "$out" >&2
		die "patch $p does not apply to $(basename "$tarball"); refresh it against this source"
	fi
	n=$((n + 1))
done < "$patches/series"
for p in "$harness"/*.patch; do
	[ -e "$p" ] || continue
	if ! out=$(patch -d "$stage" -p1 --batch --forward --no-backup-if-mismatch \
			-r - < "$p" 2>&1); then
		echo "$out" >&2
		die "harness patch $(basename "$p") does not apply after the series"
	fi
done
echo "-asyncfork" > "$stage/localversion-asyncfork"

mkdir -p "$build/linux"
rsync -rlc --delete "$stage"/ "$build/linux"/
rm -rf "$stage"
echo "$inputs" > "$build/source.sum"
echo "prepare-source: $(make -s -C "$build/linux" kernelversion) + $n patches"
