# SPDX-License-Identifier: GPL-2.0
"""Results as data: the one JSON record every run writes.

Every `make demo`, `make bench-fork`, `make bench-redis`, `make
bench-offcost` and `make soak` run ends by writing one record,
KIND-NAME-DATE.json (a later run of the same day gets -2, -3...), by
default in BUILD/results/ (the folder above the run's --out).  A record
is a JSON object whose first keys are the metadata that metadata() builds,
the same for every kind (schema SCHEMA):

  schema      SCHEMA
  kind        demo, bench-fork, bench-redis, bench-offcost, bench-sync, bench-tlbi,
              soak, test-deb, mutate, check-kernel
  commit      `git describe --always --dirty` of this repository
  series      {head: the commit's full hash, patches_sha256: a hash of every
              file under kernel/patches, dirty: uncommitted changes?}
  kernel      the release of the (first) kernel the run measured
  config      {flavour, sha256}: that kernel's build flavour and .config hash
  kernels     every kernel the run measured, each {label, release, flavour,
              config_sha256, async_fork}: async_fork says how Async-fork was
              set for it (vm.async_fork, or "absent" in a kernel without it)
  where       "vm" (a guest of that kernel) or "native" (this machine's kernel)
  machine     the host (CPU model, CPUs, memory, kernel, bare metal or a VM,
              KVM or TCG), the architecture that ran the kernel (arch, and
              emulated_arch: a guest of another architecture than the
              host's, ARCH=arm64 on x86) and the guest (vCPUs, memory, NUMA
              nodes, swap; null natively)
  started     UTC, ISO 8601; seconds: how long the run took
  args        {argv: the command line, and every argument's value}

then what the kind measured (see each runner): per-mode and per-window
latency summaries, fork() and copy times, Async-fork's counters.
asyncfork.report turns the records committed under docs/results/ into
docs/results.md and its plots.
"""

import hashlib
import json
import os
import platform
import subprocess
import time
from pathlib import Path

from asyncfork import paths, vm
from asyncfork.paths import TOP

SCHEMA = 1
KINDS = ("demo", "bench-fork", "bench-redis", "bench-offcost", "bench-sync", "bench-tlbi",
         "soak", "test-deb", "mutate", "check-kernel")


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=TOP, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def patches_sha256(patches: Path = TOP / "kernel/patches") -> str:
    """One hash of the series as it is on disk: every file under
    kernel/patches, by path and content."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(patches).rglob("*") if p.is_file()):
        h.update(str(f.relative_to(patches)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def series() -> dict:
    """This repository's commit and the series' hash: what was measured."""
    return {"head": _git("rev-parse", "HEAD"), "patches_sha256": patches_sha256(),
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}


def kernel(kernel_dir: Path | None = None, *, label: str | None = None,
           async_fork: str | None = None, image: Path | None = None) -> dict:
    """A kernel the run measured: a build folder booted in a guest, a
    packaged kernel's image (image: BOOT/vmlinuz-RELEASE, its .config
    BOOT/config-RELEASE), or (neither) the kernel this machine runs, whose
    .config is /boot/config-RELEASE if there is one."""
    if image is not None:
        release = Path(image).name.removeprefix("vmlinuz-")
        config, flavour = Path(image).parent / f"config-{release}", label or "package"
    elif kernel_dir is None:
        release = os.uname().release
        config, flavour = Path(f"/boot/config-{release}"), "running"
    else:
        kernel_dir = Path(kernel_dir)
        release, config, flavour = vm.kernel_release(kernel_dir), kernel_dir / ".config", \
            kernel_dir.name
    return {"label": label or flavour, "release": release, "flavour": flavour,
            "config_sha256": file_sha256(config), "async_fork": async_fork}


def running_async_fork(root: Path = Path("/")) -> str:
    """vm.async_fork of the running kernel, "absent" without Async-fork."""
    try:
        return (Path(root) / "proc/sys/vm/async_fork").read_text().strip()
    except OSError:
        return "absent"


def host() -> dict:
    """This machine: CPU model and flags, CPUs, memory, kernel, and whether
    it is itself a virtual machine (systemd-detect-virt, the CPU's
    hypervisor flag)."""
    model, flags, memory_mb = "unknown", set(), None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = val.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(val.split())
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory_mb = int(line.split()[1]) >> 10
    except OSError:
        pass
    virt = None
    try:
        p = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True,
                           timeout=10, check=False)
        virt = p.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"host": "vm" if "hypervisor" in flags or virt not in (None, "none") else "native",
            "host_virtualization": virt, "host_cpu": model, "host_cpus": os.cpu_count(),
            "host_memory_mb": memory_mb, "host_kernel": platform.release()}


def machine(cpus: int | None = None, memory: str | None = None, numa_nodes: int | None = None,
            swap: str | None = None, tcg_single: bool = False) -> dict:
    """The host and the guest (cpus None: a native run, no guest): the
    record's "machine"; tcg_threads says whether a TCG guest ran its
    vCPUs on one host thread (vm.run's tcg_single) or one each."""
    guest = cpus is not None
    tcg = guest and not vm.kvm_usable()
    here = paths.ARCHES.get(platform.machine(), platform.machine())
    return {**host(), "arch": paths.ARCH if guest else here,
            "emulated_arch": guest and paths.ARCH != here,
            "accel": ("tcg" if tcg else "kvm") if guest else None,
            "tcg_threads": ("single" if tcg_single else "multi") if tcg else None,
            "guest_cpus": cpus, "guest_memory": memory,
            "guest_memory_mb": vm.parse_size(memory) >> 20 if guest and memory else None,
            "guest_numa_nodes": numa_nodes, "guest_swap": swap}


def utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def metadata(kind: str, *, kernels: list[dict], machine_info: dict, argv: list[str],
             args: dict, started: float) -> dict:
    """The metadata block that every record starts with (the module's
    docstring lists it); kernels from kernel(), machine_info from machine()."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of record '{kind}'")
    first = kernels[0]
    return {"schema": SCHEMA, "kind": kind, "commit": vm.git_describe(), "series": series(),
            "kernel": first["release"],
            "config": {"flavour": first["flavour"], "sha256": first["config_sha256"]},
            "kernels": kernels,
            "where": "vm" if machine_info.get("guest_cpus") is not None else "native",
            "machine": machine_info, "started": utc(started),
            "args": {"argv": list(argv), **{k: _plain(v) for k, v in args.items()}}}


def _plain(v):
    return str(v) if isinstance(v, Path) else v


def add_record_dir(ap) -> None:
    """A runner's --record-dir."""
    ap.add_argument("--record-dir", help="where the run's JSON record goes (default: the "
                    "folder above --out, BUILD/results; with --report: none unless given)")


def write(record: dict, outdir: Path, stem: str) -> Path:
    """Write record as STEM-DATE.json in outdir (DATE from its start, UTC);
    a later run of the same day gets -2, -3...: none is lost."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    stem = f"{stem}-{record['started'][:10]}"
    path, n = outdir / f"{stem}.json", 1
    while path.exists():
        n += 1
        path = outdir / f"{stem}-{n}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def kind_of(record: dict) -> str | None:
    """A record's kind; records written before SCHEMA 1 by what they hold."""
    if "kind" in record:
        return record["kind"]
    if "summary" in record and "values" in record:
        return "bench-offcost"
    if "package" in record and "boots" in record:
        return "test-deb"
    if "fork_stress_runs" in record:
        return "soak"
    return None
