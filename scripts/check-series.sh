#!/bin/bash
# Check that every prefix of the patch series applies and builds: the tree
# with patches 1..k, for each k, must build the debug kernel (and the
# selftests a patch touches must still compile).  Uses its own build folder
# so that build/linux and build/debug are left as they are.
#
# Usage: check-series.sh TARBALL BUILD_DIR
set -euo pipefail

die() { echo "check-series: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: check-series.sh TARBALL BUILD_DIR"
tarball=$1
build=$(mkdir -p "$2" && cd "$2" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
work=$build/series-check

mapfile -t patches < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$top/kernel/patches/series" |
		       awk '{ print $1 }')
mkdir -p "$work/patches"
# Share the unpacked tarball with the main build.
if [ -f "$build/pristine.done" ] && [ ! -e "$work/pristine" ]; then
	ln -s "$build/pristine" "$work/pristine"
	touch "$work/pristine.done"
fi

for k in $(seq 1 ${#patches[@]}); do
	p=${patches[$((k - 1))]}
	printf '%s\n' "${patches[@]:0:k}" > "$work/patches/series"
	cp "$top/kernel/patches/$p" "$work/patches/"
	echo "check-series: [$k/${#patches[@]}] $p"
	ASYNC_FORK_PATCHES=$work/patches "$top/scripts/prepare-source.sh" "$tarball" "$work" >/dev/null
	"$top/scripts/build-kernel.sh" debug "$work" >/dev/null ||
		die "the tree does not build with patches 1..$k (last: $p)"
	if grep -q '^+++ b/tools/testing/selftests/mm/' "$top/kernel/patches/$p"; then
		"$top/scripts/build-upstream-selftests.sh" "$work" >/dev/null 2>&1 ||
			die "mm selftests do not build with patches 1..$k (last: $p)"
	fi
done
echo "check-series: all ${#patches[@]} prefixes of the series build"
