/* SPDX-License-Identifier: MIT */
/*
 * helper_cgjoin_bench join ROUNDS: a freshly forked child joins memory, cpuacct and freezer
 * (v1) by writing "0" to each hierarchy's tasks file (what the agent's task child does) vs to
 * its cgroup.procs (the baseline), after 50 ms of quiet each round (the first cgroup.procs
 * writer then waits for an RCU grace period). Rounds alternate; prints the median per mode
 * and the ratio.
 */
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tests/bench/bench_stats.h"

static const char *const join_hier[] = {"memory", "cpuacct", "freezer"};
#define N_HIER	   (sizeof(join_hier) / sizeof(join_hier[0]))
#define MAX_ROUNDS 200

static double now_us(void)
{
	return (double)now_ns(CLOCK_MONOTONIC) / 1e3;
}

/* One round: make the cgroups, fork, the child joins through file, returns us (-1: error). */
static double join_round(const char *base, int round, const char *file)
{
	char dir[N_HIER][256], path[320];
	int fds[N_HIER], p[2], st;
	double us = -1;
	pid_t c;

	for (size_t i = 0; i < N_HIER; i++) {
		snprintf(dir[i], sizeof(dir[i]), "/sys/fs/cgroup/%s/%s/r%d", join_hier[i], base,
			 round);
		if (mkdir(dir[i], 0755) < 0 && errno != EEXIST)
			return -1;
		snprintf(path, sizeof(path), "%s/%s", dir[i], file);
		fds[i] = open(path, O_WRONLY | O_CLOEXEC);
		if (fds[i] < 0)
			return -1;
	}
	if (pipe(p) < 0)
		return -1;
	c = fork();
	if (c == 0) {
		double t0 = now_us(), t;

		for (size_t i = 0; i < N_HIER; i++)
			if (write(fds[i], "0", 1) != 1)
				_exit(1);
		t = now_us() - t0;
		_exit(write(p[1], &t, sizeof(t)) == sizeof(t) ? 0 : 1);
	}
	close(p[1]);
	if (c > 0 && read(p[0], &us, sizeof(us)) != sizeof(us))
		us = -1;
	close(p[0]);
	if (c > 0)
		waitpid(c, &st, 0);
	for (size_t i = 0; i < N_HIER; i++) {
		close(fds[i]);
		rmdir(dir[i]);
	}
	return us;
}

static int bench_join(int rounds)
{
	double tasks[MAX_ROUNDS], procs[MAX_ROUNDS];
	char base[64], path[320];
	int r = 0;

	snprintf(base, sizeof(base), "corral-bench-join-%d", (int)getpid());
	for (size_t i = 0; i < N_HIER; i++) {
		snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/tasks", join_hier[i]);
		if (access(path, W_OK) < 0) {
			printf("SKIP: no v1 %s hierarchy (tasks files are v1 only)\n",
			       join_hier[i]);
			return 77;
		}
		snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/%s", join_hier[i], base);
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return 1;
	}
	for (int i = 0; i < rounds && r == 0; i++) {
		usleep(50000);
		tasks[i] = join_round(base, 2 * i, "tasks");
		usleep(50000);
		procs[i] = join_round(base, 2 * i + 1, "cgroup.procs");
		if (tasks[i] < 0 || procs[i] < 0)
			r = 1;
	}
	for (size_t i = 0; i < N_HIER; i++) {
		snprintf(path, sizeof(path), "/sys/fs/cgroup/%s/%s", join_hier[i], base);
		rmdir(path);
	}
	if (r)
		return r;
	double mt = bench_median(tasks, rounds), mp = bench_median(procs, rounds);

	printf("join of %zu v1 hierarchies after 50 ms quiet (%d rounds, median)\n", N_HIER,
	       rounds);
	printf("%-34s %10s %14s %8s\n", "", "tasks (us)", "cgroup.procs", "ratio");
	printf("%-34s %10.1f %14.1f %8.3f\n", "child joins itself", mt, mp, mt / mp);
	return 0;
}

static int rounds_arg(const char *s, int dflt)
{
	int n = atoi(s);

	return n > 0 && n <= MAX_ROUNDS ? n : dflt;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "join"))
		return bench_join(rounds_arg(argv[2], 20));
	fprintf(stderr, "usage: helper_cgjoin_bench join ROUNDS\n");
	return 2;
}
