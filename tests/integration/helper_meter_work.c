/* SPDX-License-Identifier: MIT */
/*
 * Workloads for tests/integration/metering_accuracy.sh (exec'd by helper_meter inside the
 * task's cgroups). Depends on libc only, so that its own RSS is tiny next to what it measures.
 *   burn THREADS SECONDS   each thread burns SECONDS of its own CPU time
 *   touch MIB              allocates and touches MIB of anonymous memory, then exits
 *   touchexec MIB          the same, then execs /bin/sleep 2 (the touched pages go with exec)
 *   memswap ROUNDS MIB     per round, two children on this CPU touch MIB of anonymous memory
 *                          each, 32 pages in turn, still for 5 ms after each turn, and exit;
 *                          the next round's children are fresh mms
 *   write MIB              write(2)s MIB to /dev/null in 64 KiB chunks
 *   send MIB PORT          sends MIB over TCP to 127.0.0.1:PORT
 *   forkburn N MS          forks N children, each burns MS ms of CPU; waits for all
 *   spawn N                runs /bin/true N times, one after the other (fork, exec, wait)
 *   threads N US           N short threads, 8 at a time, each burns US us of CPU
 *   forkstorm W SECONDS    W workers fork children that exit at once, for SECONDS
 *   memfork ROUNDS N       touches 2 MiB of anonymous memory, then per round forks N children
 *                          one after the other, each waited for: every other one touches 64
 *                          pages of its own and exits, the rest exit at once; still for 30 ms
 *                          before and after each round
 *   memorphan ROUNDS       forks a child and exits once the child has run one round; the child,
 *                          reparented, touches 64 pages of its own per round, still for 30 ms
 *                          before each round and after the last, and exits
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile unsigned long sink;

static void burn(double seconds)
{
	double start = thread_cpu_s();
	unsigned long x = 1;

	while (thread_cpu_s() - start < seconds)
		for (int i = 0; i < 10000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}

static void *burn_thread(void *arg)
{
	burn(*(double *)arg);
	return NULL;
}

static int do_burn(int threads, double seconds)
{
	pthread_t t[64];

	if (threads < 1 || threads > 64)
		return 2;
	for (int i = 1; i < threads; i++)
		if (pthread_create(&t[i], NULL, burn_thread, &seconds))
			return 1;
	burn(seconds);
	for (int i = 1; i < threads; i++)
		pthread_join(t[i], NULL);
	return 0;
}

static int do_touch(long mib)
{
	size_t len = (size_t)mib << 20;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return 1;
	for (size_t off = 0; off < len; off += 4096)
		p[off] = 1;
	return 0;
}

/* Touch the 32 pages (128 KiB) number i of p: one fold of an rss counter's per-CPU part. */
static void touch_step(char *p, long i)
{
	for (size_t off = 0; off < 32 * 4096; off += 4096)
		p[(size_t)i * 32 * 4096 + off] = 1;
}

/*
 * One of memswap's two children: touches 32 pages after 32 pages of its own, each time its
 * turn comes (a byte on in), waits 5 ms (both are still then: helper_meter compares the
 * counters), then passes the turn (out).
 */
static void swap_child(long mib, int in, int out, bool second)
{
	char *q = mmap(NULL, (size_t)mib << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	long steps = mib * 8;
	char c = 0;

	if (q == MAP_FAILED)
		_exit(1);
	for (long i = 0; i < steps; i++) {
		if ((i || second) && read(in, &c, 1) != 1)
			_exit(1);
		touch_step(q, i);
		usleep(5000);
		if ((i + 1 < steps || !second) && write(out, &c, 1) != 1)
			_exit(1);
	}
	_exit(0);
}

/*
 * Two address spaces whose counters climb through the same values by turns on one CPU: two
 * children forked together (the same counters from their parent's copy) touch 32 pages each
 * in turn (one fold of the counter's per-CPU part), so each one's counter reaches at its turn
 * the value the other's reached at the turn before; and each round's children are fresh mms that
 * often get the addresses of the last round's. A per-CPU note of an mm's last values taken for
 * another mm's would skip the change that reaches the same value.
 */
static int do_memswap(int rounds, long mib)
{
	int cpu = sched_getcpu();
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(cpu < 0 ? 0 : cpu, &one);
	if (sched_setaffinity(0, sizeof(one), &one))
		return 1;
	for (int r = 0; r < rounds; r++) {
		int ab[2], ba[2], st = 0, rc = 0;
		pid_t pid[2];

		if (pipe(ab) || pipe(ba))
			return 1;
		for (int k = 0; k < 2; k++) {
			pid[k] = fork();
			if (pid[k] < 0)
				return 1;
			if (pid[k] == 0)
				swap_child(mib, k ? ab[0] : ba[0], k ? ba[1] : ab[1], k);
		}
		close(ab[0]);
		close(ab[1]);
		close(ba[0]);
		close(ba[1]);
		for (int k = 0; k < 2; k++)
			if (waitpid(pid[k], &st, 0) != pid[k] || !WIFEXITED(st) ||
			    WEXITSTATUS(st) != 0)
				rc = 1;
		if (rc)
			return 1;
	}
	return 0;
}

static int do_write(long mib)
{
	static char buf[65536];
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	long total = mib << 20;

	if (fd < 0)
		return 1;
	while (total > 0) {
		ssize_t n = write(fd, buf, total < (long)sizeof(buf) ? (size_t)total : sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 1;
		total -= n;
	}
	close(fd);
	return 0;
}

static int do_send(long mib, int port)
{
	static char buf[65536];
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	long total = mib << 20;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return 1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return 1;
	while (total > 0) {
		ssize_t n =
		    send(fd, buf, total < (long)sizeof(buf) ? (size_t)total : sizeof(buf), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 1;
		total -= n;
	}
	shutdown(fd, SHUT_WR);
	/* Wait for the peer's EOF so that every segment has left before we exit. */
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	/*
	 * The kernel's own count of payload bytes put on the wire, retransmissions included
	 * (a loaded host retransmits even on loopback): the reference for the tx check.
	 */
	if (getenv("CORRAL_SENT_FILE")) {
		struct tcp_info ti = {0};
		socklen_t len = sizeof(ti);
		FILE *f;

		if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
		    len >=
			offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof(ti.tcpi_bytes_sent) &&
		    (f = fopen(getenv("CORRAL_SENT_FILE"), "we"))) {
			fprintf(f, "%llu\n", (unsigned long long)ti.tcpi_bytes_sent);
			fclose(f);
		}
	}
	close(fd);
	return 0;
}

static int do_forkburn(int n, long ms)
{
	int rc = 0;

	for (int i = 0; i < n; i++) {
		pid_t p = fork();

		if (p < 0)
			return 1;
		if (p == 0) {
			burn((double)ms / 1000.0);
			_exit(0);
		}
	}
	for (int i = 0; i < n; i++) {
		int st;

		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			rc = 1;
	}
	return rc;
}

static int do_spawn(int n)
{
	for (int i = 0; i < n; i++) {
		pid_t p = fork();
		int st;

		if (p < 0)
			return 1;
		if (p == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
			return 1;
	}
	return 0;
}

static int do_threads(int n, long us)
{
	double s = (double)us / 1e6;

	for (int i = 0; i < n; i += 8) {
		pthread_t t[8];
		int k = n - i < 8 ? n - i : 8;

		for (int j = 0; j < k; j++)
			if (pthread_create(&t[j], NULL, burn_thread, &s))
				return 1;
		for (int j = 0; j < k; j++)
			pthread_join(t[j], NULL);
	}
	return 0;
}

static int do_forkstorm(int workers, double seconds)
{
	int rc = 0;

	for (int w = 0; w < workers; w++) {
		pid_t p = fork();

		if (p < 0)
			return 1;
		if (p == 0) {
			struct timespec t0, t;

			clock_gettime(CLOCK_MONOTONIC, &t0);
			do {
				pid_t c = fork();

				if (c < 0)
					_exit(1);
				if (c == 0)
					_exit(0);
				if (waitpid(c, NULL, 0) != c)
					_exit(1);
				clock_gettime(CLOCK_MONOTONIC, &t);
			} while ((double)(t.tv_sec - t0.tv_sec) +
				     (double)(t.tv_nsec - t0.tv_nsec) / 1e9 <
				 seconds);
			_exit(0);
		}
	}
	for (int w = 0; w < workers; w++) {
		int st;

		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			rc = 1;
	}
	return rc;
}

static int do_memfork(int rounds, int n)
{
	const size_t own = 64 * 4096;
	char *q = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (q == MAP_FAILED)
		return 1;
	memset(q, 1, 2 << 20);
	for (int r = 0; r < rounds; r++) {
		usleep(30000);
		for (int i = 0; i < n; i++) {
			pid_t c = fork();

			if (c < 0)
				return 1;
			if (c == 0) {
				char *m = i % 2 ? mmap(NULL, own, PROT_READ | PROT_WRITE,
						       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
						: NULL;

				if (m == MAP_FAILED)
					_exit(1);
				for (size_t o = 0; m && o < own; o += 4096)
					m[o] = 1;
				_exit(0);
			}
			if (waitpid(c, NULL, 0) != c)
				return 1;
		}
	}
	usleep(30000);
	return 0;
}

static int do_memorphan(int rounds)
{
	const size_t own = 64 * 4096;
	pid_t parent = getpid(), kid;
	int p[2];
	char c;

	if (pipe(p) < 0)
		return 1;
	kid = fork();
	if (kid < 0)
		return 1;
	if (kid > 0) {
		close(p[1]);
		return read(p[0], &c, 1) == 1 ? 0 : 1;
	}
	close(p[0]);
	/* round 0 while the parent lives: the code of a round faulted in, so that each
	 * counter has had an own change before the rounds that are compared */
	for (int r = 0; r <= rounds; r++) {
		char *m;

		if (r == 1 && write(p[1], "r", 1) != 1)
			_exit(1);
		while (r == 1 && getppid() == parent)
			usleep(1000);
		usleep(30000);
		m = mmap(NULL, own, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			_exit(1);
		for (size_t o = 0; o < own; o += 4096)
			m[o] = 1;
	}
	usleep(30000);
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "burn"))
		return do_burn(atoi(argv[2]), atof(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "touch"))
		return do_touch(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "touchexec")) {
		if (do_touch(atol(argv[2])))
			return 1;
		execl("/bin/sleep", "sleep", "2", (char *)NULL);
		return 127;
	}
	if (argc == 4 && !strcmp(argv[1], "memswap"))
		return do_memswap(atoi(argv[2]), atol(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "write"))
		return do_write(atol(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "send"))
		return do_send(atol(argv[2]), atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "forkburn"))
		return do_forkburn(atoi(argv[2]), atol(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "spawn"))
		return do_spawn(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "threads"))
		return do_threads(atoi(argv[2]), atol(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "forkstorm"))
		return do_forkstorm(atoi(argv[2]), atof(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "memfork"))
		return do_memfork(atoi(argv[2]), atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "memorphan"))
		return do_memorphan(atoi(argv[2]));
	fprintf(stderr, "usage: helper_meter_work "
			"burn|touch|touchexec|memswap|write|send|forkburn|spawn|threads|forkstorm|"
			"memfork|memorphan "
			"ARGS\n");
	return 2;
}
