/* SPDX-License-Identifier: MIT */
/*
 * Record model, schema "corral.record/v1" (see README "Record reference").
 * One struct for every record type; fields that do not apply stay zero/NULL.
 * The JSON codec (record.c) is the only wire format; these structs are not.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define ACCT_SCHEMA "corral.record/v1"
/* The schema of a node.sample that carries tasks_alive (docs/pipeline.md "Unchanged running
 * tasks"); every other record, and a node.sample without it, stays v1. Both are decoded. */
#define ACCT_SCHEMA_V2	      "corral.record/v2"
#define ACCT_ID_MAX	      128
#define ACCT_NAME_MAX	      256
#define ACCT_LABELS_MAX	      64
#define ACCT_RECORD_MAX_BYTES (256 * 1024)
#define ACCT_HASH_HEX	      65 /* sha256 hex + NUL */

enum acct_type {
	ACCT_TASK_START,
	ACCT_TASK_SAMPLE,
	ACCT_TASK_END,
	ACCT_AUDIT_EXEC,
	ACCT_AUDIT_CONNECT,
	ACCT_AUDIT_SYSCALL,
	ACCT_AUDIT_LIMIT,
	ACCT_AUDIT_LOST,
	ACCT_AUDIT_SUMMARY, /* events past a task's record budget, counted (agent/budget.h) */
	ACCT_AUDIT_GAP,	    /* records the spool could not take, shed by policy */
	ACCT_NODE_SAMPLE,   /* the node's capacity, allocation and use (no task) */
	_ACCT_TYPE_MAX,
	_ACCT_TYPE_INVALID = -1,
};

enum acct_exit_status {
	ACCT_EXIT_NONE, /* not ended (start/sample records) */
	ACCT_EXIT_EXITED,
	ACCT_EXIT_SIGNALED,
	ACCT_EXIT_OOM_KILLED,
	ACCT_EXIT_TIME_LIMIT,
	ACCT_EXIT_CPU_TIME_LIMIT,
	ACCT_EXIT_GPU_MEMORY_LIMIT,
	ACCT_EXIT_SECCOMP_KILLED,
	ACCT_EXIT_LAUNCH_FAILED,
	ACCT_EXIT_LOST,
	_ACCT_EXIT_MAX,
	_ACCT_EXIT_INVALID = -1,
};

/* Who ended a task (exit.by, docs/pipeline.md). */
enum acct_exit_by {
	ACCT_BY_NONE,	  /* not said (records of older agents; lost tasks) */
	ACCT_BY_TASK,	  /* it ended on its own */
	ACCT_BY_LIMIT,	  /* the agent or the kernel enforced a limit or the sandbox */
	ACCT_BY_CLIENT,	  /* the run --wait client: a forwarded signal, or it went away */
	ACCT_BY_OPERATOR, /* corralctl kill (any other control connection) */
	_ACCT_BY_MAX,
	_ACCT_BY_INVALID = -1,
};

/* Which mechanism measured a usage field. */
enum acct_source {
	ACCT_SRC_NONE,
	ACCT_SRC_EBPF,
	ACCT_SRC_CGROUP,
	ACCT_SRC_TASKSTATS,
	ACCT_SRC_NVML,
	ACCT_SRC_AGENT, /* wall clock kept by the agent */
	_ACCT_SRC_MAX,
	_ACCT_SRC_INVALID = -1,
};

enum acct_usage_field {
	ACCT_U_WALL_NS,
	ACCT_U_CPU_USER_NS,
	ACCT_U_CPU_SYSTEM_NS,
	ACCT_U_MEMORY_PEAK_BYTES,
	ACCT_U_MEMORY_BYTE_SECONDS,
	ACCT_U_IO_READ_BYTES,
	ACCT_U_IO_WRITE_BYTES,
	ACCT_U_NET_RX_BYTES,
	ACCT_U_NET_TX_BYTES,
	ACCT_U_GPU_SECONDS,
	ACCT_U_GPU_MEMORY_PEAK_BYTES,
	ACCT_U_GPU_UTIL_AVG,
	_ACCT_U_MAX,
};

struct acct_label {
	char *key;
	char *value;
};

struct acct_task {
	char id[ACCT_ID_MAX];
	char *job;
	char *user;
	uint32_t uid;
	char *account;
	size_t n_labels;
	struct acct_label *labels;
};

struct acct_request {
	double cpus; /* 0 = unlimited */
	uint64_t memory_bytes;
	uint64_t pids;
	uint32_t gpus;
	uint64_t time_limit_s;
	uint64_t cpu_time_limit_s;
	uint64_t gpu_memory_bytes;
};

/* usage.energy_j (docs/pipeline.md, docs/reports.md "Energy"): the task's share of the node's
 * measured energy, J, per part, each with where it came from. */
enum acct_energy_part { ACCT_ENERGY_CPU, ACCT_ENERGY_DRAM, ACCT_ENERGY_GPU, _ACCT_ENERGY_MAX };
enum acct_energy_src {
	ACCT_ESRC_NOT_MEASURED, /* no source on this node (or none yet): the figure is absent */
	ACCT_ESRC_RAPL,		/* the node's RAPL zones, attributed (cpu, dram) */
	ACCT_ESRC_NVML,		/* the allocated GPUs' NVML energy counters (gpu) */
	ACCT_ESRC_NONE,		/* nothing to measure: the task has no GPU (gpu is 0) */
	_ACCT_ESRC_MAX,
	_ACCT_ESRC_INVALID = -1,
};
struct acct_energy {
	bool present; /* energy_j in the record (agents before it never write it) */
	double j[_ACCT_ENERGY_MAX];
	enum acct_energy_src src[_ACCT_ENERGY_MAX];
};
const char *acct_energy_src_to_string(enum acct_energy_src s);
const char *acct_energy_part_name(enum acct_energy_part p);
/* The sum of the measured parts; false (and 0) when a part is not measured. */
bool acct_energy_total(const struct acct_energy *e, double *ret);

struct acct_usage {
	uint64_t wall_ns;
	uint64_t cpu_user_ns;
	uint64_t cpu_system_ns;
	uint64_t memory_peak_bytes;
	double memory_byte_seconds;
	uint64_t io_read_bytes;
	uint64_t io_write_bytes;
	uint64_t net_rx_bytes;
	uint64_t net_tx_bytes;
	double gpu_seconds;
	uint64_t gpu_memory_peak_bytes;
	double gpu_util_avg;
	struct acct_energy energy; /* usage.energy_j */
};

struct acct_exit {
	enum acct_exit_status status;
	int code;      /* exit code for "exited", else 0 */
	int signal;    /* terminating signal, else 0 */
	char *message; /* optional human detail ("exec ./job: No such file or directory") */
	/* Kernel OOM kills inside the task (any of its processes, main or not); encoded when
	 * non-zero. A task whose main process survived them keeps its own status and code. */
	uint64_t oom_kills;
	enum acct_exit_by by; /* encoded unless ACCT_BY_NONE */
};

#define ACCT_NODE_GPU_MODELS_MAX 64
/* node.sample tasks_unchanged: at most this many entries (the record's size bounds it too) */
#define ACCT_NODE_UNCHANGED_MAX 16384

/*
 * A running task whose usage has not changed since its last task.sample (node.sample
 * tasks_unchanged): the collector takes it as a sample of the same usage at the node.sample's
 * time, its memory byte-seconds grown by rss_bytes over the time since (docs/pipeline.md).
 */
struct acct_task_unchanged {
	char *id;
	uint64_t age_ms;    /* ms from its last task.sample to the record's time, rounded up */
	uint64_t rss_bytes; /* memory held all that time (whole KiB, as the meter integrates) */
};

/*
 * node.sample tasks_alive (schema v2): one statement for the running tasks that the earlier
 * node.sample at since_ns listed in tasks_unchanged: all of them are alive and unchanged
 * since their last task.sample at this record's time, except those named. n counts them, digest is
 * acct_alive_digest over their ids (the collector checks the rows it would move against both:
 * docs/pipeline.md).
 */
struct acct_node_alive {
	bool present;
	uint64_t since_ns; /* the time of the node.sample that listed them */
	uint32_t n;
	uint64_t digest;
	size_t n_except;
	char **except;
};
/* The digest of a set of task ids: the XOR of a 64-bit FNV-1a hash of each (order-free, so
 * a set can be updated one id at a time); start from 0. */
uint64_t acct_alive_digest(uint64_t digest, const char *id);

/*
 * A node.sample record (docs/pipeline.md "Node records"): what the node had, what its running
 * tasks requested and what it used. period_ns is the time since the agent's previous
 * node.sample (0 for the first one after a start): the record stands for the interval
 * [time - period_ns, time], over which the capacity is taken as constant, the allocation as
 * at the record's time and used_cpu_ns as measured.
 */
struct acct_node_sample {
	uint64_t period_ns;
	char *price_class; /* [node] price_class; NULL: none ("default" in reports) */
	size_t n_labels;   /* [node] labels */
	struct acct_label *labels;
	/* capacity */
	double cap_cpus;
	uint64_t cap_memory_bytes;
	uint32_t cap_gpus;
	size_t n_gpu_models;
	char **gpu_models; /* one per GPU, in index order */
	/* allocated: the requests of the running tasks, at the record's time */
	double alloc_cpus;
	uint64_t alloc_memory_bytes;
	uint32_t alloc_gpus;
	uint32_t alloc_tasks;
	/* used: CPU time of the whole node over the period (all processes), memory in use at the
	 * record's time (MemTotal - MemAvailable) */
	uint64_t used_cpu_ns;
	uint64_t used_memory_bytes;
	/* energy over the period, J, where measured (has_*): CPU packages and DRAM from RAPL,
	 * the GPUs from NVML; the node's whole draw, none of it attributed to tasks here */
	bool has_rapl, has_gpu_energy;
	double energy_package_j, energy_dram_j, energy_gpu_j;
	/* what of package_j / dram_j no task was given (the node's other processes and idle):
	 * the tasks' shares of the period plus these are the period's energy (docs/reports.md
	 * "Energy"); has_unattributed: written (agents before it did not) */
	bool has_unattributed;
	double unattributed_package_j, unattributed_dram_j;
	/* running tasks unchanged since their last task.sample, at the record's time */
	size_t n_unchanged;
	struct acct_task_unchanged *unchanged;
	/* and the statement for those listed before (schema v2) */
	struct acct_node_alive alive;
	/* what of gpu_j no task was given: GPUs allocated to no task, and the time between tasks
	 * on a GPU (agent/node_sample.c); has_unattributed_gpu: written */
	bool has_unattributed_gpu;
	double unattributed_gpu_j;
};

struct acct_record {
	char record_id[ACCT_ID_MAX];
	enum acct_type type;
	uint64_t time_ns; /* CLOCK_REALTIME */
	char *node;
	struct acct_task task;
	struct acct_request request;
	struct acct_usage usage;
	struct acct_exit exit;
	enum acct_source sources[_ACCT_U_MAX];
	json_t *extra; /* additional top-level fields (e.g. usage_detail), owned; may be NULL */
	json_t *event; /* audit records: the event object, owned; NULL otherwise */
	struct acct_node_sample *ns; /* node.sample records: owned; NULL otherwise */
	char prev_hash[ACCT_HASH_HEX];
	char hash[ACCT_HASH_HEX];
	/* node, the task's strings and labels and exit.message live in an arena
	 * (acct_record_scan with one): acct_record_clear leaves them to it */
	bool in_arena;
};

/* Allocations freed all at once (a batch's records: acct_batch_parse_in). */
struct jarena_chunk; /* accounting/jtree.h: the allocator behind it */
struct acct_arena {
	struct jarena_chunk *chunks;
};
/* n bytes (16-byte aligned) from a; NULL on ENOMEM. */
void *acct_arena_alloc(struct acct_arena *a, size_t n);
void acct_arena_free(struct acct_arena *a);

const char *acct_type_to_string(enum acct_type t);
enum acct_type acct_type_from_string(const char *s);
const char *acct_exit_status_to_string(enum acct_exit_status s);
enum acct_exit_status acct_exit_status_from_string(const char *s);
const char *acct_exit_by_to_string(enum acct_exit_by b);
enum acct_exit_by acct_exit_by_from_string(const char *s);
const char *acct_source_to_string(enum acct_source s);
enum acct_source acct_source_from_string(const char *s);
const char *acct_usage_field_name(enum acct_usage_field f);

/* Free the contents (not the struct itself); leaves *r zeroed. */
void acct_record_clear(struct acct_record *r);
/* Deep copy. */
int acct_record_copy(struct acct_record *dst, const struct acct_record *src);
int acct_task_add_label(struct acct_task *t, const char *key, const char *value);

/*
 * Encode as compact JSON (one line, no trailing newline). *ret malloc'd. -EINVAL for a record
 * that would not decode (missing ids/node, task.end without exit status, audit record without
 * event or valid hash: call acct_record_compute_hash() first, extra shadowing a reserved
 * member), -ERANGE for a counter above 2^63-1 or a negative/non-finite number, -E2BIG beyond
 * ACCT_RECORD_MAX_BYTES.
 */
int acct_record_encode(const struct acct_record *r, char **ret, size_t *ret_len);
/* Same, as a jansson object (new reference). */
int acct_record_to_json(const struct acct_record *r, json_t **ret);
/*
 * Strict decode: duplicate keys, NUL in strings and integers beyond int64 rejected. On failure
 * returns -EINVAL (or -ENOMEM) and writes a message naming the offending field into err
 * ("usage.cpu_user_ns: expected a non-negative integer"). Task records go through
 * acct_record_scan() first; what it does not take, acct_record_decode_tree() decides.
 */
int acct_record_decode(const char *buf, size_t len, struct acct_record *ret, char *err,
		       size_t errlen);
/* The same, the fast path's strings taken from arena (which must outlive *ret). */
int acct_record_decode_in(const char *buf, size_t len, struct acct_record *ret, char *err,
			  size_t errlen, struct acct_arena *arena);
/* The tree decoder alone (accounting/jtree.h: one arena-allocated tree per record): every
 * record type, every error message. */
int acct_record_decode_tree(const char *buf, size_t len, struct acct_record *ret, char *err,
			    size_t errlen);
/*
 * The fast path (record_scan.c): a task.start/sample/end record read in one pass without a
 * tree. 0: decoded into *ret, exactly as acct_record_decode_tree() would; 1: not taken (another
 * type, an escape or non-ASCII byte in a string, any error...): the tree decoder decides;
 * -ENOMEM. Never an error message of its own. With an arena, the record's strings and labels
 * come from it (ret->in_arena; the arena must outlive the record), else from malloc.
 */
int acct_record_scan(const char *buf, size_t len, struct acct_record *ret,
		     struct acct_arena *arena);
/* The fast path's own table of usage field names (a test compares it with the codec's). */
const char *acct_scan_usage_field_name(int f);

/*
 * Audit hash chain. The canonical form is the record's JSON with sorted keys, compact
 * separators, and without the "hash" member (prev_hash included). hash = lowercase hex
 * SHA-256 of that text. An empty prev_hash is the start of a chain.
 */
int acct_record_canonical(const struct acct_record *r, char **ret, size_t *len);
/* Lowercase hex SHA-256 of buf. */
int acct_sha256_hex(const char *buf, size_t len, char out[ACCT_HASH_HEX]);
/* Sets r->hash from the canonical form. */
int acct_record_compute_hash(struct acct_record *r);
/* 0 if r->hash matches the canonical form, -EBADMSG if not. */
int acct_record_verify_hash(const struct acct_record *r);
/* True for audit.* types (records that carry event/prev_hash/hash). */
bool acct_type_is_audit(enum acct_type t);
/* A node.sample's parts (malloc'd, zeroed) on r->ns; -ENOMEM. */
int acct_record_node_sample(struct acct_record *r);
int acct_node_add_label(struct acct_node_sample *ns, const char *key, const char *value);
int acct_node_add_unchanged(struct acct_node_sample *ns, const char *id, uint64_t age_ms,
			    uint64_t rss_bytes);
int acct_node_add_gpu_model(struct acct_node_sample *ns, const char *model);
/* A task id named in tasks_alive.except (at most ACCT_NODE_UNCHANGED_MAX) */
int acct_node_add_alive_except(struct acct_node_sample *ns, const char *id);
