# SPDX-License-Identifier: GPL-2.0
"""asyncfork: the harness of the Async-fork kernel series.

It builds nothing itself (the shell scripts in scripts/ and the Makefile
do); it boots the built kernels, runs the tests, the demo and the
benchmarks in them or natively, and writes and reports their results.
python/README.md says what each module does.
"""
