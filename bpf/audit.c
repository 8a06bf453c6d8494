/* SPDX-License-Identifier: MIT */
/*
 * Loader of bpf/audit.bpf.c (generated skeleton audit.skel.h), network rule parser and the
 * event -> JSON mapping. Lifecycle as in bpf/meter.c: open, size maps from audit_opts, choose
 * the tracepoint variant (tp_btf first, raw_tp when tp_btf cannot be loaded or attached),
 * load, attach. The cgroup programs are attached per task in audit_track. See docs/audit.md.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/audit.h"
#include "bpf/track.h"
#include "bpf/audit_types.h"
#include "bpf/member_types.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/parse.h"
#include "audit.skel.h"

#define AUDIT_DEFAULT_TASKS   1024u
#define AUDIT_MAX_TASKS	      (1u << 20)
#define AUDIT_MAX_PIDS	      (1u << 22)
#define AUDIT_DEFAULT_ARGV    1024u
#define AUDIT_DEFAULT_RINGBUF (1u << 20)
#define AUDIT_MAX_RINGBUF     (1u << 30)

_Static_assert(AUDIT_NET_RULES_MAX == AUDIT_MAX_RULES, "rule capacity mismatch");
_Static_assert(AUDIT_ARGV_MAX_CAP == AUDIT_ARGV_CAP, "argv capacity mismatch");

enum { N_NET_PROGS = 4 };

struct tracked {
	struct track_slot s;
	uint64_t cgroup_id;
	struct bpf_link *net[N_NET_PROGS];
	bool has_cgroup;
	bool sweep; /* processes added by audit_track_more: not in procs_alive */
	pid_t root; /* shared map: the first process, when its entry is the audit's own */
};

/* audit_batch: the maps "tasks" and "budgets" read whole, per slot; serial tells this walk's
 * entries from older ones (0: no walk). */
struct audit_cache {
	uint32_t serial;
	uint32_t *seen_task, *seen_budget; /* per slot: the serial of the walk that read it */
	struct audit_task *task;
	struct audit_bpf_budget *budget;
	uint64_t *keys;
	void *vals;
};

struct audit {
	struct audit_bpf *skel;
	struct bpf_link *root_net[N_NET_PROGS]; /* audit_attach_cgroup_root */
	struct ring_buffer *rb;
	const char *mode;
	struct tracked *tasks;
	struct track_index ix; /* task key -> index in tasks */
	uint32_t max_tasks, max_pids, argv_max;
	int members_fd;	   /* the meter's membership map (audit_opts.share_members), else -1 */
	uint64_t sweeps;   /* "procs" sweeps done by audit_forget */
	audit_event_fn fn; /* set during audit_poll only */
	void *userdata;
	int64_t mono_to_real; /* CLOCK_REALTIME - CLOCK_MONOTONIC at the last poll */
	int addr_fd;	      /* rtnetlink, address changes (audit_addr_fd) */
	size_t node_addrs_dropped;
	int delivered;
	struct audit_cache *cache; /* audit_batch */
	/* Decoding scratch for one exec event. */
	char argbuf[AUDIT_ARGV_CAP + 1];
	const char *argv[AUDIT_ARGV_CAP / 2 + 2];
	char cwd[AUDIT_CWD_DEPTH * AUDIT_CWD_NAME_CAP + 2];
	char path[AUDIT_PATH_CAP + 1];
};

/* ---- network rules ------------------------------------------------------------------------ */

static const char *const action_names[_AUDIT_NET_ACTION_MAX] = {
    [AUDIT_NET_ALLOW] = "allow",
    [AUDIT_NET_DENY] = "deny",
};

const char *audit_net_action_to_string(enum audit_net_action a)
{
	return a >= 0 && a < _AUDIT_NET_ACTION_MAX ? action_names[a] : NULL;
}

enum audit_net_action audit_net_action_from_string(const char *s)
{
	for (int i = 0; s && i < _AUDIT_NET_ACTION_MAX; i++)
		if (!strcmp(s, action_names[i]))
			return (enum audit_net_action)i;
	return _AUDIT_NET_ACTION_INVALID;
}

int audit_net_rule_parse(const char *s, enum audit_net_action action, struct audit_net_rule *ret,
			 char *err, size_t errlen)
{
	struct audit_net_rule r = {.action = action};
	char buf[INET6_ADDRSTRLEN + 16], *addr, *slash, *port = NULL;
	uint32_t plen, pv;
	size_t n;

	if (!s || !*s)
		return err_set(err, errlen, -EINVAL, "empty network rule");
	if (action < 0 || action >= _AUDIT_NET_ACTION_MAX)
		return err_set(err, errlen, -EINVAL, "invalid action");
	n = strlen(s);
	if (n >= sizeof(buf))
		return err_set(err, errlen, -EINVAL, "network rule too long: '%.64s...'", s);
	memcpy(buf, s, n + 1);
	addr = buf;

	if (buf[0] == '[') {
		char *close = strchr(buf, ']');

		if (!close)
			return err_set(err, errlen, -EINVAL, "missing ']' in '%s'", s);
		*close = '\0';
		addr = buf + 1;
		if (close[1] == ':')
			port = close + 2;
		else if (close[1])
			return err_set(err, errlen, -EINVAL, "expected ':PORT' after ']' in '%s'",
				       s);
		if (!strchr(addr, ':'))
			return err_set(err, errlen, -EINVAL,
				       "brackets are for IPv6 addresses: '%s'", s);
	} else if (strchr(buf, ':') && strchr(buf, ':') == strrchr(buf, ':')) {
		/* One ':' : IPv4 with a port (IPv6 has at least two, and needs brackets then). */
		char *c = strchr(buf, ':');

		if (!strchr(buf, '.'))
			return err_set(err, errlen, -EINVAL,
				       "bad address in '%s' (want CIDR[:PORT]; IPv6 with a port "
				       "as [ADDR/LEN]:PORT)",
				       s);
		*c = '\0';
		port = c + 1;
	}

	slash = strchr(addr, '/');
	if (slash)
		*slash++ = '\0';
	if (inet_pton(AF_INET, addr, r.addr) == 1) {
		r.family = AF_INET;
	} else if (inet_pton(AF_INET6, addr, r.addr) == 1) {
		r.family = AF_INET6;
	} else {
		return err_set(err, errlen, -EINVAL, "bad address '%s' in '%s' (want CIDR[:PORT])",
			       addr, s);
	}
	if (slash) {
		if (parse_u32(slash, &plen) < 0 || plen > (r.family == AF_INET ? 32u : 128u))
			return err_set(err, errlen, -EINVAL, "bad prefix length '/%s' in '%s'",
				       slash, s);
	} else {
		plen = r.family == AF_INET ? 32 : 128;
	}
	r.prefix_len = (uint8_t)plen;
	/* Clear the host bits: "10.1.2.3/8" means 10.0.0.0/8. */
	for (unsigned i = 0; i < 16; i++) {
		unsigned bits = plen > i * 8 ? MIN(plen - i * 8, 8u) : 0;

		r.addr[i] &= (uint8_t)(0xff00u >> bits);
	}
	if (port) {
		if (parse_u32(port, &pv) < 0 || pv == 0 || pv > 65535)
			return err_set(err, errlen, -EINVAL, "bad port '%s' in '%s' (1-65535)",
				       port, s);
		r.port = (uint16_t)pv;
	}
	*ret = r;
	return 0;
}

static void rule_to_bpf(const struct audit_net_rule *r, struct audit_bpf_rule *b)
{
	uint8_t mask[16] = {};

	memset(b, 0, sizeof(*b));
	for (unsigned i = 0; i < 16; i++) {
		unsigned bits = r->prefix_len > i * 8 ? MIN(r->prefix_len - i * 8u, 8u) : 0;

		mask[i] = (uint8_t)(0xff00u >> bits);
	}
	memcpy(b->addr, r->addr, 16);
	memcpy(b->mask, mask, 16);
	b->family = r->family == AF_INET ? 4 : 6;
	b->action = r->action == AUDIT_NET_DENY ? AUDIT_BPF_DENY : AUDIT_BPF_ALLOW;
	b->port = r->port;
}

/* ---- load --------------------------------------------------------------------------------- */

static void set_variant(struct audit_bpf *s, bool btf)
{
	struct bpf_program *b[] = {s->progs.btf_sched_fork, s->progs.btf_sched_exit,
				   s->progs.btf_sched_exec};
	struct bpf_program *r[] = {s->progs.raw_sched_fork, s->progs.raw_sched_exit,
				   s->progs.raw_sched_exec};

	for (size_t i = 0; i < ARRAY_SIZE(b); i++) {
		bpf_program__set_autoload(b[i], btf);
		bpf_program__set_autoload(r[i], !btf);
	}
}

/* Opens, sizes, loads and attaches the tracepoints of one variant. Nothing left on failure. */
static int load_variant(struct audit *a, bool btf, uint32_t rb_bytes, struct audit_bpf **ret)
{
	struct audit_bpf *s;
	int r;

	s = audit_bpf__open();
	if (!s)
		return errno ? -errno : -ENOMEM;
	r = bpf_map__set_max_entries(s->maps.tasks, a->max_tasks);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.cgroups, a->max_tasks);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.policies, a->max_tasks);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.budgets, a->max_tasks);
	if (!r)
		r = a->members_fd >= 0 ? bpf_map__reuse_fd(s->maps.procs, a->members_fd)
				       : bpf_map__set_max_entries(s->maps.procs, a->max_pids);
	if (!r)
		r = bpf_map__set_max_entries(s->maps.events, rb_bytes);
	if (r)
		goto out_destroy;
	s->rodata->argv_max = a->argv_max;
	s->rodata->quiet_bytes = rb_bytes / 4;
	set_variant(s, btf);
	if (a->members_fd >= 0) {
		/* The meter's fork and exit programs keep the shared map. */
		s->rodata->shared_members = 1;
		bpf_program__set_autoload(s->progs.btf_sched_fork, false);
		bpf_program__set_autoload(s->progs.btf_sched_exit, false);
		bpf_program__set_autoload(s->progs.raw_sched_fork, false);
		bpf_program__set_autoload(s->progs.raw_sched_exit, false);
	}
	r = audit_bpf__load(s);
	if (r)
		goto out_destroy;
	/* Only the tracepoints here: the cgroup programs are attached per task. */
	r = audit_bpf__attach(s);
	if (r)
		goto out_destroy;
	*ret = s;
	return 0;

out_destroy:
	audit_bpf__destroy(s);
	return r < 0 ? r : -EINVAL;
}

static void decode_exec(struct audit *a, const struct audit_bpf_exec *e, size_t size,
			struct audit_event *ev)
{
	size_t hdr = offsetof(struct audit_bpf_exec, argv), len, argc = 0, p = 0;
	char *c = a->cwd;

	memcpy(a->path, e->path, AUDIT_PATH_CAP);
	a->path[AUDIT_PATH_CAP] = '\0';
	len = MIN((size_t)e->argv_len, size - hdr);
	memcpy(a->argbuf, e->argv, len);
	a->argbuf[len] = '\0';
	while (p < len && argc < ARRAY_SIZE(a->argv) - 1) {
		a->argv[argc++] = a->argbuf + p;
		p += strlen(a->argbuf + p) + 1;
	}
	a->argv[argc] = NULL;

	*c = '\0';
	if (e->cwd_depth == 0 && !e->cwd_truncated) {
		strcpy(c, "/");
	} else {
		size_t off = 0;

		for (int i = (int)MIN(e->cwd_depth, (uint32_t)AUDIT_CWD_DEPTH) - 1; i >= 0; i--) {
			size_t nl = strnlen(e->cwd[i], AUDIT_CWD_NAME_CAP);

			c[off++] = '/';
			memcpy(c + off, e->cwd[i], nl);
			off += nl;
		}
		c[off] = '\0';
	}
	ev->type = AUDIT_EV_EXEC;
	ev->exec = (struct audit_exec_event){
	    .path = a->path,
	    .argc = argc,
	    .argv = a->argv,
	    .argv_truncated = e->argv_total > e->argv_len,
	    .ppid = e->ppid,
	    .uid = e->uid,
	    .gid = e->gid,
	    .cwd = a->cwd,
	    .cwd_truncated = e->cwd_truncated != 0,
	};
}

static void decode_net(const struct audit_bpf_net *n, struct audit_event *ev)
{
	struct audit_connect_event *c = &ev->connect;

	ev->type = AUDIT_EV_CONNECT;
	memset(c, 0, sizeof(*c));
	c->family = n->family == 4 ? AF_INET : AF_INET6;
	memcpy(c->addr, n->addr, c->family == AF_INET ? 4 : 16);
	if (!inet_ntop(c->family, c->addr, c->address, sizeof(c->address)))
		c->address[0] = '\0';
	c->port = n->port;
	c->protocol = n->protocol;
	c->verdict = n->verdict == AUDIT_BPF_DENY ? AUDIT_NET_DENY : AUDIT_NET_ALLOW;
	c->op = n->op == AUDIT_BPF_OP_SENDMSG ? AUDIT_OP_SENDMSG : AUDIT_OP_CONNECT;
	c->rule = (int)n->rule - 1;
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct audit *a = ctx;
	const struct audit_bpf_head *h = data;
	struct audit_event ev = {};

	if (size < sizeof(*h) || !a->fn)
		return 0;
	ev.task_key = h->task_key;
	ev.pid = h->pid;
	ev.over_budget = (h->flags & AUDIT_BPF_F_OVER) != 0;
	ev.time_ns = (uint64_t)((int64_t)h->ktime_ns + a->mono_to_real);
	if (h->type == AUDIT_BPF_EV_EXEC && size >= offsetof(struct audit_bpf_exec, argv))
		decode_exec(a, data, size, &ev);
	else if (h->type == AUDIT_BPF_EV_NET && size >= sizeof(struct audit_bpf_net))
		decode_net(data, &ev);
	else
		return 0;
	a->delivered++;
	a->fn(&ev, a->userdata);
	return 0;
}

static int addr_watch_open(void);

int audit_open(const struct audit_opts *opts, struct audit **ret)
{
	uint32_t rb = opts && opts->ringbuf_bytes ? opts->ringbuf_bytes : AUDIT_DEFAULT_RINGBUF;
	long ps = sysconf(_SC_PAGESIZE);
	struct track_kernel k;
	struct audit *a;
	bool btf;
	int r;

	if (ps <= 0)
		ps = 4096;
	if (rb < (uint32_t)ps || rb > AUDIT_MAX_RINGBUF || (rb & (rb - 1)))
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->max_tasks = opts && opts->max_tasks ? opts->max_tasks : AUDIT_DEFAULT_TASKS;
	a->max_pids = opts && opts->max_pids ? opts->max_pids : a->max_tasks * 64;
	a->argv_max = opts && opts->argv_max ? opts->argv_max : AUDIT_DEFAULT_ARGV;
	a->members_fd = -1;
	if (opts && opts->share_members) {
		struct bpf_map_info info = {};
		uint32_t len = sizeof(info);

		if (opts->members_fd < 0 ||
		    bpf_obj_get_info_by_fd(opts->members_fd, &info, &len) < 0 ||
		    info.key_size != sizeof(uint32_t) || info.value_size != sizeof(struct member)) {
			free(a);
			return -EINVAL;
		}
		a->max_pids = info.max_entries;
		a->members_fd = opts->members_fd;
	}
	if (a->max_tasks > AUDIT_MAX_TASKS || a->max_pids > AUDIT_MAX_PIDS ||
	    a->max_pids < a->max_tasks || a->argv_max > AUDIT_ARGV_CAP) {
		r = -EINVAL;
		goto out_free;
	}
	a->tasks = calloc(a->max_tasks, sizeof(*a->tasks));
	if (!a->tasks) {
		r = -ENOMEM;
		goto out_free;
	}
	r = track_index_init(&a->ix, a->max_tasks);
	if (r < 0)
		goto out_free_tasks;

	/* Probe once (the kernel's BTF), then load once; raw_tp only if that fails. */
	track_probe_kernel(&k);
	btf = k.tp_btf && !(opts && opts->force_raw_tp);
	r = load_variant(a, btf, rb, &a->skel);
	if (r && btf) {
		btf = false;
		r = load_variant(a, false, rb, &a->skel);
	}
	if (r)
		goto out_free_tasks;
	a->mode = btf ? "tp_btf" : "raw_tp";
	a->rb = ring_buffer__new(bpf_map__fd(a->skel->maps.events), on_event, a, NULL);
	if (!a->rb) {
		r = errno ? -errno : -ENOMEM;
		goto out_destroy;
	}
	/* Subscribe before the first read, so no change falls between the two. */
	a->addr_fd = addr_watch_open();
	r = audit_refresh_node_addrs(a);
	if (r < 0) {
		ring_buffer__free(a->rb);
		if (a->addr_fd >= 0)
			close(a->addr_fd);
		goto out_destroy;
	}
	*ret = a;
	return 0;

out_destroy:
	audit_bpf__destroy(a->skel);
out_free_tasks:
	track_index_free(&a->ix);
	free(a->tasks);
out_free:
	free(a);
	return r;
}

static void detach_net(struct tracked *t)
{
	for (int i = 0; i < N_NET_PROGS; i++) {
		bpf_link__destroy(t->net[i]);
		t->net[i] = NULL;
	}
}

static void cache_free(struct audit_cache *c)
{
	if (!c)
		return;
	free(c->seen_task);
	free(c->seen_budget);
	free(c->task);
	free(c->budget);
	free(c->keys);
	free(c->vals);
	free(c);
}

void audit_free(struct audit *a)
{
	if (!a)
		return;
	for (uint32_t i = 0; i < a->max_tasks; i++)
		detach_net(&a->tasks[i]);
	for (int i = 0; i < N_NET_PROGS; i++)
		bpf_link__destroy(a->root_net[i]);
	ring_buffer__free(a->rb);
	audit_bpf__destroy(a->skel);
	if (a->addr_fd >= 0)
		close(a->addr_fd);
	track_index_free(&a->ix);
	cache_free(a->cache);
	free(a->tasks);
	free(a);
}

/* ---- the node's addresses ------------------------------------------------------------------ */

/* rtnetlink socket told of every IPv4/IPv6 address change; -errno when none can be had. */
static int addr_watch_open(void)
{
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK,
				 .nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR};
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

static bool addr_seen(const struct audit_bpf_addr *v, size_t n, const struct audit_bpf_addr *x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].family == x->family && memcmp(v[i].addr, x->addr, sizeof(x->addr)) == 0)
			return true;
	return false;
}

int audit_set_node_addrs(struct audit *a, const struct audit_node_addr *addrs, size_t n)
{
	struct audit_bpf_addr v[AUDIT_MAX_NODE_ADDRS];
	struct audit_bpf_addr lo4 = {.addr = {htonl(INADDR_LOOPBACK)}, .family = 4};
	struct audit_bpf_addr lo6 = {.addr = {0, 0, 0, htonl(1)}, .family = 6};
	size_t k = 0, dropped = 0;

	/* Loopback always, even on a node where lo lacks ::1. */
	v[k++] = lo4;
	v[k++] = lo6;
	for (size_t i = 0; i < n; i++) {
		struct audit_bpf_addr x = {.family = addrs[i].family == AF_INET ? 4 : 6};

		if (addrs[i].family != AF_INET && addrs[i].family != AF_INET6)
			return -EAFNOSUPPORT;
		memcpy(x.addr, addrs[i].addr, addrs[i].family == AF_INET ? 4 : 16);
		if (addr_seen(v, k, &x))
			continue;
		if (k == AUDIT_MAX_NODE_ADDRS) {
			dropped++;
			continue;
		}
		v[k++] = x;
	}
	/* Shrink first, then entries, then grow: a concurrent reader sees old or new entries
	 * within the count, never uninitialised ones. */
	if (k < a->skel->bss->node_addr_count)
		__atomic_store_n(&a->skel->bss->node_addr_count, (uint32_t)k, __ATOMIC_RELEASE);
	memcpy(a->skel->bss->node_addrs, v, k * sizeof(v[0]));
	__atomic_store_n(&a->skel->bss->node_addr_count, (uint32_t)k, __ATOMIC_RELEASE);
	a->node_addrs_dropped = dropped;
	return 0;
}

int audit_refresh_node_addrs(struct audit *a)
{
	struct audit_node_addr v[AUDIT_MAX_NODE_ADDRS * 2];
	struct ifaddrs *ifa = NULL;
	size_t n = 0, extra = 0;
	int r;

	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
		const struct sockaddr *sa = i->ifa_addr;

		if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
			continue;
		if (n == ARRAY_SIZE(v)) {
			extra++;
			continue;
		}
		v[n].family = sa->sa_family;
		memset(v[n].addr, 0, sizeof(v[n].addr));
		if (sa->sa_family == AF_INET)
			memcpy(v[n].addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		else
			memcpy(v[n].addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		n++;
	}
	freeifaddrs(ifa);
	r = audit_set_node_addrs(a, v, n);
	a->node_addrs_dropped += extra;
	return r;
}

size_t audit_node_addrs(const struct audit *a, size_t *ret_dropped)
{
	if (ret_dropped)
		*ret_dropped = a->node_addrs_dropped;
	return a->skel->bss->node_addr_count;
}

int audit_addr_fd(const struct audit *a)
{
	return a->addr_fd;
}

int audit_addr_changed(struct audit *a)
{
	char buf[8192];
	bool any = false;

	if (a->addr_fd < 0)
		return audit_refresh_node_addrs(a);
	for (;;) {
		ssize_t k = recv(a->addr_fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (k > 0) {
			any = true;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == ENOBUFS) { /* changes were lost: read them all anew */
			any = true;
			continue;
		}
		break;
	}
	return any ? audit_refresh_node_addrs(a) : 0;
}

int audit_attach_cgroup_root(struct audit *a, int root_fd)
{
	struct audit_bpf *s = a->skel;
	struct bpf_program *progs[N_NET_PROGS] = {s->progs.audit_connect4, s->progs.audit_connect6,
						  s->progs.audit_sendmsg4, s->progs.audit_sendmsg6};

	if (root_fd < 0)
		return -EBADF;
	if (a->root_net[0])
		return -EALREADY;
	for (int i = 0; i < N_NET_PROGS; i++) {
		a->root_net[i] = bpf_program__attach_cgroup(progs[i], root_fd);
		if (!a->root_net[i]) {
			int r = errno ? -errno : -EINVAL;

			for (int k = 0; k < i; k++) {
				bpf_link__destroy(a->root_net[k]);
				a->root_net[k] = NULL;
			}
			a->root_net[i] = NULL;
			return r;
		}
	}
	return 0;
}

const char *audit_attach_mode(const struct audit *a)
{
	return a->mode;
}

int audit_fd(const struct audit *a)
{
	return ring_buffer__epoll_fd(a->rb);
}

int audit_poll(struct audit *a, audit_event_fn fn, void *userdata)
{
	int r;

	a->fn = fn;
	a->userdata = userdata;
	a->delivered = 0;
	a->mono_to_real = (int64_t)(now_ns(CLOCK_REALTIME) - now_ns(CLOCK_MONOTONIC));
	r = ring_buffer__consume(a->rb);
	a->fn = NULL;
	a->userdata = NULL;
	return r < 0 ? r : a->delivered;
}

static struct tracked *find_tracked(struct audit *a, uint64_t key)
{
	return track_index_find(&a->ix, a->tasks, sizeof(*a->tasks), key);
}

/*
 * Makes tgid a member of task key. Shared map: a process the meter tracks for the same task
 * already is (1: nothing added); otherwise the entry is the audit's (gen 0: not metered).
 */
static int add_proc(struct audit *a, uint64_t key, pid_t tgid)
{
	int fd = bpf_map__fd(a->skel->maps.procs), r;
	struct member m = {.task_key = key};
	uint32_t k = (uint32_t)tgid;

	r = track_add_proc(fd, tgid, &m);
	if (r == -EBUSY && a->members_fd >= 0 && bpf_map_lookup_elem(fd, &k, &m) == 0 &&
	    m.task_key == key)
		return 1;
	return r;
}

static int read_task(struct audit *a, uint64_t task_key, struct audit_task *ret);

static int budget_to_bpf(const struct audit_budget *b, struct audit_bpf_budget *bb)
{
	uint64_t burst;

	if (b->rate > 1000000000ull || (b->sample_max && !b->sample_period_ns))
		return -EINVAL;
	burst = b->burst ? b->burst : 1;
	*bb = (struct audit_bpf_budget){
	    .interval_ns = b->rate ? 1000000000ull / b->rate : 0,
	    .sample_period_ns = b->sample_period_ns,
	    .sample_max = b->sample_max,
	    .closed = b->closed,
	};
	if (bb->interval_ns && burst - 1 > UINT64_MAX / 2 / bb->interval_ns)
		return -EINVAL;
	bb->tau_ns = (burst - 1) * bb->interval_ns;
	return 0;
}

/* tat for a bucket holding `tokens` of the budget's burst at ktime now (see audit_types.h). */
static uint64_t tat_for(const struct audit_budget *b, const struct audit_bpf_budget *bb,
			uint64_t now)
{
	double missing;

	if (!bb->interval_ns || !b->restore || b->tokens >= (double)(b->burst ? b->burst : 1))
		return 0; /* full */
	missing = (double)(b->burst ? b->burst : 1) - (b->tokens > 0 ? b->tokens : 0);
	return now + (uint64_t)(missing * (double)bb->interval_ns);
}

int audit_track(struct audit *a, uint64_t task_key, pid_t tgid, int cgroup_fd,
		const struct audit_net_policy *policy)
{
	return audit_track_budget(a, task_key, tgid, cgroup_fd, policy, NULL);
}

int audit_track_budget(struct audit *a, uint64_t task_key, pid_t tgid, int cgroup_fd,
		       const struct audit_net_policy *policy, const struct audit_budget *budget)
{
	struct audit_bpf *s = a->skel;
	struct bpf_program *progs[N_NET_PROGS] = {s->progs.audit_connect4, s->progs.audit_connect6,
						  s->progs.audit_sendmsg4, s->progs.audit_sendmsg6};
	struct audit_bpf_policy bp = {.default_action = AUDIT_BPF_ALLOW};
	/* the first process, added below (counted by BPF only in the audit's own map) */
	struct audit_task at = {.procs_alive = a->members_fd < 0};
	struct audit_bpf_budget bb;
	struct tracked *t = NULL;
	int tfd = bpf_map__fd(s->maps.tasks), r;

	if (tgid <= 0)
		return -EINVAL;
	if (budget) {
		r = budget_to_bpf(budget, &bb);
		if (r < 0)
			return r;
		at.tat = tat_for(budget, &bb, now_ns(CLOCK_MONOTONIC));
	}
	if (policy) {
		if (policy->n_rules > AUDIT_MAX_RULES)
			return -E2BIG;
		if (policy->n_rules && !policy->rules)
			return -EINVAL;
		if (policy->default_action < 0 || policy->default_action >= _AUDIT_NET_ACTION_MAX)
			return -EINVAL;
		if (cgroup_fd < 0 && (policy->n_rules || policy->default_action != AUDIT_NET_ALLOW))
			return -EINVAL; /* a policy that could not be enforced */
		bp.n_rules = (uint32_t)policy->n_rules;
		bp.default_action =
		    policy->default_action == AUDIT_NET_DENY ? AUDIT_BPF_DENY : AUDIT_BPF_ALLOW;
		for (size_t i = 0; i < policy->n_rules; i++) {
			const struct audit_net_rule *nr = &policy->rules[i];

			if ((nr->family != AF_INET && nr->family != AF_INET6) ||
			    nr->prefix_len > (nr->family == AF_INET ? 32 : 128))
				return -EINVAL;
			rule_to_bpf(nr, &bp.rules[i]);
		}
	}
	if (find_tracked(a, task_key))
		return -EEXIST;
	for (uint32_t i = 0; i < a->max_tasks; i++)
		if (!a->tasks[i].s.used) {
			t = &a->tasks[i];
			break;
		}
	if (!t)
		return -ENOSPC;
	*t = (struct tracked){.s.key = task_key};

	if (bpf_map_update_elem(tfd, &task_key, &at, BPF_NOEXIST) < 0)
		return errno == E2BIG ? -ENOSPC : -errno;
	if (budget &&
	    bpf_map_update_elem(bpf_map__fd(s->maps.budgets), &task_key, &bb, BPF_ANY) < 0) {
		r = -errno;
		goto out_task;
	}
	if (bpf_map_update_elem(bpf_map__fd(s->maps.policies), &task_key, &bp, BPF_ANY) < 0) {
		r = -errno;
		goto out_task;
	}
	if (cgroup_fd >= 0) {
		r = track_cgroup_id(cgroup_fd, &t->cgroup_id);
		if (r < 0)
			goto out_policy;
		if (bpf_map_update_elem(bpf_map__fd(s->maps.cgroups), &t->cgroup_id, &task_key,
					BPF_NOEXIST) < 0) {
			r = errno == EEXIST ? -EBUSY : -errno;
			goto out_policy;
		}
		t->has_cgroup = true;
		for (int i = 0; i < N_NET_PROGS && !a->root_net[0]; i++) {
			t->net[i] = bpf_program__attach_cgroup(progs[i], cgroup_fd);
			if (!t->net[i]) {
				r = errno ? -errno : -EINVAL;
				goto out_detach;
			}
		}
	}
	r = add_proc(a, task_key, tgid);
	if (r < 0)
		goto out_detach;
	/* An entry of the audit's own in the meter's map (audit_track before meter_track, which
	 * takes it over, or without it): audit_forget looks whether it is still the audit's. */
	if (r == 0 && a->members_fd >= 0)
		t->root = tgid;
	/* cannot fail: the index has room for every slot */
	(void)track_index_put(&a->ix, task_key, (uint32_t)(t - a->tasks));
	t->s.used = true;
	return 0;

out_detach:
	detach_net(t);
	if (t->has_cgroup)
		bpf_map_delete_elem(bpf_map__fd(s->maps.cgroups), &t->cgroup_id);
out_policy:
	bpf_map_delete_elem(bpf_map__fd(s->maps.policies), &task_key);
out_task:
	bpf_map_delete_elem(bpf_map__fd(s->maps.budgets), &task_key);
	bpf_map_delete_elem(tfd, &task_key);
	*t = (struct tracked){};
	return r;
}

int audit_set_budget(struct audit *a, uint64_t task_key, const struct audit_budget *budget)
{
	struct audit_bpf_budget bb;
	int r;

	if (!find_tracked(a, task_key))
		return -ENOENT;
	r = budget_to_bpf(budget, &bb);
	if (r < 0)
		return r;
	if (bpf_map_update_elem(bpf_map__fd(a->skel->maps.budgets), &task_key, &bb, BPF_ANY) < 0)
		return -errno;
	return 0;
}

#define CACHE_CHUNK 1024u

static void cache_tasks(void *ctx, uint32_t n)
{
	struct audit *a = ctx;
	const struct audit_task *v = a->cache->vals;

	for (uint32_t i = 0; i < n; i++) {
		struct tracked *t = find_tracked(a, a->cache->keys[i]);

		if (!t)
			continue;
		a->cache->task[t - a->tasks] = v[i];
		a->cache->seen_task[t - a->tasks] = a->cache->serial;
	}
}

static void cache_budgets(void *ctx, uint32_t n)
{
	struct audit *a = ctx;
	const struct audit_bpf_budget *v = a->cache->vals;

	for (uint32_t i = 0; i < n; i++) {
		struct tracked *t = find_tracked(a, a->cache->keys[i]);

		if (!t)
			continue;
		a->cache->budget[t - a->tasks] = v[i];
		a->cache->seen_budget[t - a->tasks] = a->cache->serial;
	}
}

int audit_batch(struct audit *a, bool on)
{
	static uint32_t serial;
	struct audit_cache *c = a ? a->cache : NULL;
	int r;

	if (!a)
		return -EINVAL;
	if (c)
		c->serial = 0;
	if (!on)
		return 0;
	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c)
			return -ENOMEM;
		c->seen_task = calloc(a->max_tasks, sizeof(*c->seen_task));
		c->seen_budget = calloc(a->max_tasks, sizeof(*c->seen_budget));
		c->task = calloc(a->max_tasks, sizeof(*c->task));
		c->budget = calloc(a->max_tasks, sizeof(*c->budget));
		c->keys = calloc(CACHE_CHUNK, sizeof(*c->keys));
		c->vals = calloc(CACHE_CHUNK,
				 MAX(sizeof(struct audit_task), sizeof(struct audit_bpf_budget)));
		if (!c->seen_task || !c->seen_budget || !c->task || !c->budget || !c->keys ||
		    !c->vals) {
			cache_free(c);
			return -ENOMEM;
		}
		a->cache = c;
	}
	serial = serial + 1 ? serial + 1 : 1;
	c->serial = serial;
	if ((r = track_map_read_all(bpf_map__fd(a->skel->maps.tasks), CACHE_CHUNK, c->keys, c->vals,
				    cache_tasks, a)) < 0 ||
	    (r = track_map_read_all(bpf_map__fd(a->skel->maps.budgets), CACHE_CHUNK, c->keys,
				    c->vals, cache_budgets, a)) < 0) {
		c->serial = 0;
		return r;
	}
	return 0;
}

int audit_budget_state(struct audit *a, uint64_t task_key, struct audit_budget_state *ret)
{
	struct audit_bpf_budget bb;
	struct audit_task t;
	struct tracked *tr;
	uint64_t now;
	bool cached, have_bb;
	size_t slot;
	int r;

	if (!(tr = find_tracked(a, task_key)))
		return -ENOENT;
	slot = (size_t)(tr - a->tasks);
	cached = a->cache && a->cache->serial && a->cache->seen_task[slot] == a->cache->serial;
	if (cached)
		t = a->cache->task[slot];
	else if ((r = read_task(a, task_key, &t)) < 0)
		return r;
	*ret = (struct audit_budget_state){
	    .over_exec = t.over_exec,
	    .over_connect_allow = t.over_net_allow,
	    .over_connect_deny = t.over_net_deny,
	    .tokens = -1,
	};
	if (cached) {
		have_bb = a->cache->seen_budget[slot] == a->cache->serial;
		if (have_bb)
			bb = a->cache->budget[slot];
	} else
		have_bb =
		    bpf_map_lookup_elem(bpf_map__fd(a->skel->maps.budgets), &task_key, &bb) == 0;
	if (have_bb && bb.interval_ns) {
		double burst = (double)(bb.tau_ns / bb.interval_ns + 1), tok;

		now = now_ns(CLOCK_MONOTONIC);
		/* tokens = burst - (tat - now) / interval, within [0, burst] */
		tok = t.tat <= now ? burst : burst - (double)(t.tat - now) / (double)bb.interval_ns;
		ret->tokens = tok < 0 ? 0 : tok > burst ? burst : tok;
	}
	return 0;
}

int audit_track_more(struct audit *a, uint64_t task_key, pid_t tgid)
{
	struct tracked *t = find_tracked(a, task_key);
	int r;

	if (tgid <= 0)
		return -EINVAL;
	if (!t)
		return -ENOENT;
	/* Counting it in procs_alive would be a read-modify-write racing BPF's atomics: the
	 * task's end sweeps the map instead (re-adoption only). */
	t->sweep = true;
	r = add_proc(a, task_key, tgid);
	return r < 0 ? r : 0;
}

int audit_forget(struct audit *a, uint64_t task_key)
{
	struct tracked *t = find_tracked(a, task_key);
	struct audit_bpf *s = a->skel;
	struct audit_task at;
	int r;

	if (!t)
		return -ENOENT;
	detach_net(t);
	/*
	 * A sweep walks every bucket of "procs" (about 0.1 ms for 64k entries, even when empty).
	 * BPF keeps the task's count of its entries; normally 0 by now. Unreadable: sweep.
	 */
	r = 0;
	if (a->members_fd >= 0) {
		/* Shared map: the meter's fork and exit programs keep it and meter_forget sweeps
		 * the meter's entries; entries of the audit's own (gen 0: the meter did not take
		 * the first process over) are not counted anywhere. */
		uint32_t k = (uint32_t)t->root;
		struct member mb;

		if (t->root && bpf_map_lookup_elem(bpf_map__fd(s->maps.procs), &k, &mb) == 0 &&
		    mb.task_key == task_key && !mb.gen)
			t->sweep = true;
		at.procs_alive = 0;
	} else if (bpf_map_lookup_elem(bpf_map__fd(s->maps.tasks), &task_key, &at) < 0) {
		t->sweep = true;
	}
	if (t->sweep || at.procs_alive != 0) {
		a->sweeps++;
		r = track_delete_by_task(bpf_map__fd(s->maps.procs), sizeof(uint32_t),
					 sizeof(struct member), task_key, a->max_pids);
		if (r > 0)
			r = 0;
	}
	if (t->has_cgroup)
		bpf_map_delete_elem(bpf_map__fd(s->maps.cgroups), &t->cgroup_id);
	bpf_map_delete_elem(bpf_map__fd(s->maps.policies), &task_key);
	bpf_map_delete_elem(bpf_map__fd(s->maps.budgets), &task_key);
	bpf_map_delete_elem(bpf_map__fd(s->maps.tasks), &task_key);
	track_index_del(&a->ix, task_key);
	*t = (struct tracked){};
	return r;
}

static int read_task(struct audit *a, uint64_t task_key, struct audit_task *ret)
{
	if (!find_tracked(a, task_key))
		return -ENOENT;
	if (bpf_map_lookup_elem(bpf_map__fd(a->skel->maps.tasks), &task_key, ret) < 0)
		return -errno;
	return 0;
}

int audit_lost(struct audit *a, uint64_t task_key, uint64_t *ret)
{
	struct audit_task t;
	int r = read_task(a, task_key, &t);

	if (r < 0)
		return r;
	*ret = t.lost;
	return 0;
}

int audit_sent(struct audit *a, uint64_t task_key, uint64_t *ret)
{
	struct audit_task t;
	int r = read_task(a, task_key, &t);

	if (r < 0)
		return r;
	*ret = t.events;
	return 0;
}

uint64_t audit_map_full(const struct audit *a)
{
	return a->skel->bss->map_full;
}

uint64_t audit_lost_untracked(const struct audit *a)
{
	return a->skel->bss->lost_untracked;
}

/* ---- JSON --------------------------------------------------------------------------------- */

/*
 * argv, path and cwd are bytes: one that is not UTF-8 (JSON strings must be) is written
 * escaped as common/escape.h does (a backslash as \\, controls and the bytes that are not
 * UTF-8 as \xHH), and its name is added to the event's "escaped" list, so that a reader knows
 * to unescape it; the others are exact.
 */
static json_t *string_or_escaped(const char *s, json_t *escaped, const char *name)
{
	_cleanup_free_ char *e = NULL;
	json_t *j = json_string(s);

	if (j || !s)
		return j;
	e = esc_dup(s);
	j = e ? json_string(e) : NULL;
	if (j)
		json_array_append_new(escaped, json_string(name));
	return j;
}

static const char *proto_name(int p)
{
	return p == IPPROTO_TCP ? "tcp" : p == IPPROTO_UDP ? "udp" : "other";
}

json_t *audit_event_to_json(const struct audit_event *ev)
{
	json_t *o = json_object(), *argv, *escaped;
	int e = 0;

	if (!o)
		return NULL;
	if (ev->type == AUDIT_EV_EXEC) {
		const struct audit_exec_event *x = &ev->exec;

		argv = json_array();
		escaped = json_array();
		if (!argv || !escaped) {
			json_decref(argv);
			json_decref(escaped);
			goto out_fail;
		}
		for (size_t i = 0; i < x->argc; i++) {
			char name[32];

			snprintf(name, sizeof(name), "argv[%zu]", i);
			e |= json_array_append_new(argv,
						   string_or_escaped(x->argv[i], escaped, name));
		}
		e |= json_object_set_new(o, "path", string_or_escaped(x->path, escaped, "path"));
		e |= json_object_set_new(o, "argv", argv);
		e |= json_object_set_new(o, "argv_truncated", json_boolean(x->argv_truncated));
		e |= json_object_set_new(o, "pid", json_integer(ev->pid));
		e |= json_object_set_new(o, "ppid", json_integer(x->ppid));
		e |= json_object_set_new(o, "uid", json_integer(x->uid));
		e |= json_object_set_new(o, "gid", json_integer(x->gid));
		e |= json_object_set_new(o, "cwd", string_or_escaped(x->cwd, escaped, "cwd"));
		if (x->cwd_truncated)
			e |= json_object_set_new(o, "cwd_truncated", json_true());
		if (json_array_size(escaped))
			e |= json_object_set_new(o, "escaped", escaped);
		else
			json_decref(escaped);
	} else if (ev->type == AUDIT_EV_CONNECT) {
		const struct audit_connect_event *c = &ev->connect;

		e |= json_object_set_new(o, "family",
					 json_string(c->family == AF_INET ? "inet" : "inet6"));
		e |= json_object_set_new(o, "address", json_string(c->address));
		e |= json_object_set_new(o, "port", json_integer(c->port));
		e |= json_object_set_new(o, "protocol", json_string(proto_name(c->protocol)));
		e |= json_object_set_new(o, "verdict",
					 json_string(audit_net_action_to_string(c->verdict)));
		e |= json_object_set_new(o, "pid", json_integer(ev->pid));
		e |= json_object_set_new(
		    o, "op", json_string(c->op == AUDIT_OP_SENDMSG ? "sendmsg" : "connect"));
	} else {
		goto out_fail;
	}
	if (e)
		goto out_fail;
	return o;

out_fail:
	json_decref(o);
	return NULL;
}

uint64_t audit_sweeps(const struct audit *a)
{
	return a->sweeps;
}
