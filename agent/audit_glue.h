/* SPDX-License-Identifier: MIT */
/*
 * Audit of calls the seccomp profile denied (audit.syscall). With [audit] on, a task's profile is
 * compiled with SBX_COMPILE_NOTIFY and its shim answers each denied call and appends it to
 * runtime_dir/tasks/<id>.syscalls (isolation/launch.h); the agent turns the lines into records.
 * Each line carries a sequence number; the highest one known to be spooled is kept in the
 * task's state file (and recovered from the unacked spool at start), so a restarted agent
 * neither loses nor repeats a record.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct agent;
struct task;

/* audit.syscall records per task at most: [audit] syscalls_max (AUDIT_SYSCALLS_MAX, config.h);
 * further denied calls are counted (audit.lost). */

/* This runs as the audit meter of the task state machine (agent/meters.h, meter_audit_ops):
 * before the spawn the network policy checked, the notifying filter and the denied-calls file
 * asked for (its prepare); tracking from the child's pid, the file polled each tick, the end line
 * awaited at the end, the spooled seq and the record budget kept in the state file. */

/* The audit trail of exec and connect events (BPF) and the network policy. */
int audit_glue_init(struct agent *a);
void audit_glue_fini(struct agent *a);
/* The tick without rtnetlink: re-read the node's addresses for the network policy. */
void audit_glue_addrs_tick(struct agent *a);
/* Read the events in the ring buffer (its fd's handler; the tick, for events sent without a
 * wakeup). */
void audit_glue_poll(struct agent *a);
/* The agent's tick: events sent without a wakeup, the kernel's counts folded, due summaries
 * of every task, a pending audit.gap when the spool has room again. */
void audit_glue_tick(struct agent *a, uint64_t now_mono);
/* The agent stops (tasks keep running): summaries out, budgets marked for the state files
 * (written by the next task_flush_records). */
void audit_glue_stop(struct agent *a);
