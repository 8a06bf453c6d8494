/* SPDX-License-Identifier: MIT */
/*
 * The eBPF meter (bpf/meter.h) as a meter of the task state machine (agent/meters.h): tracked
 * from the child's pid, its figures over the cgroup's at every usage read, its threads' final
 * figures awaited at the end. Tasks re-adopted after a restart are not in the new programs'
 * maps: their figures come from the cgroup.
 */
#include "agent/agent.h"
#include "agent/log.h"
#include "agent/meters.h"
#include "bpf/meter.h"
#include "common/clock.h"
#include "common/growbuf.h"
#include "isolation/cgroup.h"

#include <stdlib.h>
#include <string.h>

static int ebpf_started(struct agent *a, struct task *t, char *err, size_t errlen)
{
	int r;

	if (!a->meter)
		return 0;
	r = meter_track(a->meter, t->key, t->pid, cg_task_unified_fd(t->cg));
	if (r < 0)
		log_warning("task %s: BPF metering unavailable for this task: %s", t->id,
			    strerror(-r));
	return 0;
}

/* The eBPF meter's figures over the cgroup's (st, have: read). */
static void usage_from_ebpf(struct agent *a, struct task *t, const struct meter_usage *mu,
			    const struct cg_stats *st, bool have, json_t *d)
{
	/*
	 * Threads whose CPU is not all in the BPF figure (a full map, or final
	 * figures that never came): the cgroup's counter, exact, stays the CPU
	 * figure and the sources say so. Never a silently short bill.
	 */
	bool short_cpu = mu->threads_lost > 0 || (t->meter_gave_up && mu->threads_unsettled > 0);

	if (short_cpu) {
		json_object_set_new(d, "ebpf_threads_lost",
				    json_integer((json_int_t)mu->threads_lost));
		json_object_set_new(d, "ebpf_threads_unsettled",
				    json_integer((json_int_t)mu->threads_unsettled));
		/*
		 * A lost thread may have been one that got no entry at all
		 * (procs or task storage full): its read/write bytes and RSS
		 * are then missing too, and no other source has them on
		 * every node. Said, not hidden: these figures are lower
		 * bounds.
		 */
		json_object_set_new(d, "ebpf_lower_bounds",
				    json_string("io_read_bytes,io_write_bytes,"
						"memory_byte_seconds"));
	}
	if (short_cpu && have) {
		/* cpu_user_ns / cpu_system_ns from the cgroup (above) */
	} else if (mu->cpu_split_known) {
		t->usage.cpu_user_ns = mu->cpu_user_ns;
		t->usage.cpu_system_ns = mu->cpu_system_ns;
	} else {
		/* exact total from eBPF, split in the cgroup's user/system ratio */
		uint64_t tot = st->cpu_user_ns + st->cpu_system_ns;
		double uf = tot ? (double)st->cpu_user_ns / (double)tot : 1.0;

		t->usage.cpu_user_ns = (uint64_t)((double)mu->cpu_ns * uf);
		t->usage.cpu_system_ns = mu->cpu_ns - t->usage.cpu_user_ns;
	}
	if (!(short_cpu && have)) {
		t->sources[ACCT_U_CPU_USER_NS] = ACCT_SRC_EBPF;
		t->sources[ACCT_U_CPU_SYSTEM_NS] = ACCT_SRC_EBPF;
	}
	t->usage.io_read_bytes = mu->io_read_bytes;
	t->usage.io_write_bytes = mu->io_write_bytes;
	t->sources[ACCT_U_IO_READ_BYTES] = ACCT_SRC_EBPF;
	t->sources[ACCT_U_IO_WRITE_BYTES] = ACCT_SRC_EBPF;
	t->usage.memory_byte_seconds = mu->memory_byte_seconds;
	t->sources[ACCT_U_MEMORY_BYTE_SECONDS] = ACCT_SRC_EBPF;
	if (mu->net_metered) {
		t->usage.net_rx_bytes = mu->net_rx_bytes;
		t->usage.net_tx_bytes = mu->net_tx_bytes;
		t->sources[ACCT_U_NET_RX_BYTES] = ACCT_SRC_EBPF;
		t->sources[ACCT_U_NET_TX_BYTES] = ACCT_SRC_EBPF;
	}
	json_object_set_new(d, "ebpf_cpu_ns", json_integer((json_int_t)mu->cpu_ns));
	json_object_set_new(d, "ebpf_cpu_accounting", json_string(meter_cpu_accounting(a->meter)));
	json_object_set_new(d, "ebpf_rss_peak_bytes", json_integer((json_int_t)mu->rss_peak_bytes));
	json_object_set_new(d, "net_rx_packets", json_integer((json_int_t)mu->net_rx_packets));
	json_object_set_new(d, "net_tx_packets", json_integer((json_int_t)mu->net_tx_packets));
	json_object_set_new(d, "forks", json_integer((json_int_t)mu->forks));
}

static void ebpf_batch(struct agent *a, bool on)
{
	if (a->meter)
		meter_batch(a->meter, on);
}

static void ebpf_prefetch(struct agent *a)
{
	if (a->meter)
		(void)meter_prefetch(a->meter); /* failed: each read goes to the maps */
}

/* What changes whenever the task's usage does: every counter of the read but the memory
 * integral, which grows by rss x time while rss_changed_ns stays. */
static void usage_print(const struct meter_usage *mu, struct usage_print *p)
{
	const uint64_t v[] = {
	    mu->cpu_ns,		 mu->cpu_ticks_user_ns,	    mu->cpu_ticks_system_ns,
	    mu->rss_peak_bytes,	 mu->rss_current_bytes,	    mu->rss_changed_ns,
	    mu->io_read_bytes,	 mu->io_write_bytes,	    mu->blk_read_bytes,
	    mu->blk_write_bytes, mu->blk_issued_read_bytes, mu->blk_issued_write_bytes,
	    mu->net_rx_bytes,	 mu->net_tx_bytes,	    mu->net_rx_packets,
	    mu->net_tx_packets,	 mu->procs_alive,	    mu->forks,
	    mu->threads_lost,	 mu->threads_unsettled};

	_Static_assert(sizeof(v) == sizeof(p->v), "struct usage_print holds every counter");
	memcpy(p->v, v, sizeof(v));
}

/*
 * A read of the task after its mark was taken: kept (t->ebpf_last), it stands for the task's
 * counters until the meter marks the task again. Not valid where a thread the meter does not
 * see (a full map) could change the task unseen.
 */
static void ebpf_note(struct agent *a, uint64_t key)
{
	/* no check took them for long (no statements: config, an anchor's every-task walk): the
	 * next check asks every task rather than keep more */
	if (a->ebpf_noted_lost || a->n_ebpf_noted >= 4 * (size_t)a->n_live + 64) {
		a->ebpf_noted_lost = true;
		a->n_ebpf_noted = 0;
		return;
	}
	if (grow_array((void **)&a->ebpf_noted, &a->cap_ebpf_noted, a->n_ebpf_noted,
		       sizeof(*a->ebpf_noted)) < 0) {
		a->ebpf_noted_lost = true; /* the next check asks every task */
		return;
	}
	a->ebpf_noted[a->n_ebpf_noted++] = key;
}

/* check: the read of a change check (ebpf_unchanged); any other read that takes a set mark
 * is noted, for the next check's changes (the mark is gone, the task may have changed). */
static int ebpf_read_fresh(struct agent *a, struct task *t, struct meter_usage *mu, bool check)
{
	if (meter_dirty_take(a->meter, t->key) && !check)
		ebpf_note(a, t->key);
	if (meter_read(a->meter, t->key, mu) != 0) {
		t->ebpf_last_valid = false;
		return -1;
	}
	usage_print(mu, &t->ebpf_last);
	t->ebpf_last_valid = mu->threads_lost == 0 && !t->meter_gave_up;
	return 0;
}

static void ebpf_usage(struct agent *a, struct task *t, struct meter_merge *m)
{
	struct meter_usage mu;

	t->print_valid = false;
	if (!a->meter || t->adopted || ebpf_read_fresh(a, t, &mu, false) != 0)
		return;
	usage_print(&mu, &t->print);
	/* a thread the meter does not see (a full map) could change the task unseen */
	t->print_valid = mu.threads_lost == 0 && !t->meter_gave_up;
	usage_from_ebpf(a, t, &mu, m->st, m->have_st, t->usage_detail);
	if (mu.blk_measured) {
		m->blk_measured = true;
		m->blk_read_bytes = mu.blk_read_bytes;
		m->blk_write_bytes = mu.blk_write_bytes;
	}
}

/*
 * BPF accounting at exit: a thread's final CPU and IO figures are read once it is off its CPU
 * for good, usually at once; a thread not there yet holds the task's end record until a later
 * tick or METER_EV_SETTLED, or until give_up.
 */
static bool ebpf_settled(struct agent *a, struct task *t, bool give_up)
{
	int r;

	if (!a->meter || t->adopted)
		return true;
	r = meter_settle(a->meter, t->key);
	if (r < 0)
		log_warning("task %s: reading the final BPF figures failed: %s", t->id,
			    strerror(-r));
	if (r != 0)
		return true;
	if (give_up) {
		log_warning("task %s: some threads' final BPF figures did not come within %us; the "
			    "record's CPU comes from the cgroup",
			    t->id, (unsigned)(TASK_ENDING_MAX_NS / NSEC_PER_SEC));
		t->meter_gave_up = true;
	}
	return give_up;
}

/*
 * The task's counters now against their read at its last sample: every counter equal. A task
 * the meter has not marked since its last read (t->ebpf_last) is not read again: its
 * counters are that read's (bpf/meter.h, meter_dirty).
 */
static bool ebpf_unchanged(struct agent *a, struct task *t, uint64_t *rss_bytes)
{
	struct meter_usage mu;

	if (!a->meter || t->adopted || !t->mark_valid)
		return false;
	if ((!t->ebpf_last_valid || meter_dirty(a->meter, t->key)) &&
	    ebpf_read_fresh(a, t, &mu, true) != 0)
		return false;
	if (!t->ebpf_last_valid || memcmp(&t->ebpf_last, &t->mark, sizeof(t->mark)) != 0)
		return false;
	/* whole KiB, as the integral counts (v[4]: rss_current_bytes, usage_print) */
	*rss_bytes = t->ebpf_last.v[4] >> 10 << 10;
	return true;
}

struct ebpf_changes_ctx {
	struct agent *a;
	void (*changed)(struct agent *a, uint64_t task_key);
};

static void ebpf_marked(void *ctx, uint64_t task_key)
{
	struct ebpf_changes_ctx *c = ctx;

	c->changed(c->a, task_key);
}

/* The tasks marked since their last read, and those whose mark a read outside a check took. */
static bool ebpf_changes(struct agent *a, void (*changed)(struct agent *a, uint64_t task_key))
{
	struct ebpf_changes_ctx c = {a, changed};
	bool ok = a->meter && !a->ebpf_noted_lost && meter_marked(a->meter, ebpf_marked, &c) == 0;

	for (size_t i = 0; ok && i < a->n_ebpf_noted; i++)
		changed(a, a->ebpf_noted[i]);
	a->n_ebpf_noted = 0;
	a->ebpf_noted_lost = false;
	return ok;
}

static void ebpf_end(struct agent *a, struct task *t)
{
	if (a->meter)
		(void)meter_forget(a->meter, t->key);
}

const struct meter_ops meter_ebpf_ops = {
    .name = "ebpf",
    .started = ebpf_started,
    .batch = ebpf_batch,
    .prefetch = ebpf_prefetch,
    .usage = ebpf_usage,
    .unchanged = ebpf_unchanged,
    .changes = ebpf_changes,
    .settled = ebpf_settled,
    .end = ebpf_end,
};
