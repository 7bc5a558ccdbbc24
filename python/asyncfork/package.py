# SPDX-License-Identifier: GPL-2.0
"""A packaged kernel (make deb's linux-image package) made ready to boot:
the package found and unpacked, its modules linked into a foreign guest's
root, and the programs that make test-deb and make soak KERNEL=deb add
around the tests (CFS bandwidth held on, memory mergeable by KSM)."""

import hashlib
import shlex
import subprocess
from pathlib import Path

from asyncfork import suite as harness
from asyncfork.paths import TOP

GUEST = TOP / "tests/guest"


def find_package(debs: Path) -> Path:
    """The one linux-image package (not its -dbg) in @debs."""
    found = [p for p in sorted(debs.glob("linux-image-*.deb"))
             if not p.name.split("_")[0].endswith("-dbg")]
    if not found:
        raise SystemExit(f"test-deb: no linux-image package in {debs}: run 'make deb' first "
                         f"(FLAVOUR= as for make deb)")
    if len(found) > 1:
        raise SystemExit(f"test-deb: several linux-image packages in {debs}: "
                         + ", ".join(p.name for p in found) + "; remove the old ones")
    return found[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack(deb: Path, dest: Path) -> Path:
    """Unpack @deb into @dest/root (again only if it changed); returns the
    kernel image, root/boot/vmlinuz-RELEASE."""
    digest = sha256(deb)
    stamp = dest / "unpacked.sha256"
    root = dest / "root"
    if not (stamp.exists() and stamp.read_text().strip() == digest):
        subprocess.run(["rm", "-rf", str(root)], check=True)
        root.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        stamp.write_text(digest + "\n")
    images = sorted((root / "boot").glob("vmlinuz-*"))
    if len(images) != 1:
        raise SystemExit(f"test-deb: expected one boot/vmlinuz-* in {deb.name}, found {len(images)}")
    return images[0]


def link_modules(unpacked: Path, guest_root: Path) -> Path:
    """A guest of another architecture boots on its own root filesystem
    (scripts/setup-arm64.sh), where virtme-ng looks for the modules: link
    the package's lib/modules/RELEASE there, to the unpacked copy, which
    the guest sees at the same path (the build folder is shared)."""
    found = sorted((unpacked / "lib/modules").glob("*/modules.dep"))
    if len(found) != 1:
        raise SystemExit(f"test-deb: expected one lib/modules/*/modules.dep in {unpacked}, "
                         f"found {len(found)}")
    release = found[0].parent
    link = guest_root / "lib/modules" / release.name
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        raise SystemExit(f"test-deb: {link} exists and is not the link test-deb makes: "
                         "remove it (or make arm64-root again)")
    link.symlink_to(release.resolve())
    return link


def cfs_bandwidth_on() -> harness.Program:
    """First in each boot: hold CFS bandwidth's static key on, so that
    cpu.max writes never patch code (the int3 oops of 6.12.117 under TCG,
    docs/findings/distro-kernel-test-deb.md section 1)."""
    return harness.Program("cfs_bandwidth_on", 60, str(GUEST / "cfs-bandwidth-on.sh"))


def under_ksm(p: harness.Program) -> harness.Program:
    """@p with all its memory mergeable by KSM."""
    cmd = f"{GUEST / 'ksm-merge'} bash -c {shlex.quote(p.command)}"
    return harness.Program(p.name, p.timeout, cmd, p.retries)
