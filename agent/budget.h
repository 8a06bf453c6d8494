/* SPDX-License-Identifier: MIT */
/*
 * Per-task record budget and policy drops in the audit chain (agent/budget.c).
 *
 * Each task may put audit records into the spool at a bounded rate (token bucket: [audit]
 * task_rate per second, task_burst deep) and up to a bounded volume ([audit] task_bytes);
 * the job spec may ask for another budget (limits.audit_rate / limits.audit_bytes, up to
 * task_rate_max / task_bytes_max without privilege). Past its budget a task's events are not
 * recorded one by one: they are counted per kind and destination, the first summary_sample
 * of each period kept whole, and written as one audit.summary record per summary_interval
 * and at the task's end; its task.end record says how many were summarized.
 *
 * The spool admits audit records only below its billing reserve. An audit record that does
 * not fit is not chained (its hash never becomes the head): it is counted, and the next audit
 * record that fits is preceded by an audit.gap record in the chain that says how many records
 * were shed, of which kinds and tasks, and when. A verifier sees a gap declared by policy,
 * never a break.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "accounting/record.h"
#include "agent/budget_types.h"
#include "agent/spec.h"

struct agent;
struct task;

/* The task's budget from its spec and the config (launch and adoption). */
void budget_init(struct agent *a, struct task *t);
/* Refusal message when an unprivileged spec asks for more than task_*_max, else 0. */
int budget_check_spec(const struct agent *a, const struct task_spec *s, bool privileged, char *err,
		      size_t errlen);
/*
 * One audit event of the task: true when it may be recorded one by one (a token is taken);
 * false when it was counted into the current summary instead (dest names its destination;
 * make_event(ctx) builds the event object, called only when the period's sample has room).
 */
bool budget_admit(struct agent *a, struct task *t, enum acct_type kind, const char *dest,
		  json_t *(*make_event)(const void *ctx), const void *ctx);
/* The same in two steps, so that a caller builds dest only for an event it must count:
 * budget_take takes a token (true: record it), budget_count counts the event. */
bool budget_take(struct task *t);
void budget_count(struct agent *a, struct task *t, enum acct_type kind, const char *dest,
		  json_t *(*make_event)(const void *ctx), const void *ctx);
/* Events the kernel counted past the budget, as its running totals (kind: BUDGET_K_*): the
 * difference since the last call is counted into the current summary. */
void budget_count_kernel(struct agent *a, struct task *t, const uint64_t totals[]);
/* Bytes of an admitted record, after it was queued for the spool. */
void budget_note_bytes(struct task *t, uint64_t len);
/* Emit the task's audit.summary when its period is due (or now, when final). */
void budget_flush_summary(struct agent *a, struct task *t, uint64_t now_mono, bool final);
/* Tick of one task (after the kernel's counts were folded): its summary when due, its state
 * file marked to be written when the figures changed (at most once per summary_interval). */
void budget_tick_task(struct agent *a, struct task *t, uint64_t now_mono);
/*
 * The walk of the budgets (agent/audit_glue.c, once per summary_interval) looks only at the
 * tasks listed here: budget_touch lists a task (at its budget's start and at each of its audit
 * events), budget_untouch takes it out (the walk, when nothing of the task's budget can move
 * without an event: budget_quiet and the kernel's bucket able to send the next event; and
 * task_free). budget_next walks the list from NULL; a task may be taken out while its
 * successor is kept.
 */
void budget_touch(struct agent *a, struct task *t);
void budget_untouch(struct task *t);
struct task *budget_next(struct agent *a, const struct task *t);
/* No summary pending, nothing unsaved, the kernel not counting every event (bytes spent). */
bool budget_quiet(const struct task *t);
/* The "audit" member of the task's end record (new reference). */
json_t *budget_end_json(const struct task *t);
void budget_free(struct task *t);
/* The budget's figures for the task's state file (new reference), and back at re-adoption:
 * the bucket refilled for the time between, the totals continued. */
json_t *budget_state_json(const struct task *t);
void budget_restore(struct task *t, const json_t *j);
