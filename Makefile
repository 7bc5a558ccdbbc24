# SPDX-License-Identifier: GPL-2.0
# Async-fork: build, boot and test a patched Linux 6.12 LTS kernel.
#
# Targets (make help prints this list):
#   make help           this list
#   make all            the same as make help (so is plain make)
#   make setup          install what the project needs: apt packages, .venv, the harness (SETUP_ARGS=--yes)
#   make arm64-root     arm64: cross compiler, QEMU, an arm64 root filesystem in $(BUILD)/arm64-root
#   make source         unpack the kernel source and apply the series into $(BUILD)/linux
#   make base           fetch and check the kernel base BASE= names (7.3: Linux 7.3.4, kernel/bases/7.3)
#                       BASE=7.3: make source, kernel-NAME, selftests, upstream-selftests, vm on
#                       the port (kernel/ports/7.3) in $(BUILD)/base-7.3; other targets refuse it
#   (make kernel-NAME   build the guest kernel of profile NAME into $(BUILD)/NAME, its log
#                       build.log there: the profiles follow this list)
#   make selftests      build the project's kselftest programs against the prepared tree
#   make upstream-selftests  build the upstream mm selftests from the prepared tree
#   make bench-programs build the C load generators and micro-benchmarks into $(BUILD)/bench
#   make check          the fast checks (under a minute): ruff, shellcheck, checkpatch, host-only tests
#   make test           make check, then build the debug kernel and the tests, boot, run them
#                       (ARCH=arm64: for an emulated arm64 guest, its programs, upstream mm selftests, off boot)
#   make demo           build the lean kernel, snapshot Redis under load both ways (SERVER=, NATIVE=, DEMO_ARGS=)
#   make bench          bench-fork, then bench-redis
#   make bench-fork     fork() against memory size and copy threads (NATIVE=, BENCH_FORK_ARGS=)
#   make bench-redis    Redis snapshots across sizes, loads and copy threads (SERVER=, NATIVE=, BENCH_REDIS_ARGS=)
#   make bench-sync     how long the parent's writes wait right after fork(), kernels side by side (BENCH_SYNC_ARGS=)
#   make bench-tlbi     ARCH=arm64: the TLB invalidations of one fork, counted by QEMU (BENCH_TLBI_ARGS=)
#   make bench-offcost  the series' cost unused: unpatched, =y with vm.async_fork=0, =n (OFFCOST_ARGS=)
#   make soak           the randomized tests for SOAK_MINUTES on the debug kernel (KERNEL=kasan/kcsan/deb, SOAK_ARGS=)
#   make mutate         each path-table row's hook turned off in the debug kernel, its test run (MUTATE_ARGS=)
#   make report         docs/results.md and docs/results/plots/ from the records in docs/results/*.json alone
#   make baseline       run the upstream mm selftests and rewrite their baseline
#   make check-series   build and boot every prefix of the series, CONFIG_ASYNC_FORK=y and =n (hours; ARCH=arm64 too)
#   make check-kernel   the series as the kernel's build bots check one, against unpatched 6.12: W=1 and
#                       sparse on the objects it changes, kernel-doc -Wall, htmldocs of its Documentation
#                       folders, tinyconfig kernels with CONFIG_ASYNC_FORK unset and set (x86; ~40 min; JOBS=, CHECKS=)
#   make kernel-git     a kernel git tree to edit the series in ($(KGIT)): the tarball, then git am
#   make export-series  that tree back into kernel/patches, with cover letters, base-commit, recipients
#   make vm CMD='...'   boot the $(KERNEL) kernel (default debug) and run one command in it
#   make deb            kernel packages from Debian's config (FLAVOUR=cloud-amd64 or amd64, ARCH=arm64:
#                       cloud-arm64 or arm64, cross-built; DEB_DBG=0; hours)
#   make deb-config     only the packaged kernel's .config, checked against Debian's
#   make test-deb       boot the package make deb built and run the snapshot tests on it (~1 h; ARCH=arm64 too)
#   make tools-deb      only the async-fork-tools package (seconds)
#   make virtiofsd      build virtio-fs's daemon into $(BUILD)/tools (make test-deb needs it)
#   make clean          remove the built kernels, programs, packages and results from $(BUILD)
#                       (kept: the source, the arm64 root, virtiofsd, $(KGIT))
#   make distclean      remove $(BUILD) and .venv
#
# Variables: BUILD (default build; everything generated lands there, ignored
# by git), ARCH (x86, the default, or arm64: the guest targets for an emulated
# arm64 guest, into $(BUILD)/arm64-*; soak, mutate, bench-offcost and
# check-kernel refuse it, bench-tlbi needs it), KERNEL (soak and vm: a profile
# below, default debug), NATIVE (demo and bench*; 1: on this machine, whose
# kernel must have Async-fork, printing the sysctls and cgroups it will change
# first; 0 or unset, the default: in the VM), SERVER (demo, bench,
# bench-redis: redis or valkey; KERNEL, NATIVE and SERVER on the command line
# of any other target are refused), FLAVOUR (Debian's kernel flavour of make
# deb, test-deb and soak KERNEL=deb), SOAK_MINUTES (default 30), *_ARGS
# (passed to the command). A target that runs Python runs `asyncfork TARGET`
# (python -m asyncfork TARGET), whose --help lists its arguments with their
# defaults.
# Every run of demo, bench-*, soak writes one JSON record into $(BUILD)/results/;
# commit one under docs/results/ and run make report to publish it.

# The kernel base: 6.12 (Debian's linux-source-6.12, the packaged line) or
# 7.3 (Linux 7.3.4 from Debian's signed archive, kernel/bases/7.3; its
# series is kernel/ports/7.3).  Each base builds in a folder of its own:
# 6.12 in BUILD, 7.3 in BUILD/base-7.3 (source, kernels, selftests,
# results); the fetched bases stay in BUILD/bases.
BASE           ?= 6.12
BASES          := 6.12 7.3
ifeq ($(filter $(BASE),$(BASES)),)
$(error BASE=$(BASE) is not a kernel base of this project ($(BASES)))
endif
BUILD          ?= build
BUILD_ROOT     := $(BUILD)
OTHER_BASE     := $(filter-out 6.12,$(BASE))
override BUILD := $(BUILD_ROOT)$(if $(OTHER_BASE),/base-$(BASE))
KERNEL_TARBALL ?= $(if $(OTHER_BASE),$(BUILD_ROOT)/bases/linux-$(BASE).tar.xz,/usr/src/linux-source-6.12.tar.xz)
# The series and the harness's own kernel patch for that base.
PATCHES        := $(CURDIR)/kernel/$(if $(OTHER_BASE),ports/$(BASE),patches)
HARNESS        := $(CURDIR)/kernel/$(if $(OTHER_BASE),ports/$(BASE)/,)harness
# What that base lacks of kernel/configs (scripts/build-kernel.sh).
export ASYNC_FORK_BASE_CONFIG := $(if $(OTHER_BASE),$(CURDIR)/kernel/ports/$(BASE)/base.config)
# On another base, only the tree, the kernels, the selftests and make vm
# so far: the other targets refuse it before building anything.
BASE_612_TARGETS := test soak mutate baseline check-series check-kernel kernel-git export-series \
	deb deb-config test-deb demo bench bench-fork bench-redis bench-sync bench-tlbi bench-offcost
ifneq ($(OTHER_BASE),)
ifneq ($(filter $(BASE_612_TARGETS),$(MAKECMDGOALS)),)
$(error make $(filter $(BASE_612_TARGETS),$(MAKECMDGOALS)): 6.12 only so far, not with BASE=$(BASE) (it has make source, base, kernel-PROFILE, selftests, upstream-selftests and vm))
endif
endif
KGIT           ?= $(BUILD)/kgit
PYTHON         := .venv/bin/python
# The harness (python/asyncfork) of this checkout, installed or not, and
# the build folder it works in: $(PYTHON) -m asyncfork VERB, one verb for
# each target that runs Python, of the target's name (asyncfork.cli).
export PYTHONPATH      := $(CURDIR)/python$(if $(PYTHONPATH),:$(PYTHONPATH))
export ASYNCFORK_BUILD := $(abspath $(BUILD))
PYTEST_ARGS    ?=
SOAK_MINUTES   ?= 30
SOAK_ARGS      ?=
FLAVOUR        ?= $(if $(ARM64),cloud-arm64,cloud-amd64)
KERNEL         ?= debug
NATIVE         ?=
SERVER         ?= redis
# The guest architecture (ARCH= is the kernel's own variable, exported to
# the scripts and the harness, which read it too).
GUEST_ARCH := $(if $(filter arm64 aarch64,$(ARCH)),arm64,$(if $(filter-out x86 x86_64,$(ARCH)),bad,x86))
ifeq ($(GUEST_ARCH),bad)
$(error ARCH=$(ARCH) is not an architecture this project builds for (x86 or arm64))
endif
ARM64          := $(filter arm64,$(GUEST_ARCH))
ARCH_DIR       := $(if $(ARM64),arm64-)
ARCH_CC        := $(if $(ARM64),CC=aarch64-linux-gnu-gcc)
# Targets that are x86 only so far refuse ARCH=arm64 when make reads the
# Makefile, before any prerequisite builds.
X86_ONLY_TARGETS := soak mutate bench-offcost check-kernel
ifneq ($(ARM64),)
ifneq ($(filter $(X86_ONLY_TARGETS),$(MAKECMDGOALS)),)
$(error make $(filter $(X86_ONLY_TARGETS),$(MAKECMDGOALS)): x86 only so far (not with ARCH=arm64))
endif
endif
# What make test runs in the guest: everything on x86; on arm64 the suite
# boot (the project's programs, the upstream mm selftests) and the boot
# with async_fork=off.
TEST_FILES     := $(if $(ARM64),tests/test_selftests.py tests/test_upstream_mm.py tests/test_boot_off.py,tests)
# The host changes only when asked: NATIVE=1 runs on this machine, anything
# else in the VM, whatever the running kernel is.
ifneq ($(filter-out 0 1,$(NATIVE)),)
$(error NATIVE=$(NATIVE): 1 runs on this machine, 0 or unset in the VM)
endif
NATIVE_FLAG    := $(if $(filter 1,$(NATIVE)),--native,--vm)
# KERNEL=, SERVER= and NATIVE= given on the command line to a target that
# does not read them are refused before anything builds: ignored, they
# would run something other than what was asked for.  (FLAVOUR= and the
# *_ARGS variables are each named after the targets that read them.)
KERNEL_TARGETS := soak vm
SERVER_TARGETS := demo bench bench-redis
NATIVE_TARGETS := demo bench bench-fork bench-redis
define refuse_unread
ifeq ($$(origin $(1)),command line)
ifneq ($$(filter-out $$($(1)_TARGETS),$$(MAKECMDGOALS)),)
$$(error make $$(filter-out $$($(1)_TARGETS),$$(MAKECMDGOALS)): $(1)= is only for: $$($(1)_TARGETS))
endif
endif
endef
$(foreach v,KERNEL SERVER NATIVE,$(eval $(call refuse_unread,$(v))))
# A native run needs no guest kernel.  An arm64 guest on this host is
# always a guest (the harness refuses NATIVE=1 with ARCH=arm64 too).
GUEST_KERNEL   := $(if $(filter 1,$(NATIVE)),,kernel-lean)
GUEST_KERNEL   := $(if $(ARM64),arm64-root kernel-lean,$(GUEST_KERNEL))

KSRC := $(BUILD)/linux

# The guest kernel profiles (kernel/configs/profiles): make kernel-NAME
# builds $(BUILD)/NAME ($(BUILD)/arm64-NAME).
PROFILES := $(shell awk '{ sub(/\#.*/, "") } NF { print $$1 }' kernel/configs/profiles)
KERNEL_TARGETS := $(addprefix kernel-,$(PROFILES))

.PHONY: all setup arm64-root source base check $(KERNEL_TARGETS) selftests upstream-selftests \
	test soak mutate report baseline check-series check-kernel kernel-git export-series demo bench bench-fork bench-redis bench-sync bench-tlbi bench-offcost bench-programs vm \
	deb deb-config test-deb virtiofsd tools-deb clean distclean help

all: help

help:
	@sed -n '4,/^$$/s/^# \{0,1\}//p' Makefile
	@echo
	@echo "Guest kernel profiles (kernel/configs/profiles; KERNEL=NAME for soak and vm):"
	@awk -F'#' '$$1 ~ /[^[:space:]]/ { split($$1, w, " "); d = $$2; sub(/^[[:space:]]*/, "", d); \
		printf "  make %-14s %s\n", "kernel-" w[1], d }' kernel/configs/profiles

setup:
	@scripts/setup.sh $(SETUP_ARGS)

arm64-root:
	@scripts/setup-arm64.sh $(BUILD)

# Another base is fetched and checked first (make base).
source: $(if $(OTHER_BASE),base)
	@ASYNC_FORK_PATCHES=$(PATCHES) ASYNC_FORK_HARNESS=$(HARNESS) scripts/prepare-source.sh $(KERNEL_TARBALL) $(BUILD)

base:
	@scripts/fetch-base.sh $(BASE) $(BUILD_ROOT)

$(KERNEL_TARGETS): kernel-%: source
	@scripts/build-kernel.sh $* $(BUILD)
kernel-%:
	@echo "make $@: no profile '$*' in kernel/configs/profiles ($(PROFILES))" >&2; exit 2

# The project's own kselftest programs, built against the prepared tree.
selftests: source
	@$(MAKE) -s -C tests/selftests KSRC=$(abspath $(KSRC)) OUT=$(abspath $(BUILD))/$(ARCH_DIR)selftests $(ARCH_CC)

# Upstream mm selftests from the prepared tree (they need its uapi headers).
upstream-selftests: source
	@scripts/build-upstream-selftests.sh $(BUILD)

bench-programs:
	@$(MAKE) -s -C bench OUT=$(abspath $(BUILD))/$(ARCH_DIR)bench $(ARCH_CC)

demo: $(GUEST_KERNEL) bench-programs
	@$(PYTHON) -m asyncfork demo $(NATIVE_FLAG) --server $(SERVER) $(DEMO_ARGS)

bench: bench-fork bench-redis

bench-fork: $(GUEST_KERNEL) bench-programs
	@$(PYTHON) -m asyncfork bench-fork $(NATIVE_FLAG) $(BENCH_FORK_ARGS)

bench-offcost: kernel-lean kernel-off bench-programs
	@scripts/build-unpatched.sh $(BUILD) lean
	@$(PYTHON) -m asyncfork bench-offcost $(OFFCOST_ARGS)

bench-redis: $(GUEST_KERNEL) bench-programs
	@$(PYTHON) -m asyncfork bench-redis $(NATIVE_FLAG) --server $(SERVER) $(BENCH_REDIS_ARGS)

# arm64 only: QEMU counts the guest's TLBIs (bench/qemu/tlbi-count.c, a
# plugin for the host's QEMU, built into $(BUILD)/tools).
ifneq ($(filter bench-tlbi,$(MAKECMDGOALS)),)
ifeq ($(ARM64),)
$(error make bench-tlbi: ARCH=arm64 only (QEMU counts an emulated arm64 guest's TLBIs))
endif
endif
bench-tlbi: arm64-root kernel-lean bench-programs
	@$(MAKE) -s -C bench/qemu OUT=$(abspath $(BUILD))/tools
	@$(PYTHON) -m asyncfork bench-tlbi $(BENCH_TLBI_ARGS)

# Guest only: --kernels names build folders (default the lean kernel).
bench-sync: kernel-lean bench-programs
	@$(PYTHON) -m asyncfork bench-sync $(BENCH_SYNC_ARGS)

SHELL_SCRIPTS := scripts/*.sh tests/guest/*.sh tests/repro/*.sh .ci/run

# Without the .venv of scripts/setup.sh, the one step missing.
$(PYTHON):
	@echo "make: no $(PYTHON): run scripts/setup.sh first (or make setup)" >&2; exit 2

# Some host tests drive the load generator against a host Redis/Valkey.
# Host checks, for the host's architecture whatever ARCH= says.  Under
# --require-built a test whose input is missing fails (plain pytest skips it).
check: $(PYTHON) source
	@$(MAKE) -s -C bench OUT=$(abspath $(BUILD))/bench
	@.venv/bin/ruff check python scripts tests
	@shellcheck $(SHELL_SCRIPTS)
	@env -u ARCH $(PYTHON) -m pytest -q -p no:cacheprovider --require-built -m "not guest and not slow" tests

test: check $(if $(ARM64),arm64-root) kernel-debug selftests upstream-selftests bench-programs
	@$(PYTHON) -m pytest --require-built -m "guest or slow" $(TEST_FILES) $(PYTEST_ARGS)

# KERNEL=deb: the package make deb built (FLAVOUR=), booted as make test-deb does.
soak: $(if $(filter deb,$(KERNEL)),virtiofsd,kernel-$(KERNEL)) selftests
	@$(PYTHON) -m asyncfork soak --kernel $(KERNEL) --flavour $(FLAVOUR) --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# One boot of the debug kernel (CONFIG_ASYNC_FORK_DEBUG), about 30 min.
mutate: kernel-debug selftests upstream-selftests
	@$(PYTHON) -m asyncfork mutate $(MUTATE_ARGS)

# Needs no build: only the committed records.
report:
	@$(PYTHON) -m asyncfork report

baseline: $(if $(ARM64),arm64-root) kernel-debug selftests upstream-selftests
	@$(PYTHON) -m pytest --require-built tests/test_upstream_mm.py --write-baseline $(PYTEST_ARGS)

check-series: $(if $(ARM64),arm64-root)
	@scripts/check-series.sh $(KERNEL_TARBALL) $(BUILD)

# The checks of scripts/check-kernel.sh (its --help); its logs go to $(BUILD)/check-kernel/
check-kernel: source
	@$(PYTHON) -m asyncfork check-kernel --build $(BUILD)

kernel-git:
	@scripts/kernel-git.sh $(KERNEL_TARBALL) $(KGIT)

export-series:
	@scripts/export-series.sh $(KGIT)

deb: source tools-deb $(if $(ARM64),arm64-root)
	@scripts/build-deb.sh $(FLAVOUR) $(BUILD)

deb-config: source $(if $(ARM64),arm64-root)
	@scripts/build-deb.sh --config-only $(FLAVOUR) $(BUILD)

test-deb: selftests virtiofsd $(if $(ARM64),arm64-root)
	@$(PYTHON) -m asyncfork test-deb --flavour $(FLAVOUR) --build $(BUILD)

# Debian's cloud kernels have no 9p: their guests see the root through
# virtio-fs, whose daemon Debian 12 does not package (crates.io does).
VIRTIOFSD_VERSION := 1.14.0
virtiofsd: $(BUILD)/tools/bin/virtiofsd
$(BUILD)/tools/bin/virtiofsd:
	@command -v cargo >/dev/null || { echo "make virtiofsd: cargo not found: install Rust (rustup or Debian's cargo)" >&2; exit 1; }
	cargo install --locked --root $(abspath $(BUILD))/tools --version $(VIRTIOFSD_VERSION) virtiofsd

tools-deb:
	@scripts/build-tools-deb.sh $(BUILD)

vm: $(if $(ARM64),arm64-root) kernel-$(KERNEL)
	@$(PYTHON) -m asyncfork vm --kernel $(BUILD)/$(ARCH_DIR)$(KERNEL) -- $(CMD)

.DEFAULT:
	@echo "make: unknown target '$@': 'make help' lists the targets" >&2; exit 2

# What make clean removes: every build of every target, for both
# architectures (tests/test_profiles.py checks it against the scripts).  Kept:
# the source (linux, pristine, stage, source.sum), what setup-like targets
# fetched or made once (arm64-root, linux-config-arm64, tools: virtiofsd)
# and $(KGIT), a tree one edits; make distclean removes them too.  The
# same goes for each other base's folder (BUILD/base-7.3).
ARCH_BUILDS := $(PROFILES) selftests upstream-mm headers bench
CLEAN_DIRS := $(ARCH_BUILDS) $(addprefix arm64-,$(ARCH_BUILDS)) \
	results series-check check-kernel unpatched debs tools-deb test-deb vm
clean:
	rm -rf $(addprefix $(BUILD)/,$(CLEAN_DIRS)) $(BUILD)/deb-* \
		$(foreach b,$(filter-out 6.12,$(BASES)),$(addprefix $(BUILD_ROOT)/base-$(b)/,$(CLEAN_DIRS)))

distclean:
	rm -rf $(BUILD) .venv
