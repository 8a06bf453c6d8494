/* SPDX-License-Identifier: MIT */
/*
 * SQLite backend. WAL journal (readers never block the writer) with synchronous=FULL: a batch
 * is acknowledged only after COMMIT and the agent then deletes it from its spool, so a commit
 * must survive a power cut, not just a process crash (NORMAL would only guarantee the latter).
 * The cost is one fsync of the WAL per batch, amortised over up to max_records records.
 * Checkpoints every 10,000 WAL pages instead of SQLite's 1,000: every batch rewrites the same
 * index and rollup pages, which a checkpoint copies once however often they changed
 * (docs/collector.md, measured with ingest.sh).
 *
 * The ingest handle of corral-collector serve (COLL_STORE_INGEST) checkpoints from a thread
 * with a connection of its own: a checkpoint copies tens of MB into the database file and
 * fsyncs it, and in the committing writer (SQLite's automatic checkpoint) every batch behind
 * it waited for that. The writer's commit hook asks for one at 10,000 WAL pages; PASSIVE
 * checkpoints run beside the writer and never block it. Should the thread fall behind (a WAL
 * at 40,000 pages), the writer checkpoints itself as SQLite would, so the WAL stays bounded.
 *
 * That handle's COMMIT does not fsync either (synchronous=NORMAL): the collector calls
 * sqlite_sync, an fdatasync of the WAL file through a descriptor of its own, after it has let
 * the next transaction have the writer, and answers only then. So the next group's inserts
 * run while the last one's fsync is in flight, and one fsync covers every commit before it.
 * What is durable when a batch is answered is what synchronous=FULL makes durable: its
 * frames in the WAL, synced (docs/collector.md, "Commit, then fsync beside the writer").
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "collector/pending.h"
#include "collector/store.h"
#include "common/error.h"
#include "common/macro.h"

/* A checkpoint once the WAL holds this much (in pages of the database's size) */
#define CKPT_BYTES (40 << 20)
/* New databases: pages of 16 KiB (existing ones keep theirs: the pragma is a no-op there) */
#define PAGE_SIZE_NEW 16384

/* The background checkpointer of an ingest handle. */
struct ckpt {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool started, wanted, stop, error_logged;
	int pages;	/* CKPT_BYTES in pages: the writer asks for a checkpoint at this many */
	int backfilled; /* WAL frames the last background checkpoint had copied */
	sqlite3 *db;	/* its own connection, used by the thread alone */
};

struct sqlite_store {
	struct coll_store base; /* first */
	sqlite3 *db;
	struct ckpt ck;
	/* Ingest handles: the WAL file, fsync'd by sqlite_sync; -1: COMMIT syncs (FULL). */
	int wal_fd;
	pthread_mutex_t sync_lock;
	_Atomic uint64_t committed; /* transactions committed (the WAL hook counts them) */
	uint64_t synced;	    /* of those, made durable by an fdatasync (sync_lock) */
	_Atomic int sync_err;	    /* a failed fdatasync, for good */
	sqlite3_stmt *insert;
	sqlite3_stmt *rollup[_COLL_ROLLUP_MAX], *open_del, *open_any, *open_touch;
	sqlite3_stmt *alive_rows, *alive_touch; /* tasks_alive: its rows, their touch */
	sqlite3_stmt *begin, *commit, *rollback;
	sqlite3_stmt *pending_ins; /* ingest handles: a batch's deltas into rollup_pending */
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

/* Rollup upserts: the sums of enum coll_sum added to the row of (bucket, keys). rollup_open:
 * the newest sample of a task replaces the row, unless a task.end of the task is stored. */
static char *rollup_upsert_sql(enum coll_rollup_table t)
{
	const struct coll_rollup_def *def = coll_rollup_def(t);
	_cleanup_free_ char *pk = coll_rollup_pk(t);
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int np = 0;

	if (!pk)
		return NULL;
	f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	if (t == COLL_ROLLUP_OPEN) {
		fprintf(f,
			"INSERT INTO %s (%s, account, \"user\", job, labels, start_ns, sample_ns",
			def->name, pk);
		for (int s = 0; s < _COLL_SUM_MAX; s++)
			fprintf(f, ", %s", coll_sum_name(s));
		fputs(") SELECT ", f);
		for (int i = 0; i < 8 + _COLL_SUM_MAX; i++)
			fprintf(f, "%s?%d", i ? ", " : "", i + 1);
		fputs(" WHERE NOT EXISTS (SELECT 1 FROM records WHERE task_id = ?2 AND node = ?1"
		      " AND type = 'task.end') ON CONFLICT (node, task_id) DO UPDATE SET"
		      " account = excluded.account, \"user\" = excluded.\"user\","
		      " job = excluded.job, labels = excluded.labels,"
		      " start_ns = excluded.start_ns, sample_ns = excluded.sample_ns",
		      f);
		for (int s = 0; s < _COLL_SUM_MAX; s++)
			fprintf(f, ", %s = excluded.%s", coll_sum_name(s), coll_sum_name(s));
		fputs(", rss_bytes = NULL, listed_ns = NULL"
		      " WHERE excluded.sample_ns > rollup_open.sample_ns",
		      f);
	} else {
		np = 1 + (int)def->n_keys;
		fprintf(f, "INSERT INTO %s (%s", def->name, pk);
		for (int s = 0; s < _COLL_SUM_MAX; s++)
			fprintf(f, ", %s", coll_sum_name(s));
		fputs(") VALUES (", f);
		for (int i = 0; i < np + _COLL_SUM_MAX; i++)
			fprintf(f, "%s?", i ? ", " : "");
		fprintf(f, ") ON CONFLICT (%s) DO UPDATE SET ", pk);
		for (int s = 0; s < _COLL_SUM_MAX; s++)
			fprintf(f, "%s%s = %s + excluded.%s", s ? ", " : "", coll_sum_name(s),
				coll_sum_name(s), coll_sum_name(s));
	}
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

/*
 * Audit objects, created on every open (IF NOT EXISTS, so databases of any version get them):
 * the breaks flagged at ingest, and partial indexes over audit rows only (other rows pay
 * nothing): by node and time (audit queries, chain verification) and by the record's hash
 * (the ingest check looks up a record's predecessor by its hash).
 */
static const char audit_ddl[] =
    "CREATE TABLE IF NOT EXISTS audit_breaks (record_id TEXT PRIMARY KEY, node TEXT NOT NULL,"
    " kind TEXT NOT NULL, reason TEXT NOT NULL, detected TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS records_audit_node ON records(node, time_ns)"
    " WHERE substr(type, 1, 6) = 'audit.';"
    "CREATE INDEX IF NOT EXISTS records_audit_hash ON records(json_extract(body, '$.hash'))"
    " WHERE substr(type, 1, 6) = 'audit.' AND json_valid(body);";

static int prepare_rollups(struct sqlite_store *st);
static int single_int(struct sqlite_store *st, const char *sql, int64_t *ret);
static int rebuild_rollups(struct sqlite_store *st, unsigned only);

static int migration_exec(void *db, const char *sql)
{
	return exec(db, sql);
}

static int migration_version(void *db, int *ret)
{
	struct sqlite_store *st = db;
	sqlite3_stmt *stmt = NULL;

	if (sqlite3_prepare_v2(st->db, "SELECT max(version) FROM schema_version", -1, &stmt,
			       NULL) != SQLITE_OK)
		return map_err(st, sqlite3_errcode(st->db));
	if (sqlite3_step(stmt) == SQLITE_ROW)
		*ret = sqlite3_column_int(stmt, 0);
	sqlite3_finalize(stmt);
	return 0;
}

static int migration_has_column(void *db, const char *table, const char *column, bool *ret)
{
	char sql[256];
	int64_t have = 0;
	int r;

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM pragma_table_info('%s') WHERE name = '%s'",
		 table, column);
	r = single_int(db, sql, &have);
	if (r < 0)
		return r;
	*ret = have > 0;
	return 0;
}

static int migration_rebuild(void *db)
{
	return rebuild_rollups(db, COLL_ROLLUP_ALL);
}

/* v12: triggers that keep the counted capacity keys (v13: and the energy per day) in step
 * with rollup_node_day; replaced where older ones exist */
static int migration_node_cap_triggers(void *db)
{
	_cleanup_free_ char *del = coll_node_cap_trigger_sql(false, "OLD");
	_cleanup_free_ char *add = coll_node_cap_trigger_sql(true, "NEW");
	_cleanup_free_ char *sql = NULL;

	if (!del || !add ||
	    asprintf(&sql,
		     "DROP TRIGGER IF EXISTS rollup_node_cap_ins;"
		     "DROP TRIGGER IF EXISTS rollup_node_cap_del;"
		     "DROP TRIGGER IF EXISTS rollup_node_cap_upd;"
		     "CREATE TRIGGER rollup_node_cap_ins AFTER INSERT ON"
		     " rollup_node_day BEGIN %s END;"
		     "CREATE TRIGGER rollup_node_cap_del AFTER DELETE ON"
		     " rollup_node_day BEGIN %s END;"
		     "CREATE TRIGGER rollup_node_cap_upd AFTER UPDATE ON"
		     " rollup_node_day BEGIN %s %s END;",
		     add, del, del, add) < 0)
		return -ENOMEM;
	return exec(db, sql);
}

static int migrate(struct sqlite_store *st)
{
	const struct coll_migration m = {
	    .db = st,
	    .real_type = "REAL",
	    .int_type = "INTEGER",
	    .records_ddl = records_ddl,
	    .pending_ddl = "CREATE TABLE IF NOT EXISTS rollup_pending (id INTEGER PRIMARY KEY,"
			   " layout INTEGER NOT NULL, deltas BLOB NOT NULL)",
	    .conflicts_ddl =
		"CREATE TABLE IF NOT EXISTS conflicts (record_id TEXT NOT NULL,"
		" node TEXT NOT NULL, detected TEXT NOT NULL, stored_body TEXT NOT NULL,"
		" received_body TEXT NOT NULL, received_sha256 TEXT NOT NULL,"
		" PRIMARY KEY (record_id, received_sha256))",
	    .audit_ddl = audit_ddl,
	    .exec = migration_exec,
	    .version = migration_version,
	    .has_column = migration_has_column,
	    .rebuild_rollups = migration_rebuild,
	    .node_cap_triggers = migration_node_cap_triggers,
	    .errmsg = st->base.errmsg,
	    .errlen = sizeof(st->base.errmsg),
	};
	int r;

	r = exec(st, "BEGIN IMMEDIATE");
	if (r < 0)
		return r;
	r = coll_migrate(&m);
	if (r < 0) {
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
		return r;
	}
	return exec(st, "COMMIT");
}

static int prepare(struct sqlite_store *st, const char *sql, sqlite3_stmt **ret)
{
	int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, ret, NULL);

	return rc == SQLITE_OK ? 0 : map_err(st, rc);
}

static void *ckpt_main(void *arg)
{
	struct ckpt *ck = arg;

	pthread_mutex_lock(&ck->lock);
	for (;;) {
		int rc, done = 0;

		while (!ck->wanted && !ck->stop)
			pthread_cond_wait(&ck->cond, &ck->lock);
		if (ck->stop)
			break;
		ck->wanted = false;
		pthread_mutex_unlock(&ck->lock);
		rc =
		    sqlite3_wal_checkpoint_v2(ck->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, &done);
		pthread_mutex_lock(&ck->lock);
		ck->backfilled = rc == SQLITE_OK ? done : 0;
		/* BUSY: another connection checkpoints; the writer's hook asks again later */
		if (rc != SQLITE_OK && rc != SQLITE_BUSY && !ck->error_logged) {
			ck->error_logged = true;
			fprintf(stderr,
				"corral-collector: sqlite: background checkpoint failed: %s (the "
				"writer checkpoints past %d WAL pages)\n",
				sqlite3_errmsg(ck->db), 4 * ck->pages);
		}
	}
	pthread_mutex_unlock(&ck->lock);
	return NULL;
}

/* After each commit of the ingest handle (the writer's thread, under the store's lock). */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
	struct sqlite_store *st = arg;
	struct ckpt *ck = &st->ck;
	bool finish;

	atomic_fetch_add(&st->committed, 1);
	if (pages < ck->pages)
		return SQLITE_OK;
	pthread_mutex_lock(&ck->lock);
	/*
	 * A WAL starts over only once a checkpoint has copied all of it, and the writer keeps
	 * appending while the thread copies. So once the thread has copied all but the last few
	 * frames, the writer copies those (a small PASSIVE checkpoint) and its next transaction
	 * starts the WAL over. Far behind, it checkpoints itself at 4x.
	 */
	finish = (ck->backfilled > 0 && pages - ck->backfilled <= ck->pages / 8) ||
		 pages >= 4 * ck->pages;
	if (finish)
		ck->backfilled = 0;
	else
		ck->wanted = true;
	pthread_cond_signal(&ck->cond);
	pthread_mutex_unlock(&ck->lock);
	if (finish)
		(void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
	return SQLITE_OK;
}

static int ckpt_start(struct sqlite_store *st, const char *path, int pages)
{
	struct ckpt *ck = &st->ck;
	int rc = sqlite3_open_v2(path, &ck->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);

	/* a connection knows the WAL once it has read the database: until then its checkpoints
	 * do nothing (and say so only by their frame counts, -1) */
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(ck->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		snprintf(st->base.errmsg, sizeof(st->base.errmsg), "checkpoint connection: %s",
			 ck->db ? sqlite3_errmsg(ck->db) : sqlite3_errstr(rc));
		sqlite3_close(ck->db);
		ck->db = NULL;
		return -EIO;
	}
	ck->pages = pages;
	pthread_mutex_init(&ck->lock, NULL);
	pthread_cond_init(&ck->cond, NULL);
	rc = pthread_create(&ck->thread, NULL, ckpt_main, ck);
	if (rc != 0) {
		pthread_cond_destroy(&ck->cond);
		pthread_mutex_destroy(&ck->lock);
		sqlite3_close(ck->db);
		ck->db = NULL;
		snprintf(st->base.errmsg, sizeof(st->base.errmsg), "checkpoint thread: %s",
			 strerror(rc));
		return -rc;
	}
	ck->started = true;
	/* replaces SQLite's automatic checkpoint (itself a WAL hook) on this connection */
	sqlite3_wal_hook(st->db, wal_hook, st);
	return 0;
}

static void ckpt_stop(struct sqlite_store *st)
{
	struct ckpt *ck = &st->ck;

	if (!ck->started)
		return;
	sqlite3_wal_hook(st->db, NULL, NULL);
	pthread_mutex_lock(&ck->lock);
	ck->stop = true;
	pthread_cond_signal(&ck->cond);
	pthread_mutex_unlock(&ck->lock);
	pthread_join(ck->thread, NULL);
	pthread_cond_destroy(&ck->cond);
	pthread_mutex_destroy(&ck->lock);
	sqlite3_close(ck->db);
	ck->db = NULL;
	ck->started = false;
}

/*
 * From now on COMMIT leaves the WAL's fsync to sqlite_sync. The WAL file exists: the
 * checkpoint connection read the database in WAL mode. Its descriptor stays valid while this
 * connection is open (SQLite removes the file only when the last one closes). If it cannot be
 * opened, COMMIT keeps syncing and sqlite_sync has nothing to do.
 */
static void sync_start(struct sqlite_store *st)
{
	const char *wal = sqlite3_filename_wal(sqlite3_db_filename(st->db, "main"));
	int fd = wal ? open(wal, O_RDONLY | O_CLOEXEC) : -1;

	if (fd < 0)
		return;
	if (exec(st, "PRAGMA synchronous=NORMAL;") < 0) {
		close(fd);
		return;
	}
	pthread_mutex_init(&st->sync_lock, NULL);
	st->wal_fd = fd;
	st->base.defers_sync = true;
}

/*
 * Group fsync: the commits counted when this call began are durable when it returns 0. A
 * caller that finds an fdatasync begun after its commit done (synced up to its count) skips
 * its own. A failure sticks (see coll_store_sync).
 */
static int sqlite_sync(struct coll_store *s)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	uint64_t want = atomic_load(&st->committed), target;
	int r = 0;

	if (st->wal_fd < 0)
		return 0;
	pthread_mutex_lock(&st->sync_lock);
	if (atomic_load(&st->sync_err) == 0 && st->synced < want) {
		target = atomic_load(&st->committed);
		if (fdatasync(st->wal_fd) < 0)
			atomic_store(&st->sync_err, -errno);
		else
			st->synced = target;
	}
	r = atomic_load(&st->sync_err);
	pthread_mutex_unlock(&st->sync_lock);
	return r;
}

static void sqlite_close(struct coll_store *s)
{
	struct sqlite_store *st = (struct sqlite_store *)s;

	ckpt_stop(st);
	if (st->wal_fd >= 0) {
		close(st->wal_fd);
		pthread_mutex_destroy(&st->sync_lock);
	}
	sqlite3_finalize(st->insert);
	for (int t = 0; t < _COLL_ROLLUP_MAX; t++)
		sqlite3_finalize(st->rollup[t]);
	sqlite3_finalize(st->open_del);
	sqlite3_finalize(st->open_touch);
	sqlite3_finalize(st->alive_rows);
	sqlite3_finalize(st->alive_touch);
	sqlite3_finalize(st->open_any);
	sqlite3_finalize(st->begin);
	sqlite3_finalize(st->commit);
	sqlite3_finalize(st->rollback);
	sqlite3_finalize(st->pending_ins);
	sqlite3_close(st->db);
	free(st);
}

static int sqlite_open(const char *uri, unsigned flags, struct coll_store **ret, char *err,
		       size_t errlen)
{
	struct sqlite_store *st;
	const char *path = uri + strlen("sqlite:");
	char *buf = NULL, sql[160];
	size_t len = 0;
	int64_t page_size = 0;
	int rc, r, ckpt_pages;
	FILE *f;

	if (strncmp(path, "//", 2) == 0)
		path += 2;
	if (!*path) {
		return err_set(err, errlen, -EINVAL, "sqlite: empty path");
	}
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->wal_fd = -1;
	rc = sqlite3_open_v2(
	    path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		r = map_err(st, rc);
		goto out_close;
	}
	sqlite3_busy_timeout(st->db, 5000);
	/* page_size first: it applies only before the file has its first page */
	snprintf(sql, sizeof(sql),
		 "PRAGMA page_size=%d; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
		 " PRAGMA foreign_keys=ON;",
		 PAGE_SIZE_NEW);
	r = exec(st, sql);
	if (r < 0)
		goto out_close;
	r = single_int(st, "PRAGMA page_size", &page_size);
	if (r < 0)
		goto out_close;
	ckpt_pages = (int)(CKPT_BYTES / MAX(page_size, (int64_t)512));
	snprintf(sql, sizeof(sql), "PRAGMA wal_autocheckpoint=%d;", ckpt_pages);
	r = exec(st, sql);
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
	r = prepare_rollups(st);
	if (r < 0)
		goto out_close;
	if ((r = prepare(st, "BEGIN IMMEDIATE", &st->begin)) < 0 ||
	    (r = prepare(st, "COMMIT", &st->commit)) < 0 ||
	    (r = prepare(st, "ROLLBACK", &st->rollback)) < 0)
		goto out_close;
	if ((flags & COLL_STORE_INGEST) && strcmp(path, ":memory:") != 0) {
		r = ckpt_start(st, path, ckpt_pages);
		if (r < 0)
			goto out_close;
		sync_start(st);
		r = prepare(st, "INSERT INTO rollup_pending (layout, deltas) VALUES (?1, ?2)",
			    &st->pending_ins);
		if (r < 0)
			goto out_close;
		st->base.queues_rollups = true;
	}
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
			sqlite3_bind_text(s, c + 1, v[c].s, (int)v[c].len, SQLITE_STATIC);
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

/*
 * Whether rollup_open may hold a row that this transaction's deltas delete: when it had none
 * and the deltas add none, the DELETE of every ended task (one statement per task.end) is
 * skipped. Tasks short enough to send no task.sample, the common case, never have a row.
 */
static int open_rows_possible(struct sqlite_store *st, const struct coll_delta *d, size_t nd)
{
	int rc;

	for (size_t i = 0; i < nd; i++)
		if (d[i].table == COLL_ROLLUP_OPEN && !d[i].del)
			return 1;
	rc = sqlite3_step(st->open_any);
	sqlite3_reset(st->open_any);
	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : map_err(st, rc);
}

/* A node's tasks_alive statement (struct coll_delta alive): its rows checked, then moved. */
static int apply_alive(struct sqlite_store *st, const struct coll_delta *d)
{
	_cleanup_free_ char *except = NULL;
	_cleanup_free_ char **ids = NULL;
	size_t n = 0, cap = 0;
	json_t *ex = json_array();
	int rc, r = 0;

	for (size_t i = 0; ex && i < d->alive->n_except; i++)
		if (json_array_append_new(ex, json_string(d->alive->except[i])) < 0)
			break;
	except = ex ? json_dumps(ex, JSON_COMPACT) : NULL;
	json_decref(ex);
	if (!except)
		return -ENOMEM;
	sqlite3_bind_text(st->alive_rows, 1, d->node, -1, SQLITE_STATIC);
	sqlite3_bind_text(st->alive_rows, 2, except, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st->alive_rows, 3, (int64_t)MIN(d->sample_ns, INT64_MAX));
	sqlite3_bind_int64(st->alive_rows, 4, (int64_t)MIN(d->alive->since_ns, INT64_MAX));
	while ((rc = sqlite3_step(st->alive_rows)) == SQLITE_ROW) {
		if (n == cap) {
			char **g = realloc(ids, (cap = cap ? 2 * cap : 64) * sizeof(*ids));

			if (!g) {
				r = -ENOMEM;
				break;
			}
			ids = g;
		}
		if (!(ids[n] = strdup((const char *)sqlite3_column_text(st->alive_rows, 0)))) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	if (r == 0 && rc != SQLITE_DONE)
		r = map_err(st, rc);
	sqlite3_reset(st->alive_rows);
	sqlite3_clear_bindings(st->alive_rows);
	/* refused: the rows stay as they are (the tasks' next samples or listings move them) */
	if (r == 0 && coll_alive_check(d->alive, (const char *const *)ids, n) < 0) {
		st->base.alive_refused++;
	} else if (r == 0) {
		sqlite3_bind_text(st->alive_touch, 1, d->node, -1, SQLITE_STATIC);
		sqlite3_bind_text(st->alive_touch, 2, except, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st->alive_touch, 3, (int64_t)MIN(d->sample_ns, INT64_MAX));
		sqlite3_bind_int64(st->alive_touch, 4, (int64_t)MIN(d->alive->since_ns, INT64_MAX));
		r = step_done(st, st->alive_touch);
		sqlite3_clear_bindings(st->alive_touch);
	}
	for (size_t i = 0; i < n; i++)
		free(ids[i]);
	return r;
}

static int apply_deltas(struct sqlite_store *st, const struct coll_delta *d, size_t nd)
{
	int open_rows = -1; /* unknown until the first delete */

	for (size_t i = 0; i < nd; i++) {
		const struct coll_rollup_def *def = coll_rollup_def(d[i].table);
		sqlite3_stmt *s = d[i].del     ? st->open_del
				  : d[i].touch ? st->open_touch
					       : st->rollup[d[i].table];
		_cleanup_free_ char *labels = NULL;
		int p = 1, r;

		if (d[i].del) {
			if (open_rows < 0) {
				open_rows = open_rows_possible(st, d, nd);
				if (open_rows < 0)
					return open_rows;
			}
			if (!open_rows)
				continue;
		}

		if (d[i].alive) {
			r = apply_alive(st, &d[i]);
			if (r < 0)
				return r;
			continue;
		}
		if (d[i].touch) {
			sqlite3_bind_text(s, 1, d[i].node, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, 2, d[i].task_id, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, 3, (int64_t)MIN(d[i].sample_ns, INT64_MAX));
			sqlite3_bind_int64(s, 4, (int64_t)MIN(d[i].rss_bytes, INT64_MAX));
			sqlite3_bind_int64(s, 5, (int64_t)MIN(d[i].base_ns, INT64_MAX));
			r = step_done(st, s);
			sqlite3_clear_bindings(s);
			if (r < 0)
				return r;
			continue;
		}
		if (d[i].table == COLL_ROLLUP_OPEN) {
			sqlite3_bind_text(s, p++, d[i].node, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, p++, d[i].task_id, -1, SQLITE_STATIC);
			if (!d[i].del) {
				labels = coll_labels_json(d[i].rec);
				if (!labels)
					return -ENOMEM;
				sqlite3_bind_text(s, p++, d[i].account, -1, SQLITE_STATIC);
				sqlite3_bind_text(s, p++, d[i].user, -1, SQLITE_STATIC);
				sqlite3_bind_text(s, p++, d[i].job, -1, SQLITE_STATIC);
				sqlite3_bind_text(s, p++, labels, -1, SQLITE_STATIC);
				sqlite3_bind_int64(s, p++, (int64_t)MIN(d[i].start_ns, INT64_MAX));
				sqlite3_bind_int64(s, p++, (int64_t)MIN(d[i].sample_ns, INT64_MAX));
			}
		} else {
			sqlite3_bind_text(s, p++, d[i].bucket, -1, SQLITE_STATIC);
			for (size_t k = 0; k < def->n_keys; k++)
				sqlite3_bind_text(s, p++, coll_delta_key(&d[i], def->keys[k]), -1,
						  SQLITE_STATIC);
		}
		if (!d[i].del)
			for (int k = 0; k < _COLL_SUM_MAX; k++)
				sqlite3_bind_double(s, p++, d[i].v[k]);
		r = step_done(st, s);
		sqlite3_clear_bindings(s);
		if (r < 0)
			return r;
	}
	return 0;
}

static int prepare_rollups(struct sqlite_store *st)
{
	int r;

	if (st->open_del)
		return 0;
	for (int t = 0; t < _COLL_ROLLUP_MAX; t++) {
		_cleanup_free_ char *sql = rollup_upsert_sql(t);

		if (!sql)
			return -ENOMEM;
		r = prepare(st, sql, &st->rollup[t]);
		if (r < 0)
			return r;
	}
	r = prepare(st, "SELECT 1 FROM rollup_open LIMIT 1", &st->open_any);
	if (r < 0)
		return r;
	{
		_cleanup_free_ char *sql = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&sql, &len);

		if (!f)
			return -ENOMEM;
		fputs("UPDATE rollup_open", f);
		coll_open_touch_set(f, "?3", "?4", "?3", "REAL", "max");
		coll_open_touch_where(f, "?3", "?5");
		fputs(" AND node = ?1 AND task_id = ?2", f);
		if (fclose(f) != 0)
			return -ENOMEM;
		r = prepare(st, sql, &st->open_touch);
		if (r < 0)
			return r;
	}
	{
		/* a node's tasks_alive: ?1 node, ?2 the except list (JSON), ?3 time, ?4 since */
		static const char rows[] = " AND rss_bytes IS NOT NULL AND listed_ns = ?4 AND node"
					   " = ?1 AND task_id NOT IN (SELECT value FROM"
					   " json_each(?2))";
		_cleanup_free_ char *sql = NULL, *sel = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&sql, &len);

		if (!f)
			return -ENOMEM;
		fputs("UPDATE rollup_open", f);
		coll_open_touch_set(f, "?3", "rss_bytes", "listed_ns", "REAL", "max");
		coll_open_touch_where(f, "?3", "0");
		fputs(rows, f);
		if (fclose(f) != 0)
			return -ENOMEM;
		r = prepare(st, sql, &st->alive_touch);
		if (r < 0)
			return r;
		f = open_memstream(&sel, &len);
		if (!f)
			return -ENOMEM;
		fputs("SELECT task_id FROM rollup_open", f);
		coll_open_touch_where(f, "?3", "0");
		fputs(rows, f);
		if (fclose(f) != 0)
			return -ENOMEM;
		r = prepare(st, sel, &st->alive_rows);
		if (r < 0)
			return r;
	}
	return prepare(st, "DELETE FROM rollup_open WHERE node = ?1 AND task_id = ?2",
		       &st->open_del);
}

/* Deltas of items (all taken as new) applied inside the caller's transaction: to every table,
 * or only to the tables in the mask only (bit 1u << table). */
static int apply_items(struct sqlite_store *st, struct coll_item *items, size_t n, unsigned only)
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
	return apply_deltas(st, d, nd);
}

#define REBUILD_CHUNK 4096

/* Migrations to v2 (every rollup) and v3 (the new ones): the rollups recomputed from every stored
 * task.end and task.sample, through the same deltas as ingest, in chunks. */
static int rebuild_rollups(struct sqlite_store *st, unsigned only)
{
	_cleanup_free_ struct acct_record *recs = calloc(REBUILD_CHUNK, sizeof(*recs));
	_cleanup_free_ struct coll_item *items = calloc(REBUILD_CHUNK, sizeof(*items));
	sqlite3_stmt *sel = NULL;
	size_t n = 0;
	int rc, r;

	if (!recs || !items)
		return -ENOMEM;
	r = prepare_rollups(st);
	if (r < 0)
		return r;
	rc = sqlite3_prepare_v2(
	    st->db,
	    "SELECT record_id, body FROM records"
	    " WHERE type IN ('task.end', 'task.sample', 'node.sample') ORDER BY rowid",
	    -1, &sel, NULL);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	for (;;) {
		char err[160];

		rc = sqlite3_step(sel);
		if (rc == SQLITE_ROW) {
			const char *body = (const char *)sqlite3_column_text(sel, 1);

			r = acct_record_decode(body ?: "", body ? strlen(body) : 0, &recs[n], err,
					       sizeof(err));
			if (r < 0) {
				snprintf(st->base.errmsg, sizeof(st->base.errmsg),
					 "rebuilding rollups: record %.64s: %s",
					 (const char *)sqlite3_column_text(sel, 0), err);
				break;
			}
			items[n] = (struct coll_item){.rec = &recs[n]};
			n++;
		}
		if (n > 0 && (n == REBUILD_CHUNK || rc != SQLITE_ROW)) {
			r = apply_items(st, items, n, only);
			for (size_t i = 0; i < n; i++)
				acct_record_clear(&recs[i]);
			n = 0;
			if (r < 0)
				break;
		}
		if (rc != SQLITE_ROW) {
			r = rc == SQLITE_DONE ? 0 : map_err(st, rc);
			break;
		}
	}
	for (size_t i = 0; i < n; i++)
		acct_record_clear(&recs[i]);
	sqlite3_finalize(sel);
	return r;
}

static int sqlite_rollup_batch(struct coll_store *s, struct coll_item *items, size_t n)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	int r;

	r = step_done(st, st->begin);
	if (r < 0)
		return r;
	r = apply_items(st, items, n, COLL_ROLLUP_ALL);
	if (r >= 0)
		r = step_done(st, st->commit);
	if (r < 0)
		step_done(st, st->rollback);
	return r;
}

/*
 * An ingest handle's bucketed deltas go to rollup_pending in the compact form
 * (collector/pending.h), one row per transaction; rollup_open's (per task) are applied here.
 * Deltas come sorted by table, rollup_open last.
 */
static int queue_or_apply(struct sqlite_store *st, const struct coll_delta *d, size_t nd)
{
	_cleanup_free_ unsigned char *data = NULL;
	size_t nb = 0, dlen = 0;
	int r;

	if (!st->base.queues_rollups)
		return apply_deltas(st, d, nd);
	while (nb < nd && d[nb].table != COLL_ROLLUP_OPEN)
		nb++;
	if (nb > 0) {
		r = coll_pending_encode(d, nb, &data, &dlen);
		if (r < 0)
			return r;
		if (dlen > INT_MAX)
			return -E2BIG;
		sqlite3_bind_int(st->pending_ins, 1, COLL_PENDING_LAYOUT_COMPACT);
		sqlite3_bind_blob(st->pending_ins, 2, data, (int)dlen, SQLITE_STATIC);
		r = step_done(st, st->pending_ins);
		sqlite3_clear_bindings(st->pending_ins);
		if (r < 0)
			return r;
	}
	return apply_deltas(st, d + nb, nd - nb);
}

/*
 * Applies every queued batch: in one write transaction (nothing else is queued meanwhile),
 * their deltas merged (a key that several batches touched is one upsert), then the rows
 * deleted. A batch that does not decode fails the fold, naming rollup_pending, and stays.
 * wait is PostgreSQL's: SQLite's writer lock is waited for (busy_timeout).
 */
static int sqlite_fold(struct coll_store *s, bool wait)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	struct coll_pending_set set = {0};
	_cleanup_free_ char *arena = NULL;
	sqlite3_stmt *sel = NULL;
	size_t nd = 0, nbatch = 0;
	int64_t total = 0;
	char *ap;
	int rc, r;

	(void)wait;
	r = step_done(st, st->begin);
	if (r < 0)
		return r;
	/* the sizes first (length() reads no blob), for one allocation of the key texts */
	r = single_int(st, "SELECT coalesce(sum(length(deltas)), 0) FROM rollup_pending", &total);
	if (r < 0)
		goto out_rollback;
	if (total == 0) { /* nothing queued: the transaction wrote nothing */
		r = step_done(st, st->commit);
		if (r < 0)
			goto out_rollback;
		return 0;
	}
	arena = ap = malloc((size_t)total + 1);
	rc = sqlite3_prepare_v2(st->db, "SELECT layout, deltas FROM rollup_pending ORDER BY id", -1,
				&sel, NULL);
	if (rc != SQLITE_OK) {
		r = map_err(st, rc);
		goto out_rollback;
	}
	if (!arena) {
		r = -ENOMEM;
		goto out_rollback;
	}
	while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
		int layout = sqlite3_column_int(sel, 0);
		const unsigned char *p = sqlite3_column_blob(sel, 1);
		size_t plen = (size_t)sqlite3_column_bytes(sel, 1);

		r = coll_pending_reserve(&set, plen);
		if (r < 0)
			goto out_rollback;
		if (layout != COLL_PENDING_LAYOUT_COMPACT ||
		    coll_pending_decode(p, plen, set.d, &set.n, &ap) < 0) {
			r = err_set(st->base.errmsg, sizeof(st->base.errmsg), -EBADMSG,
				    "sqlite: rollup_pending: a queued batch (layout %d) is not the "
				    "compact form (layout %d)",
				    layout, COLL_PENDING_LAYOUT_COMPACT);
			goto out_rollback;
		}
		coll_pending_settle(&set);
		nbatch++;
	}
	if (rc != SQLITE_DONE) {
		r = map_err(st, rc);
		goto out_rollback;
	}
	sqlite3_finalize(sel);
	sel = NULL;
	nd = coll_deltas_merge(set.d, set.n);
	r = apply_deltas(st, set.d, nd);
	if (r < 0)
		goto out_rollback;
	r = exec(st, "DELETE FROM rollup_pending");
	if (r < 0)
		goto out_rollback;
	r = step_done(st, st->commit);
	if (r < 0)
		goto out_rollback;
	free(set.d);
	return (int)MIN(nbatch, (size_t)INT_MAX);

out_rollback:
	sqlite3_finalize(sel);
	step_done(st, st->rollback);
	free(set.d);
	return r;
}

static int sqlite_insert_batch(struct coll_store *s, struct coll_item *items, size_t n,
			       const struct coll_deltas *pre)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	_cleanup_free_ struct coll_delta *owned = NULL;
	const struct coll_delta *d = NULL;
	size_t nd = 0;
	int r = atomic_load(&st->sync_err);

	if (r < 0) {
		return err_set(
		    s->errmsg, sizeof(s->errmsg), -EIO,
		    "sqlite: an fsync of the WAL failed earlier (%s): nothing more is stored "
		    "until the collector is restarted",
		    strerror(-r));
	}
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
		r = coll_deltas_of_new(items, n, pre, &d, &nd, &owned);
		if (r < 0)
			goto out_rollback;
		r = queue_or_apply(st, d, nd);
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

static const struct coll_sql_dialect sqlite_dialect = {
    .select = "SELECT record_id, type, time, node, task_id, account, \"user\", body, time_ns"
	      " FROM records WHERE 1",
    .hash_expr = "json_extract(body, '$.hash')",
    /* the index's condition: json_extract fails on a body that is not JSON */
    .hash_guard = "json_valid(body)",
    .param = '?',
    .int_cast = "",
    .text_cast = "",
    .row_values = false,
};

static int sqlite_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	struct coll_sql_param args[COLL_QUERY_PARAMS_MAX];
	sqlite3_stmt *stmt = NULL;
	char *sql = NULL;
	int na = 0, rc, r;

	r = coll_query_sql(&sqlite_dialect, q, &sql, args, &na);
	if (r < 0)
		return r;
	rc = sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL);
	free(sql);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	for (int k = 0; k < na; k++)
		if (args[k].s)
			sqlite3_bind_text(stmt, k + 1, args[k].s, -1, SQLITE_STATIC);
		else
			sqlite3_bind_int64(stmt, k + 1, args[k].i);
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
		    .time_ns = (uint64_t)sqlite3_column_int64(stmt, 8),
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

/* One INSERT .. ON CONFLICT DO NOTHING of n texts bound as ?1..?n: 1 if a row was added, 0 if
 * it was there. */
static int insert_texts(struct sqlite_store *st, const char *sql, const char *const *v, int n)
{
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	for (int k = 0; k < n; k++)
		sqlite3_bind_text(stmt, k + 1, v[k], -1, SQLITE_STATIC);
	rc = sqlite3_step(stmt);
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE)
		return map_err(st, rc);
	return sqlite3_changes(st->db) > 0 ? 1 : 0;
}

static int sqlite_break_add(struct coll_store *s, const struct coll_audit_break *b)
{
	const char *v[] = {b->record_id, b->node, b->kind, b->reason, b->detected};

	return insert_texts((struct sqlite_store *)s,
			    "INSERT INTO audit_breaks (record_id, node, kind, reason, detected)"
			    " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (record_id) DO NOTHING",
			    v, (int)ARRAY_SIZE(v));
}

static int sqlite_body_get(struct coll_store *s, const char *record_id, char **ret)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	sqlite3_stmt *stmt = NULL;
	int rc, r = -ENOENT;

	rc = sqlite3_prepare_v2(st->db, "SELECT body FROM records WHERE record_id = ?1", -1, &stmt,
				NULL);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	sqlite3_bind_text(stmt, 1, record_id, -1, SQLITE_STATIC);
	rc = sqlite3_step(stmt);
	if (rc == SQLITE_ROW) {
		*ret = strdup(col_text(stmt, 0));
		r = *ret ? 0 : -ENOMEM;
	} else if (rc != SQLITE_DONE) {
		r = map_err(st, rc);
	}
	sqlite3_finalize(stmt);
	return r;
}

static int sqlite_conflict_add(struct coll_store *s, const struct coll_conflict *c)
{
	const char *v[] = {c->record_id,   c->node,	     c->detected,
			   c->stored_body, c->received_body, c->received_sha256};

	return insert_texts((struct sqlite_store *)s,
			    "INSERT INTO conflicts (record_id, node, detected, stored_body,"
			    " received_body, received_sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
			    " ON CONFLICT DO NOTHING",
			    v, (int)ARRAY_SIZE(v));
}

/* Steps stmt (prepared and bound), hands each row's first ncols columns as text to fn, and
 * finalizes it. */
static int each_text_row(struct sqlite_store *st, sqlite3_stmt *stmt, int ncols,
			 coll_text_row_fn fn, void *sink)
{
	const char *cols[8];
	int rc, r = 0;

	assert(ncols <= (int)ARRAY_SIZE(cols));
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		for (int i = 0; i < ncols; i++)
			cols[i] = col_text(stmt, i);
		r = fn(cols, sink);
		if (r < 0)
			break;
	}
	if (r >= 0 && rc != SQLITE_DONE)
		r = map_err(st, rc);
	sqlite3_finalize(stmt);
	return r < 0 ? r : 0;
}

static int sqlite_conflict_query(struct coll_store *s, const char *node, coll_conflict_fn fn,
				 void *ud)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	struct coll_text_sink sink = {.conflict = fn, .userdata = ud};
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = sqlite3_prepare_v2(st->db,
				"SELECT " COLL_CONFLICT_COLUMNS
				" FROM conflicts WHERE node = ?1 ORDER BY rowid",
				-1, &stmt, NULL);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	sqlite3_bind_text(stmt, 1, node, -1, SQLITE_STATIC);
	return each_text_row(st, stmt, COLL_CONFLICT_NCOLS, coll_conflict_from_text, &sink);
}

static int sqlite_break_query(struct coll_store *s, const char *node, size_t limit,
			      coll_break_fn fn, void *ud)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	struct coll_text_sink sink = {.brk = fn, .userdata = ud};
	sqlite3_stmt *stmt = NULL;
	int rc;

	rc = sqlite3_prepare_v2(st->db,
				"SELECT " COLL_BREAK_COLUMNS " FROM audit_breaks"
				" WHERE (?1 IS NULL OR node = ?1) ORDER BY rowid LIMIT ?2",
				-1, &stmt, NULL);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	if (node)
		sqlite3_bind_text(stmt, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 2, limit ? coll_clamp_i64(limit) : -1);
	return each_text_row(st, stmt, COLL_BREAK_NCOLS, coll_break_from_text, &sink);
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

/* Queued deltas folded first, so a read's rows include every batch committed before it; a
 * read tells whether there are any, so a report's later queries take no write lock. */
static int fold_queued(struct coll_store *s)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	int64_t queued = 0;
	int r;

	if (s->no_rollups)
		return 0;
	r = single_int(st, "SELECT EXISTS (SELECT 1 FROM rollup_pending)", &queued);
	if (r >= 0 && queued)
		r = sqlite_fold(s, true);
	return r < 0 ? r : 0;
}

static int sqlite_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			       const char *to, uint32_t sums, coll_rollup_fn fn, void *ud)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	_cleanup_free_ char *pk = coll_rollup_pk(t);
	sqlite3_stmt *stmt = NULL;
	char *sql = NULL;
	size_t len = 0;
	FILE *f;
	int rc, r = 0;

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
		" FROM %s WHERE (?1 IS NULL OR bucket >= ?1) AND (?2 IS NULL OR bucket < ?2)"
		" ORDER BY %s",
		coll_rollup_table_name(t), pk);
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
		    .job = col_text(stmt, 5),
		    .node = col_text(stmt, 6),
		};
		for (int k = 0, c = 7; k < _COLL_SUM_MAX; k++)
			if (sums & 1u << k)
				row.v[k] = sqlite3_column_double(stmt, c++);
		r = fn(&row, ud);
		if (r < 0)
			break;
	}
	if (r >= 0 && rc != SQLITE_DONE)
		r = map_err(st, rc);
	sqlite3_finalize(stmt);
	return r < 0 ? r : 0;
}

/* Reals as %.17g (sqlite3_column_text gives 15 digits: not the stored double). */
static int sqlite_text_query(struct coll_store *s, const char *sql, int n,
			     const char *const *params, coll_text_fn fn, void *ud)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	_cleanup_free_ const char **cols = NULL;
	_cleanup_free_ char *nums = NULL;
	sqlite3_stmt *stmt = NULL;
	int rc, r = 0, nc;

	r = fold_queued(s);
	if (r < 0)
		return r;
	rc = sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	for (int i = 0; i < n; i++)
		if (params[i])
			sqlite3_bind_text(stmt, i + 1, params[i], -1, SQLITE_STATIC);
	nc = sqlite3_column_count(stmt);
	cols = calloc((size_t)nc + 1, sizeof(*cols));
	nums = calloc((size_t)nc + 1, 32);
	if (!cols || !nums) {
		sqlite3_finalize(stmt);
		return -ENOMEM;
	}
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		for (int c = 0; c < nc; c++) {
			switch (sqlite3_column_type(stmt, c)) {
			case SQLITE_NULL:
				cols[c] = NULL;
				break;
			case SQLITE_FLOAT:
				snprintf(nums + 32 * c, 32, "%.17g",
					 sqlite3_column_double(stmt, c));
				cols[c] = nums + 32 * c;
				break;
			default:
				cols[c] = col_text(stmt, c);
			}
		}
		r = fn(cols, nc, ud);
		if (r < 0)
			break;
	}
	if (r >= 0 && rc != SQLITE_DONE)
		r = map_err(st, rc);
	sqlite3_finalize(stmt);
	return r < 0 ? r : 0;
}

static int sqlite_open_query(struct coll_store *s, coll_open_fn fn, void *ud)
{
	struct sqlite_store *st = (struct sqlite_store *)s;
	sqlite3_stmt *stmt = NULL;
	char *sql = NULL;
	size_t len = 0;
	FILE *f;
	int rc, r = 0;

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
	if (fclose(f) != 0) {
		free(sql);
		return -ENOMEM;
	}
	rc = sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL);
	free(sql);
	if (rc != SQLITE_OK)
		return map_err(st, rc);
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		struct coll_open_row row = {
		    .node = col_text(stmt, 0),
		    .task_id = col_text(stmt, 1),
		    .account = col_text(stmt, 2),
		    .user = col_text(stmt, 3),
		    .job = col_text(stmt, 4),
		    .labels = col_text(stmt, 5),
		    .start_ns = (uint64_t)sqlite3_column_int64(stmt, 6),
		    .sample_ns = (uint64_t)sqlite3_column_int64(stmt, 7),
		};
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			row.v[k] = sqlite3_column_double(stmt, 8 + k);
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
    .single_writer = true,
    .default_connections = 1,
    .open = sqlite_open,
    .close = sqlite_close,
    .insert_batch = sqlite_insert_batch,
    .query = sqlite_query,
    .rollup_query = sqlite_rollup_query,
    .open_query = sqlite_open_query,
    .text_query = sqlite_text_query,
    .day_of_ns_sql = {"strftime('%Y-%m-%d', ", " / 1000000000, 'unixepoch')"},
    .rollup_batch = sqlite_rollup_batch,
    .fold = sqlite_fold,
    .count = sqlite_count,
    .ping = sqlite_ping,
    .schema_version = sqlite_schema_version,
    .break_add = sqlite_break_add,
    .break_query = sqlite_break_query,
    .body_get = sqlite_body_get,
    .conflict_add = sqlite_conflict_add,
    .conflict_query = sqlite_conflict_query,
    .sync = sqlite_sync,
};
