# SPDX-License-Identifier: GPL-2.0
"""The sanitizer guest configs survive Kconfig: scripts/build-kernel.sh
--config-only merges each flavour's fragments into a scratch folder, and
refuses any option Kconfig dropped; here the options that make the flavour
what it is are checked as well.  Host-only, seconds per flavour, nothing
compiled (it needs the prepared tree of make source)."""

import subprocess

import pytest

from conftest import BUILD, TOP

SCRIPT = TOP / "scripts/build-kernel.sh"

FLAVOURS = {
    "kasan": ["CONFIG_KASAN=y", "CONFIG_KASAN_GENERIC=y", "CONFIG_KASAN_INLINE=y",
              "CONFIG_KASAN_VMALLOC=y", "CONFIG_VMAP_STACK=y", "CONFIG_PROVE_LOCKING=y",
              "CONFIG_KFENCE=y", "CONFIG_PAGE_TABLE_CHECK=y", "CONFIG_ASYNC_FORK=y",
              'CONFIG_LOCALVERSION="-kasan"'],
    "kcsan": ["CONFIG_KCSAN=y", "# CONFIG_KASAN is not set", "# CONFIG_KCSAN_STRICT is not set",
              "# CONFIG_KCSAN_INTERRUPT_WATCHER is not set", "CONFIG_PROVE_LOCKING=y",
              "CONFIG_DEBUG_VM=y", "CONFIG_ASYNC_FORK=y", 'CONFIG_LOCALVERSION="-kcsan"'],
}


def build_kernel(*args, timeout=300):
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=TOP, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_sanitizer_config(flavour, tmp_path):
    if not (BUILD / "linux/Makefile").exists():
        pytest.skip("build/linux is not prepared: run 'make source'")
    build = tmp_path / "build"
    build.mkdir()
    (build / "linux").symlink_to(BUILD / "linux")
    p = build_kernel("--config-only", flavour, build)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"asyncfork-{flavour})" in p.stdout, p.stdout
    config = (build / flavour / ".config").read_text().splitlines()
    for want in FLAVOURS[flavour]:
        assert want in config, want
    assert not (build / flavour / "vmlinux").exists()


def test_unknown_profile(tmp_path):
    p = build_kernel("--config-only", "tsan", tmp_path, timeout=30)
    assert p.returncode != 0 and "unknown kernel profile 'tsan'" in p.stderr
    assert "kasan or kcsan" in p.stderr
