# SPDX-License-Identifier: GPL-2.0
"""make deb on the host, no guest: the kernel packages' config is Debian's
plus only the stated changes (asyncfork deb-config, scripts/build-deb.sh)."""

import lzma
import os
import subprocess
import tarfile
from pathlib import Path

from asyncfork import deb_config
import pytest
from conftest import BUILD, TOP, need

BUILD_DEB = TOP / "scripts/build-deb.sh"
DEBIAN_CONFIGS = Path("/usr/src/linux-config-6.12")
AMD64_FLAVOURS = ("cloud-amd64", "amd64")
# make deb ARCH=arm64: Debian's arm64 configs, which make arm64-root fetches.
ARM64_FLAVOURS = ("cloud-arm64", "arm64")
FLAVOURS = AMD64_FLAVOURS + ARM64_FLAVOURS
ARM64_CONFIGS = BUILD / "linux-config-arm64/usr/src/linux-config-6.12"


def run(args, **kw):
    return subprocess.run([str(a) for a in args], check=False, capture_output=True, text=True,
                          cwd=TOP, timeout=kw.pop("timeout", 120), **kw)


def cfg(text: str) -> dict:
    return deb_config.parse_config(text)


# --- the comparison, on small synthetic configs --------------------------

DEBIAN = cfg("""\
CONFIG_XEN_PV=y
CONFIG_MMU=y
CONFIG_BTRFS_FS=m
# CONFIG_ASYNC_FORK is not set
CONFIG_LOCALVERSION=""
CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0"
""")
CHANGES = cfg('CONFIG_ASYNC_FORK=y\nCONFIG_LOCALVERSION="-cloud-amd64"\n')


def ours(**edits) -> dict:
    """Debian's synthetic config plus CHANGES, then `edits` (None drops)."""
    c = dict(DEBIAN, **CHANGES)
    for k, v in edits.items():
        if v is None:
            c.pop(f"CONFIG_{k}", None)
        else:
            c[f"CONFIG_{k}"] = v
    return c


def test_debian_plus_changes_is_accepted():
    r = deb_config.compare(DEBIAN, ours(), CHANGES)
    assert r.ok and not r.warnings, r


@pytest.mark.parametrize("edit,symbol", [
    ({"BTRFS_FS": "y"}, "CONFIG_BTRFS_FS"),          # an extra changed option
    ({"MMU": "n"}, "CONFIG_MMU"),                    # y -> not set
    ({"MMU": None}, "CONFIG_MMU"),                   # dropped by olddefconfig
    ({"KSM": "y"}, "CONFIG_KSM"),                    # added, not in Debian's
    ({"ASYNC_FORK": "n"}, "CONFIG_ASYNC_FORK"),      # the change did not take
    ({"LOCALVERSION": '""'}, "CONFIG_LOCALVERSION"),  # ... nor this one
    ({"XEN_PV": '""'}, "CONFIG_XEN_PV"),             # y -> empty string
])
def test_every_unlisted_difference_is_an_error(edit, symbol):
    r = deb_config.compare(DEBIAN, ours(**edit), CHANGES)
    assert not r.ok
    assert len(r.errors) == 1 and r.errors[0].startswith(symbol + ":"), r.errors


def test_not_set_and_empty_string_differ():
    c = cfg('# CONFIG_A is not set\nCONFIG_B=""\n')
    assert c == {"CONFIG_A": "n", "CONFIG_B": '""'}
    assert not deb_config.compare(c, cfg('CONFIG_A=""\nCONFIG_B=""\n'), {}).ok


def test_toolchain_text_only_warns_and_only_when_named():
    other = ours(CC_VERSION_TEXT='"x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14) 12.2.0"')
    assert not deb_config.compare(DEBIAN, other, CHANGES).ok
    r = deb_config.compare(DEBIAN, other, CHANGES, {"CONFIG_CC_VERSION_TEXT"})
    assert r.ok and len(r.warnings) == 1 and "CONFIG_CC_VERSION_TEXT" in r.warnings[0]


@pytest.mark.parametrize("text", ["CONFIG_A=y\nCONFIG_A=m\n", "CONFIG_A=y\nrubbish\n"])
def test_malformed_config_is_refused(text):
    with pytest.raises(deb_config.ConfigError):
        cfg(text)


# As build-deb.sh runs it (the system's python3, none of the harness's
# dependencies), and through the path older records name.
@pytest.mark.parametrize("command", [
    ["env", f"PYTHONPATH={TOP / 'python'}", "python3", "-m", "asyncfork", "deb-config"],
    ["python3", TOP / "scripts/deb_config.py"]])
def test_command_line(tmp_path, command):
    (tmp_path / "debian.config.xz").write_bytes(lzma.compress(b"CONFIG_A=y\nCONFIG_B=m\n"))
    (tmp_path / "changes").write_text("# what changes\nCONFIG_C=y\n")
    (tmp_path / "good").write_text("CONFIG_A=y\nCONFIG_B=m\nCONFIG_C=y\n")
    (tmp_path / "bad").write_text("CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=y\n")

    def check(config):
        return run(command + ["check", "--debian", tmp_path / "debian.config.xz",
                              "--config", tmp_path / config, "--changes", tmp_path / "changes"])
    assert check("good").returncode == 0
    bad = check("bad")
    assert bad.returncode == 1 and "CONFIG_B: Debian has m, this config has y" in bad.stderr
    assert check("missing").returncode == 2


# --- the change list of build-deb.sh --------------------------------------

# A second statement of what make deb may change, so that a new line in
# build-deb.sh's changes() has to be agreed here too.
ALLOWED = {"CONFIG_ASYNC_FORK", "CONFIG_ARCH_SUPPORTS_ASYNC_FORK", "CONFIG_LOCALVERSION",
           "CONFIG_MODULE_SIG_ALL", "CONFIG_MODULE_SIG_KEY", "CONFIG_SYSTEM_TRUSTED_KEYS",
           "CONFIG_BUILD_SALT", "CONFIG_ASYNC_FORK_DEBUG"}


def changes(flavour: str) -> dict:
    r = run([BUILD_DEB, "--print-changes", flavour])
    assert r.returncode == 0, r.stderr
    return cfg(r.stdout)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_change_list_is_async_fork_and_signing_only(flavour):
    c = changes(flavour)
    assert set(c) == ALLOWED
    assert c["CONFIG_ASYNC_FORK"] == "y"
    # The debugfs switches that turn hooks off never ship.
    assert c["CONFIG_ASYNC_FORK_DEBUG"] == "n"
    assert c["CONFIG_LOCALVERSION"] == f'"-{flavour}"'
    assert c["CONFIG_MODULE_SIG_KEY"] == '"certs/signing_key.pem"'


def debian_config(flavour: str) -> Path:
    if flavour in ARM64_FLAVOURS:
        # Only for make deb ARCH=arm64, which make test does not need.
        p = ARM64_CONFIGS / f"config.arm64_none_{flavour}.xz"
        if not p.exists():
            pytest.skip(f"{p} is missing: make arm64-root fetches it (for make deb ARCH=arm64)")
        return p
    p = DEBIAN_CONFIGS / f"config.amd64_none_{flavour}.xz"
    if not p.exists():
        pytest.fail(f"{p} is missing: run scripts/setup.sh (installs linux-config-6.12)")
    return p


def assert_debian_plus_changes(config: dict, flavour: str, where: str):
    r = deb_config.compare(deb_config.load_config(debian_config(flavour)), config,
                           changes(flavour), {"CONFIG_CC_VERSION_TEXT"})
    assert r.ok, f"{where}:\n" + "\n".join(r.errors)
    assert config.get("CONFIG_ASYNC_FORK") == "y"
    if flavour in AMD64_FLAVOURS:
        assert config.get("CONFIG_XEN_PV") == "y"


@pytest.mark.slow
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_olddefconfig_gives_debian_plus_changes(flavour, tmp_path):
    """The configuration step of make deb, for real (seconds, no build)."""
    need(BUILD / "linux/Makefile", "build/linux is not prepared: run 'make source'")
    debian_config(flavour)
    (tmp_path / "linux").symlink_to(BUILD / "linux")
    env = None
    if flavour in ARM64_FLAVOURS:
        (tmp_path / "linux-config-arm64").symlink_to(BUILD / "linux-config-arm64")
        env = {**os.environ, "ARCH": "arm64"}
    r = run([BUILD_DEB, "--config-only", flavour, tmp_path], timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    built = deb_config.load_config(tmp_path / f"deb-{flavour}/.config")
    assert_debian_plus_changes(built, flavour, f"olddefconfig of {flavour}")


def built_configs():
    return sorted(BUILD.glob("deb-*/.config"))


def test_built_deb_config_is_debian_plus_changes():
    """What make deb configured last, if it ran here."""
    found = built_configs()
    if not found:
        pytest.skip("no build/deb-*/.config: make deb has not run in this clone")
    for path in found:
        flavour = path.parent.name.removeprefix("deb-")
        assert flavour in FLAVOURS, path
        assert_debian_plus_changes(deb_config.load_config(path), flavour, str(path))


def test_packaged_config_is_debian_plus_changes(tmp_path):
    """/boot/config-* inside the linux-image package that make deb left."""
    images = sorted(p for p in BUILD.glob("debs/*/linux-image-*.deb") if "-dbg_" not in p.name)
    if not images:
        pytest.skip("no build/debs/*/linux-image-*.deb: make deb has not run in this clone")
    for deb in images:
        flavour = deb.parent.name
        tar = tmp_path / f"{flavour}.tar"
        with open(tar, "wb") as f:
            subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=f, check=True)
        with tarfile.open(tar) as t:
            member = next(m for m in t.getmembers()
                          if m.name.startswith("./boot/config-") and m.isfile())
            text = t.extractfile(member).read().decode()
        assert_debian_plus_changes(deb_config.parse_config(text, member.name), flavour,
                                   f"{deb.name}:{member.name}")


# --- build-deb.sh around the build, with a stand-in for the long part -----

FAKE_MAKE = r"""#!/bin/bash
# Real make for everything but bindeb-pkg, which leaves packages the way
# kbuild does (beside the build folder) without compiling anything.
for a in "$@"; do [ "$a" = bindeb-pkg ] && fake=1; done
[ -n "${fake:-}" ] || exec /usr/bin/make "$@"
for a; do case $a in O=*) out=${a#O=};; KDEB_PKGVERSION=*) ver=${a#*=};; esac; done
printf '%s\n' "$@" > "$out/make-args"
rel=6.12.0-asyncfork$(sed -n 's/^CONFIG_LOCALVERSION="\(.*\)"$/\1/p' "$out/.config")
mkdir -p "$out/include/config" && echo "$rel" > "$out/include/config/kernel.release"
cp /bin/true "$out/vmlinux" && echo btf > "$out/btf" &&
	objcopy --add-section .BTF="$out/btf" "$out/vmlinux"
s=$(mktemp -d) && mkdir -p "$s/DEBIAN" "$s/boot" "$s/lib/modules/$rel/kernel/fs/ext4"
echo image > "$s/boot/vmlinuz-$rel" && cp "$out/.config" "$s/boot/config-$rel"
{ echo module; [ -n "${UNSIGNED:-}" ] || printf '~Module signature appended~\n'; } |
	xz > "$s/lib/modules/$rel/kernel/fs/ext4/ext4.ko.xz"
for p in "linux-image-$rel" "linux-headers-$rel" linux-libc-dev; do
	printf 'Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: t <t@t.org>\nDescription: t\n' \
		"$p" "$ver" > "$s/DEBIAN/control"
	dpkg-deb --root-owner-group -b "$s" "$out/../${p}_${ver}_amd64.deb" >/dev/null
	rm -rf "$s/boot" "$s/lib"
done
touch "$out/../linux-upstream_${ver}_amd64.buildinfo" "$out/../linux-upstream_${ver}_amd64.changes"
"""


@pytest.fixture
def stand_in_make(tmp_path):
    need(BUILD / "linux/Makefile", "build/linux is not prepared: run 'make source'")
    debian_config("cloud-amd64")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(FAKE_MAKE)
    (bin_dir / "make").chmod(0o755)
    build = tmp_path / "build"
    build.mkdir()
    (build / "linux").symlink_to(BUILD / "linux")

    def build_deb(**env):
        e = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", DEB_DBG="0", **env)
        return run([BUILD_DEB, "cloud-amd64", build], env=e, timeout=300)
    return build, build_deb


@pytest.mark.slow
def test_build_deb_around_the_build(stand_in_make):
    """Everything of make deb but the compiler: the arguments the build gets,
    where the packages land, and the checks of what was packaged."""
    build, build_deb = stand_in_make
    r = build_deb()
    assert r.returncode == 0, r.stdout + r.stderr
    args = (build / "deb-cloud-amd64/make-args").read_text().splitlines()
    commit = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    version = next(a for a in args if a.startswith("KDEB_PKGVERSION=")).split("=", 1)[1]
    assert version.startswith("6.12.") and "-1+asyncfork." in version and commit in version
    assert "CC=ccache x86_64-linux-gnu-gcc-12" in args or "CC=x86_64-linux-gnu-gcc-12" in args
    assert "DPKG_FLAGS=-Ppkg.linux-upstream.nokerneldbg" in args
    debs = sorted(p.name for p in (build / "debs/cloud-amd64").glob("*.deb"))
    assert [d.split("_")[0] for d in debs] == ["linux-headers-6.12.0-asyncfork-cloud-amd64",
                                              "linux-image-6.12.0-asyncfork-cloud-amd64"]
    assert list((build / "debs/cloud-amd64/extra").glob("linux-libc-dev_*.deb"))
    assert not list(build.glob("*.deb")), "packages left beside the build folder"
    assert "modules (ext4.ko.xz checked: signed), BTF" in r.stdout


@pytest.mark.slow
def test_build_deb_logs_and_shows_progress(stand_in_make):
    """The package build's output goes to its log; a progress line here."""
    build, build_deb = stand_in_make
    r = build_deb()
    assert r.returncode == 0, r.stdout + r.stderr
    log = build / "deb-cloud-amd64/bindeb-pkg.log"
    assert "build-deb: cloud-amd64: 0 steps in 0:0" in r.stdout and f"log: {log}" in r.stdout
    assert (build / "deb-cloud-amd64/build-stats.json").exists()


@pytest.mark.slow
def test_build_deb_refuses_unsigned_modules(stand_in_make):
    _, build_deb = stand_in_make
    r = build_deb(UNSIGNED="1")
    assert r.returncode == 1 and "is not signed" in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("flavour,arch,message", [
    ("cloud-amd64", "arm64", "FLAVOUR=cloud-amd64 is not for ARCH=arm64"),
    ("cloud-arm64", "x86", "FLAVOUR=cloud-arm64 is not for ARCH=x86"),
    ("sparc64", "", "unknown flavour 'sparc64'"),
])
def test_flavour_and_arch_must_agree(flavour, arch, message, tmp_path):
    # Refused before anything is configured: nothing appears in BUILD_DIR.
    r = run([BUILD_DEB, "--config-only", flavour, tmp_path], env={**os.environ, "ARCH": arch})
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []
