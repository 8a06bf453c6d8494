/* SPDX-License-Identifier: MIT */
/* Record emission (agent/emit.c): record ids, the audit chain and its audit.gap, the group
 * commit queue, the spool's syncer. */
#pragma once

#include "agent/agent.h"

/* The record's common part from the task (type, time, node, task, request; usage and sources
 * but for task.start; exit for task.end). */
void task_fill_record(struct agent *a, struct task *t, enum acct_type type, struct acct_record *r);
int agent_emit_record(struct agent *a, struct acct_record *r);
void agent_flush_records(struct agent *a);
/* The audit.gap of records the spool refused (struct audit_gap): note one, and emit the pending
 * one ahead of the next audit record (0, or -ENOSPC). */
void agent_gap_note(struct agent *a, const struct acct_record *r, uint64_t count);
int agent_gap_emit(struct agent *a);
/* The syncer reported (its fd readable): remove what waited for it. */
void agent_sync_done(struct agent *a);
/* Shutdown: wait for every sync, then stop the syncer thread. */
void agent_sync_stop(struct agent *a);
