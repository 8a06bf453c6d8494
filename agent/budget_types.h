/* SPDX-License-Identifier: MIT */
/*
 * The record budget's state: a task's (struct task_budget, a member of struct task) and the
 * pending audit.gap (struct audit_gap, a member of the agent). The functions over them are in
 * agent/budget.h (the budget) and agent/emit.h (the gap).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "accounting/record.h"

#define BUDGET_AGG_MAX	 32 /* distinct (kind, destination) pairs per summary */
#define BUDGET_DEST_MAX	 96
#define BUDGET_GAP_TASKS 16 /* tasks named in an audit.gap record */

/* Kinds the kernel counts past the budget (audit_budget_state). */
enum { BUDGET_K_EXEC, BUDGET_K_CONNECT_ALLOW, BUDGET_K_CONNECT_DENY, BUDGET_KERNEL_KINDS };

struct budget_agg {
	enum acct_type kind;
	char dest[BUDGET_DEST_MAX];
	uint64_t count;
};

/* A place in the agent's list of the tasks whose budget its walk looks at (agent/budget.h,
 * budget_touch); both NULL: not listed. */
struct budget_link {
	struct budget_link *prev, *next;
};

struct task_budget {
	struct budget_link active;   /* in the walk's list (budget_touch) */
	uint64_t rate, burst, bytes; /* limits; rate 0 / bytes 0 = unbounded */
	double tokens;
	uint64_t refill_mono;
	uint64_t audit_bytes; /* bytes of this task's audit records admitted */
	uint64_t recorded;    /* audit records admitted one by one */
	uint64_t summarized;  /* events counted in summaries instead */
	uint64_t summaries;   /* audit.summary records emitted */
	const char *over;     /* NULL, "rate" or "bytes": why the current period summarizes */
	/* the rate is enforced in the kernel (bpf/audit.h, audit_track_budget): events past it
	 * are counted there and folded in here (budget_count_kernel) */
	bool kernel, kernel_closed;
	uint64_t kernel_seen[BUDGET_KERNEL_KINDS]; /* the kernel's counts folded so far */
	uint64_t kernel_total[BUDGET_KERNEL_KINDS], win_kernel[BUDGET_KERNEL_KINDS];
	/* carried over an agent restart (budget_restore): the bucket starts at `tokens` */
	bool restored;
	/* the state file is rewritten when the figures changed, at most once per
	 * summary_interval (agent/audit_glue.c, after the records are spooled) */
	bool dirty;
	uint64_t saved_sum, next_save_mono;
	/* the period being summarized */
	uint64_t win_count, win_first_ns, win_last_ns, win_due_mono;
	size_t n_agg;
	struct budget_agg agg[BUDGET_AGG_MAX];
	uint64_t agg_other; /* events beyond BUDGET_AGG_MAX distinct destinations */
	json_t *sample;	    /* the period's first events, whole */
};

struct audit_gap {
	uint64_t count; /* records shed since the last audit.gap in the chain */
	uint64_t first_ns, last_ns;
	uint64_t by_kind[_ACCT_TYPE_MAX];
	size_t n_tasks;
	struct {
		char id[ACCT_ID_MAX];
		uint64_t count;
	} tasks[BUDGET_GAP_TASKS];
	uint64_t tasks_other;
	/* records chained in memory and then refused by the spool: the hashes skipped */
	char skipped_first[ACCT_HASH_HEX], skipped_last[ACCT_HASH_HEX];
};
