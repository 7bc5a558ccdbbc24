#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Export the kernel series from a kernel git tree made by kernel-git.sh:
#
#   BASE..FIXES   kernel/patches/selftests-mm/  fixes to upstream mm selftests
#   FIXES..AF     kernel/patches/async-fork/    Async-fork
#   AF..HEAD      kernel/patches/mm-fixes/      fixes to 6.12 itself
#
# mm-fixes depends on neither of the others: it is exported from its
# commits picked onto BASE, so that it applies to BASE and its
# base-commit: is true.  In the tree, and in kernel/patches/series, it
# comes last only so that adding a fix leaves every prefix of the other
# two as make check-series has already checked it.
#
# Each folder gets what `git format-patch --cover-letter --base` makes:
# whole patches (new files included), numbered, with base-commit:, the
# recipients that scripts/get_maintainer.pl names (and those of the
# template's "Cc:" lines), and a cover letter whose subject and text come
# from kernel/cover-letter-<folder>.txt: its first line is the subject,
# then optional "Cc: name <address>, ..." lines, a blank line, the text.  kernel/patches/series is rewritten to
# apply both in order.  From: and Signed-off-by: name the submitter: the
# tree's git config user.name and user.email, which must be set.
#
# Usage: export-series.sh KERNEL_GIT_TREE [BASE [FIXES [AF]]]
#        (defaults: the tags asyncfork-base, selftests-mm-fixes and
#        async-fork-end)
set -euo pipefail

die() { echo "export-series: $*" >&2; exit 1; }
{ [ $# -ge 1 ] && [ $# -le 4 ]; } || die "usage: export-series.sh KERNEL_GIT_TREE [BASE [FIXES [AF]]]"
tree=$1
base=${2:-asyncfork-base}
fixes=${3:-selftests-mm-fixes}
af=${4:-async-fork-end}
top=$(cd "$(dirname "$0")/.." && pwd)
patches=$top/kernel/patches

git -C "$tree" rev-parse -q --verify HEAD >/dev/null || die "$tree is not a git tree"
for r in "$base" "$fixes" "$af"; do
	git -C "$tree" rev-parse -q --verify "$r^{commit}" >/dev/null || die "no commit $r in $tree"
done
git -C "$tree" merge-base --is-ancestor "$base" "$fixes" || die "$fixes does not descend from $base"
git -C "$tree" merge-base --is-ancestor "$fixes" "$af" || die "$af does not descend from $fixes"
git -C "$tree" merge-base --is-ancestor "$af" HEAD || die "HEAD does not descend from $af"
name=$(git -C "$tree" config user.name) || die "git config user.name is not set in $tree: the patches are sent in the submitter's name"
email=$(git -C "$tree" config user.email) || die "git config user.email is not set in $tree"
[ -n "$(git -C "$tree" status --porcelain --untracked-files=no)" ] && die "$tree has uncommitted changes"
others=$(git -C "$tree" log --format='%an <%ae>' "$base..HEAD" | sort -u | grep -vxF "$name <$email>" || true)
[ -z "$others" ] || die "commits by someone else than $name <$email>: $others (git rebase --exec 'git commit --amend --no-edit --reset-author')"

# export ONE RANGE TEMPLATE
export_one() {
	local dir=$patches/$1 range=$2 template=$3 tree=${4:-$tree} out subject recipients to cc msgs date
	[ -r "$template" ] || die "no cover letter text $template"
	out=$(mktemp -d)
	git -C "$tree" format-patch -q --no-signature --zero-commit --signoff \
		--cover-letter --base="$base" -o "$out" "$range"
	# Recipients of the whole series, on every message of it.
	msgs=("$out"/0*.patch)
	# Not the cover letter (msgs[0]): it has no diff.
	recipients=$(cd "$tree" && scripts/get_maintainer.pl --no-git --no-rolestats \
			--no-multiline --separator ', ' "${msgs[@]:1}") ||
		die "scripts/get_maintainer.pl failed in $tree"
	recipients=$( { printf '%s\n' "$recipients"
			sed -n '2,/^$/s/^Cc: //p' "$template"; } | sed 's/, /\n/g' | sed '/^$/d')
	# To: linux-mm if the series touches mm, else the first list named;
	# Cc: everyone else but the submitter, who sends it.
	recipients=$(printf '%s\n' "$recipients" | grep -vF "<$email>" || true)
	to=$(printf '%s\n' "$recipients" | grep -m1 -x 'linux-mm@kvack\.org' ||
	     printf '%s\n' "$recipients" | grep -m1 '@vger\.kernel\.org' || true)
	# Sorted: get_maintainer.pl's order varies from run to run.
	cc=$(printf '%s\n' "$recipients" | grep -vxF "$to" | LC_ALL=C sort -u | paste -sd, - | sed 's/,/, /g')
	subject=$(head -n1 "$template")
	# The cover letter is dated as the series' last commit, not now: an
	# export of the same commits gives the same files.
	date=$(git -C "$tree" log -1 --format=%aD "${range##*..}")
	python3 - "$out" "$template" "$subject" "$to" "$cc" "$date" <<'PY'
import glob, os, re, sys
out, template, subject, to, cc, date = sys.argv[1:]
blurb = open(template).read().split("\n\n", 1)[1].strip("\n")
for path in sorted(glob.glob(os.path.join(out, "*.patch"))):
    s = open(path).read()
    head, sep, body = s.partition("\n\n")
    extra = "".join(f"{k}: {v}\n" for k, v in (("To", to), ("Cc", cc)) if v)
    head = head.replace("\nSubject: ", "\n" + extra + "Subject: ", 1)
    body = body.replace("*** SUBJECT HERE ***", subject.split("] ", 1)[-1])
    head = head.replace("*** SUBJECT HERE ***", subject.split("] ", 1)[-1])
    body = body.replace("*** BLURB HERE ***", blurb)
    if os.path.basename(path).startswith("0000-"):
        head = re.sub(r"^Date: .*$", "Date: " + date, head, count=1, flags=re.M)
    open(path, "w").write(head + sep + body)
PY
	rm -rf "$dir"
	mkdir -p "$dir"
	cp "$out"/*.patch "$dir"/
	rm -rf "$out"
	echo "export-series: $1: $(find "$dir" -name '0*.patch' ! -name '0000-*' | wc -l) patches and a cover letter"
}

export_one selftests-mm "$base..$fixes" "$top/kernel/cover-letter-selftests-mm.txt"
export_one async-fork "$fixes..$af" "$top/kernel/cover-letter-async-fork.txt"
# mm-fixes: its commits picked onto the base, in a worktree of their own.
if [ -n "$(git -C "$tree" rev-list "$af..HEAD")" ]; then
	picked=$(mktemp -d)
	head=$(git -C "$tree" rev-parse HEAD)
	git -C "$tree" worktree add -q --detach "$picked" "$base"
	git -C "$picked" -c core.hooksPath=/dev/null cherry-pick --allow-empty "$af..$head" >/dev/null 2>&1 ||
		{ git -C "$tree" worktree remove --force "$picked"; die "the commits after $af do not apply to $base alone"; }
	export_one mm-fixes "$base..HEAD" "$top/kernel/cover-letter-mm-fixes.txt" "$picked"
	git -C "$tree" worktree remove --force "$picked"
else
	rm -rf "$patches/mm-fixes"
fi

{
	echo "# Applied in order by scripts/prepare-source.sh to Debian's linux-source-6.12:"
	echo "# fixes to upstream mm selftests, Async-fork, then fixes to 6.12 itself (which"
	echo "# apply to the base alone).  Written by export-series.sh."
	for d in selftests-mm async-fork mm-fixes; do
		[ -d "$patches/$d" ] || continue
		for f in "$patches/$d"/0*.patch; do
			case "$f" in */0000-*) ;; *) echo "${f#"$patches"/}" ;; esac
		done
	done
} > "$patches/series"
