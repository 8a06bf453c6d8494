/* SPDX-License-Identifier: MIT */
/*
 * Overhead of the metering programs (tests/bench/metering_overhead.sh).
 *   helper_meter_bench ROUNDS PINGPONG_ITERS WRITE_ITERS IDLE_TASKS
 * Each round runs both workloads without the programs (nothing loaded) and with them loaded,
 * attached and the workload tracked; the order alternates between rounds. Workloads:
 *   sched: two processes ping-pong one byte over two pipes (like `perf bench sched pipe`);
 *   syscall: one process write(2)s one byte to /dev/null WRITE_ITERS times.
 * Prints ops/s per round, the medians and the ratio with/without. Then tracks IDLE_TASKS
 * sleeping processes and reports the loader's RSS, BPF map memory and the cost of reading all
 * of them (one meter_read each, as the agent's sample tick does).
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

#include "bpf/meter.h"
#include "common/macro.h"
#include "common/util.h"
#include "tests/bench/bench_stats.h"

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
static int run(struct meter *m, uint64_t key, bool sched, long iters, double ops[2])
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
		if (sched)
			pingpong(iters);
		else
			writes(iters);
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

int main(int argc, char **argv)
{
	/* [workload][off/on][wall/cpu][round] */
	static double v[2][2][2][MAX_ROUNDS], ratio[2][2][MAX_ROUNDS];
	const char *wl[2] = {"sched pipe ping-pong", "1-byte write /dev/null"};
	const char *mode = "?";
	int rounds, nidle;
	long iters[2];

	if (argc != 5) {
		fprintf(stderr,
			"usage: helper_meter_bench ROUNDS PINGPONG_ITERS WRITE_ITERS IDLE\n");
		return 2;
	}
	rounds = atoi(argv[1]);
	iters[0] = atol(argv[2]);
	iters[1] = atol(argv[3]);
	nidle = atoi(argv[4]);
	if (rounds < 1 || rounds > MAX_ROUNDS || iters[0] < 1 || iters[1] < 1 || nidle < 0 ||
	    nidle > 4000)
		return 2;

	printf("%-6s %-8s %14s %14s %14s %14s\n", "round", "programs", "sched/s", "sched/cpu-s",
	       "write/s", "write/cpu-s");
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < 2; k++) {
			int on = (k == 0) == (r % 2 == 1);
			struct meter *m = NULL;
			double o[2][2];

			if (on) {
				int e = meter_open(NULL, &m);

				if (e < 0) {
					printf("SKIP: cannot load the metering programs: %s\n",
					       strerror(-e));
					return 77;
				}
				mode = meter_attach_mode(m);
			}
			for (int w = 0; w < 2; w++)
				if (run(m, 1 + (uint64_t)w, w == 0, iters[w], o[w]) < 0) {
					fprintf(stderr, "workload failed\n");
					meter_free(m);
					return 1;
				}
			meter_free(m);
			for (int w = 0; w < 2; w++)
				for (int c = 0; c < 2; c++)
					v[w][on][c][r] = o[w][c];
			printf("%-6d %-8s %14.0f %14.0f %14.0f %14.0f\n", r, on ? mode : "off",
			       o[0][0], o[0][1], o[1][0], o[1][1]);
		}
		for (int w = 0; w < 2; w++)
			for (int c = 0; c < 2; c++)
				ratio[w][c][r] = v[w][1][c][r] / v[w][0][c][r];
	}
	printf("\nmedians over %d interleaved rounds; ratio = median of per-round with/without\n",
	       rounds);
	printf("%-24s %-7s %12s %12s %9s %9s\n", "workload", "per", "without", "with", "ratio",
	       "overhead");
	for (int w = 0; w < 2; w++)
		for (int c = 0; c < 2; c++) {
			double off = bench_median(v[w][0][c], rounds),
			       on = bench_median(v[w][1][c], rounds);
			double q = bench_median(ratio[w][c], rounds);

			printf("%-24s %-7s %12.0f %12.0f %9.4f %8.2f%%\n", wl[w],
			       c ? "cpu-s" : "wall-s", off, on, q, (1 - q) * 100);
		}
	printf("attach mode: %s\n\n", mode);
	return nidle ? idle_tasks(nidle) : 0;
}
