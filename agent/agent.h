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
#include "accounting/uploader.h"
#include "agent/budget_types.h"
#include "agent/config.h"
#include "agent/spec.h"
#include "bpf/track.h"
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
	bool start;  /* waits for the run reply (the task is starting) ... */
	bool wait;   /* ... and then for the end (run --wait) */
	bool owner;  /* the run --wait connection: its signals are the client's (exit.by) ... */
	bool detach; /* ... and the task is not killed when it goes away */
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
	/* exit.by: who sent the signal meant to end it (ACCT_BY_CLIENT, ACCT_BY_OPERATOR), or
	 * ACCT_BY_NONE; see agent/control.c */
	enum acct_exit_by end_by;
	/* The run --wait client went away (agent/control.c): SIGTERM sent at client_term_mono
	 * (or due once the task runs: client_gone), SIGKILL after kill_grace. */
	bool client_gone, client_term_sent, client_kill_sent;
	uint64_t client_term_mono;
	uint64_t limit_value, limit_observed; /* for audit.limit */
	/* Kernel OOM kills in the task's cgroup: the latest count read, and how many of them an
	 * audit.limit record has reported. */
	uint64_t oom_kills, oom_kills_reported;
	/* --cpu-time: a timerfd armed from the remaining budget divided by the CPUs the task can
	 * use, so the check comes when the budget can first be spent (not only at the tick). */
	int cpu_timer_fd;
	bool have_cpu_timer;
	/* OOM kills reported as they happen (task.c, oom_watch_start): v1, an eventfd on the
	 * memory cgroup's OOM notification; v2, a watch of memory.events in
	 * agent.oom_inotify_fd. oom_recheck_until: after an event whose kill count had not
	 * moved yet, it is read again until then (0: none pending). */
	int oom_fd;
	bool have_oom_fd;
	int oom_wd;
	bool have_oom_wd;
	uint64_t oom_recheck_until;
	/* OOM victims the meter's BPF program named since the last oom_kill record
	 * (METER_EV_OOM_VICTIM): how many, and the first TASK_OOM_PIDS of their pids. */
	uint32_t oom_victims_seen;
#define TASK_OOM_PIDS 8
	uint32_t oom_victim_pids[TASK_OOM_PIDS];
	uint64_t cpu_check_last_usage, cpu_check_idle_ns;

	/* results */
	bool have_exit;
	struct launch_exit exit;
	enum acct_exit_status status;
	int exit_code, exit_signal;
	char *exit_message;
	struct acct_usage usage;
	enum acct_source sources[_ACCT_U_MAX];
	json_t *usage_detail;	   /* extra per-mechanism figures, owned */
	uint64_t next_sample_mono; /* UINT64_MAX: at each node.sample, unless unchanged (below) */
	/*
	 * node.sample tasks_unchanged (agent/task.c task_list_unchanged): what the meter read of
	 * the task at its latest usage read (print) and at its last spooled task.sample (mark,
	 * with that record's time); equal prints mean an unchanged usage, exactly.
	 */
	struct usage_print {
		uint64_t v[20];
	} print, mark;
	bool print_valid, mark_valid;
	uint64_t mark_time_ns;
	/* the eBPF meter's last read after its mark was taken (meter_dirty_take): the task's
	 * counters as long as the meter does not mark it again (agent/meter_ebpf.c) */
	struct usage_print ebpf_last;
	bool ebpf_last_valid;
	/*
	 * tasks_alive (agent/task.c task_list_unchanged): listed in the current anchor (the
	 * node.sample whose tasks_unchanged the statements refer to), or in the one being
	 * written (anchor_next); alive: no change and no task.sample since that listing.
	 * alive_visit: its key is in a->alive_visit (the next statement looks at it).
	 */
	bool anchor_listed, anchor_next, alive, alive_visit;
	double mem_byte_seconds_cg; /* integrated from cgroup memory.current samples */
	uint64_t last_mem_sample_mono;
	/* usage.energy_j (agent/node_sample.c): the task's CPU time and memory at the node
	 * sampler's last period boundary (or its start), its shares of the node's RAPL energy
	 * so far (uJ), and its GPUs' energy (agent/gpu_glue.c) */
	struct task_energy {
		bool based; /* cpu_ns/mem_bytes/at_mono hold a baseline */
		bool done;  /* its last share was given at its end */
		uint64_t cpu_ns, mem_bytes, at_mono;
		uint64_t cpu_uj, dram_uj;
		uint64_t pend_uj[2]; /* a share being scaled (agent/node_sample.c attribute) */
		bool gpu_valid;
		double gpu_j;
		/* its GPUs' energy given in node.sample records so far (mJ): the node's
		 * unattributed GPU energy is the rest (agent/node_sample.c) */
		uint64_t gpu_given_mj;
		/* a re-adopted task: its baseline and shares from the state file written at the
		 * agent's stop (restore_token: that stop's; restored: matched by the node
		 * sampler's saved state, agent/node_sample.c), so its energy goes on */
		uint64_t restore_token;
		bool restored;
	} energy;

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
	char *ps_exit_txt;    /* its "exit" object, for ps rows (a row parses this, not all) */
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
	char *config_trace; /* the settings in force (config_trace_end), for a reload's changes */
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
	/* The counter a live read compares to skip its walk (cg_root_cpu_usage_source), NULL:
	 * none, every live read walks; its resolution in nanoseconds. */
	const char *cpu_source;
	uint64_t cpu_source_res_ns;
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
	struct upl *upl_next; /* a reload's, waiting for upl's batch in flight (upl_swap) */
	bool upl_swap;
	char *upl_token; /* the token of upl_next, else of upl */
	/* The token files and client keys a reload replaced: still hidden from tasks (a file
	 * the agent no longer reads may still hold a secret that works) */
	char **secrets_before;
	size_t n_secrets_before;
	void *metrics; /* metrics HTTP server */
	void *gpu;     /* GPU inventory, NULL when GPU features are off */

	struct task *tasks; /* live tasks (starting, running, ending) */
	/* The same by key (agent/task_index.c task_live): key -> struct task *, a growing
	 * index; live_ix_failed: an insert found no memory, lookups walk the list. */
	struct track_index live_ix;
	bool live_ix_failed;
	uint64_t task_due_mono;	  /* task_tick walks the table from then on (0: next tick) */
	uint64_t budget_due_mono; /* the walk of the tasks' audit budgets (agent/audit_glue.c) */
	/* the tasks that walk looks at (budget_touch; prev/next NULL: not set up yet) and the
	 * walks since the last one over every live task */
	struct budget_link budget_active;
	uint32_t budget_walks;
	int oom_inotify_fd; /* v2: the tasks' memory.events watches (agent/task.c) */
	bool have_oom_inotify;
	int oom_timer_fd; /* the retries after an OOM event whose kill was not counted yet */
	bool have_oom_timer;
	int syscalls_inotify_fd; /* tasks/<id>.syscalls changes (agent/audit_glue.c), or -1 */
	/* Ended tasks kept for show/wait (up to ended_keep), oldest first: a launch never walks
	 * them (with 1000 of them each walk cost tens of microseconds in cache misses). */
	struct task *ended, *ended_tail;
	/*
	 * The same tasks by position, for ps pages (agent/task.c task_ended_at): a ring, the
	 * oldest at ended_ring_head; positions count from ended_first_pos, which grows as the
	 * oldest are dropped, so a position (ps's cursor) always names the same task. Rebuilt
	 * from the list when stale (tasks loaded at start are inserted by end time).
	 */
	struct task **ended_ring;
	size_t ended_ring_cap, ended_ring_head;
	uint64_t ended_first_pos;
	bool ended_ring_stale;
	uint32_t n_live, n_ended;
	/* The live tasks' requests summed (node.sample's alloc_*, kept as tasks join and leave
	 * a->tasks: agent/task.c): CPUs in millionths (integers: no drift), memory, GPUs. */
	int64_t live_cpus_micro;
	uint64_t live_memory_bytes;
	uint64_t live_gpus;
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
	/* Set where a task's meter state changes outside a record (its audit budget's save
	 * point, its syscall position): the next flush asks each task's meters (flushed op).
	 * Without it the flush walks no task, records written or not. */
	bool tasks_flush_due;
	/* Some task waits for its SIGKILL after its run --wait client went away: control_tick
	 * walks the tasks only then. */
	bool client_kill_due;
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
	/* tasks_alive statements (agent/task.c): the anchor's time (0: none), the tasks it
	 * listed, the node.sample records since, the last statement's except and listed count */
	uint64_t alive_anchor_ns;
	uint32_t alive_anchor_n, alive_since_anchor, alive_last_except, alive_last_listed;
	/* node.sample records since the last one whose live read had to walk (meter_walk_next) */
	uint32_t since_forced_walk;
	/* The tasks still alive (anchor_listed and alive): their number and digest, kept as
	 * tasks leave; the keys of the live tasks a statement must look at (every task not
	 * alive, and alive ones that may have changed), each task once (its alive_visit);
	 * alive_visit_lost: a key could not be stored, the next statement walks every task. */
	uint32_t alive_n;
	uint64_t alive_digest;
	uint64_t *alive_visit;
	size_t n_alive_visit, cap_alive_visit;
	bool alive_visit_lost;
	/* The eBPF meter's reads outside a change check that took a set mark (agent/meter_ebpf.c):
	 * the tasks' keys, for its changes op; ebpf_noted_lost: one could not be stored. */
	uint64_t *ebpf_noted;
	size_t n_ebpf_noted, cap_ebpf_noted;
	bool ebpf_noted_lost;
	/* The change checks of node.sample records so far, by kind (/metrics): a listing of
	 * every task (an anchor), a statement from the visit list, a statement asking every task
	 * (the visit list or the noted marks could not be kept whole). */
	uint64_t checks_listing, checks_visits, checks_every_task;
	uint64_t energy_save_token; /* at stop: task_save writes the tasks' energy with it */
	/* The control API's answers to a launch and to the waiters of a task (agent/control.c
	 * sets them): the task table calls them and never control.c itself. NULL: none. */
	void (*on_task_started)(struct agent *a, struct task *t, const char *err);
	void (*on_task_ended)(struct agent *a, struct task *t);
	/* what was logged last (agent/hooks.c: the uploader's error and failovers; audit_glue.c:
	 * the node's addresses the network policy cannot track) */
	char upl_logged_err[UPL_ERROR_MAX];
	uint64_t upl_logged_failovers;
	size_t audit_addrs_dropped;
	/* from the spool at start, until the tasks are re-adopted (agent/adopt.c) */
	struct spooled_seq *spooled;
	size_t n_spooled, cap_spooled;
};
