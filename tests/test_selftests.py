# SPDX-License-Identifier: GPL-2.0
"""The project's own kselftest programs (tests/selftests), in the suite boot."""

import warnings

import pytest

from asyncfork import skips
from conftest import OWN_PROGRAMS, suite_config


def test_guest_runs_patched_kernel(guest):
    # 6.12 LTS from Debian's source, with this project's series applied
    # (prepare-source.sh adds localversion-asyncfork).
    assert guest.kernelrelease.startswith("6.12."), guest.kernelrelease
    assert "-asyncfork" in guest.kernelrelease, guest.kernelrelease


def test_boot_log_clean(guest):
    reports = guest.vm.reports or []
    assert not reports, "kernel reports in the console log:\n\n" + "\n\n".join(reports)


@pytest.mark.parametrize("name", [p.name for p in OWN_PROGRAMS])
def test_own_program(guest, name, request):
    problems = guest.problems(name)
    assert not problems, "\n".join(problems)
    r = guest.results[name]
    # Every variant must really run on the test kernel: a skipped THP
    # variant would leave that path untested while the run looks green.
    # A case the configuration cannot run is in asyncfork.skips, with why.
    skipped = skips.judge(suite_config(request.config), name, r.cases).unexplained
    assert not skipped, f"cases skipped on the test kernel: {skipped}"
    for i, out in enumerate(r.failed_runs, 1):
        warnings.warn(f"{name}: run {i} of {len(r.failed_runs) + 1} failed and was repeated "
                      f"(retries in python/asyncfork/programs.py); its output:\n{out[-3000:]}")
