/* SPDX-License-Identifier: MIT */
/*
 * Supervision of a task's limits and of its end (agent/supervise.c): pure decisions over the
 * task's fields and figures read by the caller, no IO. Each says what to do and when; the task
 * state machine (agent/task.c) acts on it: signals the cgroup, writes the audit.limit record,
 * arms the CPU-time timer, ends the task.
 *
 * A limit of the agent's clock (wall time, CPU time) sends SIGTERM once, then SIGKILL when the
 * task still runs kill_grace after it; a meter's limit (the GPU memory limit) SIGKILL at once.
 * The task's exit status then says the limit (exit.by), whatever signal ended it.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "accounting/record.h"

struct task;

/* A limit that fired: what the caller sends and records (audit.limit). */
struct sv_verdict {
	enum acct_exit_status why; /* the limit: its exit status (ACCT_EXIT_TIME_LIMIT, ...) */
	int signal;		   /* to send to the task's cgroup now */
	uint64_t limit, observed;  /* the limit and the value that reached it */
};

/* The CPU-time check's interval: at least SV_CPU_CHECK_MIN_NS, an idle task's back-off at
 * most SV_CPU_CHECK_MAX_NS. */
#define SV_CPU_CHECK_MIN_NS (1000 * 1000ULL)
#define SV_CPU_CHECK_MAX_NS (250 * 1000 * 1000ULL)

/* A limit fired at now (observed reached limit): kept in the task (its exit status, the
 * SIGTERM's time, the audit figures), *v filled. false when a limit had fired already (the
 * first one is the task's). */
bool sv_fire(struct task *t, enum acct_exit_status why, uint64_t now, uint64_t limit,
	     uint64_t observed, struct sv_verdict *v);

/* The wall-time limit (--time-limit) of a running task at now: true when it fires now (*v);
 * else *due lowered to when it will (left alone without a limit or once one fired). */
bool sv_time_limit(struct task *t, uint64_t now, struct sv_verdict *v, uint64_t *due);

/* The grace after a fired limit's SIGTERM: true when SIGKILL is due now (sent once: marked);
 * else *due lowered to when it will be. */
bool sv_kill_grace(struct task *t, uint64_t now, uint64_t kill_grace_ns, uint64_t *due);

/*
 * The CPU-time limit (--cpu-time) with the task's CPU usage read now: true when it fires
 * (*v). Else *delay_ns: when to check again (0: no check needed: no limit, or one fired).
 * The task cannot use more than P CPUs (ncpus, or --cpus when lower), so its budget cannot
 * run out before left / P: each check waits that long (at least SV_CPU_CHECK_MIN_NS), which
 * converges on the moment the budget is spent. A task that used nothing since the last check
 * backs off, doubling up to SV_CPU_CHECK_MAX_NS, instead of being polled every millisecond
 * near its limit.
 */
bool sv_cpu_time(struct task *t, unsigned ncpus, uint64_t usage, uint64_t now, struct sv_verdict *v,
		 uint64_t *delay_ns);

/*
 * A limit a meter saw at now (agent/meters.h, its limit op: the GPU memory limit from the NVML
 * watchdog or the libcuda uprobe): true when it is the task's first (*v): SIGKILL to the whole
 * task at once, no grace (the memory it holds is another task's on a shared device; the uprobe
 * killed the allocating process already, the rest of the task goes with it), marked sent. false
 * when a limit had fired already (the first one is the task's).
 */
bool sv_meter_limit(struct task *t, enum acct_exit_status why, uint64_t now, uint64_t limit,
		    uint64_t observed, struct sv_verdict *v);

/*
 * OOM kills the kernel made in the task's cgroup: total is the cgroup's count read now. The
 * kills not yet reported (an audit.limit "oom_kill" each time it grows), marked reported; 0
 * when none. A task's processes may be OOM-killed while the task goes on.
 */
uint64_t sv_oom_new_kills(struct task *t, uint64_t total);

/*
 * The task's exit status (exit.by) and exit code or signal, from the supervisor's wait status,
 * the limit that fired and the OOM kills of its cgroup: a fired limit first; SIGSYS is the
 * seccomp filter's kill; a SIGKILL or a failed exit after an OOM kill is the OOM killer's;
 * else signaled or exited. A launch that failed or a task lost keeps its status.
 */
void sv_decide_status(struct task *t, uint64_t oom_kills);
