/* SPDX-License-Identifier: MIT */
/*
 * Audit of calls the seccomp profile denied (audit.syscall). With [audit] on, a task's profile is
 * compiled with SBX_COMPILE_NOTIFY and its shim answers each denied call and appends it to
 * runtime_dir/tasks/<id>.syscalls (isolation/launch.h); the agent turns the lines into records.
 * Each line carries a sequence number; the highest one known to be spooled is kept in the
 * task's state file (and recovered from the unacked spool at start), so a restarted agent
 * neither loses nor repeats a record. The other audit glue is declared in agent/agent.h.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct agent;
struct task;

/* audit.syscall records per task at most; further denied calls are counted (audit.lost). */
#define AUDIT_SYSCALLS_MAX 1000 /* default of [audit] syscalls_max */

/* Are denied calls audited on this node ([audit] enable)? */
bool audit_glue_syscalls_enabled(const struct agent *a);
void audit_glue_syscalls_path(const struct agent *a, const struct task *t, char *buf, size_t len);
/* The rest runs as the audit meter of the task state machine (agent/meters.h,
 * meter_audit_ops): tracking from the child's pid, the file polled each tick, the end line
 * awaited at the end, the spooled seq and the record budget kept in the state file. */
