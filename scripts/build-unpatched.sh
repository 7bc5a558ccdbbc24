#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A guest kernel from the unpatched 6.12 tree (BUILD/pristine, as "make
# source" unpacks it), to tell a behaviour of the 6.12 kernel from one the
# series adds (debug, the default) or to measure what the series costs
# (lean: make bench-offcost): the fragments of that profile
# (kernel/configs/profiles), minus the Async-fork options it does not have.
#
# Usage: build-unpatched.sh [BUILD_DIR [PROFILE]]   (default: build debug)
# Result: BUILD_DIR/unpatched/PROFILE/arch/x86/boot/bzImage, boot it with
#   asyncfork vm --kernel BUILD_DIR/unpatched/PROFILE ...
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
src=$build/pristine
profile=${2:-debug}
list=$("$top/scripts/profiles.sh" fragments "$profile") ||
	{ echo "build-unpatched: unknown profile '$profile' ($("$top/scripts/profiles.sh" names))" >&2; exit 2; }
mapfile -t fragments <<< "$list"
out=$build/unpatched/$profile
[ -f "$build/pristine.done" ] || { echo "build-unpatched: run 'make source' first" >&2; exit 1; }

export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_BASEDIR=$build CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=time_macros
export KBUILD_BUILD_USER=async-fork KBUILD_BUILD_HOST=guest
cc=gcc
command -v ccache >/dev/null && cc="ccache gcc"
kmake() { make -s -C "$src" O="$out" CC="$cc" "$@"; }

mkdir -p "$out"
if [ ! -f "$out/.config" ]; then
	kmake tinyconfig >/dev/null
	"$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "${fragments[@]}" >/dev/null
	sed -i "s/^CONFIG_LOCALVERSION=.*/CONFIG_LOCALVERSION=\"-unpatched-$profile\"/" "$out/.config"
	kmake olddefconfig >/dev/null
fi
python=$top/.venv/bin/python
[ -x "$python" ] || python=python3
# A log and a progress line, as scripts/build-kernel.sh.
PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH} "$python" -m asyncfork.buildlog \
	--log "$out/build.log" --stats "$out/build-stats.json" --label "build-unpatched: $profile" -- \
	make -C "$src" O="$out" CC="$cc" V=0 -j"$(nproc)" bzImage
kmake -s kernelrelease > "$out/kernelrelease"
echo "build-unpatched: $out/arch/x86/boot/bzImage ($(kmake -s kernelrelease))"
