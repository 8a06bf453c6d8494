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
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "collector/store.h"
#include "common/macro.h"

#define MIGRATION_LOCK_KEY 0x636f7272616cLL /* "corral" */
#define TX_RETRIES	   3

struct pg_store {
	struct coll_store base; /* first */
	PGconn *conn;
	bool session_ready; /* temp table + settings exist on this connection */
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

static char *sum_cols_ddl(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		fprintf(f, ", %s DOUBLE PRECISION NOT NULL DEFAULT 0", coll_sum_name(s));
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static int migrate(struct pg_store *st)
{
	_cleanup_free_ char *sums = NULL, *ddl = NULL;
	PGresult *res;
	int version = 0, r;
	char lock[128];

	snprintf(lock, sizeof(lock), "BEGIN; SELECT pg_advisory_xact_lock(%lld);",
		 MIGRATION_LOCK_KEY);
	r = exec_cmd(st, lock);
	if (r < 0)
		return r;
	r = exec_cmd(st, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
	if (r < 0)
		goto out_rollback;
	res = PQexec(st->conn, "SELECT coalesce(max(version), 0) FROM schema_version");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		r = res_err(st, "schema_version", res);
		goto out_rollback;
	}
	version = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	if (version > COLL_SCHEMA_VERSION) {
		snprintf(st->base.errmsg, sizeof(st->base.errmsg),
			 "database schema version %d is newer than this collector (%d)", version,
			 COLL_SCHEMA_VERSION);
		r = -EPROTO;
		goto out_rollback;
	}
	if (version < 1) {
		sums = sum_cols_ddl();
		if (!sums) {
			r = -ENOMEM;
			goto out_rollback;
		}
		if (asprintf(
			&ddl,
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
			"CREATE INDEX records_task ON records(task_id);"
			"CREATE TABLE rollup_hour (bucket TEXT NOT NULL, account TEXT NOT NULL,"
			" \"user\" TEXT NOT NULL%s, PRIMARY KEY (bucket, account, \"user\"));"
			"CREATE TABLE rollup_day (bucket TEXT NOT NULL, account TEXT NOT NULL,"
			" \"user\" TEXT NOT NULL%s, PRIMARY KEY (bucket, account, \"user\"));"
			"CREATE TABLE rollup_label_day (bucket TEXT NOT NULL,"
			" label_key TEXT NOT NULL, label_value TEXT NOT NULL,"
			" account TEXT NOT NULL, \"user\" TEXT NOT NULL%s,"
			" PRIMARY KEY (bucket, label_key, label_value, account, \"user\"));"
			"DELETE FROM schema_version; INSERT INTO schema_version VALUES (1);",
			sums, sums, sums) < 0) {
			ddl = NULL;
			r = -ENOMEM;
			goto out_rollback;
		}
		r = exec_cmd(st, ddl);
		if (r < 0)
			goto out_rollback;
	}
	return exec_cmd(st, "COMMIT");

out_rollback:
	PQclear(PQexec(st->conn, "ROLLBACK"));
	return r;
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
	st->session_ready = true;
	return 0;
}

/* Make sure the connection is usable; reset it after a failure. */
static int ensure_conn(struct pg_store *st)
{
	if (PQstatus(st->conn) != CONNECTION_OK) {
		st->session_ready = false;
		PQreset(st->conn);
		if (PQstatus(st->conn) != CONNECTION_OK) {
			set_err(st, "connect", NULL);
			return -EIO;
		}
	}
	return session_setup(st);
}

static void pg_close(struct coll_store *s)
{
	struct pg_store *st = (struct pg_store *)s;

	PQfinish(st->conn);
	free(st);
}

static int pg_open(const char *uri, struct coll_store **ret, char *err, size_t errlen)
{
	struct pg_store *st = calloc(1, sizeof(*st));
	int r;

	if (!st)
		return -ENOMEM;
	st->conn = PQconnectdb(uri);
	if (!st->conn) {
		free(st);
		return -ENOMEM;
	}
	if (PQstatus(st->conn) != CONNECTION_OK) {
		set_err(st, "connect", NULL);
		r = -EIO;
		goto out_close;
	}
	r = exec_cmd(st, "SET client_min_messages = warning");
	if (r < 0)
		goto out_close;
	r = migrate(st);
	if (r < 0)
		goto out_close;
	r = session_setup(st);
	if (r < 0)
		goto out_close;
	*ret = &st->base;
	return 0;

out_close:
	snprintf(err, errlen, "%s", st->base.errmsg);
	pg_close(&st->base);
	return r;
}

static void copy_escape(FILE *f, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		switch (s[i]) {
		case '\\':
			fputs("\\\\", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		default:
			fputc(s[i], f);
		}
	}
}

static int build_copy(const struct coll_item *items, size_t n, char **ret, size_t *ret_len)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int r = 0;

	if (!f)
		return -ENOMEM;
	for (size_t i = 0; i < n && r >= 0; i++) {
		struct coll_item_scratch sc = {0};
		struct coll_value v[COLL_N_COLS];

		r = coll_item_values(&items[i], &sc, v);
		for (int c = 0; c < COLL_N_COLS && r >= 0; c++) {
			if (c)
				fputc('\t', f);
			if (v[c].null)
				fputs("\\N", f);
			else if (coll_cols[c].kind == COLL_COL_INT)
				fprintf(f, "%" PRId64, v[c].i);
			else if (coll_cols[c].kind == COLL_COL_REAL)
				fprintf(f, "%.17g", v[c].d);
			else
				copy_escape(f, v[c].s, v[c].len);
		}
		fputc('\n', f);
		coll_item_scratch_free(&sc);
	}
	if (fclose(f) != 0 || r < 0) {
		free(buf);
		return r < 0 ? r : -ENOMEM;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
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

static int upsert_deltas(struct pg_store *st, const struct coll_delta *d, size_t nd)
{
	for (size_t start = 0; start < nd;) {
		enum coll_rollup_table t = d[start].table;
		bool lab = t == COLL_ROLLUP_LABEL_DAY;
		int nkey = lab ? 5 : 3, per = nkey + _COLL_SUM_MAX;
		size_t end = start, nrows, np = 0;
		_cleanup_free_ char *sql = NULL, *nums = NULL;
		_cleanup_free_ const char **params = NULL;
		size_t sqllen = 0;
		FILE *f;
		PGresult *res;

		while (end < nd && d[end].table == t && end - start < 1000)
			end++;
		nrows = end - start;
		params = calloc(nrows * per, sizeof(char *));
		nums = malloc(nrows * _COLL_SUM_MAX * 32);
		if (!params || !nums)
			return -ENOMEM;
		f = open_memstream(&sql, &sqllen);
		if (!f)
			return -ENOMEM;
		fprintf(f, "INSERT INTO %s (bucket, %saccount, \"user\"", coll_rollup_table_name(t),
			lab ? "label_key, label_value, " : "");
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			fprintf(f, ", %s", coll_sum_name(k));
		fputs(") VALUES ", f);
		for (size_t i = start; i < end; i++) {
			fprintf(f, "%s(", i > start ? ", " : "");
			params[np++] = d[i].bucket;
			if (lab) {
				params[np++] = d[i].label_key;
				params[np++] = d[i].label_value;
			}
			params[np++] = d[i].account;
			params[np++] = d[i].user;
			for (int k = 0; k < _COLL_SUM_MAX; k++) {
				char *num = nums + ((i - start) * _COLL_SUM_MAX + k) * 32;

				snprintf(num, 32, "%.17g", d[i].v[k]);
				params[np++] = num;
			}
			for (int k = 0; k < per; k++)
				fprintf(f, "%s$%zu%s", k ? ", " : "", np - per + k + 1,
					k >= nkey ? "::float8" : "");
			fputc(')', f);
		}
		fprintf(f, " ON CONFLICT (bucket, %saccount, \"user\") DO UPDATE SET ",
			lab ? "label_key, label_value, " : "");
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			fprintf(f, "%s%s = %s.%s + excluded.%s", k ? ", " : "", coll_sum_name(k),
				coll_rollup_table_name(t), coll_sum_name(k), coll_sum_name(k));
		if (fclose(f) != 0)
			return -ENOMEM;
		res = PQexecParams(st->conn, sql, (int)np, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			return res_err(st, "rollup upsert", res);
		PQclear(res);
		start = end;
	}
	return 0;
}

static int insert_once(struct pg_store *st, struct coll_item *items, size_t n,
		       struct coll_item **sorted, const char *copy, size_t copy_len)
{
	_cleanup_free_ struct coll_delta *d = NULL;
	_cleanup_free_ char *copy_sql = NULL;
	size_t nd = 0, cl = 0;
	PGresult *res;
	FILE *f;
	int r;

	for (size_t i = 0; i < n; i++)
		items[i].is_new = false;
	r = exec_cmd(st, "BEGIN");
	if (r < 0)
		return r;
	f = open_memstream(&copy_sql, &cl);
	if (!f) {
		r = -ENOMEM;
		goto out_rollback;
	}
	fputs("COPY incoming (", f);
	for (int c = 0; c < COLL_N_COLS; c++)
		fprintf(f, "%s%s", c ? ", " : "", coll_cols[c].name);
	fputs(") FROM STDIN", f);
	if (fclose(f) != 0) {
		r = -ENOMEM;
		goto out_rollback;
	}
	res = PQexec(st->conn, copy_sql);
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
		r = res_err(st, "COPY end", res);
		while ((res = PQgetResult(st->conn)))
			PQclear(res);
		goto out_rollback;
	}
	PQclear(res);
	while ((res = PQgetResult(st->conn)))
		PQclear(res);

	res = PQexec(st->conn, "INSERT INTO records SELECT * FROM incoming ORDER BY record_id"
			       " ON CONFLICT (record_id) DO NOTHING RETURNING record_id");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		r = res_err(st, "INSERT", res);
		goto out_rollback;
	}
	for (int row = 0; row < PQntuples(res); row++)
		mark_new(sorted, n, PQgetvalue(res, row, 0));
	PQclear(res);

	if (!st->base.no_rollups) {
		r = coll_deltas_build(items, n, &d, &nd);
		if (r < 0)
			goto out_rollback;
		r = upsert_deltas(st, d, nd);
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

static int pg_insert_batch(struct coll_store *s, struct coll_item *items, size_t n)
{
	struct pg_store *st = (struct pg_store *)s;
	_cleanup_free_ struct coll_item **sorted = NULL;
	_cleanup_free_ char *copy = NULL;
	size_t copy_len = 0;
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
		r = insert_once(st, items, n, sorted, copy, copy_len);
		if (r != -EAGAIN || attempt + 1 >= TX_RETRIES)
			break;
	}
	if (r == -EIO && PQstatus(st->conn) != CONNECTION_OK)
		st->session_ready = false;
	return r;
}

static int pg_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud)
{
	struct pg_store *st = (struct pg_store *)s;
	char limit[DECIMAL_STR_MAX(size_t)];
	const char *params[4] = {q->type, q->node, q->task_id, NULL};
	PGresult *res;
	int r;

	r = ensure_conn(st);
	if (r < 0)
		return r;
	if (q->limit) {
		snprintf(limit, sizeof(limit), "%zu", q->limit);
		params[3] = limit;
	}
	res = PQexecParams(
	    st->conn,
	    "SELECT record_id, type,"
	    " to_char(time AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
	    " node, coalesce(task_id, ''), coalesce(account, ''),"
	    " coalesce(\"user\", ''), body FROM records"
	    " WHERE ($1::text IS NULL OR type = $1) AND ($2::text IS NULL OR node = $2)"
	    " AND ($3::text IS NULL OR task_id = $3)"
	    " ORDER BY time_ns, record_id LIMIT $4::bigint",
	    4, NULL, params, NULL, NULL, 0);
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
		};
		r = fn(&row, ud);
	}
	PQclear(res);
	return r < 0 ? r : 0;
}

static int pg_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			   const char *to, coll_rollup_fn fn, void *ud)
{
	struct pg_store *st = (struct pg_store *)s;
	bool lab = t == COLL_ROLLUP_LABEL_DAY;
	const char *params[2] = {from, to};
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
	fprintf(f, "SELECT bucket, account, \"user\", %s",
		lab ? "label_key, label_value" : "'', ''");
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		fprintf(f, ", %s", coll_sum_name(k));
	fprintf(f,
		" FROM %s WHERE ($1::text IS NULL OR bucket >= $1) AND"
		" ($2::text IS NULL OR bucket < $2) ORDER BY bucket, %saccount, \"user\"",
		coll_rollup_table_name(t), lab ? "label_key, label_value, " : "");
	if (fclose(f) != 0)
		return -ENOMEM;
	res = PQexecParams(st->conn, sql, 2, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res_err(st, "rollup query", res);
	r = 0;
	for (int i = 0; i < PQntuples(res) && r >= 0; i++) {
		struct coll_rollup_row row = {
		    .bucket = PQgetvalue(res, i, 0),
		    .account = PQgetvalue(res, i, 1),
		    .user = PQgetvalue(res, i, 2),
		    .label_key = PQgetvalue(res, i, 3),
		    .label_value = PQgetvalue(res, i, 4),
		};
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			row.v[k] = strtod(PQgetvalue(res, i, 5 + k), NULL);
		r = fn(&row, ud);
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
    .open = pg_open,
    .close = pg_close,
    .insert_batch = pg_insert_batch,
    .query = pg_query,
    .rollup_query = pg_rollup_query,
    .count = pg_count,
    .ping = pg_ping,
    .schema_version = pg_schema_version,
};
