# SPDX-License-Identifier: GPL-2.0
"""A kernel build's log and progress line (asyncfork.buildlog): the step
count, the estimate, when a line is due, what a failed build shows, and
the wrapper around a stand-in make.  Host-only, no kernel built."""

import io
import json
import os
import subprocess
import sys

from asyncfork import buildlog
from asyncfork.buildlog import Stats
from conftest import TOP

# A quiet kbuild's output, as make -j prints it (tinyconfig, 6.12).
KBUILD = """\
make: Entering directory '/build/linux'
make[1]: Entering directory '/build/lean'
  SYNC    include/config/auto.conf.cmd
  GEN     Makefile
  HOSTCC  scripts/basic/fixdep
  WRAP    arch/x86/include/generated/uapi/asm/bpf_perf_event.h
  SYSTBL  arch/x86/include/generated/asm/syscalls_64.h
  CC      scripts/mod/empty.o
  CC [M]  fs/ext4/inode.o
  AR      mm/built-in.a
  LD      vmlinux.o
  OBJCOPY arch/x86/boot/vmlinux.bin
  BUILD   arch/x86/boot/bzImage
Kernel: arch/x86/boot/bzImage is ready  (#1)
make[1]: Leaving directory '/build/lean'
"""

FAILED = """\
  CC      mm/memory.o
  CC      mm/async_fork.o
../mm/async_fork.c: In function 'af_copy':
../mm/async_fork.c:12:9: error: implicit declaration of function 'nope' [-Werror=implicit-function-declaration]
   12 |         nope();
      |         ^~~~
../mm/async_fork.c:40:1: warning: no return statement in function returning non-void
cc1: some warnings being treated as errors
make[4]: *** [../scripts/Makefile.build:229: mm/async_fork.o] Error 1
make[3]: *** [../scripts/Makefile.build:478: mm] Error 2
make[2]: *** [/build/linux/Makefile:1936: .] Error 2
make[1]: *** [/build/linux/Makefile:224: __sub-make] Error 2
make: *** [Makefile:224: __sub-make] Error 2
make: Leaving directory '/build/linux'
"""


def test_steps_are_kbuild_lines():
    lines = KBUILD.splitlines()
    assert sum(map(buildlog.is_step, lines)) == 11
    assert not buildlog.is_step("Kernel: arch/x86/boot/bzImage is ready  (#1)")
    assert not buildlog.is_step("make[1]: Entering directory '/build/lean'")
    assert not buildlog.is_step("   12 |         nope();")


def test_estimate():
    last = Stats(seconds=600, steps=1000)
    assert buildlog.remaining(10, 5, None) is None
    # Early on, the last build's pace: 600 s for the whole.
    assert buildlog.remaining(0, 0, last) == 600
    assert buildlog.remaining(100, 60, last) == 540
    # A slow start does not make the estimate shrink below what is left of it.
    assert buildlog.remaining(10, 400, last) == 594
    # Then this build's own pace: half done in 100 s, 100 s to go.
    assert buildlog.remaining(500, 100, last) == 100
    assert buildlog.remaining(1000, 300, last) == 0
    assert buildlog.remaining(1200, 300, last) == 0


def test_progress_line():
    assert buildlog.progress_line(42, 75, None) == "42 steps, 1:15 elapsed, no estimate yet"
    assert (buildlog.progress_line(500, 100, Stats(600, 1000))
            == "500/1000 steps (50%), 1:40 elapsed, about 1:40 left")
    assert "the last build had 1000" in buildlog.progress_line(1100, 100, Stats(600, 1000))
    assert buildlog.fmt_time(3725) == "1:02:05"


def test_lines_when_no_terminal():
    # At each 10%, or two minutes after the last line.
    assert not buildlog.due(15, 10, 30, 0)
    assert buildlog.due(20, 19, 30, 0)
    assert buildlog.due(None, None, 121, 0)
    assert not buildlog.due(None, None, 100, 0)


def test_stats_kept_from_full_builds(tmp_path):
    path = tmp_path / "build-stats.json"
    assert buildlog.read_stats(path) is None
    path.write_text("not json")
    assert buildlog.read_stats(path) is None
    buildlog.write_stats(path, Stats(612.34, 4321))
    assert buildlog.read_stats(path) == Stats(612.3, 4321)
    # A rebuild of a few files is no measure of the next full build.
    assert buildlog.keep_stats(None, Stats(5, 3))
    assert not buildlog.keep_stats(Stats(600, 4321), Stats(5, 3))
    assert buildlog.keep_stats(Stats(600, 4321), Stats(300, 4000))


def test_failure_summary():
    out = buildlog.failure_summary(FAILED.splitlines(), tail=3)
    assert out[0].endswith("error: implicit declaration of function 'nope' "
                           "[-Werror=implicit-function-declaration]")
    assert "make[4]: *** [../scripts/Makefile.build:229: mm/async_fork.o] Error 1" in out
    assert not any("warning:" in line for line in out)
    # The tail after the errors, without repeating them.
    assert out[-1] == "make: Leaving directory '/build/linux'"
    assert out.count("make: *** [Makefile:224: __sub-make] Error 2") == 1


def stand_in_make(tmp_path, text: str, rc: int) -> list[str]:
    out = tmp_path / "make-output"
    out.write_text(text)
    return [sys.executable, "-c",
            f"import sys; sys.stdout.write(open({str(out)!r}).read()); sys.exit({rc})"]


def test_wrapper_logs_counts_and_keeps_stats(tmp_path):
    log, stats = tmp_path / "lean/build.log", tmp_path / "lean/build-stats.json"
    shown = io.StringIO()
    rc = buildlog.run(stand_in_make(tmp_path, KBUILD, 0), log, stats, "build-kernel: lean",
                      stream=shown, tty=False)
    assert rc == 0
    assert log.read_text() == KBUILD
    assert json.loads(stats.read_text())["steps"] == 11
    assert shown.getvalue().startswith("build-kernel: lean: 11 steps in 0:0")
    assert f"log: {log}" in shown.getvalue()
    # The second build shows the first one's count, on a terminal in place.
    shown = io.StringIO()
    rc = buildlog.run(stand_in_make(tmp_path, KBUILD, 0), log, stats, "build-kernel: lean",
                      stream=shown, tty=True)
    assert rc == 0 and "\r" in shown.getvalue() and "11/11 steps (100%)" in shown.getvalue()


def test_wrapper_shows_what_failed(tmp_path):
    log, stats = tmp_path / "build.log", tmp_path / "build-stats.json"
    shown = io.StringIO()
    rc = buildlog.run(stand_in_make(tmp_path, FAILED, 2), log, stats, "build-kernel: debug",
                      stream=shown, tty=False)
    text = shown.getvalue()
    assert rc == 2
    assert "build-kernel: debug: FAILED after 0:0" in text and f"log: {log}" in text
    assert "error: implicit declaration of function 'nope'" in text
    assert "mm/async_fork.o] Error 1" in text
    assert not stats.exists()


def test_wrapper_command_not_found(tmp_path, capsys):
    rc = buildlog.main(["--log", str(tmp_path / "l"), "--stats", str(tmp_path / "s"),
                        "--label", "b", "--", str(tmp_path / "no-make")])
    assert rc == 2 and "b: cannot run" in capsys.readouterr().err


# A kernel tree that builds nothing: what scripts/build-kernel.sh runs in it
# (tinyconfig, merge_config.sh, olddefconfig, kernelrelease, bzImage).
STAND_IN_MAKEFILE = """\
tinyconfig:
\t@echo '# tiny' > $(O)/.config
olddefconfig syncconfig:
\t@true
kernelrelease:
\t@echo 6.12.0-asyncfork-lean
bzImage:
\t@printf '  CC      mm/memory.o\\n  CC      mm/async_fork.o\\n'
\t@if [ -n "$(FAIL)" ]; then echo "../mm/async_fork.c:1:1: error: broken" >&2; exit 1; fi
\t@printf '  AR      mm/built-in.a\\n  LD      vmlinux\\n'
\t@mkdir -p $(O)/arch/x86/boot && touch $(O)/arch/x86/boot/bzImage
"""
MERGE_CONFIG = """#!/bin/sh
# merge_config.sh -m -O OUT BASE FRAGMENT...: appends the fragments.
out=$3; shift 4
cat "$@" >> "$out/.config"
"""


def test_build_kernel_writes_a_log_and_shows_progress(tmp_path):
    src = tmp_path / "linux"
    (src / "scripts/kconfig").mkdir(parents=True)
    (src / "Makefile").write_text(STAND_IN_MAKEFILE)
    merge = src / "scripts/kconfig/merge_config.sh"
    merge.write_text(MERGE_CONFIG)
    merge.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("ARCH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}

    def build(**extra):
        return subprocess.run([str(TOP / "scripts/build-kernel.sh"), "lean", str(tmp_path)],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**env, **extra})

    r = build()
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "lean"
    assert "build-kernel: lean: 4 steps in 0:0" in r.stdout, r.stdout
    assert f"log: {out / 'build.log'}" in r.stdout
    assert "  CC      mm/memory.o" in (out / "build.log").read_text()
    assert "  CC      mm/memory.o" not in r.stdout
    assert json.loads((out / "build-stats.json").read_text())["steps"] == 4
    assert (out / "kernelrelease").read_text().strip() == "6.12.0-asyncfork-lean"
    # A failed build: its errors and the log's path, exit code not 0.
    r = build(MAKEFLAGS="FAIL=1")
    assert r.returncode != 0
    assert "build-kernel: lean: FAILED after" in r.stdout, r.stdout
    assert "error: broken" in r.stdout and f"log: {out / 'build.log'}" in r.stdout
