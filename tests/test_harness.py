# SPDX-License-Identifier: GPL-2.0
"""The harness itself: bad input is refused clearly, a kernel report or a hung
guest fails a run.  A harness that cannot fail proves nothing."""

import os
import subprocess
import sys

from pathlib import Path

import pytest

from asyncfork import paths, suite
from asyncfork import vm
from conftest import BUILD, TOP


# What a make running this suite passes down (make test ARCH=arm64 exports
# ARCH, and MAKEFLAGS carries its command-line variables): each test says
# the variables it means.
INHERITED = ("ARCH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def sh(*args, env=None, **kw):
    base = {k: v for k, v in os.environ.items() if k not in INHERITED}
    return subprocess.run(args, cwd=TOP, capture_output=True, text=True,
                          env={**base, **(env or {})}, timeout=300, **kw)


def one_line_error(p):
    err = p.stderr.strip()
    assert p.returncode != 0
    assert err and "Traceback" not in err, err
    return err


def test_unknown_make_target():
    err = one_line_error(sh("make", "no-such-target"))
    assert "unknown target 'no-such-target'" in err and "make help" in err


def test_missing_source_package(tmp_path):
    p = sh("make", "source", f"KERNEL_TARBALL={tmp_path}/missing.tar.xz", f"BUILD={tmp_path}")
    err = one_line_error(p)
    assert "not found" in err and "make setup" in err


@pytest.mark.parametrize("command", [[sys.executable, "-m", "asyncfork", "vm"],
                                     [sys.executable, "scripts/vm.py"]])
def test_guest_memory_larger_than_host(command):
    p = sh(*command, "--memory", "64T", "--", "true", env={"PYTHONPATH": str(TOP / "python")})
    err = one_line_error(p)
    assert p.returncode == 2 and "larger than the host" in err
    assert len(err.splitlines()) == 1


def test_bad_memory_size():
    with pytest.raises(vm.VMError, match="not a size"):
        vm.run(BUILD / "debug", "true", memory="lots")


def test_root_fs_choice(tmp_path, monkeypatch):
    with pytest.raises(vm.VMError, match="root_fs must be 9p or virtiofs"):
        vm.run(tmp_path, "true", root_fs="ext4")
    assert vm.root_fs_args("9p") == ["--force-9p"]
    monkeypatch.setattr(vm.shutil, "which", lambda *a, **k: None)
    with pytest.raises(vm.VMError, match="make virtiofsd"):
        vm.run(tmp_path, "true", root_fs="virtiofs")


def test_accel_args(monkeypatch):
    # Single-threaded TCG only where asked, and never under KVM.
    monkeypatch.setenv("ASYNC_FORK_ACCEL", "tcg")
    assert vm.accel_args() == ["--disable-kvm"]
    assert vm.accel_args(tcg_single=True) == ["--disable-kvm",
                                              "--qemu-opts=-accel tcg,thread=single"]
    monkeypatch.setenv("ASYNC_FORK_ACCEL", "kvm")
    assert vm.accel_args(tcg_single=True) == []


def test_missing_kernel_image(tmp_path):
    with pytest.raises(vm.VMError, match="make kernel-debug"):
        vm.run(tmp_path, "true")


def test_arch_names():
    # make's ARCH= as the kernel's build accepts it, or as uname says.
    for value, want in (("", "x86"), ("x86", "x86"), ("x86_64", "x86"),
                        ("arm64", "arm64"), ("aarch64", "arm64")):
        assert paths.arch({"ARCH": value}) == want
    assert paths.arch({}) == "x86"
    # Debian's name is no kernel ARCH: kbuild would fail on it later.
    for bad in ("sparc", "amd64"):
        with pytest.raises(paths.ArchError, match=f"ARCH={bad}.*x86 or arm64"):
            paths.arch({"ARCH": bad})
    assert paths.arch_dir("debug", Path("/b"), "x86") == Path("/b/debug")
    assert paths.arch_dir("selftests", Path("/b"), "arm64") == Path("/b/arm64-selftests")


def test_unknown_arch_is_refused():
    err = one_line_error(sh("make", "-n", "test", "ARCH=sparc"))
    assert "ARCH=sparc is not an architecture" in err
    p = sh(sys.executable, "-c", "import asyncfork.vm", env={"ARCH": "sparc"})
    assert "ARCH=sparc is not an architecture" in one_line_error(p)


@pytest.mark.parametrize("target", ["test", "mutate", "check-series", "deb", "demo"])
def test_6_12_only_targets_refuse_another_base(tmp_path, target):
    # Refused when make reads the Makefile, before any prerequisite builds.
    err = one_line_error(sh("make", "-n", target, "BASE=7.3", f"BUILD={tmp_path}"))
    assert f"make {target}: 6.12 only so far, not with BASE=7.3" in err


def make_targets() -> list[str]:
    """Every target of the Makefile's help (its "#   make NAME" lines)."""
    names = []
    for line in (TOP / "Makefile").read_text().splitlines():
        if line.startswith("#   make ") or line.startswith("#   (make "):
            name = line.split("make ", 1)[1].split()[0]
            names.append("kernel-debug" if name == "kernel-NAME" else name)
    return names


# What each variable's targets show of it in their dry run.
READERS = {
    "KERNEL": ("kasan", {"soak": "--kernel kasan", "vm": "/kasan -- true"}),
    "SERVER": ("valkey", {"demo": "--server valkey", "bench": "--server valkey",
                          "bench-redis": "--server valkey"}),
    "NATIVE": ("1", {"demo": "--native", "bench": "--native", "bench-fork": "--native",
                     "bench-redis": "--native"}),
}


def test_help_lists_the_targets():
    targets = make_targets()
    assert {"test", "demo", "soak", "vm", "mutate", "deb", "kernel-debug"} <= set(targets)
    for var, (_, readers) in READERS.items():
        assert set(readers) <= set(targets), var


@pytest.mark.parametrize("var", sorted(READERS))
def test_each_target_honours_or_refuses_each_variable(tmp_path, var):
    # KERNEL=, SERVER=, NATIVE= on the command line: read (the dry run
    # shows the value) or refused when make reads the Makefile, before any
    # prerequisite builds.  BASE= and ARCH= have tests of their own above.
    value, readers = READERS[var]
    # Builds the readers need are taken as done (-o): a dry run still runs
    # the sub-makes of prerequisites, which need a prepared tree.
    done = [a for t in ("selftests", "bench-programs", "virtiofsd", "kernel-kasan",
                        "kernel-lean", "kernel-debug") for a in ("-o", t)]
    for target in make_targets():
        p = sh("make", "-n", "--no-print-directory", *(done if target in readers else []),
               target, f"{var}={value}", f"BUILD={tmp_path}", "CMD=true")
        if target in readers:
            assert p.returncode == 0, (target, p.stderr)
            assert readers[target] in p.stdout, (target, p.stdout[-2000:])
        else:
            err = one_line_error(p)
            assert f"make {target}: {var}= is only for: " in err, (target, err)


# What ARCH=arm64 does to each target: refused before anything builds
# (x86 only so far), required (bench-tlbi), or taken (the rest: guest
# targets build and boot arm64, host targets ignore it, as make check says).
X86_ONLY = {"soak", "mutate", "bench-offcost", "check-kernel"}
ARM64_ONLY = {"bench-tlbi"}


def test_each_target_takes_or_refuses_arch(tmp_path):
    done = [a for t in ("selftests", "upstream-selftests", "bench-programs", "virtiofsd",
                        "arm64-root", "kernel-lean", "kernel-debug", "source", "check")
            for a in ("-o", t)]
    targets = make_targets()
    assert X86_ONLY | ARM64_ONLY <= set(targets)
    for target in targets:
        for arch in ("x86", "arm64"):
            p = sh("make", "-n", "--no-print-directory", *done, target, f"ARCH={arch}",
                   f"BUILD={tmp_path}", "CMD=true")
            refused = (arch == "arm64" and target in X86_ONLY or
                       arch == "x86" and target in ARM64_ONLY)
            if refused:
                err = one_line_error(p)
                want = "x86 only so far" if arch == "arm64" else "ARCH=arm64 only"
                assert f"make {target}: {want}" in err, (target, arch, err)
            else:
                assert "only so far" not in p.stderr and "ARCH=arm64 only" not in p.stderr, \
                    (target, arch, p.stderr)


def test_another_base_builds_in_its_own_folder(tmp_path):
    # The port's tree and kernels in BUILD/base-7.3, the fetched base in
    # BUILD/bases, the port's patches, harness patch and config.
    p = sh("make", "-n", "source", "kernel-debug", "BASE=7.3", f"BUILD={tmp_path}")
    assert p.returncode == 0, p.stderr
    assert f"fetch-base.sh 7.3 {tmp_path}\n" in p.stdout
    assert (f"ASYNC_FORK_PATCHES={TOP}/kernel/ports/7.3 ASYNC_FORK_HARNESS={TOP}/kernel/ports/7.3/harness "
            f"scripts/prepare-source.sh {tmp_path}/bases/linux-7.3.tar.xz {tmp_path}/base-7.3") in p.stdout
    assert f"scripts/build-kernel.sh debug {tmp_path}/base-7.3" in p.stdout
    for f in ("series", "base.config", "harness"):
        assert (TOP / "kernel/ports/7.3" / f).exists(), f
    # The default base is untouched.
    p = sh("make", "-n", "kernel-debug", f"BUILD={tmp_path}")
    assert f"scripts/build-kernel.sh debug {tmp_path}\n" in p.stdout, p.stdout


def test_arm64_guest_args(tmp_path, monkeypatch):
    monkeypatch.setattr(paths.platform, "machine", lambda: "x86_64")
    assert vm.foreign("arm64") and not vm.foreign("x86")
    assert vm.arch_args("x86", root=tmp_path) == []
    with pytest.raises(vm.VMError, match="no arm64 root filesystem.*make arm64-root"):
        vm.arch_args("arm64", root=tmp_path)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/asyncfork-arm64-root").write_text("made\n")
    args = vm.arch_args("arm64", root=tmp_path, shared=[Path("/work/x"), Path("/srv/b")])
    assert args[:4] == ["--arch", "arm64", "--root", str(tmp_path)]
    assert "--rwdir" in args and "/work/x=/work/x" in args and "/srv/b=/srv/b" in args
    # The root is read-only to the guest: the mount points are made here.
    assert (tmp_path / "work/x").is_dir() and (tmp_path / "srv/b").is_dir()
    # An arm64 guest on an x86 host is emulated, whatever /dev/kvm says.
    monkeypatch.setattr(vm, "ARCH", "arm64")
    monkeypatch.setattr(paths, "ARCH", "arm64")
    monkeypatch.setenv("ASYNC_FORK_ACCEL", "kvm")
    assert not vm.kvm_usable()
    assert vm.accel_args() == ["--disable-kvm"]
    # Its commands run the root's python, told the architecture.
    cmd = paths.python_command("snapshot", "--x")
    assert "/usr/bin/python3" in cmd and "ARCH=arm64" in cmd


def test_arm64_guest_is_never_native(monkeypatch):
    from asyncfork import native
    monkeypatch.setattr(paths.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(paths, "ARCH", "arm64")
    with pytest.raises(native.Unavailable, match="ARCH=arm64 runs in an emulated arm64 guest"):
        native.choose("native", env={})
    with pytest.raises(native.Unavailable, match="NATIVE=1"):
        native.choose(None, env={"NATIVE": "1"})
    on_machine, why = native.choose(None, env={})
    assert not on_machine and "emulated" in why


def test_arm64_results_folders_are_mounted_at_their_paths(tmp_path, monkeypatch):
    # virtme would place a bare --rwdir relative to the arm64 root (and
    # refuse one outside it): a guest of another architecture gets
    # HOST=HOST, and its command starts in the checkout.
    monkeypatch.setattr(paths.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(paths, "ARCH", "arm64")
    monkeypatch.setattr(vm, "ARCH", "arm64")
    monkeypatch.setattr(vm, "check_root", lambda: None)
    monkeypatch.setattr(vm, "find_image", lambda k: tmp_path / "Image")
    monkeypatch.setattr(vm, "ARM64_ROOT", tmp_path / "root")
    (tmp_path / "root/etc").mkdir(parents=True)
    (tmp_path / "root/etc/asyncfork-arm64-root").write_text("made\n")
    seen = {}

    class Stop(Exception):
        pass

    def popen(args, **kw):
        seen["args"] = args
        script = Path(args[args.index("--exec") + 1].split()[1])
        seen["script"] = script.read_text()
        script.unlink()
        raise Stop
    monkeypatch.setattr(vm.subprocess, "Popen", popen)
    with pytest.raises(Stop):
        vm.run(tmp_path, "true", memory="1G",
               rwdirs=[tmp_path / "out", os.path.relpath(tmp_path / "rel", TOP)])
    assert f"{tmp_path}/out={tmp_path}/out" in seen["args"]
    # A relative folder (--out build/...) is the checkout's, not the root's.
    assert f"{tmp_path}/rel={tmp_path}/rel" in seen["args"]
    assert "--root" in seen["args"] and str(tmp_path / "root") in seen["args"]
    assert seen["script"].startswith(f"cd {TOP} || exit 1\n")


def test_arm64_kernel_image(tmp_path):
    with pytest.raises(vm.VMError, match="make kernel-debug ARCH=arm64"):
        vm.find_image(tmp_path, "arm64")
    img = tmp_path / "arch/arm64/boot/Image"
    img.parent.mkdir(parents=True)
    img.write_bytes(b"")
    assert vm.find_image(tmp_path, "arm64") == img


def test_patch_that_does_not_apply(tmp_path):
    """A series whose patch does not apply stops before the tree is touched."""
    pristine = BUILD / "pristine"
    if not (BUILD / "pristine.done").exists():
        pytest.skip("source not unpacked yet: run make source")
    build = tmp_path / "build"
    build.mkdir()
    (build / "pristine").symlink_to(pristine)
    (build / "pristine.done").touch()
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "series").write_text("0001-bad.patch\n")
    (patches / "0001-bad.patch").write_text(
        "--- a/Makefile\n+++ b/Makefile\n@@ -1,2 +1,2 @@\n"
        "-this line is not in the kernel Makefile\n+nor is this one\n context\n")
    p = sh("scripts/prepare-source.sh", "/usr/src/linux-source-6.12.tar.xz", str(build),
           env={"ASYNC_FORK_PATCHES": str(patches)})
    assert p.returncode != 0
    assert "patch 0001-bad.patch does not apply" in p.stderr, p.stderr
    assert not (build / "linux").exists()


def test_ktap_parser():
    cases = suite.parse_ktap(
        "TAP version 13\n1..4\nok 1 first\nnot ok 2 second\n"
        "ok 3 # SKIP no hugetlb\nok 4 first\n# Totals: pass:2 fail:1\n")
    assert [(c.name, c.status) for c in cases] == [
        ("first", "pass"), ("second", "fail"), ("no hugetlb", "skip"), ("first [2]", "pass")]


def test_failed_case_output():
    # A failed case's report carries what the case printed, not just the
    # program's last lines (which belong to the cases after it).
    text = ("#  RUN           f.a.one ...\n# f.c:10:one:Expected 0 == 1\n"
            "#          FAIL  f.a.one\nnot ok 1 f.a.one\n#  RUN           f.a.two ...\n"
            "ok 2 f.a.two\nnot ok 3 digest differs\n")
    assert suite.case_log(text, "f.a.one").splitlines() == text.splitlines()[:4]
    assert suite.case_log(text, "digest differs") == "not ok 3 digest differs"
    assert suite.case_log(text, "f.a.two") == ""


def test_non_ktap_parsers():
    uffd = suite.parse_output("uffd-unit-tests",
                                "Testing move on anon... done\n"
                                "Testing wp-fork-pin on anon... skipped [reason: x]\n"
                                "Testing poison on shmem... failed [reason: y]\n")
    assert [(c.name, c.status) for c in uffd] == [
        ("move on anon", "pass"), ("wp-fork-pin on anon", "skip"), ("poison on shmem", "fail")]
    ok, fail = "\x1b[32mOK\x1b[0m", "\x1b[31mFail\x1b[0m"
    khp = suite.parse_output("khugepaged",
                               f"\nRun test: a (x:anon)\nstep... {ok}\n"
                               f"\nRun test: b (x:anon)\nstep... {ok}\nstep... {fail}\n")
    assert [(c.name, c.status) for c in khp] == [("a (x:anon)", "pass"), ("b (x:anon)", "fail")]
    sng = suite.parse_output("stress-ng",
                               "stress-ng: info:  [5] successful run completed in 30.1s\n"
                               "stress-ng: fail:  [8] vm: detected 3 bit errors\n"
                               "stress-ng: info:  [7] unsuccessful run completed in 30.2s\n")
    assert [(c.name, c.status) for c in sng] == [
        ("stress-ng run 1", "pass"), ("vm: detected 3 bit errors", "fail"),
        ("stress-ng run 2", "fail")]


def test_report_scanner_ignores_benign_lines():
    assert vm.kernel_reports("[    0.1] page_table_check: enabled\n[ 0.2] KFENCE: initialized") == []
    rep = vm.kernel_reports("[ 1.0] ------------[ cut here ]------------\n"
                            "[ 1.0] WARNING: CPU: 0 PID: 1 at mm/memory.c:1 f+0x1/0x2\n")
    assert len(rep) == 1 and "mm/memory.c" in rep[0]


def test_program_list_options(tmp_path):
    lst = tmp_path / "list"
    lst.write_text("# c\ncow\ntimeout=60 retries=1 uffd-unit-tests -f events # why\ncow x\n")
    progs = suite.read_programs(lst, Path("/b"), 900)
    assert [(p.name, p.timeout, p.retries, p.command) for p in progs] == [
        ("cow", 900, 0, "/b/cow"),
        ("uffd-unit-tests", 60, 1, "/b/uffd-unit-tests -f events"),
        ("cow-2", 900, 0, "/b/cow x")]
    for bad in ("retry=1 cow", "timeout=x cow", "timeout=5"):
        lst.write_text(bad + "\n")
        with pytest.raises(ValueError, match="list:1"):
            suite.read_programs(lst, Path("/b"), 900)


@pytest.mark.guest
def test_injected_warn_fails_the_program(kernel, tmp_path):
    """LKDTM's WARNING crash point runs WARN_ON() in the guest kernel: the
    program that triggered it must be judged failed, with the excerpt.
    The same boot checks that a failed run is repeated only as allowed, that
    the failed runs are kept, and that a program that overruns its timeout
    is killed with the state and stack of each task kept as evidence."""
    marker = tmp_path / "results/marker"
    progs = [suite.Program("inject_warn", 60,
                             "echo WARNING > /sys/kernel/debug/provoke-crash/DIRECT && "
                             "echo 'ok 1 wrote WARNING to LKDTM'"),
             # kernel/harness: two mutexes taken in both orders.
             suite.Program("inject_lockdep", 60,
                             "echo LOCKDEP_INVERSION > /sys/kernel/debug/provoke-crash/DIRECT && "
                             "echo 'ok 1 wrote LOCKDEP_INVERSION to LKDTM'"),
             suite.Program("fails_once", 30,
                             f"if [ -e {marker} ]; then echo 'ok 1 second'; "
                             f"else touch {marker}; echo 'not ok 1 first'; exit 1; fi", 1),
             suite.Program("fails_always", 30, "echo 'not ok 1 no'; exit 3", 1),
             suite.Program("overruns", 5, "echo 'ok 1 started'; sleep 600")]
    run = suite.run_suite(kernel, progs, tmp_path / "results", memory="1G", numa_nodes=1)
    problems = run.problems("inject_warn")
    assert run.results["inject_warn"].rc == 0  # the program itself "passed"...
    assert any("kernel report" in p and "WARNING" in p and "lkdtm" in p.lower()
               for p in problems), problems  # ...and the run still fails
    # lockdep's own banner, not a WARN: a real lockdep report fails the run.
    assert run.results["inject_lockdep"].rc == 0
    lockdep = run.problems("inject_lockdep")
    assert any("kernel report" in p and "possible circular locking dependency" in p
               for p in lockdep), lockdep
    once = run.results["fails_once"]
    assert once.rc == 0 and [str(c) for c in once.cases] == ["pass: second"]
    assert len(once.failed_runs) == 1 and "not ok 1 first" in once.failed_runs[0]
    always = run.results["fails_always"]
    assert always.rc == 3 and len(always.failed_runs) == 1
    assert run.problems("fails_always")
    over = run.results["overruns"]
    assert over.timed_out and over.elapsed < 60
    assert "sleep S (sleeping) wchan=" in over.hang, over.hang
    assert any(p.startswith("tasks at the timeout") and "sleep" in p
               for p in run.problems("overruns")), run.problems("overruns")


@pytest.mark.guest
def test_hung_guest_is_killed(kernel, tmp_path):
    r = vm.run(kernel, "sleep 3600", memory="1G", timeout=30,
               log_path=tmp_path / "console.log")
    assert r.timed_out and r.returncode is None and not r.ok
    assert r.elapsed < 60
    assert "timeout" in r.describe()


def test_check_series_refuses_an_unknown_arch(tmp_path):
    r = subprocess.run([str(TOP / "scripts/check-series.sh"), "/nonexistent.tar.xz",
                        str(tmp_path / "b")], env={**os.environ, "ARCH": "mips"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "unknown ARCH 'mips'" in r.stderr
    assert not (tmp_path / "b" / "series-check").exists()
