/* SPDX-License-Identifier: MIT */
/*
 * The task table and each task's state machine (agent/task.c): launch (admission and the
 * stages beside it, then the shim), start, ticks and limits, the end and its record, the
 * re-adoption's live part. Calls the stages and meters below it; the control API's replies
 * go through the agent's on_task_started / on_task_ended.
 */
#pragma once

#include "agent/agent.h"

/*
 * Start a task: everything that can be refused is checked and prepared here (errors go to
 * err, nothing is left behind); on success the shim is forked and *ret is TASK_STARTING. The
 * rest runs from the event loop (the shim's status pipe for the child's pid, its error pipe
 * for the exec), which calls a->on_task_started with the outcome. Once the launch is
 * admitted the spec's contents move into the task (spec is left empty): the caller clears
 * spec in every case.
 */
int task_launch(struct agent *a, struct task_spec *spec, uid_t submitter, gid_t sub_gid,
		bool privileged, struct task **ret, char *err, size_t errlen);
/* What a task's state file says of its start, for its re-adoption. */
struct task_adopt_info {
	const json_t *state; /* the state file, for the meters' restore (agent/meters.h) */
	bool same_boot;	     /* written since the node's last boot */
	bool launch_failed;  /* the launch had failed (exit_code: 126 or 127) */
	int exit_code;
};
/*
 * Re-adoption, the live part: a task read back from its state file (state_task_decode, the
 * persisted fields) joins the table; its task.start is emitted again (fixed id); its shim's
 * pidfd is watched, or, the shim gone, its exit file read. Lost after a reboot.
 */
int task_adopt(struct agent *a, struct task *t, const struct task_adopt_info *info);
/* BPF accounting at exit: the task's last thread got its final figures (METER_EV_SETTLED). */
void task_on_meter_settled(struct agent *a, uint64_t task_key);
/* The kernel's OOM killer chose process pid of the task (METER_EV_OOM_VICTIM, node-wide or
 * the task's memory cgroup's OOM): its audit.limit oom_kill record goes now, naming it. */
void task_on_oom_victim(struct agent *a, uint64_t task_key, uint32_t pid);
void task_tick(struct agent *a, uint64_t now_mono);
/* The next tick walks the task table (a task started, changed state or fired a limit). */
void task_tick_soon(struct agent *a);
/*
 * node.sample tasks_unchanged: the running tasks whose samples follow the node.sample (see
 * running_tick) are each listed in ns when every meter knows exactly that the task's usage is
 * what its last task.sample said, else get a task.sample at the next tick. time_ns: the
 * record's time.
 */
struct acct_node_sample;
void task_list_unchanged(struct agent *a, struct acct_node_sample *ns, uint64_t time_ns);
/* After the record of task_list_unchanged was written (spooled) or not: an anchor's listed
 * tasks become those the next tasks_alive statements refer to (docs/pipeline.md). */
void task_list_unchanged_done(struct agent *a, const struct acct_node_sample *ns, uint64_t time_ns,
			      bool spooled);
/* A task's first sample: on the node's grid of sample_interval, at least one interval on. */
uint64_t task_first_sample(const struct agent *a, uint64_t start_mono);
int task_signal(struct agent *a, struct task *t, int sig);
struct task *task_find(struct agent *a, const char *id);
/* The change check's lists freed (at exit, with the tasks). */
void task_lists_free(struct agent *a);
/* Append an ended task to a->ended (keeps the list in order of end). */
void task_add_ended(struct agent *a, struct task *t);
/* The ended task at position pos (oldest: a->ended_first_pos, newest: that + n_ended - 1),
 * NULL outside. Constant time. */
struct task *task_ended_at(struct agent *a, uint64_t pos);
/* The ended tasks' index freed (at exit, with the list). */
void task_ended_ring_free(struct agent *a);
/* An ended task keeps only what show/wait/ps need, its final record as text. */
void task_slim(struct task *t);
/* An ended task's final record (new reference), NULL if none. */
json_t *task_final_record(const struct task *t);
/* The task's record as JSON: task.end once ended, else a live snapshot. New reference. */
json_t *task_record_json(struct agent *a, struct task *t);
void task_free(struct task *t);
/* The agent's OOM watch descriptor (v2), at its stop; the tasks' own go with them. */
void task_oom_watch_fini(struct agent *a);
/* The task's state file: its fields (state_task_encode) and each meter's. */
int task_save(struct agent *a, struct task *t);
/* The group commit of the loop iteration (agent_flush_records), then the state files of the
 * tasks whose meters keep positions in them that the flush moved. */
void task_flush_records(struct agent *a);
void task_emit(struct agent *a, struct task *t, enum acct_type type);

/* Drop the oldest ended tasks (memory and ended/ files) beyond ended_keep. */
void task_prune_ended(struct agent *a);
