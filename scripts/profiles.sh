#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The guest kernel profiles of kernel/configs/profiles, for the scripts
# that build them (build-kernel.sh, build-unpatched.sh).
#
# Usage: profiles.sh names            "lean, debug, off, kasan or kcsan"
#        profiles.sh fragments NAME   the fragment files of NAME, one a
#                                     line; exit 1 if the list has no NAME
set -euo pipefail

list=$(cd "$(dirname "$0")/.." && pwd)/kernel/configs/profiles

case "${1:-} $#" in
"names 1")
	sed 's/#.*//' "$list" |
		awk 'NF { n[++c] = $1 }
		     END { for (i = 1; i <= c; i++)
			     printf "%s%s", n[i], (i == c ? "\n" : i == c - 1 ? " or " : ", ") }' ;;
"fragments 2")
	sed 's/#.*//' "$list" |
		awk -v p="$2" -v d="$(dirname "$list")" '
			$1 == p { for (i = 2; i <= NF; i++) print d "/" $i ".config"; found = 1 }
			END { exit !found }' ;;
*)
	echo "usage: profiles.sh names | profiles.sh fragments NAME" >&2
	exit 2 ;;
esac
