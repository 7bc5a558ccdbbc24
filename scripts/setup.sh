#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Install everything the project needs on a Debian 12 machine.  Idempotent:
# a second run only checks.  Needs root (or sudo) for apt.
#
# Usage: setup.sh [--yes]
#   --yes  also stop and disable the redis-server service that Debian
#          starts when it installs the package (the project runs its own
#          servers; without --yes, setup asks on a terminal and otherwise
#          only says that it is running)
set -euo pipefail

yes=0
for arg in "$@"; do
	case "$arg" in
	--yes|-y) yes=1 ;;
	-h|--help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) echo "setup: unknown argument '$arg' (setup.sh [--yes])" >&2; exit 2 ;;
	esac
done

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

# Kernel build, QEMU for the guest, Redis and hiredis for the demo,
# libraries the upstream mm selftests link against, stress-ng for the
# stress tests.  make deb: Debian's kernel configs (the same version as
# the source), dpkg-dev and debhelper for bindeb-pkg and for
# async-fork-tools (dpkg-buildpackage, dh), openssl for the module
# signing key, groff for the man page of async-fork-tools, lintian
# that checks that package, and the linter of the packaging scripts;
# libseccomp-dev and libcap-ng-dev for 'make virtiofsd' (make test-deb);
# sparse and Sphinx for make check-kernel (sparse, htmldocs).
apt_packages=(
	linux-source-6.12 build-essential bc bison flex libelf-dev libssl-dev
	cpio kmod rsync xz-utils ccache pahole python3-venv
	linux-config-6.12 dpkg-dev debhelper openssl groff-base lintian shellcheck
	qemu-system-x86 busybox-static udev iproute2
	redis-server redis-tools libhiredis-dev
	libnuma-dev libcap-dev liburing-dev
	stress-ng libseccomp-dev libcap-ng-dev
	sparse python3-sphinx
)

step() { printf '\n==> %s\n' "$*"; }

sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo

missing=()
for p in "${apt_packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
installed_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
if [ ${#missing[@]} -gt 0 ]; then
	step "apt: installing ${missing[*]}"
	$sudo apt-get update -q
	# make deb needs Debian's config of the very version of the source:
	# take that one when the source is already installed and it is offered.
	src_version=$(installed_version linux-source-6.12)
	for i in "${!missing[@]}"; do
		if [ "${missing[$i]}" = linux-config-6.12 ] && [ -n "$src_version" ] &&
		   apt-cache madison linux-config-6.12 | grep -qF "| $src_version |"; then
			missing[i]=linux-config-6.12=$src_version
		fi
	done
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
	step "apt: all ${#apt_packages[@]} packages present"
fi
src_version=$(installed_version linux-source-6.12)
config_version=$(installed_version linux-config-6.12)
if [ "$src_version" != "$config_version" ]; then
	echo "setup: warning: linux-source-6.12 is $src_version but linux-config-6.12 is $config_version;" \
	     "make deb needs the same version of both (apt-get install linux-source-6.12=V linux-config-6.12=V)" >&2
fi

# Debian starts redis-server as a service when it installs the package;
# the project runs its own servers and does not need it.
if command -v systemctl >/dev/null && systemctl is-active -q redis-server 2>/dev/null; then
	if [ "$yes" = 0 ] && [ "${CI:-}" != true ] && [ -t 0 ] && [ -t 1 ]; then
		read -r -p "setup: Debian's redis-server.service is running; the project does not use it. Stop and disable it? [y/N] " answer || answer=
		case "$answer" in [yY]*) yes=1 ;; esac
	fi
	if [ "$yes" = 1 ]; then
		step "redis: stopping and disabling redis-server.service (systemctl disable --now redis-server)"
		$sudo systemctl disable --now redis-server
	else
		step "redis: redis-server.service is running and is left alone (the project does not use it; 'scripts/setup.sh --yes' stops and disables it)"
	fi
fi

if [ ! -x .venv/bin/python ]; then
	step "python: creating .venv"
	python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import pytest, virtme_ng' 2>/dev/null ||
   ! cmp -s requirements.txt .venv/requirements.installed; then
	step "python: installing requirements.txt into .venv"
	.venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
	cp requirements.txt .venv/requirements.installed
else
	step "python: .venv up to date"
fi
# The harness itself (python/asyncfork), editable, so that its commands
# run this checkout's code: built with .venv's setuptools and the wheel
# package of requirements.txt (no build isolation: nothing is downloaded).
if [ "$(cd / && "$top/.venv/bin/python" -c 'import asyncfork; print(asyncfork.__file__)' 2>/dev/null)" != "$top/python/asyncfork/__init__.py" ] ||
   ! cmp -s pyproject.toml .venv/pyproject.installed; then
	step "python: installing the harness (python/asyncfork) into .venv, editable"
	.venv/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	cp pyproject.toml .venv/pyproject.installed
fi

[ -r /usr/src/linux-source-6.12.tar.xz ] ||
	{ echo "setup: /usr/src/linux-source-6.12.tar.xz is missing after installing linux-source-6.12" >&2; exit 1; }
step "setup done ($(basename /usr/src/linux-source-6.12.tar.xz), $(.venv/bin/vng --version))"
