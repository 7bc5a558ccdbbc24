#!/bin/bash
# Install everything the project needs on a Debian 12 machine.  Idempotent:
# a second run only checks.  Needs root (or sudo) for apt.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

# Kernel build, QEMU for the guest, Redis and hiredis for the demo,
# libraries the upstream mm selftests link against, stress-ng for the
# stress tests.
apt_packages=(
	linux-source-6.12 build-essential bc bison flex libelf-dev libssl-dev
	cpio kmod rsync xz-utils ccache pahole python3-venv
	qemu-system-x86 busybox-static udev iproute2
	redis-server redis-tools libhiredis-dev
	libnuma-dev libcap-dev liburing-dev
	stress-ng
)

step() { printf '\n==> %s\n' "$*"; }

sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo

missing=()
for p in "${apt_packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	step "apt: installing ${missing[*]}"
	$sudo apt-get update -q
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
	step "apt: all ${#apt_packages[@]} packages present"
fi

# Debian starts redis-server as a service; the project runs its own.
if command -v systemctl >/dev/null && systemctl is-active -q redis-server 2>/dev/null; then
	$sudo systemctl disable --now redis-server >/dev/null 2>&1 || true
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

[ -r /usr/src/linux-source-6.12.tar.xz ] ||
	{ echo "setup: /usr/src/linux-source-6.12.tar.xz is missing after installing linux-source-6.12" >&2; exit 1; }
step "setup done ($(basename /usr/src/linux-source-6.12.tar.xz), $(.venv/bin/vng --version))"
