# SPDX-License-Identifier: GPL-2.0
"""A boot where Async-fork must stay off: the path a Xen PV guest takes
(arch_async_fork_unsupported()), simulated with async_fork=off on the
command line of the same debug kernel.  One boot line says why, the
sysctl reads 0, every request to enable it fails with EOPNOTSUPP and
changes nothing, and forks stay the default ones (async_fork --expect-off
checks each and prints what failed)."""

import re

import pytest

from conftest import BUILD, missing
from asyncfork import programs, vm

OFF_LINE = "async_fork: off in this boot: async_fork=off"


@pytest.mark.guest
def test_async_fork_off_at_boot(kernel):
    prog = programs.SELFTESTS / "async_fork"
    if not prog.exists():
        missing(f"{prog} is not built: run 'make selftests'")
    res = vm.run(kernel, f"{prog} --expect-off", memory="1G", cpus=2, timeout=300,
                 append=["async_fork=off"], log_path=BUILD / "results/boot-off.log")
    assert res.ok, res.describe()
    assert OFF_LINE in res.console, f"no '{OFF_LINE}' line in {res.log_path}"
    assert re.search(r"^async_fork=off: \d+ passed, 0 failed", res.console, re.M), \
        res.describe()
