# SPDX-License-Identifier: GPL-2.0
# Async-fork: build, boot and test a patched Linux 6.12 LTS kernel.
#
#   make setup         install what the project needs (apt, pip into .venv)
#   make kernel-debug  build the debug guest kernel (correctness runs)
#   make kernel-lean   build the lean guest kernel (benchmarks, demo)
#   make kernel-kasan  build the debug kernel with generic KASAN (make soak KERNEL=kasan)
#   make kernel-kcsan  build the debug kernel with KCSAN (data-race runs)
#   make check         the fast checks (under a minute): ruff, shellcheck,
#                      checkpatch on the series, the host-only tests
#   make test          make check, then build the debug kernel and the tests,
#                      boot, run them
#   make demo          build the lean kernel, snapshot Redis under load, both ways
#                      (SERVER=valkey: Valkey; NATIVE=1/0: on this machine or in
#                      the VM; by default native when it runs an Async-fork kernel)
#   make bench         build the lean kernel, run the benchmarks (fork() against
#                      memory size and copy threads; Redis snapshots across sizes,
#                      loads and copy threads): bench-fork, then bench-redis
#   make soak          the randomized tests (fork_stress, stress-ng, Redis digests)
#                      on the debug kernel (KERNEL=kasan or kcsan: that one) for
#                      SOAK_MINUTES (default 30), recorded in docs/results/soak-*.json;
#                      SOAK_ARGS='--swap zram' swaps to zram instead of a loop device
#   make bench-offcost what the series costs unused: micro-benchmarks on the
#                      unpatched kernel, CONFIG_ASYNC_FORK=y with vm.async_fork=0
#                      and =n, one config, alternating boots (~1 h with builds)
#   make baseline      run the upstream mm selftests and rewrite their baseline
#   make check-series  build and boot the kernel with each prefix of the patch
#                      series, CONFIG_ASYNC_FORK=y and =n (resumable; hours cold)
#   make kernel-git    a kernel git tree to edit the series in: the tarball, then
#                      git am of kernel/patches ($(KGIT))
#   make export-series that tree back into kernel/patches: both series, with
#                      cover letters, base-commit and recipients
#   make vm CMD='...'  boot the debug kernel and run one command in it
#   make deb           kernel packages from Debian's own config with Async-fork
#                      (FLAVOUR=cloud-amd64 or amd64; DEB_DBG=0 skips -dbg),
#                      plus async-fork-tools, into $(BUILD)/debs/ (hours)
#   make deb-config    only the packaged kernel's .config, checked against Debian's
#   make test-deb      boot the package make deb built, with its modules, and run
#                      the snapshot tests on it: Debian's defaults, then with KSM,
#                      DAMON reclaim, MGLRU aging and NUMA balancing acting (~1 h)
#   make tools-deb     only the async-fork-tools package (seconds)
#   make virtiofsd     build virtio-fs's daemon into $(BUILD)/tools (make test-deb)
#
# Everything generated lands in $(BUILD) (ignored by git).

KERNEL_TARBALL ?= /usr/src/linux-source-6.12.tar.xz
BUILD          ?= build
KGIT           ?= $(BUILD)/kgit
PYTHON         := .venv/bin/python
PYTEST_ARGS    ?=
SOAK_MINUTES   ?= 30
SOAK_ARGS      ?=
FLAVOUR        ?= cloud-amd64
KERNEL         ?= debug
NATIVE         ?=
SERVER         ?= redis
NATIVE_FLAG    := $(if $(filter 1,$(NATIVE)),--native,$(if $(filter 0,$(NATIVE)),--vm))
# A native run needs no guest kernel.
GUEST_KERNEL   := $(if $(filter 1,$(NATIVE)),,$(if $(filter 0,$(NATIVE)),kernel-lean,$(if $(wildcard /proc/sys/vm/async_fork),,kernel-lean)))

KSRC := $(BUILD)/linux

.PHONY: all setup source check kernel-lean kernel-debug kernel-off kernel-kasan kernel-kcsan selftests upstream-selftests \
	test soak baseline check-series kernel-git export-series demo bench bench-fork bench-redis bench-offcost bench-programs vm \
	deb deb-config test-deb virtiofsd tools-deb clean distclean help

all: help

help:
	@sed -n '3,45s/^# \{0,1\}//p' Makefile

setup:
	@scripts/setup.sh $(SETUP_ARGS)

source:
	@scripts/prepare-source.sh $(KERNEL_TARBALL) $(BUILD)

kernel-lean kernel-debug kernel-off kernel-kasan kernel-kcsan: kernel-%: source
	@scripts/build-kernel.sh $* $(BUILD)

# The project's own kselftest programs, built against the prepared tree.
selftests: source
	@$(MAKE) -s -C tests/selftests KSRC=$(abspath $(KSRC)) OUT=$(abspath $(BUILD))/selftests

# Upstream mm selftests from the prepared tree (they need its uapi headers).
upstream-selftests: source
	@scripts/build-upstream-selftests.sh $(BUILD)

bench-programs:
	@$(MAKE) -s -C bench OUT=$(abspath $(BUILD))/bench

demo: $(GUEST_KERNEL) bench-programs
	@$(PYTHON) bench/redis_demo.py $(NATIVE_FLAG) --server $(SERVER) $(DEMO_ARGS)

bench: bench-fork bench-redis

bench-fork: $(GUEST_KERNEL) bench-programs
	@$(PYTHON) bench/fork_bench.py $(NATIVE_FLAG) $(BENCH_FORK_ARGS)

bench-offcost: kernel-lean kernel-off bench-programs
	@scripts/build-unpatched.sh $(BUILD) lean
	@$(PYTHON) bench/offcost.py $(OFFCOST_ARGS)

bench-redis: $(GUEST_KERNEL) bench-programs
	@$(PYTHON) bench/redis_bench.py $(NATIVE_FLAG) --server $(SERVER) $(BENCH_REDIS_ARGS)

SHELL_SCRIPTS := scripts/*.sh tests/guest/*.sh .ci/run

# Some host tests drive the load generator against a host Redis/Valkey.
check: source bench-programs
	@.venv/bin/ruff check bench scripts tests
	@shellcheck $(SHELL_SCRIPTS)
	@$(PYTHON) -m pytest -q -p no:cacheprovider -m "not guest and not slow" tests

test: check kernel-debug selftests upstream-selftests bench-programs
	@$(PYTHON) -m pytest -m "guest or slow" tests $(PYTEST_ARGS)

soak: kernel-$(KERNEL) selftests
	@$(PYTHON) tests/soak.py --kernel $(KERNEL) --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

baseline: kernel-debug upstream-selftests
	@$(PYTHON) -m pytest tests/test_upstream_mm.py --write-baseline $(PYTEST_ARGS)

check-series:
	@scripts/check-series.sh $(KERNEL_TARBALL) $(BUILD)

kernel-git:
	@scripts/kernel-git.sh $(KERNEL_TARBALL) $(KGIT)

export-series:
	@scripts/export-series.sh $(KGIT)

deb: source tools-deb
	@scripts/build-deb.sh $(FLAVOUR) $(BUILD)

deb-config: source
	@scripts/build-deb.sh --config-only $(FLAVOUR) $(BUILD)

test-deb: selftests virtiofsd
	@$(PYTHON) tests/deb_suite.py --flavour $(FLAVOUR) --build $(BUILD)

# Debian's cloud kernels have no 9p: their guests see the root through
# virtio-fs, whose daemon Debian 12 does not package (crates.io does).
VIRTIOFSD_VERSION := 1.14.0
virtiofsd: $(BUILD)/tools/bin/virtiofsd
$(BUILD)/tools/bin/virtiofsd:
	@command -v cargo >/dev/null || { echo "make virtiofsd: cargo not found: install Rust (rustup or Debian's cargo)" >&2; exit 1; }
	cargo install --locked --root $(abspath $(BUILD))/tools --version $(VIRTIOFSD_VERSION) virtiofsd

tools-deb:
	@scripts/build-tools-deb.sh $(BUILD)

vm: kernel-$(KERNEL)
	@$(PYTHON) scripts/vm.py --kernel $(BUILD)/$(KERNEL) -- $(CMD)

.DEFAULT:
	@echo "make: unknown target '$@': 'make help' lists the targets" >&2; exit 2

clean:
	rm -rf $(BUILD)/lean $(BUILD)/debug $(BUILD)/kasan $(BUILD)/kcsan $(BUILD)/selftests $(BUILD)/results \
		$(BUILD)/debs $(BUILD)/tools-deb

distclean:
	rm -rf $(BUILD) .venv
