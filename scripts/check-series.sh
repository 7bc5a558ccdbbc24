#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Check that every prefix of the patch series applies and builds: the tree
# with patches 1..k, for each k, must build the lean kernel (which has
# CONFIG_ASYNC_FORK=y), the mm selftests if patch k touches them, and the
# whole series must also build with CONFIG_ASYNC_FORK=n.  A patch that
# touches only tools/ or Documentation/ leaves the kernel as the previous
# prefix had it, so its kernel build is skipped.  The debug kernel of the
# whole series is what "make test" builds.  Uses its own build folder, so
# that build/linux and the kernels there are left as they are.
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

# Does patch $1 change anything the kernel build reads?
touches_kernel() {
	grep '^+++ b/' "$top/kernel/patches/$1" | sed 's|^+++ b/||' |
		grep -qv -e '^tools/' -e '^Documentation/'
}

for k in $(seq 1 ${#patches[@]}); do
	p=${patches[$((k - 1))]}
	printf '%s\n' "${patches[@]:0:k}" > "$work/patches/series"
	cp "$top/kernel/patches/$p" "$work/patches/"
	echo "check-series: [$k/${#patches[@]}] $p"
	ASYNC_FORK_PATCHES=$work/patches "$top/scripts/prepare-source.sh" "$tarball" "$work" >/dev/null
	if touches_kernel "$p"; then
		"$top/scripts/build-kernel.sh" lean "$work" >/dev/null ||
			die "the kernel does not build with patches 1..$k (last: $p)"
	else
		echo "check-series:   tools/ and Documentation/ only: kernel build skipped"
	fi
	if grep -q '^+++ b/tools/testing/selftests/mm/' "$top/kernel/patches/$p"; then
		"$top/scripts/build-upstream-selftests.sh" "$work" >/dev/null 2>&1 ||
			die "mm selftests do not build with patches 1..$k (last: $p)"
	fi
done
echo "check-series: the whole series with CONFIG_ASYNC_FORK=n"
"$top/scripts/build-kernel.sh" off "$work" >/dev/null ||
	die "the kernel does not build with CONFIG_ASYNC_FORK=n"
echo "check-series: all ${#patches[@]} prefixes of the series build, and the series without CONFIG_ASYNC_FORK"
