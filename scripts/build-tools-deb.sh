#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Build the async-fork-tools package with plain dpkg-deb from a staging
# folder: /usr/bin/async-fork-run (packaging/async-fork-tools/async-fork-run.c), its man page,
# and systemd drop-in examples for redis-server and valkey-server
# (packaging/async-fork-tools/).  Seconds, no kernel needed.
#
# Usage: build-tools-deb.sh BUILD_DIR
# Result: BUILD_DIR/debs/async-fork-tools_VERSION_ARCH.deb, where VERSION is
# 0.C.D and C.D names this repository's commit (scripts/deb-version.sh).
set -euo pipefail

die() { echo "build-tools-deb: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: build-tools-deb.sh BUILD_DIR"
mkdir -p "$1"
build=$(cd "$1" && pwd)
top=$(cd "$(dirname "$0")/.." && pwd)
pkgsrc=$top/packaging/async-fork-tools
pkg=async-fork-tools
for t in dpkg-deb dpkg-buildflags dpkg-shlibdeps gcc gzip; do
	command -v "$t" >/dev/null || die "$t not found: run scripts/setup.sh"
done

version=0.$("$top/scripts/deb-version.sh")
arch=$(dpkg --print-architecture)
commit=$(git -C "$top" describe --always --dirty)
# Timestamps from the commit, so that one commit gives one package.
SOURCE_DATE_EPOCH=$(git -C "$top" log -1 --format=%ct)
export SOURCE_DATE_EPOCH
date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
maintainer="Async-fork developers <async-fork@localhost>"

work=$build/tools-deb
stage=$work/stage
doc=$stage/usr/share/doc/$pkg
rm -rf "$work"
umask 022
mkdir -p "$stage/DEBIAN" "$stage/usr/bin" "$stage/usr/share/man/man1" "$doc"

# The program, with Debian's hardening flags, stripped as dh_strip would.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
read -ra cppflags <<<"$(dpkg-buildflags --get CPPFLAGS)"
read -ra cflags <<<"$(dpkg-buildflags --get CFLAGS)"
read -ra ldflags <<<"$(dpkg-buildflags --get LDFLAGS)"
gcc "${cppflags[@]}" "${cflags[@]}" -Wall -Wextra -Werror \
	-DAFR_VERSION="\"$version\"" -o "$stage/usr/bin/async-fork-run" \
	"$pkgsrc/async-fork-run.c" "${ldflags[@]}"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
	"$stage/usr/bin/async-fork-run"

sed -e "s/@VERSION@/$version/g" -e "s/@DATE@/$date/g" "$pkgsrc/async-fork-run.1" |
	gzip -9n > "$stage/usr/share/man/man1/async-fork-run.1.gz"
cp "$pkgsrc/copyright" "$doc/copyright"
cp -r "$pkgsrc/examples" "$doc/examples"
# shellcheck source=/dev/null
dist=$(. /etc/os-release && echo "${VERSION_CODENAME:-unstable}")
printf '%s (%s) %s; urgency=medium\n\n  * Built from commit %s of the Async-fork repository.\n\n -- %s  %s\n' \
	"$pkg" "$version" "$dist" "$commit" "$maintainer" \
	"$(date -u -R -d "@$SOURCE_DATE_EPOCH")" | gzip -9n > "$doc/changelog.gz"

# Depends: what the binary links against, as dpkg-shlibdeps says.
mkdir -p "$work/shlibs/debian"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$pkg" "$pkg" > "$work/shlibs/debian/control"
depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O -e "$stage/usr/bin/async-fork-run" 2>/dev/null |
	sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies for async-fork-run"

find "$stage" -type d -exec chmod 0755 {} +
find "$stage" -type f -exec chmod 0644 {} +
chmod 0755 "$stage/usr/bin/async-fork-run"
(cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/md5sums"
cat > "$stage/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends
Section: admin
Priority: optional
Description: run programs with Async-fork (fork without the page-table stall)
 async-fork-run asks the kernel for Async-fork and executes an unmodified
 program, such as redis-server or valkey-server: their snapshot forks then
 return without copying the page tables, which the child copies instead.
 Needs a kernel built with CONFIG_ASYNC_FORK=y (the linux-image-*-asyncfork-*
 packages of the same repository); elsewhere it warns and runs the program
 as it is.  Includes systemd drop-in examples for redis-server.service and
 valkey-server.service.
 .
 Built from commit $commit.
EOF

mkdir -p "$build/debs"
rm -f "$build/debs/${pkg}"_*.deb
deb=$build/debs/${pkg}_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "build-tools-deb: $deb"
