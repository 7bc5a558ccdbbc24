#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Configure and build one guest kernel profile out of tree: make tinyconfig,
# then the fragments kernel/configs/profiles lists for the profile (lean,
# debug, off, kasan, kcsan, ...), merged in order.
#
# Usage: build-kernel.sh [--config-only] PROFILE BUILD_DIR
#        (BUILD_DIR/linux must be prepared)
# Result: BUILD_DIR/PROFILE/arch/x86/boot/bzImage and BUILD_DIR/PROFILE/kernelrelease;
# the build's whole output in BUILD_DIR/PROFILE/build.log, its duration and
# step count in build-stats.json (the next build's estimate).  With
# --config-only, only BUILD_DIR/PROFILE/.config (checked, nothing compiled).
#
# ARCH=arm64: cross-compiled with aarch64-linux-gnu-gcc
# (scripts/setup-arm64.sh installs it), with kernel/configs/arm64.config
# merged last, into BUILD_DIR/arm64-PROFILE (arch/arm64/boot/Image).
# KSRC=/path/to/tree replaces BUILD_DIR/linux; ASYNC_FORK_BASE_CONFIG, a
# fragment merged after the profile's (another kernel base's differences).
set -euo pipefail

die() { echo "build-kernel: $*" >&2; exit 1; }
top=$(cd "$(dirname "$0")/.." && pwd)

config_only=
if [ "${1:-}" = --config-only ]; then
	config_only=1
	shift
fi
[ $# -eq 2 ] || die "usage: build-kernel.sh [--config-only] PROFILE BUILD_DIR (PROFILE: $("$top/scripts/profiles.sh" names))"
profile=$1
build=$(cd "$2" && pwd)
src=${KSRC:-$build/linux}
out=$build/$profile
configs=$top/kernel/configs
list=$("$top/scripts/profiles.sh" fragments "$profile") ||
	die "unknown kernel profile '$profile' (kernel/configs/profiles: $("$top/scripts/profiles.sh" names))"
mapfile -t fragments <<< "$list"
# Another base's differences (make BASE=7.3 exports it: kernel/ports/7.3/base.config).
[ -z "${ASYNC_FORK_BASE_CONFIG:-}" ] || fragments+=("$ASYNC_FORK_BASE_CONFIG")
[ -f "$src/Makefile" ] || die "$src is not prepared: run 'make source'"

cross=() image=bzImage image_path=arch/x86/boot/bzImage cc=gcc
case "${ARCH:-x86}" in
x86|x86_64) ;;
arm64|aarch64)
	command -v aarch64-linux-gnu-gcc >/dev/null ||
		die "ARCH=arm64: aarch64-linux-gnu-gcc not found: run scripts/setup-arm64.sh"
	# The off profile builds without it (make check-series ARCH=arm64).
	[ "$profile" = off ] || grep -q 'select ARCH_SUPPORTS_ASYNC_FORK' "$src/arch/arm64/Kconfig" ||
		die "ARCH=arm64: $src has no arm64 Async-fork patch (kernel/patches/async-fork/0016): run make source"
	fragments+=("$configs/arm64.config")
	out=$build/arm64-$profile
	cross=(ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-)
	image=Image image_path=arch/arm64/boot/Image cc=aarch64-linux-gnu-gcc ;;
*) die "unknown ARCH '$ARCH' (x86 or arm64)" ;;
esac
command -v ccache >/dev/null && cc="ccache $cc"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Identical inputs give identical objects whatever the build directory.
export CCACHE_BASEDIR=$build CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=time_macros
export KBUILD_BUILD_USER=async-fork KBUILD_BUILD_HOST=guest
kmake() { make -s -C "$src" O="$out" "${cross[@]}" CC="$cc" "$@"; }

mkdir -p "$out"
sum=$(cat "${fragments[@]}" | sha256sum)
if [ ! -f "$out/.config" ] || [ "$(cat "$out/config.sum" 2>/dev/null)" != "$sum" ]; then
	echo "build-kernel: configuring $profile"
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
if [ -n "$config_only" ]; then
	kmake syncconfig  # include/config/auto.conf, for the release string
	echo "build-kernel: $out/.config ($(kmake kernelrelease))"
	exit 0
fi

echo "build-kernel: building $profile ($(kmake kernelrelease)) with $(nproc) jobs"
# Quiet kbuild (V=0) into the log, a progress line here (asyncfork.buildlog):
# steps done of the last build's, elapsed, an estimate; the errors if it fails.
python=$top/.venv/bin/python
[ -x "$python" ] || python=python3
PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH} "$python" -m asyncfork.buildlog \
	--log "$out/build.log" --stats "$out/build-stats.json" --label "build-kernel: $profile" -- \
	make -C "$src" O="$out" "${cross[@]}" CC="$cc" V=0 -j"$(nproc)" $image
kmake kernelrelease > "$out/kernelrelease"
echo "build-kernel: $out/$image_path ($(cat "$out/kernelrelease"))"
