#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The debug guest kernel from the unpatched 6.12 tree (BUILD/pristine, as
# "make source" unpacks it), to tell a behaviour of the 6.12 kernel from
# one the series adds: same fragments as the debug kernel, minus the
# Async-fork options it does not have.  Not part of any make target.
#
# Usage: build-unpatched.sh [BUILD_DIR]   (default: build)
# Result: BUILD_DIR/unpatched/debug/arch/x86/boot/bzImage, boot it with
#   scripts/vm.py --kernel BUILD_DIR/unpatched/debug ...
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
src=$build/pristine
out=$build/unpatched/debug
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
	"$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" \
		"$top/kernel/configs/lean.config" "$top/kernel/configs/debug.config" >/dev/null
	sed -i 's/^CONFIG_LOCALVERSION=.*/CONFIG_LOCALVERSION="-unpatched-debug"/' "$out/.config"
	kmake olddefconfig >/dev/null
fi
kmake -j"$(nproc)" bzImage
echo "build-unpatched: $out/arch/x86/boot/bzImage ($(kmake -s kernelrelease))"
