/* SPDX-License-Identifier: MIT */
/*
 * Accuracy harness for bpf/meter.c, driven by tests/integration/metering_accuracy.sh.
 *   helper_meter [--raw] [--switch] [--sys] CASE WORK
 * --raw: force the raw_tp variants; --switch: CPU and IO at every sched_switch instead of at
 * exit (the default where the kernel allows it); --late: accounting at exit, the final
 * figures read 3 s after the task's end (the references kept in "dying" outlive the RCU
 * grace periods that free the threads); --sys: IO bytes from the sys_exit program.
 * CASE: cpu | mem | memexec | memswap | memfork | memorphan | io | net | fork. WORK: path of
 * helper_meter_work.
 * Creates its own v1 cpuacct + memory cgroups and a unified (v2) directory (on a unified-only
 * host, one v2 cgroup: cpu.stat usage_usec and memory.peak are the references), starts a child
 * in them (born in its v2 cgroup with CLONE_INTO_CGROUP, as corrald starts tasks; on v1 it
 * joins them) that waits on a pipe, tracks it, releases it to exec the workload, waits for the
 * METER_EV_EXIT event (no sleeps), then compares the meter with the kernel's own figures.
 * Prints each figure and the ratio; exit 0 pass, 1 fail, 77 when BPF cannot be loaded at all.
 *   helper_meter stress CASE WORK
 * Many exits, threads and concurrent tasks (see run_stress).
 *   helper_meter taskstats WORK
 * The fallback: the meter is not opened at all (as when BPF cannot be loaded); the exit
 * records of taskstats are compared with cpuacct.usage and /proc/PID/io wchar.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/sched.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bpf/print.h"
#include "bpf/meter.h"
#include "bpf/taskstats.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/parse.h"

#define TASK_KEY 0xc0ffee01ULL

static char cg_cpu[256], cg_mem[256], cg_uni[256];
static bool v2; /* unified-only host (e.g. the VM tier): one cgroup for everything */

/* "key value" line of a flat-keyed cgroup file, UINT64_MAX if absent. */
static uint64_t read_key(const char *dir, const char *file, const char *key)
{
	char p[300], k[64];
	uint64_t v, ret = UINT64_MAX;
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	f = fopen(p, "re");
	if (!f)
		return UINT64_MAX;
	while (fscanf(f, "%63s %" SCNu64, k, &v) == 2)
		if (!strcmp(k, key)) {
			ret = v;
			break;
		}
	fclose(f);
	return ret;
}

static void set_cgroup_paths(const char *tag)
{
	v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
	if (v2) {
		snprintf(cg_cpu, sizeof(cg_cpu), "/sys/fs/cgroup/corral-metertest%s-%d", tag,
			 getpid());
		snprintf(cg_mem, sizeof(cg_mem), "%s", cg_cpu);
		snprintf(cg_uni, sizeof(cg_uni), "%s", cg_cpu);
		return;
	}
	snprintf(cg_cpu, sizeof(cg_cpu), "/sys/fs/cgroup/cpuacct/corral-metertest%s-%d", tag,
		 getpid());
	snprintf(cg_mem, sizeof(cg_mem), "/sys/fs/cgroup/memory/corral-metertest%s-%d", tag,
		 getpid());
	snprintf(cg_uni, sizeof(cg_uni), "/sys/fs/cgroup/unified/corral-metertest%s-%d", tag,
		 getpid());
}

static int make_cgroups(void)
{
	if (mkdir(cg_cpu, 0755) < 0)
		return -errno;
	if (v2)
		return 0;
	if (mkdir(cg_mem, 0755) < 0 || mkdir(cg_uni, 0755) < 0)
		return -errno;
	return 0;
}

static int join(const char *dir, pid_t pid)
{
	char p[300], s[32];
	_cleanup_close_ int fd = -1;

	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	snprintf(s, sizeof(s), "%d", (int)pid);
	fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, s, strlen(s)) < 0)
		return -errno;
	return 0;
}

/*
 * fork(), the child born in the v2 cgroup dir (CLONE_INTO_CGROUP) on a unified-only host, so
 * that all its CPU is the cgroup's: the meter counts a tracked process from its birth. Elsewhere
 * (or without clone3) a plain fork, and the child joins its v1 cgroups itself (*joined false).
 * The child only makes async-signal-safe calls before its exec.
 */
static pid_t fork_into(const char *dir, bool *joined)
{
	_cleanup_close_ int fd = -1;
	struct clone_args ca = {.flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD};
	long r;

	*joined = false;
	if (v2 && (fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		ca.cgroup = (uint64_t)fd;
		r = syscall(SYS_clone3, &ca, sizeof(ca));
		if (r >= 0) {
			*joined = true;
			return (pid_t)r;
		}
		if (errno != ENOSYS && errno != EINVAL && errno != E2BIG)
			return -1;
	}
	return fork();
}

static uint64_t read_u64_path(const char *dir, const char *name)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t v = 0;

	if (fd < 0 || read_u64_file_at(fd, name, &v) < 0)
		return UINT64_MAX;
	return v;
}

static void cleanup_cgroups(void)
{
	rmdir(cg_cpu);
	if (v2)
		return;
	rmdir(cg_mem);
	rmdir(cg_uni);
}

/* The kernel's own figures: cpuacct.usage / cpu.stat usage_usec, and the memory peak. */
static uint64_t cgroup_cpu_ns(void)
{
	uint64_t us;

	if (!v2)
		return read_u64_path(cg_cpu, "cpuacct.usage");
	us = read_key(cg_cpu, "cpu.stat", "usage_usec");
	return us == UINT64_MAX ? us : us * 1000;
}

static uint64_t cgroup_mem_peak(void)
{
	return read_u64_path(cg_mem, v2 ? "memory.peak" : "memory.max_usage_in_bytes");
}

struct waitctx {
	bool got, settled;
	int32_t code;
	uint32_t pid;
};

static void on_ev(const struct meter_event *ev, void *userdata)
{
	struct waitctx *w = userdata;

	if (ev->type == METER_EV_SETTLED && ev->task_key == TASK_KEY)
		w->settled = true;
	if (ev->type == METER_EV_EXIT && ev->task_key == TASK_KEY) {
		w->got = true;
		w->code = ev->exit_code;
		w->pid = ev->pid;
	}
}

static uint64_t wchar_of(pid_t pid)
{
	char p[64];
	_cleanup_free_ char *s = NULL;
	const char *w;
	uint64_t v;

	snprintf(p, sizeof(p), "/proc/%d/io", (int)pid);
	if (read_file(p, 4096, &s, NULL) < 0)
		return UINT64_MAX;
	w = strstr(s, "wchar: ");
	if (!w || sscanf(w + 7, "%" SCNu64, &v) != 1)
		return UINT64_MAX;
	return v;
}

/* A receiver outside the task's cgroups: counts bytes until EOF, reports them on a pipe. */
static pid_t start_receiver(int *ret_port, int *ret_fd)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	int ls, pfd[2];
	pid_t pid;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 1) < 0 ||
	    getsockname(ls, (struct sockaddr *)&a, &al) < 0 || pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		static char buf[65536];
		uint64_t total = 0;
		ssize_t n;
		int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);

		if (c < 0)
			_exit(1);
		while ((n = read(c, buf, sizeof(buf))) > 0)
			total += (uint64_t)n;
		close(c);
		if (write(pfd[1], &total, sizeof(total)) != sizeof(total))
			_exit(1);
		_exit(0);
	}
	close(ls);
	close(pfd[1]);
	*ret_port = ntohs(a.sin_port);
	*ret_fd = pfd[0];
	return pid;
}

static bool check_ratio(const char *what, double measured, double truth, double tol)
{
	double ratio = truth > 0 ? measured / truth : 0;
	bool ok = truth > 0 && fabs(ratio - 1.0) <= tol;

	printf("%-28s measured=%.0f truth=%.0f ratio=%.5f (tolerance %.1f%%) %s\n", what, measured,
	       truth, ratio, tol * 100, ok ? "ok" : "FAIL");
	return ok;
}

struct ts_ctx {
	pid_t tgid;
	uint64_t exec_ns, user_ns, system_ns, write_chars, read_chars;
	unsigned records;
	bool leader_seen;
	uint32_t leader_exit_code;
};

static void on_ts(const struct taskstats_usage *u, void *userdata)
{
	struct ts_ctx *c = userdata;

	/* Thread records: pid is the thread id, tgid its process (kernel records >= v12). */
	if (u->is_tgid || (u->pid != (uint32_t)c->tgid && u->tgid != (uint32_t)c->tgid))
		return;
	c->records++;
	c->exec_ns += u->cpu_exec_ns;
	c->user_ns += u->cpu_user_ns;
	c->system_ns += u->cpu_system_ns;
	c->write_chars += u->write_chars;
	c->read_chars += u->read_chars;
	if (u->pid == (uint32_t)c->tgid) {
		c->leader_seen = true;
		c->leader_exit_code = u->exit_code;
	}
}

/* One workload under taskstats only; returns true when its figures match. *overrun is set
 * when its exit record never came and the socket overran meanwhile (another workload on the
 * node filled the multicast queue: the listener counted the loss, the caller tries again). */
static bool taskstats_case(struct taskstats_listener *l, char *const wargv[], bool io,
			   bool *overrun)
{
	const uint64_t overruns0 = taskstats_listener_overruns(l);
	struct ts_ctx c = {};
	uint64_t wchar = 0, t0, usage;
	siginfo_t si;
	bool ok = true;
	int go[2], st;
	pid_t child;

	if (make_cgroups() < 0 || pipe2(go, O_CLOEXEC) < 0)
		return false;
	child = fork();
	if (child < 0)
		return false;
	if (child == 0) {
		char ch;

		close(go[1]);
		if (join(cg_cpu, getpid()) || read(go[0], &ch, 1) != 1)
			_exit(126);
		execv(wargv[0], wargv);
		_exit(127);
	}
	close(go[0]);
	c.tgid = child;
	if (write(go[1], "x", 1) != 1)
		ok = false;
	close(go[1]);
	/* Exited but not reaped: /proc/PID/io still readable. */
	if (waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT) < 0)
		ok = false;
	if (io)
		wchar = wchar_of(child);
	t0 = now_ns(CLOCK_MONOTONIC);
	while (!c.leader_seen && now_ns(CLOCK_MONOTONIC) - t0 < 30 * NSEC_PER_SEC) {
		struct pollfd p = {.fd = taskstats_listener_fd(l), .events = POLLIN};

		if (poll(&p, 1, 1000) < 0 && errno != EINTR)
			break;
		taskstats_listener_poll(l, on_ts, &c);
	}
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "workload failed: 0x%x\n", st);
		ok = false;
	}
	usage = cgroup_cpu_ns();
	cleanup_cgroups();
	if (!c.leader_seen) {
		*overrun = taskstats_listener_overruns(l) != overruns0;
		fprintf(stderr, "no taskstats exit record for %d within 30 s%s\n", (int)child,
			*overrun ? " (the socket overran meanwhile)" : "");
		return false;
	}
	printf("taskstats %s: %u thread records, exec=%" PRIu64 " user=%" PRIu64 " system=%" PRIu64
	       " read_char=%" PRIu64 " write_char=%" PRIu64
	       " exit_code=0x%x (wait status 0x%x) overruns=%" PRIu64 "\n",
	       wargv[1], c.records, c.exec_ns, c.user_ns, c.system_ns, c.read_chars, c.write_chars,
	       c.leader_exit_code, st, taskstats_listener_overruns(l));
	ok &= c.leader_exit_code == (uint32_t)st;
	if (io) {
		int64_t d = (int64_t)c.write_chars - (int64_t)wchar;

		printf("%-28s taskstats=%" PRIu64 " wchar=%" PRIu64 " diff=%" PRId64 " %s\n",
		       "taskstats write_char", c.write_chars, wchar, d,
		       llabs(d) <= 4096 ? "ok" : "FAIL");
		ok &= wchar != UINT64_MAX && llabs(d) <= 4096;
	} else {
		ok &= check_ratio("taskstats cpu exec (2x0.5s)", (double)c.exec_ns, (double)usage,
				  0.01);
		/* ac_utime/ac_stime are tick-sampled: only their ratio is used, not checked. */
		printf("%-28s %.5f of cpuacct.usage (tick-sampled, informative)\n",
		       "taskstats user+system", (double)(c.user_ns + c.system_ns) / (double)usage);
	}
	return ok;
}

static int run_taskstats(const char *work)
{
	struct taskstats_listener *l = NULL;
	char *burn[] = {(char *)work, "burn", "2", "0.5", NULL};
	char *wr[] = {(char *)work, "write", "20", NULL};
	bool ok = true;
	int r;

	r = taskstats_listener_open(&l);
	if (r == -EOPNOTSUPP) {
		printf("SKIP: kernel without taskstats\n");
		return 77;
	}
	if (r < 0) {
		fprintf(stderr, "taskstats_listener_open: %s\n", strerror(-r));
		return 1;
	}
	set_cgroup_paths("-ts");
	for (int i = 0; i < 2; i++) {
		char *const *wargv = i ? wr : burn;
		bool pass = false, overrun = true;

		for (int try = 0; !pass && overrun && try < 3; try++) {
			overrun = false;
			pass = taskstats_case(l, wargv, i == 1, &overrun);
		}
		ok &= pass;
	}
	taskstats_listener_free(l);
	printf("taskstats: %s\n", ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}

/* ---- stress matrix ------------------------------------------------------------------------ */

/*
 * helper_meter stress CASE WORK: tasks with many exits, run with accounting at exit (the
 * default), each checked against its own cgroup's cpuacct.usage read here once its processes
 * are gone:
 *   spawn       3000 x /bin/true
 *   threads     2000 short threads, 8 at a time, read live every 20 ms while they run
 *   threadlive  400 threads of 3 ms each, 8 at a time, read live every 20 ms while they run
 *   forklive    4 children (no entry of their own from their fork) burning 400 ms each at
 *               once, read live every 20 ms while they run
 *   forkstorm   4 workers forking children that exit at once, for 3 s
 *   neighbour   a task of 200 x /bin/true started once another (4000 x /bin/true) has done
 *               1500 exits, both running together
 *   overflow    spawn 1500 with a 16-entry map of exited threads and no drain while it
 *               runs (meter_opts.no_drain): the figure must be exact or the loss reported
 *               (threads_lost), never silently short
 * A task's figure passes when it is within 1% of its cgroup's, or (overflow only) when it is
 * short and threads_lost says so. A live read (the threads cases, while the task runs) passes
 * when it lies between the cgroup's counter read just before it (0.5% below at most) and just
 * after it (0.1% above at most): with accounting at exit, the threads a process creates have
 * no entry of their own (bare threads) and a live read must count what they ran so far once.
 */
struct stask {
	uint64_t key;
	char cpu[256], mem[256], uni[256];
	pid_t pid;
	int go;
	bool exited, settled, ok;
	int status;
	/* CPU the child ran before it joined its cgroups (counted by the meter, which counts
	 * from its fork, and not by the cgroup): /proc/PID/schedstat less the cgroup's counter,
	 * both read while it waits to exec */
	uint64_t pre_ns;
};

static struct stask *stress_find(struct stask *ts, int n, uint64_t key)
{
	for (int i = 0; i < n; i++)
		if (ts[i].key == key)
			return &ts[i];
	return NULL;
}

struct sctx {
	struct stask *ts;
	int n;
};

static void on_stress_ev(const struct meter_event *ev, void *userdata)
{
	struct sctx *c = userdata;
	struct stask *t = stress_find(c->ts, c->n, ev->task_key);

	if (t && ev->type == METER_EV_EXIT)
		t->exited = true;
}

static uint64_t stress_cg_ns(const struct stask *t);

/* See stask.pre_ns (0 when unreadable). */
static uint64_t stress_pre_ns(const struct stask *t)
{
	unsigned long long run = 0;
	uint64_t cg = stress_cg_ns(t);
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)t->pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &run) != 1)
		run = 0;
	fclose(f);
	return cg != UINT64_MAX && run > cg ? run - cg : 0;
}

static int stress_start(struct meter *m, struct stask *t, int idx, char *const wargv[])
{
	const char *base = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/cpuacct";
	_cleanup_close_ int unifd = -1;
	int go[2], ready[2], r;
	bool joined;
	char c;

	t->key = TASK_KEY + 0x100 + (uint64_t)idx;
	snprintf(t->cpu, sizeof(t->cpu), "%s/corral-meterstress%d-%d", base, idx, getpid());
	if (v2) {
		snprintf(t->mem, sizeof(t->mem), "%s", t->cpu);
		snprintf(t->uni, sizeof(t->uni), "%s", t->cpu);
	} else {
		snprintf(t->mem, sizeof(t->mem), "/sys/fs/cgroup/memory/corral-meterstress%d-%d",
			 idx, getpid());
		snprintf(t->uni, sizeof(t->uni), "/sys/fs/cgroup/unified/corral-meterstress%d-%d",
			 idx, getpid());
	}
	if (mkdir(t->cpu, 0755) < 0 ||
	    (!v2 && (mkdir(t->mem, 0755) < 0 || mkdir(t->uni, 0755) < 0)))
		return -errno;
	unifd = open(t->uni, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (unifd < 0 || pipe2(go, O_CLOEXEC) < 0 || pipe2(ready, O_CLOEXEC) < 0)
		return -errno;
	t->pid = fork_into(t->cpu, &joined);
	if (t->pid < 0)
		return -errno;
	if (t->pid == 0) {
		close(go[1]);
		close(ready[0]);
		if (!joined && (join(t->cpu, getpid()) ||
				(!v2 && (join(t->mem, getpid()) || join(t->uni, getpid())))))
			_exit(126);
		if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(125);
		execv(wargv[0], wargv);
		_exit(127);
	}
	close(go[0]);
	close(ready[1]);
	if (read(ready[0], &c, 1) != 1)
		return -EIO;
	close(ready[0]);
	r = meter_track(m, t->key, t->pid, unifd);
	if (r < 0)
		return r;
	t->go = go[1];
	t->pre_ns = stress_pre_ns(t);
	return 0;
}

static void stress_go(struct stask *t)
{
	if (write(t->go, "x", 1) != 1)
		t->ok = false;
	close(t->go);
	t->go = -1;
}

static void stress_cleanup(struct stask *t)
{
	if (!t->cpu[0])
		return;
	rmdir(t->cpu);
	if (!v2) {
		rmdir(t->mem);
		rmdir(t->uni);
	}
}

static void stress_pump(struct meter *m, struct sctx *c, int ms)
{
	struct pollfd p = {.fd = meter_fd(m), .events = POLLIN};

	(void)poll(&p, 1, ms);
	meter_poll(m, on_stress_ev, c);
}

/* The task's cgroup CPU counter (ns), UINT64_MAX when unreadable. */
static uint64_t stress_cg_ns(const struct stask *t)
{
	uint64_t us;

	if (!v2)
		return read_u64_path(t->cpu, "cpuacct.usage");
	us = read_key(t->cpu, "cpu.stat", "usage_usec");
	return us == UINT64_MAX ? us : us * 1000;
}

/*
 * One live read of t between two reads of its cgroup's counter (see the stress matrix above).
 * Returns false when it lies outside them; *n counts the reads made.
 */
static bool stress_live(struct meter *m, const struct stask *t, int *n)
{
	uint64_t before, after, cpu;
	struct meter_usage u;
	bool ok;

	before = stress_cg_ns(t);
	if (meter_read(m, t->key, &u) < 0)
		return false;
	after = stress_cg_ns(t);
	if (before == UINT64_MAX || after == UINT64_MAX || !before)
		return true; /* nothing run yet, or the cgroup gone */
	++*n;
	cpu = u.cpu_ns - (u.cpu_ns > t->pre_ns ? t->pre_ns : u.cpu_ns);
	ok = (double)cpu >= 0.995 * (double)before && (double)cpu <= 1.001 * (double)after;
	if (!ok || *n % 10 == 1)
		printf("live read %d: cgroup before %" PRIu64 ", ebpf %" PRIu64 " (less %" PRIu64
		       " ns before the cgroup join), cgroup after %" PRIu64 "%s\n",
		       *n, before, cpu, t->pre_ns, after, ok ? "" : ": OUTSIDE");
	return ok;
}

/*
 * Wait for t's exit event (reading it live every 20 ms meanwhile when live is set), reap it,
 * wait for its final figures, check them.
 */
static bool stress_finish(struct meter *m, struct sctx *c, struct stask *t, const char *what,
			  bool overflow, bool live)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC), truth;
	struct meter_usage u;
	int r, nlive = 0, bad = 0;
	bool ok = true;

	while (!t->exited && now_ns(CLOCK_MONOTONIC) - t0 < 120 * NSEC_PER_SEC) {
		stress_pump(m, c, live ? 20 : 1000);
		if (live && !t->exited && !stress_live(m, t, &nlive))
			bad++;
	}
	if (live) {
		printf("%s: %d live reads, %d outside the cgroup's counter\n", what, nlive, bad);
		if (bad || nlive < 3) {
			fprintf(stderr, "%s: live reads: %d outside, %d made\n", what, bad, nlive);
			ok = false;
		}
	}
	if (!t->exited) {
		fprintf(stderr, "%s: no exit event within 120 s\n", what);
		kill(t->pid, SIGKILL);
		ok = false;
	}
	if (waitpid(t->pid, &t->status, 0) != t->pid || !WIFEXITED(t->status) ||
	    WEXITSTATUS(t->status)) {
		fprintf(stderr, "%s: workload failed: 0x%x\n", what, t->status);
		ok = false;
	}
	t0 = now_ns(CLOCK_MONOTONIC);
	while ((r = meter_settle(m, t->key)) == 0 &&
	       now_ns(CLOCK_MONOTONIC) - t0 < 10 * NSEC_PER_SEC)
		stress_pump(m, c, 100);
	if (r != 1) {
		fprintf(stderr, "%s: not settled within 10 s (%d)\n", what, r);
		ok = false;
	}
	truth = stress_cg_ns(t);
	if (meter_read(m, t->key, &u) < 0) {
		fprintf(stderr, "%s: meter_read failed\n", what);
		return false;
	}
	printf("%s: cpu_ns=%" PRIu64 " forks=%" PRIu64 " threads_lost=%" PRIu64
	       " unsettled=%" PRIu64 " (node: tail_lost=%" PRIu64 " map_full=%" PRIu64
	       " drains=%" PRIu64 ")\n",
	       what, u.cpu_ns, u.forks, u.threads_lost, u.threads_unsettled, meter_tail_lost(m),
	       meter_map_full(m), meter_drains(m));
	if (overflow && u.threads_lost > 0) {
		double ratio = truth ? (double)u.cpu_ns / (double)truth : 0;

		printf("%-28s measured=%" PRIu64 " truth=%" PRIu64 " ratio=%.5f: short, and "
		       "reported (%" PRIu64 " threads lost) ok\n",
		       what, u.cpu_ns, truth, ratio, u.threads_lost);
	} else {
		ok &= check_ratio(what, (double)u.cpu_ns, (double)truth, 0.01);
		if (u.threads_lost) {
			fprintf(stderr, "%s: threads_lost=%" PRIu64 " though the figure is exact\n",
				what, u.threads_lost);
		}
	}
	(void)meter_forget(m, t->key);
	stress_cleanup(t);
	return ok;
}

static int run_stress(const char *cs, const char *work, struct meter_opts opts)
{
	struct stask ts[2] = {{.go = -1, .ok = true}, {.go = -1, .ok = true}};
	struct sctx c = {.ts = ts, .n = 2};
	struct meter *m = NULL;
	char *a[6] = {(char *)work}, *b[6] = {(char *)work};
	bool ok = true, two = false, overflow = false, live = false;
	int r;

	/* CORRAL_METER_STRESS_DIV=N divides the counts (the VM tier runs under emulation). */
	const char *dv = getenv("CORRAL_METER_STRESS_DIV");
	long div = dv && atol(dv) > 0 ? atol(dv) : 1;
	char n3000[24], n2000[24], n4000[24], n200[24], n1500[24], n400[24], secs[24];

	snprintf(n3000, sizeof(n3000), "%ld", 3000 / div);
	snprintf(n2000, sizeof(n2000), "%ld", 2000 / div);
	snprintf(n4000, sizeof(n4000), "%ld", 4000 / div);
	snprintf(n200, sizeof(n200), "%ld", 200 / div > 100 ? 200 / div : 100);
	snprintf(n1500, sizeof(n1500), "%ld", 1500 / div);
	snprintf(n400, sizeof(n400), "%ld", 400 / div);
	snprintf(secs, sizeof(secs), "%.2f", 3.0 / (double)div);
	if (!strcmp(cs, "spawn")) {
		a[1] = "spawn", a[2] = n3000;
	} else if (!strcmp(cs, "threads")) {
		a[1] = "threads", a[2] = n2000, a[3] = "200";
		live = true;
	} else if (!strcmp(cs, "threadlive")) {
		a[1] = "threads", a[2] = n400, a[3] = "3000";
		live = true;
	} else if (!strcmp(cs, "forkstorm")) {
		a[1] = "forkstorm", a[2] = "4", a[3] = secs;
	} else if (!strcmp(cs, "forklive")) {
		/* children that get no entry at their fork, read live while they burn */
		a[1] = "forkburn", a[2] = "4", a[3] = "400";
		live = true;
	} else if (!strcmp(cs, "neighbour")) {
		a[1] = "spawn", a[2] = n4000;
		b[1] = "spawn", b[2] = n200;
		two = true;
	} else if (!strcmp(cs, "overflow")) {
		a[1] = "spawn", a[2] = n1500;
		opts.max_dying = 16;
		opts.no_drain = true;
		overflow = true;
	} else {
		fprintf(stderr, "unknown stress case %s\n", cs);
		return 2;
	}
	v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
	r = meter_open(&opts, &m);
	if (r < 0) {
		printf("SKIP: cannot load the metering BPF programs: %s\n", strerror(-r));
		return 77;
	}
	printf("attach mode: %s, cpu accounted at %s\n", meter_attach_mode(m),
	       meter_cpu_accounting(m));
	/* With accounting at every switch, a live read lags by each running thread's slice. */
	live = live && !strcmp(meter_cpu_accounting(m), "exit");
	r = stress_start(m, &ts[0], 0, a);
	if (r < 0) {
		fprintf(stderr, "start: %s\n", strerror(-r));
		ok = false;
		goto out;
	}
	stress_go(&ts[0]);
	if (two) {
		struct meter_usage u = {};
		uint64_t t0 = now_ns(CLOCK_MONOTONIC);

		/* The neighbour starts once the noisy task has done 1500 exits (its forks). */
		while (meter_read(m, ts[0].key, &u) == 0 && u.forks < (uint64_t)(1500 / div) &&
		       !ts[0].exited && now_ns(CLOCK_MONOTONIC) - t0 < 60 * NSEC_PER_SEC)
			stress_pump(m, &c, 20);
		printf("neighbour starts after %" PRIu64 " exits of the noisy task\n", u.forks);
		r = stress_start(m, &ts[1], 1, b);
		if (r < 0) {
			fprintf(stderr, "start: %s\n", strerror(-r));
			ok = false;
			goto out;
		}
		stress_go(&ts[1]);
		ok &= stress_finish(m, &c, &ts[1], "neighbour (small task)", false, false);
		ok &= stress_finish(m, &c, &ts[0], "noisy task", false, false);
	} else {
		ok &= stress_finish(m, &c, &ts[0], cs, overflow, live);
	}
	ok &= ts[0].ok && ts[1].ok;
out:
	for (int i = 0; i < 2; i++) {
		if (ts[i].pid > 0 && ts[i].go >= 0) {
			kill(ts[i].pid, SIGKILL);
			waitpid(ts[i].pid, NULL, 0);
		}
		stress_cleanup(&ts[i]);
	}
	meter_free(m);
	printf("stress %s: %s\n", cs, ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}

/* Every figure of two reads equal (the fields, not the padding). */
static bool usage_equal(const struct meter_usage *x, const struct meter_usage *y)
{
	return x->cpu_ns == y->cpu_ns && x->cpu_user_ns == y->cpu_user_ns &&
	       x->cpu_system_ns == y->cpu_system_ns && x->rss_peak_bytes == y->rss_peak_bytes &&
	       x->rss_current_bytes == y->rss_current_bytes &&
	       x->memory_byte_seconds == y->memory_byte_seconds &&
	       x->io_read_bytes == y->io_read_bytes && x->io_write_bytes == y->io_write_bytes &&
	       x->blk_read_bytes == y->blk_read_bytes && x->blk_write_bytes == y->blk_write_bytes &&
	       x->blk_measured == y->blk_measured && x->net_rx_bytes == y->net_rx_bytes &&
	       x->net_tx_bytes == y->net_tx_bytes && x->net_rx_packets == y->net_rx_packets &&
	       x->net_tx_packets == y->net_tx_packets && x->rss_changed_ns == y->rss_changed_ns &&
	       x->procs_alive == y->procs_alive && x->forks == y->forks &&
	       x->net_metered == y->net_metered && x->cpu_ticks_user_ns == y->cpu_ticks_user_ns &&
	       x->cpu_ticks_system_ns == y->cpu_ticks_system_ns &&
	       x->cpu_split_known == y->cpu_split_known &&
	       x->blk_issued_read_bytes == y->blk_issued_read_bytes &&
	       x->blk_issued_write_bytes == y->blk_issued_write_bytes &&
	       x->threads_lost == y->threads_lost && x->threads_unsettled == y->threads_unsettled;
}

/*
 * memexec: once the workload (200 MiB touched) has exec'd /bin/sleep, the task's eBPF RSS is
 * the sleeper's: the touched pages left with the old address space. Truth: VmRSS of the
 * sleeping process (/proc/PID/status, the same counters) read right after; the two within
 * 8 MiB (the counters' per-CPU parts). Returns true once checked (*ok updated).
 */
static bool exec_rss_check(struct meter *m, pid_t child, bool *ok)
{
	_cleanup_free_ char *comm = NULL, *status = NULL;
	struct meter_usage lu;
	char path[64];
	const char *v;
	uint64_t vm_kib;
	int64_t d;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)child);
	if (read_file(path, 256, &comm, NULL) < 0 || strcmp(comm, "sleep\n"))
		return false;
	usleep(100 * 1000); /* the sleeper's own first faults */
	if (meter_read(m, TASK_KEY, &lu) < 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)child);
	if (read_file(path, 65536, &status, NULL) < 0 || !(v = strstr(status, "VmRSS:")))
		return false;
	vm_kib = strtoull(v + 6, NULL, 10);
	d = (int64_t)lu.rss_current_bytes - (int64_t)(vm_kib << 10);
	printf("%-28s ebpf=%" PRIu64 " VmRSS=%" PRIu64 " diff=%" PRId64
	       " (tolerance 8 MiB; peak %" PRIu64 ") %s\n",
	       "rss after exec", lu.rss_current_bytes, vm_kib << 10, d, lu.rss_peak_bytes,
	       llabs(d) <= (8 << 20) && lu.rss_peak_bytes >= (150ULL << 20) ? "ok" : "FAIL");
	*ok &= llabs(d) <= (8 << 20) && lu.rss_peak_bytes >= (150ULL << 20);
	return true;
}

/* Resident bytes of pid (/proc/PID/statm, second field); 0 when unreadable. */
static uint64_t statm_resident(pid_t pid)
{
	_cleanup_free_ char *txt = NULL;
	unsigned long long size, res;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
	if (read_file(path, 256, &txt, NULL) < 0 || sscanf(txt, "%llu %llu", &size, &res) != 2)
		return 0;
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* The two children of pid (/proc/PID/task/PID/children); false unless it has two. */
static bool two_children(pid_t pid, int kid[2])
{
	_cleanup_free_ char *txt = NULL;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	return read_file(path, 256, &txt, NULL) == 0 && sscanf(txt, "%d %d", &kid[0], &kid[1]) == 2;
}

/* A still window: the same figures (size bytes of them) in three samples in a row; true at
 * the third. */
static bool still_third(uint64_t *last, int *same, const uint64_t *now, size_t size)
{
	if (memcmp(now, last, size)) {
		memcpy(last, now, size);
		*same = 1;
		return false;
	}
	return ++*same == 3;
}

/*
 * memswap: the growth of the meter's current RSS against the growth of the resident pages of
 * the workload and its two children in /proc/PID/statm, which the kernel reads from the same
 * counters (their totals, as the meter does), from one still window to the next of the same
 * children: equal. (Not the figures themselves: a counter the children's copy at fork set and
 * no change of their own moved since is not in the meter.) A window counts when the figures
 * stay the same over three samples (the children are still for 5 ms after each turn); an
 * event the meter skipped wrongly leaves its mm's figure behind until that mm's next change
 * (a note of one mm's values taken for the other's fails about half of the windows). Since
 * Linux 6.16 statm reads each counter's exact sum, not its global part, so a window may also
 * differ within the counters' unfolded per-CPU part (percpu_slack below; seen: 2 windows of
 * 485, 6 pages each way, the next window making up for it): at most 1 in 20 may.
 */
struct swap_check {
	uint64_t last[4], win[4];
	int win_kid[2];
	int same, windows; /* of these children */
	unsigned matched, unfolded, differed;
};

static int64_t percpu_slack(void);

static void swap_sample(struct meter *m, pid_t child, struct swap_check *c)
{
	struct meter_usage lu;
	uint64_t now[4];
	int kid[2];

	if (!two_children(child, kid)) {
		c->same = 0;
		return;
	}
	now[0] = statm_resident(child);
	now[1] = statm_resident(kid[0]);
	now[2] = statm_resident(kid[1]);
	if (!now[0] || !now[1] || !now[2] || meter_read(m, TASK_KEY, &lu) < 0) {
		c->same = 0;
		return;
	}
	now[3] = lu.rss_current_bytes;
	if (!still_third(c->last, &c->same, now, sizeof(now)))
		return;
	if (kid[0] != c->win_kid[0] || kid[1] != c->win_kid[1])
		c->windows = 0;
	/* From the fifth on: by then each child has run through its loop twice and faulted in
	 * its code (an own change of the file pages, which brings in what the copy set). */
	if (++c->windows >= 5) {
		int64_t dm = (int64_t)(now[3] - c->win[3]);
		int64_t ds = (int64_t)(now[0] - c->win[0]) + (int64_t)(now[1] - c->win[1]) +
			     (int64_t)(now[2] - c->win[2]);

		if (dm == ds) {
			c->matched++;
		} else {
			bool within = llabs(dm - ds) <= percpu_slack();

			*(within ? &c->unfolded : &c->differed) += 1;
			printf("memswap: the meter's rss grew by %" PRId64 ", statm by %" PRId64
			       " (window %d; %" PRIu64 " %" PRIu64 " %" PRIu64 "; %s the unfolded "
			       "per-CPU part)\n",
			       dm, ds, c->windows, now[0] - c->win[0], now[1] - c->win[1],
			       now[2] - c->win[2], within ? "within" : "OUTSIDE");
		}
	}
	memcpy(c->win_kid, kid, sizeof(kid));
	memcpy(c->win, now, sizeof(now));
}

/*
 * memfork: the workload forks children that exit at once, half of them after touching 64 pages
 * of their own (an own change: their mm gets an entry, its pages join the task's RSS). Once a
 * child has exited and been reaped, its mm's whole contribution must have left the task's RSS:
 * from one still window with no child alive to the next one after more forks (the meter's
 * count of forks moved), the meter's current RSS grows as the workload's resident pages in
 * /proc/PID/statm, exactly, or within what the kernel's counters themselves allow: since Linux
 * 6.2 each member is a percpu counter, `rss_stat` (the meter's source) gives its global part and
 * statm (since 6.16) the exact sum, so the workload's own faults (its stack, its heap, the
 * copy-on-write after a fork) may sit unfolded in a CPU's part: under the batch on each CPU,
 * for each of the 3 members, at both ends of a window (seen once in CI: statm +16 pages, the
 * meter 0). An exit that left part of a child's pages behind (an entry not released, a
 * teardown's decrement lost or counted twice) shows as a larger difference (a release of half
 * of each entry's pages fails every window); where what it leaves is itself only per-CPU
 * residue (an entry kept at exit: 21-22 pages in a window), the task's RSS after its last
 * exit, which must be 0, catches it (every case checks that).
 */
struct fork_check {
	uint64_t last[3], win[3];
	int same;
	bool have, orphan;
	unsigned matched, unfolded, differed;
};

/*
 * memorphan: the workload forks a child and exits; the child (a process that got no entry of
 * its own at its fork, found through its parent until then: bpf/meter.bpf.c, parent_keeps),
 * reparented, touches 64 pages per round. From one still window to the next after a round,
 * the meter's RSS grows as the child's resident pages in /proc/PID/statm, exactly: a child
 * whose own changes were taken for an untracked process's after its parent's end shows as a
 * difference. The child: the one process left in the task's cgroup (0 while the workload is
 * there too, or none).
 */
static pid_t lone_member(pid_t child)
{
	_cleanup_free_ char *txt = NULL;
	char path[300];
	int a, b;

	snprintf(path, sizeof(path), "%s/cgroup.procs", cg_cpu);
	if (read_file(path, 4096, &txt, NULL) < 0 || sscanf(txt, "%d %d", &a, &b) != 1 ||
	    a == child)
		return 0;
	return a;
}

/* Bytes by which statm's exact sum and the global parts of one process's counters can differ
 * between two readings: 2 x 3 members x CPUs x (batch - 1) pages, the batch being
 * max(32, 2 x online CPUs) (percpu_counter_batch). */
static int64_t percpu_slack(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_CONF), online = sysconf(_SC_NPROCESSORS_ONLN);
	long batch = 2 * online > 32 ? 2 * online : 32;

	return 2 * 3 * (int64_t)cpus * (batch - 1) * sysconf(_SC_PAGESIZE);
}

static bool no_children(pid_t pid)
{
	_cleanup_free_ char *txt = NULL;
	char path[64];
	int kid;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	return read_file(path, 256, &txt, NULL) == 0 && sscanf(txt, "%d", &kid) != 1;
}

static void fork_sample(struct meter *m, pid_t child, struct fork_check *c)
{
	pid_t pid = c->orphan ? lone_member(child) : child;
	struct meter_usage lu;
	uint64_t now[3];

	if (!pid || (!c->orphan && !no_children(child))) {
		c->same = 0;
		return;
	}
	now[0] = statm_resident(pid);
	if (!now[0] || meter_read(m, TASK_KEY, &lu) < 0 || (!c->orphan && !no_children(child))) {
		c->same = 0;
		return;
	}
	now[1] = lu.rss_current_bytes;
	now[2] = c->orphan ? (uint64_t)pid : lu.forks;
	if (!still_third(c->last, &c->same, now, sizeof(now)))
		return;
	if (c->have && (c->orphan ? now[0] != c->win[0] : now[2] != c->win[2])) {
		int64_t dm = (int64_t)(now[1] - c->win[1]), ds = (int64_t)(now[0] - c->win[0]);

		if (dm == ds) {
			c->matched++;
		} else {
			bool within = llabs(dm - ds) <= percpu_slack();

			*(within ? &c->unfolded : &c->differed) += 1;
			printf("%s: after %" PRIu64 " more %s the meter's rss grew by %" PRId64
			       ", statm by %" PRId64
			       " (%s the counters' unfolded per-CPU part, %" PRId64 " bytes)\n",
			       c->orphan ? "memorphan" : "memfork",
			       c->orphan ? 1 : now[2] - c->win[2], c->orphan ? "round(s)" : "forks",
			       dm, ds, within ? "within" : "OUTSIDE", percpu_slack());
		}
	}
	c->have = true;
	memcpy(c->win, now, sizeof(now));
}

int main(int argc, char **argv)
{
	struct meter_opts opts = {};
	_cleanup_close_ int unifd = -1;
	struct waitctx w = {};
	struct meter_usage u;
	struct meter *m = NULL;
	int go[2], ready[2], r, st, port = 0, rfd = -1, ai = 1;
	char rc;
	const char *cs, *work;
	char portstr[16], sent_file[64] = "", *wargv[8] = {};
	pid_t child, recv_pid = -1;
	uint64_t wchar = 0, t0;
	bool ok = true, late = false, memexec, memswap, memfork, exec_rss_seen = false, joined;
	struct swap_check swap = {};
	struct fork_check forkc = {};

	libbpf_set_print(bpf_print_env);
	for (; ai < argc && argv[ai][0] == '-'; ai++) {
		if (!strcmp(argv[ai], "--raw"))
			opts.force_raw_tp = true;
		else if (!strcmp(argv[ai], "--sys"))
			opts.io_from_syscalls = true;
		else if (!strcmp(argv[ai], "--switch"))
			opts.cpu_at_switch = true;
		else if (!strcmp(argv[ai], "--late"))
			late = true;
		else
			return 2;
	}
	if (argc == ai + 3 && !strcmp(argv[ai], "stress"))
		return run_stress(argv[ai + 1], argv[ai + 2], opts);
	if (argc != ai + 2) {
		fprintf(stderr, "usage: helper_meter [--raw] [--switch] [--late] [--sys] "
				"cpu|mem|memexec|memswap|memfork|memorphan|io|net|fork WORK\n");
		return 2;
	}
	cs = argv[ai];
	work = argv[ai + 1];
	memexec = !strcmp(cs, "memexec");
	memswap = !strcmp(cs, "memswap");
	forkc.orphan = !strcmp(cs, "memorphan");
	memfork = !strcmp(cs, "memfork") || forkc.orphan;
	if (!strcmp(cs, "taskstats"))
		return run_taskstats(work); /* the meter is deliberately not opened */

	r = meter_open(&opts, &m);
	if (r < 0) {
		printf("SKIP: cannot load the metering BPF programs: %s\n", strerror(-r));
		return 77;
	}
	printf("attach mode: %s, cpu accounted at %s, io from %s\n", meter_attach_mode(m),
	       meter_cpu_accounting(m), opts.io_from_syscalls ? "sys_exit" : "task->ioac");

	wargv[0] = (char *)work;
	if (!strcmp(cs, "cpu")) {
		wargv[1] = "burn", wargv[2] = "2", wargv[3] = "2";
	} else if (!strcmp(cs, "mem")) {
		wargv[1] = "touch", wargv[2] = "300";
	} else if (!strcmp(cs, "memexec")) {
		wargv[1] = "touchexec", wargv[2] = "200";
	} else if (!strcmp(cs, "memswap")) {
		wargv[1] = "memswap", wargv[2] = "4", wargv[3] = "8";
	} else if (memfork) {
		wargv[1] = forkc.orphan ? "memorphan" : "memfork", wargv[2] = "8",
		wargv[3] = forkc.orphan ? NULL : "50";
	} else if (!strcmp(cs, "io")) {
		wargv[1] = "write", wargv[2] = "100";
	} else if (!strcmp(cs, "net")) {
		recv_pid = start_receiver(&port, &rfd);
		if (recv_pid < 0) {
			fprintf(stderr, "receiver: %m\n");
			return 1;
		}
		snprintf(portstr, sizeof(portstr), "%d", port);
		snprintf(sent_file, sizeof(sent_file), "/tmp/corral-meter-sent.%d", (int)getpid());
		(void)unlink(sent_file);
		setenv("CORRAL_SENT_FILE", sent_file, 1);
		wargv[1] = "send", wargv[2] = "50", wargv[3] = portstr;
	} else if (!strcmp(cs, "fork")) {
		wargv[1] = "forkburn", wargv[2] = "100", wargv[3] = "20";
	} else {
		fprintf(stderr, "unknown case %s\n", cs);
		return 2;
	}

	set_cgroup_paths("");
	if (make_cgroups() < 0) {
		fprintf(stderr, "mkdir cgroups: %m\n");
		cleanup_cgroups();
		return 1;
	}
	unifd = open(cg_uni, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (unifd < 0 || pipe2(go, O_CLOEXEC) < 0 || pipe2(ready, O_CLOEXEC) < 0) {
		cleanup_cgroups();
		return 1;
	}
	child = fork_into(cg_cpu, &joined);
	if (child < 0) {
		cleanup_cgroups();
		return 1;
	}
	if (child == 0) {
		char c;

		close(go[1]);
		close(ready[0]);
		if (!joined && (join(cg_cpu, getpid()) ||
				(!v2 && (join(cg_mem, getpid()) || join(cg_uni, getpid())))))
			_exit(126);
		/* Joined: tracking starts now, so both sides see the same life. */
		if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(125);
		execv(work, wargv);
		_exit(127);
	}
	close(go[0]);
	close(ready[1]);
	if (read(ready[0], &rc, 1) != 1) {
		fprintf(stderr, "child failed to join its cgroups\n");
		waitpid(child, NULL, 0);
		cleanup_cgroups();
		return 1;
	}
	close(ready[0]);
	r = meter_track(m, TASK_KEY, child, unifd);
	if (r < 0) {
		fprintf(stderr, "meter_track: %s\n", strerror(-r));
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		cleanup_cgroups();
		return 1;
	}
	if (write(go[1], "x", 1) != 1)
		return 1;
	close(go[1]);

	/* Wait for the exit event: poll the ring buffer fd, 120 s at most. */
	t0 = now_ns(CLOCK_MONOTONIC);
	while (!w.got && now_ns(CLOCK_MONOTONIC) - t0 < 120 * NSEC_PER_SEC) {
		struct pollfd p = {.fd = meter_fd(m), .events = POLLIN};

		if (poll(&p, 1, memexec ? 20 : memswap || memfork ? 1 : 1000) < 0 && errno != EINTR)
			break;
		meter_poll(m, on_ev, &w);
		if (memswap)
			swap_sample(m, child, &swap);
		if (memfork)
			fork_sample(m, child, &forkc);
		if (memexec && !exec_rss_seen)
			exec_rss_seen = exec_rss_check(m, child, &ok);
	}
	if (memexec && !exec_rss_seen) {
		fprintf(stderr, "memexec: the workload's sleep after exec was never seen\n");
		ok = false;
	}
	if (memswap) {
		bool swap_ok = swap.matched >= 50 && !swap.differed &&
			       swap.unfolded * 20 <= swap.matched + swap.unfolded;

		printf("memswap: %u still windows grew as statm, %u within the unfolded per-CPU "
		       "part, %u otherwise %s\n",
		       swap.matched, swap.unfolded, swap.differed, swap_ok ? "ok" : "FAIL");
		ok &= swap_ok;
	}
	if (memfork) {
		printf("%s: %u still windows after forks grew as statm, %u within the unfolded "
		       "per-CPU part, %u otherwise %s\n",
		       cs, forkc.matched, forkc.unfolded, forkc.differed,
		       forkc.matched >= 4 && !forkc.differed ? "ok" : "FAIL");
		ok &= forkc.matched >= 4 && !forkc.differed;
	}
	if (!w.got) {
		fprintf(stderr, "no METER_EV_EXIT within 120 s\n");
		kill(child, SIGKILL);
		ok = false;
	}
	if (!strcmp(cs, "io"))
		wchar = wchar_of(child); /* the child is a zombie until reaped: io still readable */
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "workload failed: status 0x%x\n", st);
		ok = false;
	}
	if (w.got && w.code != st) {
		fprintf(stderr, "exit event status 0x%x != wait status 0x%x\n", w.code, st);
		ok = false;
	}
	/* Accounting at exit: the final figures, once every thread is off its CPU for good
	 * (meter_settle, retried until they are all off their CPU). */
	t0 = now_ns(CLOCK_MONOTONIC);
	for (int tries = 0;; tries++) {
		struct pollfd p = {.fd = meter_fd(m), .events = POLLIN};

		if (late && tries == 0)
			sleep(3);
		r = meter_settle(m, TASK_KEY);
		if (r != 0) {
			printf("settled: %s after %d waits, %.3f s (%s)\n",
			       r == 1 ? "yes" : strerror(-r), tries,
			       (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9,
			       w.settled ? "event" : "no event");
			break;
		}
		if (now_ns(CLOCK_MONOTONIC) - t0 > 10 * NSEC_PER_SEC) {
			fprintf(stderr, "not settled within 10 s\n");
			ok = false;
			break;
		}
		(void)poll(&p, 1, 100);
		meter_poll(m, on_ev, &w);
	}
	r = meter_read(m, TASK_KEY, &u);
	if (r < 0) {
		fprintf(stderr, "meter_read: %s\n", strerror(-r));
		ok = false;
		goto out;
	}
	printf("cpu_ns=%" PRIu64 " user=%" PRIu64 " system=%" PRIu64 " rss_peak=%" PRIu64
	       " byte_s=%.0f io_r=%" PRIu64 " io_w=%" PRIu64 " blk_r=%" PRIu64 " blk_w=%" PRIu64
	       " net_rx=%" PRIu64 "/%" PRIu64 "p net_tx=%" PRIu64 "/%" PRIu64
	       "p procs_alive=%u forks=%" PRIu64 " drops=%" PRIu64 "\n",
	       u.cpu_ns, u.cpu_user_ns, u.cpu_system_ns, u.rss_peak_bytes, u.memory_byte_seconds,
	       u.io_read_bytes, u.io_write_bytes, u.blk_read_bytes, u.blk_write_bytes,
	       u.net_rx_bytes, u.net_rx_packets, u.net_tx_bytes, u.net_tx_packets, u.procs_alive,
	       u.forks, meter_ringbuf_drops(m));
	if (u.procs_alive != 0) {
		fprintf(stderr, "procs_alive %u after exit\n", u.procs_alive);
		ok = false;
	}
	/* No process of the task is left, so no address space: every entry was released, and
	 * what its teardown left in the counters' per-CPU parts went with it (an entry kept at
	 * an exit leaves that residue here). */
	if (u.rss_current_bytes != 0) {
		fprintf(stderr, "rss_current %" PRIu64 " bytes after every process exited\n",
			u.rss_current_bytes);
		ok = false;
	}
	/* The batched read (the maps read whole, as at a node.sample's change check) gives what
	 * the reads one by one gave: every figure equal. */
	{
		struct meter_usage ub;
		bool same;

		meter_batch(m, true);
		r = meter_prefetch(m);
		if (r == 0)
			r = meter_read(m, TASK_KEY, &ub);
		meter_batch(m, false);
		same = r == 0 && usage_equal(&ub, &u);
		printf("batched read: %s\n", r < 0  ? strerror(-r)
					     : same ? "equal ok"
						    : "differs FAIL");
		ok &= same;
	}

	if (!strcmp(cs, "cpu")) {
		ok &= check_ratio("cpu (2 threads x 2 s)", (double)u.cpu_ns,
				  (double)cgroup_cpu_ns(), 0.01);
	} else if (!strcmp(cs, "fork")) {
		ok &= check_ratio("cpu (100 children)", (double)u.cpu_ns, (double)cgroup_cpu_ns(),
				  0.01);
		printf("forks=%" PRIu64 " (expected 100) %s\n", u.forks,
		       u.forks == 100 ? "ok" : "FAIL");
		ok &= u.forks == 100;
	} else if (!strcmp(cs, "mem")) {
		ok &= check_ratio("rss peak (300 MiB)", (double)u.rss_peak_bytes,
				  (double)cgroup_mem_peak(), 0.02);
		printf("memory_byte_seconds=%.0f\n", u.memory_byte_seconds);
		ok &= u.memory_byte_seconds > 0;
	} else if (!strcmp(cs, "io")) {
		int64_t d = (int64_t)u.io_write_bytes - (int64_t)wchar;

		printf("%-28s ebpf=%" PRIu64 " wchar=%" PRIu64 " diff=%" PRId64
		       " (tolerance 4096) %s\n",
		       "io write (100 MiB)", u.io_write_bytes, wchar, d,
		       llabs(d) <= 4096 ? "ok" : "FAIL");
		ok &= wchar != UINT64_MAX && llabs(d) <= 4096;
	} else if (!strcmp(cs, "net")) {
		uint64_t got = 0;
		int rst;

		if (read(rfd, &got, sizeof(got)) != sizeof(got))
			ok = false;
		waitpid(recv_pid, &rst, 0);
		uint64_t sent = got;
		_cleanup_free_ char *sent_txt = NULL;

		printf("receiver got %" PRIu64 " payload bytes (sent %d)\n", got, 50 << 20);
		ok &= got == (uint64_t)50 << 20;
		/* bytes the sender's kernel put on the wire, retransmissions included */
		if (read_file(sent_file, 64, &sent_txt, NULL) == 0 &&
		    parse_u64(strtok(sent_txt, "\n"), &sent) == 0 && sent >= got) {
			printf("sender's TCP_INFO bytes_sent %" PRIu64 " (%" PRIu64
			       " retransmitted)\n",
			       sent, sent - got);
		} else {
			printf("sender's TCP_INFO bytes_sent unavailable: payload taken\n");
			sent = got;
		}
		(void)unlink(sent_file);
		/*
		 * skb->len at cgroup_skb counts from the IP header: payload + headers, 52 bytes a
		 * packet on loopback IPv4 (20 IP + 20 TCP + 12 of timestamp option). How many
		 * packets carry the 50 MiB depends on load (segment sizes), so the reference is
		 * bytes sent + headers of the packets seen.
		 */
		ok &= check_ratio("net tx (50 MiB, IP+TCP)", (double)u.net_tx_bytes,
				  (double)sent + 52.0 * (double)u.net_tx_packets, 0.01);
		printf("%-28s tx_packets=%" PRIu64 " tx-sent=%" PRId64 " bytes of headers"
		       " (%.1f per packet)\n",
		       "headers", u.net_tx_packets, (int64_t)(u.net_tx_bytes - sent),
		       u.net_tx_packets ? (double)(u.net_tx_bytes - sent) / (double)u.net_tx_packets
					: 0.0);
		ok &= u.net_tx_bytes >= got && u.net_metered;
	}
out:
	r = meter_forget(m, TASK_KEY);
	if (r < 0 || meter_tasks_tracked(m) != 0) {
		fprintf(stderr, "meter_forget: %s\n", strerror(-r));
		ok = false;
	}
	meter_free(m);
	cleanup_cgroups();
	printf("%s: %s\n", cs, ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}
