# SPDX-License-Identifier: GPL-2.0
"""Host tests say what they need: on a fresh clone (nothing built, no
prepared tree) plain pytest skips what needs a build with the make target
that makes it, and every guest test with one reason; make check and make
test (--require-built) fail instead.  Runs pytest on an empty build folder."""

import os
import subprocess
import sys

from conftest import TOP

INHERITED = ("ARCH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def pytest_on(build, *args):
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    env.update(ASYNCFORK_BUILD=str(build), PYTHONPATH=str(TOP / "python"))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
                           *args], cwd=TOP, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_guest_tests_skip_with_one_reason(tmp_path):
    r = pytest_on(tmp_path, "tests/test_selftests.py", "tests/test_boot_off.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert " passed" not in r.stdout and " skipped" in r.stdout
    reason = f"no kernel image at {tmp_path}/debug"
    assert f"guest tests skipped: {reason}" in r.stdout, r.stdout
    # One reason for all of them.
    skips = [line for line in r.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all(reason in line for line in skips), skips
    assert "kernel under test: none built" in r.stdout


def test_make_test_stops_without_a_kernel(tmp_path):
    r = pytest_on(tmp_path, "--require-built", "tests/test_selftests.py")
    assert r.returncode == 2 and f"no kernel image at {tmp_path}/debug" in r.stdout + r.stderr


def test_host_tests_skip_what_is_not_built(tmp_path):
    r = pytest_on(tmp_path, "tests/test_bench_sync.py", "tests/test_style.py",
                  "-k", "forkbench or patch_style")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no build/bench/forkbench: run make bench-programs" in r.stdout
    assert "build/linux is not prepared: run 'make source'" in r.stdout
    r = pytest_on(tmp_path, "--require-built", "tests/test_bench_sync.py", "-k", "forkbench")
    assert r.returncode == 1 and "no build/bench/forkbench: run make bench-programs" in r.stdout


def test_make_check_names_setup(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    r = subprocess.run(["make", "check", f"BUILD={tmp_path}", f"PYTHON={tmp_path}/no-venv/python"],
                       cwd=TOP, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0 and "run scripts/setup.sh first" in r.stderr, r.stderr
    assert not (tmp_path / "linux").exists()
