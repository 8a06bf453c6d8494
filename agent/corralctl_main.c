/* SPDX-License-Identifier: MIT */
/* corralctl: the command-line client of corrald's control socket. */
#include "agent/spec.h"
#include "corral_version.h"
#include "common/clock.h"
#include "common/escape.h"
#include "common/fdpass.h"
#include "common/macro.h"
#include "common/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SOCKET "/run/corral/corrald.sock"

static const char *socket_path;

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: corralctl [--socket PATH] COMMAND ...\n"
	    "       corralctl -V|--version\n"
	    "       corralctl -h|--help        (also after a command)\n\n"
	    "Commands:\n"
	    "  run [OPTIONS] -- CMD [ARGS...]  start a task, print its id\n"
	    "  ps [-a|--all] [--json] [--limit N [--after C]]\n"
	    "                                  list tasks, newest first (--all: include ended\n"
	    "                                  ones; --limit: a page of N, the next one's\n"
	    "                                  cursor C on stderr; ps --all pages by 100\n"
	    "                                  unless --json)\n"
	    "  show ID [--json]                the task's record (schema v1)\n"
	    "  kill ID [-s|--signal S]         signal every process of the task (default TERM)\n"
	    "  wait ID                         wait for the task; exit code as for run --wait\n"
	    "  status [--json]                 agent status: enforcement, upload health, spool\n\n"
	    "run options:\n"
	    "  --wait               wait for the end; exit with the task's code (128+signal when\n"
	    "                       killed) and print the exit reason on stderr; the task gets\n"
	    "                       this command's stdin/stdout/stderr, and the signals INT TERM\n"
	    "                       HUP QUIT USR1 USR2 WINCH it receives (a 2nd INT within 1 s:\n"
	    "                       KILL); if this command goes away the task is killed\n"
	    "  -q, --quiet          (--wait) no id line, no end line when the task exited 0\n"
	    "  --pty                (--wait) run the task on a new pseudo-terminal\n"
	    "  --detach-on-disconnect   (--wait) the task goes on if this command goes away\n"
	    "  --memory SIZE        memory limit (512M, 2G); --memory-high SIZE; --swap SIZE\n"
	    "  --cpus N             CPU limit in cores (fractional: 0.5)\n"
	    "  --cpu-weight W       relative CPU weight 1-10000 (default 100)\n"
	    "  --pids N             maximum number of processes/threads\n"
	    "  --io-read-bps DEV=BPS, --io-write-bps DEV=BPS   block IO limits (DEV: /dev/sda or "
	    "8:0)\n"
	    "  --time SECONDS       wall-clock limit (also 90s, 5m, 2h)\n"
	    "  --cpu-time SECONDS   CPU-time limit\n"
	    "  --gpus N|LIST        GPUs to allocate (count or indexes \"0,2\"); --gpu-memory "
	    "SIZE\n"
	    "  --user U             run as user U (root or members of the agent's group only)\n"
	    "  --account A, --job J, --label K=V (repeatable)\n"
	    "  --workdir DIR        working directory (default: the current directory)\n"
	    "  --env K=V            environment variable (repeatable)\n"
	    "  --env-all, --env-keep K   the caller's whole environment, or variable K of it\n"
	    "  --no-slurm           inside a Slurm job, do not take job/account/labels from it\n"
	    "  --stdin F, --stdout F, --stderr F   files opened as the task user (instead of\n"
	    "                       the passed streams; without --wait the default is /dev/null)\n"
	    "  --seccomp PROFILE    default, strict, unconfined, a name in the profile dir, or a "
	    "path\n"
	    "  --allow-net CIDR[:PORT], --deny-net CIDR[:PORT]   network policy (repeatable)\n"
	    "  --audit-rate N, --audit-bytes SIZE   the task's audit record budget (records/s, "
	    "volume);\n"
	    "                       past it events are counted in audit.summary records\n"
	    "sandbox (defaults in the agent's [sandbox]; see docs/sandbox.md):\n"
	    "  --no-sandbox         no mount namespace (root only, for a task running as root)\n"
	    "  --private-tmp, --no-private-tmp   own /tmp and /dev/shm (tmpfs, gone at the end);\n"
	    "                       --tmp-size SIZE|N%% (charged to the task's memory)\n"
	    "  --no-protect-system  /usr, /etc, /boot stay writable (as the permissions allow)\n"
	    "  --read-only PATH, --inaccessible PATH, --bind SRC:DST[:ro]   (repeatable)\n"
	    "  --ipc-ns, --uts-ns   own IPC (SysV, POSIX queues) and hostname namespaces\n"
	    "  --pid-ns             own PID namespace and /proc (a minimal init is its PID 1)\n"
	    "  --private-dev, --no-private-dev   own /dev: null, zero, random, tty, pts, shm...\n"
	    "                       and the task's GPUs only (default: yes)\n"
	    "  --landlock, --no-landlock   read-only and inaccessible paths also by Landlock\n"
	    "                       rules (whatever path reaches them)\n"
	    "  --spec FILE          JSON job spec (same fields); flags override it\n\n"
	    "Exit codes of run --wait / wait: the task's exit code; 128+N when killed by signal "
	    "N;\n"
	    "128+N also when ended for a time or CPU-time limit (143 when it exited on SIGTERM);\n"
	    "127/126 when the program could not be started; 255 when the outcome is "
	    "unknown.\n"
	    "Other commands: 0 on success, 2 on any error (bad usage, a request the agent "
	    "refused,\n"
	    "the agent unreachable).\n");
}

/*
 * Everything printed for a person goes through here: the text is escaped (common/escape.h)
 * except one trailing newline, so what a task or another user chose (a command, a job name, an
 * exit message) can neither move the cursor, retitle the window, write the clipboard nor forge
 * a line of output.
 */
_printf_(2, 0) static void vput(FILE *f, const char *fmt, va_list ap)
{
	char buf[8192];
	_cleanup_free_ char *e = NULL;
	size_t n;
	bool nl;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	nl = n && buf[n - 1] == '\n';
	if (nl)
		buf[n - 1] = 0;
	e = esc_dup(buf);
	fputs(e ? e : "(out of memory)", f);
	if (nl)
		fputc('\n', f);
}

_printf_(2, 3) static void eprintf(FILE *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vput(f, fmt, ap);
	va_end(ap);
}

_printf_(1, 2) _noreturn_ static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("corralctl: ", stderr);
	va_start(ap, fmt);
	vput(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* An argument of a subcommand that it does not take: --help prints the usage (exit 0); an
 * option ends with one line and a hint (exit 2), as does a stray argument. */
_noreturn_ static void bad_arg(const char *cmd, const char *arg)
{
	if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
		usage(stdout);
		exit(0);
	}
	if (arg[0] == '-')
		die("%s: unknown option %s; try --help", cmd, arg);
	die("%s: unexpected argument \"%s\"; try --help", cmd, arg);
}

/* An option given last without its value. */
_noreturn_ static void needs_value(const char *cmd, const char *opt)
{
	if (cmd)
		die("%s: option %s needs an argument; try --help", cmd, opt);
	die("option %s needs an argument; try --help", opt);
}

static int connect_agent(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(socket_path) >= sizeof(sa.sun_path))
		die("--socket: path too long");
	strcpy(sa.sun_path, socket_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("cannot connect to corrald at %s: %s (is corrald running?)", socket_path,
		    strerror(errno));
	return fd;
}

/* The request (taken: req is freed), with the descriptors on its first bytes (SCM_RIGHTS). */
static void send_req_fds(int fd, json_t *req, const int *fds, size_t nfds)
{
	char *txt = json_dumps(req, JSON_COMPACT);
	union {
		char b[FDPASS_SPACE(3)];
		struct cmsghdr align;
	} cm;
	size_t len, off = 0;

	json_decref(req);
	if (!txt || nfds > 3)
		die(txt ? "internal error: more than 3 descriptors" : "out of memory");
	len = strlen(txt);
	txt[len++] = '\n'; /* json_dumps leaves room for the NUL we overwrite */
	while (off < len) {
		struct iovec iov = {.iov_base = txt + off, .iov_len = len - off};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		ssize_t n;

		if (off == 0 && nfds)
			(void)fdpass_attach(&mh, cm.b, sizeof(cm.b), fds,
					    nfds); /* nfds <= 3 fits */
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("sending to corrald: %s", strerror(errno));
		}
		off += (size_t)n;
	}
	free(txt);
}

/* One request line to the agent (taken: req is freed). */
static void send_req(int fd, json_t *req)
{
	send_req_fds(fd, req, NULL, 0);
}

/* Replies read so far (recv_reply, run --wait's loop). */
static char *rbuf;
static size_t rlen, rcap;

/* A reply line already read, or NULL (no complete line yet). */
static json_t *take_reply(void)
{
	json_error_t e;
	char *nl = rbuf ? memchr(rbuf, '\n', rlen) : NULL;
	json_t *j;
	size_t l;

	if (!nl)
		return NULL;
	l = (size_t)(nl - rbuf);
	j = json_loadb(rbuf, l, 0, &e);
	memmove(rbuf, nl + 1, rlen - l - 1);
	rlen -= l + 1;
	if (!j)
		die("invalid reply from corrald: %s", e.text);
	return j;
}

/* One read from the agent (the socket is readable). */
static void fill_reply(int fd)
{
	ssize_t n;

	if (rlen + 65536 > rcap) {
		rcap = rlen + 65536;
		rbuf = realloc(rbuf, rcap);
		if (!rbuf)
			die("out of memory");
	}
	do
		n = recv(fd, rbuf + rlen, rcap - rlen, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		die("reading from corrald: %s", strerror(errno));
	if (n == 0)
		die("corrald closed the connection (agent restarted?)");
	rlen += (size_t)n;
}

/* Read one reply line. */
static json_t *recv_reply(int fd)
{
	json_t *j;

	while (!(j = take_reply()))
		fill_reply(fd);
	return j;
}

static json_t *call(json_t *req)
{
	int fd = connect_agent();
	json_t *r;

	send_req(fd, req);
	r = recv_reply(fd);
	close(fd);
	return r;
}

static void check_ok(json_t *r)
{
	if (!json_is_true(json_object_get(r, "ok")))
		die("%s", json_string_value(json_object_get(r, "error")) ?: "request failed");
}

/* Exit code convention shared by run --wait and wait. Prints the reason on stderr. */
static int report_end(json_t *rec)
{
	json_t *ex = json_object_get(rec, "exit");
	const char *status = json_string_value(json_object_get(ex, "status"));
	const char *msg = json_string_value(json_object_get(ex, "message"));
	const char *id = json_string_value(json_object_get(json_object_get(rec, "task"), "id"));
	int code = (int)json_integer_value(json_object_get(ex, "code"));
	int sig = (int)json_integer_value(json_object_get(ex, "signal"));
	json_int_t ooms = json_integer_value(json_object_get(ex, "oom_kills"));
	bool by_limit;
	int rc;

	if (!status)
		status = "lost";
	/* Ended by the agent for a limit: 128+signal even when the task caught SIGTERM and
	 * exited on its own (what systemd-run and Slurm users expect of a kill by limit). */
	by_limit = strcmp(status, "time_limit") == 0 || strcmp(status, "cpu_time_limit") == 0;
	if (by_limit)
		rc = 128 + (sig ? sig : SIGTERM);
	else if (strcmp(status, "exited") == 0)
		rc = code;
	else if (strcmp(status, "launch_failed") == 0)
		rc = code ? code : 127;
	else if (strcmp(status, "lost") == 0)
		rc = 255;
	else if (sig)
		rc = 128 + sig;
	else
		rc = code ? code : 1;
	if (strcmp(status, "exited") == 0)
		eprintf(stderr, "corralctl: task %s: exited with code %d\n", id ? id : "?", code);
	else if (sig)
		eprintf(stderr, "corralctl: task %s: %s (signal %d, %s)%s%s\n", id ? id : "?",
			status, sig, strsignal(sig), msg ? ": " : "", msg ? msg : "");
	else if (by_limit)
		eprintf(stderr,
			"corralctl: task %s: %s (SIGTERM sent; it exited with code %d)%s%s\n",
			id ? id : "?", status, code, msg ? ": " : "", msg ? msg : "");
	else
		eprintf(stderr, "corralctl: task %s: %s (code %d)%s%s\n", id ? id : "?", status,
			code, msg ? ": " : "", msg ? msg : "");
	if (ooms > 0 && strcmp(status, "oom_killed") != 0)
		eprintf(
		    stderr,
		    "corralctl: task %s: %lld process(es) inside it were killed by the kernel's "
		    "OOM killer (exit.oom_kills)\n",
		    id ? id : "?", (long long)ooms);
	return rc;
}

/* ---- run --wait: stdio passed, signals forwarded, --pty ------------------------------------ */

/* The signals run --wait forwards to its task (docs/usage.md "Signals"). */
static const int fwd_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

struct run_io {
	int fds[3];	     /* passed to the task, in the order of keys */
	const char *keys[3]; /* "in", "out", "err" */
	size_t n;
	bool pty;
	int master;	      /* --pty: the terminal's master side, kept here */
	bool raw;	      /* our own stdin was put in raw mode (restored at exit) */
	struct termios saved; /* ... from this */
	bool in_eof, out_eof; /* --pty: our stdin ended; the master has no more output */
	char tobuf[4096];     /* --pty: stdin bytes not yet written to the master */
	size_t to_len;
};

static struct run_io *pty_restore_io;

static void pty_restore(void)
{
	if (pty_restore_io && pty_restore_io->raw)
		(void)tcsetattr(STDIN_FILENO, TCSAFLUSH, &pty_restore_io->saved);
}

/* An anonymous pipe, or /dev/null. */
static bool is_pipe_or_null(int fd, const struct stat *st)
{
	struct statfs sf;

	if (S_ISCHR(st->st_mode))
		return major(st->st_rdev) == 1 && minor(st->st_rdev) == 3;
	return S_ISFIFO(st->st_mode) && fstatfs(fd, &sf) == 0 &&
	       sf.f_type == (typeof(sf.f_type))PIPEFS_MAGIC;
}

/* Does the task run as another user (--user)? 0 no, 1 yes and we are root, 2 yes. */
static int runs_as_other(const struct task_spec *sp)
{
	struct passwd *pw;
	uint64_t u;

	if (!sp->user)
		return 0;
	pw = getpwnam(sp->user);
	if (pw)
		u = pw->pw_uid;
	else if (parse_u64(sp->user, &u) < 0)
		return 0; /* unknown: the agent says so */
	if (u == getuid())
		return 0;
	return getuid() == 0 ? 1 : 2;
}

/*
 * The streams the task gets from us: each one not redirected to a file (--stdin/--stdout/
 * --stderr) and open here. With --pty a new terminal's slave end stands for all three (the
 * master stays here, copied to and from our own stdio).
 */
static void run_io_prepare(struct run_io *io, const struct task_spec *sp)
{
	static const char *const keys[3] = {"in", "out", "err"};
	const bool redirected[3] = {sp->stdin_path != NULL, sp->stdout_path != NULL,
				    sp->stderr_path != NULL};
	static const char *const names[3] = {"stdin", "stdout", "stderr"};
	int slave = -1, other = runs_as_other(sp);

	io->master = -1;
	if (other && io->pty)
		die("--pty: only for a task that runs as you (--user names another user)");
	if (other == 2) {
		/* a member of allowed_group for another user: the agent takes descriptors only
		 * for the caller's own tasks (or from root) */
		eprintf(stderr,
			"corralctl: the task runs as %s: its stdio is not passed (/dev/null; "
			"--stdin/--stdout/--stderr FILE)\n",
			sp->user);
		return;
	}
	if (io->pty) {
		struct winsize ws;
		char *name;

		io->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (io->master < 0 || grantpt(io->master) < 0 || unlockpt(io->master) < 0 ||
		    !(name = ptsname(io->master)))
			die("--pty: cannot allocate a terminal: %s", strerror(errno));
		slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (slave < 0)
			die("--pty: %s: %s", name, strerror(errno));
		if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0)
			(void)ioctl(io->master, TIOCSWINSZ, &ws);
		if (tcgetattr(STDIN_FILENO, &io->saved) == 0) {
			struct termios raw = io->saved;

			/* ours raw: every key (^C, ^Z included) goes to the task's terminal,
			 * whose line discipline turns it into the signal */
			cfmakeraw(&raw);
			if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) {
				io->raw = true;
				pty_restore_io = io;
				atexit(pty_restore);
			}
		}
		(void)fcntl(io->master, F_SETFL, O_NONBLOCK);
	}
	for (int i = 0; i < 3; i++) {
		int fd = io->pty ? slave : i;
		struct stat st;

		if (redirected[i] || fstat(fd, &st) < 0)
			continue;
		/* root, for another user: pipes and /dev/null only (root's files, terminals and
		 * sockets are not the task user's: the agent checks what it gets, corralctl does
		 * not make a redirection of root's the reason a run fails) */
		if (other == 1 && !is_pipe_or_null(fd, &st)) {
			eprintf(stderr,
				"corralctl: %s is not a pipe: not passed to a task of another user "
				"(it gets /dev/null; --%s FILE)\n",
				names[i], names[i]);
			continue;
		}
		io->fds[io->n] = fd;
		io->keys[io->n++] = keys[i];
	}
	if (io->pty && (io->n == 0 || strcmp(io->keys[0], "in") != 0))
		die("--pty: the terminal must be the task's stdin (no --stdin FILE with --pty)");
}

/* --pty: copy what is ready between our stdio and the master. */
static void pty_pump(struct run_io *io, short in_ev, short m_ev)
{
	char buf[4096];
	ssize_t n;

	if (m_ev & (POLLIN | POLLHUP | POLLERR)) {
		n = read(io->master, buf, sizeof(buf));
		if (n > 0) {
			size_t off = 0;

			while (off < (size_t)n) {
				ssize_t w = write(STDOUT_FILENO, buf + off, (size_t)n - off);

				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0)
					break;
				off += (size_t)w;
			}
		} else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			io->out_eof = true; /* EIO: no process holds the slave any more */
		}
	}
	if ((in_ev & (POLLIN | POLLHUP)) && io->to_len < sizeof(io->tobuf)) {
		n = read(STDIN_FILENO, io->tobuf + io->to_len, sizeof(io->tobuf) - io->to_len);
		if (n > 0)
			io->to_len += (size_t)n;
		else if (n == 0 || (errno != EAGAIN && errno != EINTR))
			io->in_eof = true;
	}
	if (io->to_len) {
		n = write(io->master, io->tobuf, io->to_len);
		if (n > 0) {
			memmove(io->tobuf, io->tobuf + n, io->to_len - (size_t)n);
			io->to_len -= (size_t)n;
		}
	}
}

/* --pty: the task's output still in the terminal once it ended. */
static void pty_drain(struct run_io *io)
{
	for (int i = 0; i < 1000 && !io->out_eof; i++) {
		struct pollfd p = {.fd = io->master, .events = POLLIN};

		if (poll(&p, 1, 20) <= 0)
			break;
		pty_pump(io, 0, p.revents);
	}
}

/*
 * run --wait once the request is sent: the start reply, then the end, forwarding the signals
 * we get meanwhile (a second SIGINT within 1 s: SIGKILL) on the same connection, so the agent
 * knows them as the client's. Returns the exit code.
 */
/* The start reply refused the task, or its launch failed: said, and the exit code. */
static int run_start_failed(json_t *r, bool wait, bool id_on_stdout)
{
	const char *tid = json_string_value(json_object_get(r, "task"));
	int rc;

	eprintf(stderr, "corralctl: %s%s%s%s\n", tid ? "task " : "", tid ? tid : "",
		tid ? ": launch_failed: " : "",
		json_string_value(json_object_get(r, "error")) ?: "request failed");
	if (!tid)
		return 1;
	rc = (int)json_integer_value(json_object_get(r, "exit_code"));
	eprintf(id_on_stdout ? stdout : stderr, "%s\n", tid);
	return wait ? (rc ? rc : 127) : 1;
}

static int run_wait_loop(int fd, int sfd, struct run_io *io, bool wait, bool quiet,
			 bool id_on_stdout)
{
	int pending[16], npending = 0, rc = 0;
	uint64_t last_int = 0;
	char *id = NULL;

	for (;;) {
		struct pollfd p[4] = {{.fd = fd, .events = POLLIN},
				      {.fd = sfd, .events = POLLIN},
				      {.fd = -1},
				      {.fd = -1}};
		json_t *r;

		while ((r = take_reply())) {
			const char *ev = json_string_value(json_object_get(r, "event"));

			if (!id) {
				/* the start reply */
				const char *tid = json_string_value(json_object_get(r, "task"));

				if (!json_is_true(json_object_get(r, "ok"))) {
					rc = run_start_failed(r, wait, id_on_stdout);
					json_decref(r);
					return rc;
				}
				id = strdup(tid ? tid : "?");
				if (!id)
					die("out of memory");
				if (id_on_stdout)
					eprintf(stdout, "%s\n", id);
				else if (!quiet)
					eprintf(stderr, "corralctl: task %s\n", id);
				fflush(stdout);
				json_decref(r);
				if (!wait) {
					free(id);
					return 0;
				}
				for (int i = 0; i < npending; i++)
					send_req(fd, json_pack("{s:s,s:s,s:i}", "op", "kill",
							       "task", id, "signal", pending[i]));
				npending = 0;
				continue;
			}
			if (ev && strcmp(ev, "ended") == 0) {
				json_t *rec = json_object_get(r, "record");
				json_t *ex = json_object_get(rec, "exit");
				bool clean =
				    json_integer_value(json_object_get(ex, "code")) == 0 &&
				    !strcmp(json_string_value(json_object_get(ex, "status")) ?: "",
					    "exited");

				if (io->pty)
					pty_drain(io);
				pty_restore();
				if (quiet && clean)
					rc = 0;
				else
					rc = report_end(rec);
				json_decref(r);
				free(id);
				return rc;
			}
			/* a forwarded signal's answer: a task that just ended is not an error */
			json_decref(r);
		}
		if (io->pty) {
			if (!io->in_eof)
				p[2] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
			if (!io->out_eof)
				p[3] = (struct pollfd){.fd = io->master, .events = POLLIN};
		}
		if (poll(p, 4, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		if (p[0].revents)
			fill_reply(fd);
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				int sig = (int)si.ssi_signo;
				uint64_t now = now_ns(CLOCK_MONOTONIC);

				if (sig == SIGINT) {
					if (last_int && now - last_int < NSEC_PER_SEC)
						sig = SIGKILL; /* the second ^C within 1 s */
					last_int = now;
				}
				if (sig == SIGWINCH && io->pty) {
					struct winsize ws;

					/* the terminal's size: its kernel side signals the
					 * task's foreground process group */
					if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0)
						(void)ioctl(io->master, TIOCSWINSZ, &ws);
					continue;
				}
				if (!id) {
					if (npending < (int)ARRAY_SIZE(pending))
						pending[npending++] = sig;
					continue;
				}
				send_req(fd, json_pack("{s:s,s:s,s:i}", "op", "kill", "task", id,
						       "signal", sig));
			}
		}
		if (io->pty)
			pty_pump(io, p[2].revents, p[3].revents);
	}
}

static int wait_ended(int fd)
{
	for (;;) {
		json_t *r = recv_reply(fd);
		const char *ev = json_string_value(json_object_get(r, "event"));
		int rc;

		check_ok(r);
		if (ev && strcmp(ev, "ended") == 0) {
			rc = report_end(json_object_get(r, "record"));
			json_decref(r);
			return rc;
		}
		json_decref(r);
	}
}

enum {
	OPT_WAIT = 256,
	OPT_MEMORY,
	OPT_MEMORY_HIGH,
	OPT_SWAP,
	OPT_CPUS,
	OPT_CPU_WEIGHT,
	OPT_PIDS,
	OPT_IO_READ,
	OPT_IO_WRITE,
	OPT_TIME,
	OPT_CPU_TIME,
	OPT_GPUS,
	OPT_GPU_MEMORY,
	OPT_AUDIT_RATE,
	OPT_AUDIT_BYTES,
	OPT_USER,
	OPT_ACCOUNT,
	OPT_JOB,
	OPT_LABEL,
	OPT_WORKDIR,
	OPT_ENV,
	OPT_STDOUT,
	OPT_STDERR,
	OPT_SECCOMP,
	OPT_ALLOW_NET,
	OPT_DENY_NET,
	OPT_SPEC,
	OPT_NO_SANDBOX,
	OPT_NO_PRIVATE_TMP,
	OPT_PRIVATE_TMP,
	OPT_TMP_SIZE,
	OPT_NO_PROTECT_SYSTEM,
	OPT_READ_ONLY,
	OPT_INACCESSIBLE,
	OPT_BIND,
	OPT_IPC_NS,
	OPT_UTS_NS,
	OPT_PID_NS,
	OPT_LANDLOCK,
	OPT_NO_LANDLOCK,
	OPT_PRIVATE_DEV,
	OPT_NO_PRIVATE_DEV,
	OPT_STDIN,
	OPT_PTY,
	OPT_DETACH,
	OPT_ENV_ALL,
	OPT_ENV_KEEP,
	OPT_NO_SLURM,
};

static const struct option run_opts[] = {
    {"wait", no_argument, NULL, OPT_WAIT},
    {"memory", required_argument, NULL, OPT_MEMORY},
    {"memory-high", required_argument, NULL, OPT_MEMORY_HIGH},
    {"swap", required_argument, NULL, OPT_SWAP},
    {"cpus", required_argument, NULL, OPT_CPUS},
    {"cpu-weight", required_argument, NULL, OPT_CPU_WEIGHT},
    {"pids", required_argument, NULL, OPT_PIDS},
    {"io-read-bps", required_argument, NULL, OPT_IO_READ},
    {"io-write-bps", required_argument, NULL, OPT_IO_WRITE},
    {"time", required_argument, NULL, OPT_TIME},
    {"cpu-time", required_argument, NULL, OPT_CPU_TIME},
    {"gpus", required_argument, NULL, OPT_GPUS},
    {"gpu-memory", required_argument, NULL, OPT_GPU_MEMORY},
    {"audit-rate", required_argument, NULL, OPT_AUDIT_RATE},
    {"audit-bytes", required_argument, NULL, OPT_AUDIT_BYTES},
    {"user", required_argument, NULL, OPT_USER},
    {"account", required_argument, NULL, OPT_ACCOUNT},
    {"job", required_argument, NULL, OPT_JOB},
    {"label", required_argument, NULL, OPT_LABEL},
    {"workdir", required_argument, NULL, OPT_WORKDIR},
    {"env", required_argument, NULL, OPT_ENV},
    {"stdout", required_argument, NULL, OPT_STDOUT},
    {"stderr", required_argument, NULL, OPT_STDERR},
    {"seccomp", required_argument, NULL, OPT_SECCOMP},
    {"allow-net", required_argument, NULL, OPT_ALLOW_NET},
    {"deny-net", required_argument, NULL, OPT_DENY_NET},
    {"spec", required_argument, NULL, OPT_SPEC},
    {"no-sandbox", no_argument, NULL, OPT_NO_SANDBOX},
    {"no-private-tmp", no_argument, NULL, OPT_NO_PRIVATE_TMP},
    {"private-tmp", no_argument, NULL, OPT_PRIVATE_TMP},
    {"tmp-size", required_argument, NULL, OPT_TMP_SIZE},
    {"no-protect-system", no_argument, NULL, OPT_NO_PROTECT_SYSTEM},
    {"read-only", required_argument, NULL, OPT_READ_ONLY},
    {"inaccessible", required_argument, NULL, OPT_INACCESSIBLE},
    {"bind", required_argument, NULL, OPT_BIND},
    {"ipc-ns", no_argument, NULL, OPT_IPC_NS},
    {"uts-ns", no_argument, NULL, OPT_UTS_NS},
    {"pid-ns", no_argument, NULL, OPT_PID_NS},
    {"landlock", no_argument, NULL, OPT_LANDLOCK},
    {"no-landlock", no_argument, NULL, OPT_NO_LANDLOCK},
    {"private-dev", no_argument, NULL, OPT_PRIVATE_DEV},
    {"no-private-dev", no_argument, NULL, OPT_NO_PRIVATE_DEV},
    {"stdin", required_argument, NULL, OPT_STDIN},
    {"pty", no_argument, NULL, OPT_PTY},
    {"detach-on-disconnect", no_argument, NULL, OPT_DETACH},
    {"env-all", no_argument, NULL, OPT_ENV_ALL},
    {"env-keep", required_argument, NULL, OPT_ENV_KEEP},
    {"no-slurm", no_argument, NULL, OPT_NO_SLURM},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {}};

static void set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = strdup(v);
	if (!*dst)
		die("out of memory");
}

static void push_str(char ***v, size_t *n, const char *s)
{
	*v = realloc(*v, (*n + 2) * sizeof(char *));
	if (!*v)
		die("out of memory");
	(*v)[(*n)++] = strdup(s);
	(*v)[*n] = NULL;
}

/*
 * A file the user names (--spec, a --seccomp path), read here with the user's own rights: a
 * regular file of at most max bytes, opened without waiting (a FIFO or a device is refused,
 * not read). Exits with a message naming the option.
 */
static char *read_user_file(const char *opt, const char *path, size_t max, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	struct stat st;
	char *buf;
	size_t n = 0;

	if (fd < 0)
		die("%s %s: %s", opt, path, strerror(errno));
	if (fstat(fd, &st) < 0)
		die("%s %s: %s", opt, path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		die("%s %s: not a regular file", opt, path);
	if ((uint64_t)st.st_size > max)
		die("%s %s: larger than %zu bytes", opt, path, max);
	buf = malloc(max + 1);
	if (!buf)
		die("out of memory");
	for (;;) {
		ssize_t k = read(fd, buf + n, max + 1 - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			die("%s %s: %s", opt, path, strerror(errno));
		if (k == 0)
			break;
		n += (size_t)k;
		if (n > max)
			die("%s %s: larger than %zu bytes", opt, path, max);
	}
	buf[n] = 0;
	if (strlen(buf) != n)
		die("%s %s: contains a NUL byte", opt, path);
	*ret_len = n;
	return buf;
}

/* run: a limit flag (--memory ... --audit-bytes) into the spec; false if c is not one. */
static bool run_limit_flag(struct task_spec *sp, int c, int *e, char *err, size_t errlen)
{
	uint64_t u;
	double d;

	switch (c) {
	case OPT_MEMORY:
		if (parse_size(optarg, &sp->memory_max) < 0 || sp->memory_max == 0)
			die("--memory: invalid size \"%s\" (e.g. 512M, 2G)", optarg);
		break;
	case OPT_MEMORY_HIGH:
		if (parse_size(optarg, &sp->memory_high) < 0)
			die("--memory-high: invalid size \"%s\"", optarg);
		break;
	case OPT_SWAP:
		if (parse_size(optarg, &sp->swap_max) < 0)
			die("--swap: invalid size \"%s\"", optarg);
		break;
	case OPT_CPUS:
		if (parse_double(optarg, &d) < 0 || d < 0.01 || d > 4096)
			die("--cpus: expected a number of cores between 0.01 and 4096, got "
			    "\"%s\"",
			    optarg);
		sp->cpus = d;
		break;
	case OPT_CPU_WEIGHT:
		if (parse_u64(optarg, &u) < 0 || u < 1 || u > 10000)
			die("--cpu-weight: expected 1-10000, got \"%s\"", optarg);
		sp->cpu_weight = (uint32_t)u;
		break;
	case OPT_PIDS:
		if (parse_u64(optarg, &u) < 0 || u < 1 || u > 4194304)
			die("--pids: expected 1-4194304, got \"%s\"", optarg);
		sp->pids_max = u;
		break;
	case OPT_IO_READ:
	case OPT_IO_WRITE: {
		/* a device path is resolved here, as the user: the agent gets MAJ:MIN */
		const char *eq = strrchr(optarg, '=');
		_cleanup_free_ char *arg = NULL;
		struct stat st;

		if (optarg[0] == '/' && eq) {
			_cleanup_free_ char *dev = strndup(optarg, (size_t)(eq - optarg));

			if (!dev)
				die("out of memory");
			if (stat(dev, &st) < 0)
				die("--io-%s-bps %s: %s", c == OPT_IO_WRITE ? "write" : "read", dev,
				    strerror(errno));
			if (!S_ISBLK(st.st_mode))
				die("--io-%s-bps %s: not a block device",
				    c == OPT_IO_WRITE ? "write" : "read", dev);
			if (asprintf(&arg, "%u:%u%s", major(st.st_rdev), minor(st.st_rdev), eq) < 0)
				die("out of memory");
		}
		*e = spec_set_io(sp, arg ? arg : optarg, c == OPT_IO_WRITE, err, errlen);
		break;
	}
	case OPT_TIME:
		if (parse_duration_ns(optarg, &sp->time_limit_ns) < 0 || !sp->time_limit_ns)
			die("--time: invalid duration \"%s\" (seconds, or 90s, 5m, 2h)", optarg);
		break;
	case OPT_CPU_TIME:
		if (parse_duration_ns(optarg, &sp->cpu_time_limit_ns) < 0 || !sp->cpu_time_limit_ns)
			die("--cpu-time: invalid duration \"%s\"", optarg);
		break;
	case OPT_GPUS:
		if (parse_u64(optarg, &u) == 0) {
			if (u > 64)
				die("--gpus: at most 64");
			sp->gpus = (uint32_t)u;
			free(sp->gpu_list);
			sp->gpu_list = NULL;
		} else {
			for (const char *p = optarg; *p; p++)
				if ((*p < '0' || *p > '9') && *p != ',')
					die("--gpus: expected a count or a list like 0,2");
			set_str(&sp->gpu_list, optarg);
			sp->gpus = 1;
			for (const char *p = optarg; *p; p++)
				sp->gpus += *p == ',';
		}
		break;
	case OPT_GPU_MEMORY:
		if (parse_size(optarg, &sp->gpu_memory_max) < 0)
			die("--gpu-memory: invalid size \"%s\"", optarg);
		break;
	case OPT_AUDIT_RATE:
		if (parse_u64(optarg, &sp->audit_rate) < 0 || sp->audit_rate < 1 ||
		    sp->audit_rate > 100000000)
			die("--audit-rate: expected 1-100000000 records per second, got "
			    "\"%s\"",
			    optarg);
		break;
	case OPT_AUDIT_BYTES:
		if (parse_size(optarg, &sp->audit_bytes) < 0 || !sp->audit_bytes)
			die("--audit-bytes: invalid size \"%s\"", optarg);
		break;
	default:
		return false;
	}
	return true;
}

/* run: the other flags (user, files, network, sandbox) into the spec; false if c is none. */
static bool run_other_flag(struct task_spec *sp, int c, int *e, char *err, size_t errlen)
{
	switch (c) {
	case OPT_USER:
		set_str(&sp->user, optarg);
		break;
	case OPT_ACCOUNT:
		set_str(&sp->account, optarg);
		break;
	case OPT_JOB:
		set_str(&sp->job, optarg);
		break;
	case OPT_LABEL:
		*e = spec_set_label(sp, optarg, err, errlen);
		break;
	case OPT_WORKDIR:
		set_str(&sp->workdir, optarg);
		break;
	case OPT_ENV:
		*e = spec_set_env(sp, optarg, err, errlen);
		break;
	case OPT_STDOUT:
		set_str(&sp->stdout_path, optarg);
		break;
	case OPT_STDERR:
		set_str(&sp->stderr_path, optarg);
		break;
	case OPT_STDIN:
		set_str(&sp->stdin_path, optarg);
		break;
	case OPT_SECCOMP:
		set_str(&sp->seccomp, optarg);
		break;
	case OPT_ALLOW_NET:
		push_str(&sp->net_allow, &sp->n_net_allow, optarg);
		break;
	case OPT_DENY_NET:
		push_str(&sp->net_deny, &sp->n_net_deny, optarg);
		break;
	case OPT_NO_SANDBOX:
		sp->sb_mount_ns = 0;
		break;
	case OPT_NO_PRIVATE_TMP:
		sp->sb_private_tmp = 0;
		break;
	case OPT_PRIVATE_TMP:
		sp->sb_private_tmp = 1;
		break;
	case OPT_TMP_SIZE:
		if (spec_tmp_size_check(optarg) < 0)
			die("--tmp-size: expected a size (512M, 2G) or a percentage of RAM "
			    "(10%%), got \"%s\"",
			    optarg);
		set_str(&sp->sb_tmp_size, optarg);
		break;
	case OPT_NO_PROTECT_SYSTEM:
		sp->sb_protect_system = 0;
		break;
	case OPT_READ_ONLY:
		*e = spec_sandbox_path_check(optarg, "read-only", err, errlen);
		push_str(&sp->sb_read_only, &sp->n_sb_read_only, optarg);
		break;
	case OPT_INACCESSIBLE:
		*e = spec_sandbox_path_check(optarg, "inaccessible", err, errlen);
		push_str(&sp->sb_inaccessible, &sp->n_sb_inaccessible, optarg);
		break;
	case OPT_BIND:
		*e = spec_sandbox_bind_check(optarg, "bind", err, errlen);
		push_str(&sp->sb_bind, &sp->n_sb_bind, optarg);
		break;
	case OPT_IPC_NS:
		sp->sb_ipc_ns = 1;
		break;
	case OPT_UTS_NS:
		sp->sb_uts_ns = 1;
		break;
	case OPT_PID_NS:
		sp->sb_pid_ns = 1;
		break;
	case OPT_LANDLOCK:
	case OPT_NO_LANDLOCK:
		sp->sb_landlock = c == OPT_LANDLOCK;
		break;
	case OPT_PRIVATE_DEV:
	case OPT_NO_PRIVATE_DEV:
		sp->sb_private_dev = c == OPT_PRIVATE_DEV;
		break;
	default:
		return false;
	}
	return true;
}

/* run: refuse options that are not UTF-8 (see cmd_run). */
static void run_check_utf8(int argc, char **argv)
{
	/* The command's arguments and environment values are carried as bytes (spec_to_json:
	 * {"b64": ...} for those that are not UTF-8). Job, account, labels, variable names and
	 * the other options travel as JSON text: bytes that are not UTF-8 are refused here, with
	 * the argument named, never dropped or changed. */
	for (int k = 1; k < argc; k++) {
		_cleanup_free_ char *name = NULL;
		const char *arg = argv[k];
		ssize_t at;

		if (strcmp(arg, "--") == 0)
			break;
		if (k > 1 && strcmp(argv[k - 1], "--env") == 0)
			arg = name = strndup(arg, strcspn(arg, "="));
		else if (strncmp(arg, "--env=", 6) == 0)
			arg = name = strndup(arg, 6 + strcspn(arg + 6, "="));
		if (!arg)
			die("out of memory");
		at = utf8_invalid_at(arg);
		if (at >= 0)
			die("%s%s\"%s\": not valid UTF-8 (byte 0x%02x at offset %zd); corral "
			    "carries job, account, labels, variable names and options as UTF-8 "
			    "text "
			    "(command arguments and environment values may be any bytes)",
			    k > 1 && argv[k - 1][0] == '-' && !strchr(argv[k - 1], '=')
				? argv[k - 1]
				: "",
			    k > 1 && argv[k - 1][0] == '-' ? " " : "", argv[k],
			    (unsigned char)arg[at], at);
	}
}

/* run --spec FILE: the spec it holds (a spec file may leave out the command). */
static void run_read_spec_file(const char *spec_file, struct task_spec *ret)
{
	_cleanup_free_ char *txt = NULL;
	struct task_spec tmp;
	char err[1024];
	json_error_t e;
	size_t len;
	json_t *j;

	txt = read_user_file("--spec", spec_file, 1 << 20, &len);
	spec_init(&tmp);
	j = json_loadb(txt, len, JSON_REJECT_DUPLICATES, &e);
	if (!j)
		die("--spec %s: invalid JSON at line %d column %d: %s", spec_file, e.line, e.column,
		    e.text);
	if (!json_object_get(j, "command") && json_is_object(j))
		json_object_set_new(j, "command", json_pack("[s]", "-"));
	if (spec_from_json(j, &tmp, err, sizeof(err)) < 0)
		die("--spec %s: %s", spec_file, err);
	json_decref(j);
	*ret = tmp;
}

/* Is NAME=... among the spec's variables? */
static bool env_has(const struct task_spec *sp, const char *kv)
{
	size_t kl = strcspn(kv, "=");

	for (size_t i = 0; i < sp->envc; i++)
		if (strncmp(sp->env[i], kv, kl) == 0 && sp->env[i][kl] == '=')
			return true;
	return false;
}

/* --env-all / --env-keep: the caller's variables, after the --env ones (which win). */
static void run_env_from_caller(struct task_spec *sp, bool all, char **keep, size_t nkeep)
{
	extern char **environ;
	char err[256];

	for (size_t i = 0; i < nkeep; i++) {
		const char *v = getenv(keep[i]);
		_cleanup_free_ char *kv = NULL;

		if (!v)
			continue; /* not set here: not set there either */
		if (asprintf(&kv, "%s=%s", keep[i], v) < 0)
			die("out of memory");
		if (!env_has(sp, kv) && spec_set_env(sp, kv, err, sizeof(err)) < 0)
			die("--env-keep %s: %s", keep[i], err);
	}
	for (char **e = all ? environ : NULL; e && *e; e++)
		/* a name the spec cannot carry (not UTF-8, a shell's exported function
		 * "BASH_FUNC_f%%") is left out, as srun leaves out what it cannot pass */
		if (strchr(*e, '=') && !env_has(sp, *e))
			(void)spec_set_env(sp, *e, err, sizeof(err));
}

/*
 * Inside a Slurm job (SLURM_JOB_ID set): its id, account, user and partition for the agent,
 * which makes them the task's job, account and labels unless given ([agent] slurm_job).
 * Values that are not UTF-8 text are left out.
 */
static void run_slurm(json_t *req)
{
	static const char *const vars[][2] = {{"job_id", "SLURM_JOB_ID"},
					      {"account", "SLURM_JOB_ACCOUNT"},
					      {"user", "SLURM_JOB_USER"},
					      {"partition", "SLURM_JOB_PARTITION"}};
	json_t *sl;

	if (!getenv("SLURM_JOB_ID"))
		return;
	sl = json_object();
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
		const char *v = getenv(vars[i][1]);

		if (v && *v && utf8_invalid_at(v) < 0)
			json_object_set_new(sl, vars[i][0], json_string(v));
	}
	json_object_set_new(req, "slurm", sl);
}

/* The run request: the spec checked by the agent's own validation (errors by field), the
 * stdio it gets, Slurm's job when inside one. *id_on_stdout: whether stdout stays ours. */
static json_t *run_request(struct task_spec *spec, const struct run_io *io, bool wait, bool detach,
			   bool no_slurm, bool *id_on_stdout)
{
	char err[1024];
	json_t *req, *sj, *stdio;

	/* Round trip through the agent's own validation to report errors by field. */
	sj = spec_to_json(spec);
	{
		struct task_spec check;

		spec_init(&check);
		if (spec_from_json(sj, &check, err, sizeof(err)) < 0)
			die("%s", err);
		spec_clear(&check);
	}
	spec_clear(spec);
	req = json_pack("{s:s,s:o,s:b}", "op", "run", "spec", sj, "wait", wait);
	if (!no_slurm)
		run_slurm(req);
	/* The task id goes to stdout unless stdout is the task's: then to stderr (-q: not). */
	*id_on_stdout = true;
	stdio = json_array();
	for (size_t i = 0; i < io->n; i++) {
		json_array_append_new(stdio, json_string(io->keys[i]));
		if (strcmp(io->keys[i], "out") == 0)
			*id_on_stdout = false;
	}
	if (io->n)
		json_object_set_new(req, "stdio", stdio);
	else
		json_decref(stdio);
	if (io->pty)
		json_object_set_new(req, "pty", json_true());
	if (detach)
		json_object_set_new(req, "detach", json_true());
	return req;
}

static int cmd_run(int argc, char **argv)
{
	struct task_spec spec;
	char err[1024];
	bool wait = false, detach = false, quiet = false, env_all = false, no_slurm = false;
	struct run_io io = {.master = -1};
	const char *spec_file = NULL;
	char **env_keep = NULL;
	size_t n_env_keep = 0;
	json_t *req;
	sigset_t fwd;
	int c, fd, rc, sfd = -1;
	bool id_on_stdout;

	run_check_utf8(argc, argv);
	spec_init(&spec);
	/* The spec file first, so that flags override it. */
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hq", run_opts, NULL)) != -1)
		if (c == OPT_SPEC)
			spec_file = optarg;
	if (spec_file)
		run_read_spec_file(spec_file, &spec);
	optind = 1;
	while ((c = getopt_long(argc, argv, "+:hq", run_opts, NULL)) != -1) {
		int e = 0;

		if (run_limit_flag(&spec, c, &e, err, sizeof(err)) ||
		    run_other_flag(&spec, c, &e, err, sizeof(err))) {
			if (e < 0)
				die("--%s", err);
			continue;
		}
		switch (c) {
		case OPT_WAIT:
			wait = true;
			break;
		case OPT_PTY:
			io.pty = true;
			break;
		case OPT_DETACH:
			detach = true;
			break;
		case OPT_ENV_ALL:
			env_all = true;
			break;
		case OPT_ENV_KEEP:
			if (!*optarg || strchr(optarg, '='))
				die("--env-keep: expected a variable name, got \"%s\"", optarg);
			push_str(&env_keep, &n_env_keep, optarg);
			break;
		case OPT_NO_SLURM:
			no_slurm = true;
			break;
		case 'q':
			quiet = true;
			break;
		case OPT_SPEC:
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case ':':
			die("run: option %s needs an argument; try --help", argv[optind - 1]);
		default:
			die("run: unknown option %s; try --help", argv[optind - 1]);
		}
	}
	if (optind < argc) {
		if (spec_set_argv(&spec, argv + optind, (size_t)(argc - optind)) < 0)
			die("out of memory");
	} else if (!spec_file || (spec.argc == 1 && strcmp(spec.argv[0], "-") == 0)) {
		die("run: missing command (corralctl run [OPTIONS] -- CMD [ARGS...])");
	}
	/* A profile path is read here, with the user's rights; the agent gets its content. */
	if (spec.seccomp && strchr(spec.seccomp, '/') && !spec.seccomp_profile) {
		size_t plen;

		spec.seccomp_profile =
		    read_user_file("--seccomp", spec.seccomp, SPEC_PROFILE_MAX, &plen);
	}
	if (!spec.workdir) {
		char cwd[4096];

		if (getcwd(cwd, sizeof(cwd)))
			set_str(&spec.workdir, cwd);
	}
	if (!wait && (io.pty || detach))
		die("%s: only with --wait (the task's terminal and lifetime follow this "
		    "command)",
		    io.pty ? "--pty" : "--detach-on-disconnect");
	run_env_from_caller(&spec, env_all, env_keep, n_env_keep);
	for (size_t i = 0; i < n_env_keep; i++)
		free(env_keep[i]);
	free(env_keep);
	if (wait)
		run_io_prepare(&io, &spec);
	req = run_request(&spec, &io, wait, detach, no_slurm, &id_on_stdout);
	/* Signals wait in a signalfd from before the request: none is lost while the task
	 * starts (they are forwarded once its id is known). */
	sigemptyset(&fwd);
	for (size_t i = 0; wait && i < ARRAY_SIZE(fwd_signals); i++)
		sigaddset(&fwd, fwd_signals[i]);
	if (wait) {
		sigprocmask(SIG_BLOCK, &fwd, NULL);
		sfd = signalfd(-1, &fwd, SFD_CLOEXEC | SFD_NONBLOCK);
		if (sfd < 0)
			die("signalfd: %s", strerror(errno));
	}
	fd = connect_agent();
	send_req_fds(fd, req, io.fds, io.n);
	if (io.pty)
		close(io.fds[0]); /* the slave: the task's now (the master sees EIO once it ends) */
	rc = run_wait_loop(fd, sfd, &io, wait, quiet, id_on_stdout);
	close(fd);
	return rc;
}

static void fmt_time(uint64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / NSEC_PER_SEC);
	struct tm tm;

	localtime_r(&s, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

/* ps --all's table without --limit: a page of this many rows (--json: the whole list) */
#define PS_PAGE 100

static int cmd_ps(int argc, char **argv)
{
	bool all = false, as_json = false;
	json_t *r, *req, *tasks, *t;
	const char *after = NULL, *next;
	long long limit = 0;
	size_t i;

	for (int k = 1; k < argc; k++) {
		if (strcmp(argv[k], "--all") == 0 || strcmp(argv[k], "-a") == 0) {
			all = true;
		} else if (strcmp(argv[k], "--json") == 0) {
			as_json = true;
		} else if (strcmp(argv[k], "--limit") == 0 && k + 1 < argc) {
			char *end = NULL;

			errno = 0;
			limit = strtoll(argv[++k], &end, 10);
			if (errno || !*argv[k] || *end || limit < 1)
				die("ps: --limit %s: not a positive number", argv[k]);
		} else if (strcmp(argv[k], "--after") == 0 && k + 1 < argc) {
			after = argv[++k];
		} else if (strcmp(argv[k], "--limit") == 0 || strcmp(argv[k], "--after") == 0) {
			needs_value("ps", argv[k]);
		} else {
			bad_arg("ps", argv[k]);
		}
	}
	/* the table for a person: a page of the newest, whatever the history kept */
	if (all && !as_json && !limit)
		limit = PS_PAGE;
	req = json_pack("{s:s,s:b}", "op", "ps", "all", all);
	if (req && limit)
		json_object_set_new(req, "limit", json_integer(limit));
	if (req && after)
		json_object_set_new(req, "after", json_string(after));
	r = call(req);
	check_ok(r);
	tasks = json_object_get(r, "tasks");
	/* a page with more after it: the cursor of the next one, on stderr */
	next = json_string_value(json_object_get(r, "next"));
	if (next)
		fprintf(stderr, "more: corralctl ps%s --limit %lld --after %s\n",
			all ? " --all" : "", limit, next);
	if (as_json) {
		json_dumpf(tasks, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
		putchar('\n');
		json_decref(r);
		return 0;
	}
	eprintf(stdout, "%-26s %-8s %-10s %8s %-19s %s\n", "ID", "STATE", "USER", "PID", "STARTED",
		"COMMAND");
	json_array_foreach(tasks, i, t)
	{
		char when[32] = "-";
		uint64_t st = (uint64_t)json_integer_value(json_object_get(t, "start_ns"));

		if (st)
			fmt_time(st, when, sizeof(when));
		eprintf(stdout, "%-26s %-8s %-10s %8lld %-19s %s\n",
			json_string_value(json_object_get(t, "id")),
			json_string_value(json_object_get(t, "state")),
			json_string_value(json_object_get(t, "user")) ?: "",
			(long long)json_integer_value(json_object_get(t, "pid")), when,
			json_string_value(json_object_get(t, "command")) ?: "");
	}
	json_decref(r);
	return 0;
}

static int cmd_show(int argc, char **argv)
{
	const char *id = NULL;
	bool as_json = false;
	json_t *r, *rec, *u, *ex, *task;

	for (int k = 1; k < argc; k++) {
		if (strcmp(argv[k], "--json") == 0)
			as_json = true;
		else if (!id && argv[k][0] != '-')
			id = argv[k];
		else
			bad_arg("show", argv[k]);
	}
	if (!id)
		die("show: missing task id; try --help");
	r = call(json_pack("{s:s,s:s}", "op", "show", "task", id));
	check_ok(r);
	rec = json_object_get(r, "record");
	if (as_json) {
		json_dumpf(rec, stdout, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
		putchar('\n');
		json_decref(r);
		return 0;
	}
	task = json_object_get(rec, "task");
	u = json_object_get(rec, "usage");
	ex = json_object_get(rec, "exit");
	eprintf(stdout, "Task:     %s\n", json_string_value(json_object_get(task, "id")));
	eprintf(stdout, "State:    %s\n",
		json_string_value(json_object_get(rec, "state")) ?: "ended");
	eprintf(stdout, "User:     %s (uid %lld)\n",
		json_string_value(json_object_get(task, "user")) ?: "",
		(long long)json_integer_value(json_object_get(task, "uid")));
	if (json_object_get(task, "account"))
		eprintf(stdout, "Account:  %s\n",
			json_string_value(json_object_get(task, "account")));
	if (json_object_get(task, "job"))
		eprintf(stdout, "Job:      %s\n", json_string_value(json_object_get(task, "job")));
	if (ex && json_object_get(ex, "status"))
		eprintf(stdout, "Exit:     %s code %lld signal %lld%s%s\n",
			json_string_value(json_object_get(ex, "status")),
			(long long)json_integer_value(json_object_get(ex, "code")),
			(long long)json_integer_value(json_object_get(ex, "signal")),
			json_object_get(ex, "message") ? " — " : "",
			json_string_value(json_object_get(ex, "message")) ?: "");
	eprintf(stdout, "Wall:     %.3f s\n",
		(double)json_integer_value(json_object_get(u, "wall_ns")) / 1e9);
	eprintf(stdout, "CPU:      user %.3f s, system %.3f s\n",
		(double)json_integer_value(json_object_get(u, "cpu_user_ns")) / 1e9,
		(double)json_integer_value(json_object_get(u, "cpu_system_ns")) / 1e9);
	eprintf(stdout, "Memory:   peak %.1f MiB\n",
		(double)json_integer_value(json_object_get(u, "memory_peak_bytes")) / 1048576.0);
	eprintf(stdout, "IO:       read %lld B, written %lld B\n",
		(long long)json_integer_value(json_object_get(u, "io_read_bytes")),
		(long long)json_integer_value(json_object_get(u, "io_write_bytes")));
	eprintf(stdout, "Network:  rx %lld B, tx %lld B\n",
		(long long)json_integer_value(json_object_get(u, "net_rx_bytes")),
		(long long)json_integer_value(json_object_get(u, "net_tx_bytes")));
	json_decref(r);
	return 0;
}

static int cmd_kill(int argc, char **argv)
{
	const char *id = NULL;
	int sig = SIGTERM;
	json_t *r;

	for (int k = 1; k < argc; k++) {
		if ((strcmp(argv[k], "--signal") == 0 || strcmp(argv[k], "-s") == 0) &&
		    k + 1 < argc) {
			if (parse_signal(argv[++k], &sig) < 0)
				die("--signal: unknown signal \"%s\"", argv[k]);
		} else if (strncmp(argv[k], "--signal=", 9) == 0) {
			if (parse_signal(argv[k] + 9, &sig) < 0)
				die("--signal: unknown signal \"%s\"", argv[k] + 9);
		} else if (strcmp(argv[k], "--signal") == 0 || strcmp(argv[k], "-s") == 0) {
			needs_value("kill", argv[k]);
		} else if (!id && argv[k][0] != '-')
			id = argv[k];
		else
			bad_arg("kill", argv[k]);
	}
	if (!id)
		die("kill: missing task id; try --help");
	r = call(json_pack("{s:s,s:s,s:i}", "op", "kill", "task", id, "signal", sig));
	check_ok(r);
	json_decref(r);
	return 0;
}

static int cmd_wait(int argc, char **argv)
{
	int fd, rc;

	for (int k = 1; k < argc; k++)
		if (argv[k][0] == '-' || k > 1)
			bad_arg("wait", argv[k]);
	if (argc != 2)
		die("wait: missing task id; try --help");
	fd = connect_agent();
	send_req(fd, json_pack("{s:s,s:s}", "op", "wait", "task", argv[1]));
	rc = wait_ended(fd);
	close(fd);
	return rc;
}

/* "2026-12-06 09:12:03 (4m ago)", or "never" */
static void fmt_when(uint64_t ns, char *buf, size_t len)
{
	char when[32];
	uint64_t now = (uint64_t)time(NULL) * NSEC_PER_SEC, ago;

	if (!ns) {
		snprintf(buf, len, "never");
		return;
	}
	fmt_time(ns, when, sizeof(when));
	ago = now > ns ? (now - ns) / NSEC_PER_SEC : 0;
	if (ago < 120)
		snprintf(buf, len, "%s (%llus ago)", when, (unsigned long long)ago);
	else if (ago < 7200)
		snprintf(buf, len, "%s (%llum ago)", when, (unsigned long long)ago / 60);
	else
		snprintf(buf, len, "%s (%lluh ago)", when, (unsigned long long)ago / 3600);
}

static const char *jstr(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k)) ?: "-";
}

static long long jint(json_t *o, const char *k)
{
	return (long long)json_integer_value(json_object_get(o, k));
}

/* The energy attribution's line: RAPL or not, and what sharing the periods has cost. */
static void status_energy(json_t *e)
{
	const long long n = jint(e, "attributions");

	if (!json_is_true(json_object_get(e, "rapl"))) {
		eprintf(stdout, "Energy:       no RAPL zones (no CPU or DRAM energy per task)\n");
		return;
	}
	eprintf(stdout, "Energy:       RAPL; %lld periods attributed, %.1f us of CPU each\n", n,
		n > 0 ? (double)jint(e, "attribution_cpu_ns") / (double)n / 1e3 : 0.0);
}

/* "812 B", "4.0 KiB", "1.0 GiB": a small spool does not read as 0.0 MiB */
static void fmt_size(long long bytes, char *buf, size_t len)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	size_t u = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%lld B", bytes);
		return;
	}
	v /= 1024.0;
	while (v >= 1024.0 && u + 1 < ARRAY_SIZE(units)) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
}

/* The time left until the next try: the backoff runs from the failure (last_error_ns), so the
 * backoff itself would overstate it by the time since. */
static void status_next_retry(json_t *up)
{
	struct timespec ts;
	double left;

	clock_gettime(CLOCK_REALTIME, &ts);
	left = ((double)jint(up, "last_error_ns") + (double)jint(up, "backoff_ms") * 1e6 -
		((double)ts.tv_sec * 1e9 + (double)ts.tv_nsec)) /
	       1e9;
	if (left > 0.05)
		eprintf(stdout, "  next retry in   %.1f s\n", left);
	else
		eprintf(stdout, "  next retry      due now\n");
}

static void status_print(json_t *ag)
{
	json_t *en = json_object_get(ag, "enforcement"), *up = json_object_get(ag, "upload"),
	       *sp = json_object_get(ag, "spool");
	char when[64], used[32], max[32];

	eprintf(stdout, "Node:         %s (corrald %s)\n", jstr(ag, "node"), jstr(ag, "version"));
	eprintf(stdout,
		"Tasks:        %lld running of %lld; %lld started, %lld ended, %lld failed "
		"to launch\n",
		jint(ag, "tasks_live"), jint(ag, "max_tasks"), jint(ag, "tasks_started"),
		jint(ag, "tasks_ended"), jint(ag, "launch_failed"));
	if (json_is_true(json_object_get(ag, "degraded")))
		eprintf(stdout, "DEGRADED:     %s\n", jstr(ag, "degraded_reason"));
	eprintf(stdout, "Enforcement:\n");
	eprintf(stdout, "  cgroup limits   %s\n", jstr(en, "cgroup_limits"));
	eprintf(stdout, "  seccomp         default profile %s\n", jstr(en, "seccomp_default"));
	eprintf(stdout, "  metering        %s (CPU accounted at %s)\n", jstr(en, "metering"),
		jstr(ag, "cpu_accounting"));
	eprintf(stdout, "  network policy  %s\n", jstr(en, "audit_network_policy"));
	eprintf(stdout, "  mount namespace %s\n", jstr(en, "mount_namespace"));
	eprintf(stdout, "  landlock        %s\n", jstr(en, "landlock"));
	eprintf(stdout, "  gpu             %s\n", jstr(en, "gpu"));
	status_energy(json_object_get(ag, "energy"));
	eprintf(stdout, "Upload:\n");
	if (!json_is_true(json_object_get(up, "configured"))) {
		eprintf(stdout, "  collector       none configured (records wait in the spool)\n");
	} else {
		const char *e = jstr(up, "last_error");

		eprintf(stdout, "  collector       %s\n", jstr(up, "url"));
		eprintf(stdout, "  state           %s\n",
			*e && strcmp(e, "-") ? "FAILING (records stay in the spool and are resent)"
					     : "ok");
		fmt_when((uint64_t)jint(up, "last_success_ns"), when, sizeof(when));
		eprintf(stdout, "  last success    %s\n", when);
		if (*e && strcmp(e, "-")) {
			fmt_when((uint64_t)jint(up, "last_error_ns"), when, sizeof(when));
			eprintf(stdout, "  last error      %s: %s\n", when, e);
			status_next_retry(up);
		}
		eprintf(stdout,
			"  sent            %lld batches, %lld records acked, %lld rejected\n",
			jint(up, "batches_sent"), jint(up, "records_acked"), jint(up, "rejected"));
	}
	eprintf(stdout, "  pending         %lld records\n", jint(up, "pending_records"));
	fmt_size(jint(sp, "bytes"), used, sizeof(used));
	fmt_size(jint(sp, "max_bytes"), max, sizeof(max));
	eprintf(stdout, "Spool:        %s of %s (%.1f%%), %lld records refused\n", used, max,
		jint(sp, "max_bytes")
		    ? 100.0 * (double)jint(sp, "bytes") / (double)jint(sp, "max_bytes")
		    : 0.0,
		jint(sp, "refused"));
}

static int cmd_status(int argc, char **argv)
{
	bool as_json = false;
	json_t *r;

	for (int k = 1; k < argc; k++) {
		if (strcmp(argv[k], "--json") == 0)
			as_json = true;
		else
			bad_arg("status", argv[k]);
	}
	r = call(json_pack("{s:s}", "op", "status"));
	check_ok(r);
	if (as_json) {
		json_dumpf(json_object_get(r, "agent"), stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
		putchar('\n');
	} else {
		status_print(json_object_get(r, "agent"));
	}
	json_decref(r);
	return 0;
}

int main(int argc, char **argv)
{
	int i = 1;

	socket_path = getenv("CORRAL_SOCKET") ?: DEFAULT_SOCKET;
	while (i < argc && argv[i][0] == '-') {
		if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
			socket_path = argv[i + 1];
			i += 2;
		} else if (strncmp(argv[i], "--socket=", 9) == 0) {
			socket_path = argv[i] + 9;
			i++;
		} else if (strcmp(argv[i], "--socket") == 0) {
			needs_value(NULL, argv[i]);
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "-V") == 0 || strcmp(argv[i], "--version") == 0) {
			printf("corralctl %s\n", CORRAL_VERSION);
			return 0;
		} else {
			die("unknown option %s; try --help", argv[i]);
		}
	}
	if (i >= argc)
		die("missing command (run, ps, show, kill, wait, status); try --help");
	argc -= i;
	argv += i;
	if (strcmp(argv[0], "run") == 0)
		return cmd_run(argc, argv);
	if (strcmp(argv[0], "ps") == 0)
		return cmd_ps(argc, argv);
	if (strcmp(argv[0], "show") == 0)
		return cmd_show(argc, argv);
	if (strcmp(argv[0], "kill") == 0)
		return cmd_kill(argc, argv);
	if (strcmp(argv[0], "wait") == 0)
		return cmd_wait(argc, argv);
	if (strcmp(argv[0], "status") == 0)
		return cmd_status(argc, argv);
	die("unknown command \"%s\"; try --help", argv[0]);
}
