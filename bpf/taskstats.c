/* SPDX-License-Identifier: MIT */
/* Taskstats fallback meter over libnl-genl-3. See taskstats.h and docs/metering.md. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/taskstats.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>

#include "bpf/taskstats.h"
#include "common/macro.h"

struct taskstats_client {
	struct nl_sock *sk;
	int family;
};

struct taskstats_listener {
	struct taskstats_client c;
	uint64_t overruns;
};

struct parse_ctx {
	struct taskstats_usage *one; /* queries: the answer */
	bool got;
	taskstats_exit_fn fn; /* listener: every record */
	void *userdata;
};

static int nl_to_errno(int nlerr)
{
	switch (-nlerr) {
	case NLE_NOMEM:
		return -ENOMEM;
	case NLE_PERM:
		return -EPERM;
	case NLE_OBJ_NOTFOUND:
		return -ESRCH;
	case NLE_AGAIN:
		return -EAGAIN;
	case NLE_NOACCESS:
		return -EACCES;
	case NLE_INVAL:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static void fill(struct taskstats_usage *u, const void *data, int len, uint32_t id, bool is_tgid)
{
	struct taskstats ts = {};

	/* Fields are only ever appended: copy what both the kernel and this header know. */
	memcpy(&ts, data, MIN((size_t)len, sizeof(ts)));
	*u = (struct taskstats_usage){
	    .pid = id,
	    .is_tgid = is_tgid,
	    .exit_code = ts.ac_exitcode,
	    .ppid = ts.ac_ppid,
	    .cpu_user_ns = ts.ac_utime * NSEC_PER_USEC,
	    .cpu_system_ns = ts.ac_stime * NSEC_PER_USEC,
	    .cpu_exec_ns = ts.cpu_run_virtual_total,
	    .cpu_run_real_ns = ts.cpu_run_real_total,
	    .read_chars = ts.read_char,
	    .write_chars = ts.write_char,
	    .read_syscalls = ts.read_syscalls,
	    .write_syscalls = ts.write_syscalls,
	    .blk_read_bytes = ts.read_bytes,
	    .blk_write_bytes = ts.write_bytes,
	    .cancelled_write_bytes = ts.cancelled_write_bytes,
	    .hiwater_rss_bytes = ts.hiwater_rss * 1024,
	    .hiwater_vm_bytes = ts.hiwater_vm * 1024,
	    .nvcsw = ts.nvcsw,
	    .nivcsw = ts.nivcsw,
	    .elapsed_ns = ts.ac_etime * NSEC_PER_USEC,
	    .cpu_delay_ns = ts.cpu_delay_total,
	    .blkio_delay_ns = ts.blkio_delay_total,
	};
	if (ts.version >= 12 && (size_t)len >= offsetof(struct taskstats, ac_tgid) + 4)
		u->tgid = ts.ac_tgid;
}

static int on_msg(struct nl_msg *msg, void *arg)
{
	struct parse_ctx *ctx = arg;
	struct nlattr *a[TASKSTATS_TYPE_MAX + 1], *n[TASKSTATS_TYPE_MAX + 1];
	struct taskstats_usage u;
	int agg;

	if (genlmsg_parse(nlmsg_hdr(msg), 0, a, TASKSTATS_TYPE_MAX, NULL) < 0)
		return NL_SKIP;
	if (a[TASKSTATS_TYPE_AGGR_PID])
		agg = TASKSTATS_TYPE_AGGR_PID;
	else if (a[TASKSTATS_TYPE_AGGR_TGID])
		agg = TASKSTATS_TYPE_AGGR_TGID;
	else
		return NL_SKIP;
	if (nla_parse_nested(n, TASKSTATS_TYPE_MAX, a[agg], NULL) < 0 || !n[TASKSTATS_TYPE_STATS])
		return NL_SKIP;
	uint32_t id = agg == TASKSTATS_TYPE_AGGR_PID
			  ? (n[TASKSTATS_TYPE_PID] ? nla_get_u32(n[TASKSTATS_TYPE_PID]) : 0)
			  : (n[TASKSTATS_TYPE_TGID] ? nla_get_u32(n[TASKSTATS_TYPE_TGID]) : 0);
	fill(&u, nla_data(n[TASKSTATS_TYPE_STATS]), nla_len(n[TASKSTATS_TYPE_STATS]), id,
	     agg == TASKSTATS_TYPE_AGGR_TGID);
	if (ctx->one) {
		*ctx->one = u;
		ctx->got = true;
	}
	if (ctx->fn)
		ctx->fn(&u, ctx->userdata);
	return NL_OK;
}

static int client_init(struct taskstats_client *c)
{
	int r;

	c->sk = nl_socket_alloc();
	if (!c->sk)
		return -ENOMEM;
	r = genl_connect(c->sk);
	if (r < 0)
		goto out_free;
	/* libnl sockets are not close-on-exec by default. */
	if (fcntl(nl_socket_get_fd(c->sk), F_SETFD, FD_CLOEXEC) < 0) {
		r = -NLE_FAILURE;
		goto out_free;
	}
	c->family = genl_ctrl_resolve(c->sk, TASKSTATS_GENL_NAME);
	if (c->family < 0) {
		r = c->family;
		goto out_free;
	}
	return 0;

out_free:
	nl_socket_free(c->sk);
	c->sk = NULL;
	return r == -NLE_OBJ_NOTFOUND ? -EOPNOTSUPP : nl_to_errno(r);
}

int taskstats_open(struct taskstats_client **ret)
{
	struct taskstats_client *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	r = client_init(c);
	if (r < 0) {
		free(c);
		return r;
	}
	*ret = c;
	return 0;
}

void taskstats_free(struct taskstats_client *c)
{
	if (!c)
		return;
	nl_socket_free(c->sk);
	free(c);
}

/* Sends one TASKSTATS_CMD_GET with attribute attr = value (u32) or string. */
static int send_cmd(struct taskstats_client *c, int attr, uint32_t value, const char *str)
{
	struct nl_msg *msg = nlmsg_alloc();
	int r;

	if (!msg)
		return -ENOMEM;
	if (!genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, c->family, 0, NLM_F_REQUEST,
			 TASKSTATS_CMD_GET, TASKSTATS_VERSION)) {
		nlmsg_free(msg);
		return -ENOMEM;
	}
	r = str ? nla_put_string(msg, attr, str) : nla_put_u32(msg, attr, value);
	if (r >= 0)
		r = nl_send_auto(c->sk, msg);
	nlmsg_free(msg);
	return r < 0 ? nl_to_errno(r) : 0;
}

static int query(struct taskstats_client *c, int attr, pid_t id, struct taskstats_usage *ret)
{
	struct taskstats_usage u;
	struct parse_ctx ctx = {.one = &u};
	int r;

	if (id <= 0)
		return -EINVAL;
	r = send_cmd(c, attr, (uint32_t)id, NULL);
	if (r < 0)
		return r;
	nl_socket_modify_cb(c->sk, NL_CB_VALID, NL_CB_CUSTOM, on_msg, &ctx);
	r = nl_recvmsgs_default(c->sk);
	if (r < 0)
		return nl_to_errno(r);
	if (!ctx.got)
		return -ESRCH;
	nl_wait_for_ack(c->sk);
	*ret = u;
	return 0;
}

int taskstats_query_pid(struct taskstats_client *c, pid_t pid, struct taskstats_usage *ret)
{
	return query(c, TASKSTATS_CMD_ATTR_PID, pid, ret);
}

int taskstats_query_tgid(struct taskstats_client *c, pid_t tgid, struct taskstats_usage *ret)
{
	return query(c, TASKSTATS_CMD_ATTR_TGID, tgid, ret);
}

int taskstats_listener_open(struct taskstats_listener **ret)
{
	struct taskstats_listener *l = calloc(1, sizeof(*l));
	char mask[32];
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	int r;

	if (!l)
		return -ENOMEM;
	r = client_init(&l->c);
	if (r < 0)
		goto out_free;
	if (ncpu < 1)
		ncpu = 1;
	snprintf(mask, sizeof(mask), "0-%ld", ncpu - 1);
	nl_socket_disable_seq_check(l->c.sk);
	nl_socket_set_buffer_size(l->c.sk, 1 << 20, 0);
	r = send_cmd(&l->c, TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, 0, mask);
	if (r < 0)
		goto out_sock;
	r = nl_wait_for_ack(l->c.sk);
	if (r < 0) {
		r = nl_to_errno(r);
		goto out_sock;
	}
	r = nl_socket_set_nonblocking(l->c.sk);
	if (r < 0) {
		r = nl_to_errno(r);
		goto out_sock;
	}
	*ret = l;
	return 0;

out_sock:
	nl_socket_free(l->c.sk);
out_free:
	free(l);
	return r;
}

void taskstats_listener_free(struct taskstats_listener *l)
{
	if (!l)
		return;
	nl_socket_free(l->c.sk); /* closing the socket deregisters it */
	free(l);
}

int taskstats_listener_fd(const struct taskstats_listener *l)
{
	return nl_socket_get_fd(l->c.sk);
}

int taskstats_listener_poll(struct taskstats_listener *l, taskstats_exit_fn fn, void *userdata)
{
	struct parse_ctx ctx = {.fn = fn, .userdata = userdata};

	nl_socket_modify_cb(l->c.sk, NL_CB_VALID, NL_CB_CUSTOM, on_msg, &ctx);
	for (int i = 0; i < 1024; i++) {
		int r = nl_recvmsgs_default(l->c.sk);

		if (r == -NLE_AGAIN)
			return 0;
		if (r == -NLE_NOMEM) { /* ENOBUFS: the kernel dropped records */
			l->overruns++;
			continue;
		}
		if (r < 0)
			return nl_to_errno(r);
	}
	return 0;
}

uint64_t taskstats_listener_overruns(const struct taskstats_listener *l)
{
	return l->overruns;
}
