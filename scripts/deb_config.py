#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Compare a kernel .config with Debian's: asyncfork deb-config.

The code is in python/asyncfork/deb_config.py, run as `asyncfork
deb-config` (scripts/build-deb.sh runs it with the system's python3);
this path stays for the records that name it.  It runs the package of
this checkout, installed or not: PYTHONPATH names it, no import path is
edited here.
"""

import os
import sys

top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
env = dict(os.environ, PYTHONPATH=os.pathsep.join(
    p for p in (os.path.join(top, "python"), os.environ.get("PYTHONPATH")) if p))
os.execve(sys.executable,
          [sys.executable, "-m", "asyncfork", "deb-config", *sys.argv[1:]], env)
