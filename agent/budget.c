/* SPDX-License-Identifier: MIT */
/*
 * Per-task record budget (audit.summary) and policy drops chained as audit.gap: see
 * agent/budget.h and docs/audit.md ("Record budget").
 */
#include "agent/budget.h"
#include "agent/agent.h"
#include "agent/log.h"
#include "agent/emit.h"
#include "common/macro.h"
#include "common/clock.h"

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct budget_link *active_head(struct agent *a)
{
	if (!a->budget_active.next)
		a->budget_active.prev = a->budget_active.next = &a->budget_active;
	return &a->budget_active;
}

void budget_touch(struct agent *a, struct task *t)
{
	struct budget_link *h, *l = &t->budget.active;

	if (l->next)
		return;
	h = active_head(a);
	l->prev = h->prev;
	l->next = h;
	h->prev->next = l;
	h->prev = l;
}

void budget_untouch(struct task *t)
{
	struct budget_link *l = &t->budget.active;

	if (!l->next)
		return;
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->prev = l->next = NULL;
}

struct task *budget_next(struct agent *a, const struct task *t)
{
	struct budget_link *h = active_head(a), *l = t ? t->budget.active.next : h->next;

	if (!l || l == h)
		return NULL;
	return (struct task *)(void *)((char *)l - offsetof(struct task, budget.active));
}

bool budget_quiet(const struct task *t)
{
	const struct task_budget *b = &t->budget;

	return !b->win_count && b->recorded + b->summarized == b->saved_sum && !b->kernel_closed;
}

void budget_init(struct agent *a, struct task *t)
{
	struct task_budget *b = &t->budget;

	budget_touch(a, t); /* the next walk looks at it once */

	b->rate = t->spec.audit_rate ? t->spec.audit_rate : a->cfg.audit_task_rate;
	b->bytes = t->spec.audit_bytes ? t->spec.audit_bytes : a->cfg.audit_task_bytes;
	b->burst = a->cfg.audit_task_burst;
	if (b->rate > b->burst)
		b->burst = b->rate; /* a second's worth at least */
	b->tokens = (double)b->burst;
	b->refill_mono = now_ns(CLOCK_MONOTONIC);
}

int budget_check_spec(const struct agent *a, const struct task_spec *s, bool privileged, char *err,
		      size_t errlen)
{
	if (privileged)
		return 0;
	if (s->audit_rate > a->cfg.audit_task_rate_max) {
		snprintf(err, errlen,
			 "limits.audit_rate: at most %" PRIu64
			 " records/s without privilege ([audit] task_rate_max)",
			 a->cfg.audit_task_rate_max);
		return -EPERM;
	}
	if (s->audit_bytes > a->cfg.audit_task_bytes_max) {
		snprintf(err, errlen,
			 "limits.audit_bytes: at most %" PRIu64
			 " bytes without privilege ([audit] task_bytes_max)",
			 a->cfg.audit_task_bytes_max);
		return -EPERM;
	}
	return 0;
}

static void refill(struct task_budget *b, uint64_t now)
{
	if (!b->rate || now <= b->refill_mono)
		return;
	b->tokens += (double)(now - b->refill_mono) * (double)b->rate / 1e9;
	if (b->tokens > (double)b->burst)
		b->tokens = (double)b->burst;
	b->refill_mono = now;
}

/* A destination as a plain one-line ASCII key: other bytes (and the backslash) as \xHH. */
static void dest_copy(char *dst, size_t n, const char *src)
{
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)src; *p && o + 5 < n; p++) {
		if (*p < 0x20 || *p >= 0x7f || *p == '\\')
			o += (size_t)snprintf(dst + o, n - o, "\\x%02x", *p);
		else
			dst[o++] = (char)*p;
	}
	dst[o] = 0;
}

static void count(struct agent *a, struct task *t, enum acct_type kind, const char *dest,
		  json_t *(*make_event)(const void *ctx), const void *ctx)
{
	struct task_budget *b = &t->budget;
	uint64_t now = now_ns(CLOCK_REALTIME);
	size_t i;

	if (!b->win_count) {
		b->win_first_ns = now;
		b->win_due_mono = now_ns(CLOCK_MONOTONIC) + a->cfg.audit_summary_interval_ns;
	}
	b->win_count++;
	b->win_last_ns = now;
	b->summarized++;
	a->stats.audit_summarized++;
	char key[BUDGET_DEST_MAX];

	dest_copy(key, sizeof(key), dest);
	for (i = 0; i < b->n_agg; i++)
		if (b->agg[i].kind == kind && strcmp(b->agg[i].dest, key) == 0)
			break;
	if (i < b->n_agg)
		b->agg[i].count++;
	else if (b->n_agg < BUDGET_AGG_MAX) {
		b->agg[b->n_agg].kind = kind;
		memcpy(b->agg[b->n_agg].dest, key, sizeof(key));
		b->agg[b->n_agg++].count = 1;
	} else
		b->agg_other++;
	if (make_event && json_array_size(b->sample) < a->cfg.audit_summary_sample) {
		json_t *ev = make_event(ctx);

		if (!b->sample)
			b->sample = json_array();
		if (ev && b->sample) {
			json_object_set_new(ev, "type", json_string(acct_type_to_string(kind)));
			json_array_append_new(b->sample, ev);
		} else
			json_decref(ev);
	}
}

bool budget_take(struct task *t)
{
	struct task_budget *b = &t->budget;
	const char *over = NULL;

	if (b->bytes && b->audit_bytes >= b->bytes)
		over = "bytes";
	else if (b->rate && !b->kernel) {
		refill(b, now_ns(CLOCK_MONOTONIC));
		if (b->tokens < 1.0)
			over = "rate";
		else
			b->tokens -= 1.0;
	}
	if (!over) {
		b->recorded++;
		return true;
	}
	if (!b->summarized)
		log_notice(
		    "task %s: audit records past its budget (%s): further events are counted "
		    "in audit.summary records",
		    t->id, over);
	b->over = over;
	return false;
}

void budget_count(struct agent *a, struct task *t, enum acct_type kind, const char *dest,
		  json_t *(*make_event)(const void *ctx), const void *ctx)
{
	count(a, t, kind, dest, make_event, ctx);
}

bool budget_admit(struct agent *a, struct task *t, enum acct_type kind, const char *dest,
		  json_t *(*make_event)(const void *ctx), const void *ctx)
{
	if (budget_take(t))
		return true;
	count(a, t, kind, dest, make_event, ctx);
	return false;
}

static const char *const kernel_kind_names[BUDGET_KERNEL_KINDS] = {
    [BUDGET_K_EXEC] = "exec",
    [BUDGET_K_CONNECT_ALLOW] = "connect_allow",
    [BUDGET_K_CONNECT_DENY] = "connect_deny",
};

void budget_count_kernel(struct agent *a, struct task *t, const uint64_t totals[])
{
	struct task_budget *b = &t->budget;
	uint64_t n = 0, d[BUDGET_KERNEL_KINDS];

	for (int k = 0; k < BUDGET_KERNEL_KINDS; k++) {
		d[k] = totals[k] > b->kernel_seen[k] ? totals[k] - b->kernel_seen[k] : 0;
		b->kernel_seen[k] = totals[k];
		n += d[k];
	}
	if (!n)
		return;
	uint64_t now = now_ns(CLOCK_REALTIME);

	if (!b->win_count) {
		b->win_first_ns = now;
		b->win_due_mono = now_ns(CLOCK_MONOTONIC) + a->cfg.audit_summary_interval_ns;
	}
	if (!b->summarized)
		log_notice(
		    "task %s: audit records past its budget (%s): further events are counted "
		    "in audit.summary records",
		    t->id, b->kernel_closed ? "bytes" : "rate");
	if (!b->over)
		b->over = b->kernel_closed ? "bytes" : "rate";
	for (int k = 0; k < BUDGET_KERNEL_KINDS; k++) {
		b->win_kernel[k] += d[k];
		b->kernel_total[k] += d[k];
	}
	b->win_count += n;
	b->win_last_ns = now;
	b->summarized += n;
	a->stats.audit_summarized += n;
}

static json_t *kernel_json(const uint64_t v[])
{
	json_t *o = json_object();

	for (int k = 0; o && k < BUDGET_KERNEL_KINDS; k++)
		json_object_set_new(o, kernel_kind_names[k], json_integer((json_int_t)v[k]));
	return o;
}

void budget_note_bytes(struct task *t, uint64_t len)
{
	t->budget.audit_bytes += len;
}

void budget_flush_summary(struct agent *a, struct task *t, uint64_t now_mono, bool final)
{
	struct task_budget *b = &t->budget;
	struct acct_record r;
	char from[RFC3339_MAX], to[RFC3339_MAX];
	json_t *dests, *kinds;

	if (!b->win_count || (!final && now_mono < b->win_due_mono))
		return;
	dests = json_array();
	kinds = json_object();
	for (int k = 0; k < BUDGET_KERNEL_KINDS; k++) {
		const char *name =
		    acct_type_to_string(k == BUDGET_K_EXEC ? ACCT_AUDIT_EXEC : ACCT_AUDIT_CONNECT);
		json_t *o = json_object_get(kinds, name);

		if (b->win_kernel[k])
			json_object_set_new(kinds, name,
					    json_integer((o ? json_integer_value(o) : 0) +
							 (json_int_t)b->win_kernel[k]));
	}
	for (size_t i = 0; i < b->n_agg; i++) {
		const char *k = acct_type_to_string(b->agg[i].kind);
		json_t *o = json_object_get(kinds, k);

		json_object_set_new(
		    kinds, k,
		    json_integer((o ? json_integer_value(o) : 0) + (json_int_t)b->agg[i].count));
		json_array_append_new(dests, json_pack("{s:s,s:s,s:I}", "type", k, "destination",
						       b->agg[i].dest, "count",
						       (json_int_t)b->agg[i].count));
	}
	format_rfc3339_us(b->win_first_ns, from, sizeof(from));
	format_rfc3339_us(b->win_last_ns, to, sizeof(to));
	task_fill_record(a, t, ACCT_AUDIT_SUMMARY, &r);
	r.event = json_pack("{s:s,s:s,s:s,s:I,s:o,s:o,s:I,s:o,s:I,s:I,s:I}", "reason",
			    b->over ? b->over : "rate", "from", from, "to", to, "count",
			    (json_int_t)b->win_count, "by_type", kinds, "destinations", dests,
			    "other_destinations", (json_int_t)b->agg_other, "sample",
			    b->sample ? json_incref(b->sample) : json_array(), "seq",
			    (json_int_t)(b->summaries + 1), "summarized_total",
			    (json_int_t)b->summarized, "recorded_total", (json_int_t)b->recorded);
	if (r.event) {
		json_object_set_new(r.event, "budget",
				    json_pack("{s:I,s:I,s:I}", "rate", (json_int_t)b->rate, "burst",
					      (json_int_t)b->burst, "bytes", (json_int_t)b->bytes));
		/* counted in the kernel: no destination known (not in `destinations`) */
		if (b->kernel)
			json_object_set_new(r.event, "in_kernel", kernel_json(b->win_kernel));
		(void)agent_emit_record(a, &r);
		b->summaries++;
		a->stats.audit_summaries++;
	}
	acct_record_clear(&r);
	json_decref(b->sample);
	b->sample = NULL;
	b->n_agg = 0;
	b->agg_other = 0;
	b->win_count = 0;
	memset(b->win_kernel, 0, sizeof(b->win_kernel));
	b->over = NULL;
}

void budget_tick_task(struct agent *a, struct task *t, uint64_t now_mono)
{
	struct task_budget *b = &t->budget;

	budget_flush_summary(a, t, now_mono, false);
	/* kept with the task's state, so that a restarted agent continues it */
	if (b->recorded + b->summarized != b->saved_sum && now_mono >= b->next_save_mono) {
		b->dirty = true;
		a->tasks_flush_due = true;
		b->saved_sum = b->recorded + b->summarized;
		b->next_save_mono = now_mono + a->cfg.audit_summary_interval_ns;
	}
}

json_t *budget_end_json(const struct task *t)
{
	const struct task_budget *b = &t->budget;
	json_t *o = json_pack("{s:I,s:I,s:I,s:I,s:{s:I,s:I,s:I}}", "recorded",
			      (json_int_t)b->recorded, "summarized", (json_int_t)b->summarized,
			      "summaries", (json_int_t)b->summaries, "bytes",
			      (json_int_t)b->audit_bytes, "budget", "rate", (json_int_t)b->rate,
			      "burst", (json_int_t)b->burst, "bytes", (json_int_t)b->bytes);

	if (o && b->kernel)
		json_object_set_new(o, "in_kernel", kernel_json(b->kernel_total));
	return o;
}

json_t *budget_state_json(const struct task *t)
{
	const struct task_budget *b = &t->budget;
	json_t *k = json_array();

	for (int i = 0; k && i < BUDGET_KERNEL_KINDS; i++)
		json_array_append_new(k, json_integer((json_int_t)b->kernel_total[i]));
	return json_pack("{s:f,s:I,s:I,s:I,s:I,s:I,s:b,s:o*}", "tokens", b->tokens, "at",
			 (json_int_t)now_ns(CLOCK_REALTIME), "recorded", (json_int_t)b->recorded,
			 "summarized", (json_int_t)b->summarized, "summaries",
			 (json_int_t)b->summaries, "bytes", (json_int_t)b->audit_bytes, "closed",
			 b->kernel_closed, "in_kernel", k);
}

void budget_restore(struct task *t, const json_t *j)
{
	struct task_budget *b = &t->budget;
	uint64_t at, now = now_ns(CLOCK_REALTIME);
	json_t *k;

	if (!json_is_object(j))
		return; /* a state file from before budgets were kept: a fresh one */
	b->recorded = (uint64_t)json_integer_value(json_object_get(j, "recorded"));
	b->summarized = (uint64_t)json_integer_value(json_object_get(j, "summarized"));
	b->summaries = (uint64_t)json_integer_value(json_object_get(j, "summaries"));
	b->audit_bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
	b->kernel_closed = json_is_true(json_object_get(j, "closed"));
	k = json_object_get(j, "in_kernel");
	for (size_t i = 0; i < BUDGET_KERNEL_KINDS && i < json_array_size(k); i++)
		b->kernel_total[i] = (uint64_t)json_integer_value(json_array_get(k, i));
	b->saved_sum = b->recorded + b->summarized;
	/* the bucket as it would be had it run on: refilled at the rate for the time between */
	if (json_is_number(json_object_get(j, "tokens")) && b->rate) {
		double tok = json_number_value(json_object_get(j, "tokens"));

		at = (uint64_t)json_integer_value(json_object_get(j, "at"));
		if (tok < 0)
			tok = 0;
		if (now > at)
			tok += (double)(now - at) * (double)b->rate / 1e9;
		b->tokens = tok > (double)b->burst ? (double)b->burst : tok;
		b->restored = true;
	}
}

void budget_free(struct task *t)
{
	json_decref(t->budget.sample);
	t->budget.sample = NULL;
}
