# SPDX-License-Identifier: GPL-2.0
"""Native runs of the demo and the benchmarks: on this machine, with its own
CPUs and memory, instead of in a guest of the lean kernel, only when asked
(NATIVE=1 or --native) and on a running kernel with Async-fork.

choose() makes the decision (the VM unless NATIVE=1 or --native; --vm and
NATIVE=0 say the default) and says it in the first line the program
prints.  Settings is what a native run must have that a throw-away guest
does not: the plan of every sysctl, sysfs and cgroup setting the run will
change (old and new values), printed before the first change (a Settings
made with plan_first refuses a change before it); each setting is saved
before its first change and put back when the run ends, by a failure or a
signal (Ctrl-C, SIGTERM, SIGHUP) included.  Both take a root folder that
stands in for / in the tests.
"""

import contextlib
import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from asyncfork import paths, vm

ASYNC_FORK = "proc/sys/vm/async_fork"       # relative to the root
PACKAGE = "linux-image-6.12.N-asyncfork-cloud-amd64 (or -amd64, from make deb)"
INSTALL_DOC = "docs/install.md"
# The signals a run is stopped with: each ends it through its finally
# clauses (the settings are put back) instead of at once.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Unavailable(Exception):
    """A native run asked for where it cannot run: the message says why and
    what to do."""


def has_async_fork(root: Path = Path("/")) -> bool:
    return (Path(root) / ASYNC_FORK).exists()


def choose(flag: str | None = None, env=None, root: Path = Path("/"),
           release: str | None = None, euid: int | None = None) -> tuple[bool, str]:
    """(native?, the line that says which and why).  flag: "native", "vm"
    or None (then NATIVE from env: "1", "0", or unset or empty).  The VM
    unless NATIVE=1 or --native: the host changes only when asked.  Raises
    Unavailable for a native run this machine cannot make: no Async-fork in
    its kernel, or not root."""
    env = os.environ if env is None else env
    release = release or os.uname().release
    euid = os.geteuid() if euid is None else euid
    setting = env.get("NATIVE", "").strip()
    if setting not in ("", "0", "1"):
        raise Unavailable(f"NATIVE must be 1 (on this machine), 0 or unset (in a VM, "
                          f"the default), not '{setting}'")
    forced = {"native": "--native", "vm": "--vm"}.get(flag or "") or \
        (f"NATIVE={setting}" if setting else None)
    want = {"native": True, "vm": False}.get(flag or "", setting == "1")
    if paths.foreign():
        if want:
            raise Unavailable(f"{forced}: ARCH={paths.ARCH} runs in an emulated {paths.ARCH} "
                              f"guest on this {os.uname().machine} machine; a native run is "
                              f"for a machine of that architecture. Nothing was changed.")
        return False, f"mode: VM (ARCH={paths.ARCH}: an emulated guest)"
    present = has_async_fork(root)
    if not want:
        why = forced or "the default; NATIVE=1 or --native runs on this machine"
        return False, (f"mode: VM ({why}; the running kernel, {release}, "
                       f"{'has' if present else 'has no'} Async-fork)")
    if not present:
        raise Unavailable(
            f"{forced}: the running kernel, {release}, has no Async-fork (no "
            f"/{ASYNC_FORK}). Install the package {PACKAGE}, as {INSTALL_DOC} "
            f"says, boot it and run again; or run without {forced}, in the VM. "
            f"Nothing was changed.")
    if euid != 0:
        raise Unavailable(f"{forced}: a native run writes sysctls and cgroups (and puts them "
                          f"back): run it as root, or without {forced} in the VM")
    return True, f"mode: native (kernel {release}, /{ASYNC_FORK} present; {forced})"


def add_arguments(ap) -> None:
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--native", dest="where", action="store_const", const="native",
                   help="run on this machine (its kernel must have Async-fork; root), after "
                   "printing every setting the run will change; also NATIVE=1 in the "
                   "environment (default: in the VM)")
    g.add_argument("--vm", dest="where", action="store_const", const="vm",
                   help="run in a guest of the lean kernel (the default; NATIVE=0 too)")


def decide(a, prog: str, root: Path = Path("/")) -> bool | None:
    """Print the mode line and return native?, or print why not and return
    None (the caller exits 2 having changed nothing)."""
    try:
        native, line = choose(getattr(a, "where", None), root=root)
    except Unavailable as e:
        print(f"{prog}: {e}", file=sys.stderr, flush=True)
        return None
    print(line, flush=True)
    return native


def available_mb() -> int:
    return vm.host_available() >> 20


def machine() -> dict:
    """What a native run records in place of the guest's size."""
    return {"memory_mb": vm.meminfo("MemTotal") >> 20, "cpus": os.cpu_count(),
            "kernel": os.uname().release}


def current(path: Path) -> str:
    """A setting's value as it must be written back: the bracketed choice
    of a list ("always [madvise] never", trace_clock), the size of a trace
    buffer not yet expanded ("7 (expanded: 1408)")."""
    text = path.read_text().strip()
    m = re.search(r"\[([^\]]+)\]", text)
    if m:
        return m.group(1)
    m = re.search(r"\(expanded: (\d+)\)", text)
    if m:
        return m.group(1)
    return text


class Settings:
    """The kernel settings a run changes, put back by restore(): values
    written to sysctl, sysfs and cgroup files (the old value is read before
    the first write), controllers enabled in a cgroup's subtree_control
    (disabled again), folders made in cgroupfs or tracefs (a cgroup's tasks
    are killed, then the folder is removed), lines appended to a file that
    takes commands (a kprobe in kprobe_events: its removal is appended once
    the folders are gone) and file systems mounted.

    root stands for / (a folder in the tests, whose "cgroups" are plain
    folders, removed with what they hold, and where nothing is mounted)."""

    def __init__(self, root: Path = Path("/"), plan_first: bool = False):
        """plan_first: no change before announce() printed the plan."""
        self.root = Path(root)
        self.plan_first, self.announced = plan_first, False
        self.fake = self.root.resolve() != Path("/")
        self.saved: dict[Path, str] = {}       # path: its value before the run
        self.controllers: list[tuple[Path, str]] = []
        self.created: list[Path] = []
        self.appended: list[tuple[Path, str]] = []     # (file, the line that undoes)
        self.mounted: list[Path] = []

    def path(self, p: str | Path) -> Path:
        """p (absolute, as on a real machine) under the root."""
        return self.root / Path(p).relative_to("/")

    def announce(self, prog: str, plan: "Plan") -> None:
        """Print what the run will change, before its first change."""
        print("\n".join(plan.text(prog)), flush=True)
        self.announced = True

    def _may_change(self) -> None:
        if self.plan_first and not self.announced:
            raise RuntimeError("a native run must print its plan (Settings.announce) "
                               "before it changes anything")

    def _ours(self, path: Path) -> bool:
        return any(path.is_relative_to(d) for d in self.created)

    def write(self, path: Path, value: str, save: bool = True) -> None:
        """Write a setting, saving its value first unless it is in a folder
        the run made (which goes with the run) or save is False (files that
        are no setting: cgroup.procs, a trace buffer)."""
        self._may_change()
        path = Path(path)
        if save and path not in self.saved and not self._ours(path):
            self.saved[path] = current(path)
        path.write_text(value)

    def enable(self, subtree_control: Path, controller: str) -> None:
        """Enable a controller for a cgroup's children, unless it is."""
        self._may_change()
        if controller in subtree_control.read_text().split():
            return
        self.controllers.append((subtree_control, controller))
        subtree_control.write_text(f"+{controller}")

    def mkdir(self, path: Path) -> None:
        self._may_change()
        path = Path(path)
        if path.exists():
            return
        path.mkdir()
        self.created.append(path)

    def append(self, path: Path, line: str, undo: str) -> None:
        """Append a command to a file such as kprobe_events (opened for
        appending: a write that truncates it would remove every probe of
        the machine); undo is appended when the run ends."""
        self._may_change()
        append_line(path, line)
        self.appended.append((Path(path), undo))

    def mount(self, fstype: str, target: Path) -> bool:
        self._may_change()
        if self.fake:
            return False
        r = subprocess.run(["mount", "-t", fstype, "none", str(target)], check=False)
        if r.returncode == 0:
            self.mounted.append(Path(target))
        return r.returncode == 0

    @property
    def changed(self) -> bool:
        return bool(self.saved or self.controllers or self.created or self.appended or
                    self.mounted)

    def describe(self) -> str:
        """What restore() will do, in one line."""
        def show(p):
            return f"/{p.relative_to(self.root)}"
        parts = [f"{show(f)}={v}" for f, v in self.saved.items()]
        parts += [f"-{c} in {show(f)}" for f, c in self.controllers]
        parts += [f"rmdir {show(d)}" for d in self.created]
        parts += [f"'{u}' >> {show(f)}" for f, u in self.appended]
        parts += [f"umount {show(m)}" for m in self.mounted]
        return ", ".join(parts) or "nothing"

    def restore(self) -> list[str]:
        """Put everything back, newest change first; the stop signals wait
        until it is done.  Returns what could not be put back (each as a
        sentence), having tried all of it."""
        errors = []
        with held():
            while self.created:
                d = self.created.pop()
                try:
                    self._remove(d)
                except OSError as e:
                    errors.append(f"could not remove {d}: {e.strerror}")
            while self.appended:
                f, undo = self.appended.pop()
                try:
                    append_line(f, undo)
                except OSError as e:
                    errors.append(f"could not append {undo!r} to {f}: {e.strerror}")
            while self.controllers:
                f, c = self.controllers.pop()
                try:
                    f.write_text(f"-{c}")
                except OSError as e:
                    errors.append(f"could not disable {c} in {f}: {e.strerror}")
            for f, value in reversed(list(self.saved.items())):
                try:
                    f.write_text(value)
                except OSError as e:
                    errors.append(f"could not write back {value!r} to {f}: {e.strerror}")
            self.saved.clear()
            while self.mounted:
                m = self.mounted.pop()
                if subprocess.run(["umount", str(m)], check=False).returncode:
                    errors.append(f"could not unmount {m}")
        return errors

    def _remove(self, d: Path) -> None:
        if self.fake:
            shutil.rmtree(d)
            return
        procs = d / "cgroup.procs"
        if procs.exists():
            # What the run left in its cgroup (a snapshot child still
            # writing its RDB, say) goes with it.
            if (d / "cgroup.kill").exists():
                (d / "cgroup.kill").write_text("1")
            deadline = time.monotonic() + 10
            while procs.read_text().strip() and time.monotonic() < deadline:
                time.sleep(0.05)
        for _ in range(100):
            try:
                d.rmdir()
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                time.sleep(0.1)
        d.rmdir()


class Plan:
    """What a native run will change on this machine, said before it does:
    each sysctl and sysfs setting with its value now and the values the run
    gives it, the cgroup controllers it enables and the cgroups it makes,
    anything else (tracefs), and the services it stops.  Paths are given as
    on a real machine; Settings.path() finds them under its root."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.lines: list[str] = []
        self.services: list[str] = []

    def setting(self, path: str | Path, *new: str) -> None:
        """A sysctl or sysfs file the run writes: @new, in turn."""
        path = str(path)
        f = self.settings.path(path)
        old = current(f) if f.is_file() else "(absent)"
        if path.startswith("/proc/sys/"):
            name = "sysctl " + path[len("/proc/sys/"):].replace("/", ".")
        else:
            name = "sysfs " + path
        turn = " (in turn)" if len(new) > 1 else ""
        self.lines.append(f"{name}: {old} -> {', '.join(new)}{turn}")

    def controller(self, subtree_control: str | Path, controller: str) -> None:
        f = self.settings.path(subtree_control)
        if f.is_file() and controller in f.read_text().split():
            return
        self.lines.append(f"cgroup: the {controller} controller enabled in {subtree_control}")

    def cgroup(self, path: str | Path) -> None:
        if self.settings.path(path).exists():
            self.lines.append(f"cgroup: {path} used as it is (it exists; left there)")
        else:
            self.lines.append(f"cgroup: {path} created (its processes killed and it "
                              "removed at the end)")

    def other(self, line: str) -> None:
        self.lines.append(line)

    def service(self, name: str) -> None:
        self.services.append(name)

    def text(self, prog: str) -> list[str]:
        head = (f"{prog}: this native run will change on this machine (each put back "
                "when the run ends):")
        body = self.lines or ["nothing"]
        body = body + [f"services stopped: {', '.join(self.services) or 'none'}"]
        return [head] + [f"{prog}:   {line}" for line in body]


def append_line(path: Path, line: str) -> None:
    """One write with O_APPEND, as the shell's >> does: Python's mode "a"
    also seeks to the end, which kprobe_events refuses (EINVAL)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@contextlib.contextmanager
def held():
    """The stop signals wait (pending) until the block is done: clean-up
    that a second Ctrl-C must not cut short."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def stop_on_signals():
    """SIGTERM and SIGHUP end the program like Ctrl-C does, by an exception
    that runs every finally clause; SIGINT does so even where a shell
    started the program with it ignored (in the background).  Returns the
    old handlers for put_back_signals()."""
    old = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _exit_on_signal)
    return old


def put_back_signals(old) -> None:
    for s, h in old.items():
        signal.signal(s, h)


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)
