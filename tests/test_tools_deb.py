# SPDX-License-Identifier: GPL-2.0
"""The async-fork-tools package, built on the host in seconds by debhelper
(scripts/build-tools-deb.sh, packaging/async-fork-tools/debian/): what it
holds, that its version names the commit, that lintian finds nothing, and
what its async-fork-run says and does for each answer the kernel can give
(no guest: a preloaded prctl() stands in for the kernels this host does
not run)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import TOP


def run(args, **kw):
    kw.setdefault("cwd", TOP)
    return subprocess.run([str(a) for a in args], check=False, capture_output=True, text=True,
                          timeout=kw.pop("timeout", 120), **kw)


TOOLS_FILES = {
    "./usr/bin/async-fork-run",
    "./usr/share/man/man1/async-fork-run.1.gz",
    "./usr/share/doc/async-fork-tools/copyright",
    "./usr/share/doc/async-fork-tools/changelog.gz",
    "./usr/share/doc/async-fork-tools/examples/README",
    "./usr/share/doc/async-fork-tools/examples/redis-server.service.d/async-fork.conf",
    "./usr/share/doc/async-fork-tools/examples/valkey-server.service.d/async-fork.conf",
}


SOURCE = TOP / "packaging/async-fork-tools"


@pytest.fixture(scope="module")
def tools_deb(tmp_path_factory) -> Path:
    missing = [t for t in ("dpkg-buildpackage", "dh") if not shutil.which(t)]
    if missing:
        pytest.skip(f"no {' or '.join(missing)} on this host: building the package needs "
                    "dpkg-dev and debhelper (scripts/setup.sh installs them)")
    out = tmp_path_factory.mktemp("tools-deb")
    r = run([TOP / "scripts/build-tools-deb.sh", out])
    assert r.returncode == 0, r.stdout + r.stderr
    debs = list((out / "debs").glob("async-fork-tools_*.deb"))
    assert len(debs) == 1, debs
    return debs[0]


def test_tools_package_is_lintian_clean(tools_deb):
    """lintian, Debian's own checker, finds no error and no warning (and
    says which info and pedantic tags it sees, for the failure message)."""
    if not shutil.which("lintian"):
        pytest.skip("lintian is not installed (apt-get install --no-install-recommends lintian; "
                    "scripts/setup.sh installs it)")
    r = run(["lintian", "--fail-on", "error,warning", "--info", "--pedantic", tools_deb],
            timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    tags = [line for line in r.stdout.splitlines() if re.match(r"[EW]: ", line)]
    assert not tags, r.stdout


def test_tools_package_is_built_by_debhelper(tools_deb):
    """The package comes from debian/ by dh (dpkg-buildpackage -b), not
    from a staging folder packed by hand: its source says so, and the
    build leaves the .changes and .buildinfo of dpkg-buildpackage."""
    rules = (SOURCE / "debian/rules").read_text()
    assert re.search(r"^%:\n\tdh \$@$", rules, re.M), rules
    control = (SOURCE / "debian/control").read_text()
    assert "debhelper-compat (= 13)" in control
    maintainer = re.search(r"^Maintainer: (.*)$", control, re.M).group(1)
    assert "localhost" not in maintainer
    assert (SOURCE / "debian/source/format").read_text().strip() == "3.0 (native)"
    assert (SOURCE / "debian/copyright").read_text().startswith(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/")
    work = tools_deb.parent.parent / "tools-deb"
    version = run(["dpkg-deb", "-f", tools_deb, "Version"]).stdout.strip()
    assert (work / tools_deb.name).exists()
    assert list(work.glob(f"async-fork-tools_{version}_*.changes"))
    assert run(["dpkg-deb", "-f", tools_deb, "Maintainer"]).stdout.strip() == maintainer


def test_tools_package_files(tools_deb):
    listing = run(["dpkg-deb", "-c", tools_deb]).stdout.splitlines()
    files = {line.split()[-1] for line in listing if not line.startswith("d")}
    assert files == TOOLS_FILES
    modes = {line.split()[-1]: line.split()[0] for line in listing}
    assert modes["./usr/bin/async-fork-run"] == "-rwxr-xr-x"
    assert all(line.split()[1] == "root/root" for line in listing)


def test_tools_package_version_names_the_commit(tools_deb):
    fields = dict(line.split(": ", 1) for line in
                  run(["dpkg-deb", "-f", tools_deb, "Package", "Version", "Depends"]).stdout.splitlines())
    suffix = run([TOP / "scripts/deb-version.sh"]).stdout.strip()
    commit = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    assert fields["Package"] == "async-fork-tools"
    assert fields["Version"] == f"0.{suffix}" and commit in fields["Version"]
    assert fields["Depends"].startswith("libc6")


def test_tools_package_contents_work(tools_deb, tmp_path):
    subprocess.run(["dpkg-deb", "-x", str(tools_deb), str(tmp_path)], check=True)
    version = run(["dpkg-deb", "-f", tools_deb, "Version"]).stdout.strip()
    r = run([tmp_path / "usr/bin/async-fork-run", "--version"])
    assert r.returncode == 0 and version in r.stdout
    man = subprocess.run(["gzip", "-dc", str(tmp_path / "usr/share/man/man1/async-fork-run.1.gz")],
                         capture_output=True, check=True).stdout
    page = subprocess.run(["groff", "-man", "-Tutf8", "-ww"], input=man, capture_output=True,
                          check=False)
    assert page.returncode == 0 and not page.stderr, page.stderr.decode()
    text = re.sub(r".\x08", "", page.stdout.decode()).replace("\u2010", "-")
    assert "--strict" in text and f"async-fork-tools {version}" in text.splitlines()[0]
    for unit in ("redis-server", "valkey-server"):
        conf = (tmp_path / f"usr/share/doc/async-fork-tools/examples/{unit}.service.d"
                / "async-fork.conf").read_text().splitlines()
        assert "ExecPaths=/usr/bin/async-fork-run" in conf
        assert conf.index("ExecStart=") < conf.index(
            next(line for line in conf if line.startswith(f"ExecStart=/usr/bin/async-fork-run /usr/bin/{unit} ")))


def test_redis_drop_in_loads_into_debians_unit(tools_deb, tmp_path):
    """systemd-analyze verify: the drop-in on Debian's redis-server.service
    (installed by scripts/setup.sh) parses, and the command it runs exists."""
    unit = Path("/lib/systemd/system/redis-server.service")
    if not shutil.which("systemd-analyze") or not unit.exists():
        pytest.skip("no systemd-analyze or no redis-server.service on this host")
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(tools_deb), str(root)], check=True)
    units = tmp_path / "units"
    (units / "redis-server.service.d").mkdir(parents=True)
    shutil.copy(unit, units)
    conf = (root / "usr/share/doc/async-fork-tools/examples/redis-server.service.d"
            / "async-fork.conf").read_text()
    (units / "redis-server.service.d/async-fork.conf").write_text(
        conf.replace("/usr/bin/async-fork-run", str(root / "usr/bin/async-fork-run")))
    r = run(["systemd-analyze", "verify", "redis-server.service"], cwd=units,
            env=dict(os.environ, SYSTEMD_UNIT_PATH=f"{units}:"))
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


# --- async-fork-run's answers to what the kernel can do -------------------

SHIM = r"""
#include <errno.h>
#include <stdlib.h>
int prctl(int option, ...)
{
	(void)option;
	errno = atoi(getenv("SHIM_ERRNO"));
	return errno ? -1 : 0;
}
"""


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory):
    """async-fork-run, and a preload that makes prctl() fail with SHIM_ERRNO."""
    d = tmp_path_factory.mktemp("wrapper")
    (d / "shim.c").write_text(SHIM)
    for args in (["-o", d / "async-fork-run", SOURCE / "async-fork-run.c"],
                 ["-shared", "-fPIC", "-o", d / "shim.so", d / "shim.c"]):
        r = run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", *args])
        assert r.returncode == 0, r.stderr
    return d


def afr(wrapper, *args, errno=None):
    env = dict(os.environ)
    if errno is not None:
        env.update(LD_PRELOAD=str(wrapper / "shim.so"), SHIM_ERRNO=str(errno))
    return run([wrapper / "async-fork-run", *args], env=env, timeout=30)


EXIT7 = ["sh", "-c", "exit 7"]


@pytest.mark.skipif(os.path.exists("/proc/sys/vm/async_fork"),
                    reason="this host's kernel has Async-fork: no EINVAL to see")
def test_kernel_without_async_fork_warns_and_runs(wrapper):
    r = afr(wrapper, *EXIT7)
    assert r.returncode == 7, r.stderr
    assert "warning: the running kernel has no Async-fork" in r.stderr
    r = afr(wrapper, "--strict", *EXIT7)
    assert r.returncode == 1 and "not starting sh (--strict)" in r.stderr


def test_switched_off_warns_and_runs(wrapper):
    r = afr(wrapper, *EXIT7, errno=95)      # EOPNOTSUPP
    assert r.returncode == 7, r.stderr
    assert "warning: Async-fork is switched off in this boot" in r.stderr
    r = afr(wrapper, "--strict", *EXIT7, errno=95)
    assert r.returncode == 1 and "error: Async-fork is switched off" in r.stderr


def test_granted_runs_quietly(wrapper):
    r = afr(wrapper, "--strict", "--", *EXIT7, errno=0)
    assert r.returncode == 7
    if not os.path.exists("/proc/sys/vm/async_fork"):
        assert r.stderr == ""


@pytest.mark.parametrize("args,status,message", [
    ([], 2, "usage"),
    (["--bogus", "true"], 2, "unknown option '--bogus'"),
    (["--strict"], 2, "usage"),
    (["/nonexistent/program"], 127, "No such file"),
    (["NOT-EXECUTABLE"], 126, "Permission denied"),
])
def test_wrapper_errors(wrapper, args, status, message):
    args = [str(wrapper / "shim.c") if a == "NOT-EXECUTABLE" else a for a in args]
    r = afr(wrapper, *args, errno=0)
    assert r.returncode == status and message in r.stderr, (r.returncode, r.stderr)


def test_help_goes_to_stdout(wrapper):
    r = afr(wrapper, "--help")
    assert r.returncode == 0 and "--strict" in r.stdout and r.stderr == ""


def test_shellcheck_clean():
    """The scripts of make deb (shellcheck is a developer tool: skip without it)."""
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    scripts = [TOP / "scripts" / s for s in ("build-deb.sh", "build-tools-deb.sh",
                                             "deb-version.sh", "setup.sh")]
    r = run(["shellcheck", *scripts])
    assert r.returncode == 0, r.stdout
