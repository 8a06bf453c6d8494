// SPDX-License-Identifier: MIT
/*
 * Taskstats fallback meter: when the BPF programs are not loaded, the agent listens to the
 * kernel's per-thread exit records (bpf/taskstats.h) and sums, per task, the bytes its
 * processes passed to read/write-family syscalls (rchar/wchar, the figures /proc/PID/io
 * shows), plus the exact on-CPU time and the RSS high-water mark as cross-checks.
 *
 * Attribution (no BPF map tells us which pid belongs to which task):
 *  - a task's set of thread-group ids starts with its first process (known at launch);
 *  - an exit record whose tgid is in a set belongs to that task; one whose parent (ac_ppid)
 *    is in a set belongs to it too, and its tgid joins the set;
 *  - children usually exit before their parents, so a record that matches nothing yet waits
 *    in a bounded pending list and is matched again whenever a tgid joins a set (its tgid or
 *    its parent may be the newcomer); unmatched records expire after PENDING_TTL;
 *  - every tick, and right before the agent kills a task's leftovers, the processes in the
 *    task's cgroup join its set (this catches orphans reparented to init and long-lived
 *    processes whose other threads exited earlier).
 * What can still escape: an orphaned process that is created and exits between two ticks
 * after its parent has exited. Records the kernel dropped (socket overflow) are counted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/log.h"
#include "agent/loop.h"
#include "agent/meters.h"
#include "agent/taskstats_glue.h"
#include "bpf/taskstats.h"
#include "common/macro.h"
#include "common/clock.h"
#include "isolation/cgroup.h"

#define PENDING_MAX	   16384
#define PENDING_TTL_NS	   (10 * NSEC_PER_SEC)
#define TGIDS_PER_TASK_MAX 65536

struct ts_task {
	uint32_t *tgids;
	size_t n_tgids, cap_tgids;
	uint64_t read_chars, write_chars, blk_read, blk_write, cpu_exec_ns, hiwater_rss;
	uint64_t records;
	bool overflow; /* more processes than TGIDS_PER_TASK_MAX: figures are a lower bound */
};

struct ts_pending {
	struct taskstats_usage u;
	uint64_t at_mono;
};

struct ts_glue {
	struct taskstats_listener *l;
	struct ts_pending *pend; /* ring buffer */
	size_t head, n;
	uint64_t expired, dropped;
};

static bool has_tgid(const struct ts_task *s, uint32_t tgid)
{
	for (size_t i = 0; i < s->n_tgids; i++)
		if (s->tgids[i] == tgid)
			return true;
	return false;
}

static bool add_tgid(struct ts_task *s, uint32_t tgid)
{
	if (tgid == 0 || has_tgid(s, tgid))
		return false;
	if (s->n_tgids == s->cap_tgids) {
		size_t cap = s->cap_tgids ? s->cap_tgids * 2 : 16;
		uint32_t *p;

		if (cap > TGIDS_PER_TASK_MAX) {
			s->overflow = true;
			return false;
		}
		p = realloc(s->tgids, cap * sizeof(*p));
		if (!p) {
			s->overflow = true;
			return false;
		}
		s->tgids = p;
		s->cap_tgids = cap;
	}
	s->tgids[s->n_tgids++] = tgid;
	return true;
}

static void account(struct ts_task *s, const struct taskstats_usage *u)
{
	s->read_chars += u->read_chars;
	s->write_chars += u->write_chars;
	s->blk_read += u->blk_read_bytes;
	s->blk_write += u->blk_write_bytes >= u->cancelled_write_bytes
			    ? u->blk_write_bytes - u->cancelled_write_bytes
			    : 0;
	s->cpu_exec_ns += u->cpu_exec_ns;
	s->hiwater_rss = MAX(s->hiwater_rss, u->hiwater_rss_bytes);
	s->records++;
}

static uint32_t tgid_of(const struct taskstats_usage *u)
{
	return u->tgid ? u->tgid : u->pid;
}

static struct task *owner_of(struct agent *a, uint32_t tgid)
{
	for (struct task *t = a->tasks; t; t = t->next)
		if (t->state != TASK_ENDED && t->ts && has_tgid(t->ts, tgid))
			return t;
	return NULL;
}

/* A tgid joined a task's set: pending records of it, or of its children, are the task's. */
static void resolve_pending(struct ts_glue *g, struct task *t, uint32_t tgid)
{
	uint32_t stack[64];
	size_t sp = 0;

	stack[sp++] = tgid;
	while (sp > 0) {
		uint32_t x = stack[--sp];

		for (size_t k = 0; k < g->n; k++) {
			struct ts_pending *p = &g->pend[(g->head + k) % PENDING_MAX];
			uint32_t pt = tgid_of(&p->u);

			if (p->at_mono == 0 || (pt != x && p->u.ppid != x))
				continue;
			account(t->ts, &p->u);
			p->at_mono = 0; /* consumed; skipped until it leaves the ring */
			if (pt != x && add_tgid(t->ts, pt) && sp < ARRAY_SIZE(stack))
				stack[sp++] = pt;
		}
	}
}

static void push_pending(struct ts_glue *g, const struct taskstats_usage *u, uint64_t now)
{
	/* Drop expired (or consumed) entries at the head first. */
	while (g->n > 0) {
		struct ts_pending *p = &g->pend[g->head];

		if (p->at_mono != 0 && now - p->at_mono < PENDING_TTL_NS)
			break;
		if (p->at_mono != 0)
			g->expired++;
		g->head = (g->head + 1) % PENDING_MAX;
		g->n--;
	}
	if (g->n == PENDING_MAX) {
		g->head = (g->head + 1) % PENDING_MAX;
		g->n--;
		g->dropped++;
	}
	g->pend[(g->head + g->n) % PENDING_MAX] = (struct ts_pending){.u = *u, .at_mono = now};
	g->n++;
}

static void join(struct ts_glue *g, struct task *t, uint32_t tgid)
{
	if (add_tgid(t->ts, tgid))
		resolve_pending(g, t, tgid);
}

static void on_exit_record(const struct taskstats_usage *u, void *userdata)
{
	struct agent *a = userdata;
	struct ts_glue *g = a->tsglue;
	uint32_t tgid = tgid_of(u);
	struct task *t;

	if (u->is_tgid)
		return; /* per-process records carry delay accounting only */
	t = owner_of(a, tgid);
	if (t) {
		account(t->ts, u);
		return;
	}
	t = u->ppid ? owner_of(a, u->ppid) : NULL;
	if (t) {
		account(t->ts, u);
		join(g, t, tgid);
		return;
	}
	push_pending(g, u, now_ns(CLOCK_MONOTONIC));
}

static void tsglue_poll(struct agent *a);

static void on_listener(void *data, int fd, uint32_t events)
{
	tsglue_poll(data);
}

int tsglue_init(struct agent *a)
{
	struct ts_glue *g;
	int r;

	if (a->meter || !a->cfg.taskstats)
		return 0;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->pend = calloc(PENDING_MAX, sizeof(*g->pend));
	if (!g->pend) {
		free(g);
		return -ENOMEM;
	}
	r = taskstats_listener_open(&g->l);
	if (r < 0) {
		log_warning("taskstats unavailable (%s): IO bytes from cgroup block counters only",
			    strerror(-r));
		free(g->pend);
		free(g);
		return 0;
	}
	r = loop_add(a->loop, taskstats_listener_fd(g->l), EPOLLIN, on_listener, a);
	if (r < 0) {
		taskstats_listener_free(g->l);
		free(g->pend);
		free(g);
		return r;
	}
	a->tsglue = g;
	log_info("metering from cgroup files and taskstats exit records");
	return 0;
}

void tsglue_fini(struct agent *a)
{
	struct ts_glue *g = a->tsglue;

	if (!g)
		return;
	loop_del(a->loop, taskstats_listener_fd(g->l));
	taskstats_listener_free(g->l);
	free(g->pend);
	free(g);
	a->tsglue = NULL;
}

bool tsglue_active(const struct agent *a)
{
	return a->tsglue != NULL;
}

static void tsglue_poll(struct agent *a)
{
	struct ts_glue *g = a->tsglue;
	int r;

	if (!g)
		return;
	r = taskstats_listener_poll(g->l, on_exit_record, a);
	if (r < 0)
		log_warning("taskstats: reading exit records failed: %s", strerror(-r));
}

static void tsglue_track(struct agent *a, struct task *t)
{
	if (!a->tsglue || t->adopted || t->ts)
		return;
	t->ts = calloc(1, sizeof(*t->ts));
	if (!t->ts) {
		log_warning("task %s: taskstats metering off (out of memory)", t->id);
		return;
	}
	join(a->tsglue, t, (uint32_t)t->pid);
}

/* The processes now in the task's cgroup join its set (tick, and before killing leftovers). */
static void tsglue_snapshot(struct agent *a, struct task *t)
{
	_cleanup_free_ pid_t *pids = NULL;
	size_t n = 0;

	if (!a->tsglue || !t->ts || !t->cg || cg_task_pids(t->cg, &pids, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		join(a->tsglue, t, (uint32_t)pids[i]);
}

static void tsglue_usage(struct agent *a, struct task *t)
{
	struct ts_task *s = t->ts;

	if (!a->tsglue || !s)
		return;
	tsglue_poll(a); /* records of the last processes are queued before the cgroup empties */
	t->usage.io_read_bytes = s->read_chars;
	t->usage.io_write_bytes = s->write_chars;
	t->sources[ACCT_U_IO_READ_BYTES] = ACCT_SRC_TASKSTATS;
	t->sources[ACCT_U_IO_WRITE_BYTES] = ACCT_SRC_TASKSTATS;
	if (t->usage_detail) {
		json_t *d = t->usage_detail;

		json_object_set_new(d, "taskstats_cpu_ns",
				    json_integer((json_int_t)s->cpu_exec_ns));
		json_object_set_new(d, "taskstats_records", json_integer((json_int_t)s->records));
		json_object_set_new(d, "taskstats_processes", json_integer((json_int_t)s->n_tgids));
		json_object_set_new(d, "taskstats_rss_hiwater_bytes",
				    json_integer((json_int_t)s->hiwater_rss));
		if (s->overflow)
			json_object_set_new(d, "taskstats_incomplete", json_true());
	}
}

static void tsglue_forget(struct task *t)
{
	if (!t->ts)
		return;
	free(t->ts->tgids);
	free(t->ts);
	t->ts = NULL;
}

void tsglue_stats(const struct agent *a, uint64_t *ret_overruns, uint64_t *ret_unmatched)
{
	const struct ts_glue *g = a->tsglue;

	*ret_overruns = g ? taskstats_listener_overruns(g->l) : 0;
	*ret_unmatched = g ? g->expired + g->dropped : 0;
}

/* ---- the taskstats meter (agent/meters.h) -------------------------------------------------- */

static int ts_started(struct agent *a, struct task *t, char *err, size_t errlen)
{
	tsglue_track(a, t);
	return 0;
}

static bool ts_tick(struct agent *a, struct task *t, uint64_t now_mono)
{
	tsglue_snapshot(a, t);
	return false;
}

/* The fallback meter learns the task's processes from its cgroup at every tick. */
static bool ts_tick_every(const struct agent *a, const struct task *t)
{
	return a->tsglue && t->ts;
}

/* Only without the BPF meter (then it is the IO source). */
static void ts_usage(struct agent *a, struct task *t, struct meter_merge *m)
{
	if (!a->meter)
		tsglue_usage(a, t);
}

/* Its figures are the task's only without the BPF meter, and then never known unchanged. */
static bool ts_unchanged(struct agent *a, struct task *t, uint64_t *rss_bytes)
{
	return a->meter != NULL;
}

const struct meter_ops meter_taskstats_ops = {
    .name = "taskstats",
    .started = ts_started,
    .tick = ts_tick,
    .tick_every = ts_tick_every,
    .leftovers = tsglue_snapshot,
    .usage = ts_usage,
    .unchanged = ts_unchanged,
    .unchanged_fixed = true,
    .release = tsglue_forget,
};
