/* SPDX-License-Identifier: MIT */
/*
 * Cost of the BPF hooks on process and thread lifetimes (tests/bench/metering_overhead.sh).
 *   helper_storm_bench ROUNDS FORKEXEC_ITERS FORKEXIT_ITERS THREAD_ITERS
 * Workloads, each in a child pinned to CPU 0, as fast as they go:
 *   fork+exec: fork, the child execs /bin/true, the parent waits;
 *   fork+exit: fork, the child exits at once, the parent waits;
 *   threads:   pthread_create of a thread that returns at once, pthread_join.
 * Arms, in an order that rotates between rounds: nothing loaded ("off"); the hooks loaded as
 * corrald loads them by default (the meter and the audit trail) with the workload outside any
 * task ("outside"); the same with the workload tracked by both, as a task's processes are
 * ("inside"). Figures: ops per CPU second of the workload's processes (less sensitive to other
 * load on a shared host than wall time) and per wall second; ratios hooks/off per round, medians.
 * Then, with kernel.bpf_stats_enabled, the run time of each program per operation inside a
 * task: where the time goes (METER_BENCH_STATS_REPS repetitions, default 3: the net figure is
 * their median; "NET workload inside ns share%" lines for metering_overhead.sh).
 * METER_BENCH_QUICK=1: the rounds only (the A/B of metering_overhead.sh).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
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
#include "bpf/audit.h"
#include "bpf/meter.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/macro.h"
#include "tests/bench/bench_stats.h"

#define MAX_ROUNDS 32
#define MAX_PROGS  64

enum { WL_FORKEXEC, WL_FORKEXIT, WL_THREADS, WLS };
enum { ARM_OFF, ARM_OUTSIDE, ARM_INSIDE, ARMS };
static const char *const wl_name[WLS] = {"fork+exec", "fork+exit", "thread create+join"};
static const char *const arm_name[ARMS] = {"off", "outside", "inside"};

static void fork_exec(long iters)
{
	static char *const argv[] = {"true", NULL};
	static char *const envp[] = {NULL};

	for (long i = 0; i < iters; i++) {
		pid_t p = fork();

		if (p < 0)
			_exit(1);
		if (p == 0) {
			execve("/bin/true", argv, envp);
			_exit(127);
		}
		if (waitpid(p, NULL, 0) != p)
			_exit(1);
	}
}

static void fork_exit(long iters)
{
	for (long i = 0; i < iters; i++) {
		pid_t p = fork();

		if (p < 0)
			_exit(1);
		if (p == 0)
			_exit(0);
		if (waitpid(p, NULL, 0) != p)
			_exit(1);
	}
}

static void *thread_fn(void *arg)
{
	return arg;
}

static void threads(long iters)
{
	for (long i = 0; i < iters; i++) {
		pthread_t t;

		if (pthread_create(&t, NULL, thread_fn, NULL) || pthread_join(t, NULL))
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

struct hooks {
	struct meter *m;
	struct audit *a;
};

/*
 * Runs one workload in a child pinned to CPU 0, tracked by the hooks when track. ops[0]: ops per
 * wall second, ops[1]: ops per CPU second of the workload's processes. Returns 0 or -1.
 */
static int run(struct hooks *h, bool track, uint64_t key, int wl, long iters, double ops[2])
{
	int go[2], res[2], ret = 0;
	pid_t p;

	if (pipe2(go, O_CLOEXEC) < 0 || pipe2(res, O_CLOEXEC) < 0)
		return -1;
	p = fork();
	if (p < 0)
		return -1;
	if (p == 0) {
		cpu_set_t cpus;
		uint64_t t0;
		double r[2];
		char ch;

		close(go[1]);
		CPU_ZERO(&cpus);
		CPU_SET(0, &cpus);
		sched_setaffinity(0, sizeof(cpus), &cpus);
		if (read(go[0], &ch, 1) != 1)
			_exit(1);
		t0 = now_ns(CLOCK_MONOTONIC);
		if (wl == WL_FORKEXEC)
			fork_exec(iters);
		else if (wl == WL_FORKEXIT)
			fork_exit(iters);
		else
			threads(iters);
		r[0] = (double)iters * 1e9 / (double)(now_ns(CLOCK_MONOTONIC) - t0);
		r[1] = (double)iters / (cpu_s(RUSAGE_SELF) + cpu_s(RUSAGE_CHILDREN));
		if (write(res[1], r, sizeof(r)) != sizeof(r))
			_exit(1);
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	if (track &&
	    (meter_track(h->m, key, p, -1) < 0 || audit_track(h->a, key, p, -1, NULL) < 0)) {
		kill(p, SIGKILL);
		ret = -1;
	}
	if (write(go[1], "x", 1) != 1)
		ret = -1;
	close(go[1]);
	if (read(res[0], ops, 2 * sizeof(double)) != 2 * sizeof(double))
		ret = -1;
	close(res[0]);
	waitpid(p, NULL, 0);
	if (track) {
		meter_forget(h->m, key);
		audit_forget(h->a, key);
	}
	return ret;
}

static void drop_event(const void *ev, void *u)
{
	(void)ev;
	(void)u;
}

static void drain(struct hooks *h)
{
	meter_poll(h->m, (meter_event_fn)drop_event, NULL);
	audit_poll(h->a, (audit_event_fn)drop_event, NULL);
}

static int hooks_open(struct hooks *h)
{
	int r = meter_open(NULL, &h->m);

	if (r < 0)
		return r;
	{
		struct audit_opts o = {0};

#ifdef AUDIT_OPTS_SHARE_MEMBERS
		/* as corrald loads them: the audit trail uses the meter's membership map */
		o.share_members = true;
		o.members_fd = meter_members_fd(h->m);
#endif
		r = audit_open(&o, &h->a);
	}
	if (r < 0) {
		meter_free(h->m);
		h->m = NULL;
	}
	return r;
}

static void hooks_close(struct hooks *h)
{
	audit_free(h->a);
	meter_free(h->m);
	h->a = NULL;
	h->m = NULL;
}

/* Name, run count and run time of every BPF program this process holds an fd of. */
struct prog_stat {
	char name[BPF_OBJ_NAME_LEN];
	uint32_t id;
	uint64_t cnt, ns;
};

static int own_progs(struct prog_stat *ps, int max)
{
	_cleanup_closedir_ DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)) && n < max) {
		struct bpf_prog_info info = {};
		uint32_t len = sizeof(info);
		int fd = atoi(de->d_name);
		_cleanup_free_ char *s = NULL;
		char path[300];
		bool dup = false;

		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", de->d_name);
		if (read_file(path, 65536, &s, NULL) < 0 || !strstr(s, "prog_tag:"))
			continue;
		if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
			continue;
		for (int i = 0; i < n; i++)
			dup |= ps[i].id == info.id;
		if (dup)
			continue;
		snprintf(ps[n].name, sizeof(ps[n].name), "%s", info.name);
		ps[n].id = info.id;
		ps[n].cnt = info.run_cnt;
		ps[n].ns = info.run_time_ns;
		n++;
	}
	return n;
}

/*
 * Run time per operation of each program while each workload runs outside any task and inside
 * one, from the kernel's BPF statistics (they add two clock reads per run), less what the
 * programs ran for the rest of the host in as long a time right after, and its share of
 * the workload's CPU time per operation with nothing loaded (cpu_off: ops per CPU second): a
 * figure that other load on the host disturbs far less than the throughput ratios (it leaves
 * out the dispatch to the programs).
 */
static void where_time_goes(struct hooks *h, const long *iters, const double *cpu_off, int reps)
{
	static const char path[] = "/proc/sys/kernel/bpf_stats_enabled";
	char old = '0';
	int fd;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 || read(fd, &old, 1) != 1 || pwrite(fd, "1", 1, 0) != 1) {
		printf("per-program run time: skipped (%s not writable)\n", path);
		if (fd >= 0)
			close(fd);
		return;
	}
	printf("\nper-program run time per operation (kernel.bpf_stats_enabled; %d repetitions, "
	       "programs summed over them, (net) their median):\n",
	       reps);
	printf("%-20s %-8s %-18s %10s %10s %10s\n", "workload", "task", "program", "runs/op",
	       "ns/run", "ns/op");
	for (int k = 0; k < 2 * WLS; k++) {
		struct prog_stat sum[MAX_PROGS];
		double nets[MAX_ROUNDS], totals[MAX_ROUNDS], bgs[MAX_ROUNDS];
		int nsum = 0, w = k / 2, done = 0;
		bool inside = k % 2;

		for (int rep = 0; rep < reps; rep++) {
			struct prog_stat a[MAX_PROGS], b[MAX_PROGS], c[MAX_PROGS];
			int na, nb, nc;
			double o[2], total = 0, bg = 0;
			uint64_t t0, dt;

			na = own_progs(a, MAX_PROGS);
			t0 = now_ns(CLOCK_MONOTONIC);
			if (run(h, inside, 100 + (uint64_t)w, w, iters[w], o) < 0)
				break;
			dt = now_ns(CLOCK_MONOTONIC) - t0;
			drain(h);
			nb = own_progs(b, MAX_PROGS);
			/* The programs also run for every other process of the host: the same wall
			 * time with the workload asleep gives that background, subtracted. */
			{
				struct timespec ts = {(time_t)(dt / NSEC_PER_SEC),
						      (long)(dt % NSEC_PER_SEC)};

				nanosleep(&ts, NULL);
			}
			nc = own_progs(c, MAX_PROGS);
			for (int j = 0; j < nc; j++)
				for (int i = 0; i < nb; i++)
					if (b[i].id == c[j].id)
						bg += (double)(c[j].ns - b[i].ns);
			bg /= (double)iters[w];
			for (int j = 0; j < nb; j++)
				for (int i = 0; i < na; i++) {
					int q;

					if (a[i].id != b[j].id || b[j].cnt == a[i].cnt)
						continue;
					total += (double)(b[j].ns - a[i].ns) / (double)iters[w];
					for (q = 0; q < nsum && sum[q].id != b[j].id; q++)
						;
					if (q == nsum) {
						if (nsum == MAX_PROGS)
							continue;
						sum[nsum] = b[j];
						sum[nsum].cnt = sum[nsum].ns = 0;
						nsum++;
					}
					sum[q].cnt += b[j].cnt - a[i].cnt;
					sum[q].ns += b[j].ns - a[i].ns;
				}
			totals[done] = total;
			bgs[done] = bg;
			nets[done] = total - bg;
			done++;
		}
		if (!done)
			break;
		for (int q = 0; q < nsum; q++)
			printf("%-20s %-8s %-18s %10.2f %10.0f %10.0f\n", wl_name[w],
			       arm_name[ARM_OUTSIDE + inside], sum[q].name,
			       (double)sum[q].cnt / (double)iters[w] / done,
			       (double)sum[q].ns / (double)sum[q].cnt,
			       (double)sum[q].ns / (double)iters[w] / done);
		printf(
		    "%-20s %-8s %-18s %10s %10s %10.0f  (background of the host at rest: %.0f)\n",
		    wl_name[w], arm_name[ARM_OUTSIDE + inside], "(all)", "", "",
		    bench_median(totals, done), bench_median(bgs, done));
		{
			double net = bench_median(nets, done);

			printf("%-20s %-8s %-18s %10s %10s %10.0f  = %.2f%% of %.0f ns CPU per op "
			       "(off)\n",
			       wl_name[w], arm_name[ARM_OUTSIDE + inside], "(net)", "", "", net,
			       net * cpu_off[w] / 1e9 * 100, 1e9 / cpu_off[w]);
			printf("NET %d %d %.1f %.4f\n", w, inside, net,
			       net * cpu_off[w] / 1e9 * 100);
		}
	}
	(void)!pwrite(fd, &old, 1, 0);
	close(fd);
}

int main(int argc, char **argv)
{
	static double v[WLS][ARMS][2][MAX_ROUNDS], ratio[WLS][2][2][MAX_ROUNDS];
	const bool quick = getenv("METER_BENCH_QUICK") && *getenv("METER_BENCH_QUICK") == '1';
	struct hooks h = {};
	long iters[WLS];
	int rounds, r;

	libbpf_set_print(bpf_print_env);
	if (argc != 5) {
		fprintf(stderr, "usage: helper_storm_bench ROUNDS FORKEXEC FORKEXIT THREADS\n");
		return 2;
	}
	rounds = atoi(argv[1]);
	for (int w = 0; w < WLS; w++)
		iters[w] = atol(argv[2 + w]);
	if (rounds < 1 || rounds > MAX_ROUNDS || iters[0] < 1 || iters[1] < 1 || iters[2] < 1)
		return 2;
	r = hooks_open(&h);
	if (r < 0) {
		printf("SKIP: cannot load the hooks: %s\n", strerror(-r));
		return 77;
	}
	printf("process/thread storms: hooks = meter (%s, accounting at %s) + audit trail (%s)\n",
	       meter_attach_mode(h.m), meter_cpu_accounting(h.m), audit_attach_mode(h.a));
	hooks_close(&h);
	printf("%-6s %-8s %12s %12s %12s %12s %12s %12s\n", "round", "arm", "exec/s", "exec/cpu-s",
	       "exit/s", "exit/cpu-s", "thread/s", "thread/cpu-s");
	for (int rd = 0; rd < rounds; rd++) {
		for (int k = 0; k < ARMS; k++) {
			int arm = (rd + k) % ARMS;
			double o[WLS][2];

			if (arm != ARM_OFF && (r = hooks_open(&h)) < 0) {
				fprintf(stderr, "cannot load the hooks: %s\n", strerror(-r));
				return 1;
			}
			for (int w = 0; w < WLS; w++) {
				if (run(&h, arm == ARM_INSIDE, 1 + (uint64_t)w, w, iters[w], o[w]) <
				    0) {
					fprintf(stderr, "workload failed\n");
					return 1;
				}
				if (arm != ARM_OFF)
					drain(&h);
			}
			if (arm != ARM_OFF)
				hooks_close(&h);
			for (int w = 0; w < WLS; w++)
				for (int c = 0; c < 2; c++)
					v[w][arm][c][rd] = o[w][c];
			printf("%-6d %-8s %12.0f %12.0f %12.0f %12.0f %12.0f %12.0f\n", rd,
			       arm_name[arm], o[0][0], o[0][1], o[1][0], o[1][1], o[2][0], o[2][1]);
		}
		for (int w = 0; w < WLS; w++)
			for (int c = 0; c < 2; c++)
				for (int q = 0; q < 2; q++)
					ratio[w][c][q][rd] =
					    v[w][ARM_OUTSIDE + q][c][rd] / v[w][ARM_OFF][c][rd];
	}
	printf("\nmedians over %d interleaved rounds; ratio = median of the per-round ratios "
	       "hooks/off (1 = no cost)\n",
	       rounds);
	printf("%-20s %-7s %10s %10s %10s %9s %9s %9s %9s\n", "workload", "per", "off", "outside",
	       "inside", "out/off", "in/off", "cost out", "cost in");
	for (int w = 0; w < WLS; w++)
		for (int c = 1; c >= 0; c--) {
			double ro = bench_median(ratio[w][c][0], rounds);
			double ri = bench_median(ratio[w][c][1], rounds);

			printf("%-20s %-7s %10.0f %10.0f %10.0f %9.4f %9.4f %8.2f%% %8.2f%%\n",
			       wl_name[w], c ? "cpu-s" : "wall-s",
			       bench_median(v[w][ARM_OFF][c], rounds),
			       bench_median(v[w][ARM_OUTSIDE][c], rounds),
			       bench_median(v[w][ARM_INSIDE][c], rounds), ro, ri, (1 - ro) * 100,
			       (1 - ri) * 100);
		}
	/* Machine-readable lines for metering_overhead.sh's A/B against another build. */
	for (int w = 0; w < WLS; w++)
		for (int c = 0; c < 2; c++)
			for (int arm = 0; arm < ARMS; arm++)
				for (int rd = 0; rd < rounds; rd++)
					printf("STORM %d %d %d %.3f\n", w, c, arm,
					       v[w][arm][c][rd]);
	if (quick)
		return 0;
	if (hooks_open(&h) < 0)
		return 1;
	{
		double off[WLS];

		for (int w = 0; w < WLS; w++)
			off[w] = bench_median(v[w][ARM_OFF][1], rounds);
		const char *e = getenv("METER_BENCH_STATS_REPS");
		int reps = e ? atoi(e) : 3;

		if (reps < 1 || reps > MAX_ROUNDS)
			reps = 3;
		where_time_goes(&h, iters, off, reps);
	}
	hooks_close(&h);
	return 0;
}
