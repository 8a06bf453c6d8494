/* SPDX-License-Identifier: MIT */
/*
 * The launch spawner. Forking a shim from the agent costs in proportion to the agent's
 * address space, mostly its ~280 mappings (about 50 shared libraries, libcurl's alone ~30):
 * a throwaway program timed 0.85 ms per fork+exit of a process with those libraries vs
 * 0.25 ms with libc only, and the shim then tears that copy down again when the task ends.
 * corral-spawn is a small program the agent starts once; it receives each launch's plan over a
 * SOCK_SEQPACKET socket (the fds by SCM_RIGHTS) and forks the shim from itself.
 *
 * Message: "CRSP" version 4 (version 1 also carried cap_last_cap; 3 added the namespaces and
 * mounts after syscalls_max; 4 stdin's path, the client's stdio fds and the tty flag), then the
 * plan's fields in order (u32/u64, strings as u32 length with the NUL or 0xffffffff for none,
 * string vectors as u32 count + strings), the compiled filter (sbx_filter_pack), and the index in
 * the passed fds of each fd the shim needs. Library code: never prints, returns 0 or -errno.
 */
#include "isolation/launch.h"
#include "isolation/seccomp.h"
#include "common/fdpass.h"
#include "common/macro.h"
#include "common/growbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPAWN_MAGIC   0x50535243u /* "CRSP" */
#define SPAWN_VERSION 4u
#define SPAWN_MSG_MAX (1024 * 1024)
#define NO_STR	      0xffffffffu

struct launch_spawner {
	int sock;
	pid_t pid;
};

/* ---- encoding -------------------------------------------------------------------------- */

static void put(struct growbuf *b, const void *d, size_t len)
{
	char *p = growbuf_room(b, len, SPAWN_MSG_MAX);

	if (p)
		memcpy(p, d, len);
}

static void put_u32(struct growbuf *b, uint32_t v)
{
	put(b, &v, sizeof(v));
}

static void put_u64(struct growbuf *b, uint64_t v)
{
	put(b, &v, sizeof(v));
}

static void put_str(struct growbuf *b, const char *s)
{
	if (!s) {
		put_u32(b, NO_STR);
		return;
	}
	put_u32(b, (uint32_t)strlen(s) + 1);
	put(b, s, strlen(s) + 1);
}

static void put_strv(struct growbuf *b, char *const *v)
{
	uint32_t n = 0;

	while (v && v[n])
		n++;
	put_u32(b, n);
	for (uint32_t i = 0; i < n; i++)
		put_str(b, v[i]);
}

/* fd into the passed set: its index, or -1 for none. */
static void put_fd(struct growbuf *b, int fd, int *fds, size_t *nfds)
{
	if (fd < 0 || *nfds >= LAUNCH_WIRE_FDS_MAX) {
		put_u32(b, NO_STR);
		return;
	}
	put_u32(b, (uint32_t)*nfds);
	fds[(*nfds)++] = fd;
}

static int pack(const struct launch_plan *p, const struct launch_shim_fds *f, struct growbuf *b,
		int *fds, size_t *nfds)
{
	size_t fl;

	put_u32(b, SPAWN_MAGIC);
	put_u32(b, SPAWN_VERSION);
	put_strv(b, p->argv);
	put_strv(b, p->env);
	put_strv(b, p->exec_paths);
	put_str(b, p->workdir);
	put_u32(b, p->uid);
	put_u32(b, p->gid);
	put_u32(b, (uint32_t)p->n_groups);
	for (size_t i = 0; i < p->n_groups; i++)
		put_u32(b, p->groups[i]);
	put_u32(b, p->switch_user);
	put_str(b, p->stdout_path);
	put_str(b, p->stderr_path);
	put_str(b, p->stdin_path);
	put_u32(b, p->stdio_tty);
	put_u32(b, (uint32_t)p->n_rlimits);
	for (size_t i = 0; i < p->n_rlimits; i++) {
		put_u32(b, (uint32_t)p->rlimits[i].resource);
		put_u64(b, p->rlimits[i].rl.rlim_cur);
		put_u64(b, p->rlimits[i].rl.rlim_max);
	}
	put_str(b, p->exit_file);
	put_str(b, p->syscalls_file);
	put_u64(b, p->syscalls_max);
	put_u32(b, p->ns_flags);
	put_u32(b, (uint32_t)p->n_mounts);
	for (size_t i = 0; i < p->n_mounts; i++) {
		put_u32(b, (uint32_t)p->mounts[i].op);
		put_str(b, p->mounts[i].path);
		put_str(b, p->mounts[i].src);
		put_str(b, p->mounts[i].data);
		put_u32(b, (uint32_t)p->mounts[i].optional | (uint32_t)p->mounts[i].landlock << 1);
	}
	fl = p->filter ? sbx_filter_pack(p->filter, NULL, 0) : 0;
	put_u32(b, (uint32_t)fl);
	if (fl) {
		char *tmp = malloc(fl);

		if (!tmp)
			return -ENOMEM;
		(void)sbx_filter_pack(p->filter, tmp, fl);
		put(b, tmp, fl);
		free(tmp);
	}
	put_u32(b, p->clone_joins_all);
	put_fd(b, f->status_w, fds, nfds);
	put_fd(b, f->err_w, fds, nfds);
	put_fd(b, f->sync_r, fds, nfds);
	put_fd(b, f->sc_fd, fds, nfds);
	put_fd(b, p->clone_cgroup_fd, fds, nfds);
	put_u32(b, (uint32_t)p->n_join);
	for (size_t i = 0; i < p->n_join; i++) {
		put_u32(b, p->join_unified[i]);
		put_fd(b, p->join_fd[i], fds, nfds);
	}
	for (int i = 0; i < 3; i++)
		put_fd(b, p->stdio_fds & 1u << i ? p->stdio_fd[i] : -1, fds, nfds);
	return b->failed ? -EMSGSIZE : 0;
}

/* ---- decoding -------------------------------------------------------------------------- */

struct rbuf {
	const char *p;
	size_t n, off;
	bool bad;
	const int *fds;
	size_t nfds;
};

static const void *get(struct rbuf *b, size_t len)
{
	const void *r;

	if (b->bad || len > b->n - b->off) {
		b->bad = true;
		return NULL;
	}
	r = b->p + b->off;
	b->off += len;
	return r;
}

static uint32_t get_u32(struct rbuf *b)
{
	const void *d = get(b, sizeof(uint32_t));
	uint32_t v = 0;

	if (d)
		memcpy(&v, d, sizeof(v));
	return v;
}

static uint64_t get_u64(struct rbuf *b)
{
	const void *d = get(b, sizeof(uint64_t));
	uint64_t v = 0;

	if (d)
		memcpy(&v, d, sizeof(v));
	return v;
}

static const char *get_str(struct rbuf *b)
{
	uint32_t len = get_u32(b);
	const char *s;

	if (b->bad || len == NO_STR)
		return NULL;
	s = get(b, len);
	if (!s || len == 0 || s[len - 1] != 0 || strlen(s) != len - 1) {
		b->bad = true;
		return NULL;
	}
	return s;
}

/* A NULL-terminated vector pointing into the message (freed by the caller). */
static char **get_strv(struct rbuf *b)
{
	uint32_t n = get_u32(b);
	char **v;

	if (b->bad || n > b->n / sizeof(uint32_t)) {
		b->bad = true;
		return NULL;
	}
	v = calloc((size_t)n + 1, sizeof(char *));
	if (!v) {
		b->bad = true;
		return NULL;
	}
	for (uint32_t i = 0; i < n; i++) {
		v[i] = (char *)get_str(b);
		if (!v[i])
			b->bad = true;
	}
	return v;
}

static int get_fd(struct rbuf *b)
{
	uint32_t i = get_u32(b);

	if (i == NO_STR)
		return -1;
	if (i >= b->nfds) {
		b->bad = true;
		return -1;
	}
	return b->fds[i];
}

struct launch_wire {
	struct launch_plan p;
	struct launch_shim_fds f;
	char **argv, **env, **paths;
	gid_t *groups;
	struct sbx_filter *filter;
	struct launch_mount mounts[LAUNCH_MOUNTS_MAX];
};

void launch_wire_free(struct launch_wire *u)
{
	if (!u)
		return;
	free(u->argv);
	free(u->env);
	free(u->paths);
	free(u->groups);
	sbx_filter_free(u->filter);
	free(u);
}

static int unpack(struct rbuf *b, struct launch_wire *u)
{
	struct launch_plan *p = &u->p;
	uint32_t n, fl, ov;

	*u = (struct launch_wire){.f = LAUNCH_SHIM_FDS_INIT};
	if (get_u32(b) != SPAWN_MAGIC || get_u32(b) != SPAWN_VERSION)
		return -EPROTO;
	u->argv = get_strv(b);
	u->env = get_strv(b);
	u->paths = get_strv(b);
	p->argv = u->argv;
	p->env = u->env;
	p->exec_paths = u->paths;
	p->workdir = get_str(b);
	p->uid = get_u32(b);
	p->gid = get_u32(b);
	n = get_u32(b);
	if (b->bad || n > 65536)
		return -EPROTO;
	u->groups = calloc(n ? n : 1, sizeof(gid_t));
	if (!u->groups)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		u->groups[i] = get_u32(b);
	p->groups = u->groups;
	p->n_groups = n;
	p->switch_user = get_u32(b) != 0;
	p->stdout_path = get_str(b);
	p->stderr_path = get_str(b);
	p->stdin_path = get_str(b);
	p->stdio_tty = get_u32(b) != 0;
	n = get_u32(b);
	if (b->bad || n > LAUNCH_RLIMITS_MAX)
		return -EPROTO;
	p->n_rlimits = n;
	for (uint32_t i = 0; i < n; i++) {
		p->rlimits[i].resource = (int)get_u32(b);
		p->rlimits[i].rl.rlim_cur = get_u64(b);
		p->rlimits[i].rl.rlim_max = get_u64(b);
	}
	p->exit_file = get_str(b);
	p->syscalls_file = get_str(b);
	p->syscalls_max = get_u64(b);
	p->ns_flags = get_u32(b);
	n = get_u32(b);
	if (b->bad || n > LAUNCH_MOUNTS_MAX || (p->ns_flags & ~LAUNCH_NS_ALL))
		return -EPROTO;
	p->n_mounts = n;
	p->mounts = u->mounts;
	for (uint32_t i = 0; i < n; i++) {
		u->mounts[i].op = (enum launch_mount_op)get_u32(b);
		u->mounts[i].path = get_str(b);
		u->mounts[i].src = get_str(b);
		u->mounts[i].data = get_str(b);
		ov = get_u32(b);
		u->mounts[i].optional = ov & 1;
		u->mounts[i].landlock = (uint8_t)(ov >> 1);
		if (b->bad || (unsigned)u->mounts[i].op >= _LAUNCH_MOUNT_MAX ||
		    ov >> 1 > LAUNCH_LANDLOCK_DENY || !u->mounts[i].path ||
		    (u->mounts[i].op == LAUNCH_MOUNT_BIND && !u->mounts[i].src))
			return -EPROTO;
	}
	fl = get_u32(b);
	if (fl) {
		const void *d = get(b, fl);

		if (!d || sbx_filter_unpack(d, fl, &u->filter) < 0)
			return -EPROTO;
		p->filter = u->filter;
	}
	p->clone_joins_all = get_u32(b) != 0;
	u->f.status_w = get_fd(b);
	u->f.err_w = get_fd(b);
	u->f.sync_r = get_fd(b);
	u->f.sc_fd = get_fd(b);
	p->clone_cgroup_fd = get_fd(b);
	n = get_u32(b);
	if (b->bad || n > LAUNCH_JOIN_MAX)
		return -EPROTO;
	p->n_join = n;
	for (uint32_t i = 0; i < n; i++) {
		p->join_unified[i] = get_u32(b) != 0;
		p->join_fd[i] = get_fd(b);
	}
	for (int i = 0; i < 3; i++) {
		p->stdio_fd[i] = get_fd(b);
		if (p->stdio_fd[i] >= 0)
			p->stdio_fds |= 1u << i;
	}
	if (b->bad || b->off != b->n || !p->argv[0] || !p->exit_file || u->f.status_w < 0 ||
	    u->f.err_w < 0 || u->f.sync_r < 0)
		return -EPROTO;
	for (uint32_t i = 0; i < n; i++)
		if (p->join_fd[i] < 0)
			return -EPROTO;
	return 0;
}

int launch_wire_unpack(const void *buf, size_t len, const int *fds, size_t nfds,
		       struct launch_wire **ret)
{
	struct rbuf b = {.p = buf, .n = len, .fds = fds, .nfds = nfds};
	struct launch_wire *u = malloc(sizeof(*u));
	int r;

	if (!u)
		return -ENOMEM;
	r = unpack(&b, u);
	if (r < 0) {
		launch_wire_free(u);
		return r;
	}
	*ret = u;
	return 0;
}

const struct launch_plan *launch_wire_plan(const struct launch_wire *w)
{
	return &w->p;
}

const struct launch_shim_fds *launch_wire_fds(const struct launch_wire *w)
{
	return &w->f;
}

int launch_wire_pack(const struct launch_plan *p, const struct launch_shim_fds *f, char **buf,
		     size_t *len, int *fds, size_t *nfds)
{
	struct growbuf b = {0};
	int r;

	*nfds = 0;
	r = pack(p, f, &b, fds, nfds);
	if (r < 0) {
		free(b.p);
		return r;
	}
	*buf = b.p;
	*len = b.len;
	return 0;
}

/* ---- the agent's side ------------------------------------------------------------------- */

int launch_spawner_start(const char *path, struct launch_spawner **ret)
{
	struct launch_spawner *s;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, def;
	char *argv[] = {(char *)"corral-spawn", NULL};
	char *envp[] = {NULL};
	int sv[2], r, bufsz = SPAWN_MSG_MAX + 65536;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	/* Room for the largest plan (root may exceed net.core.wmem_max; else the default). */
	if (setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof(bufsz)) < 0)
		(void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof(bufsz));
	s = calloc(1, sizeof(*s));
	if (!s) {
		close(sv[0]);
		close(sv[1]);
		return -ENOMEM;
	}
	sigemptyset(&none);
	sigfillset(&def);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
	posix_spawnattr_init(&at);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &def);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	r = posix_spawn(&s->pid, path, &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(sv[1]);
	if (r != 0) {
		close(sv[0]);
		free(s);
		return -r;
	}
	s->sock = sv[0];
	*ret = s;
	return 0;
}

void launch_spawner_free(struct launch_spawner *s)
{
	if (!s)
		return;
	closep(&s->sock);
	/* It exits at EOF; one that does not (stuck) is killed. */
	for (int i = 0; i < 100; i++) {
		if (waitpid(s->pid, NULL, WNOHANG) != 0)
			goto out;
		usleep(1000);
	}
	(void)kill(s->pid, SIGKILL);
	(void)waitpid(s->pid, NULL, 0);
out:
	free(s);
}

pid_t launch_spawner_pid(const struct launch_spawner *s)
{
	return s->pid;
}

int launch_spawn_via(struct launch_spawner *s, const struct launch_plan *plan,
		     struct launch_handle *ret)
{
	struct launch_shim_fds f;
	char *msg = NULL;
	size_t len = 0;
	int fds[LAUNCH_WIRE_FDS_MAX];
	size_t nfds = 0;
	union {
		char buf[FDPASS_SPACE(LAUNCH_WIRE_FDS_MAX)];
		struct cmsghdr align;
	} cm;
	struct iovec iov;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	int r;

	r = launch_shim_fds_open(plan, &f);
	if (r < 0)
		return r;
	r = launch_wire_pack(plan, &f, &msg, &len, fds, &nfds);
	if (r < 0)
		goto out;
	iov = (struct iovec){.iov_base = msg, .iov_len = len};
	if (nfds && (r = fdpass_attach(&mh, cm.buf, sizeof(cm.buf), fds, nfds)) < 0)
		goto out;
	/* Never block the agent's loop on a stuck spawner: a full socket is a failure. */
	if (sendmsg(s->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		r = errno == EAGAIN ? -EBUSY : -errno;
		goto out;
	}
	free(msg);
	return launch_handle_from_fds(&f, -1, ret);
out:
	free(msg);
	launch_shim_fds_close(&f);
	return r;
}

/* ---- the spawner's loop ------------------------------------------------------------------ */

static void close_fds_of(const int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
}

/* One launch request: unpack it and become its shim. The passed fds are closed either way. */
_noreturn_ static void shim_of(char *buf, size_t n, const int *fds, size_t nfds)
{
	struct launch_wire *u = NULL;

	if (launch_wire_unpack(buf, n, fds, nfds, &u) == 0)
		launch_shim_main(&u->p, &u->f);
	/* A message that does not decode: its fds close, the agent sees the shim end. */
	_exit(0);
}

/* One launch request read by the spawner itself: fork its shim. */
static void serve_one(int sock, int sfd, const sigset_t *orig, char *buf, size_t n, const int *fds,
		      size_t nfds)
{
	struct launch_wire *u = NULL;
	pid_t pid;
	int r;

	r = launch_wire_unpack(buf, n, fds, nfds, &u);
	if (r == 0) {
		pid = fork();
		if (pid == 0) {
			close(sock);
			close(sfd);
			sigprocmask(SIG_SETMASK, orig, NULL);
			launch_shim_main(&u->p, &u->f);
		}
		r = pid < 0 ? -errno : 0;
		if (r < 0) /* the agent sees the shim's "clone" step fail with this error */
			launch_report_error(u->f.err_w, LAUNCH_STEP_CLONE, -r);
	}
	/* A message that does not decode: its fds close, the agent sees the shim end. */
	launch_wire_free(u);
	close_fds_of(fds, nfds);
}

/*
 * One message from the agent: its length (0: the agent closed the socket), or -errno;
 * -EMSGSIZE for one that did not fit (consumed, its fds closed). fds[] gets the passed fds.
 */
static ssize_t recv_one(int sock, char *buf, int *fds, size_t *nfds)
{
	union {
		char b[CMSG_SPACE(sizeof(int) * LAUNCH_WIRE_FDS_MAX)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {.iov_base = buf, .iov_len = SPAWN_MSG_MAX};
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);

	*nfds = 0;
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (size_t i = 0; i < k && *nfds < LAUNCH_WIRE_FDS_MAX; i++)
				memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int),
				       sizeof(int));
		}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		close_fds_of(fds, *nfds);
		return -EMSGSIZE;
	}
	return n;
}

/*
 * The shim of the next launch, forked before that launch arrives: forking it and its first
 * steps (copy-on-write faults on every page it touches, a new session) took about a third
 * of a millisecond of each launch's critical path. It reads the next message from the
 * agent's socket itself (the spawner does not read while it waits), tells the spawner it
 * took one ('t' on taken_w, so the spawner forks the next), and goes on as that launch's
 * shim. It dies with the spawner while it waits: a spawner that is gone must leave nobody
 * reading the socket, so that the agent's next send fails and it restarts the spawner.
 */
_noreturn_ static void ready_shim(int sock, int sfd, int taken_w, pid_t spawner, char *buf)
{
	int fds[LAUNCH_WIRE_FDS_MAX];
	size_t nfds = 0;
	ssize_t n;

	close(sfd);
	launch_shim_prepare();
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != spawner)
		_exit(0);
	do
		n = recv_one(sock, buf, fds, &nfds);
	while (n == -EINTR || n == -EAGAIN);
	if (n <= 0 && n != -EMSGSIZE)
		_exit(0); /* the agent is gone (or the socket broke): the spawner sees to it */
	(void)!write(taken_w, "t", 1);
	close(taken_w);
	close(sock);
	if (n < 0)
		_exit(0);
	shim_of(buf, (size_t)n, fds, nfds); /* launch_shim_main drops the death signal */
}

/* Fork the next launch's shim ahead. Returns the read end of its "taken" pipe, or -1. */
static int ready_fork(int sock, int sfd, char *buf, pid_t *ret)
{
	pid_t self = getpid(), pid;
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		ready_shim(sock, sfd, p[1], self, buf);
	}
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -1;
	}
	*ret = pid;
	return p[0];
}

int launch_spawner_serve(int sock)
{
	sigset_t chld, orig;
	char *buf = malloc(SPAWN_MSG_MAX);
	int sfd, r = 0, ready_fd = -1;
	bool prefork = true;
	pid_t ready = 0;

	if (!buf)
		return -ENOMEM;
	(void)signal(SIGPIPE, SIG_IGN);
	launch_signals_survey();
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &orig);
	sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		free(buf);
		return -errno;
	}
	for (;;) {
		/* While a ready shim waits, it alone reads the socket. */
		struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN},
				       {.fd = ready_fd >= 0 ? ready_fd : sock, .events = POLLIN}};
		int fds[LAUNCH_WIRE_FDS_MAX];
		size_t nfds = 0;
		ssize_t n;

		if (ready_fd < 0 && prefork) {
			ready_fd = ready_fork(sock, sfd, buf, &ready);
			if (ready_fd >= 0)
				continue;
			prefork = false; /* (fork failed) read the next message here instead */
		}
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (pf[0].revents) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == sizeof(si))
				;
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
		}
		if (!pf[1].revents)
			continue;
		if (ready_fd >= 0) {
			char c = 0;

			/* 't': it took a message, fork the next. EOF: it ended without one (the
			 * agent closed the socket, most likely): read the socket here to see. */
			prefork = read(ready_fd, &c, 1) == 1 && c == 't';
			close(ready_fd);
			ready_fd = -1;
			ready = 0;
			continue;
		}
		n = recv_one(sock, buf, fds, &nfds);
		if (n == -EINTR || n == -EAGAIN || n == -EMSGSIZE)
			continue;
		if (n <= 0) {
			r = n < 0 ? (int)n : 0;
			break; /* the agent is gone */
		}
		serve_one(sock, sfd, &orig, buf, (size_t)n, fds, nfds);
		prefork = true;
	}
	if (ready > 0)
		(void)kill(ready, SIGKILL);
	if (ready_fd >= 0)
		close(ready_fd);
	close(sfd);
	free(buf);
	return r;
}
