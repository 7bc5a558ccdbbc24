# SPDX-License-Identifier: GPL-2.0
"""Which skipped cases a run may have, and why: the one allow-list of
make test, make soak and make test-deb.

A case of a program the project wrote (tests/selftests, the selftests of
kernel/patches/async-fork and kernel/patches/mm-fixes, tests/guest) that
skips fails the run, unless an entry below names its configuration, its
program and its case and says why the case cannot run there.  A skip is
a path left untested while the run looks green: an entry is a decision,
with the place that tests the path instead.

A configuration is "ARCH/KERNEL": the guest's architecture (x86, arm64)
and the kernel's name: "debug" (make test, make soak), "kasan", "kcsan",
"lean" (make soak KERNEL=), "deb-FLAVOUR" (make test-deb, make soak
KERNEL=deb: Debian's config, e.g. deb-cloud-amd64).
"""

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from asyncfork import paths
from asyncfork.suite import Case, SuiteRun


@dataclass(frozen=True)
class Allowed:
    configs: tuple[str, ...]  # shell patterns of configurations
    program: str              # shell pattern of the program's name
    cases: tuple[str, ...]    # shell patterns of the case names (KTAP)
    reason: str

    def allows(self, config: str, program: str, case: str) -> bool:
        return (any(fnmatchcase(config, c) for c in self.configs)
                and fnmatchcase(program, self.program)
                and any(fnmatchcase(case, c) for c in self.cases))


ALLOWED = [
    Allowed(("arm64/*",), "fork_snapshot*", ("snapshot.*.parent_clear_refs_soft_dirty",),
            "arm64 has no soft-dirty tracking in 6.12 (no CONFIG_MEM_SOFT_DIRTY), "
            "and fork_snapshot says so; x86 runs it"),
    Allowed(("*/deb-*",), "async_fork",
            ("af.child_copy_fails", "af.helper_copy_fails", "af.parent_sync_fails",
             "af.failed_parent_copy_never_shows_in_child"),
            "Debian's config has no fault injection (CONFIG_FAULT_INJECTION is not set): "
            "the failed copies are tested on the debug kernel (make test)"),
    Allowed(("*/deb-*",), "async_fork",
            ("af.pinned_process_falls_back", "af.short_pin_keeps_async_fork",
             "af.longterm_pin_not_inherited"),
            "Debian's config has no CONFIG_GUP_TEST (the pins of /sys/kernel/debug/gup_test): "
            "tested on the debug kernel (make test)"),
]


def config(kernel: str, arch: str | None = None) -> str:
    """The configuration "ARCH/KERNEL" of a run of kernel @kernel."""
    return f"{arch or paths.ARCH}/{kernel}"


@dataclass
class Skips:
    """The skipped cases of one program: allowed ones with their reason,
    and those no entry explains."""
    allowed: list[tuple[str, str]] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.allowed) + len(self.unexplained)


def judge(config: str, program: str, cases: list[Case],
          allowed: list[Allowed] | None = None) -> Skips:
    """The skips among @cases of @program in a run of @config."""
    out = Skips()
    for c in cases:
        if c.status != "skip":
            continue
        entry = next((a for a in (ALLOWED if allowed is None else allowed)
                      if a.allows(config, program, c.name)), None)
        if entry:
            out.allowed.append((c.name, entry.reason))
        else:
            out.unexplained.append(c.name)
    return out


def problem(program: str, config: str, skips: Skips) -> str | None:
    """The failure message of @skips' unexplained skips, None if none."""
    if not skips.unexplained:
        return None
    return (f"{program}: {len(skips.unexplained)} cases skipped on {config} with no "
            f"reason in python/asyncfork/skips.py: {', '.join(skips.unexplained)}")


def record(skips: Skips) -> dict:
    """A program's skips in a run record."""
    return {"skipped": skips.count,
            "skipped_allowed": [{"case": c, "reason": r} for c, r in skips.allowed],
            "skipped_unexplained": list(skips.unexplained)}


def program_skips(run: SuiteRun, names, config: str) -> dict[str, Skips]:
    """The skips of each program of @names that ran in @run."""
    return {n: judge(config, n, run.results[n].cases) for n in names
            if n in run.results and run.results[n].ran}


def verdict(run: SuiteRun, name: str, config: str) -> list[str]:
    """Why a program the project wrote failed in @run: the suite's
    judgement (exit code, failed cases, no KTAP, kernel reports) and its
    skips that no entry allows on @config; empty if it passed."""
    out = list(run.problems(name))
    r = run.results[name]
    msg = problem(name, config, judge(config, name, r.cases)) if r.ran else None
    return out + ([msg] if msg else [])
