// SPDX-License-Identifier: GPL-2.0
/*
 * async_fork: the interface, the counters and the error paths of Async-fork.
 *
 * fork_snapshot proves that the snapshot is exact on every path; this
 * program proves the rest of what Documentation/admin-guide/mm/async_fork.rst
 * promises: bad input is refused with EINVAL, the opt-ins (prctl, cgroup,
 * sysctl) decide which forks are asynchronous and are inherited as
 * documented, the vmstat counters move, and a copy that fails (injected
 * allocation failure in the child or in the parent, SIGKILL to the child,
 * the OOM killer) kills only the child and leaves the parent intact, and a
 * parent that exits or is OOM-killed while its child copies leaves the
 * child a complete snapshot or a dead child.
 *
 * Runs as root in the guest, with debugfs mounted and vm.async_fork
 * restored to its value at start.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "snapshot.h"
#include "knobs.h"
#include "mm/gup_test.h"

#ifndef PR_SET_ASYNC_FORK
#define PR_SET_ASYNC_FORK	0x41464b01
#define PR_GET_ASYNC_FORK	0x41464b02
#endif

#define SZ_2M		(2UL << 20)
#define REGION		(128UL << 20)
#define CGROUP		"/sys/fs/cgroup/async_fork_test"
#define THREADS		"/proc/sys/vm/async_fork_copy_threads"
#define TRACING		"/sys/kernel/tracing/"

static void set_long(const char *path, long val)
{
	if (write_long(path, val))
		ksft_exit_fail_msg("cannot write %ld to %s\n", val, path);
}

static void set_sysctl(long val)
{
	set_long("/proc/sys/vm/async_fork", val);
}

/*
 * @size bytes of 4 KiB anonymous memory, PMD-aligned (so that a fork defers
 * all of it); *@base is what to munmap(), @size + SZ_2M bytes.
 */
static char *aligned_region(size_t size, char **base)
{
	char *p = mmap(NULL, size + SZ_2M, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;

	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + SZ_2M - 1) & ~(SZ_2M - 1));
	madvise(a, size, MADV_NOHUGEPAGE);
	*base = p;
	return a;
}

/* REGION bytes of 4 KiB anonymous memory, PMD-aligned, filled with seed 1. */
static char *region(void)
{
	char *base, *a = aligned_region(REGION, &base);

	if (a)
		fill(a, REGION, 1);
	return a;
}

/* Fork; the child checks the pre-fork contents and exits 0 if they hold. */
static pid_t fork_checker(const char *mem)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(mismatch(mem, REGION, 1) >= 0);
	return pid;
}

static int reap(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

static long started_async(void)
{
	return vmstat("async_fork");
}

FIXTURE(af) {
	long saved_sysctl;
	long saved_threads;
	char *mem;	/* REGION bytes of seed 1, or NULL (see without_region) */
};

/*
 * Cases that never touch the region: filling it costs seconds per case
 * under emulation.
 */
static const char * const without_region[] = {
	"sysctl_rejects_bad_values", "copy_threads_rejects_bad_values",
	"prctl_rejects_bad_arguments", "prctl_inherited_across_fork_and_exec",
	"mmap_and_brk_next_to_pending_vma_do_not_wait",
	"empty_fork_is_not_a_fallback", "secure_exec_clears_opt_in",
	"oom_reaper_gives_up_pending_copy", "copy_helpers_stay_in_child_cpu_quota",
	"freezer_freezes_child_after_its_copy", "ksm_zero_pages_counted_as_child_copies",
	"copy_helpers_allocate_on_child_mems",
};

static bool needs_region(const char *test)
{
	for (size_t i = 0; i < ARRAY_SIZE(without_region); i++)
		if (!strcmp(test, without_region[i]))
			return false;
	return true;
}

FIXTURE_SETUP(af)
{
	self->saved_sysctl = read_long("/proc/sys/vm/async_fork");
	if (self->saved_sysctl < 0)
		SKIP(return, "no vm.async_fork: kernel without Async-fork");
	self->saved_threads = read_long(THREADS);
	ASSERT_GE(self->saved_threads, 1);
	ASSERT_EQ(prctl(PR_SET_ASYNC_FORK, 0, 0, 0, 0), 0);
	self->mem = NULL;
	if (needs_region(_metadata->name)) {
		self->mem = region();
		ASSERT_NE(self->mem, NULL);
	}
}

FIXTURE_TEARDOWN(af)
{
	if (self->saved_sysctl >= 0)
		set_sysctl(self->saved_sysctl);
	if (self->saved_threads >= 1)
		set_long(THREADS, self->saved_threads);
	stop_failures(FAIL_ALLOC);
}

TEST_F_TIMEOUT(af, sysctl_rejects_bad_values, 180)
{
	const char *bad[] = { "3", "-1", "abc", "1x" };

	set_sysctl(1);
	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT_EQ(write_file("/proc/sys/vm/async_fork", bad[i]), EINVAL) {
			TH_LOG("vm.async_fork accepted '%s'", bad[i]);
		}
		EXPECT_EQ(read_long("/proc/sys/vm/async_fork"), 1);
	}
}

TEST_F_TIMEOUT(af, copy_threads_rejects_bad_values, 180)
{
	const char *bad[] = { "0", "33", "-1", "abc", "2x" };

	set_long(THREADS, 32);
	EXPECT_EQ(read_long(THREADS), 32);
	set_long(THREADS, 1);
	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT_EQ(write_file(THREADS, bad[i]), EINVAL) {
			TH_LOG("vm.async_fork_copy_threads accepted '%s'", bad[i]);
		}
		EXPECT_EQ(read_long(THREADS), 1);
	}
}

TEST_F_TIMEOUT(af, prctl_rejects_bad_arguments, 180)
{
	errno = 0;
	EXPECT_EQ(prctl(PR_SET_ASYNC_FORK, 2, 0, 0, 0), -1);
	EXPECT_EQ(errno, EINVAL);
	errno = 0;
	EXPECT_EQ(prctl(PR_SET_ASYNC_FORK, 1, 1, 0, 0), -1);
	EXPECT_EQ(errno, EINVAL);
	errno = 0;
	EXPECT_EQ(prctl(PR_GET_ASYNC_FORK, 1, 0, 0, 0), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(prctl(PR_GET_ASYNC_FORK, 0, 0, 0, 0), 0);
}

/* With vm.async_fork=1, only a process that asked forks asynchronously. */
TEST_F_TIMEOUT(af, sysctl_one_means_opted_in_only, 180)
{
	long before;
	pid_t pid;

	set_sysctl(1);
	before = started_async();
	pid = fork_checker(self->mem);
	ASSERT_EQ(reap(pid), 0);
	EXPECT_EQ(started_async(), before);

	ASSERT_EQ(prctl(PR_SET_ASYNC_FORK, 1, 0, 0, 0), 0);
	ASSERT_EQ(prctl(PR_GET_ASYNC_FORK, 0, 0, 0, 0), 1);
	pid = fork_checker(self->mem);
	ASSERT_EQ(reap(pid), 0);
	EXPECT_EQ(started_async(), before + 1);

	set_sysctl(0);
	pid = fork_checker(self->mem);
	ASSERT_EQ(reap(pid), 0);
	EXPECT_EQ(started_async(), before + 1);
}

TEST_F_TIMEOUT(af, counters_move, 180)
{
	long forks = vmstat("async_fork");
	long child = vmstat("async_fork_pmd_child");
	long sync = vmstat("async_fork_pmd_sync");
	pid_t pid;

	set_sysctl(2);
	pid = fork_checker(self->mem);
	/* The parent writes at once: whatever the child has not copied yet. */
	fill(self->mem, REGION, 2);
	ASSERT_EQ(reap(pid), 0);
	EXPECT_EQ(mismatch(self->mem, REGION, 2), -1);
	EXPECT_GE(vmstat("async_fork") - forks, 1);
	EXPECT_GE(vmstat("async_fork_pmd_child") - child +
		  vmstat("async_fork_pmd_sync") - sync, (long)(REGION / SZ_2M));
}

/* The opt-in survives fork() and execve(): /proc/self/exe --get-prctl. */
TEST_F_TIMEOUT(af, prctl_inherited_across_fork_and_exec, 180)
{
	for (int want = 0; want <= 1; want++) {
		pid_t pid;
		int status;

		ASSERT_EQ(prctl(PR_SET_ASYNC_FORK, want, 0, 0, 0), 0);
		pid = fork();
		ASSERT_GE(pid, 0);
		if (pid == 0) {
			execl("/proc/self/exe", "async_fork", "--get-prctl", NULL);
			_exit(100);
		}
		status = reap(pid);
		ASSERT_TRUE(WIFEXITED(status));
		EXPECT_EQ(WEXITSTATUS(status), want);
	}
}

/* memory.async_fork: refuses bad input, is inherited, opts its tasks in. */
TEST_F_TIMEOUT(af, cgroup_file, 180)
{
	const char *bad[] = { "2", "-1", "abc", "1x" };
	long before;
	pid_t pid;
	char buf[32];

	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
	rmdir(CGROUP "/sub");
	rmdir(CGROUP);
	ASSERT_EQ(mkdir(CGROUP, 0755), 0);
	EXPECT_EQ(read_long(CGROUP "/memory.async_fork"), 0);
	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT_EQ(write_file(CGROUP "/memory.async_fork", bad[i]), EINVAL) {
			TH_LOG("memory.async_fork accepted '%s'", bad[i]);
		}
	}
	ASSERT_EQ(write_file(CGROUP "/memory.async_fork", "1"), 0);
	EXPECT_EQ(read_long(CGROUP "/memory.async_fork"), 1);
	write_file(CGROUP "/cgroup.subtree_control", "+memory");
	ASSERT_EQ(mkdir(CGROUP "/sub", 0755), 0);
	EXPECT_EQ(read_long(CGROUP "/sub/memory.async_fork"), 1);

	/* A task in the cgroup forks asynchronously without any prctl. */
	set_sysctl(1);
	before = started_async();
	snprintf(buf, sizeof(buf), "%d", getpid());
	ASSERT_EQ(write_file(CGROUP "/sub/cgroup.procs", buf), 0);
	pid = fork_checker(self->mem);
	ASSERT_EQ(reap(pid), 0);
	EXPECT_EQ(started_async(), before + 1);
	ASSERT_EQ(write_file("/sys/fs/cgroup/cgroup.procs", buf), 0);
	EXPECT_EQ(rmdir(CGROUP "/sub"), 0);
	EXPECT_EQ(rmdir(CGROUP), 0);
}

/* How fork_kind() saw a fork go. */
enum { WENT_ASYNC = 20, FELL_BACK, CHILD_FAILED, COUNTERS_ODD };

/* Fork a checker and say, by the counters, which way that fork went. */
static int fork_kind(const char *mem)
{
	long forks = vmstat("async_fork");
	long fallbacks = vmstat("async_fork_fallback");
	long empty = vmstat("async_fork_empty");

	if (reap(fork_checker(mem)) != 0)
		return CHILD_FAILED;
	forks = vmstat("async_fork") - forks;
	fallbacks = vmstat("async_fork_fallback") - fallbacks;
	if (vmstat("async_fork_empty") != empty)
		return COUNTERS_ODD;
	if (forks == 1 && !fallbacks)
		return WENT_ASYNC;
	return !forks && fallbacks == 1 ? FELL_BACK : COUNTERS_ODD;
}

/*
 * Run @cmd of gup_test on @arg in a child (a pin marks a process for
 * good), then fork_kind() there; returns the child's exit status.
 */
static int pin_then_fork(int fd, unsigned long cmd, void *arg, const char *mem)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (ioctl(fd, cmd, arg))
			_exit(10);
		if (cmd == PIN_LONGTERM_TEST_START)
			ioctl(fd, PIN_LONGTERM_TEST_STOP);
		_exit(fork_kind(mem));
	}
	return pid < 0 ? -1 : reap(pid);
}

/* A process that ever took a long-term pin copies the default way, and says why. */
TEST_F_TIMEOUT(af, pinned_process_falls_back, 180)
{
	struct pin_longterm_test pin = {
		.addr = (uintptr_t)self->mem, .size = 4096,
		.flags = PIN_LONGTERM_TEST_FLAG_USE_WRITE,
	};
	int fd = open("/sys/kernel/debug/gup_test", O_RDWR);
	int status;

	if (fd < 0)
		SKIP(return, "no /sys/kernel/debug/gup_test (CONFIG_GUP_TEST)");
	set_sysctl(2);
	status = pin_then_fork(fd, PIN_LONGTERM_TEST_START, &pin, self->mem);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), FELL_BACK);
	close(fd);
}

/*
 * Short pins (pin_user_pages_fast() without FOLL_LONGTERM, as O_DIRECT and
 * netfs reads take them) leave Async-fork on.
 */
TEST_F_TIMEOUT(af, short_pin_keeps_async_fork, 180)
{
	struct gup_test gup = {
		.addr = (uintptr_t)self->mem, .size = SZ_2M,
		.nr_pages_per_call = 64, .gup_flags = 1,	/* FOLL_WRITE */
	};
	int fd = open("/sys/kernel/debug/gup_test", O_RDWR);
	int status;

	if (fd < 0)
		SKIP(return, "no /sys/kernel/debug/gup_test (CONFIG_GUP_TEST)");
	set_sysctl(2);
	/* Pins 512 pages with FOLL_PIN and unpins them. */
	status = pin_then_fork(fd, PIN_FAST_BENCHMARK, &gup, self->mem);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), WENT_ASYNC);
	close(fd);
}

/* The threads= of the last async_fork_child_done event in the trace, or -1. */
static long last_copy_threads(void)
{
	char line[512];
	long threads = -1;
	FILE *f = fopen(TRACING "trace", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *t = strstr(line, "async_fork_child_done:");

		if (t && (t = strstr(t, " threads=")))
			threads = strtol(t + 9, NULL, 10);
	}
	fclose(f);
	return threads;
}

/*
 * vm.async_fork_copy_threads=4: the child shares its copy with three
 * helpers (the tracepoint says how many threads copied), while the parent
 * writes; the snapshot holds and every table was copied once.
 */
TEST_F_TIMEOUT(af, parallel_copy, 180)
{
	long child = vmstat("async_fork_pmd_child");
	long sync = vmstat("async_fork_pmd_sync");
	pid_t pid;

	if (access(TRACING "events/async_fork/async_fork_child_done/enable", W_OK))
		SKIP(return, "no tracefs at " TRACING);
	set_sysctl(2);
	set_long(THREADS, 4);
	write_file(TRACING "trace", "");
	ASSERT_EQ(write_file(TRACING "events/async_fork/async_fork_child_done/enable", "1"), 0);
	pid = fork_checker(self->mem);
	fill(self->mem, REGION, 2);
	ASSERT_EQ(reap(pid), 0);
	write_file(TRACING "events/async_fork/async_fork_child_done/enable", "0");
	EXPECT_EQ(mismatch(self->mem, REGION, 2), -1);
	EXPECT_GE(vmstat("async_fork_pmd_child") - child +
		  vmstat("async_fork_pmd_sync") - sync, (long)(REGION / SZ_2M));
	EXPECT_EQ(last_copy_threads(), 4);
}

/*
 * A second fork() while the first child still copies: fork() finishes the
 * first copy before it starts (the parent has one copy in progress at a
 * time; a debug kernel warns otherwise), and both children see the
 * contents of before the first fork.  The finished copy is seen as
 * async_fork_vma_sync moving; a first child that copied everything before
 * the second fork proves nothing, so try again a few times.  A third fork()
 * after both copies finds the finished links still on the parent's VMAs:
 * it must copy nothing for them and still be asynchronous.
 */
TEST_F_TIMEOUT(af, fork_while_previous_copy_pending, 180)
{
	long forks, vma_syncs;
	bool seen = false;
	pid_t first, second, third;
	int tries;

	set_sysctl(2);
	for (tries = 0; tries < 10 && !seen; tries++) {
		forks = started_async();
		vma_syncs = vmstat("async_fork_vma_sync");
		first = fork_checker(self->mem);
		second = fork_checker(self->mem);
		seen = vmstat("async_fork_vma_sync") > vma_syncs;
		fill(self->mem, REGION, 2);
		ASSERT_EQ(reap(first), 0);
		ASSERT_EQ(reap(second), 0);
		ASSERT_EQ(started_async() - forks, 2);
		fill(self->mem, REGION, 1);
	}
	ASSERT_TRUE(seen) {
		TH_LOG("the first child always finished its copy before the second fork");
	}

	forks = started_async();
	vma_syncs = vmstat("async_fork_vma_sync");
	third = fork_checker(self->mem);
	EXPECT_EQ(vmstat("async_fork_vma_sync"), vma_syncs);
	fill(self->mem, REGION, 2);
	ASSERT_EQ(reap(third), 0);
	EXPECT_EQ(started_async() - forks, 1);
	EXPECT_EQ(mismatch(self->mem, REGION, 2), -1);
}

/* Did task @tid finish a link at once (async_fork_sync, vma_wide=1)? */
static bool traced_vma_sync_by(pid_t tid)
{
	char line[512], who[32];
	bool found = false;
	FILE *f = fopen(TRACING "trace", "r");

	if (!f)
		return false;
	snprintf(who, sizeof(who), "-%d ", tid);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, who) && strstr(line, "async_fork_sync:") &&
		    strstr(line, "vma_wide=1"))
			found = true;
	fclose(f);
	return found;
}

struct fork_monitor {
	int uffd;
	char *mem;
	pid_t tid;
	const char *failed;	/* what went wrong, or NULL */
};

/*
 * A userfaultfd monitor of fork events: it gets a userfaultfd of the child
 * before the child runs, registers the first half of the child's copy of
 * @mem with it (which splits the child's VMA: the child's side of the link
 * ends there, while the child may still be copying), and unregisters it
 * (which merges the pieces back, freeing the child's original VMA).
 */
static void *fork_monitor(void *arg)
{
	struct fork_monitor *m = arg;
	struct pollfd pfd = { .fd = m->uffd, .events = POLLIN };
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)m->mem, .len = REGION / 2 },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	struct uffd_msg msg;
	int child;

	m->tid = syscall(SYS_gettid);
	if (poll(&pfd, 1, 60000) != 1 ||
	    read(m->uffd, &msg, sizeof(msg)) != sizeof(msg) ||
	    msg.event != UFFD_EVENT_FORK) {
		m->failed = "no fork event";
		return NULL;
	}
	child = msg.arg.fork.ufd;
	if (ioctl(child, UFFDIO_REGISTER, &reg))
		m->failed = "UFFDIO_REGISTER on the child";
	else if (ioctl(child, UFFDIO_UNREGISTER, &reg.range))
		m->failed = "UFFDIO_UNREGISTER on the child";
	close(child);
	return NULL;
}

/*
 * The child's side of a link can end before the child has copied: here a
 * userfaultfd monitor of fork events changes the child's VMA while the
 * child still copies, so the monitor finishes the copy of that VMA itself
 * (the tracepoint shows its VMA-wide synchronization), and then merges the
 * VMA away.  The child must see the contents of before the fork, and its
 * own detach must not look at the VMA that is gone (a debug kernel without
 * KASAN does not catch such a read itself: the run is checked for any
 * report).  A child that copied everything before the monitor got to it
 * proves nothing: try again a few times.
 */
TEST_F_TIMEOUT(af, uffd_monitor_changes_child_while_copying, 180)
{
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_EVENT_FORK };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	const char *ev = TRACING "events/async_fork/async_fork_sync/enable";
	struct fork_monitor m = { .mem = self->mem };
	bool seen = false;
	pthread_t thread;
	char *armed;
	int tries;

	if (access(ev, W_OK))
		SKIP(return, "no tracefs at " TRACING);
	m.uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	if (m.uffd < 0)
		SKIP(return, "no userfaultfd: %s", strerror(errno));
	ASSERT_EQ(ioctl(m.uffd, UFFDIO_API, &api), 0);
	/* A range armed with it, so that fork() sends the monitor an event. */
	armed = mmap(NULL, SZ_2M, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(armed, MAP_FAILED);
	reg.range.start = (uintptr_t)armed;
	reg.range.len = SZ_2M;
	ASSERT_EQ(ioctl(m.uffd, UFFDIO_REGISTER, &reg), 0);
	set_sysctl(2);
	ASSERT_EQ(write_file(ev, "1"), 0);

	for (tries = 0; tries < 10 && !seen; tries++) {
		long forks = started_async();
		pid_t pid;

		write_file(TRACING "trace", "");
		m.failed = NULL;
		ASSERT_EQ(pthread_create(&thread, NULL, fork_monitor, &m), 0);
		/* Returns once the monitor has read the fork event. */
		pid = fork_checker(self->mem);
		ASSERT_GE(pid, 0);
		ASSERT_EQ(pthread_join(thread, NULL), 0);
		ASSERT_EQ(m.failed, NULL) {
			TH_LOG("monitor: %s: %s", m.failed, strerror(errno));
		}
		ASSERT_EQ(reap(pid), 0);
		ASSERT_EQ(started_async() - forks, 1);
		seen = traced_vma_sync_by(m.tid);
	}
	write_file(ev, "0");
	EXPECT_TRUE(seen) {
		TH_LOG("the child always finished its copy before the monitor");
	}
	EXPECT_EQ(mismatch(self->mem, REGION, 1), -1);
	close(m.uffd);
	munmap(armed, SZ_2M);
}

/*
 * The published deployment stalled because the parent's mmap() after fork
 * waited for the child's copy.  Here a new mapping next to a VMA that is
 * still being copied, and a brk() that grows a heap still being copied,
 * neither merge with it nor wait: they return while the child is still
 * copying (async_fork_pmd_child, counted when the child is done, has not
 * moved) and finish no VMA's copy (async_fork_vma_sync has not moved).  A
 * child that copies faster than the parent gets to mmap() proves nothing:
 * try again a few times.
 */
TEST_F_TIMEOUT(af, mmap_and_brk_next_to_pending_vma_do_not_wait, 180)
{
	const size_t heap_size = 4 * SZ_2M;
	char *res, *mem, *heap, *next, *brk_page;
	bool seen = false;
	int tries;

	set_sysctl(2);
	/* The region, then a PROT_NONE page that keeps its neighbour free. */
	res = mmap(NULL, REGION + 2 * SZ_2M, PROT_NONE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(res, MAP_FAILED);
	mem = (char *)(((uintptr_t)res + SZ_2M - 1) & ~(SZ_2M - 1));
	ASSERT_EQ(mmap(mem, REGION, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), mem);
	ASSERT_EQ(madvise(mem, REGION, MADV_NOHUGEPAGE), 0);
	fill(mem, REGION, 6);
	heap = sbrk(heap_size);
	ASSERT_NE(heap, (void *)-1);
	fill(heap, heap_size, 7);

	for (tries = 0; tries < 5 && !seen; tries++) {
		long done = vmstat("async_fork_pmd_child");
		long vma_syncs = vmstat("async_fork_vma_sync");
		long after;
		pid_t pid = fork();

		ASSERT_GE(pid, 0);
		if (pid == 0)
			_exit(mismatch(mem, REGION, 6) >= 0 ||
			      mismatch(heap, heap_size, 7) >= 0);
		next = mmap(mem + REGION, 4096, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		brk_page = sbrk(4096);
		after = vmstat("async_fork_pmd_child");
		ASSERT_NE(next, MAP_FAILED);
		ASSERT_NE(brk_page, (void *)-1);
		next[0] = 1;
		brk_page[0] = 1;
		EXPECT_EQ(vmstat("async_fork_vma_sync"), vma_syncs);
		EXPECT_EQ(reap(pid), 0);
		seen = after == done;
		ASSERT_EQ(mmap(next, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
			       MAP_FIXED, -1, 0), next);
		ASSERT_NE(sbrk(-4096), (void *)-1);
	}
	EXPECT_TRUE(seen) {
		TH_LOG("the child's copy was always done before mmap() returned");
	}
	EXPECT_EQ(mismatch(mem, REGION, 6), -1);
	EXPECT_EQ(mismatch(heap, heap_size, 7), -1);
	ASSERT_NE(sbrk(-heap_size), (void *)-1);
	munmap(res, REGION + 2 * SZ_2M);
}

static const char *failing_sym;

static int is_failing_sym(const char *name)
{
	return !strcmp(name, failing_sym);
}

/* Fail every page allocation made with @sym on the stack, from now on. */
static int inject_alloc_failure(const char *sym)
{
	unsigned long start, end;

	failing_sym = sym;
	if (access(FAIL_ALLOC "require-start", W_OK) ||
	    code_range(is_failing_sym, &start, &end) != 1)
		return -1;
	return inject_failures(FAIL_ALLOC, start, end, 100);
}

/*
 * PageTables, exact: each CPU keeps a share of the count to itself until
 * it grows past a threshold or a second has passed, several pages per CPU
 * and node, so fold those shares in first.
 */
static long page_tables_kb(void)
{
	write_file("/proc/sys/vm/stat_refresh", "1");
	return meminfo_kb("PageTables");
}

/*
 * PageTables after a child was reaped, within @slack KiB of @before: the
 * page tables of an exited mm may be freed after an RCU grace period,
 * which can take a while in an emulated guest, so wait up to 5 s for them.
 */
static long page_tables_settled(long before, long slack)
{
	long kb = page_tables_kb();

	for (int i = 0; i < 50 && labs(kb - before) > slack; i++) {
		usleep(100000);
		kb = page_tables_kb();
	}
	return kb;
}

/* The page tables of the children are gone: within 64 KiB of @before. */
static void expect_page_tables_back(struct __test_metadata *_metadata,
				    long before)
{
	long kb = page_tables_settled(before, 64);

	EXPECT_LE(labs(kb - before), 64) {
		TH_LOG("PageTables %ld kB before, %ld kB after", before, kb);
	}
}

/*
 * After a failed copy: the child died of SIGKILL, the error was counted,
 * the parent's memory is intact and writable (no mark left), page tables
 * went back to where they were, and the next fork works.
 */
static void check_after_failure(struct __test_metadata *_metadata,
				FIXTURE_DATA(af) *self, int status,
				long errors, long pt_kb, uint64_t seed)
{
	pid_t pid;

	EXPECT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(WTERMSIG(status), SIGKILL);
	EXPECT_EQ(vmstat("async_fork_error"), errors + 1);
	EXPECT_EQ(mismatch(self->mem, REGION, seed), -1);
	fill(self->mem, REGION, 1);
	expect_page_tables_back(_metadata, pt_kb);
	pid = fork_checker(self->mem);
	EXPECT_EQ(reap(pid), 0);
}

TEST_F_TIMEOUT(af, child_copy_fails, 180)
{
	long errors = vmstat("async_fork_error");
	long pt_kb = page_tables_kb();
	pid_t pid;
	int status;

	set_sysctl(2);
	/* Only the child's own copy allocates below af_child_work(). */
	if (inject_alloc_failure("af_child_work"))
		SKIP(return, "no fail_page_alloc stack filter (FAULT_INJECTION_STACKTRACE_FILTER)");
	pid = fork_checker(self->mem);
	status = reap(pid);
	stop_failures(FAIL_ALLOC);
	check_after_failure(_metadata, self, status, errors, pt_kb, 1);
}

/*
 * A helper of the child's copy cannot allocate: the child is killed as if
 * it had failed itself.  If the child copied everything before any helper
 * got a chunk, there was nothing to fail: try again.
 */
TEST_F_TIMEOUT(af, helper_copy_fails, 180)
{
	long errors = vmstat("async_fork_error");
	long pt_kb = page_tables_kb();
	int status = 0, tries;
	pid_t pid;

	set_sysctl(2);
	set_long(THREADS, 4);
	if (inject_alloc_failure("af_helper_fn"))
		SKIP(return, "no fail_page_alloc stack filter (FAULT_INJECTION_STACKTRACE_FILTER)");
	for (tries = 0; tries < 5; tries++) {
		pid = fork_checker(self->mem);
		status = reap(pid);
		if (!WIFEXITED(status))
			break;
		EXPECT_EQ(WEXITSTATUS(status), 0);
		errors = vmstat("async_fork_error");
	}
	stop_failures(FAIL_ALLOC);
	ASSERT_LT(tries, 5) {
		TH_LOG("the child always copied everything before its helpers");
	}
	check_after_failure(_metadata, self, status, errors, pt_kb, 1);
}

/*
 * The parent's synchronization fails: mprotect() makes the parent finish
 * the copy of the whole VMA (async_fork_vma_write(), never called by the
 * child), and every allocation there fails.  The child, blocked on a pipe
 * once it has run, must be killed, unless it had copied everything first:
 * then try again.
 */
TEST_F_TIMEOUT(af, parent_sync_fails, 180)
{
	long errors = vmstat("async_fork_error");
	long pt_kb = page_tables_kb();
	int go[2], status = 0, tries;
	pid_t pid;
	char c = 0;

	set_sysctl(2);
	if (inject_alloc_failure("async_fork_vma_write"))
		SKIP(return, "no fail_page_alloc stack filter (FAULT_INJECTION_STACKTRACE_FILTER)");
	for (tries = 0; tries < 5; tries++) {
		ASSERT_EQ(pipe(go), 0);
		pid = fork();
		ASSERT_GE(pid, 0);
		if (pid == 0) {
			if (read(go[0], &c, 1) != 1)
				_exit(2);
			_exit(mismatch(self->mem, REGION, 1) >= 0);
		}
		ASSERT_EQ(mprotect(self->mem, REGION, PROT_READ), 0);
		ASSERT_EQ(mprotect(self->mem, REGION, PROT_READ | PROT_WRITE), 0);
		EXPECT_EQ(write(go[1], "g", 1), 1);
		status = reap(pid);
		close(go[0]);
		close(go[1]);
		if (!WIFEXITED(status))
			break;
		/* The child had copied everything: its snapshot must hold. */
		EXPECT_EQ(WEXITSTATUS(status), 0);
		errors = vmstat("async_fork_error");
	}
	stop_failures(FAIL_ALLOC);
	ASSERT_LT(tries, 5) {
		TH_LOG("the child always finished its copy before mprotect()");
	}
	fill(self->mem, REGION, 3);
	check_after_failure(_metadata, self, status, errors, pt_kb, 3);
}

TEST_F_TIMEOUT(af, child_killed_while_copying, 180)
{
	long pt_kb = page_tables_kb();
	int status;
	pid_t pid;

	set_sysctl(2);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0)
		_exit(3);	/* never reached if the kill lands first */
	kill(pid, SIGKILL);
	status = reap(pid);
	EXPECT_TRUE(WIFSIGNALED(status) || WEXITSTATUS(status) == 3);
	EXPECT_EQ(mismatch(self->mem, REGION, 1), -1);
	fill(self->mem, REGION, 4);
	EXPECT_EQ(mismatch(self->mem, REGION, 4), -1);
	fill(self->mem, REGION, 1);
	expect_page_tables_back(_metadata, pt_kb);
	pid = fork_checker(self->mem);
	EXPECT_EQ(reap(pid), 0);
}

/* A parent that exits at once still leaves its child a complete snapshot. */
TEST_F_TIMEOUT(af, parent_exits_while_child_copies, 180)
{
	int res[2];
	pid_t mid;
	char r = 'x';

	set_sysctl(2);
	ASSERT_EQ(pipe(res), 0);
	mid = fork();
	ASSERT_GE(mid, 0);
	if (mid == 0) {
		pid_t me = getpid();

		fill(self->mem, REGION, 5);
		if (fork() == 0) {
			/* Check only once the parent is gone. */
			while (getppid() == me)
				usleep(1000);
			r = mismatch(self->mem, REGION, 5) >= 0 ? 'b' : 'g';
			_exit(write(res[1], &r, 1) != 1);
		}
		_exit(0);
	}
	ASSERT_EQ(reap(mid), 0);
	close(res[1]);
	ASSERT_EQ(read(res[0], &r, 1), 1);
	EXPECT_EQ(r, 'g');
	close(res[0]);
}

#define OOM_CGROUP	"/sys/fs/cgroup/async_fork_oom"
#define OOM_MEM		(32UL << 20)

/* A counter of @cg's memory.events ("oom_kill"), or -1. */
static long memcg_event(const char *cg, const char *key)
{
	char path[128], name[32];
	long val = -1, v;
	FILE *f;

	snprintf(path, sizeof(path), "%s/memory.events", cg);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fscanf(f, "%31s %ld", name, &v) == 2)
		if (!strcmp(name, key))
			val = v;
	fclose(f);
	return val;
}

/* Has the test lifted the OOM cgroup's limit again? */
static bool limit_lifted(void)
{
	char buf[8] = "";
	int fd = open(OOM_CGROUP "/memory.max", O_RDONLY);

	if (fd < 0)
		return false;
	if (read(fd, buf, sizeof(buf) - 1) < 0)
		buf[0] = 0;
	close(fd);
	return !strncmp(buf, "max", 3);
}

static int set_oom_score_adj(pid_t pid, long adj)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", pid);
	return write_long(path, adj);
}

/* What the middle process of oom_during_copy() tells the test. */
enum { OOM_ARMED = 'A', OOM_LATE = 'L' };
/* How it exits when it survives. */
enum { MID_OK, MID_SETUP, MID_CHILD_LIVED, MID_LOST_MEMORY, MID_NO_FORK };

/*
 * The middle process: in the OOM cgroup, with memory of its own, it forks
 * a checker and at once lowers the cgroup's limit below what the cgroup
 * uses.  oom_score_adj names the victim: the middle process itself
 * (@kill_parent) or the checker.  A checker that had finished its copy
 * before that proves nothing, so that is reported (OOM_LATE) and tried
 * again.
 */
static void __noreturn
oom_mid(int tell, int res, const char *shared, bool kill_parent)
{
	char buf[32], *mem;
	int status, tries;
	pid_t pid;

	snprintf(buf, sizeof(buf), "%d", getpid());
	if (write_file(OOM_CGROUP "/cgroup.procs", buf) ||
	    set_oom_score_adj(getpid(), kill_parent ? 1000 : -1000))
		_exit(MID_SETUP);
	mem = mmap(NULL, OOM_MEM, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		_exit(MID_SETUP);
	madvise(mem, OOM_MEM, MADV_NOHUGEPAGE);
	fill(mem, OOM_MEM, 9);
	for (tries = 0; tries < 5; tries++) {
		long done = vmstat("async_fork_pmd_child");
		char r;

		pid = fork();
		if (pid < 0)
			_exit(MID_NO_FORK);
		if (pid == 0) {
			r = mismatch(mem, OOM_MEM, 9) >= 0 ||
			    mismatch(shared, REGION, 1) >= 0 ? 'b' : 'g';
			_exit(write(res, &r, 1) != 1);
		}
		set_oom_score_adj(pid, kill_parent ? -1000 : 1000);
		r = vmstat("async_fork_pmd_child") == done ? OOM_ARMED : OOM_LATE;
		if (write(tell, &r, 1) != 1)
			_exit(MID_SETUP);
		if (r == OOM_ARMED)
			break;
		waitpid(pid, &status, 0);
	}
	if (tries == 5)
		_exit(MID_SETUP);
	/*
	 * Below what the cgroup uses, without swap: the OOM killer strikes
	 * now, in this write or in the checker's next allocation.
	 */
	snprintf(buf, sizeof(buf), "%ld",
		 read_long(OOM_CGROUP "/memory.current") - (1L << 20));
	write_file(OOM_CGROUP "/memory.max", buf);
	if (kill_parent) {
		/* The test lifts the limit once the OOM killer has struck. */
		for (int i = 0; i < 600; i++)
			usleep(100000);
		_exit(MID_SETUP);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFSIGNALED(status))
		_exit(MID_CHILD_LIVED);
	if (mismatch(mem, OOM_MEM, 9) >= 0 || mismatch(shared, REGION, 1) >= 0)
		_exit(MID_LOST_MEMORY);
	for (int i = 0; i < 3000 && !limit_lifted(); i++)
		usleep(10000);
	fill(mem, OOM_MEM, 10);
	pid = fork();
	if (pid == 0)
		_exit(mismatch(mem, OOM_MEM, 10) >= 0);
	if (pid < 0 || waitpid(pid, &status, 0) != pid || status)
		_exit(MID_NO_FORK);
	_exit(MID_OK);
}

/*
 * The memory cgroup's OOM killer strikes while a child still copies its
 * page tables, and kills the child or its parent.  A killed child leaves
 * the parent's memory intact and the next fork working; a killed parent
 * leaves the child a complete snapshot (exit finishes the copy, the OOM
 * reaper skips what the child still needs) or, if that copy cannot get
 * memory either, a dead child, never a wrong snapshot.  No page table
 * leaks, and the kernel log stays clean (the harness checks it).
 */
static void oom_during_copy(struct __test_metadata *_metadata,
			    FIXTURE_DATA(af) *self, bool kill_parent)
{
	long pt_kb = page_tables_kb(), kills;
	int tell[2], res[2], status, mid_status, got_byte;
	char c = 0, r = 0;
	pid_t mid;

	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
	rmdir(OOM_CGROUP);
	ASSERT_EQ(mkdir(OOM_CGROUP, 0755), 0);
	/* Without swap, over the limit means an OOM kill. */
	write_file(OOM_CGROUP "/memory.swap.max", "0");
	/* The checker must come back here, whoever dies first. */
	ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	ASSERT_EQ(pipe(tell), 0);
	ASSERT_EQ(pipe(res), 0);
	set_sysctl(2);
	mid = fork();
	ASSERT_GE(mid, 0);
	if (mid == 0) {
		close(tell[0]);
		close(res[0]);
		oom_mid(tell[1], res[1], self->mem, kill_parent);
	}
	close(tell[1]);
	close(res[1]);
	while (read(tell[0], &c, 1) == 1 && c == OOM_LATE)
		;
	ASSERT_EQ(c, OOM_ARMED) {
		TH_LOG("the child always finished its copy before the limit");
	}
	for (int i = 0; i < 3000 && memcg_event(OOM_CGROUP, "oom_kill") < 1; i++)
		usleep(10000);
	kills = memcg_event(OOM_CGROUP, "oom_kill");
	write_file(OOM_CGROUP "/memory.max", "max");
	EXPECT_GE(kills, 1);

	ASSERT_EQ(waitpid(mid, &mid_status, 0), mid);
	/* Returns once the checker has written or is gone. */
	got_byte = read(res[0], &r, 1) == 1;
	if (kill_parent) {
		EXPECT_TRUE(WIFSIGNALED(mid_status) && WTERMSIG(mid_status) == SIGKILL) {
			TH_LOG("the parent was not killed (status %#x)", mid_status);
		}
		/* Its checker came here: exact snapshot, or killed. */
		ASSERT_GT(waitpid(-1, &status, 0), 0);
		EXPECT_TRUE(got_byte ? r == 'g' && WIFEXITED(status) && !WEXITSTATUS(status)
				     : WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
			TH_LOG("the checker of a killed parent: '%c', status %#x",
			       got_byte ? r : '-', status);
		}
	} else {
		/* The parent saw its checker killed and its own memory intact. */
		EXPECT_TRUE(WIFEXITED(mid_status) && WEXITSTATUS(mid_status) == MID_OK) {
			TH_LOG("the parent's status: %#x", mid_status);
		}
		EXPECT_FALSE(got_byte);
	}
	close(tell[0]);
	close(res[0]);
	prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
	EXPECT_EQ(rmdir(OOM_CGROUP), 0);
	expect_page_tables_back(_metadata, pt_kb);
}

TEST_F_TIMEOUT(af, oom_kills_child_while_copying, 180)
{
	oom_during_copy(_metadata, self, false);
}

TEST_F_TIMEOUT(af, oom_kills_parent_while_child_copies, 180)
{
	oom_during_copy(_metadata, self, true);
}

/*
 * --fork-empty, in a freshly exec'd process: no PMD lies entirely inside
 * its private anonymous memory, so a fork wanted but had nothing to defer.
 * That is async_fork_empty, not a fallback (which means "could not").
 */
static int fork_empty(void)
{
	long empty = vmstat("async_fork_empty");
	long fallbacks = vmstat("async_fork_fallback");
	long forks = vmstat("async_fork");
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	if (pid < 0 || reap(pid) != 0)
		return 2;
	if (vmstat("async_fork_empty") - empty != 1)
		return 3;
	if (vmstat("async_fork_fallback") != fallbacks)
		return 4;
	return vmstat("async_fork") == forks ? 0 : 5;
}

/* Run /proc/self/exe @mode in a child; returns its exit status. */
static int exec_self(const char *mode)
{
	pid_t pid = fork();

	if (pid == 0) {
		execl("/proc/self/exe", "async_fork", mode, NULL);
		_exit(100);
	}
	return pid < 0 ? -1 : reap(pid);
}

TEST_F_TIMEOUT(af, empty_fork_is_not_a_fallback, 180)
{
	int status;

	set_sysctl(2);
	status = exec_self("--fork-empty");
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0) {
		TH_LOG("2: fork failed, 3: async_fork_empty did not move by one, "
		       "4: async_fork_fallback moved, 5: async_fork moved");
	}
}

/*
 * A long-term pin marks the mm that pinned, not its descendants: a child
 * of a pinned process, and a program that child execs, fork asynchronously.
 * (The flag once reached them through the sign-extended bit 31 of
 * MMF_INIT_MASK.)  The pinned process itself still falls back.
 */
TEST_F_TIMEOUT(af, longterm_pin_not_inherited, 180)
{
	struct pin_longterm_test pin = {
		.addr = (uintptr_t)self->mem, .size = 4096,
		.flags = PIN_LONGTERM_TEST_FLAG_USE_WRITE,
	};
	int fd = open("/sys/kernel/debug/gup_test", O_RDWR);
	int status;
	pid_t pid;

	if (fd < 0)
		SKIP(return, "no /sys/kernel/debug/gup_test (CONFIG_GUP_TEST)");
	set_sysctl(2);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		pid_t c;
		int st;

		if (ioctl(fd, PIN_LONGTERM_TEST_START, &pin))
			_exit(10);
		ioctl(fd, PIN_LONGTERM_TEST_STOP);
		if (fork_kind(self->mem) != FELL_BACK)
			_exit(11);
		c = fork();
		if (c == 0)
			_exit(fork_kind(self->mem));
		st = reap(c);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != WENT_ASYNC)
			_exit(12);
		st = exec_self("--fork-kind");
		_exit(WIFEXITED(st) && WEXITSTATUS(st) == WENT_ASYNC ? 0 : 13);
	}
	status = reap(pid);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0) {
		TH_LOG("10: no pin, 11: the pinned process did not fall back, "
		       "12: its child did, 13: the program its child exec'd did");
	}
	close(fd);
}

#define SUID_DIR	"/tmp/async_fork_suid"

/* Copy /proc/self/exe to @path, owned by root, with @mode. */
static int copy_self(const char *path, mode_t mode)
{
	int in = open("/proc/self/exe", O_RDONLY);
	int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0700);
	char buf[65536];
	ssize_t n;
	int err = in < 0 || out < 0;

	while (!err && (n = read(in, buf, sizeof(buf))) > 0)
		err = write(out, buf, n) != n;
	if (!err)
		err = fchown(out, 0, 0) || fchmod(out, mode);
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return err ? -1 : 0;
}

/*
 * An unprivileged user opts in and execs a setuid-root program: the
 * privileged program must not fork asynchronously on the user's say-so
 * (PR_GET_ASYNC_FORK reads 0 there).  The same program without the setuid
 * bit keeps the opt-in, as documented.  The copies live on a tmpfs of
 * their own, which honours the setuid bit.
 */
TEST_F_TIMEOUT(af, secure_exec_clears_opt_in, 180)
{
	const struct { const char *name; mode_t mode; int want; } progs[] = {
		{ SUID_DIR "/suid", 04755, 0 },
		{ SUID_DIR "/plain", 0755, 1 },
	};

	umount2(SUID_DIR, MNT_DETACH);
	rmdir(SUID_DIR);
	ASSERT_EQ(mkdir(SUID_DIR, 0755), 0);
	ASSERT_EQ(mount("tmpfs", SUID_DIR, "tmpfs", 0, "mode=0755"), 0);
	for (unsigned int i = 0; i < ARRAY_SIZE(progs); i++) {
		int status;
		pid_t pid;

		ASSERT_EQ(copy_self(progs[i].name, progs[i].mode), 0);
		pid = fork();
		ASSERT_GE(pid, 0);
		if (pid == 0) {
			if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
			    setresuid(65534, 65534, 65534))
				_exit(20);
			if (prctl(PR_SET_ASYNC_FORK, 1, 0, 0, 0) ||
			    prctl(PR_GET_ASYNC_FORK, 0, 0, 0, 0) != 1)
				_exit(21);
			execl(progs[i].name, "async_fork", "--get-prctl", NULL);
			_exit(22);
		}
		status = reap(pid);
		ASSERT_TRUE(WIFEXITED(status));
		EXPECT_EQ(WEXITSTATUS(status), progs[i].want) {
			TH_LOG("%s as nobody: PR_GET_ASYNC_FORK %d (20: setuid failed, "
			       "21: prctl failed, 22: exec failed)", progs[i].name,
			       WEXITSTATUS(status));
		}
	}
	EXPECT_EQ(umount2(SUID_DIR, MNT_DETACH), 0);
	rmdir(SUID_DIR);
}

/* Did a fork of a task in @cg's sub-cgroup go asynchronously? */
static int forks_async_in(const char *cg, const char *mem)
{
	long before = started_async();
	pid_t pid = fork();
	char buf[32];

	if (pid == 0) {
		snprintf(buf, sizeof(buf), "%d", getpid());
		if (write_file(cg, buf))
			_exit(2);
		_exit(reap(fork_checker(mem)) ? 3 : 0);
	}
	if (pid < 0 || reap(pid) != 0)
		return -1;
	return started_async() - before;
}

/*
 * memory.async_fork is the AND of a cgroup's and its ancestors' values
 * (the root has none): an administrator's 0 holds for cgroups created
 * before it and for a sub-tree that says 1.
 */
TEST_F_TIMEOUT(af, cgroup_zero_above_wins, 180)
{
	const char *procs = CGROUP "/sub/cgroup.procs";

	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
	rmdir(CGROUP "/sub");
	rmdir(CGROUP);
	ASSERT_EQ(mkdir(CGROUP, 0755), 0);
	ASSERT_EQ(write_file(CGROUP "/memory.async_fork", "1"), 0);
	write_file(CGROUP "/cgroup.subtree_control", "+memory");
	ASSERT_EQ(mkdir(CGROUP "/sub", 0755), 0);
	set_sysctl(1);

	EXPECT_EQ(forks_async_in(procs, self->mem), 1);
	ASSERT_EQ(write_file(CGROUP "/memory.async_fork", "0"), 0);
	EXPECT_EQ(read_long(CGROUP "/sub/memory.async_fork"), 1);
	EXPECT_EQ(forks_async_in(procs, self->mem), 0);
	ASSERT_EQ(write_file(CGROUP "/sub/memory.async_fork", "0"), 0);
	ASSERT_EQ(write_file(CGROUP "/memory.async_fork", "1"), 0);
	EXPECT_EQ(forks_async_in(procs, self->mem), 0);
	ASSERT_EQ(write_file(CGROUP "/sub/memory.async_fork", "1"), 0);
	EXPECT_EQ(forks_async_in(procs, self->mem), 1);
	EXPECT_EQ(rmdir(CGROUP "/sub"), 0);
	EXPECT_EQ(rmdir(CGROUP), 0);
}

/* Run on CPU @cpu only, or on every CPU if @cpu < 0. */
static int run_on(pid_t pid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (cpu < 0 ? i < sysconf(_SC_NPROCESSORS_ONLN) : i == cpu)
			CPU_SET(i, &set);
	return sched_setaffinity(pid, sizeof(set), &set);
}

/* Move @pid into cgroup @cg (a path); 0 or an errno. */
static int move_to(const char *cg, pid_t pid)
{
	char path[128], buf[32];

	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	snprintf(buf, sizeof(buf), "%d", pid);
	return write_file(path, buf);
}

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP	0x200000000ULL
#endif

/* struct clone_args of clone3(), up to its cgroup field. */
struct af_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal;
	uint64_t stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

/*
 * fork() into cgroup @cg (a path): the child is in it from its first
 * instruction, before its copy, with no race to win.  As fork(): the
 * child's pid, 0 in the child, -1 on failure.
 */
static pid_t fork_into(const char *cg)
{
	struct af_clone_args args = {
		.flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD,
	};
	int fd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	pid_t pid;

	if (fd < 0)
		return -1;
	args.cgroup = fd;
	pid = syscall(SYS_clone3, &args, sizeof(args));
	close(fd);
	return pid;
}

#define SLOW_CGROUP	"/sys/fs/cgroup/async_fork_slow"

/* SLOW_CGROUP, new, with a thousandth of a CPU; 0 or -1. */
static int slow_cgroup(void)
{
	rmdir(SLOW_CGROUP);
	if (mkdir(SLOW_CGROUP, 0755))
		return -1;
	return write_file(SLOW_CGROUP "/cpu.max", "1000 1000000") ? -1 : 0;
}

#define READER_CGROUP	"/sys/fs/cgroup/async_fork_reader"

/*
 * A reader of the parent's memory (process_vm_readv(), as a debugger or a
 * checkpoint tool reads) makes the parent's side copy tables the child has
 * not copied yet.  Those tables are the child's, and fork() would have
 * charged them to the parent's cgroup: so must the copy, not the reader's
 * cgroup, which here has no room for them.  Neither the child nor the
 * reader may die for it, and the child's snapshot holds.
 */
TEST_F_TIMEOUT(af, remote_reader_pays_nothing, 180)
{
	long errors = vmstat("async_fork_error");
	long syncs = vmstat("async_fork_pmd_sync");
	int go[2], ready[2], status;
	pid_t me = getpid(), reader, child;
	char c = 0, buf[32];

	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	ASSERT_EQ(write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory +cpu"), 0);
	rmdir(READER_CGROUP);
	ASSERT_EQ(mkdir(READER_CGROUP, 0755), 0);
	write_file(READER_CGROUP "/memory.swap.max", "0");
	ASSERT_EQ(slow_cgroup(), 0);
	ASSERT_EQ(pipe(go), 0);
	ASSERT_EQ(pipe(ready), 0);
	set_sysctl(2);
	reader = fork();
	ASSERT_GE(reader, 0);
	if (reader == 0) {
		uint64_t word;
		int bad = 0;

		snprintf(buf, sizeof(buf), "%d", getpid());
		if (write_file(READER_CGROUP "/cgroup.procs", buf) || run_on(0, 1) ||
		    write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(2);
		/*
		 * From the end: the child copies from the start, a few tables
		 * a second, and may be throttled holding the lock of the table
		 * it copies; the reader meets it at most once.
		 */
		for (size_t off = REGION; off > 0; ) {
			struct iovec local = { &word, sizeof(word) };
			struct iovec remote;

			off -= SZ_2M;
			remote = (struct iovec){ self->mem + off, sizeof(word) };

			if (process_vm_readv(me, &local, 1, &remote, 1, 0) != sizeof(word) ||
			    word != pattern(1, off / 8))
				bad++;
		}
		_exit(write(ready[1], "d", 1) != 1 || bad ? 3 : 0);
	}
	ASSERT_EQ(read(ready[0], &c, 1), 1);
	/*
	 * Room for the reader, not for 64 page tables.  An absolute limit:
	 * memory.current also counts charges cached per CPU (64 pages), which
	 * a limit above it would leave the tables to use; a limit below it
	 * drains them first.
	 */
	ASSERT_EQ(write_file(READER_CGROUP "/memory.max", "131072"), 0);

	/*
	 * The child is born with a thousandth of a CPU: it copies a few
	 * tables a second while the reader reads.
	 */
	child = fork_into(SLOW_CGROUP);
	if (child == 0)
		_exit(mismatch(self->mem, REGION, 1) >= 0);
	ASSERT_GT(child, 0);
	ASSERT_EQ(write(go[1], "g", 1), 1);
	ASSERT_EQ(read(ready[0], &c, 1), 1);
	ASSERT_EQ(write_file(SLOW_CGROUP "/cpu.max", "max"), 0);
	status = reap(reader);
	EXPECT_TRUE(WIFEXITED(status) && !WEXITSTATUS(status)) {
		TH_LOG("the reader: status %#x (3: a read failed or was wrong)", status);
	}
	EXPECT_EQ(reap(child), 0);
	EXPECT_EQ(vmstat("async_fork_error"), errors);
	/* The reader did copy tables for the child: the case proves something. */
	EXPECT_GT(vmstat("async_fork_pmd_sync"), syncs);
	close(go[0]);
	close(go[1]);
	close(ready[0]);
	close(ready[1]);
	EXPECT_EQ(rmdir(READER_CGROUP), 0);
	EXPECT_EQ(rmdir(SLOW_CGROUP), 0);
}

#define REAP_CGROUP	"/sys/fs/cgroup/async_fork_reap"
#define REAP_MEM	(256UL << 20)


/*
 * The parent P of a fork whose child C is still copying is the OOM
 * killer's victim, and cannot exit soon (both sit in a cgroup with 0.1%
 * of a CPU).  The OOM reaper must free P's memory anyway: it gives the
 * pending copy up (C, which has not run user code, is killed) rather than
 * skip P's memory, which would make the OOM killer take a second victim,
 * the bystander B.  So: exactly one OOM kill, P's memory freed while P
 * still exits, B alive, C killed, one async_fork_error.
 */
TEST_F_TIMEOUT(af, oom_reaper_gives_up_pending_copy, 180)
{
	long errors = vmstat("async_fork_error"), kills, current, max;
	int tell[2], status;
	pid_t bystander, parent, child = 0;
	char c = 0, buf[32];

	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	ASSERT_EQ(write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory +cpu"), 0);
	rmdir(REAP_CGROUP "/run");
	rmdir(REAP_CGROUP "/slow");
	rmdir(REAP_CGROUP);
	ASSERT_EQ(mkdir(REAP_CGROUP, 0755), 0);
	ASSERT_EQ(write_file(REAP_CGROUP "/cgroup.subtree_control", "+memory +cpu"), 0);
	ASSERT_EQ(write_file(REAP_CGROUP "/memory.swap.max", "0"), 0);
	ASSERT_EQ(mkdir(REAP_CGROUP "/run", 0755), 0);
	ASSERT_EQ(mkdir(REAP_CGROUP "/slow", 0755), 0);
	ASSERT_EQ(write_file(REAP_CGROUP "/slow/cpu.max", "1000 1000000"), 0);
	ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	ASSERT_EQ(pipe(tell), 0);
	set_sysctl(2);

	bystander = fork();
	ASSERT_GE(bystander, 0);
	if (bystander == 0) {
		char *b = mmap(NULL, 16UL << 20, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (move_to(REAP_CGROUP "/run", getpid()) || b == MAP_FAILED)
			_exit(2);
		fill(b, 16UL << 20, 12);
		if (write(tell[1], "b", 1) != 1)
			_exit(2);
		pause();
		_exit(0);
	}
	ASSERT_EQ(read(tell[0], &c, 1), 1);
	ASSERT_EQ(c, 'b');

	parent = fork();
	ASSERT_GE(parent, 0);
	if (parent == 0) {
		char *m = mmap(NULL, REAP_MEM, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		pid_t c2;

		if (move_to(REAP_CGROUP "/run", getpid()) || m == MAP_FAILED ||
		    set_oom_score_adj(getpid(), 1000))
			_exit(2);
		madvise(m, REAP_MEM, MADV_NOHUGEPAGE);
		fill(m, REAP_MEM, 11);
		/* Throttled from birth: its copy takes minutes. */
		c2 = fork_into(REAP_CGROUP "/slow");
		if (c2 == 0)
			_exit(mismatch(m, REAP_MEM, 11) >= 0);
		if (c2 < 0 || set_oom_score_adj(c2, -1000) ||
		    write(tell[1], &c2, sizeof(c2)) != sizeof(c2))
			_exit(3);
		pause();
		_exit(0);
	}
	ASSERT_EQ(read(tell[0], &child, sizeof(child)), (ssize_t)sizeof(child));
	ASSERT_GT(child, 0);
	/* P, too, gets 0.1% of a CPU: only the reaper can free its memory soon. */
	ASSERT_EQ(move_to(REAP_CGROUP "/slow", parent), 0);

	current = read_long(REAP_CGROUP "/memory.current");
	max = current - (8L << 20);
	snprintf(buf, sizeof(buf), "%ld", max);
	/* Returns once the cgroup is under the limit or nobody is left to kill. */
	write_file(REAP_CGROUP "/memory.max", buf);
	kills = memcg_event(REAP_CGROUP, "oom_kill");
	current = read_long(REAP_CGROUP "/memory.current");
	EXPECT_EQ(kills, 1);
	EXPECT_LE(current, max) {
		TH_LOG("memory.current %ld above memory.max %ld: P was not reaped",
		       current, max);
	}
	EXPECT_EQ(waitpid(bystander, &status, WNOHANG), 0) {
		TH_LOG("the bystander died: status %#x", status);
	}
	EXPECT_EQ(vmstat("async_fork_error"), errors + 1);

	write_file(REAP_CGROUP "/memory.max", "max");
	write_file(REAP_CGROUP "/slow/cpu.max", "max");
	kill(bystander, SIGKILL);
	reap(bystander);
	status = reap(parent);
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
		TH_LOG("P: status %#x", status);
	}
	/* C came to us when P died. */
	status = reap(child);
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
		TH_LOG("C: status %#x (0: it got its snapshot after all)", status);
	}
	close(tell[0]);
	close(tell[1]);
	prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
	EXPECT_EQ(rmdir(REAP_CGROUP "/run"), 0);
	EXPECT_EQ(rmdir(REAP_CGROUP "/slow"), 0);
	EXPECT_EQ(rmdir(REAP_CGROUP), 0);
}

#define QUOTA_CGROUP	"/sys/fs/cgroup/async_fork_quota"
#define QUOTA_MEM	(512UL << 20)

/* Busy time of all CPUs so far (/proc/stat), in microseconds. */
static long long cpus_busy_us(void)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	int n;

	if (!f)
		return -1;
	/* user nice system idle iowait irq softirq steal */
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n != 8)
		return -1;
	return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * 1000000LL /
	       sysconf(_SC_CLK_TCK);
}

/* A "key value" line of @file, or @missing. */
static long long key_value(const char *file, const char *key, long long missing)
{
	char line[256];
	long long val = missing;
	size_t len = strlen(key);
	FILE *f = fopen(file, "r");

	if (!f)
		return missing;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, len) && line[len] == ' ')
			val = strtoll(line + len + 1, NULL, 10);
	fclose(f);
	return val;
}

/* A "key value" line of a cgroup file, or -1. */
static long long cg_stat(const char *file, const char *key)
{
	return key_value(file, key, -1);
}

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* QUOTA_CGROUP, new, with cpu.max @max; 0 or -1. */
static int quota_cgroup(const char *max)
{
	if (write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpu"))
		return -1;
	rmdir(QUOTA_CGROUP);
	if (mkdir(QUOTA_CGROUP, 0755))
		return -1;
	return write_file(QUOTA_CGROUP "/cpu.max", max) ? -1 : 0;
}

/*
 * Fork a child into QUOTA_CGROUP that writes one byte to @ready once it
 * runs, which is after its copy, then waits to be killed (its exit, which
 * unmaps, stays out of what the caller measures).  Its pid, or -1.
 */
static pid_t child_in_quota(int ready)
{
	pid_t child = fork_into(QUOTA_CGROUP);

	if (child == 0) {
		if (write(ready, "r", 1) != 1)
			_exit(2);
		pause();
		_exit(0);
	}
	return child;
}

/*
 * vm.async_fork_copy_threads=8, and the child sits in a cgroup with 10% of
 * a CPU (cpu.max).  The copy helpers are threads of the child, so the
 * whole copy runs in the child's cgroup and within its quota: the cgroup's
 * CPU usage covers what the CPUs did meanwhile, and its quota throttled
 * it.  Helpers outside the child's cgroups (kernel workers) would make the
 * CPUs busy with work the cgroup never sees.
 */
TEST_F_TIMEOUT(af, copy_helpers_stay_in_child_cpu_quota, 180)
{
	long long busy, usage, throttled, start, wall, noise;
	int ready[2];
	char *base, *mem, c;
	pid_t child;

	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	if (access(TRACING "events/async_fork/async_fork_child_done/enable", W_OK))
		SKIP(return, "no tracefs at " TRACING);
	ASSERT_EQ(quota_cgroup("10000 100000"), 0);
	mem = aligned_region(QUOTA_MEM, &base);
	ASSERT_NE(mem, NULL);
	fill(mem, QUOTA_MEM, 13);
	set_sysctl(2);
	set_long(THREADS, 8);
	write_file(TRACING "trace", "");
	ASSERT_EQ(write_file(TRACING "events/async_fork/async_fork_child_done/enable", "1"), 0);
	ASSERT_EQ(pipe(ready), 0);
	/* What the CPUs do anyway (ksmd, kswapd, ...): a second of it. */
	noise = cpus_busy_us();
	start = now_us();
	usleep(1000000);
	noise = (cpus_busy_us() - noise) * 1000 / ((now_us() - start) / 1000);
	usage = cg_stat(QUOTA_CGROUP "/cpu.stat", "usage_usec");
	throttled = cg_stat(QUOTA_CGROUP "/cpu.stat", "nr_throttled");
	busy = cpus_busy_us();
	start = now_us();
	child = child_in_quota(ready[1]);
	ASSERT_GT(child, 0);
	ASSERT_EQ(read(ready[0], &c, 1), 1);
	wall = now_us() - start;
	busy = cpus_busy_us() - busy;
	usage = cg_stat(QUOTA_CGROUP "/cpu.stat", "usage_usec") - usage;
	throttled = cg_stat(QUOTA_CGROUP "/cpu.stat", "nr_throttled") - throttled;
	kill(child, SIGKILL);
	reap(child);
	close(ready[0]);
	close(ready[1]);
	write_file(TRACING "events/async_fork/async_fork_child_done/enable", "0");
	TH_LOG("copy: %lld us, CPUs busy %lld us (%lld per mille busy before), cgroup used %lld us, throttled %lld times",
	       wall, busy, noise, usage, throttled);

	EXPECT_EQ(last_copy_threads(), 8);
	/* The quota acted: the copy was long enough to prove something. */
	EXPECT_GT(throttled, 0);
	/* Within the quota: 10% of the time, give or take one period's. */
	EXPECT_LE(usage, wall / 10 + 20000);
	/*
	 * And the CPUs did little besides.  /proc/stat samples at each tick:
	 * allow half the usage and 20 ms for that, and what they did before
	 * (in a boot with ksmd and aging at work, a good part of a CPU).
	 * Kernel workers copying outside the cgroup would make it several
	 * times more.
	 */
	EXPECT_LE(busy, usage * 3 / 2 + 20000 + noise * wall / 1000 * 3 / 2);
	munmap(base, QUOTA_MEM + SZ_2M);
	EXPECT_EQ(rmdir(QUOTA_CGROUP), 0);
}

#define CPUSET_CGROUP	"/sys/fs/cgroup/async_fork_cpuset"

/* PageTables of NUMA node @node in kB, or -1. */
static long node_page_tables_kb(int node)
{
	char path[80], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/meminfo", node);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		/* " PageTables:", not " SecPageTables:" */
		char *t = strstr(line, " PageTables:");

		if (t)
			kb = strtol(t + 12, NULL, 10);
	}
	fclose(f);
	return kb;
}

/*
 * The copy helpers run under the child's cpuset: with cpuset.mems at node
 * 1, the page tables that the child and its seven helpers allocate for the
 * copy are on node 1, all of them.  Kernel workers would allocate on the
 * node they happened to run on.
 */
TEST_F_TIMEOUT(af, copy_helpers_allocate_on_child_mems, 180)
{
	long before0, before1, on0, on1;
	const long tables_kb = QUOTA_MEM / SZ_2M * 4;
	int ready[2];
	char *base, *mem, c;
	pid_t child;

	if (access("/sys/devices/system/node/node1", F_OK))
		SKIP(return, "one NUMA node");
	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	if (write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpuset"))
		SKIP(return, "no cpuset controller");
	rmdir(CPUSET_CGROUP);
	ASSERT_EQ(mkdir(CPUSET_CGROUP, 0755), 0);
	ASSERT_EQ(write_file(CPUSET_CGROUP "/cpuset.mems", "1"), 0);
	mem = aligned_region(QUOTA_MEM, &base);
	ASSERT_NE(mem, NULL);
	fill(mem, QUOTA_MEM, 15);
	set_sysctl(2);
	set_long(THREADS, 8);
	ASSERT_EQ(pipe(ready), 0);
	before0 = node_page_tables_kb(0);
	before1 = node_page_tables_kb(1);
	child = fork_into(CPUSET_CGROUP);
	if (child == 0) {
		if (write(ready[1], "r", 1) != 1)
			_exit(2);
		pause();
		_exit(0);
	}
	ASSERT_GT(child, 0);
	/* It runs once its copy is done. */
	ASSERT_EQ(read(ready[0], &c, 1), 1);
	on0 = node_page_tables_kb(0) - before0;
	on1 = node_page_tables_kb(1) - before1;
	TH_LOG("page tables of the copy: node 0 %ld kB, node 1 %ld kB (%ld kB of PTE tables)",
	       on0, on1, tables_kb);
	/*
	 * Node 1 gains the tables, less what other tasks free meanwhile (a
	 * boot with reclaim and KSM at work frees some); node 0 gains at
	 * most the child's upper levels, made by fork(), and noise.
	 */
	EXPECT_GE(on1, tables_kb * 8 / 10);
	EXPECT_LE(on0, tables_kb / 10);
	kill(child, SIGKILL);
	reap(child);
	close(ready[0]);
	close(ready[1]);
	munmap(base, QUOTA_MEM + SZ_2M);
	EXPECT_EQ(rmdir(CPUSET_CGROUP), 0);
}

#define PIDS_CGROUP	"/sys/fs/cgroup/async_fork_pids"

/*
 * The copy helpers are tasks of the child's cgroup: with pids.max at 2
 * for this process and its child, the child may start no helper, and
 * copies alone.  Its snapshot holds, the trace says one thread copied,
 * and the pids controller saw the refused helpers.
 */
TEST_F_TIMEOUT(af, copy_helpers_within_pids_max, 180)
{
	long long refused;
	pid_t child;

	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	if (access(TRACING "events/async_fork/async_fork_child_done/enable", W_OK))
		SKIP(return, "no tracefs at " TRACING);
	ASSERT_EQ(write_file("/sys/fs/cgroup/cgroup.subtree_control", "+pids"), 0);
	rmdir(PIDS_CGROUP);
	ASSERT_EQ(mkdir(PIDS_CGROUP, 0755), 0);
	ASSERT_EQ(write_file(PIDS_CGROUP "/pids.max", "2"), 0);
	refused = cg_stat(PIDS_CGROUP "/pids.events", "max");
	set_sysctl(2);
	set_long(THREADS, 4);
	write_file(TRACING "trace", "");
	ASSERT_EQ(write_file(TRACING "events/async_fork/async_fork_child_done/enable", "1"), 0);
	/* The child is born in the cgroup, beside this process. */
	ASSERT_EQ(move_to(PIDS_CGROUP, getpid()), 0);
	child = fork_checker(self->mem);
	fill(self->mem, REGION, 2);
	EXPECT_EQ(move_to("/sys/fs/cgroup", getpid()), 0);
	ASSERT_GT(child, 0);
	EXPECT_EQ(reap(child), 0);
	write_file(TRACING "events/async_fork/async_fork_child_done/enable", "0");
	EXPECT_EQ(last_copy_threads(), 1);
	EXPECT_GT(cg_stat(PIDS_CGROUP "/pids.events", "max"), refused);
	EXPECT_EQ(rmdir(PIDS_CGROUP), 0);
}

/*
 * The cgroup freezer freezes a child that is still copying with helpers:
 * the child finishes its copy first, then freezes.  A helper that froze
 * itself (or stopped for job control) would leave the child waiting for
 * it where the freezer cannot reach the child, and the cgroup would never
 * report frozen.  The child runs 5% of a CPU so that it is still
 * copying when the freeze comes.
 */
TEST_F_TIMEOUT(af, freezer_freezes_child_after_its_copy, 180)
{
	struct pollfd pfd;
	int ready[2], i;
	char *base, *mem, c;
	pid_t child;

	if (access("/sys/fs/cgroup/cgroup.subtree_control", W_OK))
		SKIP(return, "no cgroup v2 at /sys/fs/cgroup");
	ASSERT_EQ(quota_cgroup("5000 100000"), 0);
	mem = aligned_region(QUOTA_MEM, &base);
	ASSERT_NE(mem, NULL);
	fill(mem, QUOTA_MEM, 14);
	set_sysctl(2);
	set_long(THREADS, 4);
	ASSERT_EQ(pipe(ready), 0);
	child = child_in_quota(ready[1]);
	ASSERT_GT(child, 0);
	usleep(100000);
	pfd = (struct pollfd){ .fd = ready[0], .events = POLLIN };
	/* Still copying: else the case proves nothing. */
	ASSERT_EQ(poll(&pfd, 1, 0), 0);
	ASSERT_EQ(write_file(QUOTA_CGROUP "/cgroup.freeze", "1"), 0);
	for (i = 0; i < 600; i++) {
		if (cg_stat(QUOTA_CGROUP "/cgroup.events", "frozen") == 1)
			break;
		usleep(100000);
	}
	EXPECT_LT(i, 600) {
		TH_LOG("the cgroup was not frozen after 60 s");
	}
	ASSERT_EQ(write_file(QUOTA_CGROUP "/cgroup.freeze", "0"), 0);
	/* Thawed, it runs: its copy was done. */
	EXPECT_EQ(read(ready[0], &c, 1), 1);
	kill(child, SIGKILL);
	EXPECT_TRUE(WIFSIGNALED(reap(child)));
	close(ready[0]);
	close(ready[1]);
	munmap(base, QUOTA_MEM + SZ_2M);
	EXPECT_EQ(rmdir(QUOTA_CGROUP), 0);
}

#define KSM		"/sys/kernel/mm/ksm/"
#define KSM_MEM		(16UL << 20)
#define NO_VALUE	(-(1LL << 62))

static long long ksm_zero_pages(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/ksm_stat", pid);
	return key_value(path, "ksm_zero_pages", NO_VALUE);
}

/* Let ksmd merge until @pid has @want KSM zero pages (60 s at most). */
static long long ksm_merge_until(pid_t pid, long long want)
{
	time_t end = time(NULL) + 60;
	long long have;

	write_file(KSM "run", "1");
	while ((have = ksm_zero_pages(pid)) < want && time(NULL) < end)
		usleep(20000);
	write_file(KSM "run", "0");
	return ksm_zero_pages(pid);
}

/* Fork a child that reports its count of KSM zero pages; -1 on failure. */
static long long child_ksm_zero_pages(void)
{
	long long theirs = -1;
	int fds[2];
	pid_t child;

	if (pipe(fds))
		return -1;
	child = fork();
	if (child == 0) {
		theirs = ksm_zero_pages(getpid());
		_exit(write(fds[1], &theirs, sizeof(theirs)) != sizeof(theirs));
	}
	if (child < 0 || read(fds[0], &theirs, sizeof(theirs)) != sizeof(theirs) ||
	    reap(child) != 0)
		theirs = -1;
	close(fds[0]);
	close(fds[1]);
	return theirs;
}

/*
 * KSM's zero pages (use_zero_pages) are counted per process and in all.
 * A child must count the KSM zero pages it maps, when it maps them: not
 * the parent's count at fork, which is wrong for a child killed before
 * its copy (it maps none, and its exit gives none back) and for memory
 * fork() does not copy (MADV_DONTFORK).  Either way the total would keep
 * pages that nobody maps.
 */
TEST_F_TIMEOUT(af, ksm_zero_pages_counted_as_child_copies, 180)
{
	long saved_run, saved_zero, saved_scan, saved_sleep;
	long long total, mine, theirs;
	const long long pages = KSM_MEM / 4096;
	char *base, *mem;
	pid_t child;

	saved_zero = read_long(KSM "use_zero_pages");
	if (saved_zero < 0 || ksm_zero_pages(getpid()) == NO_VALUE)
		SKIP(return, "no KSM zero pages (CONFIG_KSM, 6.10+)");
	saved_run = read_long(KSM "run");
	saved_scan = read_long(KSM "pages_to_scan");
	saved_sleep = read_long(KSM "sleep_millisecs");
	ASSERT_EQ(write_file(KSM "run", "0"), 0);
	ASSERT_EQ(write_file(KSM "use_zero_pages", "1"), 0);
	ASSERT_EQ(write_file(KSM "pages_to_scan", "4096"), 0);
	ASSERT_EQ(write_file(KSM "sleep_millisecs", "0"), 0);
	total = read_long(KSM "ksm_zero_pages");
	mem = aligned_region(KSM_MEM, &base);
	ASSERT_NE(mem, NULL);
	/* Written, so real pages, that hold zeros: ksmd maps the zero page. */
	memset(mem, 0, KSM_MEM);
	ASSERT_EQ(madvise(mem, KSM_MEM, MADV_MERGEABLE), 0);
	mine = ksm_merge_until(getpid(), pages);
	ASSERT_EQ(mine, pages);
	ASSERT_EQ(read_long(KSM "ksm_zero_pages"), total + mine);
	set_sysctl(2);
	set_long(THREADS, 1);

	/* A child that copies maps, and counts, every one of them. */
	theirs = child_ksm_zero_pages();
	EXPECT_EQ(theirs, mine);
	EXPECT_EQ(read_long(KSM "ksm_zero_pages"), total + mine);

	/*
	 * Killed before its copy, it never maps them: the total is the same.
	 * Born with a thousandth of a CPU, it has not copied when the kill
	 * comes (its copy, once it runs, would see the pending SIGKILL).
	 */
	ASSERT_EQ(write_file("/sys/fs/cgroup/cgroup.subtree_control", "+cpu"), 0);
	ASSERT_EQ(slow_cgroup(), 0);
	child = fork_into(SLOW_CGROUP);
	if (child == 0)
		_exit(0);
	ASSERT_GT(child, 0);
	kill(child, SIGKILL);
	reap(child);
	EXPECT_EQ(rmdir(SLOW_CGROUP), 0);
	EXPECT_EQ(read_long(KSM "ksm_zero_pages"), total + mine) {
		TH_LOG("a child killed before its copy left its pages counted");
	}

	/* Memory that fork() does not copy: the child has none of them. */
	ASSERT_EQ(madvise(mem, KSM_MEM, MADV_DONTFORK), 0);
	theirs = child_ksm_zero_pages();
	EXPECT_EQ(theirs, 0);
	EXPECT_EQ(read_long(KSM "ksm_zero_pages"), total + mine);

	munmap(base, KSM_MEM + SZ_2M);
	EXPECT_EQ(read_long(KSM "ksm_zero_pages"), total);
	set_long(KSM "use_zero_pages", saved_zero);
	set_long(KSM "pages_to_scan", saved_scan);
	set_long(KSM "sleep_millisecs", saved_sleep);
	set_long(KSM "run", saved_run);
}

/*
 * The parent's copy of a table fails while the child checks its snapshot
 * at once, before anything else: the child must be killed or see every
 * byte of before the fork; a table that the failed copy left out must
 * never look copied to it.
 */
TEST_F_TIMEOUT(af, failed_parent_copy_never_shows_in_child, 180)
{
	int status, killed = 0;

	set_sysctl(2);
	if (inject_alloc_failure("async_fork_vma_write"))
		SKIP(return, "no fail_page_alloc stack filter (FAULT_INJECTION_STACKTRACE_FILTER)");
	for (int tries = 0; tries < 10; tries++) {
		pid_t pid = fork_checker(self->mem);

		ASSERT_GE(pid, 0);
		mprotect(self->mem, REGION, PROT_READ);
		mprotect(self->mem, REGION, PROT_READ | PROT_WRITE);
		status = reap(pid);
		EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status)) {
			TH_LOG("try %d: the child saw a wrong snapshot", tries);
		}
		killed += WIFSIGNALED(status);
	}
	stop_failures(FAIL_ALLOC);
	EXPECT_EQ(mismatch(self->mem, REGION, 1), -1);
	TH_LOG("%d of 10 children killed by a failed copy", killed);
}

/*
 * --expect-off: the checks of a boot with async_fork=off (the Xen PV path,
 * simulated): the sysctl reads 0, and every request to enable Async-fork
 * fails with EOPNOTSUPP and changes nothing, while requests to disable it
 * succeed; forks stay the default ones.  Prints one line per failed check
 * and the count; exits 0 only if all passed.
 */
static int expect_off(void)
{
	int failed = 0, checks = 0;
	char *mem;
	pid_t pid;
	long forks;

#define OFF_CHECK(cond) do {						\
	checks++;							\
	if (!(cond)) {							\
		failed++;						\
		printf("off check failed: %s (errno %d)\n", #cond, errno);	\
	}								\
} while (0)
	OFF_CHECK(read_long("/proc/sys/vm/async_fork") == 0);
	OFF_CHECK(write_file("/proc/sys/vm/async_fork", "1") == EOPNOTSUPP);
	OFF_CHECK(write_file("/proc/sys/vm/async_fork", "2") == EOPNOTSUPP);
	OFF_CHECK(read_long("/proc/sys/vm/async_fork") == 0);
	OFF_CHECK(write_file("/proc/sys/vm/async_fork", "0") == 0);
	errno = 0;
	OFF_CHECK(prctl(PR_SET_ASYNC_FORK, 1, 0, 0, 0) == -1 && errno == EOPNOTSUPP);
	OFF_CHECK(prctl(PR_GET_ASYNC_FORK, 0, 0, 0, 0) == 0);
	OFF_CHECK(prctl(PR_SET_ASYNC_FORK, 0, 0, 0, 0) == 0);
	write_file("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
	rmdir(CGROUP);
	OFF_CHECK(mkdir(CGROUP, 0755) == 0);
	OFF_CHECK(write_file(CGROUP "/memory.async_fork", "1") == EOPNOTSUPP);
	OFF_CHECK(read_long(CGROUP "/memory.async_fork") == 0);
	OFF_CHECK(write_file(CGROUP "/memory.async_fork", "0") == 0);
	rmdir(CGROUP);
	mem = region();
	OFF_CHECK(mem != NULL);
	forks = vmstat("async_fork");
	pid = mem ? fork_checker(mem) : -1;
	OFF_CHECK(pid > 0 && reap(pid) == 0);
	OFF_CHECK(vmstat("async_fork") == forks);
#undef OFF_CHECK
	printf("async_fork=off: %d passed, %d failed\n", checks - failed, failed);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--get-prctl"))
		return prctl(PR_GET_ASYNC_FORK, 0, 0, 0, 0);
	if (argc == 2 && !strcmp(argv[1], "--fork-empty"))
		return fork_empty();
	if (argc == 2 && !strcmp(argv[1], "--fork-kind")) {
		char *mem = region();

		return mem ? fork_kind(mem) : 1;
	}
	if (argc == 2 && !strcmp(argv[1], "--expect-off"))
		return expect_off();
	return test_harness_run(argc, argv);
}
