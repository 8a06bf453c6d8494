/* SPDX-License-Identifier: MIT */
/*
 * Harness for bpf/audit.c, driven by tests/integration/audit_events.sh.
 *   helper_audit [--raw] [--ringbuf BYTES] events allow|deny
 *   helper_audit [--raw] [--ringbuf BYTES] storm N
 * Creates its own unified (v2) cgroup directory, forks a child that joins it and waits on a
 * pipe, tracks it (audit_track), releases it, consumes the ring buffer while it runs and, once
 * it is reaped, drains what is left (no sleeps: the events are written before the process
 * exits).
 * events: the child runs sh -c 'ls >/dev/null; python3 ...connect 127.0.0.1:PORT' with a
 *   listener on PORT; checks exactly the exec events sh, ls, python3 and one connect event
 *   (allow; with "deny" a rule 127.0.0.1:PORT denies it and the connect fails with EPERM).
 * storm: the child runs N fork+exec (posix_spawn) of EXE; checks that exec events
 *   received + drops counted == execs performed, exactly.
 * Options: --workers W parallel spawn loops (2), --target EXE (default /bin/true),
 * --no-consume: read the ring buffer only after the storm (forces drops with a small one);
 * --no-audit: nothing loaded or tracked (baseline of tests/bench/audit_exec.sh).
 * Exit 0 pass, 1 fail, 77 when the BPF programs cannot be loaded at all.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bpf/print.h"
#include "bpf/audit.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/parse.h"

#define TASK_KEY 0xa0d17001ULL

extern char **environ;

static char cg_uni[256];

struct collected {
	size_t n_exec, n_net, n_other_key;
	char exec_base[8][64];
	struct audit_connect_event net[4];
	uint32_t exec_pid[8];
	char cwd0[512], argv0[3][512];
	size_t argc0;
	bool verbose;
};

static void on_ev(const struct audit_event *ev, void *userdata)
{
	struct collected *c = userdata;

	if (ev->task_key != TASK_KEY) {
		c->n_other_key++;
		return;
	}
	if (c->verbose) {
		json_t *j = audit_event_to_json(ev);
		char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

		printf("event %s: %s\n", ev->type == AUDIT_EV_EXEC ? "exec" : "connect",
		       s ? s : "(json failed)");
		free(s);
		json_decref(j);
	}
	if (ev->type == AUDIT_EV_EXEC) {
		if (c->n_exec < ARRAY_SIZE(c->exec_base)) {
			const char *b = strrchr(ev->exec.path, '/');

			snprintf(c->exec_base[c->n_exec], sizeof(c->exec_base[0]), "%s",
				 b ? b + 1 : ev->exec.path);
			c->exec_pid[c->n_exec] = ev->pid;
		}
		if (c->n_exec == 0) {
			snprintf(c->cwd0, sizeof(c->cwd0), "%s", ev->exec.cwd);
			c->argc0 = ev->exec.argc;
			for (size_t i = 0; i < 3 && i < ev->exec.argc; i++)
				snprintf(c->argv0[i], sizeof(c->argv0[i]), "%s", ev->exec.argv[i]);
		}
		c->n_exec++;
	} else if (ev->type == AUDIT_EV_CONNECT) {
		if (c->n_net < ARRAY_SIZE(c->net))
			c->net[c->n_net] = ev->connect;
		c->n_net++;
	}
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

static const char *storm_target = "/bin/true";
static unsigned storm_workers = 2;

/* n spawns of storm_target; returns how many ran (exit status 0). */
static uint64_t spawn_loop(unsigned long n)
{
	char *argv[] = {"exit0", NULL};
	uint64_t done = 0;

	for (unsigned long i = 0; i < n; i++) {
		pid_t p;
		int st;

		if (posix_spawn(&p, storm_target, NULL, NULL, argv, environ) != 0)
			continue;
		if (waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			done++;
	}
	return done;
}

/*
 * N fork+exec in storm_workers parallel loops (all inside the task); writes the number of
 * successful execs on fd.
 */
static _noreturn_ void storm_child(unsigned long n, int fd)
{
	uint64_t total = 0;
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		_exit(1);
	for (unsigned w = 0; w < storm_workers; w++) {
		unsigned long share = n / storm_workers + (w < n % storm_workers ? 1 : 0);
		pid_t pid = fork();

		if (pid < 0)
			_exit(1);
		if (pid == 0) {
			uint64_t d = spawn_loop(share);

			_exit(write(p[1], &d, sizeof(d)) == sizeof(d) ? 0 : 1);
		}
	}
	close(p[1]);
	for (unsigned w = 0; w < storm_workers; w++) {
		uint64_t d;

		if (read(p[0], &d, sizeof(d)) != sizeof(d))
			_exit(1);
		total += d;
	}
	while (wait(NULL) > 0)
		;
	if (write(fd, &total, sizeof(total)) != sizeof(total))
		_exit(1);
	_exit(0);
}

int main(int argc, char **argv)
{
	struct audit_opts opts = {};
	struct audit *a = NULL;
	struct collected col = {};
	struct audit_net_rule rule;
	struct audit_net_policy pol = {.default_action = AUDIT_NET_ALLOW};
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	_cleanup_close_ int unifd = -1, ls = -1;
	int go[2], ready[2], res[2], st, r, ai = 1, port = 0;
	char cmd[512], rulestr[64], err[128], rc, cwd[512];
	const char *mode;
	unsigned long storm_n = 0;
	uint64_t performed = 0, lost = 0, sent = 0, t0;
	bool deny = false, ok = true, consume = true, no_audit = false;
	pid_t child;

	libbpf_set_print(bpf_print_env);
	for (; ai < argc && argv[ai][0] == '-'; ai++) {
		uint32_t v;

		if (!strcmp(argv[ai], "--raw"))
			opts.force_raw_tp = true;
		else if (!strcmp(argv[ai], "--ringbuf") && ai + 1 < argc &&
			 parse_u32(argv[ai + 1], &v) == 0)
			opts.ringbuf_bytes = v, ai++;
		else if (!strcmp(argv[ai], "--workers") && ai + 1 < argc &&
			 parse_u32(argv[ai + 1], &v) == 0 && v >= 1 && v <= 64)
			storm_workers = v, ai++;
		else if (!strcmp(argv[ai], "--target") && ai + 1 < argc)
			storm_target = argv[++ai];
		else if (!strcmp(argv[ai], "--no-consume"))
			consume = false;
		else if (!strcmp(argv[ai], "--no-audit"))
			no_audit = true, consume = false; /* the benchmark's baseline */
		else
			return 2;
	}
	if (argc != ai + 2) {
		fprintf(stderr,
			"usage: helper_audit [--raw] [--ringbuf B] events allow|deny\n"
			"       helper_audit [--raw] [--ringbuf B] [--workers W] [--target EXE] "
			"[--no-consume] storm N\n");
		return 2;
	}
	mode = argv[ai];
	if (!strcmp(mode, "events")) {
		deny = !strcmp(argv[ai + 1], "deny");
		col.verbose = true;
	} else if (!strcmp(mode, "storm")) {
		uint64_t v;

		if (parse_u64(argv[ai + 1], &v) < 0 || v == 0 || v > 10000000)
			return 2;
		storm_n = (unsigned long)v;
	} else {
		return 2;
	}

	if (no_audit && !storm_n)
		return 2;
	if (!no_audit) {
		r = audit_open(&opts, &a);
		if (r < 0) {
			printf("SKIP: cannot load the audit BPF programs: %s\n", strerror(-r));
			return 77;
		}
		printf("attach mode: %s\n", audit_attach_mode(a));
	} else {
		printf("attach mode: none (audit not loaded)\n");
	}

	if (!getcwd(cwd, sizeof(cwd)))
		return 1;
	if (storm_n == 0) {
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    listen(ls, 4) < 0 || getsockname(ls, (struct sockaddr *)&sa, &sl) < 0) {
			perror("listener");
			return 1;
		}
		port = ntohs(sa.sin_port);
		if (deny) {
			snprintf(rulestr, sizeof(rulestr), "127.0.0.1:%d", port);
			r = audit_net_rule_parse(rulestr, AUDIT_NET_DENY, &rule, err, sizeof(err));
			if (r < 0) {
				fprintf(stderr, "rule: %s\n", err);
				return 1;
			}
			pol.rules = &rule;
			pol.n_rules = 1;
			/* The exit code says what connect_ex returned: 100 + errno. */
			snprintf(cmd, sizeof(cmd),
				 "ls >/dev/null; python3 -c \"import socket,sys; "
				 "s=socket.socket(); s.settimeout(1); "
				 "sys.exit(100 + s.connect_ex(('127.0.0.1', %d)))\"",
				 port);
		} else {
			snprintf(cmd, sizeof(cmd),
				 "ls >/dev/null; python3 -c \"import socket; s=socket.socket(); "
				 "s.settimeout(1); s.connect(('127.0.0.1', %d))\"",
				 port);
		}
	}

	snprintf(cg_uni, sizeof(cg_uni), "/sys/fs/cgroup/unified/corral-audittest-%d", getpid());
	if (mkdir(cg_uni, 0755) < 0) {
		fprintf(stderr, "mkdir %s: %m\n", cg_uni);
		return 1;
	}
	unifd = open(cg_uni, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (unifd < 0 || pipe2(go, O_CLOEXEC) < 0 || pipe2(ready, O_CLOEXEC) < 0 ||
	    pipe2(res, O_CLOEXEC) < 0) {
		rmdir(cg_uni);
		return 1;
	}
	child = fork();
	if (child < 0) {
		rmdir(cg_uni);
		return 1;
	}
	if (child == 0) {
		char c;

		close(go[1]);
		close(ready[0]);
		close(res[0]);
		if (join(cg_uni, getpid()))
			_exit(126);
		if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(125);
		if (storm_n)
			storm_child(storm_n, res[1]);
		/* The system's tools only (no PATH shims that exec more). */
		setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin", 1);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(go[0]);
	close(ready[1]);
	close(res[1]);
	if (read(ready[0], &rc, 1) != 1) {
		fprintf(stderr, "child failed to join its cgroup\n");
		waitpid(child, NULL, 0);
		rmdir(cg_uni);
		return 1;
	}
	close(ready[0]);
	r = no_audit ? 0 : audit_track(a, TASK_KEY, child, unifd, &pol);
	if (r < 0) {
		fprintf(stderr, "audit_track: %s\n", strerror(-r));
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		rmdir(cg_uni);
		return 1;
	}
	t0 = now_ns(CLOCK_MONOTONIC);
	if (write(go[1], "x", 1) != 1)
		return 1;
	close(go[1]);

	/* Consume while the child runs; the child's exit closes res[1] (POLLHUP). */
	for (;;) {
		struct pollfd p[2] = {{.fd = res[0], .events = POLLIN},
				      {.fd = a ? audit_fd(a) : -1, .events = POLLIN}};

		if (poll(p + 0, consume ? 2 : 1, 1000) < 0 && errno != EINTR)
			break;
		if (consume)
			audit_poll(a, on_ev, &col);
		if (p[0].revents) {
			if (storm_n && read(res[0], &performed, sizeof(performed)) !=
					   (ssize_t)sizeof(performed))
				performed = UINT64_MAX;
			break;
		}
		if (now_ns(CLOCK_MONOTONIC) - t0 > 300 * NSEC_PER_SEC) {
			fprintf(stderr, "child still running after 300 s\n");
			kill(child, SIGKILL);
			break;
		}
	}
	if (waitpid(child, &st, 0) != child)
		st = -1;
	t0 = now_ns(CLOCK_MONOTONIC) - t0;
	rmdir(cg_uni);
	if (no_audit) {
		printf("storm (%u workers, %s, no audit): execs performed=%" PRIu64
		       " in %.2f s (%.0f/s)\n",
		       storm_workers, storm_target, performed, (double)t0 / 1e9,
		       (double)performed * 1e9 / (double)t0);
		ok = performed == storm_n && WIFEXITED(st) && WEXITSTATUS(st) == 0;
		printf("%s %s: %s\n", mode, argv[ai + 1], ok ? "PASS" : "FAIL");
		return ok ? 0 : 1;
	}
	/* Everything is in the ring buffer now: drain it. */
	while (audit_poll(a, on_ev, &col) > 0)
		;
	if (audit_lost(a, TASK_KEY, &lost) < 0 || audit_sent(a, TASK_KEY, &sent) < 0)
		ok = false;
	audit_forget(a, TASK_KEY);

	if (storm_n) {
		printf("storm (%u workers, %s, ring buffer %s): ", storm_workers, storm_target,
		       consume ? "consumed while running" : "read only at the end");
		printf("execs performed=%" PRIu64 " in %.2f s (%.0f/s), events received=%zu "
		       "drops counted=%" PRIu64 " (sent by BPF=%" PRIu64
		       "), received+drops=%" PRIu64 " %s\n",
		       performed, (double)t0 / 1e9, (double)performed * 1e9 / (double)t0,
		       col.n_exec, lost, sent, (uint64_t)col.n_exec + lost,
		       (uint64_t)col.n_exec + lost == performed ? "ok" : "FAIL");
		ok &= performed == storm_n && (uint64_t)col.n_exec + lost == performed;
		ok &= sent == col.n_exec && col.n_net == 0;
		ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
	} else {
		static const char *const want[] = {"sh", "ls", "python3"};
		const struct audit_connect_event *c = &col.net[0];
		bool seq = col.n_exec == 3;

		for (size_t i = 0; seq && i < 3; i++)
			seq = !strcmp(col.exec_base[i], want[i]);
		printf("exec events: %zu (%s %s %s), want sh ls python3: %s\n", col.n_exec,
		       col.n_exec > 0 ? col.exec_base[0] : "-",
		       col.n_exec > 1 ? col.exec_base[1] : "-",
		       col.n_exec > 2 ? col.exec_base[2] : "-", seq ? "ok" : "FAIL");
		ok &= seq;
		ok &= col.exec_pid[0] == (uint32_t)child;
		seq = col.argc0 == 3 && !strcmp(col.argv0[0], "sh") &&
		      !strcmp(col.argv0[1], "-c") && !strcmp(col.argv0[2], cmd);
		printf("sh argv: %zu args, [sh, -c, CMD]: %s\n", col.argc0, seq ? "ok" : "FAIL");
		ok &= seq;
		printf("sh cwd: '%s', want '%s': %s\n", col.cwd0, cwd,
		       strcmp(col.cwd0, cwd) ? "FAIL" : "ok");
		ok &= !strcmp(col.cwd0, cwd);
		printf("connect events: %zu, want 1: %s\n", col.n_net,
		       col.n_net == 1 ? "ok" : "FAIL");
		ok &= col.n_net == 1;
		if (col.n_net >= 1) {
			bool m = c->family == AF_INET && !strcmp(c->address, "127.0.0.1") &&
				 c->port == port && c->protocol == IPPROTO_TCP &&
				 c->op == AUDIT_OP_CONNECT &&
				 c->verdict == (deny ? AUDIT_NET_DENY : AUDIT_NET_ALLOW) &&
				 c->rule == (deny ? 0 : -1);

			printf("connect %s:%u verdict %s (rule %d): %s\n", c->address, c->port,
			       audit_net_action_to_string(c->verdict), c->rule, m ? "ok" : "FAIL");
			ok &= m;
		}
		if (deny) {
			bool eperm = WIFEXITED(st) && WEXITSTATUS(st) == 100 + EPERM;

			printf("task exit: 0x%x, want exit %d (connect -> EPERM): %s\n", st,
			       100 + EPERM, eperm ? "ok" : "FAIL");
			ok &= eperm;
		} else {
			printf("task exit: 0x%x, want 0: %s\n", st,
			       WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "ok" : "FAIL");
			ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
		}
		printf("drops counted: %" PRIu64 ", want 0: %s\n", lost, lost ? "FAIL" : "ok");
		ok &= lost == 0;
	}
	if (col.n_other_key)
		printf("note: %zu events of other tasks ignored\n", col.n_other_key);
	audit_free(a);
	printf("%s %s: %s\n", mode, argv[ai + 1], ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}
