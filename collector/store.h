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
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accounting/record.h"

#define COLL_SCHEMA_VERSION 1

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
	_COLL_SUM_MAX,
};
const char *coll_sum_name(enum coll_sum s);

enum coll_rollup_table {
	COLL_ROLLUP_HOUR,      /* bucket "YYYY-MM-DDTHH", key (account, user) */
	COLL_ROLLUP_DAY,       /* bucket "YYYY-MM-DD",   key (account, user) */
	COLL_ROLLUP_LABEL_DAY, /* bucket "YYYY-MM-DD",   key (label_key, label_value, account, user)
				*/
	_COLL_ROLLUP_MAX,
};
const char *coll_rollup_table_name(enum coll_rollup_table t);

struct coll_rollup_row {
	const char *bucket;
	const char *account; /* "" when the record had none */
	const char *user;
	const char *label_key; /* label table only, else "" */
	const char *label_value;
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
};

struct coll_query {
	const char *type; /* NULL = any */
	const char *node;
	const char *task_id;
	size_t limit; /* 0 = no limit */
};

typedef int (*coll_row_fn)(const struct coll_row *row, void *userdata);
typedef int (*coll_rollup_fn)(const struct coll_rollup_row *row, void *userdata);

struct coll_store;

struct coll_store_ops {
	const char *name;
	/* Opens the database and runs the migrations up to COLL_SCHEMA_VERSION. */
	int (*open)(const char *uri, struct coll_store **ret, char *err, size_t errlen);
	void (*close)(struct coll_store *s);
	/* One transaction: every item inserted or found duplicate, rollups updated, COMMIT. */
	int (*insert_batch)(struct coll_store *s, struct coll_item *items, size_t n);
	int (*query)(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud);
	/* Rows of one rollup table with from <= bucket < to (NULL = open), ordered by key. */
	int (*rollup_query)(struct coll_store *s, enum coll_rollup_table t, const char *from,
			    const char *to, coll_rollup_fn fn, void *ud);
	int (*count)(struct coll_store *s, uint64_t *ret);
	int (*ping)(struct coll_store *s);
	int (*schema_version)(struct coll_store *s, int *ret);
};

/* Common head of every backend's handle. */
struct coll_store {
	const struct coll_store_ops *ops;
	pthread_mutex_t lock;
	bool no_rollups;  /* benchmark only: skip rollup maintenance */
	char errmsg[256]; /* last backend error, for the program to log */
};

#define COLL_STORE_NO_ROLLUPS (1u << 0)

extern const struct coll_store_ops coll_store_sqlite_ops;
extern const struct coll_store_ops coll_store_pg_ops;

/* Pick the backend from the URI scheme; -EPROTONOSUPPORT (unknown scheme) or the backend's
 * error, with a message in err. */
int coll_store_open(const char *uri, unsigned flags, struct coll_store **ret, char *err,
		    size_t errlen);
void coll_store_close(struct coll_store *s);
int coll_store_insert_batch(struct coll_store *s, struct coll_item *items, size_t n);
int coll_store_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud);
int coll_store_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			    const char *to, coll_rollup_fn fn, void *ud);
int coll_store_count(struct coll_store *s, uint64_t *ret);
int coll_store_ping(struct coll_store *s);
int coll_store_schema_version(struct coll_store *s, int *ret);
const char *coll_store_errmsg(struct coll_store *s);

/* ---- shared by the backends (store.c) ---- */

/* Columns of the records table, in the order the backends bind them. */
enum coll_col_kind { COLL_COL_TEXT, COLL_COL_INT, COLL_COL_REAL, COLL_COL_JSON, COLL_COL_TIME };
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
 * lock order, so concurrent collectors on one PostgreSQL database cannot deadlock). */
struct coll_delta {
	enum coll_rollup_table table;
	char bucket[16];
	const char *account, *user, *label_key, *label_value; /* borrowed from the items */
	double v[_COLL_SUM_MAX];
};
int coll_deltas_build(const struct coll_item *items, size_t n, struct coll_delta **ret,
		      size_t *ret_n);
/* Sums one task.end record contributes (exposed for tests). */
void coll_record_sums(const struct acct_record *r, double v[_COLL_SUM_MAX]);
