#!/bin/bash
# Configure and build one guest kernel flavour out of tree.
#
#   lean:  make tinyconfig + kernel/configs/lean.config
#   debug: make tinyconfig + kernel/configs/lean.config + kernel/configs/debug.config
#   off:   make tinyconfig + kernel/configs/lean.config + kernel/configs/off.config
#          (CONFIG_ASYNC_FORK=n, for make check-series)
#
# Usage: build-kernel.sh FLAVOUR BUILD_DIR   (BUILD_DIR/linux must be prepared)
# Result: BUILD_DIR/FLAVOUR/arch/x86/boot/bzImage and BUILD_DIR/FLAVOUR/kernelrelease
set -euo pipefail

die() { echo "build-kernel: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: build-kernel.sh lean|debug|off BUILD_DIR"
flavour=$1
build=$(cd "$2" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
src=$build/linux
out=$build/$flavour
case "$flavour" in
lean)  fragments=("$top/kernel/configs/lean.config") ;;
debug) fragments=("$top/kernel/configs/lean.config" "$top/kernel/configs/debug.config") ;;
off)   fragments=("$top/kernel/configs/lean.config" "$top/kernel/configs/off.config") ;;
*)     die "unknown kernel flavour '$flavour' (use lean, debug or off)" ;;
esac
[ -f "$src/Makefile" ] || die "$src is not prepared: run 'make source'"

cc=gcc
command -v ccache >/dev/null && cc="ccache gcc"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Identical inputs give identical objects whatever the build directory.
export CCACHE_BASEDIR=$build CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=time_macros
export KBUILD_BUILD_USER=async-fork KBUILD_BUILD_HOST=guest
kmake() { make -s -C "$src" O="$out" CC="$cc" "$@"; }

mkdir -p "$out"
sum=$(cat "${fragments[@]}" | sha256sum)
if [ ! -f "$out/.config" ] || [ "$(cat "$out/config.sum" 2>/dev/null)" != "$sum" ]; then
	echo "build-kernel: configuring $flavour"
	kmake tinyconfig >/dev/null
	"$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "${fragments[@]}" >/dev/null
	kmake olddefconfig >/dev/null
	# merge_config only warns when Kconfig drops a requested option: refuse.
	# A later fragment overrides an earlier one, so check the last value.
	missing=$(cat "${fragments[@]}" |
		sed -n 's/^\(CONFIG_[A-Z0-9_]*\)=.*$/&/p; s/^# \(CONFIG_[A-Z0-9_]*\) is not set$/&/p' |
		awk '{ k = ($1 == "#") ? $2 : substr($0, 1, index($0, "=") - 1); v[k] = $0 }
		     END { for (k in v) print v[k] }' |
		while IFS= read -r want; do
			case "$want" in
			"# "*) sym=${want#\# }; sym=${sym%% *}
			       ! grep -q "^$sym=" "$out/.config" || echo "  $want" ;;
			*)     grep -qxF -- "$want" "$out/.config" || echo "  $want" ;;
			esac
		done)
	[ -z "$missing" ] || die "options requested by the fragments are not in the final .config:
$missing"
	echo "$sum" > "$out/config.sum"
fi

echo "build-kernel: building $flavour ($(kmake kernelrelease)) with $(nproc) jobs"
kmake -j"$(nproc)" bzImage
kmake kernelrelease > "$out/kernelrelease"
echo "build-kernel: $out/arch/x86/boot/bzImage ($(cat "$out/kernelrelease"))"
