/* SPDX-License-Identifier: MIT */
/*
 * Audit trail in the agent: the BPF audit programs (bpf/audit.h) report every exec and every
 * connect/sendmsg decision of tracked tasks; each event becomes an audit.exec / audit.connect
 * record in the per-node hash chain. Per-task network policy (--allow-net / --deny-net, default
 * from [audit] net_default) is enforced in cgroup/connect4|6 and sendmsg4|6. The task's record
 * budget (agent/budget.h) is kept in BPF too: events past it are counted there and folded into
 * its audit.summary records. Events the ring buffer could not take are counted per task in BPF
 * and reported as an audit.lost record.
 * Calls the seccomp profile denied become audit.syscall records (see agent/audit_glue.h).
 */
#include "agent/audit_glue.h"
#include "agent/agent.h"
#include "agent/log.h"
#include "agent/loop.h"
#include "agent/meters.h"
#include "agent/state.h"
#include "agent/emit.h"
#include "agent/budget.h"
#include "agent/task_index.h"
#include "bpf/audit.h"
#include "bpf/meter.h"
#include "common/macro.h"
#include "isolation/cgroup.h"
#include "isolation/launch.h"
#include "isolation/seccomp.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <unistd.h>

#define NET_RULES_MAX 32

static void addrs_changed(struct agent *a);
static bool audit_glue_budget_poll(struct agent *a, struct task *t);
static bool audit_glue_syscalls_poll(struct agent *a, struct task *t);
static void on_audit_fd(void *data, int fd, uint32_t events);

/* rtnetlink readable: the node's addresses changed. */
static void on_addrs_fd(void *data, int fd, uint32_t events)
{
	addrs_changed(data);
}

static void syscalls_watch(struct agent *a);

int audit_glue_init(struct agent *a)
{
	struct audit_opts o = {.max_tasks = a->cfg.max_tasks,
			       .argv_max = a->cfg.audit_argv_max,
			       .force_raw_tp = a->cfg.bpf == BPF_MODE_RAW_TP};
	int r;

	if (a->cfg.audit)
		syscalls_watch(a);
	if (!a->cfg.audit || a->cfg.bpf == BPF_MODE_OFF)
		return 0;
	if (a->meter) {
		/* One fork and one exit program on the node: the meter's, with its member map. */
		o.share_members = true;
		o.members_fd = meter_members_fd(a->meter);
	}
	r = audit_open(&o, &a->audit);
	if (r < 0 && o.share_members) {
		log_warning("audit trail: sharing the meter's task membership failed (%s): with "
			    "programs of its own",
			    strerror(-r));
		o.share_members = false;
		r = audit_open(&o, &a->audit);
	}
	if (r < 0) {
		log_warning("audit trail unavailable (%s): no exec/connect records, network policy "
			    "cannot be enforced (tasks asking for one are refused)",
			    strerror(-r));
		a->audit = NULL;
		return 0;
	}
	loop_add(a->loop, audit_fd(a->audit), EPOLLIN, on_audit_fd, a);
	if (audit_addr_fd(a->audit) >= 0) {
		loop_add(a->loop, audit_addr_fd(a->audit), EPOLLIN, on_addrs_fd, a);
	} else {
		log_warning("network policy: no rtnetlink socket (%s): the node's addresses are "
			    "re-read on each tick instead of on change",
			    strerror(-audit_addr_fd(a->audit)));
	}
	log_info("audit trail loaded (%s)", audit_attach_mode(a->audit));
	addrs_changed(a);
	return 0;
}

void audit_glue_addrs_tick(struct agent *a)
{
	if (a->audit && audit_addr_fd(a->audit) < 0)
		addrs_changed(a);
}

/* Re-read the node's addresses for the network policy. */
static void addrs_changed(struct agent *a)
{
	size_t dropped = 0;
	int r;

	if (!a->audit)
		return;
	r = audit_addr_changed(a->audit);
	if (r < 0) {
		log_warning("network policy: reading the node's addresses failed: %s",
			    strerror(-r));
		return;
	}
	(void)audit_node_addrs(a->audit, &dropped);
	if (dropped && dropped != a->audit_addrs_dropped)
		log_warning("network policy: the node has %zu addresses more than the %d the "
			    "policy tracks as local; connects to those are matched as themselves",
			    dropped, AUDIT_NODE_ADDRS_MAX);
	a->audit_addrs_dropped = dropped;
}

void audit_glue_fini(struct agent *a)
{
	if (a->syscalls_inotify_fd >= 0) {
		loop_del(a->loop, a->syscalls_inotify_fd);
		closep(&a->syscalls_inotify_fd);
		a->syscalls_inotify_fd = -1;
	}
	if (a->audit) {
		loop_del(a->loop, audit_fd(a->audit));
		loop_del(a->loop, audit_addr_fd(a->audit));
		audit_free(a->audit);
	}
	a->audit = NULL;
}

/* Rules in order: allow rules first, then deny rules, first match wins; then the default. */
static int build_policy(struct agent *a, const struct task_spec *s, struct audit_net_rule *rules,
			struct audit_net_policy *p, char *err, size_t errlen)
{
	char e[256];
	size_t n = 0;
	int r;

	if (s->n_net_allow + s->n_net_deny > NET_RULES_MAX) {
		snprintf(err, errlen, "allow_net/deny_net: at most %d rules", NET_RULES_MAX);
		return -EINVAL;
	}
	for (size_t i = 0; i < s->n_net_allow; i++) {
		r = audit_net_rule_parse(s->net_allow[i], AUDIT_NET_ALLOW, &rules[n++], e,
					 sizeof(e));
		if (r < 0) {
			snprintf(err, errlen, "allow_net[%zu]: %s", i, e);
			return r;
		}
	}
	for (size_t i = 0; i < s->n_net_deny; i++) {
		r = audit_net_rule_parse(s->net_deny[i], AUDIT_NET_DENY, &rules[n++], e, sizeof(e));
		if (r < 0) {
			snprintf(err, errlen, "deny_net[%zu]: %s", i, e);
			return r;
		}
	}
	*p = (struct audit_net_policy){
	    .default_action = a->cfg.net_default_deny ? AUDIT_NET_DENY : AUDIT_NET_ALLOW,
	    .n_rules = n,
	    .rules = rules,
	};
	return 0;
}

/* The spec's network policy: can it be built, and enforced on this node? */
static int audit_glue_check_rules(struct agent *a, const struct task_spec *s, char *err,
				  size_t errlen)
{
	struct audit_net_rule rules[NET_RULES_MAX];
	struct audit_net_policy p;
	int r = build_policy(a, s, rules, &p, err, errlen);

	if (r < 0)
		return r;
	if (!a->audit && (p.n_rules || p.default_action == AUDIT_NET_DENY)) {
		snprintf(err, errlen,
			 "network policy requested but the audit/policy programs are not "
			 "loaded on this node");
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The kernel side of the task's record budget: the same bucket, the summary's sample. */
static void audit_glue_budget_of(const struct agent *a, const struct task *t,
				 struct audit_budget *kb)
{
	const struct task_budget *b = &t->budget;

	*kb = (struct audit_budget){
	    .rate = b->rate,
	    .burst = b->burst,
	    .sample_max = a->cfg.audit_summary_sample,
	    .sample_period_ns = a->cfg.audit_summary_interval_ns,
	    .closed = b->kernel_closed,
	    .restore = b->restored,
	    .tokens = b->tokens,
	};
}

static int audit_glue_track(struct agent *a, struct task *t, char *err, size_t errlen)
{
	struct audit_net_rule rules[NET_RULES_MAX];
	struct audit_net_policy p;
	struct audit_budget kb;
	int r;

	if (!a->audit)
		return 0;
	r = build_policy(a, &t->spec, rules, &p, err, errlen);
	if (r < 0)
		return r;
	audit_glue_budget_of(a, t, &kb);
	r = audit_track_budget(a->audit, t->key, t->pid, t->cg ? cg_task_unified_fd(t->cg) : -1, &p,
			       &kb);
	if (r < 0) {
		if (p.n_rules || p.default_action == AUDIT_NET_DENY) {
			snprintf(err, errlen, "network policy could not be attached: %s",
				 strerror(-r));
			return r;
		}
		log_warning("task %s: audit unavailable for this task: %s", t->id, strerror(-r));
		return 0;
	}
	t->audit_tracked = true;
	t->budget.kernel = true;
	budget_touch(a, t);
	return 0;
}

/*
 * Re-adoption after an agent restart: the programs were loaded anew, so the task is tracked
 * again (its network policy enforced again, its processes' execs audited) with its budget as
 * it was saved (budget_restore). Processes are taken from its cgroup (twice: a process forked
 * in between by one not yet tracked is caught by the second pass; after it, fork tracking
 * covers the children).
 */
static void audit_glue_readopt(struct agent *a, struct task *t)
{
	struct audit_net_rule rules[NET_RULES_MAX];
	struct audit_net_policy p;
	struct audit_budget kb;
	char err[256];
	size_t more = 0;
	pid_t first = 0;
	int r;

	if (!a->audit || !t->cg || t->audit_tracked)
		return;
	if (build_policy(a, &t->spec, rules, &p, err, sizeof(err)) < 0) {
		log_warning("task %s: not audited after the restart: %s", t->id, err);
		return;
	}
	for (int pass = 0; pass < 2; pass++) {
		_cleanup_free_ pid_t *pids = NULL;
		size_t n = 0;

		if (cg_task_pids(t->cg, &pids, &n) < 0)
			break;
		for (size_t i = 0; !first && i < n; i++)
			if (pids[i] == t->pid)
				first = pids[i];
		for (size_t i = 0; !first && i < n; i++)
			if (pids[i] != t->shim_pid)
				first = pids[i];
		if (!first)
			break;
		if (!t->audit_tracked) {
			audit_glue_budget_of(a, t, &kb);
			r = audit_track_budget(a->audit, t->key, first, cg_task_unified_fd(t->cg),
					       &p, &kb);
			if (r < 0) {
				log_warning("task %s: not audited after the restart: %s", t->id,
					    strerror(-r));
				return;
			}
			t->audit_tracked = true;
			t->budget.kernel = true;
			budget_touch(a, t); /* a bucket carried over may be short of tokens */
		}
		for (size_t i = 0; i < n; i++)
			if (pids[i] != first && pids[i] != t->shim_pid &&
			    audit_track_more(a->audit, t->key, pids[i]) == 0)
				more++;
	}
	if (t->audit_tracked)
		log_info("task %s: audit tracking resumed (%zu process(es))%s", t->id, more + 1,
			 t->budget.restored ? ", its record budget carried over" : "");
}

void audit_glue_stop(struct agent *a)
{
	if (!a->audit)
		return;
	audit_glue_poll(a);
	for (struct task *t = a->tasks; t; t = t->next) {
		if (!t->audit_tracked || t->state != TASK_RUNNING)
			continue;
		/* what the kernel counted goes with this instance of the programs: into a
		 * summary now, and the bucket's level into the state file */
		audit_glue_budget_poll(a, t);
		budget_flush_summary(a, t, 0, true);
		t->budget.dirty = true;
		a->tasks_flush_due = true;
	}
}

/*
 * The kernel's counts past the task's budget folded in, its bucket's level taken. True when the
 * kernel cannot count an event of the task without sending one first: no kernel budget, or a
 * bucket with a token at least (its next event is sent: an audit event the agent sees). False
 * too when the state could not be read.
 */
static bool audit_glue_budget_poll(struct agent *a, struct task *t)
{
	struct audit_budget_state st;
	uint64_t totals[BUDGET_KERNEL_KINDS];

	if (!a->audit || !t->audit_tracked || !t->budget.kernel)
		return true;
	if (audit_budget_state(a->audit, t->key, &st) < 0)
		return false;
	totals[BUDGET_K_EXEC] = st.over_exec;
	totals[BUDGET_K_CONNECT_ALLOW] = st.over_connect_allow;
	totals[BUDGET_K_CONNECT_DENY] = st.over_connect_deny;
	budget_count_kernel(a, t, totals);
	if (st.tokens >= 0)
		t->budget.tokens = st.tokens;
	return st.tokens < 0 || st.tokens >= 1.0; /* < 0: no rate, every event sent */
}

/* The task's byte budget is spent: the kernel counts every further event. */
static void close_kernel_budget(struct agent *a, struct task *t)
{
	struct audit_budget kb;
	int r;

	t->budget.kernel_closed = true;
	audit_glue_budget_of(a, t, &kb);
	r = audit_set_budget(a->audit, t->key, &kb);
	if (r < 0)
		log_warning("task %s: closing its audit budget in the kernel failed: %s", t->id,
			    strerror(-r));
}

static json_t *event_json(const void *ctx)
{
	return audit_event_to_json(ctx);
}

/* "path" of an exec, "address:port verdict" of a connect ([v6]:port); no printf: it runs for
 * every event of a task past its budget. */
static void event_dest(const struct audit_event *ev, char *buf, size_t len)
{
	const char *parts[6];
	char port[8];
	size_t n = 0, o = 0;

	if (ev->type == AUDIT_EV_EXEC) {
		parts[n++] = ev->exec.path ? ev->exec.path : "";
	} else {
		unsigned p = ev->connect.port, k = sizeof(port) - 1;

		port[k] = 0;
		do
			port[--k] = (char)('0' + p % 10);
		while ((p /= 10) && k);
		if (ev->connect.family == AF_INET6)
			parts[n++] = "[";
		parts[n++] = ev->connect.address;
		parts[n++] = ev->connect.family == AF_INET6 ? "]:" : ":";
		parts[n++] = port + k;
		parts[n++] = " ";
		parts[n++] = audit_net_action_to_string(ev->connect.verdict);
	}
	for (size_t i = 0; i < n; i++)
		for (const char *q = parts[i]; q && *q && o + 1 < len; q++)
			buf[o++] = *q;
	buf[o] = 0;
}

static void on_event(const struct audit_event *ev, void *userdata)
{
	struct agent *a = userdata;
	enum acct_type kind = ev->type == AUDIT_EV_EXEC ? ACCT_AUDIT_EXEC : ACCT_AUDIT_CONNECT;
	struct acct_record r;
	char dest[BUDGET_DEST_MAX];
	struct task *t;

	t = task_live(a, ev->task_key); /* an index: no walk of the tasks per event */
	if (t && !t->spec.argc)
		t = NULL;
	bool straggler = false;

	for (struct task *e = t ? NULL : a->ended; e && !t; e = e->next)
		if (e->key == ev->task_key && e->spec.argc)
			t = e; /* an event that arrived after its task ended */
	if (!t)
		return;
	/* its last summary is written: a straggler is recorded as it is */
	straggler = t->state == TASK_ENDED;
	if (!straggler)
		budget_touch(a, t); /* the budgets' walk looks at it until it is quiet again */
	/* past the task's budget (the kernel's sample of such events, or its bytes spent):
	 * counted into its next audit.summary, nothing else built */
	if (!straggler && (ev->over_budget || !budget_take(t))) {
		if (!ev->over_budget && t->budget.kernel && !t->budget.kernel_closed &&
		    t->budget.bytes && t->budget.audit_bytes >= t->budget.bytes)
			close_kernel_budget(a, t);
		if (ev->over_budget && !t->budget.over)
			t->budget.over = t->budget.kernel_closed ? "bytes" : "rate";
		event_dest(ev, dest, sizeof(dest));
		budget_count(a, t, kind, dest, event_json, ev);
		return;
	}
	task_fill_record(a, t, kind, &r);
	r.event = audit_event_to_json(ev);
	if (ev->time_ns)
		r.time_ns = ev->time_ns;
	if (r.event && agent_emit_record(a, &r) == 0)
		budget_note_bytes(t, a->last_emit_len);
	acct_record_clear(&r);
}

void audit_glue_poll(struct agent *a)
{
	if (a->audit)
		(void)audit_poll(a->audit, on_event, a);
}

static void on_audit_fd(void *data, int fd, uint32_t events)
{
	audit_glue_poll(data);
}

static void audit_glue_task_end(struct agent *a, struct task *t)
{
	uint64_t lost = 0;

	(void)audit_glue_syscalls_poll(a, t);
	if (!a->audit || !t->audit_tracked)
		return;
	(void)audit_poll(a->audit, on_event, a);
	audit_glue_budget_poll(a, t);
	budget_flush_summary(a, t, 0, true);
	if (audit_lost(a->audit, t->key, &lost) == 0 && lost > t->audit_lost_reported) {
		struct acct_record r;

		task_fill_record(a, t, ACCT_AUDIT_LOST, &r);
		r.event =
		    json_pack("{s:I,s:I}", "lost", (json_int_t)(lost - t->audit_lost_reported),
			      "total", (json_int_t)lost);
		(void)agent_emit_record(a, &r);
		acct_record_clear(&r);
		log_warning("task %s: %llu audit event(s) lost (ring buffer full), reported as "
			    "audit.lost",
			    t->id, (unsigned long long)(lost - t->audit_lost_reported));
		t->audit_lost_reported = lost;
	}
	(void)audit_forget(a->audit, t->key);
	t->audit_tracked = false;
}

/* ---- audit.syscall ------------------------------------------------------------------------- */

static void audit_glue_syscalls_path(const struct agent *a, const struct task *t, char *buf,
				     size_t len)
{
	state_task_path(a, t, "tasks", ".syscalls", buf, len);
}

/*
 * event: {seq, name, number, arch, action, errno (errno actions), pid, tid (when not the
 * process's main thread), args[6] (hex strings: raw registers, the kernel knows no arity)}.
 */
static void emit_syscall(struct agent *a, struct task *t, const struct launch_syscall_line *l)
{
	struct acct_record r;
	const char *arch = NULL;
	char name[64];
	json_t *args = json_array();

	(void)sbx_syscall_name(l->arch, l->nr, name, sizeof(name), &arch);
	for (size_t i = 0; args && i < ARRAY_SIZE(l->args); i++) {
		char hex[24];

		snprintf(hex, sizeof(hex), "0x%" PRIx64, l->args[i]);
		json_array_append_new(args, json_string(hex));
	}
	task_fill_record(a, t, ACCT_AUDIT_SYSCALL, &r);
	r.time_ns = l->time_ns;
	r.event = json_pack("{s:I,s:s,s:i,s:s,s:s,s:i,s:o*}", "seq", (json_int_t)l->seq, "name",
			    name, "number", (int)l->nr, "arch", arch ? arch : "unknown", "action",
			    sbx_action_name(l->action), "pid", (int)l->pid, "args", args);
	if (r.event && (l->action & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO)
		json_object_set_new(r.event, "errno", json_integer(l->action & SECCOMP_RET_DATA));
	if (r.event && l->tid != l->pid)
		json_object_set_new(r.event, "tid", json_integer(l->tid));
	if (r.event)
		(void)agent_emit_record(a, &r);
	else
		log_error("task %s: building the audit.syscall record %" PRIu64 " failed", t->id,
			  l->seq);
	acct_record_clear(&r);
}

static void syscalls_line(struct agent *a, struct task *t, const char *s)
{
	struct launch_syscall_line l;

	if (launch_parse_syscall_line(s, &l) < 0) {
		log_warning("task %s: malformed line in its syscalls file: \"%.80s\"", t->id, s);
		return;
	}
	if (l.kind == LAUNCH_SYSCALL_END)
		t->syscalls_done = true;
	if (l.seq <= t->syscalls_seq)
		return; /* turned into a record before an agent restart */
	t->syscalls_seq = l.seq;
	a->tasks_flush_due = true;
	if (l.kind == LAUNCH_SYSCALL_CALL) {
		emit_syscall(a, t, &l);
		return;
	}
	if (l.total > l.recorded) {
		struct acct_record r;

		task_fill_record(a, t, ACCT_AUDIT_LOST, &r);
		r.event =
		    json_pack("{s:s,s:I,s:I,s:I,s:I}", "kind", "syscall", "lost",
			      (json_int_t)(l.total - l.recorded), "total", (json_int_t)l.total,
			      "cap", (json_int_t)t->syscalls_max, "seq", (json_int_t)l.seq);
		if (r.event)
			(void)agent_emit_record(a, &r);
		acct_record_clear(&r);
		log_notice("task %s: %" PRIu64 " denied call(s), %" PRIu64
			   " beyond the per-task cap counted in audit.lost",
			   t->id, l.total, l.total - l.recorded);
	}
	if (!l.listener && t->status != ACCT_EXIT_LAUNCH_FAILED)
		log_warning("task %s: its denied calls were not audited (the profile would block "
			    "the listener handoff: sendmsg/read)",
			    t->id);
}

static bool audit_glue_syscalls_poll(struct agent *a, struct task *t)
{
	static char buf[64 * 1024];
	_cleanup_close_ int fd = -1;
	char path[512];

	if (!t->syscall_audit || t->syscalls_done)
		return true;
	audit_glue_syscalls_path(a, t, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		if (errno != ENOENT)
			return false;
		log_warning("task %s: %s is gone: its denied calls are not known", t->id, path);
		t->syscalls_done = true;
		return true;
	}
	/* Only whole lines are consumed; a line being appended is read next time. */
	while (!t->syscalls_done) {
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, (off_t)t->syscalls_off);
		size_t used = 0;
		char *nl;

		if (n <= 0)
			break;
		buf[n] = 0;
		while ((nl = memchr(buf + used, '\n', (size_t)n - used))) {
			*nl = 0;
			syscalls_line(a, t, buf + used);
			used = (size_t)(nl - buf) + 1;
		}
		if (used == 0) {
			if ((size_t)n < sizeof(buf) - 1)
				break;
			used = (size_t)n; /* no newline in 64 KiB: not a line of ours, skip it */
		}
		t->syscalls_off += used;
	}
	return t->syscalls_done;
}

/*
 * The shims append denied calls to tasks/<id>.syscalls: one inotify watch on the directory
 * (and on state_dir's for tasks an older agent started there) says which file grew, so the
 * agent reads that task's file when it changes instead of every task's at every tick. Without
 * the watch (a->syscalls_inotify_fd < 0) the tick reads them as before.
 */
static void syscalls_poll_all(struct agent *a)
{
	for (struct task *t = a->tasks; t; t = t->next)
		if (t->state == TASK_RUNNING)
			(void)audit_glue_syscalls_poll(a, t);
}

/*
 * The live task a denied-calls file names: found by its key, the last hex field of its id
 * (state_next_task_id: "t-<seconds>-<key>"), and checked against the whole id; NULL for a task
 * that is not live. An id of another form is looked for in the list.
 */
static struct task *live_task_of_id(struct agent *a, const char *id)
{
	const char *dash = strrchr(id, '-');
	unsigned long long k;
	struct task *t;
	char *end;

	if (dash && isxdigit((unsigned char)dash[1])) {
		errno = 0;
		k = strtoull(dash + 1, &end, 16);
		if (errno == 0 && *end == 0) {
			t = task_live(a, (uint64_t)k);
			return t && strcmp(t->id, id) == 0 ? t : NULL;
		}
	}
	for (t = a->tasks; t && strcmp(t->id, id) != 0; t = t->next)
		;
	return t;
}

static void on_syscalls_inotify(void *data, int fd, uint32_t events)
{
	struct agent *a = data;
	char buf[16 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n <= 0)
			return;
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			size_t len = ev->len ? strnlen(ev->name, ev->len) : 0;
			char id[sizeof(((struct task *)0)->id)];
			struct task *t;

			p += sizeof(*ev) + ev->len;
			if (ev->mask & IN_Q_OVERFLOW) {
				syscalls_poll_all(a);
				continue;
			}
			if (len <= 9 || len - 9 >= sizeof(id) ||
			    strcmp(ev->name + len - 9, ".syscalls") != 0)
				continue;
			memcpy(id, ev->name, len - 9);
			id[len - 9] = 0;
			t = live_task_of_id(a, id);
			if (t && t->state == TASK_RUNNING)
				(void)audit_glue_syscalls_poll(a, t);
		}
	}
}

static void syscalls_watch(struct agent *a)
{
	char dir[512];
	int fd, w;

	a->syscalls_inotify_fd = -1;
	fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0)
		goto fail;
	snprintf(dir, sizeof(dir), "%s/tasks", agent_runtime_dir(a));
	w = inotify_add_watch(fd, dir, IN_MODIFY | IN_CLOSE_WRITE);
	if (w < 0)
		goto fail_close;
	if (strcmp(agent_runtime_dir(a), a->cfg.state_dir) != 0) {
		/* tasks an older agent started keep their files there; it may not exist */
		snprintf(dir, sizeof(dir), "%s/tasks", a->cfg.state_dir);
		(void)inotify_add_watch(fd, dir, IN_MODIFY | IN_CLOSE_WRITE);
	}
	if (loop_add(a->loop, fd, EPOLLIN, on_syscalls_inotify, a) < 0)
		goto fail_close;
	a->syscalls_inotify_fd = fd;
	return;
fail_close:
	close(fd);
fail:
	log_notice("denied-call audit: no inotify watch on %s/tasks (%s): the files are read "
		   "at every tick",
		   agent_runtime_dir(a), strerror(errno));
}

static bool audit_glue_syscalls_settled(struct agent *a, struct task *t, bool give_up)
{
	if (audit_glue_syscalls_poll(a, t) || t->status == ACCT_EXIT_LOST)
		return true;
	if (give_up)
		log_warning(
		    "task %s: its supervisor did not finish the syscalls file; denied calls "
		    "after line %" PRIu64 " are not known",
		    t->id, t->syscalls_seq);
	return give_up;
}

/* ---- the audit meter (agent/meters.h) ------------------------------------------------------ */

/*
 * The budgets' walk looks at the tasks whose budget can have moved (budget_touch: an audit
 * event, a new or re-adopted task, a pending summary or save, a kernel bucket short of a
 * token), not at every task: an idle task costs it nothing. BUDGET_WALK_ALL: every so many
 * walks, all live tasks; BUDGET_BATCH_MIN: more tasks than this read the maps whole.
 */
#define BUDGET_WALK_ALL	 32
#define BUDGET_BATCH_MIN 64

void audit_glue_tick(struct agent *a, uint64_t now_mono)
{
	/* events of tasks held to their rate come without a wakeup (bpf/audit.bpf.c) */
	audit_glue_poll(a);
	/*
	 * The kernel's counts past each task's budget, the summaries due and the budgets to save:
	 * one walk per summary interval for all tasks, not one per tick (with one batched read of
	 * each of the two BPF maps). A summary comes out at most one interval after its window
	 * closes.
	 */
	if (now_mono >= a->budget_due_mono) {
		struct task *t, *next;
		unsigned n = 0;
		bool batch;

		a->budget_due_mono = now_mono + a->cfg.audit_summary_interval_ns;
		/* every BUDGET_WALK_ALL walks, every live task: one whose events were all lost
		 * (a full ring buffer) while its bucket was empty gets its summaries all the same
		 */
		if (++a->budget_walks >= BUDGET_WALK_ALL) {
			a->budget_walks = 0;
			for (t = a->tasks; t; t = t->next)
				budget_touch(a, t);
		}
		for (t = budget_next(a, NULL); t && n <= BUDGET_BATCH_MIN; t = budget_next(a, t))
			n++;
		/* many tasks: the kernel's figures in one batched read per map */
		batch = a->audit && n > BUDGET_BATCH_MIN;
		if (batch)
			(void)audit_batch(a->audit, true); /* failed: one read per task */
		for (t = budget_next(a, NULL); t; t = next) {
			bool kernel_quiet;

			next = budget_next(a, t);
			if (t->state == TASK_ENDED) { /* its end flushed it */
				budget_untouch(t);
				continue;
			}
			kernel_quiet = audit_glue_budget_poll(a, t);
			budget_tick_task(a, t, now_mono);
			if (kernel_quiet && budget_quiet(t))
				budget_untouch(t);
		}
		if (batch)
			(void)audit_batch(a->audit, false);
	}
	if (a->gap.count)
		(void)agent_gap_emit(a);
}

/*
 * The launch: the spec's network policy checked (one the node cannot enforce refuses the
 * task); with [audit] on, the filter compiled in the variant that notifies the shim of denied
 * calls, and the file it appends them to (the task audits them when its filter notifies,
 * plan_fill).
 */
static int audit_prepare(struct agent *a, struct task *t, struct meter_launch *ml, char *err,
			 size_t errlen)
{
	int r = audit_glue_check_rules(a, &t->spec, err, errlen);

	if (r < 0) {
		ml->refused = true;
		return r;
	}
	if (a->cfg.audit) {
		ml->filter_flags |= SBX_COMPILE_NOTIFY;
		audit_glue_syscalls_path(a, t, ml->syscalls_file, sizeof(ml->syscalls_file));
	}
	return 0;
}

/* A launch that failed: the denied-calls file the shim may have begun goes. */
static void audit_unprepare(struct agent *a, struct task *t)
{
	char path[512];

	if (!t->syscall_audit)
		return;
	audit_glue_syscalls_path(a, t, path, sizeof(path));
	(void)unlink(path);
}

static void audit_adopted(struct agent *a, struct task *t, bool live)
{
	if (live)
		audit_glue_readopt(a, t);
}

/* The inotify handler reads only running tasks' files: what a task's file got while it was
 * starting (between the go and the exec's result) is read now, not at its next sample. */
static void audit_running(struct agent *a, struct task *t)
{
	(void)audit_glue_syscalls_poll(a, t);
}

/* With the inotify watch the denied calls are read as they come, and at the samples as a
 * safety net; without it at every tick. */
static bool audit_tick(struct agent *a, struct task *t, uint64_t now_mono)
{
	(void)audit_glue_syscalls_poll(a, t);
	return false;
}

static bool audit_tick_every(const struct agent *a, const struct task *t)
{
	return t->syscall_audit && !t->syscalls_done && a->syscalls_inotify_fd < 0;
}

static void audit_end(struct agent *a, struct task *t)
{
	audit_glue_task_end(a, t);
}

/* The spooled seq and the budget are kept in the state file once the records they cover are
 * in the spool. */
static bool audit_flushed(struct agent *a, struct task *t)
{
	bool seq = t->syscall_audit && t->syscalls_seq != t->syscalls_seq_saved;

	if (!seq && !t->budget.dirty)
		return false;
	t->syscalls_seq_saved = t->syscalls_seq;
	t->budget.dirty = false;
	/* An ended task's state file goes away in this flush (the spool has its seq). */
	return t->state != TASK_ENDED;
}

static void audit_save(struct agent *a, struct task *t, json_t *state)
{
	if (a->audit)
		json_object_set_new(state, "audit_budget", budget_state_json(t));
}

/*
 * The budget as saved (carried over); the syscall position as far as the spool has it. A
 * position the spool shows beyond the state file's (a crash between a record's spool append
 * and the file's write) is saved at the next flush: once those records are acked, the unacked
 * spool no longer shows them, and the next start would turn their lines into records again.
 */
static void audit_restore(struct agent *a, struct task *t, const json_t *state)
{
	uint64_t spooled = state_spooled_seq(a, t->id);

	budget_init(a, t);
	budget_restore(t, json_object_get(state, "audit_budget"));
	t->syscalls_seq_saved = t->syscalls_seq;
	if (spooled > t->syscalls_seq) {
		t->syscalls_seq = spooled;
		a->tasks_flush_due = true;
	}
}

const struct meter_ops meter_audit_ops = {
    .name = "audit",
    .prepare = audit_prepare,
    .unprepare = audit_unprepare,
    .started = audit_glue_track,
    .running = audit_running,
    .adopted = audit_adopted,
    .tick = audit_tick,
    .tick_every = audit_tick_every,
    .settled = audit_glue_syscalls_settled,
    .end = audit_end,
    .flushed = audit_flushed,
    .save = audit_save,
    .restore = audit_restore,
    .release = budget_free,
};
