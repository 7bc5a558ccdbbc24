#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Export the kernel series from a kernel git tree made by kernel-git.sh:
#
#   BASE..FIXES   kernel/patches/selftests-mm/  fixes to upstream mm selftests
#   FIXES..HEAD   kernel/patches/async-fork/    Async-fork
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
# Usage: export-series.sh KERNEL_GIT_TREE [BASE [FIXES]]
#        (defaults: the tags asyncfork-base and selftests-mm-fixes)
set -euo pipefail

die() { echo "export-series: $*" >&2; exit 1; }
{ [ $# -ge 1 ] && [ $# -le 3 ]; } || die "usage: export-series.sh KERNEL_GIT_TREE [BASE [FIXES]]"
tree=$1
base=${2:-asyncfork-base}
fixes=${3:-selftests-mm-fixes}
top=$(cd "$(dirname "$0")/.." && pwd)
patches=$top/kernel/patches

git -C "$tree" rev-parse -q --verify HEAD >/dev/null || die "$tree is not a git tree"
for r in "$base" "$fixes"; do
	git -C "$tree" rev-parse -q --verify "$r^{commit}" >/dev/null || die "no commit $r in $tree"
done
git -C "$tree" merge-base --is-ancestor "$base" "$fixes" || die "$fixes does not descend from $base"
git -C "$tree" merge-base --is-ancestor "$fixes" HEAD || die "HEAD does not descend from $fixes"
name=$(git -C "$tree" config user.name) || die "git config user.name is not set in $tree: the patches are sent in the submitter's name"
email=$(git -C "$tree" config user.email) || die "git config user.email is not set in $tree"
[ -n "$(git -C "$tree" status --porcelain --untracked-files=no)" ] && die "$tree has uncommitted changes"
others=$(git -C "$tree" log --format='%an <%ae>' "$base..HEAD" | sort -u | grep -vxF "$name <$email>" || true)
[ -z "$others" ] || die "commits by someone else than $name <$email>: $others (git rebase --exec 'git commit --amend --no-edit --reset-author')"

# export ONE RANGE TEMPLATE
export_one() {
	local dir=$patches/$1 range=$2 template=$3 out subject recipients to cc msgs date
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
export_one async-fork "$fixes..HEAD" "$top/kernel/cover-letter-async-fork.txt"

{
	echo "# Applied in order by scripts/prepare-source.sh to Debian's linux-source-6.12:"
	echo "# fixes to upstream mm selftests, then Async-fork.  Written by export-series.sh."
	for d in selftests-mm async-fork; do
		for f in "$patches/$d"/0*.patch; do
			case "$f" in */0000-*) ;; *) echo "${f#"$patches"/}" ;; esac
		done
	done
} > "$patches/series"
