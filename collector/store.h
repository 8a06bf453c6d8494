/* SPDX-License-Identifier: MIT */
/*
 * Collector storage: one interface (an ops table), two backends.
 *   sqlite:/path/to/file.db     embedded default (WAL, one writer)
 *   postgresql://... / postgres://...   libpq, shared by several stateless collectors
 * Every function returns 0 or a negative errno. -EIO/-EAGAIN mean "database unavailable or
 * busy, retry later" (the server answers 503). Library code: nothing is printed.
 * The store handle is safe to use from several threads (calls are serialised per handle).
 */
#pragma once

#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accounting/record.h"

#define COLL_SCHEMA_VERSION 15

/* One record of an ingest batch: the decoded record plus the exact JSON line received. */
struct coll_item {
	const struct acct_record *rec;
	const char *json;
	size_t json_len;
	bool is_new; /* out: true if this call stored it, false if it was already there */
};

/* Rollup sums (see docs/collector.md "Rollups"). All stored as doubles. */
enum coll_sum {
	COLL_SUM_TASKS,
	COLL_SUM_FAILED_TASKS,
	COLL_SUM_WALL_S,
	COLL_SUM_CPU_S,
	COLL_SUM_CPU_REQ_CORE_S,
	COLL_SUM_CPU_CHARGED_CORE_S,
	COLL_SUM_MEM_BYTE_S,
	COLL_SUM_MEM_REQ_BYTE_S,
	COLL_SUM_MEM_CHARGED_BYTE_S,
	COLL_SUM_GPU_S,
	COLL_SUM_GPU_REQ_S,
	COLL_SUM_GPU_CHARGED_S,
	COLL_SUM_IO_READ_BYTES,
	COLL_SUM_IO_WRITE_BYTES,
	COLL_SUM_NET_RX_BYTES,
	COLL_SUM_NET_TX_BYTES,
	COLL_SUM_OOM_KILLED, /* tasks that ended with exit.status oom_killed */
	COLL_SUM_TIME_LIMIT, /* ... time_limit */
	COLL_SUM_CPU_TIME_LIMIT,
	COLL_SUM_GPU_MEMORY_LIMIT,
	COLL_SUM_NO_REQUEST_TASKS, /* tasks that requested no CPUs or no memory (schema v6):
				    * their charged reservation of it is what they used */
	/* tasks that ran on this day and on into the next one: started on or before it, last
	 * running instant after it (schema v8). Not additive over days: a report takes it from
	 * the last day of a period only (tasks active in a period = tasks ended in it + those
	 * carried past its last day + running ones). rollup_job_month keeps the month's last
	 * day's. */
	COLL_SUM_CARRIED_TASKS,
	/* usage.energy_j of the tasks, J, spread over their hours like the other quantities
	 * (schema v11): the measured parts only; node rows: the node's unattributed package and
	 * DRAM energy and its GPUs' energy (coll_node_sums) */
	COLL_SUM_ENERGY_CPU_J,
	COLL_SUM_ENERGY_DRAM_J,
	COLL_SUM_ENERGY_GPU_J,
	/* tasks whose record has a part of usage.energy_j not measured, or none at all (an agent
	 * before it): their energy is missing from the sums above (schema v11) */
	COLL_SUM_ENERGY_UNMEASURED_TASKS,
	_COLL_SUM_MAX,
};
const char *coll_sum_name(enum coll_sum s);
/* Counts (tasks, failed, kills) go wholly to the bucket of the task's end (the carried count
 * to each day before it); every other sum is a quantity, spread over the hours the task ran. */
bool coll_sum_is_count(enum coll_sum s);
/* The same as a mask (bit s: coll_sum_is_count(s); test_collector compares them). */
#define COLL_SUMS_COUNT                                                                            \
	(1u << COLL_SUM_TASKS | 1u << COLL_SUM_FAILED_TASKS | 1u << COLL_SUM_OOM_KILLED |          \
	 1u << COLL_SUM_TIME_LIMIT | 1u << COLL_SUM_CPU_TIME_LIMIT |                               \
	 1u << COLL_SUM_GPU_MEMORY_LIMIT | 1u << COLL_SUM_NO_REQUEST_TASKS |                       \
	 1u << COLL_SUM_CARRIED_TASKS | 1u << COLL_SUM_ENERGY_UNMEASURED_TASKS)
/* The UTC day (YYYY-MM-DD) of hour (hours since the epoch, years up to 2554). */
void coll_day_of_hour(uint64_t hour, char out[16]);
/* What a node.sample adds to rollup_node_day over its whole period (see COLL_ROLLUP_NODE_DAY). */
void coll_node_sums(const struct acct_record *r, double v[_COLL_SUM_MAX]);
#define COLL_NODE_CLASS_KEY "price_class"

enum coll_rollup_table {
	/* rollup_hour (bucket "YYYY-MM-DDTHH", key (account, user)) until schema v4: never read,
	 * three quarters of the rollup rows written */
	COLL_ROLLUP_DAY,       /* bucket "YYYY-MM-DD",   key (account, user) */
	COLL_ROLLUP_LABEL_DAY, /* bucket "YYYY-MM-DD",   key (label_key, label_value, account, user)
				*/
	COLL_ROLLUP_JOB_DAY,   /* bucket "YYYY-MM-DD",   key (account, user, job, node) */
	COLL_ROLLUP_JOB_LABEL_DAY, /* bucket "YYYY-MM-DD", key (label_key, label_value, account,
				    * user, job, node): labels per job and node (schema v3) */
	COLL_ROLLUP_JOB_MONTH,	   /* bucket "YYYY-MM", key (account, user, job, node): the
				    * job_day rows summed per UTC month (schema v3) */
	/* bucket "YYYY-MM-DD", key (node, label_key, label_value): node.sample records (schema
	 * v9), label_key "price_class" and label_value the node's class ("" for none). The sums
	 * take node meanings (coll_node_sums): tasks = records, wall_s = seconds covered,
	 * cpu_charged_core_s / mem_charged_byte_s / gpu_charged_s = capacity,
	 * cpu_req_core_s / mem_req_byte_s / gpu_req_s = allocated, cpu_s / mem_byte_s = used,
	 * energy_cpu_j / energy_dram_j = unattributed package / DRAM energy, energy_gpu_j = the
	 * GPUs' energy (schema v11), gpu_s = the GPUs' unattributed energy, J (node.sample
	 * energy.unattributed_gpu_j; 0 for records without it: no column added) */
	COLL_ROLLUP_NODE_DAY,
	/* bucket "YYYY-MM-DD", key (node): the job_day rows summed per node (schema v10), the
	 * tasks' allocation of each node and day that the capacity report reads (not the
	 * job_day rows) */
	COLL_ROLLUP_NODE_ALLOC_DAY,
	COLL_ROLLUP_OPEN, /* no bucket: latest sample of each running task, key (node, task_id);
			   * read with coll_store_open_query() */
	_COLL_ROLLUP_MAX,
};
const char *coll_rollup_table_name(enum coll_rollup_table t);

/* Key columns of the rollup tables, in primary key order (after bucket). */
enum coll_key {
	COLL_KEY_ACCOUNT,
	COLL_KEY_USER,
	COLL_KEY_LABEL_KEY,
	COLL_KEY_LABEL_VALUE,
	COLL_KEY_JOB,
	COLL_KEY_NODE,
	COLL_KEY_TASK_ID,
	_COLL_KEY_MAX,
};
#define COLL_ROLLUP_KEYS_MAX 6
struct coll_rollup_def {
	const char *name;
	size_t n_keys;
	enum coll_key keys[COLL_ROLLUP_KEYS_MAX];
};
extern const struct coll_rollup_def coll_rollup_defs[_COLL_ROLLUP_MAX];
/* Inline: the billing split's sort and hash call it for every delta. */
static inline const struct coll_rollup_def *coll_rollup_def(enum coll_rollup_table t)
{
	return (unsigned)t < _COLL_ROLLUP_MAX ? &coll_rollup_defs[t] : NULL;
}
const char *coll_key_column(enum coll_key k); /* quoted where needed ("user") */

/* Spread of a task over time: its interval is [end - wall, end], clipped to this much. */
#define COLL_SPREAD_MAX_S (31ULL * 86400)
/* Most rollup deltas one batch may produce before merging (-E2BIG beyond). */
#define COLL_DELTAS_MAX (2u << 20)

struct coll_rollup_row {
	const char *bucket;
	const char *account; /* "" when the record had none */
	const char *user;
	const char *label_key; /* label tables only, else "" */
	const char *label_value;
	const char *job; /* job tables only, else "" */
	const char *node;
	double v[_COLL_SUM_MAX];
};

/* A running task: its latest task.sample (sums as coll_record_sums() with the counts zeroed),
 * only while no task.end of it is stored. */
struct coll_open_row {
	const char *node, *task_id, *account, *user, *job;
	const char *labels; /* JSON object text */
	uint64_t start_ns;  /* sample time - wall */
	uint64_t sample_ns;
	double v[_COLL_SUM_MAX];
};

/* Stored record as read back. Strings valid during the callback only. */
struct coll_row {
	const char *record_id;
	const char *type;
	const char *time; /* RFC 3339 */
	const char *node;
	const char *task_id;
	const char *account;
	const char *user;
	const char *body; /* the JSON line as received */
	uint64_t time_ns;
};

/* Which record types a query returns besides the type filter. */
enum coll_query_audit {
	COLL_QUERY_ANY_TYPE,
	COLL_QUERY_AUDIT_ONLY, /* audit.* records */
	COLL_QUERY_NO_AUDIT,   /* everything but audit.* records */
};

/* Every filter is optional (NULL / 0 = any); rows come in (time_ns, record_id) order. */
struct coll_query {
	const char *type; /* NULL = any */
	const char *node;
	const char *task_id;
	const char *job;
	const char *user;
	uint64_t from_ns, to_ns; /* from_ns <= time_ns < to_ns; 0 = open */
	enum coll_query_audit audit;
	const char *hash; /* audit records whose "hash" member is this (indexed) */
	/* keyset cursor: only rows after (after_time_ns, after_id); after_id NULL = from start */
	uint64_t after_time_ns;
	const char *after_id;
	size_t limit; /* 0 = no limit */
};

/* A hash chain break flagged at ingest (table audit_breaks). Strings valid during calls. */
struct coll_audit_break {
	const char *record_id; /* the record that does not chain (unique in the table) */
	const char *node;
	const char *kind;     /* "hash", "link" or "restart" (collector/audit_chain.h) */
	const char *reason;   /* human-readable, names the records involved */
	const char *detected; /* RFC 3339 time the collector flagged it */
};

/*
 * A record id received again with another body (table conflicts, schema v7): never stored as
 * the record, never answered "duplicate". Strings valid during calls.
 */
struct coll_conflict {
	const char *record_id;
	const char *node;
	const char *detected;	     /* RFC 3339 time the collector saw it */
	const char *stored_body;     /* the body stored under that id */
	const char *received_body;   /* the other body */
	const char *received_sha256; /* hex SHA-256 of received_body (one row per body) */
};

typedef int (*coll_row_fn)(const struct coll_row *row, void *userdata);
typedef int (*coll_rollup_fn)(const struct coll_rollup_row *row, void *userdata);
typedef int (*coll_open_fn)(const struct coll_open_row *row, void *userdata);
typedef int (*coll_break_fn)(const struct coll_audit_break *b, void *userdata);
typedef int (*coll_conflict_fn)(const struct coll_conflict *c, void *userdata);
/* A row of a query's text columns (NULL for SQL NULL). */
typedef int (*coll_text_fn)(const char *const *cols, int ncols, void *userdata);

/* The node-days of one key of rollup_node_cap_day (bucket a day, node "") or
 * rollup_node_cap_month (bucket a month "YYYY-MM"): node.sample rollups with the same
 * capacity, counted, maintained from rollup_node_day by triggers (schema v12). */
struct coll_node_cap_row {
	const char *bucket, *node, *label_value;
	double cpu_cap, mem_cap, gpu_cap; /* one node-day's cpu/mem/gpu_charged sums */
	int64_t units;			  /* node-days (rows of rollup_node_day) */
	double tasks, wall_s, cpu_s;	  /* their sums */
};
typedef int (*coll_node_cap_fn)(const struct coll_node_cap_row *row, void *userdata);

/* One day of rollup_node_energy_day (schema v13): the nodes' unattributed energy of the day,
 * the sum over its rows of rollup_node_day, each row's energy_cpu_j, energy_dram_j and gpu_s
 * (the GPUs' unattributed energy) rounded to integer millijoules, kept by the same triggers. */
struct coll_node_energy_row {
	const char *bucket;
	int64_t rows;  /* node rows of the day */
	int64_t mj[3]; /* package, DRAM, GPU: mJ */
};
typedef int (*coll_node_energy_fn)(const struct coll_node_energy_row *row, void *userdata);

/*
 * The backends' row loops hand each row of a query as text columns (valid during the call) to
 * a coll_text_row_fn. Conflicts and breaks are selected in the column order below and turned
 * into their structs by one function each; sink is a struct coll_text_sink.
 */
typedef int (*coll_text_row_fn)(const char *const *cols, void *sink);
#define COLL_CONFLICT_COLUMNS                                                                      \
	"record_id, node, detected, stored_body, received_body, received_sha256"
#define COLL_CONFLICT_NCOLS 6
#define COLL_BREAK_COLUMNS  "record_id, node, kind, reason, detected"
#define COLL_BREAK_NCOLS    5
struct coll_text_sink {
	coll_conflict_fn conflict;
	coll_break_fn brk;
	void *userdata;
};
int coll_conflict_from_text(const char *const *cols, void *sink);
int coll_break_from_text(const char *const *cols, void *sink);

struct coll_store;
struct coll_deltas;

struct coll_store_ops {
	const char *name; /* for messages only: callers choose by the capabilities below */
	/* One writer at a time: more ingest connections would only queue on its lock. */
	bool single_writer;
	/* Ingest connections of `serve` unless configured ([storage] connections). */
	unsigned default_connections;
	/* Opens the database and runs the migrations up to COLL_SCHEMA_VERSION; flags as
	 * coll_store_open's. */
	int (*open)(const char *uri, unsigned flags, struct coll_store **ret, char *err,
		    size_t errlen);
	void (*close)(struct coll_store *s);
	/* One transaction: every item inserted or found duplicate, rollups updated, COMMIT.
	 * pre (or NULL): the items' rollup deltas built beforehand with every item taken as
	 * new, used when every item is new (see coll_deltas_of_new). */
	int (*insert_batch)(struct coll_store *s, struct coll_item *items, size_t n,
			    const struct coll_deltas *pre);
	int (*query)(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud);
	/* Rows of one rollup table with from <= bucket < to (NULL = open), ordered by key; only
	 * the sums in the mask (bit 1 << enum coll_sum) are read, the others are 0. */
	int (*rollup_query)(struct coll_store *s, enum coll_rollup_table t, const char *from,
			    const char *to, uint32_t sums, coll_rollup_fn fn, void *ud);
	/* Rows of rollup_open whose task has no stored task.end, ordered by (node, task_id). */
	int (*open_query)(struct coll_store *s, coll_open_fn fn, void *ud);
	/* A read-only query, sql with text parameters ?1..?n (each may be NULL), its rows as
	 * text, after the queued rollup deltas are folded. */
	int (*text_query)(struct coll_store *s, const char *sql, int n, const char *const *params,
			  coll_text_fn fn, void *ud);
	/* The day (YYYY-MM-DD, UTC) of an integer column of nanoseconds, as SQL: the text
	 * before the column and after it. */
	const char *day_of_ns_sql[2];
	/* Benchmark and bulk rebuild: the rollup maintenance of insert_batch (deltas of items,
	 * taken as new, in one transaction) without storing the records. */
	int (*rollup_batch)(struct coll_store *s, struct coll_item *items, size_t n);
	/* Applies every rollup delta queued in rollup_pending (by handles that queue them, see
	 * queues_rollups) and committed so far, in one transaction. wait: wait for a fold in
	 * progress elsewhere, else -EBUSY (PostgreSQL; SQLite always waits for its writer lock).
	 * Returns the number of queued batches applied. Every backend has one. */
	int (*fold)(struct coll_store *s, bool wait);
	int (*count)(struct coll_store *s, uint64_t *ret);
	int (*ping)(struct coll_store *s);
	int (*schema_version)(struct coll_store *s, int *ret);
	/* Record a chain break; 1 if new, 0 if that record was already listed. */
	int (*break_add)(struct coll_store *s, const struct coll_audit_break *b);
	/* Listed breaks of one node (NULL = all), in detection order, at most limit (0 = all). */
	int (*break_query)(struct coll_store *s, const char *node, size_t limit, coll_break_fn fn,
			   void *ud);
	/* The stored body of record_id (malloc'd, NUL-terminated) in *ret; -ENOENT if none. */
	int (*body_get)(struct coll_store *s, const char *record_id, char **ret);
	/* Keep a conflict; 1 if new, 0 if that body was already kept for that id. */
	int (*conflict_add)(struct coll_store *s, const struct coll_conflict *c);
	/* The kept conflicts of one node, in detection order. */
	int (*conflict_query)(struct coll_store *s, const char *node, coll_conflict_fn fn,
			      void *ud);
	/* Makes every transaction committed through s so far durable. Called without the
	 * store's lock, concurrently with other calls on s. NULL where COMMIT itself is durable
	 * (PostgreSQL; SQLite handles other than ingest ones). */
	int (*sync)(struct coll_store *s);
};

/* Common head of every backend's handle. */
struct coll_store {
	const struct coll_store_ops *ops;
	pthread_mutex_t lock;
	bool no_rollups; /* benchmark only: skip rollup maintenance */
	/* insert_batch queues the bucketed rollup deltas in rollup_pending for ops->fold
	 * (PostgreSQL: every handle; SQLite: ingest handles) instead of applying them */
	bool queues_rollups;
	/* COMMIT leaves the fsync to ops->sync (SQLite ingest handles, see COLL_STORE_INGEST) */
	bool defers_sync;
	char errmsg[256]; /* last backend error, for the program to log */
	/* tasks_alive statements not applied (coll_alive_check failed), since the open */
	uint64_t alive_refused;
};

#define COLL_STORE_NO_ROLLUPS (1u << 0)
/* The handle of a long-running ingest (corral-collector serve): SQLite checkpoints its WAL
 * from a thread and connection of its own instead of in the committing writer, and its COMMIT
 * does not wait for the WAL's fsync: the caller must call coll_store_sync after each write
 * transaction, before it tells anyone that the data is stored. */
#define COLL_STORE_INGEST (1u << 1)

extern const struct coll_store_ops coll_store_sqlite_ops;
extern const struct coll_store_ops coll_store_pg_ops;

/* Pick the backend from the URI scheme; -EPROTONOSUPPORT (unknown scheme) or the backend's
 * error, with a message in err. */
int coll_store_open(const char *uri, unsigned flags, struct coll_store **ret, char *err,
		    size_t errlen);
void coll_store_close(struct coll_store *s);
int coll_store_insert_batch(struct coll_store *s, struct coll_item *items, size_t n);
/* The same with the items' deltas built beforehand (coll_deltas_build with every item taken
 * as new), outside the store's lock: the collector builds them in the request's thread, so
 * the one writer of SQLite does not. */
int coll_store_insert_batch_pre(struct coll_store *s, struct coll_item *items, size_t n,
				const struct coll_deltas *pre);
int coll_store_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud);
int coll_store_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			    const char *to, coll_rollup_fn fn, void *ud);
/* The same reading only the sums in the mask (bit 1 << enum coll_sum; the others are 0): a
 * report that needs a few of them reads a third of the columns of a large table. */
int coll_store_rollup_query_sums(struct coll_store *s, enum coll_rollup_table t, const char *from,
				 const char *to, uint32_t sums, coll_rollup_fn fn, void *ud);
#define COLL_SUMS_ALL ((1u << _COLL_SUM_MAX) - 1)
int coll_store_open_query(struct coll_store *s, coll_open_fn fn, void *ud);
/* The rows of rollup_node_cap_month (month: from and to "YYYY-MM", from <= bucket < to) or of
 * rollup_node_cap_day (from <= bucket < to), with units > 0. */
int coll_store_node_cap_query(struct coll_store *s, bool month, const char *from, const char *to,
			      coll_node_cap_fn fn, void *ud);
/* The rows of rollup_node_energy_day with from <= bucket < to (either NULL: open), by day. */
int coll_store_node_energy_query(struct coll_store *s, const char *from, const char *to,
				 coll_node_energy_fn fn, void *ud);
/* The rows of rollup_node_day with from <= bucket < to whose (day, node) has a row in
 * rollup_node_alloc_day, or a task in rollup_open that started on or before that day, or
 * whose node is one of nodes[0..n_nodes): the node-days that a capacity report prices one
 * by one, ordered by key; the sums of the mask only (as coll_store_rollup_query_sums). */
int coll_store_node_day_priced(struct coll_store *s, const char *from, const char *to,
			       const char *const *nodes, size_t n_nodes, uint32_t sums,
			       coll_rollup_fn fn, void *ud);
int coll_store_rollup_batch(struct coll_store *s, struct coll_item *items, size_t n);
/* True if insert_batch leaves rollup deltas queued for coll_store_fold (queues_rollups). */
bool coll_store_defers_rollups(const struct coll_store *s);
/* ops->fold (any handle of the database may fold); 0 where rollups are off. */
int coll_store_fold(struct coll_store *s, bool wait);
int coll_store_count(struct coll_store *s, uint64_t *ret);
int coll_store_ping(struct coll_store *s);
int coll_store_schema_version(struct coll_store *s, int *ret);
int coll_store_break_add(struct coll_store *s, const struct coll_audit_break *b);
int coll_store_body_get(struct coll_store *s, const char *record_id, char **ret);
int coll_store_conflict_add(struct coll_store *s, const struct coll_conflict *c);
int coll_store_conflict_query(struct coll_store *s, const char *node, coll_conflict_fn fn,
			      void *ud);
int coll_store_break_query(struct coll_store *s, const char *node, size_t limit, coll_break_fn fn,
			   void *ud);
const char *coll_store_errmsg(struct coll_store *s);
/* ops->sync (without the store's lock; see there); 0 where the backend has none. A failure
 * is permanent: the handle's later inserts fail too (the kernel may have dropped the pages
 * it could not write, so a later fsync would not tell). */
int coll_store_sync(struct coll_store *s);
/* Whether s leaves its commits' durability to coll_store_sync. */
bool coll_store_syncs(const struct coll_store *s);
/* The backend's capabilities (coll_store_ops). */
bool coll_store_single_writer(const struct coll_store *s);
unsigned coll_store_default_connections(const struct coll_store *s);

/* ---- shared by the backends (store.c) ---- */

/* How a backend's SQL differs where coll_query_sql writes a records query. */
struct coll_sql_dialect {
	const char *select;	/* "SELECT" the coll_row columns "FROM records WHERE" a true term */
	const char *hash_expr;	/* the body's "hash" member */
	const char *hash_guard; /* a condition that hash_expr needs, or NULL */
	char param;		/* parameter mark, followed by its number: '?' or '$' */
	const char *int_cast;	/* after an integer parameter: "" or "::bigint" */
	const char *text_cast;	/* after a text parameter in a row comparison */
	bool row_values;	/* (a, b) > (x, y) compares rows */
};
/* The schema migrations, one driver for both backends: what differs is DDL text and a few
 * operations on the backend's connection (db). */
struct coll_migration {
	void *db;
	const char *real_type, *int_type; /* rollup columns */
	const char *records_ddl;	  /* version 1 */
	const char *pending_ddl;	  /* version 5: rollup_pending (IF NOT EXISTS) */
	const char *conflicts_ddl;	  /* version 7 (IF NOT EXISTS) */
	const char *audit_ddl;		  /* every open (IF NOT EXISTS) */
	/* version 12: the triggers that keep rollup_node_cap_day/_month (the counted capacity
	 * keys), and from version 13 rollup_node_energy_day, in step with rollup_node_day; made
	 * from the statements of coll_node_cap_trigger_sql, replacing any older ones */
	int (*node_cap_triggers)(void *db);
	int (*exec)(void *db, const char *sql);
	/* max(version) of schema_version, 0 when empty */
	int (*version)(void *db, int *ret);
	/* Whether table has column; NULL where ALTER TABLE .. ADD COLUMN IF NOT EXISTS works. */
	int (*has_column)(void *db, const char *table, const char *column, bool *ret);
	/* Every rollup rebuilt from the stored records. */
	int (*rebuild_rollups)(void *db);
	/* version 15: what follows "ALTER TABLE <rollup table>" to leave room on each page of a
	 * rollup table for updated rows (PostgreSQL: a fillfactor, so that an update can stay on
	 * its page, "HOT", and write no index entry); NULL where the engine has no such thing */
	const char *rollup_room;
	char *errmsg; /* the handle's message buffer */
	size_t errlen;
};
/* Runs the migrations up to COLL_SCHEMA_VERSION in the transaction the caller began (and
 * commits or rolls back after it). */
int coll_migrate(const struct coll_migration *m);

/* A count as an SQL integer (bigint), at most INT64_MAX. */
static inline int64_t coll_clamp_i64(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}
#define COLL_QUERY_PARAMS_MAX 16
struct coll_sql_param {
	const char *s; /* NULL: the integer i */
	int64_t i;
};
/* The SELECT of coll_store_query for q in dialect d (malloc'd in *ret_sql) and its
 * parameters, to bind as 1..*ret_n. Only the filters that are set become conditions, so the
 * planner can pick an index. */
int coll_query_sql(const struct coll_sql_dialect *d, const struct coll_query *q, char **ret_sql,
		   struct coll_sql_param params[COLL_QUERY_PARAMS_MAX], int *ret_n);

/* Columns of the records table, in the order the backends bind them. */
enum coll_col_kind {
	COLL_COL_TEXT,
	COLL_COL_INT,
	COLL_COL_REAL,
	COLL_COL_JSON,	/* JSON text (PostgreSQL: JSON) */
	COLL_COL_JSONB, /* JSON text (PostgreSQL: JSONB) */
	COLL_COL_TIME,
};
struct coll_col {
	const char *name; /* already quoted where needed ("user") */
	enum coll_col_kind kind;
};
#define COLL_N_COLS 26
extern const struct coll_col coll_cols[COLL_N_COLS];

struct coll_value {
	bool null;
	const char *s; /* TEXT/JSON/TIME */
	size_t len;
	int64_t i;
	double d;
};

/* Scratch space that keeps the formatted strings of one item alive. */
struct coll_item_scratch {
	char time[32];
	char *labels; /* malloc'd JSON object */
};

int coll_item_values(const struct coll_item *it, struct coll_item_scratch *sc,
		     struct coll_value vals[COLL_N_COLS]);
void coll_item_scratch_free(struct coll_item_scratch *sc);

/* Rollup deltas of the newly inserted items, deduplicated by key and sorted by key (a fixed
 * lock order, so concurrent collectors on one PostgreSQL database cannot deadlock).
 * A task.end spreads over the hours (and days) of [end - wall, end] in proportion to the
 * overlap; its counts go to the bucket of its end. COLL_ROLLUP_OPEN deltas: a task.sample
 * sets its task's row (newest sample wins; ignored once a task.end of the task is stored), a
 * task.end (del) removes it. */
struct coll_delta {
	enum coll_rollup_table table;
	bool del; /* COLL_ROLLUP_OPEN: remove the row */
	char bucket[16];
	/* borrowed from the items; "" where the table has no such key */
	const char *account, *user, *label_key, *label_value, *job, *node, *task_id;
	const struct acct_record *rec; /* COLL_ROLLUP_OPEN set: the sample (labels) */
	uint64_t start_ns, sample_ns;  /* COLL_ROLLUP_OPEN set; touch: sample_ns */
	/*
	 * COLL_ROLLUP_OPEN touch: a running task unchanged since its task.sample at base_ns or
	 * later (node.sample tasks_unchanged): its row, when it holds that sample or a later
	 * touch of it (sample_ns >= base_ns) and is older than sample_ns, moves to sample_ns with
	 * the same usage: the wall and the requests' sums grow with the wall time, memory
	 * byte-seconds by rss_bytes over the time since, the charged sums are the larger again.
	 * Touches sort after the sets of the same table and are never merged with them.
	 */
	bool touch;
	uint64_t base_ns, rss_bytes;
	/*
	 * COLL_ROLLUP_OPEN touch of a whole node (node.sample tasks_alive; task_id ""): every
	 * row of the node whose task the node.sample at alive->since_ns listed (its rss_bytes
	 * and listed_ns kept) with no task.sample since, but those in alive->except, moves to
	 * sample_ns as a touch does, by its kept rss_bytes; when more rows would move than
	 * alive->n, or as many with another digest, none does (counted in alive_refused).
	 * Sorts after the node's other touches.
	 */
	const struct acct_node_alive *alive;
	double v[_COLL_SUM_MAX];
};
const char *coll_delta_key(const struct coll_delta *d, enum coll_key k);
/* CREATE TABLE of a rollup table with the backend's column types; its primary key columns
 * ("bucket, account, \"user\""); both malloc'd, NULL on -ENOMEM. */
char *coll_rollup_ddl(enum coll_rollup_table t, const char *real_type, const char *int_type);
char *coll_rollup_pk(enum coll_rollup_table t);
/* The statements (each ending with ';') that move one row of rollup_node_day, rec ("NEW" or
 * "OLD"), into (add) or out of rollup_node_cap_day, rollup_node_cap_month and
 * rollup_node_energy_day: a trigger's body. */
char *coll_node_cap_trigger_sql(bool add, const char *rec);
/* ops->text_query under the handle's lock. */
int coll_store_text_query(struct coll_store *s, const char *sql, int n, const char *const *params,
			  coll_text_fn fn, void *ud);
/*
 * The SET and the WHERE of the UPDATE of rollup_open for a touch (struct coll_delta): t, rss
 * and base are the SQL of the touch's sample_ns, rss_bytes and base_ns (parameters or
 * columns); the caller adds the key condition after the WHERE ("AND node = ...").
 */
void coll_open_touch_set(FILE *f, const char *t, const char *rss, const char *listed,
			 const char *real_type, const char *greatest);
void coll_open_touch_where(FILE *f, const char *t, const char *base);
/* A tasks_alive statement's rows (task ids) checked against it: 0 when they may move (no
 * more than n of them; as many: the same digest), -ESTALE when not. */
int coll_alive_check(const struct acct_node_alive *alive, const char *const *ids, size_t n);
/* The task's labels as a JSON object (sorted keys), malloc'd; NULL on -ENOMEM. */
char *coll_labels_json(const struct acct_record *r);

/* ---- the billing split (billing.c) ---- */

/* The rollup deltas of items (new ones only, by is_new), each task's usage spread over the
 * hours it ran; sorted, equal keys merged; malloc'd in *ret. */
int coll_deltas_build(const struct coll_item *items, size_t n, struct coll_delta **ret,
		      size_t *ret_n);
/* Deltas built ahead of an insert (coll_deltas_build of the items, every one taken as new). */
struct coll_deltas {
	struct coll_delta *d;
	size_t n;
};
/*
 * The deltas of k runs, each as coll_deltas_build made them (sorted, equal keys merged),
 * merged into out (room for the sum of their counts): what coll_deltas_merge of their
 * concatenation gives, in one pass. Returns the count, SIZE_MAX if k > COLL_DELTA_RUNS_MAX.
 */
#define COLL_DELTA_RUNS_MAX 64
size_t coll_deltas_merge_runs(const struct coll_deltas *runs, size_t k, struct coll_delta *out);
/*
 * The deltas of the items that insert_batch found new: pre's when there is pre and every
 * item is new (the common case: duplicates are retries), else built now. *ret points at pre's
 * or at *owned (the caller frees *owned; NULL when pre's were used).
 */
int coll_deltas_of_new(const struct coll_item *items, size_t n, const struct coll_deltas *pre,
		       const struct coll_delta **ret, size_t *ret_n, struct coll_delta **owned);
/* d[0..n) with equal keys merged (sums added, the newest sample of a task kept) and sorted by
 * table and key; the merged count. */
size_t coll_deltas_merge(struct coll_delta *d, size_t n);
/* Sets key k of d (borrowed). */
void coll_delta_set_key(struct coll_delta *d, enum coll_key k, const char *v);
/* Keeps the deltas of the tables in mask (bit 1u << table) only, in order; their new count.
 * Migrations that add tables fill them with it. */
#define COLL_ROLLUP_ALL (~0u)
size_t coll_deltas_keep(struct coll_delta *d, size_t n, unsigned mask);
/* Sums one task.end record contributes (exposed for tests). */
void coll_record_sums(const struct acct_record *r, double v[_COLL_SUM_MAX]);
/* Whether day (YYYY-MM-DD) is the last day of its month. */
bool coll_day_is_month_end(const char *day);
