#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Check the series as the kernel's build bots check one, on the tree that
# "make source" prepared (BUILD_DIR/linux), against the unpatched 6.12 tree
# it was made from (BUILD_DIR/pristine):
#
#   kdoc    scripts/kernel-doc -Wall -none: no warning in a .c or .h file
#           the series adds, no new one in a file it changes
#   docs    make htmldocs of the Documentation folders whose files the
#           series touches (SPHINXDIRS="admin-guide mm"): no new warning,
#           "document isn't included in any toctree" included
#   w1      every object whose .c the series changes or adds, built with
#           W=1 (gcc's extra warnings, kernel-doc) in x86_64 defconfig with
#           CONFIG_ASYNC_FORK=y and the options of the code the series
#           touches: no new warning
#   sparse  the same objects checked by sparse (C=2): no new warning
#   tiny    vmlinux of x86_64 tinyconfig (no SMP: CONFIG_ASYNC_FORK cannot
#           be set), of x86_64 tinyconfig with SMP and CONFIG_ASYNC_FORK=y,
#           and of i386 tinyconfig: each builds, with no warning in a file
#           the series touches
#
# A new warning is one whose file and text (line numbers left out) the
# same check of the unpatched tree does not print as often.  Each check
# then lists only its new warnings; partial documentation builds leave
# references to folders they do not build unresolved, and such warnings
# are listed apart, without failing.
#
# Writes BUILD_DIR/check-kernel/: check-kernel.log (this output), NAME.log
# (what each check ran and printed), NAME.new (its new warnings), and the
# build folders (kept: a second run rebuilds only what changed, and takes
# the unpatched tree's warnings from the last run while that tree, the
# tools and what they check are the same).
# Environment: JOBS (make -j, default: the number of CPUs), CHECKS (a
# subset of "kdoc docs w1 sparse tiny", the default all of them),
# ASYNC_FORK_PATCHES (the series' folder, default kernel/patches: the one
# BUILD_DIR/linux was prepared from).  x86 only.
#
# Usage: check-kernel.sh BUILD_DIR
#        check-kernel.sh files PATCH...         each file the patches touch:
#                                               "added PATH" or "changed PATH"
#        check-kernel.sh objects ARCH PATCH...  the kernel objects to build:
#                                               the .o of each .c they touch
#        check-kernel.sh new-warnings OLD NEW   the warnings of log NEW that
#                                               log OLD has not (as often)
set -euo pipefail

die() { echo "check-kernel: $*" >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)
ALL_CHECKS="kdoc docs w1 sparse tiny"

# files PATCH...: "added PATH" or "changed PATH" for each file the patches
# touch, in path order (a file one patch adds and a later one changes is
# added; one a patch deletes is left out).  Git's headers say which.
files() {
	awk '
	function flush() { if (path != "" && !(path in st)) { st[path] = status; order[n++] = path }
			   else if (path != "" && status == "deleted") st[path] = status
			   path = "" }
	/^diff --git / { flush(); path = $4; sub(/^b\//, "", path); status = "changed"; head = 1; next }
	head && /^new file mode/ { status = "added"; next }
	head && /^deleted file mode/ { status = "deleted"; next }
	head && /^rename to / { path = substr($0, 11); next }
	head && /^(--- |@@|Binary)/ { head = 0 }
	END { flush(); for (i = 0; i < n; i++) if (st[order[i]] != "deleted") print st[order[i]], order[i] }
	' "$@" | sort -k2
}

# objects ARCH PATCH...: the .o of each .c file the patches touch that the
# kernel of ARCH builds (tools/, Documentation/, scripts/, samples/ and
# other architectures left out).
objects() {
	local arch=$1
	shift
	files "$@" | awk -v arch="$arch" '
	$2 !~ /\.c$/ { next }
	$2 ~ /^(tools|Documentation|scripts|samples|usr)\// { next }
	$2 ~ /^arch\// && index($2, "arch/" arch "/") != 1 { next }
	{ sub(/\.c$/, ".o", $2); print $2 }'
}

# new-warnings OLD NEW: the warnings of log NEW that log OLD does not have
# as often, in NEW's order, each with the continuation lines sparse prints
# under it ("FILE:L:C:    expected ...").  A warning is a line
# "FILE[:LINE[:COL]]: warning|error|WARNING|ERROR...: TEXT" (gcc, sparse,
# kernel-doc, objtool, Sphinx), compared by FILE and TEXT, with line
# numbers and code offsets in TEXT left out too.  The logs' paths must be
# relative to their trees already.
new_warnings() {
	awk '
	function key(line,   file, text) {
		if (line !~ /^[^ :]+(:[0-9]+)*: (warning|error|fatal error|WARNING|ERROR|SEVERE|CRITICAL)[: ]/)
			return ""
		file = line
		sub(/(:[0-9]+)*: (warning|error|fatal error|WARNING|ERROR|SEVERE|CRITICAL)[: ].*$/, "", file)
		text = substr(line, length(file) + 1)
		sub(/^(:[0-9]+)*: /, "", text)
		gsub(/:[0-9]+(:[0-9]+)?/, ":N", text)
		gsub(/\+0x[0-9a-f]+/, "+0xN", text)
		gsub(/\/0x[0-9a-f]+/, "/0xN", text)
		return file ": " text
	}
	FILENAME == ARGV[1] { k = key($0); if (k != "") seen[k]++; next }
	{
		k = key($0)
		if (k == "") {
			if (printing && $0 ~ /^[^ :]+:[0-9]+:[0-9]+:   +[^ ]/)
				print
			else
				printing = 0
			next
		}
		if (seen[k] > 0) { seen[k]--; printing = 0; next }
		print
		printing = 1
	}' "$1" "$2"
}

case "${1:-}" in
files) shift; files "$@"; exit 0 ;;
objects) shift; objects "$@"; exit 0 ;;
new-warnings) [ $# -eq 3 ] || die "usage: check-kernel.sh new-warnings OLD NEW"; new_warnings "$2" "$3"; exit 0 ;;
-h|--help) sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//p}' "$0"; exit 0 ;;
esac

[ "${1:-}" = run-check ] || [ $# -eq 1 ] || die "usage: check-kernel.sh BUILD_DIR (--help)"
if [ "$1" = run-check ]; then
	check=$2
	build=$3
else
	check=
	build=$(cd "$1" && pwd)
fi
src=$build/linux
pristine=$build/pristine
patches=${ASYNC_FORK_PATCHES:-$top/kernel/patches}
work=$build/check-kernel
jobs=${JOBS:-$(nproc)}
case "${ARCH:-x86}" in
x86|x86_64) ;;
*) die "ARCH=$ARCH: x86 only so far" ;;
esac
unset ARCH

[ -f "$src/Makefile" ] || die "$src is not prepared: run 'make source'"
[ -f "$build/pristine.done" ] || die "$pristine is not unpacked: run 'make source'"
[ -r "$patches/series" ] || die "no series file in $patches"
mkdir -p "$work"

export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
export CCACHE_BASEDIR=$build CCACHE_NOHASHDIR=1 CCACHE_SLOPPINESS=time_macros
export KBUILD_BUILD_USER=async-fork KBUILD_BUILD_HOST=guest
cc=gcc
command -v ccache >/dev/null && cc="ccache gcc"

# The series' patches, in order; the files they touch.
mapfile -t series < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$patches/series" |
		      awk -v d="$patches" '{ print d "/" $1 }')
touched=$work/files
files "${series[@]}" > "$touched"

say() { echo "check-kernel: $*"; }

# The unpatched tree's results do not change until it is unpacked again:
# unchanged WHAT... (the inputs of a result) is true when the last run of
# check NAME on the unpatched tree had the same; done NAME... records it.
pristine_sum() { { stat -c %Y "$build/pristine.done"; printf '%s\n' "$@"; } | sha256sum; }
unchanged() {
	local name=$1
	shift
	[ "$(cat "$work/$name-pristine.sum" 2>/dev/null)" = "$(pristine_sum "$@")" ]
}
done_pristine() {
	local name=$1
	shift
	pristine_sum "$@" > "$work/$name-pristine.sum"
}

# The folder of tree "pristine" (unpatched) or "linux" (the series').
tree_dir() {
	case "$1" in
	pristine) echo "$pristine" ;;
	linux) echo "$src" ;;
	esac
}

# relative TREE...: a log with the paths of TREE... made relative to them
# (as given and as kbuild names them: without symbolic links).
relative() {
	local args=() t
	for t in "$@"; do
		args+=(-e "s|$t/||g" -e "s|$(realpath "$t")/||g")
	done
	sed "${args[@]}" -e 's|^\./||'
}

# A check's new warnings go to NAME.new and here; it fails if there are any.
report_new() {
	local name=$1 old=$2 new=$3 n
	new_warnings "$old" "$new" > "$work/$name.new"
	n=$(grep -c . "$work/$name.new" || true)
	if [ "$n" -gt 0 ]; then
		say "$name: new warnings ($work/$name.new):"
		sed 's/^/    /' "$work/$name.new"
		return 1
	fi
	say "$name: no new warning"
}

# config TREE OUT FRAGMENT TARGET [MAKE-ARGS...]: OUT's .config, made by
# the config target TARGET with FRAGMENT merged over it, unless neither
# changed since.  In the series' tree every option FRAGMENT sets must be
# in it (the unpatched tree leaves out those it does not know).
config() {
	local tree=$1 out=$2 fragment=$3 target=$4 want sym sum
	shift 4
	sum=$( { cat "$fragment"; echo "$target $*"; } | sha256sum)
	mkdir -p "$out"
	[ -f "$out/.config" ] && [ "$(cat "$out/config.sum" 2>/dev/null)" = "$sum" ] && return 0
	make -s -C "$tree" O="$out" CC="$cc" "$@" "$target" >/dev/null
	"$tree/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "$fragment" >/dev/null
	make -s -C "$tree" O="$out" CC="$cc" "$@" olddefconfig >/dev/null
	if [ "$tree" = "$src" ]; then
		while IFS= read -r want; do
			case "$want" in
			"# CONFIG_"*" is not set")
				sym=${want#\# }
				sym=${sym%% *}
				! grep -q "^$sym=" "$out/.config" ||
					die "$out/.config: Kconfig did not keep '$want'" ;;
			CONFIG_*)
				grep -qxF -- "$want" "$out/.config" ||
					die "$out/.config: Kconfig did not keep '$want' (its dependencies?)" ;;
			esac
		done < "$fragment"
	fi
	echo "$sum" > "$out/config.sum"
}

# kdoc: scripts/kernel-doc -Wall on each .c and .h the series touches.
check_kdoc() {
	local f
	: > "$work/kdoc.old"
	: > "$work/kdoc.now"
	while read -r status f; do
		case "$f" in
		tools/*|Documentation/*|scripts/*) continue ;;
		*.c|*.h) ;;
		*) continue ;;
		esac
		if [ "$status" = changed ]; then
			(cd "$pristine" && scripts/kernel-doc -Wall -none "$f") >> "$work/kdoc.old" 2>&1 || true
		fi
		(cd "$src" && scripts/kernel-doc -Wall -none "$f") >> "$work/kdoc.now" 2>&1 || true
	done < "$touched"
	report_new kdoc "$work/kdoc.old" "$work/kdoc.now"
}

# The Documentation folders of the files the series touches there, that
# Sphinx builds on their own.
doc_dirs() {
	awk '$2 ~ /^Documentation\/[^\/]+\// { split($2, p, "/"); print p[2] }' "$touched" | sort -u |
		while read -r d; do
			[ -f "$src/Documentation/$d/index.rst" ] && echo "$d"
		done
}

# Is this warning of a partial build about a document or label outside it?
outside() {
	local line=$1 doc target label
	doc=${line%%:*}
	case "$line" in
	*"unknown document: '"*)
		target=${line#*unknown document: \'}
		target=${target%%\'*}
		case "$target" in
		/*) target=Documentation$target ;;
		*) target=$(dirname "$doc")/$target ;;
		esac
		[ -f "$(realpath -m "$src/$target").rst" ] ;;
	*"undefined label: '"*)
		label=${line#*undefined label: \'}
		label=${label%%\'*}
		grep -rqi --include='*.rst' -e "^\.\. _$label:" "$src/Documentation" ;;
	*) return 1 ;;
	esac
}

# docs: make htmldocs of those folders, both trees.
check_docs() {
	local dirs tree dir name line
	command -v sphinx-build >/dev/null ||
		die "docs: no sphinx-build: run scripts/setup.sh (Debian's python3-sphinx)"
	dirs=$(doc_dirs | tr '\n' ' ')
	dirs=${dirs% }
	[ -n "$dirs" ] || { say "docs: the series touches no Documentation folder"; return 0; }
	for tree in pristine linux; do
		if [ "$tree" = pristine ] && unchanged docs "$dirs" "$(sphinx-build --version)"; then
			say "docs: the pristine tree's warnings as in the last run"
			continue
		fi
		say "docs: make SPHINXDIRS=\"$dirs\" htmldocs, $tree tree"
		dir=$(tree_dir "$tree")
		[ "$tree" = linux ] || rm -f "$work/docs-pristine.sum"
		rm -rf "$work/docs-$tree/Documentation/output"
		# Sphinx fails only on its own errors; the warnings are what counts.
		# Without make's jobserver (-j1) Sphinx takes every CPU unless
		# PARALLELISM says otherwise.
		PARALLELISM=$jobs make -C "$dir" O="$work/docs-$tree" -j"$jobs" SPHINXDIRS="$dirs" htmldocs \
			> "$work/docs-$tree.raw" 2>&1 || die "docs: the $tree tree's build failed: $work/docs-$tree.raw"
		# 6.12 writes the netlink specs' .rst into the source tree even
		# with O=: cleandocs removes them, so that the prepared tree stays
		# what the series makes (tests/test_series.py compares it).
		make -C "$dir" O="$work/docs-$tree" cleandocs > /dev/null 2>&1 ||
			die "docs: make cleandocs failed in the $tree tree"
		relative "$dir" "$work/docs-$tree" < "$work/docs-$tree.raw" > "$work/docs-$tree.out"
		[ "$tree" = linux ] || done_pristine docs "$dirs" "$(sphinx-build --version)"
	done
	new_warnings "$work/docs-pristine.out" "$work/docs-linux.out" > "$work/docs.all"
	: > "$work/docs.partial"
	: > "$work/docs.now"
	while IFS= read -r line; do
		name=docs.now
		outside "$line" && name=docs.partial
		echo "$line" >> "$work/$name"
	done < "$work/docs.all"
	if [ -s "$work/docs.partial" ]; then
		say "docs: references to what the partial build leaves out (not failures):"
		sed 's/^/    /' "$work/docs.partial"
	fi
	# Each warning is new already: compare with nothing.
	report_new docs /dev/null "$work/docs.now"
}

# The W=1 and sparse configuration: x86_64 defconfig, Async-fork and what
# compiles the code the series touches (each object below must build).
W1_CONFIG="# CONFIG_WERROR is not set
CONFIG_ASYNC_FORK=y
CONFIG_ASYNC_FORK_DEBUG=y
CONFIG_DEBUG_FS=y
CONFIG_DEBUG_VM=y
CONFIG_DEBUG_VM_PGTABLE=y
CONFIG_KSM=y
CONFIG_MEMCG=y
CONFIG_MEMCG_V1=y
CONFIG_TRANSPARENT_HUGEPAGE=y
CONFIG_NUMA=y
CONFIG_NUMA_BALANCING=y
CONFIG_USERFAULTFD=y
CONFIG_SWAP=y
CONFIG_ZSWAP=y
CONFIG_CHECKPOINT_RESTORE=y
CONFIG_MEM_SOFT_DIRTY=y
CONFIG_GUP_TEST=y
CONFIG_MIGRATION=y
CONFIG_MEMORY_HOTPLUG=y
CONFIG_MEMORY_HOTREMOVE=y
CONFIG_ZONE_DEVICE=y
CONFIG_DEVICE_PRIVATE=y
CONFIG_TEST_HMM=m"

# w1-build TREE: the series' objects of TREE (those it has) with W=1 into
# w1-TREE, then (C=2) sparse on them: w1-TREE.out and sparse-TREE.out.
w1_build() {
	local tree=$1 out=$work/w1-$1 objs=() o dir tools
	dir=$(tree_dir "$tree")
	printf '%s\n' "$W1_CONFIG" > "$work/w1.config"
	config "$dir" "$out" "$work/w1.config" defconfig
	while read -r o; do
		[ -f "$dir/${o%.o}.c" ] && objs+=("$o")
	done < "$work/objects"
	[ ${#objs[@]} -gt 0 ] || die "w1: none of the objects is in the $tree tree"
	if [ "$tree" = pristine ]; then
		tools="$(gcc --version | head -n 1) $(sparse --version)"
		if unchanged w1 "$tools" "$W1_CONFIG" "${objs[@]}"; then
			say "w1, sparse: the pristine tree's warnings as in the last run"
			return 0
		fi
		rm -f "$work/w1-pristine.sum"
	fi
	say "w1: make W=1 prepare, $tree tree"
	make -C "$dir" O="$out" CC="$cc" -j"$jobs" W=1 prepare > "$out/prepare.log" 2>&1 ||
		die "w1: make prepare failed in the $tree tree: $out/prepare.log"
	say "w1: make W=1 of ${#objs[@]} objects, $tree tree"
	(cd "$out" && rm -f "${objs[@]}")
	make -C "$dir" O="$out" CC="$cc" -j"$jobs" -Otarget -k W=1 "${objs[@]}" \
		> "$work/w1-$tree.raw" 2>&1 || echo "make: exit $?" >> "$work/w1-$tree.raw"
	relative "$dir" "$out" < "$work/w1-$tree.raw" > "$work/w1-$tree.out"
	say "sparse: make W=1 C=2 of the same objects, $tree tree"
	make -C "$dir" O="$out" CC="$cc" -j"$jobs" -Otarget -k W=1 C=2 "${objs[@]}" \
		> "$work/sparse-$tree.raw" 2>&1 || echo "make: exit $?" >> "$work/sparse-$tree.raw"
	relative "$dir" "$out" < "$work/sparse-$tree.raw" > "$work/sparse-$tree.out"
	for o in "${objs[@]}"; do
		[ -f "$out/$o" ] || echo "$o: error: not built (see $work/w1-$tree.raw)" >> "$work/w1-$tree.out"
	done
	[ "$tree" = linux ] || done_pristine w1 "$tools" "$W1_CONFIG" "${objs[@]}"
}

check_w1() {
	command -v sparse >/dev/null || die "sparse: not installed: run scripts/setup.sh (Debian's sparse)"
	objects x86 "${series[@]}" > "$work/objects"
	say "w1: $(wc -l < "$work/objects") objects: $(tr '\n' ' ' < "$work/objects")"
	w1_build pristine
	w1_build linux
	report_new w1 "$work/w1-pristine.out" "$work/w1-linux.out"
}

check_sparse() {
	if [ ! -f "$work/sparse-linux.out" ] || [ ! -f "$work/sparse-pristine.out" ]; then
		die "sparse: runs with w1 (CHECKS must name w1 too)"
	fi
	report_new sparse "$work/sparse-pristine.out" "$work/sparse-linux.out"
}

# tiny: three tinyconfig kernels; a warning in a file the series touches
# (or its object) fails.
check_tiny() {
	local name arch fragment out rc=0 set
	for name in tiny-x86_64 tiny-x86_64-async-fork tiny-i386; do
		arch=x86_64 fragment=$work/$name.config out=$work/$name set=n
		case "$name" in
		tiny-x86_64) printf '# CONFIG_ASYNC_FORK is not set\n' ;;
		tiny-x86_64-async-fork) printf 'CONFIG_SMP=y\nCONFIG_ASYNC_FORK=y\n'; set=y ;;
		tiny-i386) arch=i386; printf '# CONFIG_64BIT is not set\n' ;;
		esac > "$fragment"
		config "$src" "$out" "$fragment" tinyconfig ARCH="$arch"
		[ "$set" = y ] || ! grep -q '^CONFIG_ASYNC_FORK=y' "$out/.config" ||
			die "tiny: $name has CONFIG_ASYNC_FORK=y"
		say "tiny: $name (CONFIG_ASYNC_FORK=$set): make vmlinux"
		if ! make -C "$src" O="$out" ARCH="$arch" CC="$cc" -j"$jobs" vmlinux \
			> "$work/$name.raw" 2>&1; then
			say "tiny: $name does not build ($work/$name.raw):"
			grep -E ': (error|fatal error|undefined reference)|\*\*\*' "$work/$name.raw" | head -n 30 | sed 's/^/    /'
			rc=1
			continue
		fi
		relative "$src" "$out" < "$work/$name.raw" |
			grep -E '^[^ :]+(:[0-9]+)*: (warning|error)' |
			awk 'FILENAME == ARGV[1] { f[$2] = 1; o = $2; sub(/\.c$/, ".o", o); f[o] = 1; next }
			     { p = $0; sub(/:.*/, "", p) } p in f' "$touched" - > "$work/$name.new" || true
		if [ -s "$work/$name.new" ]; then
			say "tiny: $name: warnings in the series' files:"
			sed 's/^/    /' "$work/$name.new"
			rc=1
		else
			say "tiny: $name builds, no warning in the series' files"
		fi
	done
	return "$rc"
}

if [ -n "$check" ]; then
	"check_$check"
	exit
fi

# The checks run one by one, each in its own process (so that set -e
# holds in it), their output into NAME.log; a check that cannot run
# (exit 2) or finds something (exit 1) is named in the summary.
checks=${CHECKS:-$ALL_CHECKS}
for c in $checks; do
	case " $ALL_CHECKS " in *" $c "*) ;; *) die "CHECKS: unknown check '$c' ($ALL_CHECKS)" ;; esac
done
exec > >(tee "$work/check-kernel.log") 2>&1
start=$(date +%s)
say "$(make -s -C "$src" kernelversion) + $((${#series[@]})) patches ($patches), -j$jobs, into $work"
failed=()
for c in $checks; do
	say "[$c] $(date +%T)"
	set +e
	"$0" run-check "$c" "$build" 2>&1 | tee "$work/$c.log"
	rc=${PIPESTATUS[0]}
	set -e
	case "$rc" in
	0) say "[$c] passed" ;;
	1) say "[$c] FAILED: new warnings ($work/$c.log)"; failed+=("$c") ;;
	*) say "[$c] FAILED: could not run ($work/$c.log)"; failed+=("$c") ;;
	esac
done
elapsed=$(( $(date +%s) - start ))
if [ ${#failed[@]} -gt 0 ]; then
	say "failed: ${failed[*]} (of $checks) in $((elapsed / 60)) min $((elapsed % 60)) s; log $work/check-kernel.log"
	exit 1
fi
say "passed: $checks in $((elapsed / 60)) min $((elapsed % 60)) s; log $work/check-kernel.log"
