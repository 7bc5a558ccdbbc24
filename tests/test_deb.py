# SPDX-License-Identifier: GPL-2.0
"""make test-deb's plan (asyncfork.test_deb), without booting anything."""

import shlex
import subprocess

import pytest

from asyncfork import fork_stress, package, test_deb


def test_find_package_wants_make_deb_first(tmp_path):
    with pytest.raises(SystemExit, match="run 'make deb' first"):
        package.find_package(tmp_path)


def test_find_package_skips_dbg_and_refuses_two(tmp_path):
    (tmp_path / "linux-image-6.12.117-asyncfork-cloud-amd64-dbg_1_amd64.deb").touch()
    img = tmp_path / "linux-image-6.12.117-asyncfork-cloud-amd64_1_amd64.deb"
    img.touch()
    assert package.find_package(tmp_path) == img
    (tmp_path / "linux-image-6.12.118-asyncfork-cloud-amd64_1_amd64.deb").touch()
    with pytest.raises(SystemExit, match="several"):
        package.find_package(tmp_path)


def test_walkers_boot_wraps_every_program_in_ksm_merge():
    progs = test_deb.walker_programs(30)
    assert progs[0].name == "walkers_on" and progs[-1].name == "walkers_check"
    shipped = test_deb.shipped_programs(30)
    assert [p.name for p in progs[1:-1]] == [p.name for p in shipped]
    for p, orig in zip(progs[1:-1], shipped):
        words = shlex.split(p.command)
        assert words[0].endswith("tests/guest/ksm-merge")
        assert words[1:3] == ["bash", "-c"] and words[3] == orig.command


def test_shipped_programs_cover_both_modes():
    names = [p.name for p in test_deb.shipped_programs(30)]
    assert names == ["fork_snapshot", "fork_snapshot_async", "async_fork",
                     "fork_stress", "redis_digest"]
    cmds = {p.name: p.command for p in test_deb.shipped_programs(30)}
    assert "vm.async_fork=0" in cmds["fork_snapshot"]
    assert "vm.async_fork=2" in cmds["fork_snapshot_async"]
    assert "-t 30" in cmds["fork_stress"]


def test_wrapped_commands_are_judged_as_the_program_they_run():
    for p in test_deb.walker_programs(30):
        if p.name == "fork_stress":
            assert fork_stress.is_program(p) and fork_stress.expects_async(p)
        elif p.name.startswith("walkers"):
            assert not fork_stress.is_program(p)


WALKERS = package.GUEST / "walkers.sh"

BEFORE = """ksm_full_scans 0
ksm_pages_scanned 0
damon_nr_tried 0
damon_sz_tried 0
damon_nr_applied 0
damon_sz_applied 0
damon_qt_exceeds 0
lru_gen_max 3
pgsteal_anon 0
numa_pte_updates 1446
numa_hint_faults 45
"""


def walkers_verdicts(tmp_path, after: str) -> str:
    (tmp_path / "walkers.before").write_text(BEFORE)
    (tmp_path / "walkers.after").write_text(after)
    res = subprocess.run(["bash", str(WALKERS), "verdicts"], cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    return res.stdout


def test_walkers_check_wants_damon_to_try_and_page_out(tmp_path):
    grown = (BEFORE.replace("ksm_full_scans 0", "ksm_full_scans 431")
             .replace("ksm_pages_scanned 0", "ksm_pages_scanned 2996663")
             .replace("lru_gen_max 3", "lru_gen_max 1505")
             .replace("numa_pte_updates 1446", "numa_pte_updates 99588")
             .replace("numa_hint_faults 45", "numa_hint_faults 65235"))
    # The first runs of make test-deb: DAMON's reclaim module never tried a region.
    out = walkers_verdicts(tmp_path, grown)
    assert "not ok 3 DAMON reclaim tried regions and paged out" in out
    assert [line for line in out.splitlines() if line.startswith("not ok")] == [
        "not ok 3 DAMON reclaim tried regions and paged out"]
    # Tried regions but paged nothing out: still not enough.
    tried = grown.replace("damon_nr_tried 0", "damon_nr_tried 232")
    assert "not ok 3 DAMON" in walkers_verdicts(tmp_path, tried)
    acted = tried.replace("damon_sz_applied 0", "damon_sz_applied 688128")
    out = walkers_verdicts(tmp_path, acted)
    assert "ok 3 DAMON reclaim tried regions and paged out" in out
    assert "not ok" not in out


def test_each_architecture_its_flavour_and_tcg_threads():
    assert test_deb.default_flavour("x86") == "cloud-amd64"
    assert test_deb.default_flavour("arm64") == "cloud-arm64"
    # The int3 oops under multi-threaded TCG is x86's: one thread there only.
    assert test_deb.tcg_single("x86") and not test_deb.tcg_single("arm64")


def test_modules_linked_into_a_foreign_root(tmp_path):
    unpacked, guest = tmp_path / "root", tmp_path / "arm64-root"
    with pytest.raises(SystemExit, match="one lib/modules"):
        package.link_modules(unpacked, guest)
    mods = unpacked / "lib/modules/6.12.117-asyncfork-cloud-arm64"
    mods.mkdir(parents=True)
    (mods / "modules.dep").touch()
    link = package.link_modules(unpacked, guest)
    assert link == guest / "lib/modules/6.12.117-asyncfork-cloud-arm64"
    assert link.resolve() == mods.resolve()
    assert package.link_modules(unpacked, guest) == link     # again: replaced
    link.unlink()
    link.mkdir()
    with pytest.raises(SystemExit, match="not the link test-deb makes"):
        package.link_modules(unpacked, guest)
