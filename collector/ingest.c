/* SPDX-License-Identifier: MIT */
/* POST /v1/records: decode, conflicts, the audit chain check, the group-commit pool and the
 * folder (server_impl.h). */
#include <string.h>

#include "accounting/batch.h"
#include "collector/server_impl.h"
#include "common/escape.h"

/*
 * Group commit. A POST queues its batch and waits. Whoever finds a connection free takes it
 * and the queue's head, up to GROUP_MAX_RECORDS records, inserts them in one transaction
 * (one commit and its fsync, and the rollup deltas of all of them merged), then hands every
 * batch its result. A lone batch goes alone; batches group only while every connection is
 * busy, which with SQLite's single writer is whenever several nodes upload at once.
 */
#define GROUP_MAX_RECORDS 5000

struct ingest_job {
	struct coll_item *items;
	size_t n;
	const struct coll_deltas *pre; /* the items' deltas built by the request, or NULL */
	int r;
	bool taken;	  /* in a group (pool_lock) */
	bool done;	  /* answered: r and errmsg are final (pool_lock) */
	char errmsg[256]; /* the store's message when r < 0 */
	struct ingest_job *next;
};

static void run_group(struct coll_server *s, struct coll_store *st, struct ingest_job *g,
		      size_t total)
{
	_cleanup_free_ struct coll_item *all = NULL;
	_cleanup_free_ struct coll_delta *deltas = NULL;
	struct coll_deltas pre = {0};
	const char *why = NULL;
	int r;

	if (!g->next) {
		r = coll_store_insert_batch_pre(st, g->items, g->n, g->pre);
	} else {
		struct coll_deltas runs[COLL_DELTA_RUNS_MAX];
		size_t k = 0, nd = 0, nruns = 0;
		bool have_pre = true;

		all = malloc(total * sizeof(*all));
		if (!all) {
			r = -ENOMEM;
			why = strerror(ENOMEM);
			goto out;
		}
		for (struct ingest_job *j = g; j; j = j->next) {
			memcpy(all + k, j->items, j->n * sizeof(*all));
			k += j->n;
			have_pre = have_pre && j->pre;
			nd += j->pre ? j->pre->n : 0;
			if (j->pre && nruns < ARRAY_SIZE(runs))
				runs[nruns] = *j->pre;
			nruns++;
		}
		/*
		 * The group's deltas: the batches' own merged, in one pass over their sorted runs
		 * (a group of many small batches: concatenated and merged through the hash table).
		 * No memory: the store builds them.
		 */
		if (have_pre && nd > 0 && (deltas = malloc(nd * sizeof(*deltas)))) {
			pre.d = deltas;
			if (nruns <= ARRAY_SIZE(runs)) {
				pre.n = coll_deltas_merge_runs(runs, nruns, deltas);
			} else {
				for (struct ingest_job *j = g; j; j = j->next) {
					memcpy(deltas + pre.n, j->pre->d,
					       j->pre->n * sizeof(*deltas));
					pre.n += j->pre->n;
				}
				pre.n = coll_deltas_merge(deltas, pre.n);
			}
		}
		r = coll_store_insert_batch_pre(st, all, total,
						have_pre && (nd == 0 || deltas) ? &pre : NULL);
		k = 0;
		for (struct ingest_job *j = g; j; j = j->next)
			for (size_t i = 0; i < j->n; i++)
				j->items[i].is_new = r >= 0 && all[k++].is_new;
	}
	if (r >= 0 && s->fold_started) {
		pthread_mutex_lock(&s->fold_lock);
		s->fold_wanted = true;
		s->fold_backlog += total;
		if (s->fold_backlog >= COLL_FOLD_BACKLOG_RECORDS)
			s->fold_soon = true;
		pthread_cond_signal(&s->fold_cond);
		pthread_mutex_unlock(&s->fold_lock);
	}
out:
	atomic_fetch_add(&s->groups, 1);
	for (struct ingest_job *j = g; j; j = j->next) {
		j->r = r;
		if (r < 0)
			snprintf(j->errmsg, sizeof(j->errmsg), "%s", why ?: coll_store_errmsg(st));
	}
}

/* After a group's commit, without the pool's lock: its batches are answered once it is durable. */
static void sync_group(struct coll_server *s, struct coll_store *st, struct ingest_job *g)
{
	int r = coll_store_sync(st);

	if (r >= 0)
		return;
	atomic_fetch_add(&s->sync_errors, 1);
	for (struct ingest_job *j = g; j; j = j->next) {
		j->r = r;
		snprintf(j->errmsg, sizeof(j->errmsg),
			 "fsync of the database's WAL failed: %s (the batch is not acknowledged; "
			 "nothing more is stored until the collector is restarted)",
			 strerror(-r));
		for (size_t i = 0; i < j->n; i++)
			j->items[i].is_new = false;
	}
}

/* Inserts items[0..n) (is_new set as by coll_store_insert_batch); on failure errmsg says why. */
static int ingest(struct coll_server *s, struct coll_item *items, size_t n,
		  const struct coll_deltas *pre, char *errmsg, size_t errlen)
{
	struct ingest_job job = {.items = items, .n = n, .pre = pre};
	bool waited = false;

	pthread_mutex_lock(&s->pool_lock);
	if (s->queue_tail)
		s->queue_tail->next = &job;
	else
		s->queue_head = &job;
	s->queue_tail = &job;
	while (!job.done) {
		struct coll_store *st = NULL;
		struct ingest_job *g, *last;
		size_t slot = 0, total;

		for (size_t i = 0; i < s->npool && !st; i++)
			if (!s->pool_busy[i]) {
				st = s->pool[i];
				slot = i;
			}
		/* a batch already in a group waits for its answer; it leads no other group */
		if (!st || !s->queue_head || job.taken) {
			waited = true;
			pthread_cond_wait(&s->pool_free, &s->pool_lock);
			continue;
		}
		/* lead a group: the queue's head, then whatever fits behind it */
		s->pool_busy[slot] = true;
		g = last = s->queue_head;
		total = g->n;
		while (last->next && total + last->next->n <= GROUP_MAX_RECORDS) {
			last = last->next;
			total += last->n;
		}
		s->queue_head = last->next;
		if (!s->queue_head)
			s->queue_tail = NULL;
		last->next = NULL;
		for (struct ingest_job *j = g; j; j = j->next)
			j->taken = true;
		pthread_mutex_unlock(&s->pool_lock);

		run_group(s, st, g, total);
		if (st->alive_refused) { /* the handle is this thread's until pool_busy is cleared
					  */
			atomic_fetch_add(&s->alive_refused, st->alive_refused);
			st->alive_refused = 0;
		}

		/*
		 * The next group may have the connection while this one's commit is made durable
		 * (SQLite: the WAL's fsync, which COMMIT left to coll_store_sync).
		 */
		pthread_mutex_lock(&s->pool_lock);
		s->pool_busy[slot] = false;
		if (g->r >= 0 && coll_store_syncs(st)) {
			pthread_cond_broadcast(&s->pool_free);
			pthread_mutex_unlock(&s->pool_lock);
			sync_group(s, st, g);
			pthread_mutex_lock(&s->pool_lock);
		}
		for (struct ingest_job *j = g; j; j = j->next)
			j->done = true; /* after this, followers may return: j is theirs */
		pthread_cond_broadcast(&s->pool_free);
	}
	pthread_mutex_unlock(&s->pool_lock);
	if (waited)
		atomic_fetch_add(&s->pool_waits, 1);
	if (job.r < 0)
		snprintf(errmsg, errlen, "%s", job.errmsg);
	return job.r;
}

static void add_ms(struct timespec *t, unsigned ms)
{
	t->tv_sec += ms / 1000;
	t->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000L;
	}
}

/* One fold; its result (-EBUSY: another collector is folding, asked again after the delay). */
static int fold_now(struct coll_server *s, bool wait)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	int r = coll_store_fold(s->fold_store, wait);
	char msg[320];

	if (r == -EBUSY) { /* another collector is folding: try again after the delay */
		atomic_fetch_add(&s->fold_busy, 1);
		pthread_mutex_lock(&s->fold_lock);
		s->fold_wanted = true;
		pthread_mutex_unlock(&s->fold_lock);
		return r;
	}
	if (r < 0) {
		/* the deltas stay queued; the next commit or report folds them */
		if (atomic_fetch_add(&s->fold_errors, 1) == 0 && s->log) {
			snprintf(msg, sizeof(msg), "rollup fold failed (logged once): %s",
				 coll_store_errmsg(s->fold_store));
			s->log(msg);
		}
		return r;
	}
	atomic_fetch_add(&s->folds, 1);
	atomic_fetch_add(&s->folded_batches, (uint64_t)r);
	atomic_fetch_add(&s->fold_us, (now_ns(CLOCK_MONOTONIC) - t0) / 1000);
	return r;
}

void *srv_fold_main(void *arg)
{
	struct coll_server *s = arg;

	pthread_mutex_lock(&s->fold_lock);
	for (;;) {
		struct timespec until;

		while (!s->fold_wanted && !s->fold_stop)
			pthread_cond_wait(&s->fold_cond, &s->fold_lock);
		if (s->fold_stop)
			break;
		clock_gettime(CLOCK_MONOTONIC, &until);
		add_ms(&until, s->fold_delay_ms);
		while (!s->fold_stop && !s->fold_soon &&
		       pthread_cond_timedwait(&s->fold_cond, &s->fold_lock, &until) != ETIMEDOUT)
			;
		if (s->fold_stop)
			break;
		s->fold_wanted = s->fold_soon = false;
		s->fold_backlog = 0;
		pthread_mutex_unlock(&s->fold_lock);
		fold_now(s, false);
		pthread_mutex_lock(&s->fold_lock);
	}
	pthread_mutex_unlock(&s->fold_lock);
	/* whatever the last batches queued; once more after a failure: a connection the server
	 * closed meanwhile (a restart of PostgreSQL) is found broken by its first use, and the
	 * store opens a fresh one on the next call (the deltas stay queued either way) */
	if (fold_now(s, true) < 0)
		fold_now(s, true);
	return NULL;
}

int coll_server_set_fold_store(struct coll_server *srv, struct coll_store *st, unsigned delay_ms)
{
	pthread_condattr_t ca;
	int r;

	if (srv->fold_started)
		return -EINVAL;
	srv->fold_store = st;
	srv->fold_delay_ms = delay_ms;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&srv->fold_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&srv->fold_lock, NULL);
	srv->fold_wanted = true; /* what an earlier run left queued */
	r = -pthread_create(&srv->fold_thread, NULL, srv_fold_main, srv);
	if (r < 0) {
		pthread_cond_destroy(&srv->fold_cond);
		pthread_mutex_destroy(&srv->fold_lock);
		return r;
	}
	srv->fold_started = true;
	return 0;
}

int coll_server_add_ingest_store(struct coll_server *srv, struct coll_store *st)
{
	int r = 0;

	pthread_mutex_lock(&srv->pool_lock);
	if (srv->npool >= COLL_INGEST_POOL_MAX)
		r = -E2BIG;
	else
		srv->pool[srv->npool++] = st;
	pthread_cond_signal(&srv->pool_free);
	pthread_mutex_unlock(&srv->pool_lock);
	return r;
}

struct line {
	const char *p;
	size_t len;
};

/*
 * Decoding dominates ingest CPU, so a large batch is cut at line boundaries into up to
 * DECODE_THREADS_MAX chunks decoded in parallel (acct_batch_parse per chunk, indexes offset).
 * Line rules stay those of acct_batch_parse: a chunk ending in an empty line loses that line
 * (a trailing line ending is optional), which is caught afterwards as "empty line".
 */
#define DECODE_THREADS_MAX 4

#define DECODE_LINES_PER_THREAD 128

struct batch {
	size_t n;
	struct line *lines;
	struct acct_record *recs;
	char **errors; /* per line: NULL = valid */
	size_t n_bad;
	/* the records' strings, a chunk's in its own (freed with the records: batch_free) */
	struct acct_arena arenas[DECODE_THREADS_MAX];
};

struct chunk {
	struct batch *b;
	struct acct_arena *arena;
	size_t first; /* index of the chunk's first line in the batch */
	const char *buf;
	size_t len;
	size_t max;
	int ret;
};

static int batch_cb(size_t rel, struct acct_record *r, const char *error, void *userdata)
{
	struct chunk *ch = userdata;
	struct batch *b = ch->b;
	size_t index = ch->first + rel;

	if (index >= b->n)
		return -EINVAL;
	if (r) {
		b->recs[index] = *r;
		memset(r, 0, sizeof(*r));
		return 0;
	}
	b->errors[index] = strdup(error ?: "invalid record");
	return b->errors[index] ? 0 : -ENOMEM;
}

static void *chunk_thread(void *p)
{
	struct chunk *ch = p;

	ch->ret = acct_batch_parse_in(ch->buf, ch->len, ch->max, batch_cb, ch, ch->arena);
	return NULL;
}

static int parse_parallel(struct batch *b, const char *buf, size_t len, size_t max)
{
	struct chunk ch[DECODE_THREADS_MAX];
	pthread_t th[DECODE_THREADS_MAX];
	bool started[DECODE_THREADS_MAX] = {false};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t k = MIN((size_t)MAX(cpus, 1L), (size_t)DECODE_THREADS_MAX);
	int r = 0;

	k = MAX((size_t)1, MIN(k, b->n / DECODE_LINES_PER_THREAD));
	for (size_t j = 0; j < k; j++) {
		size_t first = j * b->n / k, end = (j + 1) * b->n / k;

		ch[j] = (struct chunk){.b = b, .arena = &b->arenas[j], .first = first, .max = max};
		if (b->n == 0)
			break;
		ch[j].buf = b->lines[first].p;
		ch[j].len = j + 1 == k
				? (size_t)(buf + len - ch[j].buf)
				: (size_t)(b->lines[end - 1].p + b->lines[end - 1].len - ch[j].buf);
	}
	for (size_t j = 1; j < k; j++)
		started[j] = pthread_create(&th[j], NULL, chunk_thread, &ch[j]) == 0;
	for (size_t j = 0; j < k; j++)
		if (!started[j])
			chunk_thread(&ch[j]);
	for (size_t j = 0; j < k; j++) {
		if (started[j])
			pthread_join(th[j], NULL);
		if (ch[j].ret < 0 && r == 0)
			r = ch[j].ret;
	}
	if (r < 0)
		return r;
	for (size_t i = 0; i < b->n; i++) {
		if (!b->errors[i] && !b->recs[i].record_id[0]) {
			b->errors[i] = strdup("empty line");
			if (!b->errors[i])
				return -ENOMEM;
		}
		if (b->errors[i])
			b->n_bad++;
	}
	return 0;
}

static void batch_free(struct batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		if (b->recs)
			acct_record_clear(&b->recs[i]);
		if (b->errors)
			free(b->errors[i]);
	}
	free(b->recs);
	free(b->errors);
	free(b->lines);
	for (size_t j = 0; j < DECODE_THREADS_MAX; j++)
		acct_arena_free(&b->arenas[j]);
}

/* Same line rules as acct_batch_parse(): split on "\n", strip one "\r". */
static void split_lines(const char *buf, size_t len, struct line *lines, size_t n)
{
	size_t pos = 0, i = 0;

	while (pos < len && i < n) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - buf) : len, l = end - pos;

		if (l > 0 && buf[end - 1] == '\r')
			l--;
		lines[i].p = buf + pos;
		lines[i++].len = l;
		pos = nl ? end + 1 : len;
	}
}

/* record_id of an undecodable line, if it is JSON with a string record_id. */
static char *guess_record_id(const struct line *l)
{
	json_t *o = json_loadb(l->p, l->len, 0, NULL);
	const char *id = o ? json_string_value(json_object_get(o, "record_id")) : NULL;
	char *ret = id && strlen(id) < ACCT_ID_MAX ? strdup(id) : NULL;

	json_decref(o);
	return ret;
}

static void on_chain_break(const struct coll_chain_break *b, void *ud)
{
	struct coll_server *s = ud;

	atomic_fetch_add(&s->audit_breaks, 1);
	srv_log(s, "audit chain break (%s) on node %s: %s%s", coll_break_kind_to_string(b->kind),
		b->node, b->why, b->listed ? "" : " [not added to audit_breaks]");
}

/* After COMMIT: flag audit chain breaks (the records stay stored whatever the outcome). */
static void check_audit_chain(struct coll_server *s, const struct coll_item *items, size_t n)
{
	struct coll_chain_ingest_stats st;
	int r = coll_chain_ingest(s->heads, s->store, items, n, on_chain_break, s, &st);

	atomic_fetch_add(&s->audit_checked, st.checked - st.unchecked);
	if (r < 0) {
		atomic_fetch_add(&s->audit_check_errors, 1);
		srv_log(s, "audit chain check incomplete (%zu records unchecked): %s", st.unchecked,
			r == -ENOMEM ? strerror(ENOMEM) : coll_store_errmsg(s->store));
	}
	/* the breaks it listed are durable before the answer, as the batch is (a no-op when it
	 * listed none: nothing was committed since the batch's own fsync) */
	if (st.breaks > 0 && (r = coll_store_sync(s->store)) < 0) {
		atomic_fetch_add(&s->sync_errors, 1);
		srv_log(s,
			"fsync of the database's WAL after listing audit chain breaks failed: %s",
			strerror(-r));
	}
}

/* Whether a stored body and a received one are the same record: the same bytes, or the same
 * canonical form (sorted keys, compact; audit: the same hash). */
static bool same_record(const char *stored, const struct coll_item *it)
{
	struct acct_record old = {0};
	_cleanup_free_ char *a = NULL, *b = NULL;
	size_t al = 0, bl = 0;
	char err[128];
	bool same;

	if (strlen(stored) == it->json_len && memcmp(stored, it->json, it->json_len) == 0)
		return true;
	if (acct_record_decode(stored, strlen(stored), &old, err, sizeof(err)) < 0)
		return false;
	same = acct_record_canonical(&old, &a, &al) == 0 &&
	       acct_record_canonical(it->rec, &b, &bl) == 0 && al == bl && memcmp(a, b, al) == 0 &&
	       strcmp(old.hash, it->rec->hash) == 0;
	/* A task.start or task.end made again by a restarted agent (it re-adopted the task and
	 * cannot know whether the first copy left: "adopted":true) is the same fact observed
	 * later: the same record for the task, the first copy is kept. */
	if (!same && (it->rec->type == ACCT_TASK_START || it->rec->type == ACCT_TASK_END) &&
	    old.type == it->rec->type && json_is_true(json_object_get(it->rec->extra, "adopted")) &&
	    old.node && it->rec->node && strcmp(old.node, it->rec->node) == 0 &&
	    strcmp(old.task.id, it->rec->task.id) == 0)
		same = true;
	acct_record_clear(&old);
	return same;
}

/*
 * After COMMIT, each record found already stored: a true resend (same record) stays a
 * duplicate; another body under that id is a conflict, kept with both bodies (table conflicts)
 * and flagged in conflict[i]. Returns the number of conflicts, or a negative errno (the store
 * failed: nothing is answered, the node resends and this runs again).
 */
static int find_conflicts(struct coll_server *s, const struct coll_item *items, size_t n,
			  bool *conflict)
{
	char detected[RFC3339_MAX];
	int found = 0, r;

	format_rfc3339_us(now_ns(CLOCK_REALTIME), detected, sizeof(detected));
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *stored = NULL, *recv = NULL;
		char sha[ACCT_HASH_HEX];

		if (items[i].is_new)
			continue;
		r = coll_store_body_get(s->store, items[i].rec->record_id, &stored);
		if (r == -ENOENT) /* the batch's commit failed after all: sync_group */
			continue;
		if (r < 0)
			return r;
		if (same_record(stored, &items[i]))
			continue;
		recv = strndup(items[i].json, items[i].json_len);
		if (!recv || acct_sha256_hex(recv, items[i].json_len, sha) < 0)
			return -ENOMEM;
		r = coll_store_conflict_add(
		    s->store, &(struct coll_conflict){.record_id = items[i].rec->record_id,
						      .node = items[i].rec->node,
						      .detected = detected,
						      .stored_body = stored,
						      .received_body = recv,
						      .received_sha256 = sha});
		if (r < 0)
			return r;
		if (r > 0)
			srv_log(s,
				"record id conflict from node %s: %s was stored with another body "
				"(kept in table conflicts, answered \"conflict\")",
				items[i].rec->node, items[i].rec->record_id);
		conflict[i] = true;
		found++;
	}
	/* durable before the answer, as the batch is */
	if (found > 0 && (r = coll_store_sync(s->store)) < 0)
		return r;
	return found;
}

/*
 * A batch between its parse and its answer. Its database work (group commit, chain check,
 * conflicts) runs on an ingest worker while its connection is suspended
 * (MHD_suspend_connection), so the server thread goes on serving its other connections, and
 * several batches that arrived on one server thread commit together; the worker resumes the
 * connection, and the server thread answers.
 */
struct post_work {
	struct MHD_Connection *c;
	struct batch b;
	struct coll_item *items;
	bool *conflict;
	struct coll_deltas pre;
	bool have_pre;
	struct timespec t0;
	int r;	       /* ingest: < 0 nothing stored */
	int rc;	       /* find_conflicts: < 0 the check failed */
	char why[256]; /* the store's message when r or rc < 0 */
	struct post_work *next;
};

void srv_post_work_free(struct post_work *pw)
{
	if (!pw)
		return;
	free(pw->pre.d);
	free(pw->items);
	free(pw->conflict);
	batch_free(&pw->b);
	free(pw);
}

/* The database part of a POST: on an ingest worker, or inline when none is free. */
static void post_store(struct coll_server *s, struct post_work *pw)
{
	pw->r =
	    ingest(s, pw->items, pw->b.n, pw->have_pre ? &pw->pre : NULL, pw->why, sizeof(pw->why));
	if (pw->r < 0)
		return;
	/* conflicts first: a record held as one is a link of its node's audit chain (the chain
	 * is checked whatever the outcome: a resend finds the records stored, not new) */
	pw->rc = find_conflicts(s, pw->items, pw->b.n, pw->conflict);
	if (pw->rc < 0)
		snprintf(pw->why, sizeof(pw->why), "%s",
			 pw->rc == -ENOMEM ? strerror(ENOMEM) : coll_store_errmsg(s->store));
	check_audit_chain(s, pw->items, pw->b.n);
}

void *srv_ingest_worker(void *arg)
{
	struct coll_server *s = arg;

	pthread_mutex_lock(&s->work_lock);
	for (;;) {
		struct post_work *pw;
		struct MHD_Connection *c;

		while (!s->work_head && !s->work_stop)
			pthread_cond_wait(&s->work_cond, &s->work_lock);
		if (!s->work_head) /* stopping, and every queued batch is answered */
			break;
		pw = s->work_head;
		s->work_head = pw->next;
		if (!s->work_head)
			s->work_tail = NULL;
		s->work_queued--;
		pthread_mutex_unlock(&s->work_lock);
		c = pw->c;
		post_store(s, pw);
		/* from here pw is the server thread's: it answers and frees it */
		MHD_resume_connection(c);
		pthread_mutex_lock(&s->work_lock);
	}
	pthread_mutex_unlock(&s->work_lock);
	return NULL;
}

/*
 * Open connections of the calling server thread: MHD_OPTION_NOTIFY_CONNECTION runs in the
 * pool thread that accepted the connection, which is the one that serves it.
 */
static _Thread_local unsigned thread_conns;

void srv_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			   enum MHD_ConnectionNotificationCode toe)
{
	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		thread_conns++;
	else if (thread_conns > 0)
		thread_conns--;
}

/*
 * Hands pw to an ingest worker and suspends its connection; false: run it inline, on this
 * server thread, which then serves nothing else until the batch is stored. That is done when
 * the connection is the thread's only one (no one waits behind it, and the handoff's two
 * wakeups are saved), or when no worker can take it (none started, or max_queued batches
 * queued already: srv_shed answers such a POST 503 before its decode, so this is a race).
 */
bool srv_shed(struct coll_server *s)
{
	size_t q;

	pthread_mutex_lock(&s->work_lock);
	q = s->work_queued;
	pthread_mutex_unlock(&s->work_lock);
	if (q < s->max_queued)
		return false;
	atomic_fetch_add(&s->shed, 1);
	return true;
}

static bool post_submit(struct coll_server *s, struct post_work *pw)
{
	if (thread_conns <= 1) {
		atomic_fetch_add(&s->alone_batches, 1);
		return false;
	}
	pthread_mutex_lock(&s->work_lock);
	if (s->nworkers == 0 || s->work_stop || s->work_queued >= s->max_queued) {
		pthread_mutex_unlock(&s->work_lock);
		atomic_fetch_add(&s->inline_batches, 1);
		return false;
	}
	/* suspended before a worker can resume it */
	MHD_suspend_connection(pw->c);
	pw->next = NULL;
	if (s->work_tail)
		s->work_tail->next = pw;
	else
		s->work_head = pw;
	s->work_tail = pw;
	s->work_queued++;
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->work_lock);
	return true;
}

/* The answer to a stored batch (takes pw). */
enum MHD_Result srv_post_answer(struct coll_server *s, struct MHD_Connection *c,
				struct post_work *pw)
{
	size_t accepted = 0, dup = 0, nconf = 0, blen = 0;
	const struct batch *b = &pw->b;
	enum MHD_Result ret;
	char *body = NULL;
	FILE *f;

	if (pw->r < 0) {
		atomic_fetch_add(&s->db_errors, 1);
		ret = srv_reply_error(s, c, pw->r == -ENOMEM ? 500 : 503,
				      "database unavailable, nothing stored: %s", pw->why);
		goto out;
	}
	if (pw->rc < 0) {
		atomic_fetch_add(&s->db_errors, 1);
		ret = srv_reply_error(s, c, pw->rc == -ENOMEM ? 500 : 503,
				      "database unavailable while checking resent records: %s",
				      pw->why);
		goto out;
	}
	f = open_memstream(&body, &blen);
	if (!f) {
		ret = srv_reply_error(s, c, 500, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < b->n; i++)
		pw->items[i].is_new ? accepted++ : pw->conflict[i] ? nconf++ : dup++;
	fprintf(f,
		"{\"accepted\":%zu,\"duplicate\":%zu,\"conflict\":%zu,\"rejected\":0,"
		"\"results\":[",
		accepted, dup, nconf);
	/* one line per record of the batch: written without a format string (a fprintf per
	 * record was a few percent of the collector's ingest CPU) */
	for (size_t i = 0; i < b->n; i++) {
		char num[DECIMAL_STR_MAX(size_t)], *e = num + sizeof(num);

		for (size_t v = i; e == num + sizeof(num) || v; v /= 10)
			*--e = (char)('0' + v % 10);
		fputs(i ? ",{\"i\":" : "{\"i\":", f);
		fwrite(e, 1, (size_t)(num + sizeof(num) - e), f);
		fputs(",\"record_id\":", f);
		fputs_json_string(f, b->recs[i].record_id);
		if (pw->conflict[i])
			fputs(",\"status\":\"conflict\",\"reason\":\"record_id already stored with "
			      "another body (kept in the collector's conflicts table)\"}",
			      f);
		else
			fputs(pw->items[i].is_new ? ",\"status\":\"accepted\"}"
						  : ",\"status\":\"duplicate\"}",
			      f);
	}
	fputs("]}\n", f);
	if (fclose(f) != 0) {
		free(body);
		ret = MHD_NO;
		goto out;
	}
	atomic_fetch_add(&s->rec_accepted, accepted);
	atomic_fetch_add(&s->rec_duplicate, dup);
	atomic_fetch_add(&s->rec_conflict, nconf);
	srv_observe_latency(s, srv_elapsed_s(&pw->t0));
	ret = srv_reply(s, c, 200, "application/json", body, blen);
out:
	srv_post_work_free(pw);
	return ret;
}

/* A batch with bad lines: 422 listing every line (bad ones with their reason), nothing
 * stored. */
static enum MHD_Result reply_rejected(struct coll_server *s, struct MHD_Connection *c,
				      const struct batch *b)
{
	char *body = NULL;
	size_t blen = 0;
	FILE *f = open_memstream(&body, &blen);

	if (!f)
		return srv_reply_error(s, c, 500, "out of memory");
	fprintf(f, "{\"accepted\":0,\"duplicate\":0,\"rejected\":%zu,\"results\":[", b->n_bad);
	for (size_t i = 0; i < b->n; i++) {
		fprintf(f, "%s{\"i\":%zu", i ? "," : "", i);
		if (b->errors[i]) {
			_cleanup_free_ char *id = guess_record_id(&b->lines[i]);

			if (id) {
				fputs(",\"record_id\":", f);
				fputs_json_string(f, id);
			}
			fputs(",\"status\":\"rejected\",\"reason\":", f);
			fputs_json_string(f, b->errors[i]);
		} else {
			fputs(",\"record_id\":", f);
			fputs_json_string(f, b->recs[i].record_id);
			fputs(",\"status\":\"valid\"", f);
		}
		fputc('}', f);
	}
	fputs("]}\n", f);
	if (fclose(f) != 0) {
		free(body);
		return MHD_NO;
	}
	atomic_fetch_add(&s->rec_rejected, b->n_bad);
	return srv_reply(s, c, 422, "application/json", body, blen);
}

enum MHD_Result srv_handle_post(struct coll_server *s, struct MHD_Connection *c,
				const struct coll_token *tok, struct request *rq)
{
	struct post_work *pw = calloc(1, sizeof(*pw));
	struct batch *b;
	enum MHD_Result ret;
	int r;

	if (!pw)
		return srv_reply_error(s, c, 500, "out of memory");
	/* before the decode: a shed batch costs its bytes on the wire, not its parse */
	if (srv_shed(s)) {
		free(pw);
		return srv_reply_error(s, c, 503,
				       "overloaded: %zu batches wait for the database, retry after "
				       "%u s",
				       s->max_queued, s->retry_after_s);
	}
	b = &pw->b;
	pw->c = c;
	clock_gettime(CLOCK_MONOTONIC, &pw->t0);
	b->n = acct_batch_count_lines(rq->buf, rq->len);
	if (b->n > s->max_records) {
		ret = srv_reply_error(s, c, 413, "batch of %zu records exceeds max_records %zu",
				      b->n, s->max_records);
		goto out;
	}
	b->lines = calloc(b->n, sizeof(*b->lines));
	b->recs = calloc(b->n, sizeof(*b->recs));
	b->errors = calloc(b->n, sizeof(*b->errors));
	pw->items = calloc(b->n, sizeof(*pw->items));
	pw->conflict = calloc(b->n ? b->n : 1, sizeof(*pw->conflict));
	if (!b->lines || !b->recs || !b->errors || !pw->items || !pw->conflict) {
		ret = srv_reply_error(s, c, 500, "out of memory");
		goto out;
	}
	split_lines(rq->buf, rq->len, b->lines, b->n);
	r = parse_parallel(b, rq->buf, rq->len, s->max_records);
	if (r < 0) {
		ret =
		    srv_reply_error(s, c, r == -E2BIG ? 413 : 500, "batch parse: %s", strerror(-r));
		goto out;
	}

	/* Authorisation first: a node token writes only its own node's records. */
	for (size_t i = 0; i < b->n; i++) {
		if (b->errors[i])
			continue;
		if (tok->role != COLL_ROLE_NODE || !b->recs[i].node ||
		    strcmp(b->recs[i].node, tok->name) != 0) {
			atomic_fetch_add(&s->rec_rejected, b->n);
			ret = srv_refuse(s, c, 403, SRV_REFUSE_NODE, tok,
					 "record %zu (%s): node '%s' may not be written with "
					 "the %s token of '%s'",
					 i, b->recs[i].record_id, b->recs[i].node ?: "",
					 coll_role_to_string(tok->role), tok->name);
			goto out;
		}
	}

	if (b->n_bad > 0) {
		ret = reply_rejected(s, c, b);
		goto out;
	}

	for (size_t i = 0; i < b->n; i++)
		pw->items[i] = (struct coll_item){.rec = &b->recs[i],
						  .json = b->lines[i].p,
						  .json_len = b->lines[i].len,
						  .is_new = true};
	/*
	 * The rollup deltas, built here in the request's thread with every record taken as new:
	 * with SQLite's one writer, building them under the store's lock had them in series
	 * (docs/collector.md). No memory or too many: the store builds them itself.
	 */
	if (!s->store->no_rollups &&
	    coll_deltas_build(pw->items, b->n, &pw->pre.d, &pw->pre.n) == 0)
		pw->have_pre = true;
	/* the body (rq->buf, which the items point into) stays until the request completes */
	rq->post = pw;
	if (post_submit(s, pw))
		return MHD_YES; /* answered when the worker resumes the connection */
	rq->post = NULL;
	post_store(s, pw);
	return srv_post_answer(s, c, pw);
out:
	srv_post_work_free(pw);
	return ret;
}

void srv_stop_workers(struct coll_server *s)
{
	pthread_mutex_lock(&s->work_lock);
	s->work_stop = true;
	pthread_cond_broadcast(&s->work_cond);
	pthread_mutex_unlock(&s->work_lock);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	s->nworkers = 0;
	free(s->workers);
	s->workers = NULL;
}
