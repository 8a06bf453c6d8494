/* SPDX-License-Identifier: MIT */
/* corrald configuration: INI file (inih), then command-line flags override it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum metrics_tasks {
	METRICS_TASKS_OFF,     /* node-wide series only (default) */
	METRICS_TASKS_ACCOUNT, /* running tasks summed per account: account names, nothing else */
	METRICS_TASKS_TASK,    /* one series per running task: task, user, account, job labels */
};

enum bpf_mode {
	BPF_MODE_AUTO,
	BPF_MODE_OFF,
	BPF_MODE_RAW_TP,
};

/* Control socket connections: at most CONTROL_CONN_MAX, of which the last
 * CONTROL_CONN_RESERVED only root and the agent's group may take (agent/control.c). */
#define CONTROL_CONN_MAX      256
#define CONTROL_CONN_RESERVED 16
/* of the reserved: a member of the group takes one only while it holds fewer than
 * CONTROL_CONN_RESERVED_PER_MEMBER connections, and the last CONTROL_CONN_ROOT_ONLY are root's */
#define CONTROL_CONN_RESERVED_PER_MEMBER 2
#define CONTROL_CONN_ROOT_ONLY		 4
#define CONTROL_CONN_PER_UID_MAX	 240

#define COLLECTOR_URLS_MAX 16 /* [collector] url / urls */

/* audit.syscall records per task at most: the default of [audit] syscalls_max. */
#define AUDIT_SYSCALLS_MAX 1000
/* [agent] unchanged_list_max: the default and most (a record is at most 256 KiB) */
#define CONFIG_UNCHANGED_LIST_MAX (192 * 1024)

struct agent_config {
	/* [agent] */
	char *node;
	char *socket_path;
	char *socket_group;   /* may connect to the socket (besides root); NULL/"": root only */
	uint32_t socket_mode; /* permission bits of the socket (default 0660) */
	char *state_dir;
	/* live-task files (tasks/, ended/): need to survive an agent restart, not a reboot;
	 * NULL: state_dir. A tmpfs (/run/corral) makes them cheap. agent_runtime_dir() */
	char *runtime_dir;
	char *allowed_group; /* members may run tasks as any allowed user */
	char *allowed_users; /* "*" or comma list of target users for privileged submitters */
	bool allow_root_tasks;
	/* run --wait inside a Slurm job: its SLURM_JOB_ID, _ACCOUNT, _USER, _PARTITION (sent by
	 * corralctl) become the task's job, account and labels unless given (agent/control.c) */
	bool slurm_job;
	uint32_t max_tasks;
	uint64_t reserve_memory;
	double reserve_cpus;
	uint64_t kill_grace_ns;
	uint64_t sample_interval_ns;
	/* A running task unchanged since its last task.sample (the BPF meter saw nothing) is
	 * listed in the node.sample instead of getting a task.sample (docs/pipeline.md) */
	bool sample_unchanged_listed;
	/* ... and once listed, covered by the node.sample's one tasks_alive statement until it
	 * changes (sample_unchanged = stated, the default) */
	bool sample_unchanged_stated;
	/* Bytes of tasks_unchanged entries one node.sample may carry (a statement's record: a
	 * quarter); the unchanged tasks past it get task.sample records */
	uint64_t unchanged_list_max;
	/* [node] (agent/node_sample.c): the node's price class and labels ("k=v,k=v", checked),
	 * carried by its node.sample records; NULL: none */
	char *node_price_class;
	char *node_labels;
	/* [energy] powercap sysfs root of the RAPL zones (agent/energy.h); NULL: the default */
	char *energy_powercap_root;
	char *cgroup_subtree;
	char *seccomp_default;
	char *seccomp_dir;
	char *log_level;
	uint32_t ended_keep; /* ended tasks kept for show/wait */
	/* [metering] */
	enum bpf_mode bpf;
	bool taskstats; /* fallback meter when BPF is not loaded */
	/* CPU and IO folded at every sched_switch instead of at each thread's exit and last
	 * switch-out (the default: nothing on the context-switch path) */
	bool cpu_at_switch;
	/* [audit] */
	bool audit;
	uint32_t audit_argv_max;
	uint32_t audit_syscalls_max; /* audit.syscall records per task; beyond: counted */
	bool net_default_deny;
	/* per-task record budget (agent/budget.c): audit records past it are summarized */
	uint64_t audit_task_rate;  /* records/s, 0 = no rate bound */
	uint64_t audit_task_burst; /* token bucket depth */
	uint64_t audit_task_bytes; /* audit bytes per task, 0 = no byte bound */
	uint64_t
	    audit_task_rate_max; /* the most a non-privileged client may ask (limits.audit_rate) */
	uint64_t audit_task_bytes_max;	    /* ... limits.audit_bytes */
	uint64_t audit_summary_interval_ns; /* audit.summary period while over budget */
	uint32_t audit_summary_sample;	    /* events kept whole in each summary */
	/* [sandbox] defaults of each task's sandbox (docs/sandbox.md) */
	bool sandbox_mount_ns;	     /* own mount namespace: /sys read-only, agent files hidden */
	bool sandbox_private_tmp;    /* private /tmp and /dev/shm (tmpfs) */
	char *sandbox_tmp_size;	     /* tmpfs size= option: bytes with K/M/G/T or N% of RAM */
	bool sandbox_protect_system; /* /usr, /etc, /boot read-only */
	bool sandbox_ipc_ns, sandbox_uts_ns, sandbox_pid_ns;
	bool sandbox_landlock;	  /* protected paths also by Landlock rules (inode, any path) */
	bool sandbox_private_dev; /* a private /dev: the usual nodes, the task's GPUs, dev_paths */
	char *sandbox_dev_paths;  /* more names under /dev for it, space-separated */
	/* [metrics] */
	char *metrics_listen;	    /* ADDR:PORT or PORT (= 127.0.0.1:PORT); NULL: off */
	int metrics_tasks;	    /* METRICS_TASKS_*: per-task series (privacy, see docs) */
	uint32_t metrics_max_conns; /* concurrent connections */
	uint32_t metrics_tasks_max; /* tasks (tasks = task) or accounts (account) with series */
	uint32_t metrics_timeout_s; /* idle connection timeout */
	/* [collector] */
	/* collector base URLs, space-separated, in order of preference (several `url` lines
	 * add to the list, `urls` sets it whole); the uploader sticks to one and fails over */
	char *collector_url;
	char *token_file;
	char *ca_file;
	char *pin;
	char *client_cert; /* TLS client certificate (PEM) and its key, for tls_client_ca */
	char *client_key;
	uint32_t failover_after; /* failures in a row before the next URL */
	uint64_t failback_ns;	 /* back to the first URL after this (jittered) */
	/* [collector] connect_timeout, request_timeout: of one upload */
	uint64_t upload_connect_timeout_ns, upload_timeout_ns;
	uint32_t batch_records;
	uint64_t batch_delay_ns;
	bool upload_zstd; /* compress = zstd: bodies compressed once the collector takes it */
	/* [spool] */
	uint64_t spool_max_bytes;
	uint64_t spool_billing_reserve; /* only task.start/task.end may use it; 0 = max/10 */
	uint64_t spool_damaged_max;	/* bytes of spool/damaged/ copies; 0 = 64 MiB */
	bool spool_compress;		/* entries compressed one by one (zstd, dictionary) */
	/* [control] (agent/control.c) */
	uint32_t conn_per_uid;	     /* connections one non-root uid may hold */
	uint64_t idle_timeout_ns;    /* nothing asked, nothing owed: closed after this */
	uint64_t request_timeout_ns; /* a request line must be complete within this */
	uint64_t send_timeout_ns;    /* replies not read for this long: closed */
};

void config_init_defaults(struct agent_config *c);

void config_free(struct agent_config *c);
/*
 * Load an INI file over the current values. Missing file: -ENOENT (callers decide whether the
 * default path may be absent). Bad key/value: -EINVAL with "file:line: [section] key: problem";
 * a key set twice in one section: -EINVAL naming both lines.
 */
int config_load(struct agent_config *c, const char *path, char *err, size_t errlen);
/* Set one key ("section.key" or "key" for [agent]) from a flag; same validation. */
int config_set(struct agent_config *c, const char *section, const char *key, const char *value,
	       char *err, size_t errlen);
/*
 * Check the files the configuration names before anything is set up: the token file is
 * readable, not empty and a secret only its owner (this user or root) can read or write, the CA
 * file and the client certificate and key readable, the state, runtime and profile directories
 * directories (or absent: they are created), the default seccomp profile found and compiled.
 * Returns 0 or a negative errno with err = "[section] key PATH: problem".
 */
int config_check_files(const struct agent_config *c, char *err, size_t errlen);
/*
 * The token in path ([collector] token_file), trailing newlines and blanks cut: refused when
 * it is not a regular file, over 4096 bytes, empty, or a secret others may reach
 * (secret_fd_check). *ret is NUL-terminated; the caller clears and frees it.
 */
int config_read_token(const char *path, char **ret, size_t *ret_len, char *err, size_t errlen);
/* The node's TLS client key at path ([collector] client_key): a regular file and a secret only
 * its owner (this user or root) can read or write (secret_fd_check). */
int config_check_key(const char *path, char *err, size_t errlen);
/*
 * What a reload changes. Between config_trace_begin and config_trace_end every setting
 * config_set applies (the file's and the flags') is noted as "[section] key = value"; _end
 * returns the lines (free them), NULL if none were noted or on a lack of memory.
 * config_trace_diff: the keys whose values differ between two such traces, as
 * "[section] key" lists ("" when none): those named in live ("section.key", NULL-terminated)
 * in ret_live, the others in ret_restart (truncated to their lengths).
 */
int config_trace_begin(void);
char *config_trace_end(void);
void config_trace_diff(const char *old, const char *new, const char *const *live, char *ret_live,
		       size_t live_len, char *ret_restart, size_t restart_len);
/* "section.key" of the keys that may be set on several lines (a list), NULL-terminated. */
extern const char *const config_repeatable_keys[];
