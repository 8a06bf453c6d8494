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
/* Turn the new lines of the task's file into records. True once its end line was read (or the
 * task has no such file). */
bool audit_glue_syscalls_poll(struct agent *a, struct task *t);
/*
 * Ending tasks: may the task be finalized as far as its denied calls go? Polls; true when the
 * end line was read, the task is lost, or give_up (the agent waited long enough; logged).
 */
bool audit_glue_syscalls_settled(struct agent *a, struct task *t, bool give_up);
/* After the records of a loop iteration are spooled: persist each task's spooled seq. */
void audit_glue_syscalls_flushed(struct agent *a);
