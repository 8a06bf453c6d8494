/* SPDX-License-Identifier: MIT */
/*
 * Launch latency benchmark. Modes (each runs N launches of /bin/true, sequentially):
 *   bare                fork + execve + waitpid of /bin/true (the baseline)
 *   bwrap               fork + exec of `bwrap --ro-bind / / /bin/true`
 *   ctl SOCKET          fork + exec of `corralctl --socket SOCKET run --wait -- /bin/true`
 *                       (its stdin, stdout and stderr passed to the task: /dev/null here)
 *   ctl_files SOCKET    the same with --stdin/--stdout/--stderr /dev/null (no descriptor
 *                       passed: the files opened by the task's child)
 *   systemd_run         fork + exec of `systemd-run --wait --pipe --quiet /bin/true` (a
 *                       transient service whose stdio is the caller's: /dev/null here)
 *   bwrap_sb            fork + exec of `bwrap --unshare-pid --tmpfs /tmp --ro-bind / /
 *                       /bin/true` (the sandbox peer)
 *   api SOCKET          the control API directly: one connection per task, run + wait (the
 *                       agent's default sandbox); api_nosb: with sandbox.mount_namespace false;
 *                       api_tmp: private /tmp and /dev/shm too; api_ns: and IPC + UTS
 *                       namespaces; api_nodev: without the private /dev; api_pid: a PID
 *                       namespace (and its init); api_paths: a read-only path, an
 *                       inaccessible one and a bind; api_landlock: those with Landlock
 *   throughput SOCKET K keeps K API requests in flight for N tasks; prints launches/s
 *   bare_throughput K   the baseline of throughput: K children of fork + execve of /bin/true
 *                       in flight (one reaped, the next forked) for N; prints launches/s
 * Prints: mode n median_us p99_us mean_us (or launches/s).
 */
#include "common/macro.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int run_argv(char *const argv[])
{
	int st;
	pid_t p = fork();

	if (p == 0) {
		/* Quiet: corralctl prints the task id and its exit reason for every run. */
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

		if (null >= 0) {
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	if (p < 0 || waitpid(p, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int api_connect(const char *sock)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("connect");
		exit(1);
	}
	return fd;
}

static const char REQ[] = "{\"op\":\"run\",\"wait\":true,\"spec\":{\"command\":[\"/bin/true\"],"
			  "\"workdir\":\"/\"}}\n";

/* Read until the "ended" line; returns 0 if the task exited 0. */
static int api_wait_end(int fd)
{
	char buf[65536];
	size_t len = 0;

	for (;;) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);

		if (n <= 0)
			return -1;
		len += (size_t)n;
		buf[len] = 0;
		if (strstr(buf, "\"event\":\"ended\""))
			return strstr(buf, "\"status\":\"exited\"") ? 0 : -1;
		if (strstr(buf, "\"ok\":false"))
			return -1;
		if (len >= sizeof(buf) - 1)
			len = 0;
	}
}

/*
 * One in-flight request of the throughput mode: what arrived so far. Read without blocking,
 * so that waiting for one task's end never holds back the others' requests.
 */
struct inflight {
	char buf[65536];
	size_t len;
};

/* 1: ended (exit 0), -1: failed or the connection broke, 0: not yet. */
static int inflight_read(int fd, struct inflight *f)
{
	ssize_t n = recv(fd, f->buf + f->len, sizeof(f->buf) - 1 - f->len, MSG_DONTWAIT);

	if (n < 0 && errno == EAGAIN)
		return 0;
	if (n <= 0)
		return -1;
	f->len += (size_t)n;
	f->buf[f->len] = 0;
	if (strstr(f->buf, "\"event\":\"ended\""))
		return strstr(f->buf, "\"status\":\"exited\"") ? 1 : -1;
	if (strstr(f->buf, "\"ok\":false"))
		return -1;
	if (f->len >= sizeof(f->buf) - 1)
		f->len = 0;
	return 0;
}

static int api_once(const char *sock, const char *req)
{
	int fd = api_connect(sock), r;
	ssize_t len = (ssize_t)strlen(req);

	if (write(fd, req, (size_t)len) != len)
		return -1;
	r = api_wait_end(fd);
	close(fd);
	return r;
}

/* K bare fork+execs of /bin/true in flight until N have ended; launches/s, or -1. */
static double bare_throughput(size_t n, size_t k)
{
	size_t started = 0, done = 0, failed = 0;
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);

	while (done < n) {
		int st;

		while (started < n && started - done < k) {
			pid_t p = fork();

			if (p == 0) {
				execl("/bin/true", "true", (char *)NULL);
				_exit(127);
			}
			if (p < 0)
				return -1;
			started++;
		}
		if (wait(&st) < 0)
			return -1;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed++;
		done++;
	}
	return failed ? -1 : (double)n / ((double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
}

static void report(const char *mode, uint64_t *v, size_t n)
{
	double sum = 0;

	qsort(v, n, sizeof(*v), cmp_u64);
	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	printf("%-10s n=%zu median_us=%.0f p99_us=%.0f mean_us=%.0f\n", mode, n,
	       (double)v[n / 2] / 1e3, (double)v[(size_t)((double)n * 0.99)] / 1e3,
	       sum / (double)n / 1e3);
}

int main(int argc, char **argv)
{
	uint64_t *lat;
	unsigned long gap_ms;
	size_t n;
	const char *mode;

	if (argc < 3) {
		fprintf(stderr,
			"usage: %s N bare|bwrap|ctl SOCK CTL|api SOCK|throughput SOCK K|"
			"bare_throughput K\n",
			argv[0]);
		return 2;
	}
	n = strtoul(argv[1], NULL, 10);
	mode = argv[2];
	lat = calloc(n, sizeof(*lat));
	if (!lat)
		return 1;
	if (strcmp(mode, "bare_throughput") == 0 && argc >= 4) {
		size_t k = MAX(strtoul(argv[3], NULL, 10), 1UL);
		double rate = bare_throughput(n, k);

		free(lat);
		if (rate < 0) {
			fprintf(stderr, "bare_throughput: a launch failed\n");
			return 1;
		}
		printf("bare_throughput n=%zu inflight=%zu launches_per_s=%.0f failed=0\n", n, k,
		       rate);
		return 0;
	}
	if (strcmp(mode, "throughput") == 0 && argc >= 5) {
		size_t k = strtoul(argv[4], NULL, 10), started = 0, done = 0, failed = 0;
		struct pollfd *pf = calloc(k, sizeof(*pf));
		struct inflight *fl = calloc(k, sizeof(*fl));
		uint64_t t0 = now_ns(CLOCK_MONOTONIC), el;

		if (!pf || !fl)
			return 1;

		for (size_t i = 0; i < k; i++)
			pf[i].fd = -1;
		while (done < n) {
			for (size_t i = 0; i < k; i++)
				if (pf[i].fd < 0 && started < n) {
					pf[i].fd = api_connect(argv[3]);
					pf[i].events = POLLIN;
					fl[i].len = 0;
					if (write(pf[i].fd, REQ, sizeof(REQ) - 1) < 0)
						return 1;
					started++;
				}
			if (poll(pf, k, 10000) <= 0)
				return 1;
			for (size_t i = 0; i < k; i++)
				if (pf[i].fd >= 0 && (pf[i].revents & (POLLIN | POLLHUP))) {
					int r = inflight_read(pf[i].fd, &fl[i]);

					if (r == 0)
						continue;
					if (r < 0)
						failed++;
					close(pf[i].fd);
					pf[i].fd = -1;
					done++;
				}
		}
		el = now_ns(CLOCK_MONOTONIC) - t0;
		printf("throughput n=%zu inflight=%zu launches_per_s=%.0f failed=%zu\n", n, k,
		       (double)n / ((double)el / 1e9), failed);
		free(pf);
		free(fl);
		free(lat);
		return failed ? 1 : 0;
	}
	/* LAUNCH_GAP_MS: idle time between launches (not timed), the "isolated launch" case. */
	gap_ms = getenv("LAUNCH_GAP_MS") ? strtoul(getenv("LAUNCH_GAP_MS"), NULL, 10) : 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t t0;
		int r;

		if (gap_ms)
			usleep((useconds_t)(gap_ms * 1000));
		t0 = now_ns(CLOCK_MONOTONIC);

		if (strcmp(mode, "bare") == 0) {
			char *const a[] = {(char *)"/bin/true", NULL};

			r = run_argv(a);
		} else if (strcmp(mode, "bwrap") == 0) {
			char *const a[] = {(char *)"/usr/bin/bwrap",
					   (char *)"--ro-bind",
					   (char *)"/",
					   (char *)"/",
					   (char *)"/bin/true",
					   NULL};

			r = run_argv(a);
		} else if (strcmp(mode, "ctl") == 0 && argc >= 5) {
			char *const a[] = {argv[4],
					   (char *)"--socket",
					   argv[3],
					   (char *)"run",
					   (char *)"--wait",
					   (char *)"--",
					   (char *)"/bin/true",
					   NULL};

			r = run_argv(a);
		} else if (strcmp(mode, "systemd_run") == 0) {
			char *const a[] = {(char *)"/usr/bin/systemd-run",
					   (char *)"--wait",
					   (char *)"--pipe",
					   (char *)"--quiet",
					   (char *)"/bin/true",
					   NULL};

			r = run_argv(a);
		} else if (strcmp(mode, "ctl_files") == 0 && argc >= 5) {
			char *const a[] = {argv[4],
					   (char *)"--socket",
					   argv[3],
					   (char *)"run",
					   (char *)"--wait",
					   (char *)"--stdin",
					   (char *)"/dev/null",
					   (char *)"--stdout",
					   (char *)"/dev/null",
					   (char *)"--stderr",
					   (char *)"/dev/null",
					   (char *)"--",
					   (char *)"/bin/true",
					   NULL};

			r = run_argv(a);
		} else if (strcmp(mode, "bwrap_sb") == 0) {
			char *const a[] = {(char *)"/usr/bin/bwrap",
					   (char *)"--unshare-pid",
					   (char *)"--tmpfs",
					   (char *)"/tmp",
					   (char *)"--ro-bind",
					   (char *)"/",
					   (char *)"/",
					   (char *)"/bin/true",
					   NULL};

			r = run_argv(a);
		} else if (strcmp(mode, "api") == 0 && argc >= 4) {
			r = api_once(argv[3], REQ);
		} else if (strncmp(mode, "api_", 4) == 0 && argc >= 4) {
			static const struct {
				const char *mode, *sandbox;
			} v[] = {{"api_nosb", "{\"mount_namespace\":false}"},
				 {"api_tmp", "{\"private_tmp\":true}"},
				 {"api_ns", "{\"private_tmp\":true,\"ipc_namespace\":true,"
					    "\"uts_namespace\":true}"},
				 {"api_nodev", "{\"private_dev\":false}"},
				 {"api_pid", "{\"pid_namespace\":true}"},
				 {"api_paths", "{\"read_only_paths\":[\"/srv\"],"
					       "\"inaccessible_paths\":[\"/root\"],"
					       "\"bind\":[\"/srv:/mnt:ro\"]}"},
				 {"api_landlock",
				  "{\"read_only_paths\":[\"/srv\"],"
				  "\"inaccessible_paths\":[\"/root\"],"
				  "\"bind\":[\"/srv:/mnt:ro\"],\"landlock\":true}"}};
			char req[512];

			r = -1;
			for (size_t k = 0; k < ARRAY_SIZE(v); k++)
				if (strcmp(mode, v[k].mode) == 0) {
					snprintf(
					    req, sizeof(req),
					    "{\"op\":\"run\",\"wait\":true,\"spec\":{\"command\":"
					    "[\"/bin/true\"],\"workdir\":\"/\",\"sandbox\":%s}}\n",
					    v[k].sandbox);
					r = api_once(argv[3], req);
				}
		} else {
			fprintf(stderr, "unknown mode %s\n", mode);
			return 2;
		}
		if (r != 0) {
			fprintf(stderr, "%s: launch %zu failed (%d)\n", mode, i, r);
			return 1;
		}
		lat[i] = now_ns(CLOCK_MONOTONIC) - t0;
	}
	if (gap_ms) {
		char label[64];

		snprintf(label, sizeof(label), "%s_gap", mode);
		report(label, lat, n);
	} else {
		report(mode, lat, n);
	}
	free(lat);
	return 0;
}
