#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build the async-fork-tools package the Debian way: copy its source
# (packaging/async-fork-tools/: async-fork-run.c, its man page, systemd
# drop-in examples, and debian/ for debhelper) into BUILD_DIR/tools-deb/,
# add a debian/changelog entry whose version names this repository's
# commit, and run dpkg-buildpackage -b there.  Seconds, no kernel needed.
#
# Usage: build-tools-deb.sh BUILD_DIR
# Result: BUILD_DIR/debs/async-fork-tools_VERSION_ARCH.deb (and its
# -dbgsym package), where VERSION is 0.C.D and C.D names this
# repository's commit (scripts/deb-version.sh); the build's log, .changes
# and .buildinfo stay in BUILD_DIR/tools-deb/.
set -euo pipefail

die() { echo "build-tools-deb: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: build-tools-deb.sh BUILD_DIR"
mkdir -p "$1"
build=$(cd "$1" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
pkg=async-fork-tools
pkgsrc=$top/packaging/$pkg
for t in dpkg-buildpackage dh make gcc; do
	command -v "$t" >/dev/null || die "$t not found (dpkg-dev, debhelper, build-essential): run scripts/setup.sh"
done

version=0.$("$top/scripts/deb-version.sh")
commit=$(git -C "$top" describe --always --dirty)
# Timestamps from the commit, so that one commit gives one package.
SOURCE_DATE_EPOCH=$(git -C "$top" log -1 --format=%ct)
export SOURCE_DATE_EPOCH
maintainer=$(sed -n 's/^Maintainer: //p' "$pkgsrc/debian/control")
# shellcheck source=/dev/null
dist=$(. /etc/os-release && echo "${VERSION_CODENAME:-unstable}")

work=$build/tools-deb
src=$work/$pkg-$version
rm -rf "$work"
mkdir -p "$work"
cp -r "$pkgsrc" "$src"
# A build left in the source folder (dpkg-buildpackage run there) stays there.
(cd "$src" && rm -rf async-fork-run async-fork-run.1 debian/.debhelper "debian/$pkg" \
	debian/debhelper-build-stamp debian/files debian/*.substvars debian/*.debhelper.log)
{
	printf '%s (%s) %s; urgency=medium\n\n' "$pkg" "$version" "$dist"
	printf '  * Built from commit %s of the Async-fork repository.\n\n' "$commit"
	printf ' -- %s  %s\n\n' "$maintainer" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
	cat "$pkgsrc/debian/changelog"
} > "$src/debian/changelog"

log=$work/build.log
if ! (cd "$src" && dpkg-buildpackage -b -us -uc) > "$log" 2>&1; then
	tail -n 25 "$log" >&2
	die "dpkg-buildpackage failed; the whole log: $log"
fi

arch=$(dpkg --print-architecture)
mkdir -p "$build/debs"
rm -f "$build/debs/${pkg}"_*.deb "$build/debs/${pkg}"-dbgsym_*.deb
deb=$build/debs/${pkg}_${version}_$arch.deb
[ -f "$work/${deb##*/}" ] || die "dpkg-buildpackage made no ${deb##*/} (log: $log)"
cp "$work/${deb##*/}" "$build/debs/"
dbgsym=$work/${pkg}-dbgsym_${version}_$arch.deb
[ ! -f "$dbgsym" ] || cp "$dbgsym" "$build/debs/"
echo "build-tools-deb: $deb"
