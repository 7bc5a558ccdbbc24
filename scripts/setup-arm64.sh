#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# arm64 (issue 20): the cross toolchain, QEMU for arm64 and an arm64 root
# filesystem for virtme-ng, in BUILD/arm64-root.  Idempotent: a second run
# only checks.  Needs root (or sudo) for apt and binfmt_misc.
#
# Usage: setup-arm64.sh [--check] [BUILD]
#   BUILD    the build folder (default: $BUILD, else build)
#   --check  change nothing; say what is missing (exit 1 if anything is)
#
# On the host it changes: apt packages (gcc-aarch64-linux-gnu,
# qemu-system-arm, mmdebstrap, arch-test (which mmdebstrap needs for
# a foreign architecture), qemu-user-static, binfmt-support); mounts
# binfmt_misc if it is not mounted and enables qemu-user-static's
# qemu-aarch64 handler (update-binfmts --enable qemu-aarch64), so that
# mmdebstrap can run the root's arm64 maintainer scripts.  The root is
# made with mmdebstrap --arch arm64 from deb.debian.org (several minutes,
# about 300 MB); ARM64_MIRROR replaces the mirror, ARM64_EXTRA_PACKAGES
# (space-separated) adds packages to the root.
set -euo pipefail

check=0
build=
for arg in "$@"; do
	case "$arg" in
	--check) check=1 ;;
	-h|--help) sed -n '3,18s/^# \{0,1\}//p' "$0"; exit 0 ;;
	-*) echo "setup-arm64: unknown option '$arg' (setup-arm64.sh [--check] [BUILD])" >&2; exit 2 ;;
	*) [ -z "$build" ] || { echo "setup-arm64: one BUILD folder only, got '$build' and '$arg'" >&2; exit 2; }
	   build=$arg ;;
	esac
done

step() { printf '\n==> %s\n' "$*"; }
die() { echo "setup-arm64: $*" >&2; exit 1; }

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${build:-${BUILD:-build}}
root=$build/arm64-root

host_packages=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu
	       qemu-system-arm mmdebstrap arch-test qemu-user-static binfmt-support
	       liburing-dev:arm64 libhiredis-dev:arm64 libnuma-dev:arm64
	       gcc-arm-linux-gnueabihf libssl-dev:arm64)
# The guest: virtme-ng's bash init for a foreign architecture (virtme-init:
# bash, util-linux, mount, udev, iproute2, busybox for udhcpc; a static
# busybox, because a kernel without 9p (Debian's cloud-arm64, make test-deb
# ARCH=arm64) mounts its root over virtio-fs from an initramfs that
# virtme-ng makes from the root's busybox), the guest
# tests (tests/guest/*.sh, python/asyncfork/suite.py: sysctl, free,
# stress-ng, losetup, mkswap, timeout), Redis and Python for the digest
# check and the demo, and the libraries the mm selftests and the bench
# programs link against.
root_packages=(bash coreutils util-linux mount procps kmod udev iproute2 busybox-static
	       python3 python3-redis redis-server redis-tools stress-ng
	       libnuma1 libcap2 liburing2 libhiredis0.14)
read -r -a extra <<< "${ARM64_EXTRA_PACKAGES:-}"
for p in "${extra[@]}"; do
	[[ "$p" =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || die "ARM64_EXTRA_PACKAGES: '$p' is not a Debian package name"
done
root_packages+=("${extra[@]}")
suite=bookworm
mirror=${ARM64_MIRROR:-http://deb.debian.org/debian}
security=http://deb.debian.org/debian-security
[ -n "${ARM64_MIRROR:-}" ] && security=


sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
[ -z "$sudo" ] || command -v sudo >/dev/null || die "not root and no sudo: run as root"

# liburing-dev:arm64 (the upstream cow and gup_longterm selftests link
# liburing when its header is found, as the host's is), libnuma-dev:arm64
# (the migration selftest) and libhiredis-dev:arm64 (the load generator)
# need arm64 added to dpkg's architectures.  gcc-arm-linux-gnueabihf builds
# the 32-bit compat vDSO that Debian's arm64 configs have, and libssl-dev:arm64
# the headers package's programs (make deb ARCH=arm64).
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	[ "$check" = 0 ] || die "dpkg has no arm64 architecture (dpkg --add-architecture arm64)"
	step "dpkg: adding the arm64 architecture (for liburing-dev:arm64)"
	$sudo dpkg --add-architecture arm64
fi
missing=()
for p in "${host_packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	[ "$check" = 0 ] || die "missing host packages: ${missing[*]}"
	step "apt: installing ${missing[*]}"
	$sudo apt-get update -q
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" ||
		die "apt-get install ${missing[*]} failed (is this Debian 12 with its main repository?)"
else
	step "apt: all ${#host_packages[@]} host packages present"
fi

# Debian's arm64 kernel configs (make deb ARCH=arm64): linux-config-6.12:arm64
# of the version of the amd64 one, unpacked into BUILD/linux-config-arm64
# (installing it would clash with the amd64 package's files).
cfgdir=$build/linux-config-arm64
cfgver=$(dpkg-query -W -f='${Version}' linux-config-6.12 2>/dev/null || true)
if [ -z "$cfgver" ]; then
	echo "setup-arm64: linux-config-6.12 is not installed (scripts/setup.sh): no arm64 configs fetched" >&2
elif [ "$(cat "$cfgdir/version" 2>/dev/null)" = "$cfgver" ]; then
	step "linux-config-6.12:arm64 $cfgver in $cfgdir"
elif [ "$check" = 1 ]; then
	echo "setup-arm64: no linux-config-6.12:arm64 $cfgver in $cfgdir (only make deb ARCH=arm64 needs it)" >&2
else
	step "apt: fetching linux-config-6.12:arm64=$cfgver into $cfgdir"
	dl=$(mktemp -d)
	chmod 755 "$dl"  # apt downloads as _apt
	(cd "$dl" && apt-get download -q "linux-config-6.12:arm64=$cfgver") >/dev/null ||
		{ rm -rf "$dl"; die "apt-get download linux-config-6.12:arm64=$cfgver failed (apt-get update after adding arm64?)"; }
	rm -rf "$cfgdir"
	mkdir -p "$cfgdir"
	dpkg-deb -x "$dl"/linux-config-6.12_*_arm64.deb "$cfgdir"
	rm -rf "$dl"
	echo "$cfgver" > "$cfgdir/version"
fi

# mmdebstrap runs the root's maintainer scripts under qemu-aarch64, found
# through binfmt_misc (the F flag of qemu-user-static's handler keeps it
# usable inside the chroot).
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e $binfmt/register ]; then
	[ "$check" = 0 ] || die "binfmt_misc is not mounted on $binfmt"
	step "binfmt: mounting binfmt_misc on $binfmt"
	$sudo mount -t binfmt_misc binfmt_misc $binfmt ||
		die "cannot mount binfmt_misc (a container without the right?); mmdebstrap needs it for --arch arm64"
fi
if ! grep -qx enabled $binfmt/qemu-aarch64 2>/dev/null; then
	[ "$check" = 0 ] || die "the qemu-aarch64 binfmt handler is not enabled"
	step "binfmt: enabling qemu-aarch64 (update-binfmts --enable qemu-aarch64)"
	$sudo update-binfmts --enable qemu-aarch64 ||
		die "update-binfmts --enable qemu-aarch64 failed"
fi

# The root is remade only if its package list, suite or mirror changed.
want="suite=$suite mirror=$mirror packages=${root_packages[*]}"
stamp=$root/etc/asyncfork-arm64-root
# What the root needs besides its packages, made here because it is
# read-only to the guest: the mount points of the checkout and the build
# folder (mounted at their host paths), and an /etc/hosts, which no
# package makes: without it "localhost" goes to DNS, and redis-py's
# default client never reaches a server on 127.0.0.1.
root_files() {
	$sudo mkdir -p "$1$top" "$1$(cd "$build" && pwd)"
	[ -e "$1/etc/hosts" ] ||
		printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' |
		$sudo tee "$1/etc/hosts" >/dev/null
}
if [ -r "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	if [ "$check" = 1 ]; then
		[ -e "$root/etc/hosts" ] || die "$root has no /etc/hosts: run scripts/setup-arm64.sh"
	else
		root_files "$root"
	fi
	step "arm64 root: $root up to date ($(du -sh "$root" 2>/dev/null | cut -f1))"
	exit 0
fi
[ "$check" = 0 ] || die "$root is missing or was made from another package list: run scripts/setup-arm64.sh"
mkdir -p "$build"
new=$root.new
log=$build/arm64-root.log
$sudo rm -rf "$new"
includes=$(IFS=,; echo "${root_packages[*]}")
step "arm64 root: mmdebstrap --arch arm64 $suite into $new (log: $log)"
sources=("deb $mirror $suite main")
[ -z "$security" ] || sources+=("deb $security $suite-security main")
if ! $sudo mmdebstrap --arch=arm64 --variant=apt --include="$includes" \
	"$suite" "$new" "${sources[@]}" >"$log" 2>&1; then
	tail -n 15 "$log" >&2
	$sudo rm -rf "$new"
	die "mmdebstrap failed (last lines above, all of it in $log): a package that $suite/arm64 does not have ('Unable to locate package'), or no network?"
fi
# virtme-init ends the guest with "poweroff -f", which Debian's root has
# only with systemd-sysv: busybox's does it.
[ -e "$new/sbin/poweroff" ] || $sudo ln -s /bin/busybox "$new/sbin/poweroff"
root_files "$new"
echo "$want" | $sudo tee "$new/etc/asyncfork-arm64-root" >/dev/null
for bin in python3 redis-server stress-ng bash mount; do
	[ -x "$new/usr/bin/$bin" ] || [ -x "$new/usr/sbin/$bin" ] || [ -x "$new/bin/$bin" ] ||
		die "$new has no $bin after mmdebstrap"
done
$sudo rm -rf "$root"
$sudo mv "$new" "$root"
step "arm64 root: $root ready ($(du -sh "$root" | cut -f1); $(chroot "$root" /usr/bin/python3 --version 2>&1), $(chroot "$root" /usr/bin/redis-server --version | cut -d' ' -f1-3))"
