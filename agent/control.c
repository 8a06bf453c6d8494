/* SPDX-License-Identifier: MIT */
/*
 * Control API: a unix stream socket; each request and each reply is one JSON object on one
 * line. Clients are identified by SO_PEERCRED (uid/gid of the connecting process).
 *   {"op":"run","spec":{...},"wait":bool} -> {"ok":true,"task":ID} (+ later, with wait,
 *                                          {"ok":true,"event":"ended","task":ID,"record":{...}})
 *     with wait also: "stdio":["in","out","err"] (the streams whose descriptors came with the
 *     request, SCM_RIGHTS, in that order; see stdio_take), "pty":bool (the first is a terminal
 *     to become the task's controlling one), "detach":bool (the task is not killed when this
 *     connection goes away; else SIGTERM, then SIGKILL after kill_grace). A kill sent on this
 *     connection is the client's (exit.by "client"), from any other one an operator's.
 *   {"op":"ps","all":bool,"limit":N,"after":C} -> {"ok":true,"tasks":[...],"next":C}
 *   {"op":"show","task":ID}                -> {"ok":true,"record":{...}}
 *   {"op":"kill","task":ID,"signal":N}     -> {"ok":true}
 *   {"op":"wait","task":ID}                -> {"ok":true,"event":"ended","record":{...}}
 *   {"op":"status"}                        -> {"ok":true,"agent":{...}}
 * Errors: {"ok":false,"error":"message"}.
 *
 * Bounds, so that no local user can stall or lock out the agent (docs/design.md "Control
 * socket bounds"): a connection whose unsent replies pass OUT_HIGH is not read (its pipelined
 * requests wait) until they drain, and is closed past OUT_MAX or when its replies make no
 * progress for send_timeout; a request line must be complete within request_timeout; a
 * connection that asks nothing and is owed nothing is closed after idle_timeout. Each non-root
 * uid holds at most conn_per_uid connections, members of the agent's group included (a runaway
 * script of one of them must not lock out the others); the last CONTROL_CONN_RESERVED of the
 * CONTROL_CONN_MAX are only for root and the group: a member takes one only while it holds
 * fewer than CONTROL_CONN_RESERVED_PER_MEMBER connections, and the last CONTROL_CONN_ROOT_ONLY
 * are root's alone.
 */
#include "accounting/spool.h"
#include "accounting/uploader.h"
#include "agent/agent.h"
#include "corral_version.h"
#include "common/escape.h"
#include "agent/users.h"
#include "agent/gpu_glue.h"
#include "agent/admission.h"
#include "agent/sandbox.h"
#include "agent/log.h"
#include "agent/loop.h"
#include "agent/plan.h"
#include "agent/task.h"
#include "agent/control.h"
#include "agent/node_sample.h"
#include "bpf/meter.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "isolation/cgroup.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <sys/un.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define REQ_MAX	     (1 << 20)
#define OUT_HIGH     (256u << 10) /* unsent bytes above which no request is read */
#define OUT_MAX	     (16u << 20)  /* unsent bytes past which the connection is closed */
#define CONN_FDS_MAX 3		  /* descriptors a request may carry (stdin, stdout, stderr) */

struct conn {
	struct agent *a;
	int fd;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	char *in;
	size_t in_len;
	char *out;
	size_t out_len, out_off;
	bool closing;	       /* close after the output drains */
	bool privileged;       /* root or the agent's group, at connect time */
	bool paused;	       /* replies over OUT_HIGH: requests are not read */
	bool dead;	       /* to be closed by control_tick (why: in log) */
	unsigned waiting;      /* number of tasks this connection waits for */
	int fds[CONN_FDS_MAX]; /* descriptors received with the request being read */
	size_t n_fds;
	bool fds_bad;	      /* more than CONN_FDS_MAX came (closed): the next run is refused */
	uint64_t active_mono; /* last request or reply byte */
	uint64_t req_mono;    /* first byte of the incomplete request in `in`, 0: none */
	uint64_t out_mono;    /* last progress sending, while replies are pending */
	struct conn *next;
};

static void on_listen(void *data, int fd, uint32_t events);
static void on_conn(void *data, int fd, uint32_t events);
static void control_task_started(struct agent *a, struct task *t, const char *err);
static void control_task_ended(struct agent *a, struct task *t);

int control_listen(struct agent *a)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_free_ char *dir = NULL;
	char *slash;
	struct group *gr;
	int fd, r;

	/* the task table's answers (launch outcome, task end) come back through these */
	a->on_task_started = control_task_started;
	a->on_task_ended = control_task_ended;
	if (strlen(a->cfg.socket_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, a->cfg.socket_path);
	dir = strdup(a->cfg.socket_path);
	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		r = mkdir_p(dir, 0755);
		if (r < 0)
			return r;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	(void)unlink(a->cfg.socket_path);
	/*
	 * Who may connect: root, and the members of socket_group (mode 0660 by default); what
	 * each may do is decided per request from SO_PEERCRED. The socket is bound with no
	 * access for others and then opened up to its mode, so it is never wider than that.
	 */
	{
		mode_t old = umask(0177);

		r = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0 ? -errno
											    : 0;
		umask(old);
	}
	if (r < 0) {
		close(fd);
		return r;
	}
	gr = a->cfg.socket_group && *a->cfg.socket_group ? getgrnam(a->cfg.socket_group) : NULL;
	if (gr && chown(a->cfg.socket_path, 0, gr->gr_gid) < 0)
		log_warning("control socket %s: chown to group %s failed: %s", a->cfg.socket_path,
			    a->cfg.socket_group, strerror(errno));
	if (chmod(a->cfg.socket_path, a->cfg.socket_mode) < 0)
		log_warning("control socket %s: chmod %04o failed: %s", a->cfg.socket_path,
			    (unsigned)a->cfg.socket_mode, strerror(errno));
	if (!gr && a->cfg.socket_group && *a->cfg.socket_group && !(a->cfg.socket_mode & 0006))
		log_warning("control socket %s: group \"%s\" does not exist: only root can connect "
			    "(create it, or set [agent] socket_group)",
			    a->cfg.socket_path, a->cfg.socket_group);
	a->listenfd = fd;
	return loop_add(a->loop, fd, EPOLLIN, on_listen, a);
}

static void conn_drop_fds(struct conn *c)
{
	for (size_t i = 0; i < c->n_fds; i++)
		close(c->fds[i]);
	c->n_fds = 0;
}

/*
 * The run --wait client of a task went away (its connection closed, whatever the reason): the
 * task gets SIGTERM (once it runs) and SIGKILL kill_grace later (control_tick), unless the run
 * asked for detach. exit.by says "client".
 */
static void task_client_gone(struct agent *a, struct task *t)
{
	if (t->state != TASK_STARTING && t->state != TASK_RUNNING)
		return;
	t->client_gone = true;
	if (t->end_by == ACCT_BY_NONE)
		t->end_by = ACCT_BY_CLIENT;
	if (t->state == TASK_RUNNING && !t->client_term_sent && t->cg) {
		int r = cg_task_kill(t->cg, SIGTERM);

		t->client_term_sent = true;
		t->client_term_mono = now_ns(CLOCK_MONOTONIC);
		a->client_kill_due = true;
		(void)task_save(a, t); /* the SIGKILL stays due across a restart */
		log_notice("task %s: its run --wait client went away: SIGTERM sent%s%s (SIGKILL "
			   "in %.1fs)",
			   t->id, r < 0 ? ", failed: " : "", r < 0 ? strerror(-r) : "",
			   (double)a->cfg.kill_grace_ns / 1e9);
	}
}

/* client_gone: the connection was lost (not closed by the agent's own stop). */
static void conn_free_as(struct agent *a, struct conn *c, bool client_gone)
{
	struct conn **pp;

	/* Drop it from every task's waiter list. */
	for (struct task *t = a->tasks; t; t = t->next) {
		struct waiter **wp = &t->waiters;

		while (*wp) {
			if ((*wp)->conn == c) {
				struct waiter *w = *wp;

				*wp = w->next;
				if (client_gone && w->owner && !w->detach)
					task_client_gone(a, t);
				free(w);
			} else
				wp = &(*wp)->next;
		}
	}
	conn_drop_fds(c);
	for (pp = &a->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	loop_del(a->loop, c->fd);
	close(c->fd);
	free(c->in);
	free(c->out);
	free(c);
	a->n_conns--;
}

static void conn_free(struct agent *a, struct conn *c)
{
	conn_free_as(a, c, true);
}

void control_close_all(struct agent *a)
{
	/* The agent stops: its clients lose the connection, their tasks keep running. */
	while (a->conns)
		conn_free_as(a, a->conns, false);
}

static void conn_update_events(struct agent *a, struct conn *c)
{
	(void)loop_mod(a->loop, c->fd,
		       (c->paused || c->dead ? 0 : EPOLLIN) |
			   (c->out_len > c->out_off ? EPOLLOUT : 0));
}

static int conn_flush(struct agent *a, struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			return -errno;
		}
		c->out_off += (size_t)n;
		c->out_mono = c->active_mono = now_ns(CLOCK_MONOTONIC);
	}
	if (c->out_off == c->out_len) {
		c->out_off = c->out_len = 0;
	}
	conn_update_events(a, c);
	return 0;
}

static void conn_send(struct agent *a, struct conn *c, json_t *reply)
{
	char *txt = json_dumps(reply, JSON_COMPACT);
	size_t n;
	char *nb;

	json_decref(reply);
	if (!txt || c->dead) {
		free(txt);
		return;
	}
	n = strlen(txt);
	if (c->out_len - c->out_off + n + 1 > OUT_MAX) {
		/* not read while it asked for more: closed at the next tick, reply dropped */
		a->stats.conns_timed_out++;
		log_warning("control: closing the connection of uid %u pid %d: %zu bytes of "
			    "replies unread (limit %u)",
			    c->uid, (int)c->pid, c->out_len - c->out_off + n + 1, OUT_MAX);
		free(txt);
		c->dead = true;
		conn_update_events(a, c);
		return;
	}
	if (c->out_len == c->out_off)
		c->out_mono = now_ns(CLOCK_MONOTONIC);
	nb = realloc(c->out, c->out_len + n + 1);
	if (!nb) {
		free(txt);
		return;
	}
	c->out = nb;
	memcpy(c->out + c->out_len, txt, n);
	c->out[c->out_len + n] = '\n';
	c->out_len += n + 1;
	free(txt);
	(void)conn_flush(a, c);
}

static json_t *error_reply(const char *msg)
{
	return json_pack("{s:b,s:s}", "ok", 0, "error", msg);
}

/*
 * show/kill/wait/ps: the submitter, the task's user while it runs, and whoever could have run
 * the task as its user (agent_may_act_as: the same rule as run, so a member of allowed_group
 * sees and signals root's tasks only with allow_root_tasks=yes).
 */
static bool may_see(struct agent *a, struct conn *c, struct task *t)
{
	char err[256];

	if (c->uid == 0 || t->submitter_uid == c->uid ||
	    (t->uid == c->uid && t->state != TASK_ENDED))
		return true;
	return agent_may_act_as(a, c->uid, agent_is_privileged(a, c->uid, c->gid), t->uid, t->user,
				err, sizeof(err)) == 0;
}

static void add_waiter(struct task *t, struct conn *c)
{
	struct waiter *w = calloc(1, sizeof(*w));

	if (!w)
		return;
	w->conn = c;
	w->next = t->waiters;
	t->waiters = w;
	c->waiting++;
}

static json_t *ended_reply(struct agent *a, struct task *t)
{
	json_t *rec = task_record_json(a, t);

	return json_pack("{s:b,s:s,s:s,s:o*}", "ok", 1, "event", "ended", "task", t->id, "record",
			 rec);
}

/*
 * May the task user open this file with this access, by its permission bits (owner, group
 * with the user's groups, others)? ACLs and the path's directories are not looked at: a
 * descriptor is refused unless its bits alone allow it.
 */
static bool user_may_access(const struct user_info *pw, const struct stat *st, bool write)
{
	mode_t want = write ? S_IWOTH : S_IROTH;

	if (pw->uid == 0 || st->st_uid == pw->uid)
		return pw->uid == 0 || (st->st_mode & (want << 6));
	for (int i = 0; i < pw->n_groups; i++)
		if (pw->groups[i] == st->st_gid)
			return st->st_mode & (want << 3);
	return st->st_mode & want;
}

/*
 * One descriptor a client passed for a task's stream (docs/security.md "Descriptors passed by
 * run --wait"): what it is must be something the task's user could hold on its own. The agent
 * never reads or writes it; only fstat, fcntl(F_GETFL) and, for a character device, TCGETS.
 */
static int stdio_check(int fd, const char *stream, bool write, bool tty, const struct user_info *pw,
		       bool same_uid, char *err, size_t errlen)
{
	struct termios tio;
	struct stat st;
	int fl = fcntl(fd, F_GETFL);
	int acc = fl & O_ACCMODE;

	if (fl < 0 || fstat(fd, &st) < 0)
		return err_set(err, errlen, -EBADF, "stdio: %s: %s", stream, strerror(errno));
	if (fl & O_PATH)
		return err_set(err, errlen, -EINVAL, "stdio: %s: an O_PATH descriptor is refused",
			       stream);
	if (write ? acc == O_RDONLY : acc == O_WRONLY)
		return err_set(err, errlen, -EINVAL, "stdio: %s: the descriptor is not open for %s",
			       stream, write ? "writing" : "reading");
	if (tty && !(S_ISCHR(st.st_mode) && ioctl(fd, TCGETS, &tio) == 0))
		return err_set(err, errlen, -EINVAL, "stdio: %s: --pty: not a terminal", stream);
	/* a socket keeps the credentials of whoever connected it (SO_PEERCRED): a task of
	 * another user would speak as the caller */
	if (S_ISSOCK(st.st_mode) && !same_uid)
		return err_set(
		    err, errlen, -EPERM,
		    "stdio: %s: a socket of uid %u refused for a task of uid %u (use --%s "
		    "FILE)",
		    stream, (unsigned)st.st_uid, (unsigned)pw->uid, stream);
	if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
		/* a pipe or a socket the client holds: a channel, not a file of anyone's (a named
		 * FIFO is a file: its bits are checked as for one) */
		struct statfs sf;

		if (S_ISSOCK(st.st_mode) ||
		    (fstatfs(fd, &sf) == 0 && sf.f_type == (typeof(sf.f_type))PIPEFS_MAGIC))
			return 0;
	} else if (S_ISCHR(st.st_mode)) {
		/* /dev/null, or a terminal; any other device (a GPU, kvm, a disk's raw node)
		 * would pass by the device policy that a task's own open meets */
		bool null = major(st.st_rdev) == 1 && minor(st.st_rdev) == 3;

		if (null)
			return 0;
		if (ioctl(fd, TCGETS, &tio) < 0)
			return err_set(err, errlen, -EINVAL,
				       "stdio: %s: a character device other than a terminal or "
				       "/dev/null is refused (use --%s FILE)",
				       stream, stream);
		/* a terminal of the same user: what the caller holds; another user's (root's
		 * after su) could be typed into (TIOCSTI) or read by the task */
		if (same_uid || st.st_uid == pw->uid)
			return 0;
		return err_set(err, errlen, -EPERM,
			       "stdio: %s: a terminal of uid %u refused for a task of uid %u (use "
			       "--%s FILE or --pty)",
			       stream, (unsigned)st.st_uid, (unsigned)pw->uid, stream);
	} else if (!S_ISREG(st.st_mode)) {
		return err_set(err, errlen, -EINVAL,
			       "stdio: %s: %s refused (a regular file, pipe, socket, terminal or "
			       "/dev/null only)",
			       stream,
			       S_ISDIR(st.st_mode)   ? "a directory"
			       : S_ISBLK(st.st_mode) ? "a block device"
						     : "this kind of file");
	}
	/* the caller's own uid: what its process holds, the task may hold (the caller chose
	 * where its output goes); for another uid, only what that user could open itself */
	if (!same_uid && !user_may_access(pw, &st, write))
		return err_set(err, errlen, -EPERM,
			       "stdio: %s: a file of uid %u (mode %04o) that the task's user (uid "
			       "%u) may not open for %s: refused",
			       stream, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
			       (unsigned)pw->uid, write ? "writing" : "reading");
	return 0;
}

/*
 * run with "stdio": the descriptors that came with the request become the task's streams
 * (moved into spec, or closed with it). Accepted only from the task's own uid, or from root;
 * each one checked by stdio_check. Descriptors sent without a "stdio" list are closed.
 */
static int stdio_take(struct agent *a, struct conn *c, json_t *req, struct task_spec *spec,
		      char *err, size_t errlen)
{
	static const char *const names[3] = {"stdin", "stdout", "stderr"};
	static const char *const keys[3] = {"in", "out", "err"};
	json_t *list = json_object_get(req, "stdio"), *v;
	bool tty = json_is_true(json_object_get(req, "pty"));
	const struct user_info *pw;
	unsigned seen = 0;
	size_t i;
	int r;

	if (c->fds_bad)
		return err_set(err, errlen, -EINVAL,
			       "stdio: more than %d descriptors came with the request",
			       CONN_FDS_MAX);
	if (!list) {
		if (c->n_fds || tty)
			return err_set(err, errlen, -EINVAL,
				       "stdio: descriptors came without a \"stdio\" list");
		return 0;
	}
	if (!json_is_array(list) || json_array_size(list) != c->n_fds)
		return err_set(
		    err, errlen, -EINVAL,
		    "stdio: expected a list of the %zu stream(s) passed (\"in\", \"out\", "
		    "\"err\")",
		    c->n_fds);
	if (!json_is_true(json_object_get(req, "wait")))
		return err_set(err, errlen, -EINVAL, "stdio: passed descriptors need \"wait\"");
	if (!agent_users(a))
		return err_set(err, errlen, -ENOMEM, "out of memory");
	r = admission_resolve_user(agent_users(a), spec->user, c->uid, &pw, err, errlen);
	if (r < 0)
		return r;
	if (c->uid != 0 && pw->uid != c->uid)
		return err_set(
		    err, errlen, -EPERM,
		    "stdio: descriptors are accepted only for a task of the caller's own "
		    "uid (%u) or from root, not for uid %u: use --stdin/--stdout/--stderr FILE",
		    (unsigned)c->uid, (unsigned)pw->uid);
	json_array_foreach(list, i, v)
	{
		const char *k = json_string_value(v);
		int s = -1;

		for (int j = 0; k && j < 3; j++)
			if (strcmp(k, keys[j]) == 0)
				s = j;
		if (s < 0 || seen & 1u << s)
			return err_set(err, errlen, -EINVAL,
				       "stdio[%zu]: expected \"in\", \"out\" or \"err\", each once",
				       i);
		seen |= 1u << s;
		r = stdio_check(c->fds[i], names[s], s != 0, tty && s == 0, pw, pw->uid == c->uid,
				err, errlen);
		if (r < 0)
			return r;
	}
	if (tty && !(seen & 1))
		return err_set(err, errlen, -EINVAL, "pty: the terminal must be passed as \"in\"");
	json_array_foreach(list, i, v)
	{
		const char *k = json_string_value(v);
		int s = strcmp(k, "in") == 0 ? 0 : strcmp(k, "out") == 0 ? 1 : 2;

		spec->stdio_fd[s] = c->fds[i];
		spec->stdio_fds |= 1u << s;
	}
	c->n_fds = 0; /* spec owns them now */
	spec->stdio_tty = tty;
	return 0;
}

/*
 * "slurm": {"job_id", "account", "user", "partition"} (corralctl sends what its Slurm job's
 * environment says): the job and account unless the spec has them, the labels slurm_user and
 * slurm_partition unless it has those. [agent] slurm_job = no: ignored. The client could give
 * the same with --job/--account/--label: nothing here is trusted more than those.
 */
static int slurm_fill(json_t *sl, struct task_spec *spec, char *err, size_t errlen)
{
	static const char *const labels[][2] = {{"user", "slurm_user"},
						{"partition", "slurm_partition"}};
	const char *v, *k;
	char kv[SPEC_STR_MAX + 64];
	json_t *jv;

	if (!sl)
		return 0;
	if (!json_is_object(sl))
		return err_set(err, errlen, -EINVAL, "slurm: expected an object");
	json_object_foreach(
	    sl, k, jv) if (!json_is_string(jv) || json_string_length(jv) > SPEC_STR_MAX ||
			   strlen(json_string_value(jv)) !=
			       json_string_length(jv)) return err_set(err, errlen, -EINVAL,
								      "slurm.%.32s: expected a "
								      "string of at most %d bytes",
								      k, SPEC_STR_MAX);
	if (!spec->job && (v = json_string_value(json_object_get(sl, "job_id"))) && *v) {
		spec->job = strdup(v);
		if (!spec->job)
			return err_set(err, errlen, -ENOMEM, "out of memory");
	}
	if (!spec->account && (v = json_string_value(json_object_get(sl, "account"))) && *v) {
		spec->account = strdup(v);
		if (!spec->account)
			return err_set(err, errlen, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < ARRAY_SIZE(labels); i++) {
		bool have = false;
		int r;

		v = json_string_value(json_object_get(sl, labels[i][0]));
		if (!v || !*v || strlen(v) > SPEC_STR_MAX)
			continue;
		for (size_t j = 0; j < spec->n_labels; j++)
			have |= strcmp(spec->label_keys[j], labels[i][1]) == 0;
		if (have)
			continue;
		snprintf(kv, sizeof(kv), "%s=%s", labels[i][1], v);
		r = spec_set_label(spec, kv, err, errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

static json_t *handle_run(struct agent *a, struct conn *c, json_t *req)
{
	struct task_spec spec;
	char err[1024] = "";
	struct task *t = NULL;
	int r;

	if (a->degraded) {
		snprintf(err, sizeof(err),
			 "agent degraded: %s: no new task until space returns (running tasks are "
			 "kept)",
			 a->degraded_why);
		return error_reply(err);
	}
	spec_init(&spec);
	r = spec_from_json(json_object_get(req, "spec"), &spec, err, sizeof(err));
	if (r == 0)
		r = stdio_take(a, c, req, &spec, err, sizeof(err));
	if (r == 0 && a->cfg.slurm_job)
		r = slurm_fill(json_object_get(req, "slurm"), &spec, err, sizeof(err));
	if (r < 0) {
		spec_clear(&spec);
		return error_reply(err);
	}
	r = task_launch(a, &spec, c->uid, c->gid, agent_is_privileged(a, c->uid, c->gid), &t, err,
			sizeof(err));
	spec_clear(&spec);
	if (r < 0)
		return error_reply(err);
	/* Starting: the reply follows once the child exec'd or failed (control_task_started). */
	add_waiter(t, c);
	t->waiters->start = true;
	t->waiters->wait = json_is_true(json_object_get(req, "wait"));
	t->waiters->owner = t->waiters->wait;
	t->waiters->detach = json_is_true(json_object_get(req, "detach"));
	return NULL;
}

/* The starting task exec'd (err NULL) or failed to launch (err says why). */
static void control_task_started(struct agent *a, struct task *t, const char *err)
{
	/* its run --wait client went away while it started */
	if (!err && t->client_gone)
		task_client_gone(a, t);
	for (struct waiter **wp = &t->waiters; *wp;) {
		struct waiter *w = *wp;
		json_t *reply;

		if (!w->start) {
			wp = &w->next;
			continue;
		}
		if (err) {
			/* Launch failed: the task exists (and its record), say exactly why. */
			reply = json_pack("{s:b,s:s,s:s,s:s}", "ok", 0, "task", t->id, "error", err,
					  "status", "launch_failed");
			if (w->wait)
				json_object_set_new(reply, "exit_code", json_integer(t->exit_code));
		} else {
			reply =
			    json_pack("{s:b,s:s,s:i}", "ok", 1, "task", t->id, "pid", (int)t->pid);
		}
		conn_send(a, w->conn, reply);
		if (w->wait && !err) {
			w->start = false; /* now waits for the end */
			wp = &w->next;
			continue;
		}
		*wp = w->next;
		w->conn->waiting--;
		free(w);
	}
}

static json_t *ps_row(struct task *t)
{
	/* a program name that is not UTF-8 is shown escaped (JSON strings are UTF-8) */
	const char *prog = t->spec.argc ? t->spec.argv[0] : "";
	_cleanup_free_ char *esc = utf8_invalid_at(prog) >= 0 ? esc_dup(prog) : NULL;
	json_t *o =
	    json_pack("{s:s,s:s,s:i,s:i,s:s,s:s?,s:s?,s:I,s:s}", "id", t->id, "user",
		      t->user ? t->user : "", "uid", (int)t->uid, "pid", (int)t->pid, "state",
		      t->state == TASK_STARTING	 ? "starting"
		      : t->state == TASK_RUNNING ? "running"
		      : t->state == TASK_ENDING	 ? "ending"
						 : "ended",
		      "job", t->spec.job, "account", t->spec.account, "start_ns",
		      (json_int_t)t->start_ns, "command", esc ? esc : prog);

	json_t *rec = NULL;

	/* the exit object kept apart (task_slim): a row does not parse the whole record */
	if (o && t->state == TASK_ENDED && t->ps_exit_txt && t->spec.argc) {
		json_t *ex = json_loads(t->ps_exit_txt, 0, NULL);

		if (ex)
			json_object_set_new(o, "exit", ex);
		return o;
	}
	rec = o && t->state == TASK_ENDED ? task_final_record(t) : NULL;
	if (rec) {
		json_t *ex = json_object_get(rec, "exit");

		if (ex)
			json_object_set(o, "exit", ex);
		if (!t->spec.argc) {
			json_t *task = json_object_get(rec, "task");

			json_object_set(o, "user", json_object_get(task, "user"));
		}
		json_decref(rec);
	}
	return o;
}

/*
 * ps, newest first: live tasks (newest at the head), then with "all" the ended ones from the
 * newest. With "limit" N a page of at most N rows, and "next" when more follow: the cursor to
 * pass as "after" for the next page ("L:<id>": after that live task; "E:<pos>": the ended
 * tasks before that position). A page costs its rows, whatever the number of ended tasks kept.
 */
static json_t *handle_ps(struct agent *a, struct conn *c, json_t *req)
{
	bool all = json_is_true(json_object_get(req, "all"));
	json_t *jl = json_object_get(req, "limit"), *ja = json_object_get(req, "after"), *arr, *rep;
	uint64_t epos = a->ended_first_pos + a->n_ended, limit = 0, n = 0;
	struct task *t = a->tasks, *last = NULL;
	char next[80] = "";

	if (jl && (!json_is_integer(jl) || json_integer_value(jl) < 1))
		return error_reply("limit: must be a positive integer");
	if (jl)
		limit = (uint64_t)json_integer_value(jl);
	if (ja) {
		const char *after = json_string_value(ja);
		char *end = NULL;

		if (!after)
			return error_reply(
			    "after: must be a string (\"next\" of the previous page)");
		if (strncmp(after, "L:", 2) == 0) {
			while (t && strcmp(t->id, after + 2) != 0)
				t = t->next;
			/* ended since: the page goes on with the ended tasks, newest first */
			t = t ? t->next : NULL;
		} else if (strncmp(after, "E:", 2) == 0 && after[2] >= '0' && after[2] <= '9') {
			uint64_t p;

			errno = 0;
			p = strtoull(after + 2, &end, 10);
			if (errno || *end)
				return error_reply("after: not a cursor from a previous page");
			t = NULL;
			if (p < epos)
				epos = p;
		} else {
			return error_reply("after: not a cursor from a previous page");
		}
	}
	arr = json_array();
	for (; t; t = t->next) {
		if (!may_see(a, c, t))
			continue;
		if (limit && n == limit) {
			snprintf(next, sizeof(next), "L:%s", last->id);
			goto out;
		}
		json_array_append_new(arr, ps_row(t));
		n++;
		last = t;
	}
	while (all && epos > a->ended_first_pos) {
		struct task *e = task_ended_at(a, epos - 1);

		if (!e)
			break;
		if (may_see(a, c, e)) {
			if (limit && n == limit) {
				snprintf(next, sizeof(next), "E:%" PRIu64, epos);
				goto out;
			}
			json_array_append_new(arr, ps_row(e));
			n++;
		}
		epos--;
	}
out:
	rep = json_pack("{s:b,s:o}", "ok", 1, "tasks", arr);
	if (rep && next[0])
		json_object_set_new(rep, "next", json_string(next));
	return rep;
}

static struct task *lookup(struct agent *a, struct conn *c, json_t *req, json_t **ret_err)
{
	const char *id = json_string_value(json_object_get(req, "task"));
	struct task *t;

	if (!id) {
		*ret_err = error_reply("task: missing task id");
		return NULL;
	}
	t = task_find(a, id);
	if (!t || !may_see(a, c, t)) {
		char msg[128];

		snprintf(msg, sizeof(msg), "no such task: %.64s", id);
		*ret_err = error_reply(msg);
		return NULL;
	}
	return t;
}

/* The enforcement layers in force for new tasks: what each is and whether it is on. */
static json_t *status_enforcement(const struct agent *a)
{
	struct gpu_glue_stats gs;
	char ll[64], gpu[64];

	if (gpu_glue_stats(a, &gs))
		snprintf(gpu, sizeof(gpu), "on (%zu GPUs, %zu allocated)", gs.gpus,
			 gs.gpus_allocated);
	else
		snprintf(gpu, sizeof(gpu), "off");
	if (!a->cfg.sandbox_landlock)
		snprintf(ll, sizeof(ll), "off");
	else if (a->landlock_abi > 0)
		snprintf(ll, sizeof(ll), "on (ABI %d)", a->landlock_abi);
	else
		snprintf(ll, sizeof(ll), "unavailable");
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "cgroup_limits",
			 cg_mode_to_string(cg_root_mode(a->cg)), "seccomp_default",
			 a->cfg.seccomp_default, "metering",
			 a->meter_state ? a->meter_state : "off", "audit_network_policy",
			 a->audit ? "on" : "off", "mount_namespace",
			 !a->cfg.sandbox_mount_ns ? "off"
			 : a->sandbox_unsupported ? "unavailable"
						  : "on",
			 "landlock", ll, "gpu", gpu);
}

/* Upload health: where records go, when the collector last took a batch, what failed. */
static json_t *status_upload(const struct agent *a, const struct spool_stats *ss)
{
	struct upl_stats us = {0};
	json_t *o;

	if (!a->upl)
		return json_pack("{s:b,s:I}", "configured", 0, "pending_records",
				 (json_int_t)ss->entries_pending);
	upl_get_stats(a->upl, &us);
	o = json_pack("{s:b,s:s,s:I,s:I,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "configured", 1, "url",
		      us.url		     ? us.url
		      : a->cfg.collector_url ? a->cfg.collector_url
					     : "",
		      "pending_records", (json_int_t)ss->entries_pending, "last_success_ns",
		      (json_int_t)us.last_success_ns, "last_error_ns", (json_int_t)us.last_error_ns,
		      "last_error", us.last_error, "last_http_status",
		      (json_int_t)us.last_http_status, "backoff_ms", (json_int_t)us.backoff_ms,
		      "batches_sent", (json_int_t)us.batches_sent, "records_acked",
		      (json_int_t)us.records_acked, "rejected", (json_int_t)us.rejected, "retries",
		      (json_int_t)us.retries);
	return o;
}

static json_t *handle_status(struct agent *a)
{
	struct spool_stats ss = {0};
	struct node_energy_stats es;
	json_t *j, *ag;

	if (a->spool)
		spool_get_stats(a->spool, &ss);
	j = json_pack("{s:b,s:{s:s,s:s,s:s,s:s,s:i,s:i,s:I,s:I,s:I,s:I,s:I}}", "ok", 1, "agent",
		      "node", a->cfg.node, "cgroup_mode", cg_mode_to_string(cg_root_mode(a->cg)),
		      "metering", a->meter_state ? a->meter_state : "off", "cpu_accounting",
		      a->meter ? meter_cpu_accounting(a->meter) : "cgroup", "tasks_live",
		      (int)a->n_live, "max_tasks", (int)a->cfg.max_tasks, "tasks_started",
		      (json_int_t)a->stats.tasks_started, "tasks_ended",
		      (json_int_t)a->stats.tasks_ended, "launch_failed",
		      (json_int_t)a->stats.launch_failed, "records_spooled",
		      (json_int_t)a->stats.records_spooled, "records_spool_refused",
		      (json_int_t)a->stats.records_spool_refused);
	ag = json_object_get(j, "agent");
	if (ag) {
		json_object_set_new(ag, "spool_entries_pending",
				    json_integer((json_int_t)ss.entries_pending));
		json_object_set_new(ag, "spool_bytes", json_integer((json_int_t)ss.bytes_on_disk));
		json_object_set_new(ag, "audit_summarized",
				    json_integer((json_int_t)a->stats.audit_summarized));
		json_object_set_new(ag, "audit_shed",
				    json_integer((json_int_t)a->stats.audit_shed));
		json_object_set_new(ag, "audit_gaps",
				    json_integer((json_int_t)a->stats.audit_gaps));
		json_object_set_new(ag, "degraded", json_boolean(a->degraded));
		if (a->degraded)
			json_object_set_new(ag, "degraded_reason", json_string(a->degraded_why));
		json_object_set_new(ag, "connections", json_integer(a->n_conns));
		json_object_set_new(ag, "connections_refused",
				    json_integer((json_int_t)a->stats.conns_refused));
		json_object_set_new(ag, "connections_closed",
				    json_integer((json_int_t)a->stats.conns_timed_out));
		json_object_set_new(ag, "sandbox", sandbox_status_json(a));
		json_object_set_new(ag, "version", json_string(CORRAL_VERSION));
		node_energy_stats(a, &es);
		json_object_set_new(ag, "energy",
				    json_pack("{s:b,s:I,s:I}", "rapl", es.rapl, "attributions",
					      (json_int_t)es.periods, "attribution_cpu_ns",
					      (json_int_t)es.cpu_ns));
		json_object_set_new(ag, "enforcement", status_enforcement(a));
		json_object_set_new(ag, "upload", status_upload(a, &ss));
		json_object_set_new(ag, "spool",
				    json_pack("{s:b,s:I,s:I,s:I,s:I}", "open", a->spool != NULL,
					      "bytes", (json_int_t)ss.bytes_on_disk, "max_bytes",
					      (json_int_t)a->cfg.spool_max_bytes, "pending_records",
					      (json_int_t)ss.entries_pending, "refused",
					      (json_int_t)ss.refused_full));
	}
	return j;
}

/* Is c the run --wait connection of t? */
static bool conn_owns(const struct conn *c, const struct task *t)
{
	for (const struct waiter *w = t->waiters; w; w = w->next)
		if (w->conn == c && w->owner)
			return true;
	return false;
}

/* A signal sent to end a task (exit.by names its sender); the others (SIGUSR1, SIGWINCH...)
 * tell it something. */
static bool sig_ends(int sig)
{
	return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT || sig == SIGKILL;
}

static void handle_line(struct agent *a, struct conn *c, const char *line, size_t len)
{
	json_error_t e;
	json_t *req, *reply = NULL;
	const char *op;

	/* passwd entries handed out while serving this request stay valid until the next one */
	if (agent_users(a))
		users_refresh(a->users, now_ns(CLOCK_MONOTONIC));
	req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &e);
	if (!req || !json_is_object(req)) {
		char msg[256];

		snprintf(msg, sizeof(msg), "request: invalid JSON: %s",
			 req ? "not an object" : e.text);
		json_decref(req);
		conn_drop_fds(c);
		c->fds_bad = false;
		conn_send(a, c, error_reply(msg));
		return;
	}
	op = json_string_value(json_object_get(req, "op"));
	if (!op)
		reply = error_reply("op: missing");
	else if (strcmp(op, "run") == 0)
		reply = handle_run(a, c, req);
	else if (strcmp(op, "ps") == 0)
		reply = handle_ps(a, c, req);
	else if (strcmp(op, "status") == 0)
		reply = handle_status(a);
	else if (strcmp(op, "show") == 0) {
		struct task *t = lookup(a, c, req, &reply);

		if (t)
			reply = json_pack("{s:b,s:o*}", "ok", 1, "record", task_record_json(a, t));
	} else if (strcmp(op, "kill") == 0) {
		struct task *t = lookup(a, c, req, &reply);
		json_t *sv = json_object_get(req, "signal");
		int sig = SIGTERM, r;

		if (t) {
			if (sv && (!json_is_integer(sv) || json_integer_value(sv) < 1 ||
				   json_integer_value(sv) >= _NSIG))
				reply = error_reply("signal: expected a signal number");
			else {
				if (sv)
					sig = (int)json_integer_value(sv);
				r = task_signal(a, t, sig);
				reply = r < 0 ? error_reply(r == -ESRCH ? "task is not running"
									: strerror(-r))
					      : json_pack("{s:b}", "ok", 1);
				if (r == 0) {
					bool client = conn_owns(c, t);

					log_info("task %s: signal %d sent by uid %u%s", t->id, sig,
						 c->uid, client ? " (its run --wait client)" : "");
					if (sig_ends(sig)) {
						t->end_by =
						    client ? ACCT_BY_CLIENT : ACCT_BY_OPERATOR;
						(void)task_save(a, t);
					}
				}
			}
		}
	} else if (strcmp(op, "wait") == 0) {
		struct task *t = lookup(a, c, req, &reply);

		if (t) {
			if (t->state == TASK_ENDED)
				reply = ended_reply(a, t);
			else {
				add_waiter(t, c);
			}
		}
	} else {
		char msg[128];

		snprintf(msg, sizeof(msg), "op: unknown operation \"%.32s\"", op);
		reply = error_reply(msg);
	}
	json_decref(req);
	/* descriptors are for the request they came with (a run takes them) */
	conn_drop_fds(c);
	c->fds_bad = false;
	if (reply)
		conn_send(a, c, reply);
}

static void control_task_ended(struct agent *a, struct task *t)
{
	while (t->waiters) {
		struct waiter *w = t->waiters;

		t->waiters = w->next;
		if (w->start) /* cannot happen: the start is always decided first */
			conn_send(a, w->conn,
				  json_pack("{s:b,s:s,s:s}", "ok", 0, "task", t->id, "error",
					    "the task ended while starting"));
		else
			conn_send(a, w->conn, ended_reply(a, t));
		w->conn->waiting--;
		free(w);
	}
}

/* Why a new connection of this peer is refused (NULL: it is served). */
static const char *refusal(struct agent *a, uid_t uid, bool privileged, char *buf, size_t len)
{
	uint32_t mine = 0;

	if (a->n_conns >= CONTROL_CONN_MAX)
		return "agent busy: too many connections";
	if (uid == 0)
		return NULL;
	if (a->n_conns >= CONTROL_CONN_MAX - CONTROL_CONN_ROOT_ONLY)
		return "agent busy: too many connections (the rest are kept for root)";
	if (!privileged && a->n_conns >= CONTROL_CONN_MAX - CONTROL_CONN_RESERVED)
		return "agent busy: too many connections (the rest are kept for root and the "
		       "agent's group)";
	for (struct conn *c = a->conns; c; c = c->next)
		mine += c->uid == uid;
	if (a->n_conns >= CONTROL_CONN_MAX - CONTROL_CONN_RESERVED &&
	    mine >= CONTROL_CONN_RESERVED_PER_MEMBER) {
		snprintf(buf, len,
			 "agent busy: uid %u holds %u connections; the rest are kept for root and "
			 "the agent's group, %u each",
			 uid, mine, CONTROL_CONN_RESERVED_PER_MEMBER);
		return buf;
	}
	if (mine >= a->cfg.conn_per_uid) {
		snprintf(buf, len,
			 "agent busy: uid %u already holds %u connections (the limit per user)",
			 uid, mine);
		return buf;
	}
	return NULL;
}

/* The listening socket is readable: accept every waiting connection. */
static void on_listen(void *data, int fd_listen, uint32_t events)
{
	struct agent *a = data;

	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct conn *c;
		const char *why;
		char buf[128];
		bool privileged;
		int fd = accept4(a->listenfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0)
			return;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
			close(fd);
			continue;
		}
		privileged = agent_is_privileged(a, cred.uid, cred.gid);
		why = refusal(a, cred.uid, privileged, buf, sizeof(buf));
		if (why) {
			char line[256];
			int n =
			    snprintf(line, sizeof(line), "{\"ok\":false,\"error\":\"%s\"}\n", why);

			a->stats.conns_refused++;
			(void)!send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->a = a;
		c->fd = fd;
		c->uid = cred.uid;
		c->gid = cred.gid;
		c->pid = cred.pid;
		c->privileged = privileged;
		c->active_mono = now_ns(CLOCK_MONOTONIC);
		c->next = a->conns;
		a->conns = c;
		a->n_conns++;
		if (loop_add(a->loop, fd, EPOLLIN, on_conn, c) < 0)
			conn_free(a, c);
	}
}

/* Handle the complete request lines read so far, while the replies stay under OUT_HIGH. */
static void conn_process(struct agent *a, struct conn *c)
{
	char *nl;

	while (!c->dead && c->out_len - c->out_off <= OUT_HIGH &&
	       (nl = memchr(c->in, '\n', c->in_len))) {
		size_t l = (size_t)(nl - c->in);

		handle_line(a, c, c->in, l);
		memmove(c->in, nl + 1, c->in_len - l - 1);
		c->in_len -= l + 1;
		c->active_mono = now_ns(CLOCK_MONOTONIC);
		c->req_mono = c->in_len ? c->active_mono : 0;
	}
	c->paused = c->out_len - c->out_off > OUT_HIGH;
	conn_update_events(a, c);
}

/*
 * recv, with the descriptors a request may carry (SCM_RIGHTS, close-on-exec): kept for the
 * request being read (stdio_take), at most CONN_FDS_MAX; more, or a truncated set, are closed
 * and the next run refused.
 */
static ssize_t conn_recv(struct conn *c, char *buf, size_t len)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * (CONN_FDS_MAX + 1))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
	ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);

	if (n < 0 || !mh.msg_controllen)
		return n;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
		size_t k;

		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
			if (c->n_fds < CONN_FDS_MAX) {
				c->fds[c->n_fds++] = fd;
			} else {
				close(fd);
				c->fds_bad = true;
			}
		}
	}
	if (mh.msg_flags & MSG_CTRUNC)
		c->fds_bad = true;
	return n;
}

static void on_conn(void *data, int fd, uint32_t events)
{
	struct conn *c = data;
	struct agent *a = c->a;

	/* marked while answering (safe to free only here, outside the waiter lists), or gone
	 * while its replies wait: they cannot be delivered */
	if (c->dead || (c->paused && (events & (EPOLLHUP | EPOLLERR)))) {
		conn_free(a, c);
		return;
	}
	if (events & EPOLLOUT) {
		if (conn_flush(a, c) < 0) {
			conn_free(a, c);
			return;
		}
		/* drained enough: the requests read meanwhile, then reading again (the time the
		 * agent did not read is not the client's to count against request_timeout) */
		if (c->paused && c->out_len - c->out_off <= OUT_HIGH) {
			c->req_mono = c->in_len ? now_ns(CLOCK_MONOTONIC) : 0;
			conn_process(a, c);
			if (c->paused)
				return;
		}
	}
	if (!c->paused && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
		char buf[65536];

		while (!c->paused && !c->dead) {
			ssize_t n = conn_recv(c, buf, sizeof(buf));
			char *nb;

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				break;
			if (n <= 0) {
				conn_free(a, c);
				return;
			}
			if (c->in_len + (size_t)n > REQ_MAX) {
				conn_send(a, c, error_reply("request: larger than 1 MiB"));
				conn_free(a, c);
				return;
			}
			nb = realloc(c->in, c->in_len + (size_t)n + 1);
			if (!nb) {
				conn_free(a, c);
				return;
			}
			if (!c->in_len)
				c->req_mono = now_ns(CLOCK_MONOTONIC);
			c->in = nb;
			memcpy(c->in + c->in_len, buf, (size_t)n);
			c->in_len += (size_t)n;
			conn_process(a, c);
		}
	}
}

/* Every tick: close what control_on_conn marked, and what timed out. */
void control_tick(struct agent *a, uint64_t now)
{
	struct conn *next;

	/* tasks whose run --wait client went away: SIGKILL kill_grace after the SIGTERM (the
	 * walk only while one waits: the idle loop walks no task) */
	if (a->client_kill_due) {
		a->client_kill_due = false;
		for (struct task *t = a->tasks; t; t = t->next) {
			if (!t->client_term_sent || t->client_kill_sent ||
			    t->state != TASK_RUNNING || !t->cg)
				continue;
			if (now - t->client_term_mono < a->cfg.kill_grace_ns) {
				a->client_kill_due = true;
				continue;
			}
			log_notice("task %s: still running %.1fs after its client went away: "
				   "SIGKILL",
				   t->id, (double)a->cfg.kill_grace_ns / 1e9);
			(void)cg_task_kill(t->cg, SIGKILL);
			t->client_kill_sent = true;
		}
	}

	for (struct conn *c = a->conns; c; c = next) {
		char msg[160];

		next = c->next;
		if (c->dead) {
			conn_free(a, c);
		} else if (c->out_len > c->out_off && now - c->out_mono >= a->cfg.send_timeout_ns) {
			a->stats.conns_timed_out++;
			log_notice("control: closing the connection of uid %u pid %d: its replies "
				   "were not read for %.1fs",
				   c->uid, (int)c->pid, (double)a->cfg.send_timeout_ns / 1e9);
			conn_free(a, c);
		} else if (c->req_mono && c->out_len == c->out_off &&
			   now - c->req_mono >= a->cfg.request_timeout_ns) {
			a->stats.conns_timed_out++;
			snprintf(
			    msg, sizeof(msg),
			    "{\"ok\":false,\"error\":\"request: not complete within %.1fs\"}\n",
			    (double)a->cfg.request_timeout_ns / 1e9);
			(void)!send(c->fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT);
			log_notice("control: closing the connection of uid %u pid %d: request not "
				   "complete within %.1fs",
				   c->uid, (int)c->pid, (double)a->cfg.request_timeout_ns / 1e9);
			conn_free(a, c);
		} else if (c->out_len == c->out_off && !c->in_len && !c->waiting &&
			   now - c->active_mono >= a->cfg.idle_timeout_ns) {
			a->stats.conns_timed_out++;
			conn_free(a, c);
		}
	}
}
