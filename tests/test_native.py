# SPDX-License-Identifier: GPL-2.0
"""Native mode of the demo and the benchmarks (asyncfork.native), on the host:

  * the decision (the VM unless NATIVE=1 or --native, whatever the running
    kernel; make's NATIVE= likewise), with a fake root;
  * a native run prints what it will change (sysctls with old and new
    values, cgroups, services) before its first change, writes mocked;
  * NATIVE=1 on a kernel without Async-fork stops at once, exit 2, naming
    the package, having changed nothing;
  * every setting a native run changes is put back when it ends, normally,
    on an error and on Ctrl-C, SIGTERM and SIGHUP: with a temporary folder
    standing in for / (its proc/sys and sys/fs/cgroup plain files), and a
    real Redis and load underneath.

The real native run is tested in the debug guest, whose kernel has
Async-fork (see the report of issue 17)."""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BUILD, TOP, asyncfork_command, need

from asyncfork import bench_fork, bench_redis, demo, native, report, results, snapshot

PY = sys.executable
HOST_HAS_ASYNC_FORK = native.has_async_fork()
ORIGINAL = {
    "proc/sys/vm/async_fork": "0",
    "proc/sys/vm/async_fork_copy_threads": "3",
    "sys/fs/cgroup/cgroup.subtree_control": "cpu io pids",
    "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never",
}


def fake_root(tmp_path, subtree="cpu io pids"):
    root = tmp_path / "root"
    for rel, value in dict(ORIGINAL, **{"sys/fs/cgroup/cgroup.subtree_control": subtree}
                           ).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(value + "\n")
    return root


def assert_put_back(root, subtree_written="-memory"):
    for rel, value in ORIGINAL.items():
        if rel.endswith("subtree_control"):
            continue
        # Untouched, or written back: THP's "always [madvise] never" goes
        # back as the choice it shows, "madvise".
        assert (root / rel).read_text().strip() in (value, native.current(root / rel)), rel
        assert (root / rel).read_text().strip() in (value, "madvise") or \
            not rel.endswith("enabled"), rel
    got = (root / "sys/fs/cgroup/cgroup.subtree_control").read_text().strip()
    assert got == subtree_written
    assert not (root / "sys/fs/cgroup/redis-demo").exists()


# --- the decision ---------------------------------------------------------

DEFAULT = "mode: VM (the default; NATIVE=1 or --native runs on this machine; "


@pytest.mark.parametrize("present,flag,env,native_,words", [
    (False, None, {}, False, DEFAULT + "the running kernel, 6.12.0-x, has no Async-fork)"),
    # The host changes only when asked: Async-fork in the running kernel
    # is no reason to run on it.
    (True, None, {}, False, DEFAULT + "the running kernel, 6.12.0-x, has Async-fork)"),
    (True, None, {"NATIVE": ""}, False, DEFAULT),
    (True, None, {"NATIVE": "0"}, False,
     "mode: VM (NATIVE=0; the running kernel, 6.12.0-x, has Async-fork)"),
    (True, None, {"NATIVE": "1"}, True, "present; NATIVE=1)"),
    (True, "vm", {"NATIVE": "1"}, False, "mode: VM (--vm;"),
    (False, "vm", {}, False, "mode: VM (--vm; the running kernel, 6.12.0-x, has no"),
    (True, "native", {"NATIVE": "0"}, True, "present; --native)"),
])
def test_mode_decision(tmp_path, present, flag, env, native_, words):
    if present:
        (tmp_path / "proc/sys/vm").mkdir(parents=True)
        (tmp_path / "proc/sys/vm/async_fork").write_text("1\n")
    got, line = native.choose(flag, env, tmp_path, release="6.12.0-x", euid=0)
    assert got is native_
    assert line.startswith(words) or words in line, line


@pytest.mark.parametrize("flag,env", [(None, {"NATIVE": "1"}), ("native", {}),
                                      ("native", {"NATIVE": "0"})])
def test_forced_native_without_async_fork_names_the_package(tmp_path, flag, env):
    with pytest.raises(native.Unavailable) as e:
        native.choose(flag, env, tmp_path, release="6.1.0-x", euid=0)
    msg = str(e.value)
    assert "6.1.0-x" in msg and "no Async-fork" in msg
    assert "linux-image-6.12" in msg and "asyncfork" in msg and "docs/install.md" in msg
    assert "Nothing was changed" in msg


def test_bad_native_value_is_refused(tmp_path):
    with pytest.raises(native.Unavailable, match="NATIVE must be 1"):
        native.choose(None, {"NATIVE": "yes"}, tmp_path, euid=0)


def test_native_needs_root(tmp_path):
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    (tmp_path / "proc/sys/vm/async_fork").write_text("1\n")
    with pytest.raises(native.Unavailable, match="root"):
        native.choose("native", {}, tmp_path, euid=1000)
    with pytest.raises(native.Unavailable, match="root"):
        native.choose(None, {"NATIVE": "1"}, tmp_path, euid=1000)
    # The default, the VM, needs no root here.
    assert native.choose(None, {}, tmp_path, euid=1000)[0] is False
    # The VM needs no root here to be chosen.
    assert native.choose("vm", {}, tmp_path, euid=1000)[0] is False


def test_modules_default_to_the_vm(tmp_path, monkeypatch, capsys):
    # demo, bench_fork and bench_redis decide by native.decide(): without
    # --native or NATIVE=1, the VM, though the running kernel (a fake
    # root's) has Async-fork.
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    (tmp_path / "proc/sys/vm/async_fork").write_text("1\n")
    monkeypatch.delenv("NATIVE", raising=False)
    for module in (demo, bench_fork, bench_redis):
        assert module.native is native
    ap = argparse.ArgumentParser()
    native.add_arguments(ap)
    assert native.decide(ap.parse_args([]), "demo", tmp_path) is False
    assert capsys.readouterr().out.startswith(DEFAULT)
    assert "default: in the VM" in ap.format_help().replace("\n", " ").replace("  ", " ")


def make_dry_run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("NATIVE", "MAKEFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-n", "-C", str(TOP), *args], capture_output=True, text=True,
                       timeout=60, env=env, check=False)
    return r.stdout + r.stderr


@pytest.mark.parametrize("target", ["demo", "bench-fork", "bench-redis"])
def test_make_runs_in_the_vm_unless_native_1(target):
    # make TARGET runs asyncfork TARGET.
    out = make_dry_run(target)
    assert f"-m asyncfork {target} --vm" in out and "build-kernel.sh lean" in out, out
    out = make_dry_run(target, "NATIVE=0")
    assert f"-m asyncfork {target} --vm" in out, out
    out = make_dry_run(target, "NATIVE=1")
    assert f"-m asyncfork {target} --native" in out and "build-kernel.sh" not in out, out


def test_make_refuses_another_native_value():
    assert "NATIVE=yes: 1 runs on this machine, 0 or unset in the VM" in \
        make_dry_run("demo", "NATIVE=yes")


# --- the plan, printed before the first change -------------------------------

@pytest.fixture
def changes(monkeypatch):
    """Settings' changes mocked (nothing written), each recorded in order
    after the plan's printing ("plan")."""
    events: list = []
    announce = native.Settings.announce

    def plan(self, prog, p):
        events.append("plan")
        announce(self, prog, p)

    monkeypatch.setattr(native.Settings, "announce", plan)
    for name in ("write", "enable", "mkdir", "append", "mount"):
        def change(self, *args, _name=name, **kw):
            self._may_change()
            events.append((_name, str(args[0]).split("/root/")[-1]))
            return False
        monkeypatch.setattr(native.Settings, name, change)
    return events


def test_bench_fork_prints_its_plan_first(tmp_path, changes, capsys):
    root = fake_root(tmp_path)
    cmd = [PY, "-c", "print('{}')"]
    assert bench_fork.run_native([(1, cmd), (4, cmd), (1, cmd)], tmp_path / "x.jsonl", root)
    assert changes[0] == "plan" and len(changes) > 1
    assert ("write", "proc/sys/vm/async_fork") in changes
    out = capsys.readouterr().out
    plan = out[:out.index("settings put back")]
    assert "bench-fork: this native run will change on this machine" in plan
    assert "sysfs /sys/kernel/mm/transparent_hugepage/enabled: madvise -> always" in plan
    assert "sysctl vm.async_fork: 0 -> 1" in plan
    assert "sysctl vm.async_fork_copy_threads: 3 -> 1, 4 (in turn)" in plan
    assert "services stopped: none" in plan
    # Nothing was written.
    assert (root / "proc/sys/vm/async_fork").read_text() == "0\n"


def test_redis_run_prints_its_plan_first(tmp_path, changes, capsys, monkeypatch):
    # A native snapshot run (as demo and bench_redis make it), up to
    # the server's start: the plan, then the changes.
    root = fake_root(tmp_path)
    monkeypatch.setattr(snapshot, "server_binary", lambda name=None: "redis-server")

    def stop(*args, **kw):
        raise snapshot.Failed("stopped here")

    monkeypatch.setattr(snapshot.Run, "start_server", stop)
    a = snapshot.parse_args(["--root", str(root), "--out", str(tmp_path / "out"),
                             "--work", str(tmp_path / "work"), "--copy-threads", "2"])
    with pytest.raises(snapshot.Failed, match="stopped here"):
        snapshot.Run.from_args(a, "native").main(a)
    assert changes[0] == "plan", changes
    assert ("write", "proc/sys/vm/async_fork") in changes
    assert ("mkdir", "sys/fs/cgroup/redis-demo") in changes
    plan = capsys.readouterr().out
    for line in ("native: this native run will change on this machine",
                 "sysctl vm.async_fork: 0 -> 1", "sysctl vm.async_fork_copy_threads: 3 -> 2",
                 "cgroup: the memory controller enabled in /sys/fs/cgroup/cgroup.subtree_control",
                 "cgroup: /sys/fs/cgroup/redis-demo created",
                 "tracefs mounted on /sys/kernel/tracing", "services stopped: none"):
        assert line in plan, plan


def test_no_change_before_the_plan(tmp_path):
    root = fake_root(tmp_path)
    run = snapshot.Run("native", settings=native.Settings(root, plan_first=True))
    with pytest.raises(RuntimeError, match="plan"):
        run.prepare_kernel(2)
    assert (root / "proc/sys/vm/async_fork").read_text() == "0\n"
    # With the plan said, the same run goes on (and puts back).
    plan = run.plan(2, False)
    assert "sysctl vm.async_fork_copy_threads: 3 -> 2" in plan.lines
    run.settings.announce("native", plan)
    run.prepare_kernel(2)
    assert (root / "proc/sys/vm/async_fork").read_text() == "1"
    assert run.settings.restore() == []
    assert_put_back(root)


# --- NATIVE=1 on this host ------------------------------------------------

def host_state() -> dict:
    """What a native run would change, as this host has it."""
    state = {}
    for f in ("/proc/sys/vm/async_fork", "/proc/sys/vm/async_fork_copy_threads",
              "/sys/kernel/mm/transparent_hugepage/enabled",
              "/sys/fs/cgroup/cgroup.subtree_control"):
        state[f] = Path(f).read_text() if os.path.exists(f) else None
    for d in ("/sys/fs/cgroup/redis-demo", "/sys/kernel/tracing/instances/redis-demo",
              "/tmp/redis-demo"):
        state[d] = os.path.exists(d)
    return state


@pytest.mark.skipif(HOST_HAS_ASYNC_FORK, reason="this host's kernel has Async-fork")
@pytest.mark.parametrize("verb,how", [
    ("demo", "env"), ("demo", "flag"), ("bench-redis", "env"),
    ("bench-fork", "env"), ("bench-fork", "flag"),
])
def test_native_on_this_host_stops_at_once(tmp_path, verb, how):
    out = tmp_path / "out"
    env = dict(os.environ, NATIVE="1" if how == "env" else "")
    args = ["--native"] if how == "flag" else []
    before = host_state()
    r = subprocess.run(asyncfork_command(verb) + ["--out", str(out),
                                                 "--kernel", "/nonexistent"] + args,
                       capture_output=True, text=True, timeout=60, env=env, cwd=TOP,
                       check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "no Async-fork" in r.stderr and "linux-image-6.12" in r.stderr, r.stderr
    assert "docs/install.md" in r.stderr
    assert "mode: native" not in r.stdout and "booting" not in r.stdout
    assert not out.exists()
    assert host_state() == before


# --- settings put back: the pieces ------------------------------------------

def test_current_value_forms(tmp_path):
    f = tmp_path / "f"
    for text, value in (("always [madvise] never\n", "madvise"), ("1\n", "1"),
                        ("7 (expanded: 1408)\n", "1408"),
                        ("[local] global counter mono\n", "local")):
        f.write_text(text)
        assert native.current(f) == value


def prepare(root, copy_threads=2) -> snapshot.Run:
    run = snapshot.Run(settings=native.Settings(root))
    run.prepare_kernel(copy_threads)
    return run


def test_prepare_and_restore(tmp_path):
    root = fake_root(tmp_path)
    run = prepare(root, copy_threads=4)
    s = run.settings
    assert (root / "proc/sys/vm/async_fork").read_text() == "1"
    assert (root / "proc/sys/vm/async_fork_copy_threads").read_text() == "4"
    assert (root / "sys/fs/cgroup/cgroup.subtree_control").read_text() == "+memory"
    assert (root / "sys/fs/cgroup/redis-demo").is_dir()
    run.write(run.cgroup / "memory.async_fork", "1")
    assert "/proc/sys/vm/async_fork=0" in s.describe()
    assert s.restore() == []
    assert_put_back(root)
    assert not s.changed and s.restore() == []      # once only


def test_controller_already_enabled_is_left_alone(tmp_path):
    root = fake_root(tmp_path, subtree="cpu memory pids")
    s = prepare(root).settings
    assert (root / "sys/fs/cgroup/cgroup.subtree_control").read_text().strip() == \
        "cpu memory pids"
    s.restore()
    assert_put_back(root, subtree_written="cpu memory pids")


def test_existing_cgroup_is_not_removed(tmp_path):
    root = fake_root(tmp_path)
    (root / "sys/fs/cgroup/redis-demo").mkdir()
    (root / "sys/fs/cgroup/redis-demo/memory.async_fork").write_text("0\n")
    run = prepare(root)
    run.write(run.cgroup / "memory.async_fork", "1")
    run.settings.restore()
    # Not the run's: it stays, with its setting as it was.
    assert (root / "sys/fs/cgroup/redis-demo/memory.async_fork").read_text() == "0"


def test_bad_copy_threads_puts_back_what_was_set(tmp_path):
    root = fake_root(tmp_path)
    (root / "proc/sys/vm/async_fork_copy_threads").unlink()
    (root / "proc/sys/vm/async_fork_copy_threads").mkdir()    # writing it fails
    run = snapshot.Run(settings=native.Settings(root))
    with pytest.raises(snapshot.Failed, match="--copy-threads"):
        run.prepare_kernel(2)
    run.settings.restore()
    assert (root / "proc/sys/vm/async_fork").read_text() == "0"


def test_restore_goes_on_past_an_error(tmp_path):
    root = fake_root(tmp_path)
    s = prepare(root).settings
    # The first value it will put back cannot be written any more.
    f = root / "proc/sys/vm/async_fork_copy_threads"
    f.unlink()
    f.mkdir()
    errors = s.restore()
    assert len(errors) == 1 and "async_fork_copy_threads" in errors[0]
    assert (root / "proc/sys/vm/async_fork").read_text() == "0"
    assert not (root / "sys/fs/cgroup/redis-demo").exists()


def test_bench_fork_native_puts_back(tmp_path):
    root = fake_root(tmp_path)
    jsonl = tmp_path / "forkbench.jsonl"
    seen = tmp_path / "seen"
    # A stand-in for forkbench that records the settings it ran with.
    stand_in = tmp_path / "forkbench"
    stand_in.write_text(f"echo $(cat {root}/proc/sys/vm/async_fork_copy_threads) "
                        f"$(cat {root}/sys/kernel/mm/transparent_hugepage/enabled) >> {seen}\n"
                        "echo '{}'\n")
    cmd = ["sh", str(stand_in)]
    assert bench_fork.run_native([(1, cmd), (4, cmd)], jsonl, root)
    assert seen.read_text().split() == ["1", "always", "4", "always"]
    assert jsonl.read_text() == "{}\n{}\n"
    assert_put_back(root, subtree_written="cpu io pids")


def test_bench_fork_native_puts_back_on_failure(tmp_path):
    root = fake_root(tmp_path)
    assert not bench_fork.run_native([(2, [PY, "-c", "raise SystemExit(3)"])],
                                     tmp_path / "x.jsonl", root)
    assert_put_back(root, subtree_written="cpu io pids")


# --- settings put back: a whole run, stopped by a signal ---------------------

def needs_servers():
    need(BUILD / "bench/loadgen", "no build/bench/loadgen: run make bench-programs")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("sig,rc", [(signal.SIGINT, 130), (signal.SIGTERM, 128 + 15),
                                    (signal.SIGHUP, 128 + 1)])
def test_signal_during_a_run_puts_everything_back(tmp_path, sig, rc):
    needs_servers()
    root = fake_root(tmp_path)
    port = snapshot.free_port_pair()
    # In the background as a shell would start it (SIGINT ignored): Ctrl-C
    # must still end it through its clean-up.
    p = subprocess.Popen(["sh", "-c", 'trap "" INT; exec "$@"', "sh",
                          *asyncfork_command("snapshot"), "--root", str(root),
                          "--out", str(tmp_path), "--work", str(tmp_path / "work"),
                          "--port", str(port), "--dataset-mb", "16", "--rate", "200",
                          "--baseline", "120", "--copy-threads", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in p.stdout:
            lines.append(line)
            if "load at" in line:
                break
        assert (root / "proc/sys/vm/async_fork").read_text() == "1", lines
        assert (root / "sys/fs/cgroup/redis-demo/memory.async_fork").read_text() == "0"
        assert port_open(port)
        p.send_signal(sig)
        rest, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = "".join(lines) + rest
    assert p.returncode == rc, text
    assert "settings put back: /proc/sys/vm/async_fork=0" in text, text
    assert_put_back(root)
    # The servers and the load went with it.
    assert not port_open(port)
    time.sleep(0.2)
    assert not port_open(port + 1)


@pytest.mark.slow
def test_native_demo_with_a_fake_root(tmp_path):
    # The demo's whole native path (decision, run, check, table, JSON) on
    # this host, with a fake / whose vm.async_fork exists.
    needs_servers()
    root = fake_root(tmp_path)
    out = tmp_path / "out"
    r = subprocess.run(asyncfork_command("demo") + [
                           "--root", str(root), "--server", "valkey", "--dataset-mb", "16",
                           "--rate", "300", "--baseline", "7", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=TOP,
                       env=dict(os.environ, NATIVE="1"), check=False)
    assert r.returncode == 0, (r.stdout, r.stderr)
    first = r.stdout.splitlines()[0]
    assert first.startswith("mode: native (kernel ") and "async_fork present" in first
    # The plan before the run, then the changes put back.
    assert r.stdout.index("this native run will change") < r.stdout.index("load at")
    assert "valkey-server 9." in r.stdout and "(libc malloc)" in r.stdout
    assert "natively (" in r.stdout and "booting" not in r.stdout
    # The run's record, beside its folder (asyncfork.results).
    record_file, = tmp_path.glob("demo-valkey-*.json")
    record = json.loads(record_file.read_text())
    assert record["where"] == "native" and record["server"]["name"] == "valkey"
    assert record["server"]["allocator"] == "libc" and record["machine"]["host_cpus"] >= 1
    assert all(t["rdb_exact"] for t in record["modes"].values())
    assert set(record["modes"]) == {"default", "async"}
    # make report's section of it, and its plot.
    text, pngs = report.render([(record_file, record)], tmp_path / "plots")
    assert "valkey-server 9." in text and "| Async-fork (memory.async_fork=1) |" in text
    assert f"{record_file.stem}-latency.png" in [p.name for p in pngs]
    assert not (out / "work").exists()
    assert_put_back(root)


@pytest.mark.slow
def test_native_bench_report(tmp_path):
    # bench_redis's native runs and its report, one configuration.
    needs_servers()
    root = fake_root(tmp_path)
    d = tmp_path / "16M"
    d.mkdir()
    meta = results.metadata("bench-redis", kernels=[results.kernel(None)],
                            machine_info=results.machine(), argv=[], args={},
                            started=time.time())
    (tmp_path / "meta.json").write_text(json.dumps(
        {**meta, "server": "redis", "rate": 300, "configs": ["16M"]}))
    bench_redis.run_native([("16M", d, ["--dataset-mb", "16", "--rate", "300",
                                        "--baseline", "2", "--modes", "default,async",
                                        "--root", str(root)])])
    assert bench_redis.report(tmp_path, tmp_path / "rec")
    record_file, = (tmp_path / "rec").glob("bench-redis-redis-*.json")
    record = json.loads(record_file.read_text())
    rows = record["runs"]
    text, _ = report.render([(record_file, record)], tmp_path / "plots")
    assert "**16M**: redis-server" in text
    assert rows[0]["config"]["server"] == "redis"
    assert rows[0]["config"]["allocator"] == "jemalloc"
    assert_put_back(root)
