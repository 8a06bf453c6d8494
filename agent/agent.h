/* SPDX-License-Identifier: MIT */
/*
 * corrald internals: the agent object and the task table.
 * Single-threaded: everything runs from one epoll loop (agent/loop.h).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "accounting/record.h"
#include "agent/budget.h"
#include "agent/config.h"
#include "agent/spec.h"
#include "isolation/cgroup.h"
#include "isolation/launch.h"

struct cg_root;
struct cg_task;
struct meter;
struct spool;
struct upl;
struct conn;
struct gpu_task;
struct audit;
struct ts_glue;
struct ts_task;
struct loop;
struct profile_cache;
struct node_sampler;

enum task_state {
	TASK_STARTING, /* shim forked: waiting for the child's pid, then for its exec */
	TASK_RUNNING,
	TASK_ENDING, /* main process gone: killing leftovers, waiting for the cgroup to empty */
	TASK_ENDED,
};

struct waiter {
	struct conn *conn;
	struct waiter *next;
	bool start; /* waits for the run reply (the task is starting) ... */
	bool wait;  /* ... and then for the end (run --wait) */
};

struct task {
	struct agent *agent; /* owner: the loop's handlers get only the task */
	char id[40];
	uint64_t key; /* numeric key for BPF maps */
	struct task_spec spec;
	char *user;
	uid_t uid;
	gid_t gid;
	uid_t submitter_uid;
	char *cg_name;
	struct cg_task *cg;
	enum task_state state;
	bool adopted; /* re-adopted after an agent restart */
	/* BPF accounting at exit: the end record was written without some threads' final
	 * figures (given up after ENDING_MAX_NS): the CPU figure comes from the cgroup. */
	bool meter_gave_up;

	pid_t shim_pid;
	uint64_t shim_start; /* /proc start time, guards against pid reuse */
	int shim_pidfd;
	int status_fd;
	struct task_start *start; /* TASK_STARTING: the launch in progress (agent/task.c) */
	bool legacy_files; /* started before runtime_dir was set: its files are in state_dir */
	uint64_t starting_since_mono;
	pid_t pid;
	uint64_t pid_start;

	uint64_t start_ns; /* realtime */
	uint64_t start_mono_ns;
	uint64_t end_ns;
	uint64_t ending_since_mono;

	/* limit enforcement */
	enum acct_exit_status limit_reason; /* ACCT_EXIT_NONE until a limit fired */
	uint64_t term_sent_mono;
	bool kill_sent;
	uint64_t limit_value, limit_observed; /* for audit.limit */
	/* Kernel OOM kills in the task's cgroup: the latest count read, and how many of them an
	 * audit.limit record has reported. */
	uint64_t oom_kills, oom_kills_reported;
	/* --cpu-time: a timerfd armed from the remaining budget divided by the CPUs the task can
	 * use, so the check comes when the budget can first be spent (not only at the tick). */
	int cpu_timer_fd;
	bool have_cpu_timer;
	uint64_t cpu_check_last_usage, cpu_check_idle_ns;

	/* results */
	bool have_exit;
	struct launch_exit exit;
	enum acct_exit_status status;
	int exit_code, exit_signal;
	char *exit_message;
	struct acct_usage usage;
	enum acct_source sources[_ACCT_U_MAX];
	json_t *usage_detail; /* extra per-mechanism figures, owned */
	uint64_t next_sample_mono;
	double mem_byte_seconds_cg; /* integrated from cgroup memory.current samples */
	uint64_t last_mem_sample_mono;

	/* GPU allocation: persisted form (UUID list) and the live state (agent/gpu_glue.c) */
	json_t *gpu_alloc;
	json_t *gpu_meter_saved; /* read from the state file, for the GPU meter's adoption */
	struct gpu_task *gpu;
	struct ts_task *ts; /* taskstats fallback sums (agent/taskstats_glue.c) */
	bool audit_tracked;
	uint64_t audit_lost_reported;
	/* audit of denied calls: the shim's tasks/<id>.syscalls (agent/audit_glue.c) */
	bool syscall_audit;
	bool syscalls_done;	     /* its end line was read */
	uint64_t syscalls_seq;	     /* last line turned into a record */
	uint64_t syscalls_seq_saved; /* ... and known to be spooled: what the state file keeps */
	uint32_t syscalls_max;	     /* the shim's cap, from [audit] syscalls_max at launch */
	uint64_t syscalls_off;	     /* bytes of the file consumed */
	struct task_budget budget;   /* audit record budget (agent/budget.c) */

	json_t *final_record; /* the task.end record as sent, until task_slim ... */
	char *final_txt;      /* ... keeps it as compact text (a tree costs ~10 KiB per task, and
			       * every byte of the agent's heap is copied by each shim's fork) */
	struct waiter *waiters;
	struct task *next;
};

struct agent_stats {
	uint64_t tasks_started, tasks_ended, launch_failed, refused;
	uint64_t cg_pool_hits; /* launches that took a ready cgroup */
	uint64_t records_spooled, records_spool_refused, records_spool_refused_logged;
	uint64_t tasks_adopted, tasks_lost;
	/* record budget and policy drops (agent/budget.c) */
	uint64_t audit_summarized, audit_summaries, audit_shed, audit_gaps;
	uint64_t conns_refused;	  /* control connections refused (limits, agent/control.c) */
	uint64_t conns_timed_out; /* closed by the agent: idle, timeouts, replies unread */
};

struct pending_record {
	char *buf;
	size_t len;
	int prio; /* enum spool_prio */
	/* audit records: their place in the chain, to bridge it when the spool refuses them */
	enum acct_type type;
	uint64_t gap_carried; /* an audit.gap: the count it declares */
	char prev_hash[ACCT_HASH_HEX], hash[ACCT_HASH_HEX];
	char task_id[ACCT_ID_MAX];
	uint64_t time_ns;
};

/* Ending tasks: how long the end record waits for the meters' final figures. */
#define TASK_ENDING_MAX_NS (10 * 1000000000ULL)

/* The highest audit.syscall line number of each task found in the unacked spool at start
 * (agent/state.c, state_load_audit_head), for the re-adoption of its task (state_spooled_seq). */
struct spooled_seq {
	char id[ACCT_ID_MAX];
	uint64_t seq;
};

#define STATE_INSTANCE_HEX  12
#define STATE_RESERVE_BYTES (1u << 20)

struct agent {
	struct agent_config cfg;
	const char *config_path;
	struct loop *loop;
	int sigfd, tickfd, listenfd;
	bool quit;
	char boot_id[37];
	/* random, made when the state directory's counters are first written (or found lost):
	 * part of every record id, so ids never repeat whatever happens to state_dir */
	char instance_id[STATE_INSTANCE_HEX + 1];
	/* the state filesystem is full (agent/state.c "full state filesystem") */
	bool degraded;
	char degraded_why[160];
	uint64_t degraded_retry_mono;
	struct cg_root *cg;
	struct meter *meter;
	const char *meter_state; /* "tp_btf", "raw_tp", "off", "failed: ..." */
	struct audit *audit;
	/* NULL: tasks get their mount namespace; else why the node cannot (sandbox_probe) */
	const char *sandbox_unsupported;
	int landlock_abi;	/* > 0: the kernel's Landlock ABI (probed at start); else -errno */
	struct ts_glue *tsglue; /* taskstats fallback meter, NULL unless in use */
	struct users *users;	/* passwd/group cache (agent_users) */
	struct profile_cache *profiles;	 /* compiled seccomp filters (agent/profiles.h) */
	struct launch_spawner *spawner;	 /* forks the shims (NULL: the agent forks them) */
	char *spawner_path;		 /* corral-spawn found beside corrald, or NULL */
	uint64_t spawner_restarted_mono; /* last restart (agent_spawn_shim), 0: none yet */
	struct spool *spool;
	struct upl *upl;
	void *metrics; /* metrics HTTP server */
	void *gpu;     /* GPU inventory, NULL when GPU features are off */

	struct task *tasks; /* live tasks (starting, running, ending) */
	/* Ended tasks kept for show/wait (up to ended_keep), oldest first: a launch never walks
	 * them (with 1000 of them each walk cost tens of microseconds in cache misses). */
	struct task *ended, *ended_tail;
	uint32_t n_live, n_ended;
	uint64_t next_task_seq, task_seq_reserved;
	uint64_t next_record_seq, record_seq_reserved;
	uint64_t mem_total;
	uint32_t ncpus;
	bool watchdog;
	const char *scope_base; /* v2 under systemd: the tasks' scope (agent/scope.c) */
	uint64_t watchdog_usec;
	char audit_head[ACCT_HASH_HEX]; /* hash of the last audit record: the chain's head */
	struct agent_stats stats;
	/* group commit (agent_flush_records) */
	struct pending_record *pend;
	size_t n_pend, cap_pend;
	/* queued billing + audit entries (flushed before samples): what an audit record's
	 * admission must count on top of the spool's bytes */
	size_t n_pend_kept;
	uint64_t pend_kept_bytes;
	struct audit_gap gap; /* audit records shed since the last audit.gap */
	size_t last_emit_len; /* encoded size of the last record agent_emit_record queued */
	bool audit_dirty;
	char **unlink_stems;
	size_t n_unlink, cap_unlink;
	/* The spool's fdatasync runs on the syncer thread (NULL: in the loop). State files of
	 * ended tasks wait for the sync that makes their end record durable. */
	struct syncer *syncer;
	struct sync_wait {
		uint64_t gen;
		char *stem;
	} * sync_wait;
	size_t n_sync_wait, cap_sync_wait;
	uint64_t sync_done_gen; /* newest generation known done */
	/* cgroups made and removed when the loop is idle (agent/cgpool.c) */
#define CG_POOL_MAX 2
#define CG_REAP_MAX 32
	struct cg_pool_entry {
		struct cg_task *cg; /* named after the task id it was made for */
		uint64_t key;	    /* that task's seq (its BPF key) */
		uint64_t made_mono;
	} cg_pool[CG_POOL_MAX]; /* oldest first */
	size_t n_cg_pool;
	struct cg_pool_entry
	    cg_next; /* the next one, made a directory per idle step (cg NULL: none) */
	struct cg_limits cg_pool_like;	      /* the last launch's limits */
	bool cg_pool_on;		      /* after a launch, until a pool cgroup failed */
	struct cg_task *cg_reap[CG_REAP_MAX]; /* removed a directory per idle step, last first */
	size_t n_cg_reap;
	/* launches whose shim has not reported the child's pid yet: while there are any, no idle
	 * work starts (the pid, then the agent's go, is the launch's critical path) */
	uint32_t n_pid_wait;
	struct conn *conns;
	uint32_t n_conns;
	struct node_sampler *node_sampler; /* node.sample records (agent/node_sample.c) */
	/* The control API's answers to a launch and to the waiters of a task (agent/control.c
	 * sets them): the task table calls them and never control.c itself. NULL: none. */
	void (*on_task_started)(struct agent *a, struct task *t, const char *err);
	void (*on_task_ended)(struct agent *a, struct task *t);
	/* from the spool at start, until the tasks are re-adopted (agent/adopt.c) */
	struct spooled_seq *spooled;
	size_t n_spooled, cap_spooled;
};

/* The passwd/group cache, made on first use and refreshed once per control request
 * (NULL when out of memory). */
struct users *agent_users(struct agent *a);

/* task.c */
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
void task_tick(struct agent *a, uint64_t now_mono);
int task_signal(struct agent *a, struct task *t, int sig);
struct task *task_find(struct agent *a, const char *id);
/* Append an ended task to a->ended (keeps the list in order of end). */
void task_add_ended(struct agent *a, struct task *t);
/* An ended task keeps only what show/wait/ps need, its final record as text. */
void task_slim(struct task *t);
/* An ended task's final record (new reference), NULL if none. */
json_t *task_final_record(const struct task *t);
/* The task's record as JSON: task.end once ended, else a live snapshot. New reference. */
json_t *task_record_json(struct agent *a, struct task *t);
void task_free(struct task *t);
void task_collect_usage(struct agent *a, struct task *t);
/* The task's state file: its fields (state_task_encode) and each meter's. */
int task_save(struct agent *a, struct task *t);
/* The group commit of the loop iteration (agent_flush_records), then the state files of the
 * tasks whose meters keep positions in them that the flush moved. */
void task_flush_records(struct agent *a);
void task_emit(struct agent *a, struct task *t, enum acct_type type);

/* adopt.c: at start, the ended tasks and the live ones (re-adopted) from their state files;
 * cgroups of ours no task owns are removed. */
int adopt_load(struct agent *a);

/* emit.c: record ids, the audit chain, the group commit queue, the spool's syncer. */
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

/* cgpool.c: a ready cgroup for a launch with these limits, if one fits: then *ret, and the
 * task's seq and id that it was made for (the cgroup is named after the id). Limits are not
 * applied yet (cg_task_apply). */
bool agent_cg_pool_take(struct agent *a, const struct cg_limits *lim, uint64_t *key, char *id,
			size_t idlen, struct cg_task **ret);
/* An ended task's (empty) cgroup, removed when the loop is idle. */
void agent_cg_release(struct agent *a, struct cg_task *cg);
bool agent_has_idle_work(const struct agent *a);
void agent_idle_work(struct agent *a); /* one step: one directory removed or made */
void agent_cg_pool_fini(struct agent *a);
/* audit_glue.c */
int audit_glue_init(struct agent *a);
void audit_glue_fini(struct agent *a);
int audit_glue_check_rules(struct agent *a, const struct task_spec *s, char *err, size_t errlen);
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

/* taskstats_glue.c: the fallback meter when BPF is not loaded */
int tsglue_init(struct agent *a);
void tsglue_fini(struct agent *a);
bool tsglue_active(const struct agent *a);
void tsglue_stats(const struct agent *a, uint64_t *ret_overruns, uint64_t *ret_unmatched);

/* state.c */
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
/* Drop the oldest ended tasks (memory and ended/ files) beyond ended_keep. */
void task_prune_ended(struct agent *a);
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

bool agent_is_privileged(struct agent *a, uid_t uid, gid_t gid);
int agent_may_act_as(struct agent *a, uid_t uid, bool privileged, uid_t target_uid,
		     const char *target_name, char *err, size_t errlen);

/* scope.c */
int scope_setup(struct agent *a, const char **ret_base);
int scope_adopt_shim(struct agent *a, pid_t pid);

/* control.c */
/* Also sets a->on_task_started and on_task_ended: the replies to launches and waiters. */
int control_listen(struct agent *a);
void control_close_all(struct agent *a);
/* Closes the connections marked dead and those past their timeouts. */
void control_tick(struct agent *a, uint64_t now_mono);
