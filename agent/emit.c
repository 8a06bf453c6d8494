/* SPDX-License-Identifier: MIT */
/*
 * Record emission: each record gets its id (derived from the task id for task.start and
 * task.end, so a re-emission after a crash deduplicates; else the next sequence number), its
 * place in the audit chain, and waits in the group commit queue; agent_flush_records appends
 * the queue to the spool (billing first) with one sync, and the state files of ended tasks
 * are removed once the sync that made their end record durable is done. Audit records the
 * spool refuses are declared in the chain by an audit.gap record.
 */
#include "agent/agent.h"
#include "agent/log.h"
#include "agent/loop.h"
#include "agent/state.h"
#include "agent/emit.h"
#include "accounting/spool.h"
#include "accounting/syncer.h"
#include "accounting/uploader.h"
#include "common/clock.h"
#include "common/macro.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* exit.by: a limit (the status says which), else who sent the signal meant to end it (a
 * client's forwarded or an operator's kill, t->end_by), else the task itself. */
static enum acct_exit_by task_exit_by(const struct task *t)
{
	switch (t->status) {
	case ACCT_EXIT_TIME_LIMIT:
	case ACCT_EXIT_CPU_TIME_LIMIT:
	case ACCT_EXIT_GPU_MEMORY_LIMIT:
	case ACCT_EXIT_OOM_KILLED:
	case ACCT_EXIT_SECCOMP_KILLED:
		return ACCT_BY_LIMIT;
	case ACCT_EXIT_LOST:
	case ACCT_EXIT_NONE:
		return ACCT_BY_NONE;
	default:
		return t->end_by != ACCT_BY_NONE ? t->end_by : ACCT_BY_TASK;
	}
}

void task_fill_record(struct agent *a, struct task *t, enum acct_type type, struct acct_record *r)
{
	memset(r, 0, sizeof(*r));
	r->type = type;
	r->time_ns = now_ns(CLOCK_REALTIME);
	r->node = strdup(a->cfg.node);
	snprintf(r->task.id, sizeof(r->task.id), "%s", t->id);
	r->task.job = t->spec.job ? strdup(t->spec.job) : NULL;
	r->task.user = t->user ? strdup(t->user) : NULL;
	r->task.uid = t->uid;
	r->task.account = t->spec.account ? strdup(t->spec.account) : NULL;
	for (size_t i = 0; i < t->spec.n_labels; i++)
		acct_task_add_label(&r->task, t->spec.label_keys[i], t->spec.label_values[i]);
	r->request.cpus = t->spec.cpus;
	r->request.memory_bytes = t->spec.memory_max;
	r->request.pids = t->spec.pids_max;
	r->request.gpus = t->spec.gpus;
	r->request.time_limit_s = t->spec.time_limit_ns / NSEC_PER_SEC;
	r->request.cpu_time_limit_s = t->spec.cpu_time_limit_ns / NSEC_PER_SEC;
	r->request.gpu_memory_bytes = t->spec.gpu_memory_max;
	if (type != ACCT_TASK_START) {
		r->usage = t->usage;
		memcpy(r->sources, t->sources, sizeof(r->sources));
	}
	if (type == ACCT_TASK_END) {
		r->exit.status = t->status;
		r->exit.code = t->exit_code;
		r->exit.signal = t->exit_signal;
		r->exit.message = t->exit_message ? strdup(t->exit_message) : NULL;
		r->exit.oom_kills = t->oom_kills;
		r->exit.by = task_exit_by(t);
	}
	r->extra = json_object();
	json_object_set_new(r->extra, "start_time", json_integer((json_int_t)(t->start_ns / 1000)));
	if (t->usage_detail && type != ACCT_TASK_START)
		json_object_set(r->extra, "usage_detail", t->usage_detail);
	if (t->adopted)
		json_object_set_new(r->extra, "adopted", json_true());
}

int agent_emit_record(struct agent *a, struct acct_record *r)
{
	_cleanup_free_ char *buf = NULL;
	bool audit = acct_type_is_audit(r->type);
	enum spool_prio prio;
	size_t len;
	int rr;

	/* A pending audit.gap goes into the chain before the next audit record. */
	if (audit && r->type != ACCT_AUDIT_GAP && a->gap.count && a->spool &&
	    agent_gap_emit(a) < 0) {
		agent_gap_note(a, r, 1);
		return -ENOSPC;
	}
	/*
	 * Records that exist once per task get ids derived from the task id, so that re-emitting
	 * one after a crash (the agent died between spooling task.end and removing the task's
	 * state file) is deduplicated by the collector instead of counted twice. Others take the
	 * next sequence number.
	 */
	if (r->type == ACCT_TASK_START || r->type == ACCT_TASK_END)
		snprintf(r->record_id, sizeof(r->record_id), "%.60s/%.40s/%s", a->cfg.node,
			 r->task.id, r->type == ACCT_TASK_START ? "start" : "end");
	else {
		rr = state_next_record_id(a, r->record_id, sizeof(r->record_id));
		if (rr < 0) { /* no id can be persisted (full state filesystem): refused, counted */
			a->stats.records_spool_refused++;
			return rr;
		}
	}
	if (audit) {
		snprintf(r->prev_hash, sizeof(r->prev_hash), "%s", a->audit_head);
		rr = acct_record_compute_hash(r);
		if (rr < 0)
			return rr;
	}
	if (!a->spool) {
		if (audit) {
			snprintf(a->audit_head, sizeof(a->audit_head), "%s", r->hash);
			(void)state_save_audit_head(a);
		}
		return 0;
	}
	rr = acct_record_encode(r, &buf, &len);
	if (rr < 0) {
		log_error("encoding %s record of task %s failed: %s", acct_type_to_string(r->type),
			  r->task.id, strerror(-rr));
		return rr;
	}
	prio = r->type == ACCT_TASK_SAMPLE ? SPOOL_PRIO_SHED
	       : audit			   ? SPOOL_PRIO_AUDIT
					   : SPOOL_PRIO_KEEP;
	/*
	 * An audit record the spool would refuse (it is full up to the billing reserve) is not
	 * chained: the head stays, the record is counted into the next audit.gap.
	 */
	if (audit &&
	    !spool_fits(a->spool, a->n_pend_kept + 1, a->pend_kept_bytes + len, SPOOL_PRIO_AUDIT)) {
		if (r->type != ACCT_AUDIT_GAP)
			agent_gap_note(a, r, 1);
		return -ENOSPC;
	}
	/* Group commit: appended (one fdatasync) at the end of this loop iteration. */
	if (a->n_pend == a->cap_pend) {
		size_t nc = a->cap_pend ? a->cap_pend * 2 : 64;
		struct pending_record *np = realloc(a->pend, nc * sizeof(*np));

		if (!np)
			return -ENOMEM;
		a->pend = np;
		a->cap_pend = nc;
	}
	a->pend[a->n_pend] = (struct pending_record){
	    .buf = TAKE_PTR(buf),
	    .len = len,
	    .prio = prio,
	    .type = r->type,
	    .time_ns = r->time_ns,
	};
	if (prio != SPOOL_PRIO_SHED) {
		a->n_pend_kept++;
		a->pend_kept_bytes += len;
	}
	if (audit) {
		struct pending_record *p = &a->pend[a->n_pend];
		json_t *shed = json_object_get(r->event, "shed");

		memcpy(p->prev_hash, r->prev_hash, sizeof(p->prev_hash));
		memcpy(p->hash, r->hash, sizeof(p->hash));
		snprintf(p->task_id, sizeof(p->task_id), "%s", r->task.id);
		if (r->type == ACCT_AUDIT_GAP && json_is_integer(shed))
			p->gap_carried = (uint64_t)json_integer_value(shed);
		snprintf(a->audit_head, sizeof(a->audit_head), "%s", r->hash);
		a->audit_dirty = true;
	}
	a->n_pend++;
	a->last_emit_len = len;
	return 0;
}

/*
 * The spool refused audit records that were already chained in memory (it filled between
 * their admission and the flush): the head goes back to the last one written, and they are
 * declared by the next audit.gap with the hashes they had.
 */
static void audit_refused(struct agent *a, size_t first_refused)
{
	bool head_reset = false;

	for (size_t i = first_refused; i < a->n_pend; i++) {
		struct pending_record *p = &a->pend[i];
		struct acct_record k = {.type = p->type, .time_ns = p->time_ns};

		if (p->prio != SPOOL_PRIO_AUDIT)
			continue;
		if (!head_reset) {
			snprintf(a->audit_head, sizeof(a->audit_head), "%s", p->prev_hash);
			head_reset = true;
		}
		snprintf(k.task.id, sizeof(k.task.id), "%s", p->task_id);
		if (p->type == ACCT_AUDIT_GAP) {
			/* its count is pending again; the gap record itself is no loss */
			k.type = _ACCT_TYPE_INVALID;
			agent_gap_note(a, &k, p->gap_carried);
			continue;
		}
		agent_gap_note(a, &k, 1);
		if (!a->gap.skipped_first[0])
			memcpy(a->gap.skipped_first, p->hash, sizeof(p->hash));
		memcpy(a->gap.skipped_last, p->hash, sizeof(p->hash));
	}
}

static void flush_prio(struct agent *a, enum spool_prio prio)
{
	const void *bufs[256];
	size_t lens[256], idx[256], n = 0;
	int r;

	for (size_t i = 0; i <= a->n_pend; i++) {
		if (i < a->n_pend && a->pend[i].prio == (int)prio) {
			bufs[n] = a->pend[i].buf;
			lens[n] = a->pend[i].len;
			idx[n] = i;
			n++;
		}
		if (n == ARRAY_SIZE(bufs) || (i == a->n_pend && n > 0)) {
			r = spool_append_many(a->spool, bufs, lens, n, prio);
			if (r < 0 || (size_t)r < n) {
				size_t lost = r < 0 ? n : n - (size_t)r;

				a->stats.records_spooled += r < 0 ? 0 : (uint64_t)r;
				if (prio == SPOOL_PRIO_AUDIT) {
					/* the rest of this class is refused too: declared */
					audit_refused(a, idx[n - lost]);
					return;
				}
				a->stats.records_spool_refused += lost;
				if (a->stats.records_spool_refused_logged++ == 0)
					log_error(
					    "spool refused %zu record(s): %s (counted in "
					    "corral_spool_refused_total; further refusals are not "
					    "logged)",
					    lost, strerror(r < 0 ? -r : ENOSPC));
			} else
				a->stats.records_spooled += n;
			n = 0;
		}
	}
}

/*
 * Write the records of this loop iteration to the spool and make them durable: one fdatasync
 * for the whole group, run by the syncer thread (in the loop when there is none), so the loop
 * does not wait for the disk. What must wait for that waits for the sync's generation: the
 * state files of ended tasks (a crash before it re-finalizes them; their records have fixed
 * ids, so the collector keeps one copy). The audit chain head is saved before acks
 * (state_sync_audit_head). The uploader is woken at once: an entry acked before its sync is on
 * the collector, and the spool never reuses a seq at or below the acked one.
 */
void agent_flush_records(struct agent *a)
{
	uint64_t gen = 0;

	if (a->n_pend && a->spool) {
		int r;

		spool_group_begin(a->spool);
		flush_prio(a, SPOOL_PRIO_KEEP);
		flush_prio(a, SPOOL_PRIO_AUDIT);
		flush_prio(a, SPOOL_PRIO_SHED);
		if (a->syncer) {
			int fd;

			r = spool_group_end(a->spool, &fd);
			if (fd >= 0)
				gen = syncer_submit(a->syncer, fd);
		} else
			r = spool_group_commit(a->spool);
		if (r < 0)
			log_error("spool fdatasync failed: %s", strerror(-r));
	}
	for (size_t i = 0; i < a->n_pend; i++)
		free(a->pend[i].buf);
	a->n_pend = 0;
	a->n_pend_kept = 0;
	a->pend_kept_bytes = 0;
	if (a->syncer && a->n_unlink) {
		/* the end records are durable with this sync, or with the last one submitted */
		if (!gen)
			gen = syncer_submitted(a->syncer);
		for (size_t i = 0; i < a->n_unlink && gen > a->sync_done_gen; i++) {
			if (a->n_sync_wait == a->cap_sync_wait) {
				size_t nc = a->cap_sync_wait ? a->cap_sync_wait * 2 : 32;
				struct sync_wait *nw = realloc(a->sync_wait, nc * sizeof(*nw));

				if (!nw)
					break; /* the rest is removed now, as without a syncer */
				a->sync_wait = nw;
				a->cap_sync_wait = nc;
			}
			a->sync_wait[a->n_sync_wait++] =
			    (struct sync_wait){.gen = gen, .stem = TAKE_PTR(a->unlink_stems[i])};
		}
	}
	for (size_t i = 0; i < a->n_unlink; i++) {
		if (!a->unlink_stems[i])
			continue;
		state_remove_task_files(a->unlink_stems[i]);
		free(a->unlink_stems[i]);
	}
	a->n_unlink = 0;
	if (a->upl)
		upl_kick(a->upl);
}

/* The state files that waited for generations up to done go. */
static void remove_synced(struct agent *a, uint64_t done)
{
	size_t o = 0;

	for (size_t i = 0; i < a->n_sync_wait; i++) {
		if (a->sync_wait[i].gen <= done) {
			state_remove_task_files(a->sync_wait[i].stem);
			free(a->sync_wait[i].stem);
		} else
			a->sync_wait[o++] = a->sync_wait[i];
	}
	a->n_sync_wait = o;
}

void agent_sync_done(struct agent *a)
{
	uint64_t done;
	int err;

	if (!a->syncer)
		return;
	done = syncer_done(a->syncer, &err);
	a->sync_done_gen = done;
	if (err < 0)
		log_error("spool fdatasync failed: %s", strerror(-err));
	remove_synced(a, done);
}

void agent_sync_stop(struct agent *a)
{
	if (!a->syncer)
		return;
	loop_del(a->loop, syncer_fd(a->syncer));
	syncer_stop(a->syncer);
	a->syncer = NULL;
	remove_synced(a, UINT64_MAX); /* every generation is done now */
	free(a->sync_wait);
	a->sync_wait = NULL;
}

/* ---- audit.gap -------------------------------------------------------------------------- */

void agent_gap_note(struct agent *a, const struct acct_record *r, uint64_t n)
{
	struct audit_gap *g = &a->gap;
	uint64_t now = r->time_ns ? r->time_ns : now_ns(CLOCK_REALTIME);
	size_t i;

	if (!n)
		return;
	if (!g->count) {
		g->first_ns = now;
		log_warning("spool full for audit records (the billing reserve is kept): records "
			    "are shed and declared in an audit.gap record");
	}
	if (!g->first_ns || now < g->first_ns)
		g->first_ns = now;
	if (now > g->last_ns)
		g->last_ns = now;
	g->count += n;
	a->stats.audit_shed += n;
	if ((unsigned)r->type < _ACCT_TYPE_MAX)
		g->by_kind[r->type] += n;
	for (i = 0; i < g->n_tasks; i++)
		if (strcmp(g->tasks[i].id, r->task.id) == 0)
			break;
	if (i < g->n_tasks)
		g->tasks[i].count += n;
	else if (g->n_tasks < BUDGET_GAP_TASKS) {
		snprintf(g->tasks[i].id, sizeof(g->tasks[i].id), "%s", r->task.id);
		g->tasks[g->n_tasks++].count = n;
	} else
		g->tasks_other += n;
}

int agent_gap_emit(struct agent *a)
{
	struct audit_gap g = a->gap;
	struct acct_record r = {0};
	char from[RFC3339_MAX], to[RFC3339_MAX];
	json_t *kinds, *tasks;
	int rr;

	if (!g.count)
		return 0;
	kinds = json_object();
	tasks = json_object();
	for (int k = 0; k < _ACCT_TYPE_MAX; k++)
		if (g.by_kind[k])
			json_object_set_new(kinds, acct_type_to_string(k),
					    json_integer((json_int_t)g.by_kind[k]));
	for (size_t i = 0; i < g.n_tasks; i++)
		json_object_set_new(tasks, g.tasks[i].id,
				    json_integer((json_int_t)g.tasks[i].count));
	format_rfc3339_us(g.first_ns, from, sizeof(from));
	format_rfc3339_us(g.last_ns, to, sizeof(to));
	r.type = ACCT_AUDIT_GAP;
	r.time_ns = now_ns(CLOCK_REALTIME);
	r.node = strdup(a->cfg.node);
	snprintf(r.task.id, sizeof(r.task.id), "%s", g.n_tasks ? g.tasks[0].id : "-");
	r.event = json_pack("{s:s,s:I,s:s,s:s,s:o,s:o,s:I}", "reason", "spool_full", "shed",
			    (json_int_t)g.count, "from", from, "to", to, "by_type", kinds, "tasks",
			    tasks, "tasks_other", (json_int_t)g.tasks_other);
	if (!r.node || !r.event) {
		acct_record_clear(&r);
		return -ENOMEM;
	}
	if (g.skipped_first[0])
		json_object_set_new(
		    r.event, "skipped_hashes",
		    json_pack("{s:s,s:s}", "first", g.skipped_first, "last", g.skipped_last));
	/* It is chained in place of what it declares; when it does not fit either, the count
	 * stays pending and grows (agent_emit_record leaves a->gap alone for this type). */
	memset(&a->gap, 0, sizeof(a->gap));
	rr = agent_emit_record(a, &r);
	if (rr < 0) {
		a->gap = g;
		if (rr != -ENOSPC)
			log_error("audit.gap record of %" PRIu64 " shed record(s) failed: %s",
				  g.count, strerror(-rr));
	} else {
		a->stats.audit_gaps++;
		log_notice("audit: %" PRIu64 " record(s) shed while the spool was full, declared "
			   "in audit.gap %s",
			   g.count, r.record_id);
	}
	acct_record_clear(&r);
	return rr;
}
