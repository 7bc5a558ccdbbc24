# SPDX-License-Identifier: GPL-2.0
"""python -m asyncfork VERB [ARGS...]: the asyncfork command (asyncfork.cli)
without an install, as the Makefile runs it."""

import sys

from asyncfork.cli import main

sys.exit(main())
