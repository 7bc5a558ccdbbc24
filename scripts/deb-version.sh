#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Print the part of a package version that names this repository's commit:
#
#   COUNT.DESCRIBE     e.g. 214.27402fd, 214.27402fd.dirty, 230.v1.0.3.gabc1234
#
# COUNT is the number of commits up to HEAD, so that a later commit sorts
# higher for dpkg and apt; DESCRIBE is `git describe --always --dirty`
# with every character that a Debian revision cannot hold ('-', '_', ...)
# turned into '.'.  build-deb.sh and build-tools-deb.sh put it in the
# versions of the kernel packages and of async-fork-tools.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "deb-version: $*" >&2; exit 1; }

git -C "$top" rev-parse --verify -q HEAD >/dev/null ||
	die "$top is not a git checkout with a commit: the package version must name the series' commit"
count=$(git -C "$top" rev-list --count HEAD)
describe=$(git -C "$top" describe --always --dirty)
echo "$count.$(printf '%s' "$describe" | tr -c 'A-Za-z0-9.+~' '.')"
