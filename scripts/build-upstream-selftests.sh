#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build the upstream mm selftests of the prepared tree against its own uapi
# headers, into BUILD_DIR/upstream-mm (BUILD_DIR/arm64-upstream-mm with ARCH=arm64).  Only the programs the project runs,
# and the series' own.
#
# Usage: build-upstream-selftests.sh BUILD_DIR
set -euo pipefail

die() { echo "build-upstream-selftests: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: build-upstream-selftests.sh BUILD_DIR"
build=$(cd "$1" && pwd)
src=$build/linux
# ARCH=arm64: cross-built with aarch64-linux-gnu-gcc, against arm64 headers.
case "${ARCH:-x86}" in
# x86_64, as the selftests' Makefile derives it from uname when ARCH is
# unset (ARCH=x86 there would drop its -no-pie).
x86|x86_64) prefix='' cross=(ARCH=x86_64) ;;
arm64|aarch64)
	command -v aarch64-linux-gnu-gcc >/dev/null ||
		die "ARCH=arm64: aarch64-linux-gnu-gcc not found: run 'make arm64-root'"
	prefix=arm64- cross=(ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-) ;;
*) die "unknown ARCH '$ARCH' (x86 or arm64)" ;;
esac
out=$build/${prefix}upstream-mm
headers=$build/${prefix}headers
[ -f "$src/Makefile" ] || die "$src is not prepared: run 'make source'"

# The programs of tests/upstream_mm.list: the first word of each line that
# is not an option (timeout=, retries=).
top=$(cd "$(dirname "$0")/.." && pwd)
mapfile -t progs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$top/tests/upstream_mm.list" |
		     awk '{ for (i = 1; i <= NF && $i ~ /=/; i++); print $i }' | sort -u)

# The series' own selftests, where the tree has them (patch 15): built by
# the upstream Makefile too, to show that they build there.
for p in async_fork fork_snapshot; do
	[ -f "$src/tools/testing/selftests/mm/$p.c" ] && progs+=("$p")
done
# A program the list names but this tree has no source for (madv_free_fork
# before kernel/patches/mm-fixes, in make check-series's prefixes) is left
# out; the suite then finds it missing and says so.
have=()
for p in "${progs[@]}"; do
	if [ -f "$src/tools/testing/selftests/mm/$p.c" ]; then
		have+=("$p")
	else
		echo "build-upstream-selftests: no $p.c in $src: not built"
	fi
done
progs=("${have[@]}")

make -s -C "$src" O="$headers" "${cross[@]}" headers >/dev/null
# Re-detect optional libraries (liburing) each time, as a fresh tree would.
rm -f "$src"/tools/testing/selftests/mm/local_config.*
mkdir -p "$out"
make -s -C "$src/tools/testing/selftests/mm" "${cross[@]}" \
	OUTPUT="$out" KHDR_INCLUDES="-isystem $headers/usr/include" \
	-j"$(nproc)" "${progs[@]/#/$out/}"
echo "build-upstream-selftests: ${#progs[@]} programs in $out"
