# SPDX-License-Identifier: GPL-2.0
"""make soak's record: asyncfork.results' metadata, then the sums of the
fork_stress runs' counters, each program's verdict and skips, and the
runs themselves; written as BUILD/results/soak-KERNEL-DATE.json (or where
--record-dir says), whether the soak passed or not."""

from pathlib import Path

from asyncfork import fork_stress, results, skips
from asyncfork import suite as harness


def make_record(*, kernel_name: str, kernel_dir: Path, run: harness.SuiteRun,
                progs: list[harness.Program], problems: dict[str, list[str]],
                runs: list[dict], started: float, finished: float,
                machine_info: dict, argv: list[str], args: dict,
                image: Path | None = None, built: dict | None = None,
                config: str | None = None) -> dict:
    """The soak's record.  Counters are sums over every fork_stress run
    (failed and repeated runs included), null if a run did not print them.
    forks, forks_deferred, syncs (tables the parent copied first) and
    child_copies (tables the child copied) come from fork_stress's counter
    line; children_checked from its "snapshots exact: N children" result.
    skipped counts the skipped cases, each program's allowed ones with
    their reason (asyncfork.skips, for @config: ARCH/KERNEL_NAME)."""
    config = config or skips.config(kernel_name)
    skipped = skips.program_skips(run, [p.name for p in progs], config)
    kernel = results.kernel(None if image else kernel_dir, label=kernel_name, image=image,
                            async_fork="2 (each program sets it)")
    if run.kernelrelease != "unknown":
        kernel["release"] = run.kernelrelease
    # Which build: a kernel is not rebuilt for a soak of a later commit
    # whose kernel code is the same, so the record names the image's
    # build time and, for the package, its file.
    kernel.update(built or {})
    return {
        **results.metadata("soak", kernels=[kernel], machine_info=machine_info, argv=argv,
                           args=args, started=started),
        "seconds": round(finished - started, 1),
        **{k: fork_stress.total(runs, k) for k in fork_stress.COUNTER_FIELDS},
        "children_checked": fork_stress.total(runs, "children_checked"),
        "kernel_reports": len(run.vm.reports or []),
        "skip_config": config,
        "skipped": sum(s.count for s in skipped.values()),
        "skipped_unexplained": sum(len(s.unexplained) for s in skipped.values()),
        "failures": sum(bool(v) for v in problems.values()),
        "passed": not any(problems.values()) and not run.vm.reports,
        "programs": {
            p.name: {"passed": not problems[p.name],
                     "seconds": round(run.results[p.name].elapsed, 1),
                     "repeated_runs": len(run.results[p.name].failed_runs),
                     **skips.record(skipped.get(p.name, skips.Skips())),
                     "problems": [s.splitlines()[0] for s in problems[p.name]]}
            for p in progs},
        "fork_stress_runs": runs,
    }


def write_record(record: dict, outdir: Path, kernel_name: str, kind: str = "soak") -> Path:
    """Write @record as KIND-KERNEL-DATE.json in @outdir (DATE from its
    start, UTC); a later run of the same day gets -2, -3...: none is lost."""
    return results.write(record, outdir, f"{kind}-{kernel_name}")
