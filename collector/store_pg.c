/* SPDX-License-Identifier: MIT */
/*
 * PostgreSQL backend (libpq). Several stateless collectors may share one database:
 *  - a batch is COPYed into a per-connection temp table, then moved with
 *    INSERT ... SELECT ... ORDER BY record_id ON CONFLICT (record_id) DO NOTHING RETURNING
 *    record_id: the returned ids are the new records, everything else was a duplicate (also
 *    when another collector inserted the same id concurrently: the unique index makes the
 *    second inserter wait for the first one's commit, then do nothing);
 *  - rows and rollup keys are written in sorted order so two transactions always take their
 *    row locks in the same order; should PostgreSQL still report a deadlock or serialization
 *    failure, the whole transaction is retried (it is idempotent);
 *  - migrations run under a transaction-scoped advisory lock.
 * A broken connection is reset on the next call; until it comes back calls return -EIO.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "collector/pending.h"
#include "collector/pgcopy.h"
#include "collector/store.h"
#include "common/error.h"
#include "common/macro.h"

#define MIGRATION_LOCK_KEY 0x636f7272616cLL /* "corral" */
#define TX_RETRIES	   3

struct pg_store {
	struct coll_store base; /* first */
	PGconn *conn;
	bool session_ready; /* temp table + settings exist on this connection */
	unsigned prepared;  /* bit 1u << enum pg_stmt: prepared on this connection */
	/* libpq pipeline mode (pipe_begin): exec_stmt sends and does not wait; pipe_end sends the
	 * COMMIT and collects every result in one round trip */
	bool piped;
	/* the query strings of insert_once's COPY: [0] into the temp table, [1] into records */
	char *copy_sql[2];
};

/*
 * The statements every batch sends, prepared once per connection (named, PQprepare): their
 * text is fixed, so the server parses and plans them once instead of once per batch; their
 * lists travel as binary arrays (text_array), not as a VALUES list of two parameters a row
 * (which the server parsed, analysed and planned anew for every batch).
 */
enum pg_stmt {
	PG_STMT_OPEN_DEL,   /* the ended tasks' rollup_open rows */
	PG_STMT_PENDING,    /* a batch's bucketed deltas queued */
	PG_STMT_OPEN_SET,   /* the newest samples' rollup_open rows (open_set_sql) */
	PG_STMT_OPEN_TOUCH, /* tasks listed unchanged: their rows moved (open_touch_sql) */
	_PG_STMT_MAX,
};

static char *open_set_sql(void);
static char *open_touch_sql(void);

/* rollup_open's columns that a sample sets: node, task_id, account, user, job, labels,
 * start_ns, sample_ns, then the sums */
#define OPEN_SET_TEXTS 6
#define OPEN_SET_COLS  (OPEN_SET_TEXTS + 2 + _COLL_SUM_MAX)

static const struct {
	const char *name, *sql;
	char *(*build)(void); /* the text made with the column names, where sql is NULL */
	int nparams;
} pg_stmts[_PG_STMT_MAX] = {
    /* the rows are locked in the arrays' order (the deltas' sorted order) */
    [PG_STMT_OPEN_DEL] = {"corral_open_del",
			  "DELETE FROM rollup_open o USING unnest($1::text[], $2::text[])"
			  " AS v (node, task_id) WHERE o.node = v.node AND o.task_id = v.task_id",
			  .nparams = 2},
    [PG_STMT_PENDING] = {"corral_pending",
			 "INSERT INTO rollup_pending (layout, deltas) VALUES ($1::int, $2::bytea)",
			 .nparams = 2},
    [PG_STMT_OPEN_SET] = {"corral_open_set", .build = open_set_sql, .nparams = OPEN_SET_COLS},
    [PG_STMT_OPEN_TOUCH] = {"corral_open_touch", .build = open_touch_sql, .nparams = 5},
};

static void set_err(struct pg_store *st, const char *what, const PGresult *res)
{
	const char *m = res ? PQresultErrorMessage(res) : NULL;

	if (!m || !*m)
		m = PQerrorMessage(st->conn);
	snprintf(st->base.errmsg, sizeof(st->base.errmsg), "postgresql: %s: %.*s", what,
		 (int)strcspn(m, "\n"), m);
}

/* -EAGAIN for retryable transaction failures, -EIO for the rest. */
static int res_err(struct pg_store *st, const char *what, PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	int r = -EIO;

	set_err(st, what, res);
	if (state && (strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0))
		r = -EAGAIN;
	PQclear(res);
	return r;
}

static int exec_cmd(struct pg_store *st, const char *sql)
{
	PGresult *res = PQexec(st->conn, sql);
	ExecStatusType s = PQresultStatus(res);

	if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK)
		return res_err(st, sql, res);
	PQclear(res);
	return 0;
}

/* Statement id prepared on this connection unless it is already: NULL, or the failed
 * result (to PQclear; empty without memory). */
static PGresult *prepare_stmt(struct pg_store *st, enum pg_stmt id)
{
	_cleanup_free_ char *built = NULL;
	PGresult *res;

	if (st->prepared & 1u << id)
		return NULL;
	built = pg_stmts[id].sql ? NULL : pg_stmts[id].build();
	if (!pg_stmts[id].sql && !built)
		return PQmakeEmptyPGresult(st->conn, PGRES_FATAL_ERROR);
	res = PQprepare(st->conn, pg_stmts[id].name, pg_stmts[id].sql ?: built,
			pg_stmts[id].nparams, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return res;
	PQclear(res);
	st->prepared |= 1u << id;
	return NULL;
}

/* Statement id run with params (n, binary where formats[i] is 1), prepared first when this
 * connection has not yet; the result (to PQclear), or NULL without memory. In pipeline mode
 * (prepared by pipe_begin) it is only sent: an empty result of PGRES_COMMAND_OK, or of
 * PGRES_FATAL_ERROR when it could not be sent; pipe_end has its real result. */
static PGresult *exec_stmt(struct pg_store *st, enum pg_stmt id, const char *const *params,
			   const int *lens, const int *formats)
{
	PGresult *res;

	if (st->piped)
		return PQmakeEmptyPGresult(
		    st->conn, PQsendQueryPrepared(st->conn, pg_stmts[id].name, pg_stmts[id].nparams,
						  params, lens, formats, 0) == 1
				  ? PGRES_COMMAND_OK
				  : PGRES_FATAL_ERROR);
	res = prepare_stmt(st, id);
	if (res)
		return res;
	return PQexecPrepared(st->conn, pg_stmts[id].name, pg_stmts[id].nparams, params, lens,
			      formats, 0);
}

/*
 * The rest of an ingest transaction in libpq's pipeline mode: its statements (the queued deltas,
 * rollup_open's) and the COMMIT go out together and their results come back together, one round
 * trip instead of one per statement. Only for deltas without a tasks_alive statement (which
 * reads rows before it writes: apply_alive). The statements are prepared first (once per
 * connection), since a prepare inside the pipeline could not be told from one that failed.
 * Returns whether the pipeline was entered (or a negative errno).
 */
static int pipe_begin(struct pg_store *st, const struct coll_delta *d, size_t nd)
{
	for (size_t i = 0; i < nd; i++)
		if (d[i].alive)
			return 0;
	for (int id = 0; id < _PG_STMT_MAX; id++) {
		PGresult *res = prepare_stmt(st, (enum pg_stmt)id);

		if (res)
			return res_err(st, "prepare", res);
	}
	if (PQenterPipelineMode(st->conn) != 1)
		return 0;
	st->piped = true;
	return 1;
}

/* Sends the COMMIT (unless the caller failed already: r < 0) and the pipeline's sync, reads every
 * result; the first error (res_err) or r. Leaves pipeline mode. */
static int pipe_end(struct pg_store *st, int r)
{
	int nulls = 0;

	st->piped = false;
	if (r == 0 && PQsendQueryParams(st->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) != 1) {
		set_err(st, "COMMIT", NULL);
		r = -EIO;
	}
	if (PQpipelineSync(st->conn) != 1) {
		set_err(st, "pipeline sync", NULL);
		r = r < 0 ? r : -EIO;
	} else {
		/* each statement's result then a NULL, the sync's last; no sync on a broken
		 * connection: NULLs only */
		for (;;) {
			PGresult *res = PQgetResult(st->conn);
			ExecStatusType s = PQresultStatus(res);

			if (!res) {
				if (PQstatus(st->conn) != CONNECTION_OK ||
				    ++nulls > _PG_STMT_MAX + 8)
					break;
				continue;
			}
			nulls = 0;
			if (s == PGRES_PIPELINE_SYNC) {
				PQclear(res);
				break;
			}
			if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK &&
			    s != PGRES_PIPELINE_ABORTED && r == 0)
				r = res_err(st, "pipeline", res);
			else
				PQclear(res);
		}
	}
	if (PQexitPipelineMode(st->conn) != 1 && r == 0) {
		set_err(st, "pipeline end", NULL);
		r = -EIO;
	}
	return r;
}

/* Audit objects, on every open under the migration lock: see store_sqlite.c audit_ddl. */
static const char audit_ddl[] =
    "CREATE TABLE IF NOT EXISTS audit_breaks (seq BIGSERIAL, record_id TEXT PRIMARY KEY,"
    " node TEXT NOT NULL, kind TEXT NOT NULL, reason TEXT NOT NULL, detected TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS records_audit_node ON records(node, time_ns)"
    " WHERE substr(type, 1, 6) = 'audit.';"
    "CREATE INDEX IF NOT EXISTS records_audit_hash ON records((body->>'hash'))"
    " WHERE substr(type, 1, 6) = 'audit.'";

static int rebuild_rollups(struct pg_store *st, unsigned only);

/* BEGIN, then the transaction-scoped advisory lock key: waited for, or with !wait taken only
 * if free (else -EBUSY). On failure the transaction is rolled back. */
static int begin_locked(struct pg_store *st, long long key, bool wait)
{
	char sql[96];
	PGresult *res;
	int r;

	r = exec_cmd(st, "BEGIN");
	if (r < 0)
		return r;
	snprintf(sql, sizeof(sql), "SELECT pg_%sadvisory_xact_lock(%lld)", wait ? "" : "try_", key);
	res = PQexec(st->conn, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		r = res_err(st, "advisory lock", res);
	} else {
		if (!wait && strcmp(PQgetvalue(res, 0, 0), "t") != 0)
			r = -EBUSY;
		PQclear(res);
	}
	if (r < 0)
		PQclear(PQexec(st->conn, "ROLLBACK"));
	return r;
}

static int migration_exec(void *db, const char *sql)
{
	return exec_cmd(db, sql);
}

static int migration_version(void *db, int *ret)
{
	struct pg_store *st = db;
	PGresult *res = PQexec(st->conn, "SELECT coalesce(max(version), 0) FROM schema_version");

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "schema_version", res);
	*ret = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

static int migration_rebuild(void *db)
{
	return rebuild_rollups(db, COLL_ROLLUP_ALL);
}

/* v12: one row trigger keeps the counted capacity keys in step with rollup_node_day */
static int migration_node_cap_triggers(void *db)
{
	_cleanup_free_ char *del = coll_node_cap_trigger_sql(false, "OLD");
	_cleanup_free_ char *add = coll_node_cap_trigger_sql(true, "NEW");
	_cleanup_free_ char *sql = NULL;

	if (!del || !add ||
	    asprintf(&sql,
		     "CREATE OR REPLACE FUNCTION rollup_node_cap_step() RETURNS trigger"
		     " LANGUAGE plpgsql AS $corral$ BEGIN IF TG_OP <> 'INSERT' THEN %s END IF;"
		     " IF TG_OP <> 'DELETE' THEN %s END IF; RETURN NULL; END $corral$;"
		     "CREATE OR REPLACE TRIGGER rollup_node_cap AFTER INSERT OR UPDATE OR DELETE"
		     " ON rollup_node_day FOR EACH ROW EXECUTE FUNCTION rollup_node_cap_step()",
		     del, add) < 0)
		return -ENOMEM;
	return exec_cmd(db, sql);
}

static int migrate(struct pg_store *st)
{
	const struct coll_migration m = {
	    .db = st,
	    .real_type = "DOUBLE PRECISION",
	    .int_type = "BIGINT",
	    .records_ddl =
		"CREATE TABLE records ("
		" record_id TEXT PRIMARY KEY, type TEXT NOT NULL,"
		" time TIMESTAMPTZ NOT NULL, time_ns BIGINT NOT NULL, node TEXT NOT NULL,"
		" task_id TEXT, job TEXT, \"user\" TEXT, account TEXT, labels JSONB,"
		" req_cpus DOUBLE PRECISION, req_memory_bytes BIGINT, req_gpus BIGINT,"
		" req_time_limit_s BIGINT, wall_ns BIGINT, cpu_user_ns BIGINT,"
		" cpu_system_ns BIGINT, memory_peak_bytes BIGINT,"
		" memory_byte_seconds DOUBLE PRECISION, io_read_bytes BIGINT,"
		" io_write_bytes BIGINT, net_rx_bytes BIGINT, net_tx_bytes BIGINT,"
		" gpu_seconds DOUBLE PRECISION, exit_status TEXT, body JSON NOT NULL);"
		"CREATE INDEX records_type_time ON records(type, time_ns);"
		"CREATE INDEX records_task ON records(task_id);",
	    /* no index: the fold takes every row; stored uncompressed: written once, read once */
	    .pending_ddl = "CREATE TABLE IF NOT EXISTS rollup_pending (layout INTEGER NOT NULL,"
			   " deltas BYTEA NOT NULL);"
			   "ALTER TABLE rollup_pending ALTER COLUMN deltas SET STORAGE EXTERNAL",
	    .conflicts_ddl =
		"CREATE TABLE IF NOT EXISTS conflicts (seq BIGSERIAL,"
		" record_id TEXT NOT NULL, node TEXT NOT NULL, detected TEXT NOT NULL,"
		" stored_body TEXT NOT NULL, received_body TEXT NOT NULL,"
		" received_sha256 TEXT NOT NULL, PRIMARY KEY (record_id, received_sha256))",
	    .audit_ddl = audit_ddl,
	    .exec = migration_exec,
	    .version = migration_version,
	    .has_column = NULL, /* ADD COLUMN IF NOT EXISTS */
	    .rebuild_rollups = migration_rebuild,
	    /* a rollup row is about 270 bytes, 30 to a page; a fold updates every row of the
	     * pages of the days it touches, half a page's room takes as many new versions as the
	     * page holds rows (docs/collector.md "Migration 14 → 15") */
	    .rollup_room = "SET (fillfactor = 50)",
	    .node_cap_triggers = migration_node_cap_triggers,
	    .errmsg = st->base.errmsg,
	    .errlen = sizeof(st->base.errmsg),
	};
	int r;

	r = begin_locked(st, MIGRATION_LOCK_KEY, true);
	if (r < 0)
		return r;
	r = coll_migrate(&m);
	if (r < 0) {
		PQclear(PQexec(st->conn, "ROLLBACK"));
		return r;
	}
	return exec_cmd(st, "COMMIT");
}

/* Bucketed rollup deltas travel by COPY into this temp table, then one INSERT .. SELECT ..
 * ON CONFLICT per rollup table: a fixed statement instead of a VALUES list of thousands of
 * parameters that PostgreSQL would parse anew for every batch. */
static int rollup_in_setup(struct pg_store *st)
{
	_cleanup_free_ char *sql = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&sql, &len);

	if (!f)
		return -ENOMEM;
	fputs(
	    "CREATE TEMP TABLE IF NOT EXISTS rollup_in (tbl INTEGER NOT NULL, bucket TEXT NOT NULL",
	    f);
	for (int k = 0; k < _COLL_KEY_MAX; k++)
		fprintf(f, ", %s TEXT NOT NULL", coll_key_column(k));
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		fprintf(f, ", %s DOUBLE PRECISION NOT NULL", coll_sum_name(k));
	fputs(") ON COMMIT DELETE ROWS", f);
	if (fclose(f) != 0)
		return -ENOMEM;
	return exec_cmd(st, sql);
}

static int session_setup(struct pg_store *st)
{
	int r;

	if (st->session_ready)
		return 0;
	r = exec_cmd(st, "SET TimeZone = 'UTC'; SET client_min_messages = warning;"
			 "CREATE TEMP TABLE IF NOT EXISTS incoming (LIKE records)"
			 " ON COMMIT DELETE ROWS");
	if (r < 0)
		return r;
	r = rollup_in_setup(st);
	if (r < 0)
		return r;
	st->session_ready = true;
	return 0;
}

/* First on a new connection. A fold sorts and scans tens of MB of deltas: kept in memory
 * (temp_buffers only takes before the session's first use of a temp table). */
static int conn_setup(struct pg_store *st)
{
	return exec_cmd(st, "SET client_min_messages = warning; SET temp_buffers = '64MB';"
			    " SET work_mem = '64MB'");
}

/* Make sure the connection is usable; reset it after a failure. */
static int ensure_conn(struct pg_store *st)
{
	/* (a pipeline left with results not collected: only on a broken connection) */
	if (PQstatus(st->conn) != CONNECTION_OK || PQpipelineStatus(st->conn) != PQ_PIPELINE_OFF) {
		int r;

		st->session_ready = false;
		st->prepared = 0;
		PQreset(st->conn);
		if (PQstatus(st->conn) != CONNECTION_OK) {
			set_err(st, "connect", NULL);
			return -EIO;
		}
		r = conn_setup(st);
		if (r < 0)
			return r;
	}
	return session_setup(st);
}

static void pg_close(struct coll_store *s)
{
	struct pg_store *st = (struct pg_store *)s;

	PQfinish(st->conn);
	free(st->copy_sql[0]);
	free(st->copy_sql[1]);
	free(st);
}

/* "BEGIN; COPY <table> (<coll_cols>) FROM STDIN WITH (FORMAT binary)": the BEGIN in the COPY's
 * query string, one round trip for both; malloc'd, NULL on -ENOMEM. */
static char *copy_query(const char *table)
{
	char *sql = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&sql, &len);

	if (!f)
		return NULL;
	fprintf(f, "BEGIN; COPY %s (", table);
	for (int c = 0; c < COLL_N_COLS; c++)
		fprintf(f, "%s%s", c ? ", " : "", coll_cols[c].name);
	fputs(") FROM STDIN WITH (FORMAT binary)", f);
	if (fclose(f) != 0) {
		free(sql);
		return NULL;
	}
	return sql;
}

static int pg_open(const char *uri, unsigned flags, struct coll_store **ret, char *err,
		   size_t errlen)
{
	(void)flags;
	struct pg_store *st = calloc(1, sizeof(*st));
	int r;

	if (!st)
		return -ENOMEM;
	st->copy_sql[0] = copy_query("incoming");
	st->copy_sql[1] = copy_query("records");
	st->conn = PQconnectdb(uri);
	if (!st->conn || !st->copy_sql[0] || !st->copy_sql[1]) {
		pg_close(&st->base);
		return -ENOMEM;
	}
	if (PQstatus(st->conn) != CONNECTION_OK) {
		set_err(st, "connect", NULL);
		r = -EIO;
		goto out_close;
	}
	r = conn_setup(st);
	if (r < 0)
		goto out_close;
	r = migrate(st);
	if (r < 0)
		goto out_close;
	r = session_setup(st);
	if (r < 0)
		goto out_close;
	st->base.queues_rollups = true; /* every handle (docs/collector.md, "Queued deltas") */
	*ret = &st->base;
	return 0;

out_close:
	snprintf(err, errlen, "%s", st->base.errmsg);
	pg_close(&st->base);
	return r;
}

/* The batch's rows in binary COPY form, columns in coll_cols order. */
static int build_copy(const struct coll_item *items, size_t n, char **ret, size_t *ret_len)
{
	struct pgcopy c;
	int r = 0;

	pgcopy_begin(&c);
	for (size_t i = 0; i < n && r >= 0; i++) {
		struct coll_item_scratch sc = {0};
		struct coll_value v[COLL_N_COLS];

		r = coll_item_values(&items[i], &sc, v);
		pgcopy_row(&c, COLL_N_COLS);
		for (int k = 0; k < COLL_N_COLS && r >= 0; k++) {
			if (v[k].null) {
				pgcopy_null(&c);
				continue;
			}
			switch (coll_cols[k].kind) {
			case COLL_COL_INT:
				pgcopy_int8(&c, v[k].i);
				break;
			case COLL_COL_REAL:
				pgcopy_float8(&c, v[k].d);
				break;
			case COLL_COL_TIME:
				pgcopy_timestamptz_ns(&c, items[i].rec->time_ns);
				break;
			case COLL_COL_JSONB:
				pgcopy_jsonb(&c, v[k].s, v[k].len);
				break;
			default:
				pgcopy_text(&c, v[k].s, v[k].len);
			}
		}
		coll_item_scratch_free(&sc);
	}
	if (r < 0) {
		pgcopy_free(&c);
		return r;
	}
	return pgcopy_end(&c, ret, ret_len);
}

static int cmp_item_ptr(const void *a, const void *b)
{
	const struct coll_item *x = *(const struct coll_item *const *)a;
	const struct coll_item *y = *(const struct coll_item *const *)b;
	int c = strcmp(x->rec->record_id, y->rec->record_id);

	if (c)
		return c;
	return x < y ? -1 : x > y;
}

static void mark_new(struct coll_item **sorted, size_t n, const char *id)
{
	size_t lo = 0, hi = n;

	while (lo < hi) { /* first item with record_id >= id */
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(sorted[mid]->rec->record_id, id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < n && strcmp(sorted[lo]->rec->record_id, id) == 0)
		sorted[lo]->is_new = true;
}

/* The newest samples' rollup_open rows upserted (only if no task.end of the task is stored,
 * only over an older sample): the columns as arrays, $1 .. $OPEN_SET_COLS. */
static char *open_set_sql(void)
{
	static const char *const texts[OPEN_SET_TEXTS] = {"node",     "task_id", "account",
							  "\"user\"", "job",	 "labels"};
	char *sql = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&sql, &len);
	int np = 0;

	if (!f)
		return NULL;
	fputs("INSERT INTO rollup_open (node, task_id, account, \"user\", job, labels, start_ns,"
	      " sample_ns",
	      f);
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		fprintf(f, ", %s", coll_sum_name(k));
	fputs(") SELECT * FROM unnest(", f);
	for (int k = 0; k < OPEN_SET_TEXTS; k++)
		fprintf(f, "%s$%d::text[]", k ? ", " : "", ++np);
	for (int k = 0; k < 2; k++)
		fprintf(f, ", $%d::bigint[]", ++np);
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		fprintf(f, ", $%d::float8[]", ++np);
	fputs(") AS v (", f);
	for (int k = 0; k < OPEN_SET_TEXTS; k++)
		fprintf(f, "%s%s", k ? ", " : "", texts[k]);
	fputs(", start_ns, sample_ns", f);
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		fprintf(f, ", %s", coll_sum_name(k));
	fputs(") WHERE NOT EXISTS (SELECT 1 FROM records r WHERE r.task_id = v.task_id"
	      " AND r.node = v.node AND r.type = 'task.end')"
	      " ON CONFLICT (node, task_id) DO UPDATE SET account = excluded.account,"
	      " \"user\" = excluded.\"user\", job = excluded.job,"
	      " labels = excluded.labels, start_ns = excluded.start_ns,"
	      " sample_ns = excluded.sample_ns",
	      f);
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		fprintf(f, ", %s = excluded.%s", coll_sum_name(k), coll_sum_name(k));
	fputs(", rss_bytes = NULL, listed_ns = NULL"
	      " WHERE excluded.sample_ns > rollup_open.sample_ns",
	      f);
	if (fclose(f) != 0) {
		free(sql);
		return NULL;
	}
	return sql;
}

/* Touches of rollup_open rows (struct coll_delta touch): one UPDATE joined to the arrays of
 * node, task, time, rss and base (each key at most once: the deltas are merged). */
static char *open_touch_sql(void)
{
	char *sql = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&sql, &len);

	if (!f)
		return NULL;
	fputs("UPDATE rollup_open", f);
	coll_open_touch_set(f, "v_t", "v_rss", "v_t", "DOUBLE PRECISION", "GREATEST");
	fputs(" FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[])"
	      " AS v (v_node, v_task, v_t, v_rss, v_base)",
	      f);
	coll_open_touch_where(f, "v_t", "v_base");
	fputs(" AND node = v_node AND task_id = v_task", f);
	if (fclose(f) != 0) {
		free(sql);
		return NULL;
	}
	return sql;
}

static void put_be32(struct growbuf *b, uint32_t v)
{
	char *p = growbuf_room(b, 4, SIZE_MAX);

	if (p) {
		p[0] = (char)(v >> 24);
		p[1] = (char)(v >> 16);
		p[2] = (char)(v >> 8);
		p[3] = (char)v;
	}
}

static void put_be64(struct growbuf *b, uint64_t v)
{
	put_be32(b, (uint32_t)(v >> 32));
	put_be32(b, (uint32_t)v);
}

/* A one-dimensional array of n elements of type oid, to fill with array_text, array_int8 or
 * array_float8, in PostgreSQL's binary array form (array_recv): dimensions, flags (no
 * NULLs), element type, length, lower bound. */
#define PG_INT8OID   20
#define PG_TEXTOID   25
#define PG_FLOAT8OID 701
static void array_begin(struct growbuf *b, size_t n, uint32_t oid)
{
	put_be32(b, 1);
	put_be32(b, 0);
	put_be32(b, oid);
	put_be32(b, (uint32_t)n);
	put_be32(b, 1);
}

static void array_text(struct growbuf *b, const char *s)
{
	const size_t len = strlen(s);
	char *p;

	put_be32(b, (uint32_t)len);
	p = growbuf_room(b, len, SIZE_MAX);
	if (p)
		memcpy(p, s, len);
}

/* clamped to INT64_MAX, as SQL integers are signed */
static void array_int8(struct growbuf *b, uint64_t v)
{
	put_be32(b, 8);
	put_be64(b, MIN(v, (uint64_t)INT64_MAX));
}

static void array_float8(struct growbuf *b, double v)
{
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	put_be32(b, 8);
	put_be64(b, bits);
}

/* Prepared statement id run with the arrays a[0..n) as its binary parameters; frees them. */
static int exec_arrays(struct pg_store *st, enum pg_stmt id, struct growbuf *a, int n,
		       const char *what)
{
	const char *params[OPEN_SET_COLS];
	int lens[OPEN_SET_COLS], fmts[OPEN_SET_COLS];
	PGresult *res;
	int r = 0;

	assert(n == pg_stmts[id].nparams && n <= OPEN_SET_COLS);
	for (int k = 0; k < n; k++) {
		if (a[k].failed || a[k].len > INT_MAX)
			r = -ENOMEM;
		params[k] = a[k].p;
		lens[k] = (int)a[k].len;
		fmts[k] = 1;
	}
	if (r == 0) {
		res = exec_stmt(st, id, params, lens, fmts);
		if (!res)
			r = -ENOMEM;
		else if (PQresultStatus(res) != PGRES_COMMAND_OK)
			r = res_err(st, what, res);
		else
			PQclear(res);
	}
	for (int k = 0; k < n; k++)
		free(a[k].p);
	return r;
}

/* The newest samples d[0..n) (set deltas of rollup_open) upserted in one statement. */
static int open_set(struct pg_store *st, const struct coll_delta *d, size_t n)
{
	struct growbuf a[OPEN_SET_COLS] = {0};

	for (int k = 0; k < OPEN_SET_COLS; k++)
		array_begin(&a[k], n,
			    k < OPEN_SET_TEXTS	     ? PG_TEXTOID
			    : k < OPEN_SET_TEXTS + 2 ? PG_INT8OID
						     : PG_FLOAT8OID);
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *labels = coll_labels_json(d[i].rec);

		if (!labels) {
			a[0].failed = true;
			break;
		}
		array_text(&a[0], d[i].node);
		array_text(&a[1], d[i].task_id);
		array_text(&a[2], d[i].account);
		array_text(&a[3], d[i].user);
		array_text(&a[4], d[i].job);
		array_text(&a[5], labels);
		array_int8(&a[6], d[i].start_ns);
		array_int8(&a[7], d[i].sample_ns);
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			array_float8(&a[OPEN_SET_TEXTS + 2 + k], d[i].v[k]);
	}
	return exec_arrays(st, PG_STMT_OPEN_SET, a, OPEN_SET_COLS, "rollup_open upsert");
}

/* Touches d[0..n) applied in one statement. */
static int open_touch(struct pg_store *st, const struct coll_delta *d, size_t n)
{
	struct growbuf a[5] = {0};

	array_begin(&a[0], n, PG_TEXTOID);
	array_begin(&a[1], n, PG_TEXTOID);
	for (int k = 2; k < 5; k++)
		array_begin(&a[k], n, PG_INT8OID);
	for (size_t i = 0; i < n; i++) {
		array_text(&a[0], d[i].node);
		array_text(&a[1], d[i].task_id);
		array_int8(&a[2], d[i].sample_ns);
		array_int8(&a[3], d[i].rss_bytes);
		array_int8(&a[4], d[i].base_ns);
	}
	return exec_arrays(st, PG_STMT_OPEN_TOUCH, a, 5, "rollup_open touch");
}

/* The rollup_open rows of the ended tasks d[0..n) deleted: the nodes and task ids as two
 * arrays. */
static int open_delete(struct pg_store *st, const struct coll_delta *d, size_t n)
{
	struct growbuf a[2] = {0};

	array_begin(&a[0], n, PG_TEXTOID);
	array_begin(&a[1], n, PG_TEXTOID);
	for (size_t i = 0; i < n; i++) {
		array_text(&a[0], d[i].node);
		array_text(&a[1], d[i].task_id);
	}
	return exec_arrays(st, PG_STMT_OPEN_DEL, a, 2, "rollup_open delete");
}

/* A node's tasks_alive statement (struct coll_delta alive): its rows checked (selected FOR
 * UPDATE), then moved. */
static int apply_alive(struct pg_store *st, const struct coll_delta *d)
{
	static const char rows[] = " AND rss_bytes IS NOT NULL AND listed_ns = $4::bigint AND node"
				   " = $1 AND NOT (task_id = ANY($2::text[]))";
	_cleanup_free_ char *sql = NULL, *sel = NULL, *arr = NULL;
	_cleanup_free_ const char **ids = NULL;
	const char *params[4];
	char t[32], since[32];
	size_t len = 0, alen = 0;
	PGresult *res;
	FILE *f;
	int r = 0, n;

	/* the except list as a text[] literal: {"id","id"}, quote and backslash escaped */
	f = open_memstream(&arr, &alen);
	if (!f)
		return -ENOMEM;
	fputc('{', f);
	for (size_t i = 0; i < d->alive->n_except; i++) {
		fputs(i ? ",\"" : "\"", f);
		for (const char *p = d->alive->except[i]; *p; p++) {
			if (*p == '"' || *p == '\\')
				fputc('\\', f);
			fputc(*p, f);
		}
		fputc('"', f);
	}
	fputc('}', f);
	if (fclose(f) != 0)
		return -ENOMEM;
	snprintf(t, sizeof(t), "%" PRIu64, MIN(d->sample_ns, (uint64_t)INT64_MAX));
	params[0] = d->node;
	params[1] = arr;
	params[2] = t;
	snprintf(since, sizeof(since), "%" PRIu64, MIN(d->alive->since_ns, (uint64_t)INT64_MAX));
	params[3] = since;
	f = open_memstream(&sel, &len);
	if (!f)
		return -ENOMEM;
	fputs("SELECT task_id FROM rollup_open", f);
	coll_open_touch_where(f, "$3::bigint", "0");
	fputs(rows, f);
	fputs(" FOR UPDATE", f);
	if (fclose(f) != 0)
		return -ENOMEM;
	res = PQexecParams(st->conn, sel, 4, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "rollup_open tasks_alive", res);
	n = PQntuples(res);
	ids = calloc((size_t)n + 1, sizeof(*ids));
	for (int i = 0; ids && i < n; i++)
		ids[i] = PQgetvalue(res, i, 0);
	if (!ids)
		r = -ENOMEM;
	else if (coll_alive_check(d->alive, ids, (size_t)n) < 0) {
		/* the rows stay as they are (the tasks' next samples or listings move them) */
		st->base.alive_refused++;
		PQclear(res);
		return 0;
	}
	PQclear(res);
	if (r < 0)
		return r;
	f = open_memstream(&sql, &len);
	if (!f)
		return -ENOMEM;
	fputs("UPDATE rollup_open", f);
	coll_open_touch_set(f, "$3::bigint", "rss_bytes", "listed_ns", "DOUBLE PRECISION",
			    "GREATEST");
	coll_open_touch_where(f, "$3::bigint", "0");
	fputs(rows, f);
	if (fclose(f) != 0)
		return -ENOMEM;
	res = PQexecParams(st->conn, sql, 4, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return res_err(st, "rollup_open tasks_alive", res);
	PQclear(res);
	return 0;
}

/* rollup_open's deltas (sorted: sets, touches, the tasks_alive statements, deletes), one
 * prepared statement per run of a kind, each run's rows as arrays. */
static int upsert_values(struct pg_store *st, const struct coll_delta *d, size_t nd)
{
	for (size_t start = 0, end; start < nd; start = end) {
		int r;

		end = start + 1;
		if (d[start].alive) {
			r = apply_alive(st, &d[start]);
		} else if (d[start].touch) {
			while (end < nd && d[end].touch && !d[end].alive)
				end++;
			r = open_touch(st, d + start, end - start);
		} else if (d[start].del) {
			while (end < nd && d[end].del && !d[end].touch && !d[end].alive)
				end++;
			r = open_delete(st, d + start, end - start);
		} else {
			while (end < nd && !d[end].del && !d[end].touch && !d[end].alive)
				end++;
			r = open_set(st, d + start, end - start);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* Fields of a rollup_in row: tbl, bucket, the keys, the sums. Batches queued in rollup_pending
 * before the compact form (collector/pending.h) were such rows and carry it as their layout;
 * the fold still reads them. */
#define ROLLUP_IN_FIELDS (2 + _COLL_KEY_MAX + _COLL_SUM_MAX)

/* The queued rows of those collectors had the sums of their time: up to the kill counts (the
 * no-request count came with schema v6, after the compact form), 29 fields. Their layout is
 * that count; the sums they lack are 0. */
#define ROLLUP_IN_LEGACY_SUMS	COLL_SUM_NO_REQUEST_TASKS
#define ROLLUP_IN_LEGACY_FIELDS (2 + _COLL_KEY_MAX + ROLLUP_IN_LEGACY_SUMS)
_Static_assert(ROLLUP_IN_LEGACY_FIELDS == 29, "the layout older collectors wrote");

/* Bucketed deltas as rows of a binary COPY into rollup_in, appended to c; *present gets the
 * bit 1u << table of each table among them. */
static void deltas_rows(struct pgcopy *c, const struct coll_delta *d, size_t nd, unsigned *present)
{
	for (size_t i = 0; i < nd; i++) {
		*present |= 1u << d[i].table;
		pgcopy_row(c, ROLLUP_IN_FIELDS);
		pgcopy_int4(c, (int32_t)d[i].table);
		pgcopy_text(c, d[i].bucket, strlen(d[i].bucket));
		for (int k = 0; k < _COLL_KEY_MAX; k++) {
			const char *v = coll_delta_key(&d[i], k) ?: "";

			pgcopy_text(c, v, strlen(v));
		}
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			pgcopy_float8(c, d[i].v[k]);
	}
}

static int copy_in(struct pg_store *st, const char *sql, const char *data, size_t len)
{
	PGresult *res;
	int r = 0;

	if (len > INT_MAX) {
		return err_set(st->base.errmsg, sizeof(st->base.errmsg), -E2BIG,
			       "postgresql: %s: %zu bytes", sql, len);
	}
	res = PQexec(st->conn, sql);
	if (PQresultStatus(res) != PGRES_COPY_IN)
		return res_err(st, sql, res);
	PQclear(res);
	if (PQputCopyData(st->conn, data, (int)len) != 1 || PQputCopyEnd(st->conn, NULL) != 1) {
		set_err(st, "COPY data", NULL);
		return -EIO;
	}
	while ((res = PQgetResult(st->conn))) {
		if (PQresultStatus(res) != PGRES_COMMAND_OK && r == 0) {
			r = res_err(st, "COPY end", res);
			continue;
		}
		PQclear(res);
	}
	return r;
}

/* The rows of rollup_in added to the tables in present: one INSERT .. SELECT per table. Every
 * key is in rollup_in once (its deltas merged before: coll_deltas_build, coll_deltas_merge
 * for a fold's batches): no GROUP BY (a key twice would fail the statement, "cannot affect
 * row a second time", never count twice). */
static int apply_rollup_in(struct pg_store *st, unsigned present)
{
	_cleanup_free_ char *sql = NULL;
	size_t slen = 0;
	FILE *f = open_memstream(&sql, &slen);

	if (!f)
		return -ENOMEM;
	for (int t = 0; t < _COLL_ROLLUP_MAX; t++) {
		const struct coll_rollup_def *def = coll_rollup_def(t);
		_cleanup_free_ char *pk = NULL;

		if (!(present & 1u << t) || t == COLL_ROLLUP_OPEN)
			continue;
		pk = coll_rollup_pk(t);
		if (!pk) {
			fclose(f);
			return -ENOMEM;
		}
		fprintf(f, "INSERT INTO %s (%s", def->name, pk);
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			fprintf(f, ", %s", coll_sum_name(k));
		fprintf(f, ") SELECT %s", pk);
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			fprintf(f, ", %s", coll_sum_name(k));
		/* the fixed key order in which concurrent transactions take row locks */
		fprintf(f,
			" FROM rollup_in WHERE tbl = %d ORDER BY %s"
			" ON CONFLICT (%s) DO UPDATE SET ",
			t, pk, pk);
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			fprintf(f, "%s%s = %s.%s + excluded.%s", k ? ", " : "", coll_sum_name(k),
				def->name, coll_sum_name(k), coll_sum_name(k));
		fputs(";", f);
	}
	if (fclose(f) != 0)
		return -ENOMEM;
	return slen ? exec_cmd(st, sql) : 0;
}

/* Bucketed deltas: COPY into rollup_in, then one INSERT .. SELECT per table present. */
static int upsert_copied(struct pg_store *st, const struct coll_delta *d, size_t nd, bool more)
{
	_cleanup_free_ char *data = NULL;
	size_t dlen = 0;
	unsigned present = 0;
	struct pgcopy c;
	int r;

	pgcopy_begin(&c);
	deltas_rows(&c, d, nd, &present);
	r = pgcopy_end(&c, &data, &dlen);
	if (r < 0)
		return r;
	r = copy_in(st, "COPY rollup_in FROM STDIN WITH (FORMAT binary)", data, dlen);
	if (r < 0)
		return r;
	r = apply_rollup_in(st, present);
	if (r < 0 || !more)
		return r;
	/* the rows are deleted at commit; a second batch in this transaction (rebuild) must
	 * not apply them again */
	return exec_cmd(st, "TRUNCATE rollup_in");
}

/*
 * Ingest queues its bucketed deltas instead of applying them: one rollup_pending row per
 * transaction, its deltas in the compact form (collector/pending.h). Applied in the transaction,
 * every concurrent ingest would take row locks on the same day and month rows and hold them
 * through its commit, and the transactions would run one after another.
 */
static int queue_deltas(struct pg_store *st, const struct coll_delta *d, size_t nd)
{
	_cleanup_free_ unsigned char *data = NULL;
	size_t dlen = 0;
	char layout[16];
	const char *params[2];
	int lens[2] = {0, 0}, fmts[2] = {0, 1};
	PGresult *res;
	int r;

	if (nd == 0)
		return 0;
	r = coll_pending_encode(d, nd, &data, &dlen);
	if (r < 0)
		return r;
	if (dlen > INT_MAX)
		return -E2BIG;
	snprintf(layout, sizeof(layout), "%d", COLL_PENDING_LAYOUT_COMPACT);
	params[0] = layout;
	params[1] = (const char *)data;
	lens[1] = (int)dlen;
	res = exec_stmt(st, PG_STMT_PENDING, params, lens, fmts);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return res_err(st, "rollup_pending", res);
	PQclear(res);
	return 0;
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The fewest bytes a rollup_in row takes: field count, a length word per field, tbl, sums. */
#define ROLLUP_IN_ROW_MIN (2 + 4 * ROLLUP_IN_LEGACY_FIELDS + 4 + 8 * ROLLUP_IN_LEGACY_SUMS)

/*
 * The rows of one queued batch appended to d as deltas (room for len / ROLLUP_IN_ROW_MIN more
 * of them). Texts are copied to *arena with their NUL (a row's texts take less room there
 * than their length words and bytes in the row, so as many bytes as the rows suffice).
 * -EBADMSG unless they are well-formed rollup_in rows of bucketed tables.
 */
static int pending_parse(const unsigned char *p, size_t len, struct coll_delta *d, size_t *nd,
			 char **arena)
{
	size_t o = 0;

	while (o < len) {
		struct coll_delta x = {0};

		if (len - o < 2 || (p[o] << 8 | p[o + 1]) != ROLLUP_IN_LEGACY_FIELDS)
			return -EBADMSG;
		o += 2;
		for (int f = 0; f < ROLLUP_IN_LEGACY_FIELDS; f++) {
			uint32_t flen;

			if (len - o < 4)
				return -EBADMSG;
			flen = be32(p + o);
			o += 4;
			if (flen > len - o)
				return -EBADMSG;
			if (f == 0) { /* tbl */
				if (flen != 4 || be32(p + o) >= COLL_ROLLUP_OPEN)
					return -EBADMSG;
				x.table = (enum coll_rollup_table)be32(p + o);
			} else if (f == 1) { /* bucket */
				if (flen >= sizeof(x.bucket))
					return -EBADMSG;
				memcpy(x.bucket, p + o, flen);
			} else if (f < 2 + _COLL_KEY_MAX) {
				memcpy(*arena, p + o, flen);
				(*arena)[flen] = 0;
				coll_delta_set_key(&x, f - 2, *arena);
				*arena += flen + 1;
			} else { /* sums */
				uint64_t bits = (uint64_t)be32(p + o) << 32 | be32(p + o + 4);

				if (flen != 8)
					return -EBADMSG;
				memcpy(&x.v[f - 2 - _COLL_KEY_MAX], &bits, sizeof(double));
			}
			o += flen;
		}
		d[(*nd)++] = x;
	}
	return 0;
}

#define FOLD_LOCK_KEY (MIGRATION_LOCK_KEY + 1)

static int fold_once(struct pg_store *st, bool wait)
{
	_cleanup_free_ char *arena = NULL;
	struct coll_pending_set set = {0};
	char *ap = NULL;
	size_t nd = 0, total = 0;
	PGresult *res;
	int n, r;

	r = begin_locked(st, FOLD_LOCK_KEY, wait); /* -EBUSY: another connection is folding */
	if (r < 0)
		return r;
	/* what is committed now; batches committed later stay for the next fold */
	res = PQexecParams(st->conn, "DELETE FROM rollup_pending RETURNING layout, deltas", 0, NULL,
			   NULL, NULL, NULL, 1);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		r = res_err(st, "rollup_pending", res);
		goto out_rollback;
	}
	/* the queued batches' deltas merged here (a key that several batches touched is one
	 * row), then applied as by the rebuild */
	n = PQntuples(res);
	for (int i = 0; i < n; i++)
		total += (size_t)PQgetlength(res, i, 1);
	_Static_assert(ROLLUP_IN_ROW_MIN >= COLL_PENDING_ROW_MIN, "room for either layout");
	arena = ap = malloc(total + 1);
	if (!arena)
		r = -ENOMEM;
	for (int i = 0; i < n && r >= 0; i++) {
		const unsigned char *lp = (const unsigned char *)PQgetvalue(res, i, 0);
		const unsigned char *p = (const unsigned char *)PQgetvalue(res, i, 1);
		const size_t plen = (size_t)PQgetlength(res, i, 1);
		const int layout = PQgetlength(res, i, 0) == 4 ? (int)be32(lp) : -1;

		r = coll_pending_reserve(&set, plen);
		if (r < 0)
			break;
		/* the compact form; or rollup_in rows, queued by a collector before it */
		if (layout == COLL_PENDING_LAYOUT_COMPACT
			? coll_pending_decode(p, plen, set.d, &set.n, &ap) < 0
			: layout != ROLLUP_IN_LEGACY_FIELDS ||
			      pending_parse(p, plen, set.d, &set.n, &ap) < 0) {
			snprintf(
			    st->base.errmsg, sizeof(st->base.errmsg),
			    "postgresql: rollup_pending: a queued batch (layout %d) is neither "
			    "the compact form (layout %d) nor %d-field rollup_in rows",
			    layout, COLL_PENDING_LAYOUT_COMPACT, ROLLUP_IN_LEGACY_FIELDS);
			r = -EBADMSG;
		}
		coll_pending_settle(&set);
	}
	PQclear(res); /* the deltas' texts are in arena */
	if (r < 0)
		goto out_rollback;
	nd = coll_deltas_merge(set.d, set.n);
	if (nd > 0) {
		r = upsert_copied(st, set.d, nd, false);
		if (r < 0)
			goto out_rollback;
	}
	r = exec_cmd(st, "COMMIT");
	if (r < 0)
		goto out_rollback;
	free(set.d);
	return n;

out_rollback:
	PQclear(PQexec(st->conn, "ROLLBACK"));
	free(set.d);
	return r;
}

static int pg_fold(struct coll_store *s, bool wait)
{
	struct pg_store *st = (struct pg_store *)s;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	for (int attempt = 0;; attempt++) {
		r = fold_once(st, wait);
		if (r != -EAGAIN || attempt + 1 >= TX_RETRIES)
			break;
	}
	if (r == -EIO && PQstatus(st->conn) != CONNECTION_OK)
		st->session_ready = false;
	return r;
}

/* more: another upsert_deltas() may follow in this transaction. queue: the bucketed deltas go
 * to rollup_pending (ingest); rollup_open's are applied either way. */
static int upsert_deltas(struct pg_store *st, const struct coll_delta *d, size_t nd, bool more,
			 bool queue)
{
	size_t nb = 0;
	int r;

	/* deltas come sorted by table, rollup_open last */
	while (nb < nd && d[nb].table != COLL_ROLLUP_OPEN)
		nb++;
	if (nb > 0) {
		r = queue ? queue_deltas(st, d, nb) : upsert_copied(st, d, nb, more);
		if (r < 0)
			return r;
	}
	return upsert_values(st, d + nb, nd - nb);
}

/* Deltas of items (all taken as new) applied inside the caller's transaction: to every table,
 * or only to the tables in the mask only (bit 1u << table). */
static int apply_items(struct pg_store *st, struct coll_item *items, size_t n, unsigned only)
{
	_cleanup_free_ struct coll_delta *d = NULL;
	size_t nd = 0;
	int r;

	for (size_t i = 0; i < n; i++)
		items[i].is_new = true;
	r = coll_deltas_build(items, n, &d, &nd);
	if (r < 0)
		return r;
	if (only != COLL_ROLLUP_ALL)
		nd = coll_deltas_keep(d, nd, only);
	return upsert_deltas(st, d, nd, true, false);
}

#define REBUILD_CHUNK 4096

/* Migrations to v2 (every rollup) and v3 (the new ones): the rollups recomputed from every stored
 * task.end and task.sample through the same deltas as ingest, read with a cursor in chunks. */
static int rebuild_rollups(struct pg_store *st, unsigned only)
{
	_cleanup_free_ struct acct_record *recs = calloc(REBUILD_CHUNK, sizeof(*recs));
	_cleanup_free_ struct coll_item *items = calloc(REBUILD_CHUNK, sizeof(*items));
	int r;

	if (!recs || !items)
		return -ENOMEM;
	r = rollup_in_setup(st); /* migrations run before the session is set up */
	if (r < 0)
		return r;
	r = exec_cmd(st, "DECLARE corral_rebuild NO SCROLL CURSOR FOR SELECT record_id, body"
			 " FROM records WHERE type IN ('task.end', 'task.sample', 'node.sample')"
			 " ORDER BY time_ns, record_id");
	if (r < 0)
		return r;
	for (;;) {
		PGresult *res = PQexec(st->conn, "FETCH 4096 FROM corral_rebuild");
		int n;

		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			return res_err(st, "rebuilding rollups", res);
		n = PQntuples(res);
		for (int i = 0; i < n && r >= 0; i++) {
			char err[160];

			r = acct_record_decode(PQgetvalue(res, i, 1),
					       (size_t)PQgetlength(res, i, 1), &recs[i], err,
					       sizeof(err));
			if (r < 0)
				snprintf(st->base.errmsg, sizeof(st->base.errmsg),
					 "rebuilding rollups: record %.64s: %s",
					 PQgetvalue(res, i, 0), err);
			items[i] = (struct coll_item){.rec = &recs[i]};
		}
		PQclear(res);
		if (r >= 0 && n > 0)
			r = apply_items(st, items, (size_t)n, only);
		for (int i = 0; i < n; i++)
			acct_record_clear(&recs[i]);
		if (r < 0)
			return r;
		if (n < REBUILD_CHUNK)
			break;
	}
	return exec_cmd(st, "CLOSE corral_rebuild");
}

static int pg_rollup_batch(struct coll_store *s, struct coll_item *items, size_t n)
{
	struct pg_store *st = (struct pg_store *)s;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	r = exec_cmd(st, "BEGIN");
	if (r < 0)
		return r;
	r = apply_items(st, items, n, COLL_ROLLUP_ALL);
	if (r >= 0)
		r = exec_cmd(st, "COMMIT");
	if (r < 0)
		PQclear(PQexec(st->conn, "ROLLBACK"));
	return r;
}

/*
 * One attempt in one transaction. fast: COPY straight into records, which only works when
 * every record is new (the usual case: duplicates come from retried uploads); a unique
 * violation returns -EEXIST and the caller retries the slow way: COPY into the temp table and
 * INSERT .. ON CONFLICT DO NOTHING RETURNING, which tells new from duplicate.
 */
static int insert_once(struct pg_store *st, struct coll_item *items, size_t n,
		       const struct coll_deltas *pre, struct coll_item **sorted, const char *copy,
		       size_t copy_len, bool fast)
{
	_cleanup_free_ struct coll_delta *owned = NULL;
	const struct coll_delta *d = NULL;
	size_t nd = 0;
	PGresult *res;
	int r;

	for (size_t i = 0; i < n; i++)
		items[i].is_new = false;
	res = PQexec(st->conn, st->copy_sql[fast]);
	if (PQresultStatus(res) != PGRES_COPY_IN) {
		r = res_err(st, "COPY", res);
		goto out_rollback;
	}
	PQclear(res);
	if (PQputCopyData(st->conn, copy, (int)copy_len) != 1 ||
	    PQputCopyEnd(st->conn, NULL) != 1) {
		set_err(st, "COPY data", NULL);
		r = -EIO;
		goto out_rollback;
	}
	res = PQgetResult(st->conn);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		r = fast && state && strcmp(state, "23505") == 0 ? -EEXIST : 0;
		if (r == 0)
			r = res_err(st, "COPY end", res);
		else
			PQclear(res);
		while ((res = PQgetResult(st->conn)))
			PQclear(res);
		goto out_rollback;
	}
	PQclear(res);
	while ((res = PQgetResult(st->conn)))
		PQclear(res);

	if (fast) {
		for (size_t i = 0; i < n; i++)
			items[i].is_new = true;
		goto rollups;
	}
	res = PQexec(st->conn, "INSERT INTO records SELECT * FROM incoming ORDER BY record_id"
			       " ON CONFLICT (record_id) DO NOTHING RETURNING record_id");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		r = res_err(st, "INSERT", res);
		goto out_rollback;
	}
	for (int row = 0; row < PQntuples(res); row++)
		mark_new(sorted, n, PQgetvalue(res, row, 0));
	PQclear(res);

rollups:
	if (!st->base.no_rollups) {
		r = coll_deltas_of_new(items, n, pre, &d, &nd, &owned);
		if (r < 0)
			goto out_rollback;
		r = pipe_begin(st, d, nd);
		if (r < 0)
			goto out_rollback;
		if (r > 0) {
			r = pipe_end(st, upsert_deltas(st, d, nd, false, true));
			if (r < 0)
				goto out_rollback;
			return 0;
		}
		r = upsert_deltas(st, d, nd, false, true);
		if (r < 0)
			goto out_rollback;
	}
	r = exec_cmd(st, "COMMIT");
	if (r < 0)
		goto out_rollback;
	return 0;

out_rollback:
	PQclear(PQexec(st->conn, "ROLLBACK"));
	for (size_t i = 0; i < n; i++)
		items[i].is_new = false;
	return r;
}

static int pg_insert_batch(struct coll_store *s, struct coll_item *items, size_t n,
			   const struct coll_deltas *pre)
{
	struct pg_store *st = (struct pg_store *)s;
	_cleanup_free_ struct coll_item **sorted = NULL;
	_cleanup_free_ char *copy = NULL;
	size_t copy_len = 0;
	bool fast = true;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	sorted = malloc(n * sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		sorted[i] = &items[i];
	qsort(sorted, n, sizeof(*sorted), cmp_item_ptr);
	r = build_copy(items, n, &copy, &copy_len);
	if (r < 0)
		return r;
	for (int attempt = 0;; attempt++) {
		r = insert_once(st, items, n, pre, sorted, copy, copy_len, fast);
		if (r == -EEXIST) {
			fast = false; /* some are duplicates: find out which */
			continue;
		}
		if (r != -EAGAIN || attempt + 1 >= TX_RETRIES)
			break;
	}
	if (r == -EIO && PQstatus(st->conn) != CONNECTION_OK)
		st->session_ready = false;
	return r;
}

static const struct coll_sql_dialect pg_dialect = {
    .select = "SELECT record_id, type,"
	      " to_char(time AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
	      " node, coalesce(task_id, ''), coalesce(account, ''),"
	      " coalesce(\"user\", ''), body, time_ns FROM records WHERE true",
    .hash_expr = "(body->>'hash')",
    .hash_guard = NULL,
    .param = '$',
    .int_cast = "::bigint",
    .text_cast = "::text",
    .row_values = true,
};

static int pg_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud)
{
	struct pg_store *st = (struct pg_store *)s;
	struct coll_sql_param args[COLL_QUERY_PARAMS_MAX];
	char nums[COLL_QUERY_PARAMS_MAX][DECIMAL_STR_MAX(int64_t)];
	const char *params[COLL_QUERY_PARAMS_MAX];
	_cleanup_free_ char *sql = NULL;
	int np = 0, r;
	PGresult *res;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	r = coll_query_sql(&pg_dialect, q, &sql, args, &np);
	if (r < 0)
		return r;
	for (int k = 0; k < np; k++) {
		if (!args[k].s)
			snprintf(nums[k], sizeof(nums[k]), "%" PRId64, args[k].i);
		params[k] = args[k].s ?: nums[k];
	}
	res = PQexecParams(st->conn, sql, np, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "query", res);
	r = 0;
	for (int i = 0; i < PQntuples(res) && r >= 0; i++) {
		struct coll_row row = {
		    .record_id = PQgetvalue(res, i, 0),
		    .type = PQgetvalue(res, i, 1),
		    .time = PQgetvalue(res, i, 2),
		    .node = PQgetvalue(res, i, 3),
		    .task_id = PQgetvalue(res, i, 4),
		    .account = PQgetvalue(res, i, 5),
		    .user = PQgetvalue(res, i, 6),
		    .body = PQgetvalue(res, i, 7),
		    .time_ns = strtoull(PQgetvalue(res, i, 8), NULL, 10),
		};
		r = fn(&row, ud);
	}
	PQclear(res);
	return r < 0 ? r : 0;
}

/* One INSERT .. ON CONFLICT DO NOTHING of n texts bound as $1..$n: 1 if a row was added, 0 if
 * it was there. what names the table in a message. */
static int insert_texts(struct pg_store *st, const char *what, const char *sql,
			const char *const *v, int n)
{
	PGresult *res;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	res = PQexecParams(st->conn, sql, n, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return res_err(st, what, res);
	r = strcmp(PQcmdTuples(res), "0") != 0 ? 1 : 0;
	PQclear(res);
	return r;
}

static int pg_break_add(struct coll_store *s, const struct coll_audit_break *b)
{
	const char *v[] = {b->record_id, b->node, b->kind, b->reason, b->detected};

	return insert_texts((struct pg_store *)s, "audit_breaks insert",
			    "INSERT INTO audit_breaks (record_id, node, kind, reason, detected)"
			    " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (record_id) DO NOTHING",
			    v, (int)ARRAY_SIZE(v));
}

static int pg_body_get(struct coll_store *s, const char *record_id, char **ret)
{
	struct pg_store *st = (struct pg_store *)s;
	const char *params[] = {record_id};
	PGresult *res;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	res = PQexecParams(st->conn, "SELECT body FROM records WHERE record_id = $1", 1, NULL,
			   params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "records body", res);
	if (PQntuples(res) == 0) {
		r = -ENOENT;
	} else {
		*ret = strdup(PQgetvalue(res, 0, 0));
		r = *ret ? 0 : -ENOMEM;
	}
	PQclear(res);
	return r;
}

static int pg_conflict_add(struct coll_store *s, const struct coll_conflict *c)
{
	const char *v[] = {c->record_id,   c->node,	     c->detected,
			   c->stored_body, c->received_body, c->received_sha256};

	return insert_texts((struct pg_store *)s, "conflicts insert",
			    "INSERT INTO conflicts (record_id, node, detected, stored_body,"
			    " received_body, received_sha256) VALUES ($1, $2, $3, $4, $5, $6)"
			    " ON CONFLICT DO NOTHING",
			    v, (int)ARRAY_SIZE(v));
}

/* Hands each row of res (a PGRES_TUPLES_OK result) as ncols text columns to fn, and clears
 * it. */
static int each_text_row(PGresult *res, int ncols, coll_text_row_fn fn, void *sink)
{
	const char *cols[8];
	int r = 0;

	assert(ncols <= (int)ARRAY_SIZE(cols));
	for (int i = 0; i < PQntuples(res) && r >= 0; i++) {
		for (int c = 0; c < ncols; c++)
			cols[c] = PQgetvalue(res, i, c);
		r = fn(cols, sink);
	}
	PQclear(res);
	return r < 0 ? r : 0;
}

static int pg_conflict_query(struct coll_store *s, const char *node, coll_conflict_fn fn, void *ud)
{
	struct pg_store *st = (struct pg_store *)s;
	struct coll_text_sink sink = {.conflict = fn, .userdata = ud};
	const char *params[] = {node};
	PGresult *res;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	res = PQexecParams(st->conn,
			   "SELECT " COLL_CONFLICT_COLUMNS
			   " FROM conflicts WHERE node = $1 ORDER BY seq",
			   1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "conflicts query", res);
	return each_text_row(res, COLL_CONFLICT_NCOLS, coll_conflict_from_text, &sink);
}

static int pg_break_query(struct coll_store *s, const char *node, size_t limit, coll_break_fn fn,
			  void *ud)
{
	struct pg_store *st = (struct pg_store *)s;
	struct coll_text_sink sink = {.brk = fn, .userdata = ud};
	char lim[DECIMAL_STR_MAX(size_t)];
	const char *params[2] = {node, NULL};
	PGresult *res;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	if (limit) {
		snprintf(lim, sizeof(lim), "%zu", limit);
		params[1] = lim;
	}
	res = PQexecParams(st->conn,
			   "SELECT " COLL_BREAK_COLUMNS " FROM audit_breaks"
			   " WHERE ($1::text IS NULL OR node = $1) ORDER BY seq LIMIT $2::bigint",
			   2, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "audit_breaks query", res);
	return each_text_row(res, COLL_BREAK_NCOLS, coll_break_from_text, &sink);
}

/* The key columns of struct coll_rollup_row, '' where table t has none. */
static void select_keys(FILE *f, enum coll_rollup_table t)
{
	static const enum coll_key row_keys[] = {COLL_KEY_ACCOUNT,   COLL_KEY_USER,
						 COLL_KEY_LABEL_KEY, COLL_KEY_LABEL_VALUE,
						 COLL_KEY_JOB,	     COLL_KEY_NODE};
	const struct coll_rollup_def *def = coll_rollup_def(t);

	for (size_t i = 0; i < ARRAY_SIZE(row_keys); i++) {
		bool has = false;

		for (size_t k = 0; k < def->n_keys; k++)
			has |= def->keys[k] == row_keys[i];
		fprintf(f, ", %s", has ? coll_key_column(row_keys[i]) : "''");
	}
}

/* PostgreSQL's type oid of double precision (pg_type.h, stable) */
#define FLOAT8_OID 701

/* A double precision field of a binary result (8 bytes, big-endian IEEE 754); 0 for NULL. */
static double float8_of(const PGresult *res, int row, int col)
{
	const unsigned char *p = (const unsigned char *)PQgetvalue(res, row, col);
	uint64_t u = 0;
	double d;

	if (PQgetlength(res, row, col) != 8)
		return 0;
	for (int b = 0; b < 8; b++)
		u = u << 8 | p[b];
	memcpy(&d, &u, sizeof(d));
	return d;
}

/* Queued deltas folded first, so a read's rows include every batch committed before it; then
 * a connection for the read. */
static int fold_queued(struct coll_store *s)
{
	struct pg_store *st = (struct pg_store *)s;
	int r = 0;

	if (!st->base.no_rollups)
		r = pg_fold(s, true);
	return r < 0 ? r : ensure_conn(st);
}

static int pg_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			   const char *to, uint32_t sums, coll_rollup_fn fn, void *ud)
{
	struct pg_store *st = (struct pg_store *)s;
	const char *params[2] = {from, to};
	_cleanup_free_ char *sql = NULL, *pk = coll_rollup_pk(t);
	size_t len = 0;
	PGresult *res;
	FILE *f;
	int r;

	if (!pk)
		return -ENOMEM;
	r = fold_queued(s);
	if (r < 0)
		return r;
	f = open_memstream(&sql, &len);
	if (!f)
		return -ENOMEM;
	fputs("SELECT bucket", f);
	select_keys(f, t);
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		if (sums & 1u << k)
			fprintf(f, ", %s", coll_sum_name(k));
	fprintf(f,
		" FROM %s WHERE ($1::text IS NULL OR bucket >= $1) AND"
		" ($2::text IS NULL OR bucket < $2) ORDER BY %s",
		coll_rollup_table_name(t), pk);
	if (fclose(f) != 0)
		return -ENOMEM;
	/* binary results: the sums as the 8 bytes of their double (no shortest-digits printing
	 * on the server, no strtod here: a third of a large report's time), the keys as their
	 * bytes (NUL-terminated by libpq) */
	res = PQexecParams(st->conn, sql, 2, NULL, params, NULL, NULL, 1);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "rollup query", res);
	r = 0;
	for (int c = 7; c < PQnfields(res); c++)
		if (PQftype(res, c) != FLOAT8_OID)
			r = err_set(st->base.errmsg, sizeof(st->base.errmsg), -EPROTO,
				    "rollup query: column %s is not double precision",
				    PQfname(res, c));
	for (int i = 0; i < PQntuples(res) && r >= 0; i++) {
		struct coll_rollup_row row = {
		    .bucket = PQgetvalue(res, i, 0),
		    .account = PQgetvalue(res, i, 1),
		    .user = PQgetvalue(res, i, 2),
		    .label_key = PQgetvalue(res, i, 3),
		    .label_value = PQgetvalue(res, i, 4),
		    .job = PQgetvalue(res, i, 5),
		    .node = PQgetvalue(res, i, 6),
		};
		for (int k = 0, c = 7; k < _COLL_SUM_MAX; k++)
			if (sums & 1u << k)
				row.v[k] = float8_of(res, i, c++);
		r = fn(&row, ud);
	}
	PQclear(res);
	return r < 0 ? r : 0;
}

static int pg_open_query(struct coll_store *s, coll_open_fn fn, void *ud)
{
	struct pg_store *st = (struct pg_store *)s;
	_cleanup_free_ char *sql = NULL;
	size_t len = 0;
	PGresult *res;
	FILE *f;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	f = open_memstream(&sql, &len);
	if (!f)
		return -ENOMEM;
	fputs("SELECT node, task_id, account, \"user\", job, labels, start_ns, sample_ns", f);
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		fprintf(f, ", %s", coll_sum_name(k));
	fputs(" FROM rollup_open o WHERE NOT EXISTS (SELECT 1 FROM records r WHERE"
	      " r.task_id = o.task_id AND r.node = o.node AND r.type = 'task.end')"
	      " ORDER BY node, task_id",
	      f);
	if (fclose(f) != 0)
		return -ENOMEM;
	res = PQexec(st->conn, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "open tasks query", res);
	r = 0;
	for (int i = 0; i < PQntuples(res) && r >= 0; i++) {
		struct coll_open_row row = {
		    .node = PQgetvalue(res, i, 0),
		    .task_id = PQgetvalue(res, i, 1),
		    .account = PQgetvalue(res, i, 2),
		    .user = PQgetvalue(res, i, 3),
		    .job = PQgetvalue(res, i, 4),
		    .labels = PQgetvalue(res, i, 5),
		    .start_ns = strtoull(PQgetvalue(res, i, 6), NULL, 10),
		    .sample_ns = strtoull(PQgetvalue(res, i, 7), NULL, 10),
		};
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			row.v[k] = strtod(PQgetvalue(res, i, 8 + k), NULL);
		r = fn(&row, ud);
	}
	PQclear(res);
	return r < 0 ? r : 0;
}

/* ?N (every parameter is text here) as $N::text */
static char *pg_params(const char *sql)
{
	char *out = malloc(strlen(sql) * 7 + 1), *o = out;

	if (!out)
		return NULL;
	for (const char *p = sql; *p; p++) {
		if (*p == '?' && p[1] >= '0' && p[1] <= '9') {
			*o++ = '$';
			while (p[1] >= '0' && p[1] <= '9')
				*o++ = *++p;
			o = stpcpy(o, "::text");
		} else
			*o++ = *p;
	}
	*o = 0;
	return out;
}

static int pg_text_query(struct coll_store *s, const char *sql, int n, const char *const *params,
			 coll_text_fn fn, void *ud)
{
	struct pg_store *st = (struct pg_store *)s;
	_cleanup_free_ char *q = pg_params(sql);
	_cleanup_free_ const char **cols = NULL;
	PGresult *res;
	int r, nc;

	if (!q)
		return -ENOMEM;
	r = fold_queued(s);
	if (r < 0)
		return r;
	res = PQexecParams(st->conn, q, n, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "query", res);
	nc = PQnfields(res);
	cols = calloc((size_t)nc + 1, sizeof(*cols));
	r = cols ? 0 : -ENOMEM;
	for (int i = 0; i < PQntuples(res) && r >= 0; i++) {
		for (int c = 0; c < nc; c++)
			cols[c] = PQgetisnull(res, i, c) ? NULL : PQgetvalue(res, i, c);
		r = fn(cols, nc, ud);
	}
	PQclear(res);
	return r < 0 ? r : 0;
}

static int single_value(struct pg_store *st, const char *sql, int64_t *ret)
{
	PGresult *res;
	int r = ensure_conn(st);

	if (r < 0)
		return r;
	res = PQexec(st->conn, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) < 1)
		return res_err(st, sql, res);
	*ret = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return 0;
}

static int pg_count(struct coll_store *s, uint64_t *ret)
{
	int64_t v = 0;
	int r = single_value((struct pg_store *)s, "SELECT count(*) FROM records", &v);

	if (r >= 0)
		*ret = (uint64_t)v;
	return r;
}

static int pg_ping(struct coll_store *s)
{
	int64_t v;

	return single_value((struct pg_store *)s, "SELECT 1", &v);
}

static int pg_schema_version(struct coll_store *s, int *ret)
{
	int64_t v = 0;
	int r = single_value((struct pg_store *)s, "SELECT max(version) FROM schema_version", &v);

	if (r >= 0)
		*ret = (int)v;
	return r;
}

const struct coll_store_ops coll_store_pg_ops = {
    .name = "postgresql",
    .single_writer = false,
    .default_connections = 4,
    .open = pg_open,
    .close = pg_close,
    .insert_batch = pg_insert_batch,
    .query = pg_query,
    .rollup_query = pg_rollup_query,
    .open_query = pg_open_query,
    .text_query = pg_text_query,
    .day_of_ns_sql = {"to_char(to_timestamp(", " / 1000000000) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"},
    .rollup_batch = pg_rollup_batch,
    .fold = pg_fold,
    .count = pg_count,
    .ping = pg_ping,
    .schema_version = pg_schema_version,
    .break_add = pg_break_add,
    .break_query = pg_break_query,
    .body_get = pg_body_get,
    .conflict_add = pg_conflict_add,
    .conflict_query = pg_conflict_query,
};
