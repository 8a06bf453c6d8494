/* SPDX-License-Identifier: MIT */
/*
 * Meters: the sources of a task's usage (the eBPF meter, the taskstats fallback, NVML for
 * GPUs) and of its audit records (the BPF audit programs, the shim's denied calls), behind one
 * ops table. The task state machine (agent/task.c) calls every meter's op at each step of a
 * task's life, in the order of agent_meters; a meter never calls back into the task table or
 * its persistence: what it needs done (the task's state file written, the end record held)
 * it returns. Any op may be NULL.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "accounting/record.h"

struct agent;
struct task;
struct cg_stats;

/* What collect_usage hands each meter's usage op, and what they tell each other. */
struct meter_merge {
	const struct cg_stats *st; /* the cgroup's figures (zero when not read) */
	bool have_st;		   /* ... read */
	/* block IO measured by a meter (usage_detail.block_*; else the cgroup's, if kept) */
	bool blk_measured;
	uint64_t blk_read_bytes, blk_write_bytes;
};

/* What the meters add to a launch (their prepare op); task_launch starts it zeroed. */
struct meter_launch {
	unsigned int filter_flags; /* SBX_COMPILE_* the task's seccomp filter is compiled with */
	char **env;		   /* extra environment, NULL-terminated (plan_strv_free); the GPU
				    * meter's alone */
	char dev_names[512];	   /* device nodes of the task's private /dev ("a b c") */
	char syscalls_file[512];   /* where the shim appends the denied calls ("": none) */
	bool refused;		   /* a failed prepare: the task asks what the node cannot give */
};

/* A limit a meter saw (its limit op); supervise.c decides what follows (sv_meter_limit). */
struct meter_limit {
	enum acct_exit_status why; /* the exit status it gives (ACCT_EXIT_GPU_MEMORY_LIMIT) */
	uint64_t limit, observed;  /* the limit and the value that crossed it */
};

struct meter_ops {
	const char *name;
	/* Before the spawn, the task's cgroup made: the meter's part of the launch (what it
	 * allocates, the policy it attaches to the cgroup, what it adds to ml). < 0 refuses
	 * the task (ml->refused) or fails the launch, err naming the field; a failed prepare
	 * leaves nothing behind. */
	int (*prepare)(struct agent *a, struct task *t, struct meter_launch *ml, char *err,
		       size_t errlen);
	/* The launch failed after prepare: undo it (the task never ran). */
	void (*unprepare)(struct agent *a, struct task *t);
	/* The child's pid is known, before it is let go: start measuring. < 0 (err says why)
	 * aborts the launch. */
	int (*started)(struct agent *a, struct task *t, char *err, size_t errlen);
	/* The child exec'd and the task is running (TASK_RUNNING): take what came while it was
	 * starting (the audit trail: denied calls its file got before now, whose change was
	 * seen while the task was not running yet). */
	void (*running)(struct agent *a, struct task *t);
	/* Re-adoption after an agent restart, the task's cgroup opened: live when its supervisor
	 * still runs (else the task ends at once). */
	void (*adopted)(struct agent *a, struct task *t, bool live);
	/* A running task's tick: true when its state file must be written. It comes at every
	 * tick where tick_every says the meter polls the task, else with the task's samples
	 * (the idle loop walks no task between them). */
	bool (*tick)(struct agent *a, struct task *t, uint64_t now_mono);
	bool (*tick_every)(const struct agent *a, const struct task *t);
	/* Around the walk of a tick over the tasks (on: before, off: after): what the reads of
	 * one batch of samples can share (the eBPF meter: one walk of the node's threads). */
	void (*batch)(struct agent *a, bool on);
	/* Within a batch that reads (nearly) every running task, say the change check at a
	 * node.sample: read what the batch needs at once (the eBPF meter: its maps whole). */
	void (*prefetch)(struct agent *a);
	/* A limit the meter saw: true and *ret filled (again at later calls: the first limit is
	 * the task's). Asked after the meters' ticks and when the main process is gone, before
	 * the exit status is decided. The meter sends no signal: the task table does, as
	 * supervise.c decides. */
	bool (*limit)(struct agent *a, struct task *t, struct meter_limit *ret);
	/* The task's leftover processes are about to be killed (its cgroup is not empty). */
	void (*leftovers)(struct agent *a, struct task *t);
	/* The meter's figures into t->usage, t->sources and t->usage_detail, over the
	 * cgroup's (already there). */
	void (*usage)(struct agent *a, struct task *t, struct meter_merge *m);
	/* The task's usage, as far as this meter measures it, is exactly what it was at its last
	 * task.sample (t->mark): true, and *rss_bytes the memory it held all the time since
	 * (where the meter measures memory). A meter with a usage op and none of this one
	 * counts as "changed". */
	bool (*unchanged)(struct agent *a, struct task *t, uint64_t *rss_bytes);
	/* unchanged answers the same for a task as long as it runs (or as long as the agent's
	 * configuration stays): a statement need not ask it again (agent/task.c). */
	bool unchanged_fixed;
	/* Otherwise, where the meter can tell: changed(a, key) for each running task it may
	 * answer unchanged differently for than at its last unchanged or usage call (the eBPF
	 * meter's marks, and the marks its reads outside a check took), at most once per call
	 * and task. False: it cannot tell (every task is asked). */
	bool (*changes)(struct agent *a, void (*changed)(struct agent *a, uint64_t task_key));
	/* Ending: are the meter's final figures in? give_up: the agent waited long enough
	 * (logged; the record says what is missing). */
	bool (*settled)(struct agent *a, struct task *t, bool give_up);
	/* The task is finalized (usage collected), before its task.end: stop measuring. */
	void (*end)(struct agent *a, struct task *t);
	/* After the records of a loop iteration are spooled: true when the task's state file
	 * must be written (what it keeps of the meter changed). */
	bool (*flushed)(struct agent *a, struct task *t);
	/* The meter's part of the task's state file, and back at re-adoption. */
	void (*save)(struct agent *a, struct task *t, json_t *state);
	void (*restore)(struct agent *a, struct task *t, const json_t *state);
	/* The task is freed. */
	void (*release)(struct task *t);
};

extern const struct meter_ops meter_ebpf_ops, meter_taskstats_ops, meter_gpu_ops, meter_audit_ops;

/* Every meter, in the order the task state machine calls them. NULL-terminated. */
extern const struct meter_ops *const agent_meters[];

/* Every meter's prepare, in order; when one fails, those before it are undone (reverse
 * order) and its error returned (err names the field). */
int meters_prepare(struct agent *a, struct task *t, struct meter_launch *ml, char *err,
		   size_t errlen);
/* Every meter's unprepare, in reverse order: a launch failed after meters_prepare. */
void meters_unprepare(struct agent *a, struct task *t);
