#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build installable Debian packages of the patched kernel from Debian's own
# configuration (package linux-config-6.12), with CONFIG_ASYNC_FORK=y and
# nothing else changed but what changes() below lists.
#
# Usage: build-deb.sh [--config-only] FLAVOUR BUILD_DIR
#        build-deb.sh --print-changes FLAVOUR
#
#   FLAVOUR        cloud-amd64 (what 'make deb' builds by default) or amd64;
#                  cloud-arm64 (make deb ARCH=arm64) or arm64, cross-built with
#                  Debian's aarch64-linux-gnu-gcc-12 from the configs of
#                  linux-config-6.12:arm64, which scripts/setup-arm64.sh
#                  fetches into BUILD_DIR/linux-config-arm64
#   BUILD_DIR      holds the prepared tree BUILD_DIR/linux (prepare-source.sh);
#                  the build goes to BUILD_DIR/deb-FLAVOUR (kept: a second run
#                  resumes or rebuilds only what changed), the packages to
#                  BUILD_DIR/debs/FLAVOUR/
#   --config-only  make and check BUILD_DIR/deb-FLAVOUR/.config, build nothing
#   --print-changes  print the change list (config lines) and exit
#
# Environment:
#   DEB_DBG=0      skip linux-image-*-dbg (vmlinux and module debug info);
#                  default 1, as Debian builds it
#   DEB_JOBS       parallel jobs (default: nproc)
#   DEB_CCACHE_DIR ccache for these builds (default $CCACHE_DIR-deb, i.e.
#                  ~/.cache/ccache-deb): Debian's config with debug info
#                  fills gigabytes and would evict the guest kernels' cache
#
# Result: BUILD_DIR/debs/FLAVOUR/linux-image-RELEASE_VERSION_ARCH.deb and
# linux-headers-RELEASE_..., plus linux-image-RELEASE-dbg_... unless DEB_DBG=0.
# RELEASE is 6.12.N-asyncfork-FLAVOUR; VERSION is 6.12.N-1+asyncfork.C.D, where
# C.D names this repository's commit (scripts/deb-version.sh).  kbuild's
# linux-libc-dev package is moved to debs/FLAVOUR/extra/: installing it would
# replace the distribution's C library headers.
#
# Module signing.  Debian signs its modules with a key that only Debian
# has; the /boot/config-* of its kernels names Debian's certificates in
# SYSTEM_TRUSTED_KEYS, but the config that linux-config-6.12 ships leaves
# out MODULE_SIG_ALL, MODULE_SIG_KEY and SYSTEM_TRUSTED_KEYS, so kbuild's
# defaults apply: the first build generates a private key and certificate
# for this build directory only (BUILD_DIR/deb-FLAVOUR/certs/signing_key.pem,
# never packaged), builds the certificate into the kernel's trusted keyring
# and signs every module with it at install time.  The modules then load
# without tainting the kernel, also under lockdown (Secure Boot) and
# module.sig_enforce=1.  The key stays in the build directory so that a
# rebuild keeps it; delete it once the packages are final, and no further
# module can be signed with it (a rebuild then makes a new one, which
# costs a relink, not a recompile).  The alternatives are worse: unsigned
# modules with CONFIG_MODULE_SIG=y taint the kernel at every load and are
# refused under lockdown; CONFIG_MODULE_SIG=n changes one more of Debian's
# options.  The kernel image itself is not signed for Secure Boot (see
# docs/install.md).
set -euo pipefail

die() { echo "build-deb: $*" >&2; exit 1; }
usage() { die "usage: build-deb.sh [--config-only] FLAVOUR BUILD_DIR | --print-changes FLAVOUR (FLAVOUR: cloud-amd64, amd64, cloud-arm64, arm64)"; }
flavours="cloud-amd64, amd64, cloud-arm64 or arm64"

# What the packaged config changes from Debian's, and nothing else: the
# check after olddefconfig and the one of the packaged config refuse any
# other difference.  One config line each ("# CONFIG_X is not set" for n).
changes() {
	cat <<-EOF
	# The point of the packages.
	CONFIG_ASYNC_FORK=y
	# Selected by x86 and arm64 in the patched tree: a new symbol, not in
	# Debian's config.
	CONFIG_ARCH_SUPPORTS_ASYNC_FORK=y
	# The debugfs switches that turn hooks off are for test kernels only.
	# CONFIG_ASYNC_FORK_DEBUG is not set
	# Release 6.12.N-asyncfork-$1: the tree's localversion-asyncfork file adds
	# "-asyncfork", this adds the flavour, as Debian's own releases end in it.
	CONFIG_LOCALVERSION="-$1"
	# Left out of the config linux-config-6.12 ships (Debian's own build
	# points them at Debian's certificates), so kbuild's defaults: an
	# ephemeral per-build key that signs every module (see the top).
	CONFIG_MODULE_SIG_ALL=y
	CONFIG_MODULE_SIG_KEY="certs/signing_key.pem"
	CONFIG_SYSTEM_TRUSTED_KEYS=""
	# Also left out of the shipped config; kbuild's default.
	CONFIG_BUILD_SALT=""
	EOF
}

config_only=0
case "${1:-}" in
--print-changes)
	[ $# -eq 2 ] || usage
	case "$2" in cloud-amd64|amd64|cloud-arm64|arm64) ;; *) die "unknown flavour '$2' (use $flavours)" ;; esac
	changes "$2"
	exit 0 ;;
--config-only)
	config_only=1; shift ;;
esac
[ $# -eq 2 ] || usage
flavour=$1
case "$flavour" in
cloud-amd64|amd64) debarch=amd64 ;;
cloud-arm64|arm64) debarch=arm64 ;;
*) die "unknown flavour '$flavour' (use $flavours)" ;;
esac
# make's ARCH= (exported) must agree with the flavour: kbuild reads it too.
case "$debarch:${ARCH:-}" in
amd64:|amd64:x86|amd64:x86_64|arm64:arm64|arm64:aarch64|arm64:) ;;
*) die "FLAVOUR=$flavour is not for ARCH=${ARCH:-}: use ARCH=arm64 with cloud-arm64 or arm64, none or x86 with cloud-amd64 or amd64" ;;
esac
[ -d "$2" ] || die "$2 does not exist: run 'make source' first"
build=$(cd "$2" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
src=$build/linux
out=$build/deb-$flavour
[ -f "$src/Makefile" ] || die "$src is not prepared: run 'make source'"
kver=$(make -s -C "$src" kernelversion)
if [ "$debarch" = amd64 ]; then
	debcfg=/usr/src/linux-config-6.12/config.amd64_none_$flavour.xz
	[ -r "$debcfg" ] || die "$debcfg not found: run scripts/setup.sh (installs linux-config-6.12)"
	cfgver=$(dpkg-query -W -f='${Version}' linux-config-6.12 2>/dev/null) ||
		die "linux-config-6.12 is not installed: run scripts/setup.sh"
	cross=()
else
	# Not installed beside the amd64 package (same paths): unpacked.
	cfgdir=$build/linux-config-arm64
	debcfg=$cfgdir/usr/src/linux-config-6.12/config.arm64_none_$flavour.xz
	[ -r "$debcfg" ] || die "$debcfg not found: run 'make arm64-root' (fetches linux-config-6.12:arm64)"
	cfgver=$(cat "$cfgdir/version")
	# The compat vDSO (COMPAT_VDSO=y in Debian's configs) needs the 32-bit
	# compiler, as in Debian's build.
	command -v arm-linux-gnueabihf-gcc >/dev/null ||
		die "arm-linux-gnueabihf-gcc not found: run 'make arm64-root' (installs gcc-arm-linux-gnueabihf)"
	cross=(ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- CROSS_COMPILE_COMPAT=arm-linux-gnueabihf-)
fi
# Debian's config must come from the same point release as the source.
[ "${cfgver%%-*}" = "$kver" ] ||
	die "Debian's config is from $cfgver but the prepared source is $kver: install the same version of linux-config-6.12 and linux-source-6.12 (apt-get install linux-config-6.12=V linux-source-6.12=V), then 'make source'"

mkdir -p "$out"
debian_config=$out/debian.config	# Debian's, as it is, for reference
xzcat "$debcfg" > "$debian_config"

# Build with the compiler Debian built this config with, so that the
# options Kconfig derives from the compiler come out the same.
cc_text=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\(.*\)"$/\1/p' "$debian_config")
compiler=${cc_text%% *}
[ -n "$compiler" ] || die "no CONFIG_CC_VERSION_TEXT in $debcfg"
command -v "$compiler" >/dev/null ||
	die "Debian built this config with $compiler ($cc_text): install it (the gcc-N package of that name)"
cc=$compiler
command -v ccache >/dev/null && cc="ccache $compiler"
# HOSTCC: the same gcc for the build machine (cross: its native gcc-N).
hostcc=$compiler
[ "$debarch" = amd64 ] || hostcc=gcc-${compiler##*-}
command -v "$hostcc" >/dev/null || die "$hostcc not found: install it"
command -v ccache >/dev/null && hostcc="ccache $hostcc"
kvars=("${cross[@]}" CC="$cc" HOSTCC="$hostcc")
# Debian's config was made without a Rust toolchain: keep one on this
# machine from changing the RUSTC_* symbols.
if grep -qx 'CONFIG_RUSTC_VERSION=0' "$debian_config"; then
	kvars+=(RUSTC=false BINDGEN=false)
fi
kmake() { make -C "$src" O="$out" "${kvars[@]}" "$@"; }

# The config: Debian's, the changes, olddefconfig, then the check.  It is
# made beside the live .config and replaces it only when different, so a
# second run does not make kbuild reconsider anything.
changes "$flavour" > "$out/asyncfork-changes.config"
new=.config.deb-new
cp "$debian_config" "$out/$new"
set_args=()
while IFS= read -r line; do
	case "$line" in
	"# CONFIG_"*" is not set")
		sym=${line#\# CONFIG_}; set_args+=(--disable "${sym%% *}") ;;
	'#'*|'') ;;
	CONFIG_*=\"*\")
		sym=${line%%=*}; val=${line#*=\"}; set_args+=(--set-str "${sym#CONFIG_}" "${val%\"}") ;;
	CONFIG_*=y) sym=${line%%=*}; set_args+=(--enable "${sym#CONFIG_}") ;;
	CONFIG_*=m) sym=${line%%=*}; set_args+=(--module "${sym#CONFIG_}") ;;
	CONFIG_*=*) sym=${line%%=*}; set_args+=(--set-val "${sym#CONFIG_}" "${line#*=}") ;;
	*) die "bad line in changes(): $line" ;;
	esac
done < "$out/asyncfork-changes.config"
"$src/scripts/config" --file "$out/$new" "${set_args[@]}"
echo "build-deb: configuring $flavour from $(basename "$debcfg") ($cfgver), compiler $compiler"
kmake -s KCONFIG_CONFIG="$new" olddefconfig >/dev/null
rm -f "$out/$new.old"
check_config() {	# FILE: is it Debian's config plus changes()?
	PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH} python3 -m asyncfork deb-config \
		check --debian "$debcfg" --config "$1" \
		--changes "$out/asyncfork-changes.config" --toolchain CONFIG_CC_VERSION_TEXT ||
		die "$1 is not Debian's $flavour config plus the changes listed in build-deb.sh (see above): refusing to build it"
}
check_config "$out/$new"
if cmp -s "$out/$new" "$out/.config"; then
	rm -f "$out/$new"
else
	mv "$out/$new" "$out/.config"
fi
# Both amd64 flavours run as Xen PV guests, where Async-fork stays off.
[ "$debarch" = arm64 ] || grep -qx 'CONFIG_XEN_PV=y' "$out/.config" ||
	die "CONFIG_XEN_PV=y is not in $out/.config"
[ "$config_only" = 0 ] || { echo "build-deb: $out/.config"; exit 0; }

# The build.
for t in dpkg-buildpackage dh_testdir dpkg-checkbuilddeps; do
	command -v "$t" >/dev/null || die "$t not found: run scripts/setup.sh (installs dpkg-dev, debhelper)"
done
# The Build-Depends of kbuild's debian/control (scripts/package/mkdebian),
# which dpkg-buildpackage checks only once the build has started, and what
# this build needs besides: pahole for BTF, openssl for the signing key,
# xz for Debian's module compression.
builddeps="debhelper-compat (= 12), bc, bison, cpio, flex, kmod, libelf-dev, libssl-dev,
	rsync, pahole, python3, openssl, xz-utils"
if [ "$debarch" = amd64 ]; then
	builddeps+=", gcc-x86-64-linux-gnu"
else
	# Cross: the headers package's host programs are built for arm64.
	builddeps+=", gcc-aarch64-linux-gnu, libssl-dev:arm64"
fi
control=$(mktemp)
printf 'Source: linux-upstream\n\nPackage: linux-image\nArchitecture: any\n' > "$control"
if ! deps=$(dpkg-checkbuilddeps -B -d "$builddeps" "$control" 2>&1); then
	rm -f "$control"
	die "${deps#dpkg-checkbuilddeps: error: }: run scripts/setup.sh$([ "$debarch" = arm64 ] && echo " and make arm64-root")"
fi
rm -f "$control"
pkgver="$kver-1+asyncfork.$("$top/scripts/deb-version.sh")"
jobs=${DEB_JOBS:-$(nproc)}
extra=()
[ "${DEB_DBG:-1}" = 1 ] || extra+=(DPKG_FLAGS=-Ppkg.linux-upstream.nokerneldbg)
need_gb=30
[ "$flavour" = amd64 ] || [ "$flavour" = arm64 ] && need_gb=80
free_gb=$(df -P --block-size=1G "$build" | awk 'NR == 2 { print $4 }')
[ "$free_gb" -ge "$need_gb" ] ||
	echo "build-deb: warning: $free_gb GB free in $build; a $flavour build with debug info may need about $need_gb GB (a rough figure)" >&2

# The ccache settings of build-kernel.sh, in a cache of its own.
export CCACHE_DIR=${DEB_CCACHE_DIR:-${CCACHE_DIR:-$HOME/.cache/ccache}-deb}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-25G}
export CCACHE_BASEDIR=$build CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=time_macros
export KBUILD_BUILD_USER=async-fork KBUILD_BUILD_HOST=deb
# The commit's date, not the build's: a rerun with nothing changed relinks nothing.
KBUILD_BUILD_TIMESTAMP=$(git -C "$top" log -1 --format=%cD)
export KBUILD_BUILD_TIMESTAMP
export DEBFULLNAME="Async-fork developers" DEBEMAIL=async-fork@localhost
# shellcheck source=/dev/null
KDEB_CHANGELOG_DIST=$(. /etc/os-release && echo "${VERSION_CODENAME:-unstable}")
export KDEB_CHANGELOG_DIST
# kbuild's debian/rules logs every command line unless told 'terse'.
export DEB_BUILD_OPTIONS="terse${DEB_BUILD_OPTIONS:+ $DEB_BUILD_OPTIONS}"

echo "build-deb: building $flavour packages $pkgver with $jobs jobs (log: $out/bindeb-pkg.log)"
start=$(date +%s)
# The whole output into the log, a progress line here (asyncfork.buildlog,
# as scripts/build-kernel.sh); the errors if it fails.
python=$top/.venv/bin/python
[ -x "$python" ] || python=python3
PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH} "$python" -m asyncfork.buildlog \
	--log "$out/bindeb-pkg.log" --stats "$out/build-stats.json" --label "build-deb: $flavour" -- \
	make -C "$src" O="$out" "${kvars[@]}" -j"$jobs" KDEB_PKGVERSION="$pkgver" "${extra[@]}" bindeb-pkg
release=$(cat "$out/include/config/kernel.release")

# dpkg-buildpackage leaves its output beside the build directory.
dest=$build/debs/$flavour
mkdir -p "$dest/extra"
rm -f "$dest"/*.deb "$dest"/*.buildinfo "$dest"/*.changes "$dest"/extra/*.deb
shopt -s nullglob
produced=("$build"/*_"$pkgver"_*.deb "$build"/linux-upstream_"$pkgver"_*.buildinfo "$build"/linux-upstream_"$pkgver"_*.changes)
shopt -u nullglob
[ ${#produced[@]} -gt 0 ] || die "bindeb-pkg left no package for $pkgver in $build"
mv "${produced[@]}" "$dest"/
mv "$dest"/linux-libc-dev_*.deb "$dest"/extra/ 2>/dev/null || true

# What was packaged is what was checked: config, image, modules, signatures, BTF.
image=$dest/linux-image-${release}_${pkgver}_${debarch}.deb
[ -f "$image" ] || die "no $image"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
listing=$(dpkg-deb -c "$image")
grep -q " \./boot/vmlinuz-$release\$" <<<"$listing" || die "no /boot/vmlinuz-$release in $image"
nmod=$(grep -c '\.ko\.xz$' <<<"$listing") || die "no modules (*.ko.xz) in $image"
mod=$(grep -m1 -o '\./lib/modules/[^ ]*/kernel/fs/[^ ]*\.ko\.xz$' <<<"$listing") ||
	die "no file system module in $image"
dpkg-deb --fsys-tarfile "$image" | tar -x -C "$scratch" "./boot/config-$release" "$mod"
check_config "$scratch/boot/config-$release"
xz -dc "$scratch/$mod" | tail -c 28 | grep -qa 'Module signature appended' ||
	die "module ${mod#./} in $image is not signed"
sections=$(readelf -S "$out/vmlinux")
grep -q ' \.BTF ' <<<"$sections" || die "$out/vmlinux has no .BTF section"
grep -qx 'CONFIG_DEBUG_INFO_BTF=y' "$scratch/boot/config-$release" ||
	die "the packaged config has no CONFIG_DEBUG_INFO_BTF=y (/sys/kernel/btf/vmlinux)"

mins=$(( ($(date +%s) - start + 59) / 60 ))
echo "build-deb: $release: $nmod modules (${mod##*/} checked: signed), BTF; $mins min; packages in $dest:"
ls -l "$dest"/*.deb
