/* SPDX-License-Identifier: MIT */
/*
 * Overhead of the metering programs (tests/bench/metering_overhead.sh).
 *   helper_meter_bench ROUNDS PINGPONG_ITERS WRITE_ITERS IDLE_TASKS
 * Each round runs both workloads in four arms, in an order that rotates between rounds:
 * nothing loaded; an empty sched_switch program attached (bpf/switch_floor.bpf.c: what any
 * program on that tracepoint costs); the metering programs as corrald loads them by default
 * (CPU and IO accounted at exit where the kernel allows it), attached and the workload
 * tracked; the same with accounting at every sched_switch (meter_opts.cpu_at_switch).
 * Workloads:
 *   sched: two processes ping-pong one byte over two pipes (like `perf bench sched pipe`);
 *   syscall: one process write(2)s one byte to /dev/null WRITE_ITERS times;
 *   exit: one process forks children that exit at once, 10,000 a second (METER_BENCH_EXITS
 *   of them, default 15,000): the cost per process exit.
 * METER_BENCH_QUICK=1: the rounds only (the A/B of metering_overhead.sh).
 * Prints ops/s per round, the medians and the ratios metering/off, switch/off, empty/off and
 * switch/empty. Then the average run time per switch of the switch-mode and the empty program
 * from the kernel's BPF statistics, and finally tracks IDLE_TASKS sleeping processes and
 * reports the loader's RSS, BPF map memory and the cost of reading all of them (one
 * meter_read each, as the agent's sample tick does).
 */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/print.h"
#include "bpf/meter.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "tests/bench/bench_stats.h"
#include "switch_floor.skel.h"

#define MAX_ROUNDS 32

static void pingpong(long iters)
{
	int a[2], b[2];
	char c = 0;
	pid_t p;

	if (pipe2(a, O_CLOEXEC) < 0 || pipe2(b, O_CLOEXEC) < 0)
		_exit(1);
	p = fork();
	if (p < 0)
		_exit(1);
	if (p == 0) {
		for (long i = 0; i < iters; i++)
			if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	for (long i = 0; i < iters; i++)
		if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1)
			_exit(1);
	waitpid(p, NULL, 0);
}

static void writes(long iters)
{
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	char c = 0;

	if (fd < 0)
		_exit(1);
	for (long i = 0; i < iters; i++)
		if (write(fd, &c, 1) != 1)
			_exit(1);
}

/*
 * EXIT_RATE processes a second fork and exit at once (the parent paces itself, waiting for each
 * child), iters of them: the cost of the exit programs per process exit at that rate.
 */
#define EXIT_RATE 10000
static void exits(long iters)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);

	for (long i = 0; i < iters; i++) {
		uint64_t due = t0 + (uint64_t)i * (NSEC_PER_SEC / EXIT_RATE), now;
		pid_t p;

		while ((now = now_ns(CLOCK_MONOTONIC)) < due) {
			struct timespec ts = {0, (long)(due - now)};

			nanosleep(&ts, NULL);
		}
		p = fork();
		if (p < 0)
			_exit(1);
		if (p == 0)
			_exit(0);
		if (waitpid(p, NULL, 0) != p)
			_exit(1);
	}
}

static double cpu_s(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/*
 * Runs one workload in a child pinned to CPU 0 (tracked when m). ops[0]: ops per wall second,
 * ops[1]: ops per CPU second of the workload's processes (less sensitive to other load on a
 * shared host). Returns 0 or -1.
 */
enum { WL_SCHED, WL_WRITE, WL_EXIT, WLS };
static int run(struct meter *m, uint64_t key, int wl, long iters, double ops[2])
{
	int go[2], res[2], st, ret = 0;
	cpu_set_t cpus;
	pid_t p;

	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(res, O_CLOEXEC) < 0)
		return -1;
	p = fork();
	if (p < 0)
		return -1;
	if (p == 0) {
		char ch;
		uint64_t t0;
		double r[2];

		close(go[1]);
		/* Both ping-pong processes on one CPU: every round trip is two context switches. */
		CPU_ZERO(&cpus);
		CPU_SET(0, &cpus);
		sched_setaffinity(0, sizeof(cpus), &cpus);
		if (read(go[0], &ch, 1) != 1)
			_exit(1);
		t0 = now_ns(CLOCK_MONOTONIC);
		if (wl == WL_SCHED)
			pingpong(iters);
		else if (wl == WL_WRITE)
			writes(iters);
		else
			exits(iters);
		r[0] = (double)iters * 1e9 / (double)(now_ns(CLOCK_MONOTONIC) - t0);
		r[1] = (double)iters / (cpu_s(RUSAGE_SELF) + cpu_s(RUSAGE_CHILDREN));
		if (write(res[1], r, sizeof(r)) != sizeof(r))
			_exit(1);
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	if (m && meter_track(m, key, p, -1) < 0) {
		kill(p, SIGKILL);
		ret = -1;
	}
	if (write(go[1], "x", 1) != 1)
		ret = -1;
	close(go[1]);
	if (read(res[0], ops, 2 * sizeof(double)) != 2 * sizeof(double))
		ret = -1;
	close(res[0]);
	waitpid(p, &st, 0);
	if (m)
		meter_forget(m, key);
	return ret;
}

static long status_kib(const char *field)
{
	_cleanup_free_ char *s = NULL;
	const char *p;

	if (read_file("/proc/self/status", 65536, &s, NULL) < 0 || !(p = strstr(s, field)))
		return -1;
	return atol(p + strlen(field));
}

/* Sum of memlock of this process's BPF maps (from /proc/self/fdinfo). */
static long long bpf_map_memlock(void)
{
	_cleanup_closedir_ DIR *d = opendir("/proc/self/fdinfo");
	struct dirent *de;
	long long total = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char path[300];
		_cleanup_free_ char *s = NULL;
		const char *p;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", de->d_name);
		if (read_file(path, 65536, &s, NULL) < 0 || !strstr(s, "map_type:"))
			continue;
		p = strstr(s, "memlock:");
		if (p)
			total += atoll(p + 8);
	}
	return total;
}

static int idle_tasks(int n)
{
	struct meter_opts o = {.max_tasks = 1024};
	struct meter *m = NULL;
	pid_t *pids = calloc((size_t)n, sizeof(pid_t));
	int hold[2], r, ok = 0;
	long rss0, rss1;
	struct rusage ru0, ru1;
	uint64_t t0, dt;

	if (!pids || pipe2(hold, O_CLOEXEC) < 0)
		return 1;
	rss0 = status_kib("VmRSS:");
	r = meter_open(&o, &m);
	if (r < 0)
		return 1;
	for (int i = 0; i < n; i++) {
		char c;

		pids[i] = fork();
		if (pids[i] == 0) {
			close(hold[1]);
			(void)!read(hold[0], &c, 1); /* sleeps until the pipe closes */
			_exit(0);
		}
		if (pids[i] < 0 || meter_track(m, 1000 + (uint64_t)i, pids[i], -1) < 0)
			goto out;
	}
	rss1 = status_kib("VmRSS:");
	getrusage(RUSAGE_SELF, &ru0);
	t0 = now_ns(CLOCK_MONOTONIC);
	for (int round = 0; round < 10; round++)
		for (int i = 0; i < n; i++) {
			struct meter_usage u;

			if (meter_read(m, 1000 + (uint64_t)i, &u) < 0)
				goto out;
		}
	dt = now_ns(CLOCK_MONOTONIC) - t0;
	getrusage(RUSAGE_SELF, &ru1);
	printf("idle tasks tracked:        %u\n", meter_tasks_tracked(m));
	printf("loader RSS:                %ld KiB (before meter_open %ld KiB)\n", rss1, rss0);
	printf("BPF map memory (memlock):  %lld KiB (max_tasks 1024, max_pids 65536)\n",
	       bpf_map_memlock() / 1024);
	printf("meter_read sweep of %d:   %.1f us per sweep (%.2f us per task), cpu %.1f ms for 10 "
	       "sweeps\n",
	       n, (double)dt / 10 / 1000, (double)dt / 10 / 1000 / n,
	       ((double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) * 1e3 +
		(double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e3 +
		(double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1e3 +
		(double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e3));
	printf("at a 30 s sample interval: %.4f%% of one CPU\n", (double)dt / 10 / 30e9 * 100);
	ok = 1;
out:
	close(hold[1]);
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			waitpid(pids[i], NULL, 0);
	meter_free(m);
	free(pids);
	return ok ? 0 : 1;
}

/* The empty sched_switch program (bpf/switch_floor.bpf.c), tp_btf or raw_tp like the meter. */
static struct switch_floor_bpf *floor_open(bool btf)
{
	struct switch_floor_bpf *s = switch_floor_bpf__open();

	if (!s)
		return NULL;
	bpf_program__set_autoload(s->progs.floor_btf_switch, btf);
	bpf_program__set_autoload(s->progs.floor_raw_switch, !btf);
	if (switch_floor_bpf__load(s)) {
		switch_floor_bpf__destroy(s);
		return NULL;
	}
	return s;
}

static struct bpf_program *floor_prog(struct switch_floor_bpf *s, bool btf)
{
	return btf ? s->progs.floor_btf_switch : s->progs.floor_raw_switch;
}

static int prog_stats(const struct bpf_program *p, uint64_t *runs, uint64_t *ns)
{
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);

	if (bpf_obj_get_info_by_fd(bpf_program__fd(p), &info, &len) < 0)
		return -1;
	*runs = info.run_cnt;
	*ns = info.run_time_ns;
	return 0;
}

/*
 * Average run time of the sched_switch program of each arm (the metering programs, the empty
 * one) during the ping-pong, from the kernel's BPF statistics (sysctl kernel.bpf_stats_enabled,
 * switched on for this part only: they add two clock reads per run, the same for both). The
 * difference is the metering program's own work per switch, a figure that other load on the
 * host disturbs far less than the throughput ratio.
 */
static void stats_phase(struct switch_floor_bpf *fl, bool btf, long iters)
{
	static const char path[] = "/proc/sys/kernel/bpf_stats_enabled";
	double ns[2][MAX_ROUNDS];
	char old = '0';
	int fd, n = 0;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 || read(fd, &old, 1) != 1 || pwrite(fd, "1", 1, 0) != 1) {
		printf("per-switch program time: skipped (%s not writable)\n\n", path);
		if (fd >= 0)
			close(fd);
		return;
	}
	for (int i = 0; i < 10; i++) {
		bool corral = i % 2 == 0;
		struct meter *m = NULL;
		struct bpf_link *l = NULL;
		const struct bpf_program *p;
		uint64_t r0, t0, r1, t1;
		double o[2];

		if (corral) {
			struct meter_opts so = {.cpu_at_switch = true};

			if (meter_open(&so, &m) < 0)
				break;
		} else if (!(l = bpf_program__attach(floor_prog(fl, btf)))) {
			break;
		}
		p = floor_prog(fl, btf);
		if (corral ? meter_switch_stats(m, &r0, &t0) : prog_stats(p, &r0, &t0))
			r0 = t0 = 0;
		if (run(m, 1, WL_SCHED, iters, o) < 0 ||
		    (corral ? meter_switch_stats(m, &r1, &t1) : prog_stats(p, &r1, &t1)) ||
		    r1 <= r0) {
			meter_free(m);
			bpf_link__destroy(l);
			break;
		}
		ns[!corral][i / 2] = (double)(t1 - t0) / (double)(r1 - r0);
		meter_free(m);
		bpf_link__destroy(l);
		if (!corral)
			n++;
	}
	(void)!pwrite(fd, &old, 1, 0);
	close(fd);
	if (n == 0) {
		printf("per-switch program time: failed\n\n");
		return;
	}
	double c = bench_median(ns[0], n), f = bench_median(ns[1], n);

	printf("per-switch program time (kernel.bpf_stats_enabled, median of %d interleaved "
	       "ping-pongs):\n",
	       n);
	printf("  sched_switch program of accounting at every switch %.1f ns/run, empty program "
	       "%.1f ns/run: %.1f ns of metering work per switch (ratio %.3f)\n\n",
	       c, f, c - f, c / f);
}

/* Run time (BPF statistics) of every BPF program this process holds an fd of. */
static uint64_t own_prog_ns(void)
{
	_cleanup_closedir_ DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	uint64_t total = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		struct bpf_prog_info info = {};
		uint32_t len = sizeof(info);
		int fd = atoi(de->d_name);
		_cleanup_free_ char *s = NULL;
		char path[300];

		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", de->d_name);
		if (read_file(path, 65536, &s, NULL) < 0 || !strstr(s, "prog_tag:"))
			continue; /* not a program */
		if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
			total += info.run_time_ns;
	}
	return total;
}

/*
 * BPF time per process exit: the run time of all metering programs (fork, exit, and whatever
 * they call) while the exit workload runs tracked at 10,000 exits/s, divided by the exits;
 * median of 3 runs, with accounting at exit (the default). A count of the programs' own work,
 * which other load on the host disturbs far less than the CPU-time ratio.
 */
static double exit_phase(long iters)
{
	static const char path[] = "/proc/sys/kernel/bpf_stats_enabled";
	double ns[3];
	char old = '0';
	int fd, n = 0;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 || read(fd, &old, 1) != 1 || pwrite(fd, "1", 1, 0) != 1) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (int i = 0; i < 3; i++) {
		struct meter *m = NULL;
		uint64_t t0, t1;
		double o[2];

		if (meter_open(NULL, &m) < 0)
			break;
		t0 = own_prog_ns();
		if (run(m, 9, WL_EXIT, iters, o) < 0) {
			meter_free(m);
			break;
		}
		t1 = own_prog_ns();
		meter_free(m);
		ns[n++] = (double)(t1 - t0) / (double)iters;
	}
	(void)!pwrite(fd, &old, 1, 0);
	close(fd);
	return n ? bench_median(ns, n) : -1;
}

enum { ARM_OFF, ARM_FLOOR, ARM_METER, ARM_SWITCH, ARMS };
#define NRATIOS 4

int main(int argc, char **argv)
{
	/* [workload][arm][wall/cpu][round] */
	static double v[WLS][ARMS][2][MAX_ROUNDS], ratio[NRATIOS][WLS][2][MAX_ROUNDS];
	static const char *const wl[WLS] = {"sched pipe ping-pong", "1-byte write /dev/null",
					    "fork+exit, 10k/s"};
	const bool quick = getenv("METER_BENCH_QUICK") && *getenv("METER_BENCH_QUICK") == '1';
	static const char *const rname[NRATIOS] = {"metering/off", "switch/off", "empty/off",
						   "switch/empty"};
	const char *acct = "?";
	struct switch_floor_bpf *fl;
	const char *mode = "?";
	int rounds, nidle;
	long iters[WLS];
	bool btf;

	libbpf_set_print(bpf_print_env);
	if (argc != 5) {
		fprintf(stderr,
			"usage: helper_meter_bench ROUNDS PINGPONG_ITERS WRITE_ITERS IDLE\n");
		return 2;
	}
	rounds = atoi(argv[1]);
	iters[0] = atol(argv[2]);
	iters[1] = atol(argv[3]);
	/* 1.5 s of exits at 10k/s (METER_BENCH_EXITS) */
	iters[2] = getenv("METER_BENCH_EXITS") ? atol(getenv("METER_BENCH_EXITS")) : 15000;
	nidle = atoi(argv[4]);
	if (rounds < 1 || rounds > MAX_ROUNDS || iters[0] < 1 || iters[1] < 1 || iters[2] < 1 ||
	    nidle < 0 || nidle > 4000)
		return 2;
	{
		struct meter *m = NULL;
		int e = meter_open(NULL, &m);

		if (e < 0) {
			printf("SKIP: cannot load the metering programs: %s\n", strerror(-e));
			return 77;
		}
		mode = meter_attach_mode(m);
		acct = meter_cpu_accounting(m);
		btf = strcmp(mode, "tp_btf") == 0;
		meter_free(m);
	}
	fl = floor_open(btf);
	if (!fl) {
		fprintf(stderr, "cannot load the empty sched_switch program\n");
		return 1;
	}

	/*
	 * Three arms per round, in an order that rotates from round to round: nothing attached,
	 * the empty sched_switch program (the floor: what any program there costs), the
	 * metering programs with the workload tracked.
	 */
	printf("%-6s %-8s %14s %14s %14s %14s %14s %14s\n", "round", "programs", "sched/s",
	       "sched/cpu-s", "write/s", "write/cpu-s", "exit/s", "exit/cpu-s");
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < ARMS; k++) {
			int arm = (r + k) % ARMS;
			struct meter *m = NULL;
			struct bpf_link *l = NULL;
			double o[WLS][2];

			if (arm == ARM_METER || arm == ARM_SWITCH) {
				struct meter_opts so = {.cpu_at_switch = arm == ARM_SWITCH};
				int e = meter_open(&so, &m);

				if (e < 0) {
					fprintf(stderr, "meter_open: %s\n", strerror(-e));
					return 1;
				}
			} else if (arm == ARM_FLOOR &&
				   !(l = bpf_program__attach(floor_prog(fl, btf)))) {
				fprintf(stderr, "cannot attach the empty sched_switch program\n");
				return 1;
			}
			for (int w = 0; w < WLS; w++)
				if (run(m, 1 + (uint64_t)w, w, iters[w], o[w]) < 0) {
					fprintf(stderr, "workload failed\n");
					meter_free(m);
					bpf_link__destroy(l);
					return 1;
				}
			meter_free(m);
			bpf_link__destroy(l);
			for (int w = 0; w < WLS; w++)
				for (int c = 0; c < 2; c++)
					v[w][arm][c][r] = o[w][c];
			printf("%-6d %-8s %14.0f %14.0f %14.0f %14.0f %14.0f %14.0f\n", r,
			       arm == ARM_METER	   ? acct
			       : arm == ARM_SWITCH ? "switch"
			       : arm == ARM_FLOOR  ? "empty"
						   : "off",
			       o[0][0], o[0][1], o[1][0], o[1][1], o[2][0], o[2][1]);
		}
		for (int w = 0; w < WLS; w++)
			for (int c = 0; c < 2; c++) {
				ratio[0][w][c][r] = v[w][ARM_METER][c][r] / v[w][ARM_OFF][c][r];
				ratio[1][w][c][r] = v[w][ARM_SWITCH][c][r] / v[w][ARM_OFF][c][r];
				ratio[2][w][c][r] = v[w][ARM_FLOOR][c][r] / v[w][ARM_OFF][c][r];
				ratio[3][w][c][r] = v[w][ARM_SWITCH][c][r] / v[w][ARM_FLOOR][c][r];
			}
	}
	printf("\nmedians over %d interleaved rounds; ratio = median of the per-round ratios\n",
	       rounds);
	printf("%-24s %-7s %10s %10s %10s %10s  %-14s %9s %9s\n", "workload", "per", "off", "empty",
	       "switch", "metering", "ratio", "", "overhead");
	for (int w = 0; w < WLS; w++)
		for (int c = 0; c < 2; c++)
			for (int q = 0; q < NRATIOS; q++) {
				double x = bench_median(ratio[q][w][c], rounds);

				if (q == 0)
					printf("%-24s %-7s %10.0f %10.0f %10.0f %10.0f", wl[w],
					       c ? "cpu-s" : "wall-s",
					       bench_median(v[w][ARM_OFF][c], rounds),
					       bench_median(v[w][ARM_FLOOR][c], rounds),
					       bench_median(v[w][ARM_SWITCH][c], rounds),
					       bench_median(v[w][ARM_METER][c], rounds));
				else
					printf("%-24s %-7s %10s %10s %10s %10s", "", "", "", "", "",
					       "");
				printf("  %-14s %9.4f %8.2f%%\n", rname[q], x, (1 - x) * 100);
			}
	printf("attach mode: %s; metering = CPU and IO accounted at %s (corrald's default), switch "
	       "= at every sched_switch\n",
	       mode, acct);
	/* CPU per exit (the forking parent and its children, exit programs included). */
	{
		double off = bench_median(v[WL_EXIT][ARM_OFF][1], rounds);
		double met = bench_median(v[WL_EXIT][ARM_METER][1], rounds);
		double sw = bench_median(v[WL_EXIT][ARM_SWITCH][1], rounds);

		printf("cost per process exit at %d exits/s (CPU of fork+exit+wait, medians): off "
		       "%.2f us, %s %.2f us (+%.2f us), switch %.2f us (+%.2f us)\n",
		       EXIT_RATE, 1e6 / off, acct, 1e6 / met, 1e6 / met - 1e6 / off, 1e6 / sw,
		       1e6 / sw - 1e6 / off);
	}
	{
		double e = exit_phase(iters[WL_EXIT]);

		if (e >= 0)
			printf("BPF run time per process exit at %d exits/s "
			       "(kernel.bpf_stats_enabled, "
			       "all metering programs, median of 3): %.0f ns\n",
			       EXIT_RATE, e);
		printf("RESULT_EXIT_NS %.1f\n", e);
	}
	/* Machine-readable lines for metering_overhead.sh's A/B against another build. */
	for (int w = 0; w < WLS; w++)
		for (int c = 0; c < 2; c++)
			for (int arm = 0; arm < ARMS; arm++)
				for (int r = 0; r < rounds; r++)
					printf("RESULT %d %d %d %.3f\n", w, c, arm,
					       v[w][arm][c][r]);
	printf("\n");
	if (quick) {
		switch_floor_bpf__destroy(fl);
		return 0;
	}
	stats_phase(fl, btf, iters[0] / 2);
	switch_floor_bpf__destroy(fl);
	return nidle ? idle_tasks(nidle) : 0;
}
