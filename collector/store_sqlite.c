/* SPDX-License-Identifier: MIT */
/*
 * SQLite backend. WAL journal (readers never block the writer) with synchronous=FULL: a batch
 * is acknowledged only after COMMIT and the agent then deletes it from its spool, so a commit
 * must survive a power cut, not just a process crash (NORMAL would only guarantee the latter).
 * The cost is one fsync of the WAL per batch, amortised over up to max_records records.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "collector/store.h"
#include "common/macro.h"

struct sqlite_store {
	struct coll_store base; /* first */
	sqlite3 *db;
	sqlite3_stmt *insert;
	sqlite3_stmt *rollup[_COLL_ROLLUP_MAX];
	sqlite3_stmt *begin, *commit, *rollback;
};

static int map_err(struct sqlite_store *st, int rc)
{
	snprintf(st->base.errmsg, sizeof(st->base.errmsg), "sqlite: %s",
		 st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EAGAIN;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return -EBADMSG;
	default:
		return -EIO;
	}
}

static int exec(struct sqlite_store *st, const char *sql)
{
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : map_err(st, rc);
}

static int step_done(struct sqlite_store *st, sqlite3_stmt *stmt)
{
	int rc = sqlite3_step(stmt);

	sqlite3_reset(stmt);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : map_err(st, rc);
}

/* Rollup DDL: the sums of enum coll_sum as REAL columns, keyed by bucket + dimensions. */
static char *rollup_ddl(enum coll_rollup_table t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	fprintf(f, "CREATE TABLE %s (bucket TEXT NOT NULL, ", coll_rollup_table_name(t));
	if (t == COLL_ROLLUP_LABEL_DAY)
		fputs("label_key TEXT NOT NULL, label_value TEXT NOT NULL, ", f);
	fputs("account TEXT NOT NULL, \"user\" TEXT NOT NULL", f);
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		fprintf(f, ", %s REAL NOT NULL DEFAULT 0", coll_sum_name(s));
	fprintf(f, ", PRIMARY KEY (bucket, %saccount, \"user\"));",
		t == COLL_ROLLUP_LABEL_DAY ? "label_key, label_value, " : "");
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static char *rollup_upsert_sql(enum coll_rollup_table t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int np = t == COLL_ROLLUP_LABEL_DAY ? 5 : 3;

	if (!f)
		return NULL;
	fprintf(f, "INSERT INTO %s (bucket, %saccount, \"user\"", coll_rollup_table_name(t),
		t == COLL_ROLLUP_LABEL_DAY ? "label_key, label_value, " : "");
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		fprintf(f, ", %s", coll_sum_name(s));
	fputs(") VALUES (", f);
	for (int i = 0; i < np + _COLL_SUM_MAX; i++)
		fprintf(f, "%s?", i ? ", " : "");
	fprintf(f, ") ON CONFLICT (bucket, %saccount, \"user\") DO UPDATE SET ",
		t == COLL_ROLLUP_LABEL_DAY ? "label_key, label_value, " : "");
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		fprintf(f, "%s%s = %s + excluded.%s", s ? ", " : "", coll_sum_name(s),
			coll_sum_name(s), coll_sum_name(s));
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static const char records_ddl[] =
    "CREATE TABLE records ("
    " record_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, time TEXT NOT NULL,"
    " time_ns INTEGER NOT NULL, node TEXT NOT NULL, task_id TEXT, job TEXT, \"user\" TEXT,"
    " account TEXT, labels TEXT, req_cpus REAL, req_memory_bytes INTEGER, req_gpus INTEGER,"
    " req_time_limit_s INTEGER, wall_ns INTEGER, cpu_user_ns INTEGER, cpu_system_ns INTEGER,"
    " memory_peak_bytes INTEGER, memory_byte_seconds REAL, io_read_bytes INTEGER,"
    " io_write_bytes INTEGER, net_rx_bytes INTEGER, net_tx_bytes INTEGER, gpu_seconds REAL,"
    " exit_status TEXT, body TEXT NOT NULL);"
    "CREATE INDEX records_type_time ON records(type, time_ns);"
    "CREATE INDEX records_task ON records(task_id);";

static int migrate(struct sqlite_store *st)
{
	sqlite3_stmt *stmt = NULL;
	int version = 0, r;

	r = exec(st, "BEGIN IMMEDIATE;"
		     "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);");
	if (r < 0)
		return r;
	if (sqlite3_prepare_v2(st->db, "SELECT max(version) FROM schema_version", -1, &stmt,
			       NULL) != SQLITE_OK) {
		r = map_err(st, sqlite3_errcode(st->db));
		goto out_rollback;
	}
	if (sqlite3_step(stmt) == SQLITE_ROW)
		version = sqlite3_column_int(stmt, 0);
	sqlite3_finalize(stmt);

	if (version > COLL_SCHEMA_VERSION) {
		snprintf(st->base.errmsg, sizeof(st->base.errmsg),
			 "database schema version %d is newer than this collector (%d)", version,
			 COLL_SCHEMA_VERSION);
		r = -EPROTO;
		goto out_rollback;
	}
	if (version < 1) {
		r = exec(st, records_ddl);
		if (r < 0)
			goto out_rollback;
		for (int t = 0; t < _COLL_ROLLUP_MAX; t++) {
			_cleanup_free_ char *ddl = rollup_ddl(t);

			if (!ddl) {
				r = -ENOMEM;
				goto out_rollback;
			}
			r = exec(st, ddl);
			if (r < 0)
				goto out_rollback;
		}
		r = exec(st, "DELETE FROM schema_version; INSERT INTO schema_version VALUES (1);");
		if (r < 0)
			goto out_rollback;
	}
	/* Future migrations: if (version < 2) { ... } */
	return exec(st, "COMMIT");

out_rollback:
	sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return r;
}

static int prepare(struct sqlite_store *st, const char *sql, sqlite3_stmt **ret)
{
	int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, ret, NULL);

	return rc == SQLITE_OK ? 0 : map_err(st, rc);
}

static void sqlite_close(struct coll_store *s)
{
	struct sqlite_store *st = (struct sqlite_store *)s;

	sqlite3_finalize(st->insert);
	for (int t = 0; t < _COLL_ROLLUP_MAX; t++)
		sqlite3_finalize(st->rollup[t]);
	sqlite3_finalize(st->begin);
	sqlite3_finalize(st->commit);
	sqlite3_finalize(st->rollback);
	sqlite3_close(st->db);
	free(st);
}

static int sqlite_open(const char *uri, struct coll_store **ret, char *err, size_t errlen)
{
	struct sqlite_store *st;
	const char *path = uri + strlen("sqlite:");
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int rc, r;

	if (strncmp(path, "//", 2) == 0)
		path += 2;
	if (!*path) {
		snprintf(err, errlen, "sqlite: empty path");
		return -EINVAL;
	}
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	rc = sqlite3_open_v2(
	    path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		r = map_err(st, rc);
		goto out_close;
	}
	sqlite3_busy_timeout(st->db, 5000);
	r = exec(st, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;");
	if (r < 0)
		goto out_close;
	r = migrate(st);
	if (r < 0)
		goto out_close;

	f = open_memstream(&buf, &len);
	if (!f) {
		r = -ENOMEM;
		goto out_close;
	}
	fputs("INSERT INTO records (", f);
	for (int c = 0; c < COLL_N_COLS; c++)
		fprintf(f, "%s%s", c ? ", " : "", coll_cols[c].name);
	fputs(") VALUES (", f);
	for (int c = 0; c < COLL_N_COLS; c++)
		fprintf(f, "%s?", c ? ", " : "");
	fputs(") ON CONFLICT (record_id) DO NOTHING", f);
	if (fclose(f) != 0) {
		free(buf);
		r = -ENOMEM;
		goto out_close;
	}
	r = prepare(st, buf, &st->insert);
	free(buf);
	if (r < 0)
		goto out_close;
	for (int t = 0; t < _COLL_ROLLUP_MAX; t++) {
		_cleanup_free_ char *sql = rollup_upsert_sql(t);

		if (!sql) {
			r = -ENOMEM;
			goto out_close;
		}
		r = prepare(st, sql, &st->rollup[t]);
		if (r < 0)
			goto out_close;
	}
	if ((r = prepare(st, "BEGIN IMMEDIATE", &st->begin)) < 0 ||
	    (r = prepare(st, "COMMIT", &st->commit)) < 0 ||
	    (r = prepare(st, "ROLLBACK", &st->rollback)) < 0)
		goto out_close;
	*ret = &st->base;
	return 0;

out_close:
	snprintf(err, errlen, "%s: %s", path, st->base.errmsg);
	sqlite_close(&st->base);
	return r;
}

static int bind_item(struct sqlite_store *st, const struct coll_item *it)
{
	struct coll_item_scratch sc = {0};
	struct coll_value v[COLL_N_COLS];
	sqlite3_stmt *s = st->insert;
	int r, rc;

	r = coll_item_values(it, &sc, v);
	if (r < 0)
		goto out;
	for (int c = 0; c < COLL_N_COLS; c++) {
		if (v[c].null) {
			sqlite3_bind_null(s, c + 1);
			continue;
		}
		switch (coll_cols[c].kind) {
		case COLL_COL_INT:
			sqlite3_bind_int64(s, c + 1, v[c].i);
			break;
		case COLL_COL_REAL:
			sqlite3_bind_double(s, c + 1, v[c].d);
			break;
		default:
			sqlite3_bind_text(s, c + 1, v[c].s, (int)v[c].len, SQLITE_TRANSIENT);
			break;
		}
	}
	rc = sqlite3_step(s);
	if (rc != SQLITE_DONE)
		r = map_err(st, rc);
	else
		r = sqlite3_changes(st->db) > 0 ? 1 : 0;
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
out:
	coll_item_scratch_free(&sc);
	return r;
}

static int apply_deltas(struct sqlite_store *st, const struct coll_delta *d, size_t nd)
{
	for (size_t i = 0; i < nd; i++) {
		sqlite3_stmt *s = st->rollup[d[i].table];
		int p = 1, r;

		sqlite3_bind_text(s, p++, d[i].bucket, -1, SQLITE_STATIC);
		if (d[i].table == COLL_ROLLUP_LABEL_DAY) {
			sqlite3_bind_text(s, p++, d[i].label_key, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, p++, d[i].label_value, -1, SQLITE_STATIC);
		}
		sqlite3_bind_text(s, p++, d[i].account, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, p++, d[i].user, -1, SQLITE_STATIC);
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			sqlite3_bind_double(s, p++, d[i].v[k]);
		r = step_done(st, s);
		if (r < 0)
			return r;
	}
	return 0;
}

static int sqlite_insert_batch(struct coll_store *s, struct coll_item *items, size_t n)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	_cleanup_free_ struct coll_delta *d = NULL;
	size_t nd = 0;
	int r;

	r = step_done(st, st->begin);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		r = bind_item(st, &items[i]);
		if (r < 0)
			goto out_rollback;
		items[i].is_new = r > 0;
	}
	if (!s->no_rollups) {
		r = coll_deltas_build(items, n, &d, &nd);
		if (r < 0)
			goto out_rollback;
		r = apply_deltas(st, d, nd);
		if (r < 0)
			goto out_rollback;
	}
	r = step_done(st, st->commit);
	if (r < 0)
		goto out_rollback;
	return 0;

out_rollback:
	step_done(st, st->rollback);
	for (size_t i = 0; i < n; i++)
		items[i].is_new = false;
	return r;
}

static const char *col_text(sqlite3_stmt *s, int i)
{
	const unsigned char *t = sqlite3_column_text(s, i);

	return t ? (const char *)t : "";
}

static int sqlite_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	sqlite3_stmt *stmt = NULL;
	int rc, r = 0;

	rc = sqlite3_prepare_v2(
	    st->db,
	    "SELECT record_id, type, time, node, task_id, account, \"user\", body"
	    " FROM records WHERE (?1 IS NULL OR type = ?1)"
	    " AND (?2 IS NULL OR node = ?2) AND (?3 IS NULL OR task_id = ?3)"
	    " ORDER BY time_ns, record_id LIMIT ?4",
	    -1, &stmt, NULL);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	if (q->type)
		sqlite3_bind_text(stmt, 1, q->type, -1, SQLITE_STATIC);
	if (q->node)
		sqlite3_bind_text(stmt, 2, q->node, -1, SQLITE_STATIC);
	if (q->task_id)
		sqlite3_bind_text(stmt, 3, q->task_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 4, q->limit ? (int64_t)MIN(q->limit, (size_t)INT64_MAX) : -1);
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		struct coll_row row = {
		    .record_id = col_text(stmt, 0),
		    .type = col_text(stmt, 1),
		    .time = col_text(stmt, 2),
		    .node = col_text(stmt, 3),
		    .task_id = col_text(stmt, 4),
		    .account = col_text(stmt, 5),
		    .user = col_text(stmt, 6),
		    .body = col_text(stmt, 7),
		};
		r = fn(&row, ud);
		if (r < 0)
			break;
	}
	if (r >= 0 && rc != SQLITE_DONE)
		r = map_err(st, rc);
	sqlite3_finalize(stmt);
	return r < 0 ? r : 0;
}

static int sqlite_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			       const char *to, coll_rollup_fn fn, void *ud)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	bool lab = t == COLL_ROLLUP_LABEL_DAY;
	sqlite3_stmt *stmt = NULL;
	char *sql = NULL;
	size_t len = 0;
	FILE *f;
	int rc, r = 0;

	f = open_memstream(&sql, &len);
	if (!f)
		return -ENOMEM;
	fprintf(f, "SELECT bucket, account, \"user\", %s",
		lab ? "label_key, label_value" : "'', ''");
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		fprintf(f, ", %s", coll_sum_name(k));
	fprintf(f,
		" FROM %s WHERE (?1 IS NULL OR bucket >= ?1) AND (?2 IS NULL OR bucket < ?2)"
		" ORDER BY bucket, %saccount, \"user\"",
		coll_rollup_table_name(t), lab ? "label_key, label_value, " : "");
	if (fclose(f) != 0) {
		free(sql);
		return -ENOMEM;
	}
	rc = sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL);
	free(sql);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	if (from)
		sqlite3_bind_text(stmt, 1, from, -1, SQLITE_STATIC);
	if (to)
		sqlite3_bind_text(stmt, 2, to, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		struct coll_rollup_row row = {
		    .bucket = col_text(stmt, 0),
		    .account = col_text(stmt, 1),
		    .user = col_text(stmt, 2),
		    .label_key = col_text(stmt, 3),
		    .label_value = col_text(stmt, 4),
		};
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			row.v[k] = sqlite3_column_double(stmt, 5 + k);
		r = fn(&row, ud);
		if (r < 0)
			break;
	}
	if (r >= 0 && rc != SQLITE_DONE)
		r = map_err(st, rc);
	sqlite3_finalize(stmt);
	return r < 0 ? r : 0;
}

static int single_int(struct sqlite_store *st, const char *sql, int64_t *ret)
{
	sqlite3_stmt *stmt = NULL;
	int rc = sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL);

	if (rc != SQLITE_OK)
		return map_err(st, rc);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW)
		*ret = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return rc == SQLITE_ROW ? 0 : map_err(st, rc);
}

static int sqlite_count(struct coll_store *s, uint64_t *ret)
{
	int64_t v = 0;
	int r = single_int((struct sqlite_store *)s, "SELECT count(*) FROM records", &v);

	if (r >= 0)
		*ret = (uint64_t)v;
	return r;
}

static int sqlite_ping(struct coll_store *s)
{
	int64_t v;

	return single_int((struct sqlite_store *)s, "SELECT 1", &v);
}

static int sqlite_schema_version(struct coll_store *s, int *ret)
{
	int64_t v = 0;
	int r = single_int((struct sqlite_store *)s, "SELECT max(version) FROM schema_version", &v);

	if (r >= 0)
		*ret = (int)v;
	return r;
}

const struct coll_store_ops coll_store_sqlite_ops = {
    .name = "sqlite",
    .open = sqlite_open,
    .close = sqlite_close,
    .insert_batch = sqlite_insert_batch,
    .query = sqlite_query,
    .rollup_query = sqlite_rollup_query,
    .count = sqlite_count,
    .ping = sqlite_ping,
    .schema_version = sqlite_schema_version,
};
