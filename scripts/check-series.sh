#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Check every prefix of the patch series: the tree with patches 1..k, for
# each k, must build and boot
#
#   - with CONFIG_ASYNC_FORK=y (the lean kernel), once an architecture
#     selects ARCH_SUPPORTS_ASYNC_FORK (before that the option cannot be
#     set: the tree builds with =n only);
#   - with CONFIG_ASYNC_FORK=n (the lean kernel with kernel/configs/off.config);
#
# and the boot must leave no kernel report (asyncfork vm fails on any).
# vm.async_fork must exist exactly when the kernel has Async-fork and the
# prefix has the patch that adds the knobs, and read 1 then.  The mm
# selftests must build after each patch that touches them.  A patch that
# changes only tools/ or Documentation/ leaves the kernel as the previous
# prefix had it: its kernel builds are skipped.
#
# Uses its own build folder (BUILD_DIR/series-check), so build/linux and
# the kernels there are left as they are.  Resumable: a prefix and profile
# that passed with the same patches, configs and scripts is not redone.
# A cold run builds about 25 kernels: a few hours on 2 cores (ccache helps).
#
# ARCH=arm64: the same for the cross-built arm64 kernels (CONFIG_ASYNC_FORK=y
# from the arm64 patch on), booted under qemu-system-aarch64 on
# scripts/setup-arm64.sh's root; kernels in series-check/arm64-PROFILE.
#
# Usage: [ARCH=arm64] check-series.sh TARBALL BUILD_DIR
set -euo pipefail

die() { echo "check-series: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: check-series.sh TARBALL BUILD_DIR"
tarball=$1
build=$(mkdir -p "$2" && cd "$2" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
work=$build/series-check
python=$top/.venv/bin/python
[ -x "$python" ] || python=python3

case "${ARCH:-x86}" in
x86|x86_64) arch=x86 kdir='' stamp_arch='' boot_timeout=600 ;;
arm64|aarch64) arch=arm64 kdir=arm64- stamp_arch=arm64- boot_timeout=1800 ;;
*) die "unknown ARCH '$ARCH' (x86 or arm64)" ;;
esac
export ARCH=$arch

mapfile -t patches < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$top/kernel/patches/series" |
		       awk '{ print $1 }')
mkdir -p "$work/patches" "$work/done"
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

# What a passed check depends on, besides the prefix itself: what goes
# into the build (the arm64 fragment only into arm64's).  Not this script:
# a change to its checks applies from the next prefix it checks (rm -r
# BUILD_DIR/series-check/done to redo all).
skip_configs=()
[ "$arch" = arm64 ] || skip_configs=(! -name 'arm64*')
tools_sum=$(find "$top/kernel/configs" \( -name '*.config' -o -name profiles \) "${skip_configs[@]}" | sort |
	    xargs cat "$top/scripts/build-kernel.sh" "$top/scripts/profiles.sh" "$top/scripts/prepare-source.sh" |
	    sha256sum | cut -c1-16)

# Run in the guest (single quotes: expanded there, not here).
# shellcheck disable=SC2016
guest_cmd='echo "vm.async_fork=$(cat /proc/sys/vm/async_fork 2>/dev/null || echo absent)"'

# boot PROFILE K: boot the prefix's kernel and check vm.async_fork.
boot() {
	local profile=$1 k=$2 want out
	want=absent
	# grep reads the files itself: "cat | grep -q" fails under pipefail
	# whenever grep stops at a match before cat has written everything.
	if [ "$profile" = lean ] &&
	   (cd "$top/kernel/patches" &&
	    grep -q '^+[[:space:]]*\.procname[[:space:]]*= "async_fork",' -- "${patches[@]:0:k}"); then
		want=1
	fi
	out=$(PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH} "$python" -m asyncfork vm \
		--kernel "$work/$kdir$profile" --memory 1G \
		--timeout "$boot_timeout" \
		--log "$work/boot-$k-$kdir$profile.log" -- \
		"$guest_cmd") ||
		die "the $arch $profile kernel with patches 1..$k does not boot cleanly: $work/boot-$k-$kdir$profile.log"
	out=$(printf '%s\n' "$out" | sed -n 's/^.*vm\.async_fork=\([a-z0-9]*\).*$/\1/p' | tail -n1)
	[ "$out" = "$want" ] ||
		die "the $profile kernel with patches 1..$k: vm.async_fork is '$out', expected '$want'"
}

for k in $(seq 1 ${#patches[@]}); do
	p=${patches[$((k - 1))]}
	prefix_sum=$(printf '%s\n' "${patches[@]:0:k}" |
		     (cd "$top/kernel/patches" && xargs cat) | sha256sum | cut -c1-16)
	echo "check-series: [$k/${#patches[@]}] $p"
	rm -rf "$work/patches"
	mkdir -p "$work/patches"
	: > "$work/patches/series"
	for q in "${patches[@]:0:k}"; do
		mkdir -p "$work/patches/$(dirname "$q")"
		cp "$top/kernel/patches/$q" "$work/patches/$q"
		echo "$q" >> "$work/patches/series"
	done
	profiles=()
	if touches_kernel "$p"; then
		profiles=(off)
		ASYNC_FORK_PATCHES=$work/patches "$top/scripts/prepare-source.sh" "$tarball" "$work" >/dev/null
		if grep -q 'select ARCH_SUPPORTS_ASYNC_FORK' "$work/linux/arch/$arch/Kconfig"; then
			profiles=(lean off)
		else
			echo "check-series:   $arch does not select ARCH_SUPPORTS_ASYNC_FORK yet: CONFIG_ASYNC_FORK=n only"
		fi
	else
		echo "check-series:   tools/ and Documentation/ only: kernel build skipped"
	fi
	for f in "${profiles[@]}"; do
		stamp=$work/done/$k-$stamp_arch$f-$prefix_sum-$tools_sum
		if [ -e "$stamp" ]; then
			echo "check-series:   $arch $f: passed before"
			continue
		fi
		# Kconfig may differ between prefixes: configure afresh.
		rm -f "$work/$kdir$f/config.sum"
		"$top/scripts/build-kernel.sh" "$f" "$work" >"$work/build-$k-$kdir$f.log" 2>&1 ||
			die "the $arch $f kernel does not build with patches 1..$k (last: $p): $work/build-$k-$kdir$f.log"
		boot "$f" "$k"
		touch "$stamp"
		echo "check-series:   $arch $f: builds and boots"
	done
	if grep -q '^+++ b/tools/testing/selftests/mm/' "$top/kernel/patches/$p"; then
		stamp=$work/done/$k-${stamp_arch}selftests-$prefix_sum-$tools_sum
		if [ ! -e "$stamp" ]; then
			ASYNC_FORK_PATCHES=$work/patches "$top/scripts/prepare-source.sh" "$tarball" "$work" >/dev/null
			"$top/scripts/build-upstream-selftests.sh" "$work" >"$work/selftests-$k$kdir.log" 2>&1 ||
				die "$arch mm selftests do not build with patches 1..$k (last: $p): $work/selftests-$k$kdir.log"
			touch "$stamp"
		fi
		echo "check-series:   mm selftests build"
	fi
done
echo "check-series: every prefix of the series builds and boots on $arch, with CONFIG_ASYNC_FORK=y where it can be set and =n"
