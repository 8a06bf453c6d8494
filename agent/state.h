/* SPDX-License-Identifier: MIT */
/* Agent state on disk (agent/state.c): the task's files, counters and ids, the audit chain's
 * head, the full-filesystem reserve. Knows the task's fields, nothing above. */
#pragma once

#include "agent/agent.h"

/* Write the task's state file (tasks/<id>.json, replaced atomically) with this content. */
int state_write_task(struct agent *a, const struct task *t, json_t *j);
/* A task's state file as JSON (new reference, NULL when out of memory), and back: the task's
 * own fields; the meters add theirs (agent/meters.h, save and restore). */
json_t *state_task_encode(struct agent *a, struct task *t);
int state_task_decode(json_t *j, struct task *t, char *err, size_t errlen);
/* "t-<hex>-<hex>" (what a state file name or cgroup of ours must be). */
bool state_valid_task_id(const char *s);
/* Tasks an older agent started keep their files in state_dir (runtime_dir is elsewhere). */
bool state_have_legacy_dir(const struct agent *a);
/* The highest audit.syscall line of the task seen in the unacked spool at start (0: none),
 * and the end of that list once the tasks are re-adopted. */
uint64_t state_spooled_seq(const struct agent *a, const char *id);
void state_spooled_free(struct agent *a);
/* runtime_dir, or state_dir when none is configured. */
const char *agent_runtime_dir(const struct agent *a);
/* A file of the task (sub "tasks" or "ended", ext ".json", ".exit", ".syscalls"): in
 * runtime_dir, or in state_dir for a task an older agent started (t->legacy_files). */
void state_task_path(const struct agent *a, const struct task *t, const char *sub, const char *ext,
		     char *buf, size_t len);
/* Remove tasks/<id>.{json,exit,syscalls}. */
/* Remove a task's live files, named by their stem "<dir>/tasks/<id>" (the flush queue's). */
void state_remove_task_files(const char *stem);
void state_remove_ended(struct agent *a, const struct task *t);
void state_remove_task_after_flush(struct agent *a, struct task *t);
int state_save_ended(struct agent *a, struct task *t);
int state_next_record_id(struct agent *a, char *buf, size_t len);
int state_init_counters(struct agent *a);
/* Full state filesystem: degraded mode (logged once), the reserve given up (spool_opts
 * free_space), and every few seconds in state_tick a try to leave it. */
void state_set_degraded(struct agent *a, int err, const char *what);
int state_free_space(void *ud);
void state_tick(struct agent *a, uint64_t now_mono);
uint64_t state_next_task_seq(struct agent *a);
/* A new task id, t-<unix time, hex>-<seq, hex> (ids are unique per node); returns the seq. */
uint64_t state_next_task_id(struct agent *a, char *id, size_t len);
int state_save_audit_head(struct agent *a);
/* Saves the head if records were chained since the last save (before spool acks, at stop). */
int state_sync_audit_head(struct agent *a);
void state_load_audit_head(struct agent *a);
