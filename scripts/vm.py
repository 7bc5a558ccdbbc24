#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Boot a built guest kernel, run one command, judge the log: asyncfork vm.

The code is in python/asyncfork/vm.py, run as `asyncfork vm` (make vm);
this path stays for the commands of the run records and findings that
name it.  It runs the package of this checkout, installed or not:
PYTHONPATH names it, no import path is edited here.
"""

import os
import sys

top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
env = dict(os.environ, PYTHONPATH=os.pathsep.join(
    p for p in (os.path.join(top, "python"), os.environ.get("PYTHONPATH")) if p))
os.execve(sys.executable, [sys.executable, "-m", "asyncfork", "vm", *sys.argv[1:]], env)
