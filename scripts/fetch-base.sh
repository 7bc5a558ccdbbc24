#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Get the vanilla kernel source of a base other than 6.12 from Debian's
# archive, every file checked against Debian's signed indexes:
#
#   BUILD/bases/linux-BASE.tar.xz      the tree (one top folder, linux-VERSION)
#   BUILD/bases/linux-BASE.record      what was done, and what still differs
#   BUILD/bases/downloads/             verified downloads, kept as a cache
#
# kernel/bases/BASE pins the version and the sha256 of everything it is
# made from.  The chain of trust: InRelease, signature checked by gpgv with
# debian-archive-keyring -> sha256 of an index (Packages, Sources) -> sha256
# of a .deb or .dsc -> sha256 of what the .dsc lists.  A pinned sum that
# the signed index no longer gives stops the run: the archive changed, and
# the pin is updated by hand, not followed.
#
# route=orig: the result is linux_VERSION.orig.tar.xz itself (the upstream
# tag's git archive minus debian/copyright's Files-Excluded).
# route=debian-revert: no vanilla tarball is served, so the result is
# Debian's linux-source tree with Debian's quilt series reverted, checked
# first on a release where both trees are served (calibrate_*): see
# kernel/bases/README.md.
#
# A second run with the same pin downloads nothing.  DEBIAN_MIRROR names
# another mirror, e.g. a snapshot.debian.org date once the pinned version
# has left the archive.
#
# Usage: fetch-base.sh BASE BUILD_DIR
set -euo pipefail
shopt -s inherit_errexit  # so that die() in a $(...) stops the run

die() { echo "fetch-base: $*" >&2; exit 1; }
say() { echo "fetch-base: $*" >&2; }

[ $# -eq 2 ] || die "usage: fetch-base.sh BASE BUILD_DIR"
base=$1
top=$(cd "$(dirname "$0")/.." && pwd)
pins=${FETCH_BASE_PINS:-$top/kernel/bases}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}

case $base in
6.12) die "BASE=6.12 is Debian's linux-source-6.12 package, which 'make setup' installs: nothing to fetch" ;;
*/* | '' | .*) die "unknown BASE '$base'" ;;
esac
pinfile=$pins/$base
if [ ! -f "$pinfile" ]; then
	known=$(find "$pins" -maxdepth 1 -type f ! -name '*.md' -printf '%f\n' | sort | tr '\n' ' ')
	die "unknown BASE '$base': no pin file $pinfile (known: 6.12 ${known% })"
fi

mkdir -p "$2/bases/downloads"
build=$(cd "$2" && pwd)
bases=$build/bases
cache=$bases/downloads
tarball=$bases/linux-$base.tar.xz
record=$bases/linux-$base.record

# pin KEY: the value of KEY (one); pins KEY: every value of KEY, one a line.
pin() {
	local v
	v=$(awk -v k="$1" 'index($0, k "=") == 1 { print substr($0, length(k) + 2); n++ }
		END { exit n == 1 ? 0 : 1 }' "$pinfile") || die "$pinfile: needs exactly one $1="
	printf '%s\n' "$v"
}
pins() { awk -v k="$1" 'index($0, k "=") == 1 { print substr($0, length(k) + 2) }' "$pinfile"; }

sha() { sha256sum "$1" | cut -d' ' -f1; }
# What the result is made from: the pin less its comments and the trees it
# expects (pinning those does not call for a rebuild).
inputs=$(grep -v -e '^#' -e '^$' -e '^result_tree=' -e '^calibrate_tree=' "$pinfile" |
	sha256sum | cut -d' ' -f1)
version=$(pin version)
route=$(pin route)

# Up to date: the record names these inputs, the tarball it wrote and the
# trees the pin expects.
uptodate() {
	local t
	[ -f "$tarball" ] && [ -f "$record" ] || return 1
	grep -qx "inputs_sha256=$inputs" "$record" || return 1
	for t in result_tree:tree calibrate_tree:calibrate_tree; do
		[ "$(pins "${t%%:*}")" = unknown ] || [ -z "$(pins "${t%%:*}")" ] ||
			grep -qx "${t#*:}=$(pins "${t%%:*}")" "$record" || return 1
	done
	grep -qx "tarball_sha256=$(sha "$tarball")" "$record"
}
if uptodate; then
	say "$tarball: Linux $version, up to date ($route)"
	echo "$tarball"
	exit 0
fi

for tool in curl gpgv xz tar patch git dpkg-deb sha256sum; do
	command -v "$tool" >/dev/null || die "needs $tool (apt-get install ${tool/dpkg-deb/dpkg})"
done
[ -r "$keyring" ] || die "no Debian archive keyring at $keyring (apt-get install debian-archive-keyring)"

# download PATH DEST: the mirror's PATH into DEST; the HTTP status on failure.
download() {
	local code
	code=$(curl -sS -L --retry 3 -o "$2.part" -w '%{http_code}' "$mirror/$1") ||
		die "cannot download $mirror/$1 (network error; DEBIAN_MIRROR=$mirror)"
	if [ "$code" != 200 ]; then
		rm -f "$2.part"
		return 1
	fi
	mv "$2.part" "$2"
}

# release SUITE: the signed content of the suite's InRelease, verified
# (once a run: the flag is a file, as callers run in $(...) subshells).
release() {
	local suite=$1 dir=$cache/dists/$1 status vu
	if [ ! -f "$work/released-$suite" ]; then
		mkdir -p "$dir"
		download "dists/$suite/InRelease" "$dir/InRelease" ||
			die "$suite: no InRelease at $mirror/dists/$suite/"
		rm -f "$dir/Release"
		status=$(gpgv --status-fd 1 --keyring "$keyring" --output "$dir/Release" \
			"$dir/InRelease" 2>/dev/null) || true
		if ! grep -q '^\[GNUPG:\] VALIDSIG ' <<<"$status" ||
			grep -q '^\[GNUPG:\] BADSIG' <<<"$status"; then
			rm -f "$dir/Release"
			die "$suite: InRelease signature check failed against $keyring:
$(grep '^\[GNUPG:\] [A-Z]*SIG' <<<"$status" || echo 'no signature')"
		fi
		grep -qx "Codename: $suite\|Suite: $suite" "$dir/Release" ||
			die "$suite: the signed InRelease is for $(grep -m1 '^Codename:' "$dir/Release")"
		vu=$(sed -n 's/^Valid-Until: //p' "$dir/Release")
		if [ -n "$vu" ] && [ "$(date -d "$vu" +%s)" -lt "$(date +%s)" ]; then
			say "warning: $suite's InRelease is validly signed but expired on $vu;" \
				"the sums pinned in $pinfile are what is trusted"
			echo "warning=$suite InRelease expired $vu" >>"$record.part"
		fi
		touch "$work/released-$suite"
	fi
	echo "$cache/dists/$suite/Release"
}

# index SUITE NAME: the index NAME (e.g. main/source/Sources.xz) of SUITE,
# checked against the signed InRelease, uncompressed.
index() {
	local suite=$1 name=$2 rel want dest
	rel=$(release "$suite")
	want=$(awk -v f="$name" '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 }
		s && $3 == f { print $1; exit }' "$rel")
	[ -n "$want" ] || die "$suite: its InRelease lists no $name"
	dest=$cache/dists/$suite/$name
	mkdir -p "$(dirname "$dest")"
	if [ ! -f "${dest%.xz}" ] || [ "$(sha "$dest" 2>/dev/null)" != "$want" ]; then
		if ! download "dists/$suite/$name" "$dest" || [ "$(sha "$dest")" != "$want" ]; then
			# The plain path may lag behind InRelease; by-hash does not.
			if ! download "dists/$suite/$(dirname "$name")/by-hash/SHA256/$want" "$dest" ||
				[ "$(sha "$dest")" != "$want" ]; then
				die "$suite: $name as served does not match its signed InRelease (sha256 $want)"
			fi
		fi
		xz -dc "$dest" >"${dest%.xz}"
	fi
	echo "${dest%.xz}"
}

# stanza FILE PACKAGE VERSION: that paragraph of a Packages or Sources file.
stanza() {
	awk -v p="$2" -v v="$3" '
		function flush() { if (pkg == p && ver == v) { printf "%s", buf; found = 1 }
			buf = ""; pkg = ""; ver = "" }
		/^$/ { flush(); next }
		{ buf = buf $0 "\n" }
		/^Package: / { pkg = substr($0, 10) }
		/^Version: / { ver = substr($0, 10) }
		END { flush(); exit !found }' "$1"
}
# sumof NAME: the sha256 of file NAME in a Checksums-Sha256 list on stdin.
sumof() { awk -v f="$1" '/^Checksums-Sha256:/ { s = 1; next } /^[^ ]/ { s = 0 }
	s && $3 == f { print $1; exit }'; }

# get WHAT PATH SHA256: the verified download of the mirror's PATH.
get() {
	local what=$1 path=$2 want=$3 dest
	dest=$cache/$(basename "$path")
	[ -f "$dest" ] && [ "$(sha "$dest")" = "$want" ] && { echo "$dest"; return; }
	say "downloading $what: $mirror/$path"
	download "$path" "$dest" ||
		die "$what is listed in Debian's signed index but not served: $mirror/$path answers 404"
	[ "$(sha "$dest")" = "$want" ] ||
		die "$what: $mirror/$path has sha256 $(sha "$dest"), the signed index says $want"
	echo "$dest"
}

# deb PREFIX SUITE: the .deb pinned as PREFIX_{package,version,deb,deb_sha256},
# checked against SUITE's signed Packages index unless already cached.
deb() {
	local p=$1 suite=$2 path want idx st
	path=$(pin "${p}_deb")
	want=$(pin "${p}_deb_sha256")
	if [ ! -f "$cache/$(basename "$path")" ] || [ "$(sha "$cache/$(basename "$path")")" != "$want" ]; then
		idx=$(index "$suite" "$(pin tree_index)")
		st=$(stanza "$idx" "$(pin "${p}_package")" "$(pin "${p}_version")") ||
			die "$(pin "${p}_package") $(pin "${p}_version") is not in $suite's signed index" \
				"any more: the archive moved on; re-pin $pinfile, or set DEBIAN_MIRROR to a snapshot"
		[ "$(sed -n 's/^Filename: //p' <<<"$st") $(sed -n 's/^SHA256: //p' <<<"$st")" = "$path $want" ] ||
			die "archive changed: $suite lists $(pin "${p}_package") $(pin "${p}_version") as" \
				"$(sed -n 's/^Filename: //p' <<<"$st") sha256 $(sed -n 's/^SHA256: //p' <<<"$st"), $pinfile says $path $want"
	fi
	get "$(pin "${p}_package") $(pin "${p}_version")" "$path" "$want"
}

# member DEB PATH SHA256 DEST: a file of a .deb's data, checked.
member() {
	dpkg-deb --fsys-tarfile "$1" | tar -xO "./$2" >"$4.part" || die "$1 has no $2"
	[ "$(sha "$4.part")" = "$3" ] || die "$2 in $1 has sha256 $(sha "$4.part"), $pinfile says $3"
	mv "$4.part" "$4"
}

# sources_entry SUITE VERSION: the pinned source package's paragraph of the
# suite's signed Sources index.
sources_entry() {
	local idx
	idx=$(index "$1" main/source/Sources.xz)
	stanza "$idx" linux "$2" ||
		die "linux $2 is not in $1's signed Sources index any more: re-pin $pinfile," \
			"or set DEBIAN_MIRROR to a snapshot"
}

# orig_from_dsc SUITE SRCVERSION DSC DSC_SHA ORIG ORIG_SHA: the orig tarball,
# its sum as the .dsc gives it (the .dsc's as the signed Sources index does).
orig_from_dsc() {
	local suite=$1 sv=$2 dsc=$3 dsc_sum=$4 orig=$5 orig_sum=$6 st f
	if [ ! -f "$cache/$(basename "$orig")" ] || [ "$(sha "$cache/$(basename "$orig")")" != "$orig_sum" ]; then
		st=$(sources_entry "$suite" "$sv")
		[ "$(sumof "$(basename "$dsc")" <<<"$st")" = "$dsc_sum" ] ||
			die "archive changed: $suite's Sources gives $(basename "$dsc") sha256" \
				"'$(sumof "$(basename "$dsc")" <<<"$st")', $pinfile says $dsc_sum"
		f=$(get "$(basename "$dsc")" "$dsc" "$dsc_sum")
		[ "$(sumof "$(basename "$orig")" <"$f")" = "$orig_sum" ] ||
			die "$(basename "$dsc") lists $(basename "$orig") with sha256 '$(sumof "$(basename "$orig")" <"$f")', $pinfile says $orig_sum"
	fi
	get "$(basename "$orig")" "$orig" "$orig_sum"
}

# treeid DIR: the git tree of DIR's files, as kernel-git.sh commits them.
treeid() {
	local g
	g=$(mktemp -d "$bases/git.XXXXXX")
	GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git --git-dir="$g" init -q
	GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 \
		git --git-dir="$g" --work-tree="$1" -c core.autocrlf=false -c core.looseCompression=0 add -A -f .
	git --git-dir="$g" write-tree
	rm -rf "$g"
}

# unpack TARBALL DIR: DIR = the tarball's one top folder.
unpack() {
	rm -rf "$2" "$2.tmp"
	mkdir -p "$2.tmp"
	tar -xJf "$1" -C "$2.tmp"
	mv "$2.tmp"/* "$2"
	rmdir "$2.tmp"
}

# revert TREE PATCHES: TREE minus the quilt series in PATCHES, newest first;
# the pin's revert_keep and revert_leave stay, revert_fuzz may use fuzz.
revert() {
	local tree=$1 dir=$2 p fuzz n=0
	local -a series
	mapfile -t series < <(awk '!/^#/ && NF { print $1 }' "$dir/series")
	[ "${#series[@]}" -gt 0 ] || die "$dir/series lists no patch"
	while read -r p; do
		printf '%s\n' "${series[@]}" | grep -qx -- "$p" ||
			die "$pinfile names $p, which $(pin patches_source) $(pin patches_version)'s series does not list"
	done < <(pins revert_keep; pins revert_leave; pins revert_fuzz)
	for ((i = ${#series[@]} - 1; i >= 0; i--)); do
		p=${series[i]}
		if [ -n "${3:-}" ] && pins revert_keep | grep -qx -- "$p"; then
			echo "patch=kept $p" >>"$record.part"
			continue
		fi
		if [ -n "${3:-}" ] && pins revert_leave | grep -qx -- "$p"; then
			echo "patch=left $p" >>"$record.part"
			continue
		fi
		fuzz=0
		[ -n "${3:-}" ] && pins revert_fuzz | grep -qx -- "$p" && fuzz=3
		patch -d "$tree" -p1 -R -s --batch --dry-run --fuzz=$fuzz -r - <"$dir/$p" >/dev/null 2>&1 ||
			die "Debian's $p does not revert on $(basename "$tree") (fuzz $fuzz): the pin no longer fits"
		patch -d "$tree" -p1 -R -s --batch --fuzz=$fuzz --no-backup-if-mismatch -r - <"$dir/$p" >/dev/null
		[ -n "${3:-}" ] && echo "patch=reverted$([ $fuzz = 0 ] || echo "-fuzz$fuzz") $p" >>"$record.part"
		n=$((n + 1))
	done
	say "$(basename "$tree"): $n of ${#series[@]} Debian patches reverted"
}

# makever TREE: VERSION.PATCHLEVEL.SUBLEVEL+EXTRAVERSION of a kernel tree.
makever() {
	awk -F' = ' '$1 == "VERSION" { v = $2 } $1 == "PATCHLEVEL" { p = $2 }
		$1 == "SUBLEVEL" { s = $2 } $1 == "EXTRAVERSION" { e = $2 }
		$1 == "NAME" { exit } END { print v "." p "." s e }' "$1/Makefile"
}

work=$bases/work-$base
rm -rf "$work" "$record.part"
mkdir -p "$work"
{
	echo "# scripts/fetch-base.sh $base, $(date -u +%Y-%m-%dT%H:%M:%SZ), mirror $mirror"
	echo "base=$base"
	echo "version=$version"
	echo "route=$route"
	echo "inputs_sha256=$inputs"
} >>"$record.part"

case $route in
orig)
	src=$(orig_from_dsc "$(pin orig_suite)" "$(pin orig_source_version)" "$(pin orig_dsc)" \
		"$(pin orig_dsc_sha256)" "$(pin orig_tarball)" "$(pin orig_sha256)")
	unpack "$src" "$work/linux-$version"
	[ "$(makever "$work/linux-$version")" = "$version" ] ||
		die "$(basename "$src") is Linux $(makever "$work/linux-$version"), not $version"
	tree=$(treeid "$work/linux-$version")
	cp "$src" "$tarball.part"
	;;
debian-revert)
	# Calibration: Debian's tree minus the series is the orig tarball.
	deb_c=$(deb calibrate_tree "$(pin calibrate_suite)")
	orig_c=$cache/$(basename "$(pin calibrate_orig)")
	if [ ! -f "$orig_c" ] || [ "$(sha "$orig_c")" != "$(pin calibrate_orig_sha256)" ]; then
		st=$(sources_entry "$(pin calibrate_suite)" "$(pin calibrate_source_version)")
		[ "$(sumof "$(basename "$orig_c")" <<<"$st")" = "$(pin calibrate_orig_sha256)" ] ||
			die "archive changed: $(pin calibrate_suite)'s Sources gives $(basename "$orig_c")" \
				"sha256 '$(sumof "$(basename "$orig_c")" <<<"$st")', $pinfile says $(pin calibrate_orig_sha256)"
	fi
	orig_c=$(get "$(basename "$orig_c")" "$(pin calibrate_orig)" "$(pin calibrate_orig_sha256)")
	deb_t=$(deb tree "$(pin tree_suite)")
	# Debian's patches: .dsc sum from the signed Sources, debian.tar.xz's from the .dsc.
	debian_tar=$cache/$(basename "$(pin patches_debian)")
	if [ ! -f "$debian_tar" ] || [ "$(sha "$debian_tar")" != "$(pin patches_debian_sha256)" ]; then
		st=$(sources_entry "$(pin patches_suite)" "$(pin patches_version)")
		[ "$(sumof "$(basename "$(pin patches_dsc)")" <<<"$st")" = "$(pin patches_dsc_sha256)" ] ||
			die "archive changed: $(pin patches_suite)'s Sources no longer gives $(basename "$(pin patches_dsc)") the pinned sha256"
		dsc=$(get "$(basename "$(pin patches_dsc)")" "$(pin patches_dsc)" "$(pin patches_dsc_sha256)")
		[ "$(sumof "$(basename "$debian_tar")" <"$dsc")" = "$(pin patches_debian_sha256)" ] ||
			die "$(basename "$dsc") does not list $(basename "$debian_tar") with the pinned sha256"
	fi
	debian_tar=$(get "$(basename "$debian_tar")" "$(pin patches_debian)" "$(pin patches_debian_sha256)")
	tar -xJf "$debian_tar" -C "$work" debian/patches debian/copyright
	echo "patches=$(pin patches_source) $(pin patches_version) ($(pin patches_suite))" >>"$record.part"

	calib_tar=$cache/$(basename "$(pin calibrate_tree_member)" .tar.xz)_$(pin calibrate_tree_version).tar.xz
	[ "$(sha "$calib_tar" 2>/dev/null)" = "$(pin calibrate_tree_member_sha256)" ] ||
		member "$deb_c" "$(pin calibrate_tree_member)" "$(pin calibrate_tree_member_sha256)" "$calib_tar"
	say "calibrating on $(pin calibrate_version): unpacking both trees"
	unpack "$orig_c" "$work/calibrate-orig"
	unpack "$calib_tar" "$work/calibrate-debian"
	revert "$work/calibrate-debian" "$work/debian/patches"
	want=$(treeid "$work/calibrate-orig")
	got=$(treeid "$work/calibrate-debian")
	[ "$want" = "$got" ] ||
		die "calibration failed: $(pin calibrate_tree_package) $(pin calibrate_tree_version) minus" \
			"$(pin patches_version)'s series is git tree $got, $(basename "$orig_c") is $want:" \
			"the method does not hold; see diff -r $work/calibrate-orig $work/calibrate-debian"
	[ "$(pin calibrate_tree)" = unknown ] || [ "$(pin calibrate_tree)" = "$want" ] ||
		die "calibration tree $want, $pinfile pins $(pin calibrate_tree)"
	echo "calibrate=$(pin calibrate_tree_package) $(pin calibrate_tree_version) minus series = $(basename "$orig_c"): tree $want" >>"$record.part"
	echo "calibrate_tree=$want" >>"$record.part"
	rm -rf "$work/calibrate-orig" "$work/calibrate-debian"
	say "calibration: $(pin calibrate_tree_package) $(pin calibrate_tree_version) minus the series = $(basename "$orig_c") (git tree $want)"

	src_tar=$cache/$(basename "$(pin tree_member)" .tar.xz)_$(pin tree_version).tar.xz
	[ "$(sha "$src_tar" 2>/dev/null)" = "$(pin tree_member_sha256)" ] ||
		member "$deb_t" "$(pin tree_member)" "$(pin tree_member_sha256)" "$src_tar"
	dpkg-deb --fsys-tarfile "$deb_t" | tar -xO "./$(pin tree_copyright)" >"$work/copyright"
	say "unpacking $(basename "$src_tar")"
	unpack "$src_tar" "$work/linux-$version"
	epoch=$(stat -c %Y "$work/linux-$version/Makefile")
	[ "$(makever "$work/linux-$version")" = "$version" ] ||
		die "$(pin tree_package) $(pin tree_version) is Linux $(makever "$work/linux-$version"), not $version"
	revert "$work/linux-$version" "$work/debian/patches" pinned
	pins unknown | sed 's/^/unknown=/' >>"$record.part"
	# Files-Excluded of the tree's own debian/copyright: not in any orig tarball.
	while read -r f; do
		echo "excluded=$f" >>"$record.part"
		[ ! -e "$work/linux-$version/$f" ] || die "$f is in the tree, but debian/copyright excludes it"
	done < <(awk '/^Files-Excluded:/ { s = 1; sub(/^Files-Excluded:/, "") }
		s && /^[^ ]/ && !/^Files-Excluded:/ { s = 0 } s { for (i = 1; i <= NF; i++) print $i }' "$work/copyright")
	tree=$(treeid "$work/linux-$version")
	say "packing $(basename "$tarball")"
	tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner \
		--mtime="@$epoch" -cf - "linux-$version" | xz -T0 -1 >"$tarball.part"
	;;
*) die "$pinfile: unknown route=$route (orig or debian-revert)" ;;
esac

echo "tree=$tree" >>"$record.part"
pinned=$(pin result_tree)
if [ "$pinned" != unknown ] && [ "$pinned" != "$tree" ]; then
	die "the result is git tree $tree, $pinfile pins $pinned: Debian's files or the tools changed; see $work"
fi
[ "$pinned" != unknown ] || say "warning: $pinfile pins no result_tree; this run made $tree"
mv "$tarball.part" "$tarball"
echo "tarball_sha256=$(sha "$tarball")" >>"$record.part"
mv "$record.part" "$record"
rm -rf "$work"
say "$tarball: Linux $version, git tree $tree ($route)"
echo "$tarball"
