/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <jansson.h>
#include <microhttpd.h>

#include "accounting/batch.h"
#include "collector/audit_chain.h"
#include "collector/audit_query.h"
#include "collector/report.h"
#include "collector/server.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/escape.h"
#include "common/parse.h"

static const unsigned metric_codes[] = {200, 400, 401, 403, 404, 405, 413, 422, 500, 503};
static const double latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
					0.1,   0.25,   0.5,   1,    2.5,   10};

struct post_work;

struct coll_server {
	struct MHD_Daemon *daemon;
	struct coll_store *store;
	const struct coll_tokens *tokens;
	_Atomic(const struct price_sheet *) prices; /* GET /v1/reports/showback; NULL = off */
	uint64_t max_body;
	size_t max_records;
	atomic_int active; /* requests between first callback and completion */
	atomic_uint_fast64_t req_by_code[ARRAY_SIZE(metric_codes) + 1]; /* last: other */
	atomic_uint_fast64_t rec_accepted, rec_duplicate, rec_rejected, rec_conflict;
	atomic_uint_fast64_t batches, db_errors;
	atomic_uint_fast64_t lat_bucket[ARRAY_SIZE(latency_bounds) + 1];
	atomic_uint_fast64_t lat_sum_us;
	struct coll_chain_heads *heads; /* audit chain check at ingest */
	void (*log)(const char *msg);
	atomic_uint_fast64_t audit_checked, audit_breaks, audit_check_errors;
	/* Batches are inserted through a pool of store handles (one connection each), so
	 * concurrent POSTs commit in parallel where the database allows it (PostgreSQL). */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_free;
	struct coll_store *pool[COLL_INGEST_POOL_MAX];
	bool pool_busy[COLL_INGEST_POOL_MAX];
	size_t npool;
	struct ingest_job *queue_head, *queue_tail; /* batches waiting (group commit) */
	atomic_uint_fast64_t pool_waits, groups, sync_errors;
	/* Folder: applies the rollup deltas ingest queued (coll_store_fold), on its own handle,
	 * fold_delay_ms after a commit, so the deltas of the batches meanwhile go together. */
	struct coll_store *fold_store;
	pthread_t fold_thread;
	bool fold_started;
	pthread_mutex_t fold_lock;
	pthread_cond_t fold_cond;
	bool fold_wanted, fold_stop;
	unsigned fold_delay_ms;
	atomic_uint_fast64_t folds, folded_batches, fold_busy, fold_errors, fold_us;
	/* Ingest workers: a batch's database work, its connection suspended meanwhile
	 * (struct post_work). */
	pthread_mutex_t work_lock;
	pthread_cond_t work_cond;
	struct post_work *work_head, *work_tail;
	size_t work_queued;
	bool work_stop;
	pthread_t *workers;
	unsigned nworkers;
	atomic_uint_fast64_t inline_batches;
};

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

static void fold_now(struct coll_server *s, bool wait)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	int r = coll_store_fold(s->fold_store, wait);
	char msg[320];

	if (r == -EBUSY) { /* another collector is folding: try again after the delay */
		atomic_fetch_add(&s->fold_busy, 1);
		pthread_mutex_lock(&s->fold_lock);
		s->fold_wanted = true;
		pthread_mutex_unlock(&s->fold_lock);
		return;
	}
	if (r < 0) {
		/* the deltas stay queued; the next commit or report folds them */
		if (atomic_fetch_add(&s->fold_errors, 1) == 0 && s->log) {
			snprintf(msg, sizeof(msg), "rollup fold failed (logged once): %s",
				 coll_store_errmsg(s->fold_store));
			s->log(msg);
		}
		return;
	}
	atomic_fetch_add(&s->folds, 1);
	atomic_fetch_add(&s->folded_batches, (uint64_t)r);
	atomic_fetch_add(&s->fold_us, (now_ns(CLOCK_MONOTONIC) - t0) / 1000);
}

static void *fold_main(void *arg)
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
		while (!s->fold_stop &&
		       pthread_cond_timedwait(&s->fold_cond, &s->fold_lock, &until) != ETIMEDOUT)
			;
		if (s->fold_stop)
			break;
		s->fold_wanted = false;
		pthread_mutex_unlock(&s->fold_lock);
		fold_now(s, false);
		pthread_mutex_lock(&s->fold_lock);
	}
	pthread_mutex_unlock(&s->fold_lock);
	fold_now(s, true); /* whatever the last batches queued */
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
	r = -pthread_create(&srv->fold_thread, NULL, fold_main, srv);
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

struct request {
	bool started;
	bool too_big;	  /* the body is read and dropped, then answered 413 */
	uint64_t dropped; /* bytes of it dropped so far */
	char *buf;
	size_t len, cap;
	struct post_work *post; /* a batch at an ingest worker (its connection suspended) */
};

/* An oversized body is read and dropped up to this many times max_body, so that a client that
 * does not wait for "100 Continue" reads a 413 instead of a reset; beyond, the connection is
 * closed. */
#define TOO_BIG_DRAIN_FACTOR 16

/* ---- small output helpers ---- */

static void count_code(struct coll_server *s, unsigned code)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(metric_codes); i++)
		if (metric_codes[i] == code)
			break;
	atomic_fetch_add(&s->req_by_code[i], 1);
}

/* Queue a response; takes ownership of body (malloc'd or NULL). */
static enum MHD_Result reply(struct coll_server *s, struct MHD_Connection *c, unsigned code,
			     const char *ctype, char *body, size_t len)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	count_code(s, code);
	resp = MHD_create_response_from_buffer(
	    len, body ?: (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (code == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	ret = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

_printf_(4, 5) static enum MHD_Result reply_error(struct coll_server *s, struct MHD_Connection *c,
						  unsigned code, const char *fmt, ...)
{
	char msg[512];
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	f = open_memstream(&body, &len);
	if (!f)
		return MHD_NO;
	fputs("{\"error\":", f);
	fputs_json_string(f, msg);
	fputs("}\n", f);
	if (fclose(f) != 0) {
		free(body);
		return MHD_NO;
	}
	return reply(s, c, code, "application/json", body, len);
}

/* ---- auth ---- */

static const struct coll_token *authenticate(struct coll_server *s, struct MHD_Connection *c)
{
	const char *h =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return NULL;
	h += 7;
	while (*h == ' ')
		h++;
	return coll_tokens_find(s->tokens, h, strlen(h));
}

/* ---- POST /v1/records ---- */

struct line {
	const char *p;
	size_t len;
};

struct batch {
	size_t n;
	struct line *lines;
	struct acct_record *recs;
	char **errors; /* per line: NULL = valid */
	size_t n_bad;
};

struct chunk {
	struct batch *b;
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

	ch->ret = acct_batch_parse(ch->buf, ch->len, ch->max, batch_cb, ch);
	return NULL;
}

/*
 * Decoding dominates ingest CPU, so a large batch is cut at line boundaries into up to
 * DECODE_THREADS_MAX chunks decoded in parallel (acct_batch_parse per chunk, indexes offset).
 * Line rules stay those of acct_batch_parse: a chunk ending in an empty line loses that line
 * (a trailing line ending is optional), which is caught afterwards as "empty line".
 */
#define DECODE_THREADS_MAX	4
#define DECODE_LINES_PER_THREAD 128
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

		ch[j] = (struct chunk){.b = b, .first = first, .max = max};
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

static double elapsed_s(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void observe_latency(struct coll_server *s, double secs)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(latency_bounds); i++)
		if (secs <= latency_bounds[i])
			break;
	atomic_fetch_add(&s->lat_bucket[i], 1);
	atomic_fetch_add(&s->lat_sum_us, (uint64_t)(secs * 1e6));
	atomic_fetch_add(&s->batches, 1);
}

_printf_(2, 3) static void log_msg(struct coll_server *s, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	if (!s->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->log(msg);
}

static void on_chain_break(const struct coll_chain_break *b, void *ud)
{
	struct coll_server *s = ud;

	atomic_fetch_add(&s->audit_breaks, 1);
	log_msg(s, "audit chain break (%s) on node %s: %s%s", coll_break_kind_to_string(b->kind),
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
		log_msg(s, "audit chain check incomplete (%zu records unchecked): %s", st.unchecked,
			r == -ENOMEM ? strerror(ENOMEM) : coll_store_errmsg(s->store));
	}
	/* the breaks it listed are durable before the answer, as the batch is (a no-op when it
	 * listed none: nothing was committed since the batch's own fsync) */
	if (st.breaks > 0 && (r = coll_store_sync(s->store)) < 0) {
		atomic_fetch_add(&s->sync_errors, 1);
		log_msg(s,
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
			log_msg(s,
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

static void post_work_free(struct post_work *pw)
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

static void *ingest_worker(void *arg)
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

/* Hands pw to an ingest worker and suspends its connection; false: none can take it now (no
 * workers, or INGEST_QUEUE_PER_WORKER batches per worker queued already), run it inline. */
#define INGEST_QUEUE_PER_WORKER 4
static bool post_submit(struct coll_server *s, struct post_work *pw)
{
	pthread_mutex_lock(&s->work_lock);
	if (s->nworkers == 0 || s->work_stop ||
	    s->work_queued >= INGEST_QUEUE_PER_WORKER * s->nworkers) {
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
static enum MHD_Result post_answer(struct coll_server *s, struct MHD_Connection *c,
				   struct post_work *pw)
{
	size_t accepted = 0, dup = 0, nconf = 0, blen = 0;
	const struct batch *b = &pw->b;
	enum MHD_Result ret;
	char *body = NULL;
	FILE *f;

	if (pw->r < 0) {
		atomic_fetch_add(&s->db_errors, 1);
		ret = reply_error(s, c, pw->r == -ENOMEM ? 500 : 503,
				  "database unavailable, nothing stored: %s", pw->why);
		goto out;
	}
	if (pw->rc < 0) {
		atomic_fetch_add(&s->db_errors, 1);
		ret =
		    reply_error(s, c, pw->rc == -ENOMEM ? 500 : 503,
				"database unavailable while checking resent records: %s", pw->why);
		goto out;
	}
	f = open_memstream(&body, &blen);
	if (!f) {
		ret = reply_error(s, c, 500, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < b->n; i++)
		pw->items[i].is_new ? accepted++ : pw->conflict[i] ? nconf++ : dup++;
	fprintf(f,
		"{\"accepted\":%zu,\"duplicate\":%zu,\"conflict\":%zu,\"rejected\":0,"
		"\"results\":[",
		accepted, dup, nconf);
	for (size_t i = 0; i < b->n; i++) {
		fprintf(f, "%s{\"i\":%zu,\"record_id\":", i ? "," : "", i);
		fputs_json_string(f, b->recs[i].record_id);
		if (pw->conflict[i])
			fputs(",\"status\":\"conflict\",\"reason\":\"record_id already stored with "
			      "another body (kept in the collector's conflicts table)\"}",
			      f);
		else
			fprintf(f, ",\"status\":\"%s\"}",
				pw->items[i].is_new ? "accepted" : "duplicate");
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
	observe_latency(s, elapsed_s(&pw->t0));
	ret = reply(s, c, 200, "application/json", body, blen);
out:
	post_work_free(pw);
	return ret;
}

static enum MHD_Result handle_post(struct coll_server *s, struct MHD_Connection *c,
				   const struct coll_token *tok, struct request *rq)
{
	struct post_work *pw = calloc(1, sizeof(*pw));
	struct batch *b;
	char *body = NULL;
	size_t blen = 0;
	enum MHD_Result ret;
	FILE *f;
	int r;

	if (!pw)
		return reply_error(s, c, 500, "out of memory");
	b = &pw->b;
	pw->c = c;
	clock_gettime(CLOCK_MONOTONIC, &pw->t0);
	b->n = acct_batch_count_lines(rq->buf, rq->len);
	if (b->n > s->max_records) {
		ret = reply_error(s, c, 413, "batch of %zu records exceeds max_records %zu", b->n,
				  s->max_records);
		goto out;
	}
	b->lines = calloc(b->n, sizeof(*b->lines));
	b->recs = calloc(b->n, sizeof(*b->recs));
	b->errors = calloc(b->n, sizeof(*b->errors));
	pw->items = calloc(b->n, sizeof(*pw->items));
	pw->conflict = calloc(b->n ? b->n : 1, sizeof(*pw->conflict));
	if (!b->lines || !b->recs || !b->errors || !pw->items || !pw->conflict) {
		ret = reply_error(s, c, 500, "out of memory");
		goto out;
	}
	split_lines(rq->buf, rq->len, b->lines, b->n);
	r = parse_parallel(b, rq->buf, rq->len, s->max_records);
	if (r < 0) {
		ret = reply_error(s, c, r == -E2BIG ? 413 : 500, "batch parse: %s", strerror(-r));
		goto out;
	}

	/* Authorisation first: a node token writes only its own node's records. */
	for (size_t i = 0; i < b->n; i++) {
		if (b->errors[i])
			continue;
		if (tok->role != COLL_ROLE_NODE || !b->recs[i].node ||
		    strcmp(b->recs[i].node, tok->name) != 0) {
			atomic_fetch_add(&s->rec_rejected, b->n);
			ret = reply_error(s, c, 403,
					  "record %zu (%s): node '%s' may not be written with "
					  "the %s token of '%s'",
					  i, b->recs[i].record_id, b->recs[i].node ?: "",
					  coll_role_to_string(tok->role), tok->name);
			goto out;
		}
	}

	if (b->n_bad > 0) {
		f = open_memstream(&body, &blen);
		if (!f) {
			ret = reply_error(s, c, 500, "out of memory");
			goto out;
		}
		fprintf(f, "{\"accepted\":0,\"duplicate\":0,\"rejected\":%zu,\"results\":[",
			b->n_bad);
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
			ret = MHD_NO;
			goto out;
		}
		atomic_fetch_add(&s->rec_rejected, b->n_bad);
		ret = reply(s, c, 422, "application/json", body, blen);
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
	return post_answer(s, c, pw);
out:
	post_work_free(pw);
	return ret;
}

/* ---- GET handlers ---- */

static int query_cb(const struct coll_row *row, void *ud)
{
	FILE *f = ud;

	fputs(row->body, f);
	fputc('\n', f);
	return 0;
}

/* Reader tokens: every record but the audit trail, which is the auditor's (GET /v1/audit). */
static enum MHD_Result handle_query(struct coll_server *s, struct MHD_Connection *c)
{
	struct coll_query q = {
	    .type = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "type"),
	    .node = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "node"),
	    .task_id = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "task"),
	    .audit = COLL_QUERY_NO_AUDIT,
	    .limit = COLL_QUERY_LIMIT_DEFAULT,
	};
	const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (q.type && strncmp(q.type, "audit.", 6) == 0)
		return reply_error(s, c, 403,
				   "type: audit records need an auditor token (GET /v1/audit)");
	if (lim) {
		uint64_t v;

		if (parse_u64(lim, &v) < 0 || v == 0 || v > COLL_QUERY_LIMIT_MAX)
			return reply_error(s, c, 400, "limit: expected 1..%d",
					   COLL_QUERY_LIMIT_MAX);
		q.limit = (size_t)v;
	}
	f = open_memstream(&body, &len);
	if (!f)
		return reply_error(s, c, 500, "out of memory");
	r = coll_store_query(s->store, &q, query_cb, f);
	if (fclose(f) != 0 || r < 0) {
		free(body);
		if (r < 0)
			atomic_fetch_add(&s->db_errors, 1);
		return reply_error(s, c, r == -ENOMEM ? 500 : 503, "query failed: %s",
				   coll_store_errmsg(s->store));
	}
	return reply(s, c, 200, "application/x-ndjson", body, len);
}

/* ---- GET /v1/audit, /v1/audit/verify, /v1/audit/breaks (auditor tokens) ---- */

struct audit_params {
	struct coll_audit_filter *f;
	const char *only; /* accepted keys, space separated; NULL = the filter's own */
	char err[256];
};

static enum MHD_Result audit_param(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	struct audit_params *p = cls;
	size_t kl = strlen(key);
	const char *at = p->only ? strstr(p->only, key) : NULL;

	(void)kind;
	if (p->only && (!at || (at != p->only && at[-1] != ' ') || (at[kl] && at[kl] != ' '))) {
		snprintf(p->err, sizeof(p->err), "unknown parameter '%.64s' (accepted: %s)", key,
			 p->only);
		return MHD_NO;
	}
	if (coll_audit_filter_set(p->f, key, value, p->err, sizeof(p->err)) < 0)
		return MHD_NO;
	return MHD_YES;
}

/* Apply every query parameter to f; false with p->err naming the bad one. */
static bool audit_params_parse(struct MHD_Connection *c, struct audit_params *p)
{
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, audit_param, p);
	return p->err[0] == 0;
}

struct audit_out {
	FILE *f;
	size_t n;
};

static int audit_row(const struct coll_row *row, void *ud)
{
	struct audit_out *o = ud;

	fputs(o->n++ ? ",\n" : "\n", o->f);
	fputs(row->body, o->f); /* as received: the hash covers exactly these bytes */
	return 0;
}

/* Close the memstream f of *body / *len (set by fclose) and answer; r < 0: the query failed. */
static enum MHD_Result finish_json(struct coll_server *s, struct MHD_Connection *c, FILE *f,
				   char **body, size_t *len, int r)
{
	if (fclose(f) != 0 || r < 0) {
		free(*body);
		if (r < 0 && r != -ENOMEM)
			atomic_fetch_add(&s->db_errors, 1);
		return reply_error(s, c, r == -ENOMEM || r == 0 ? 500 : 503, "query failed: %s",
				   r == -ENOMEM || r == 0 ? strerror(ENOMEM)
							  : coll_store_errmsg(s->store));
	}
	return reply(s, c, 200, "application/json", *body, *len);
}

static enum MHD_Result handle_audit(struct coll_server *s, struct MHD_Connection *c)
{
	struct coll_audit_filter flt = {.limit = COLL_AUDIT_LIMIT_DEFAULT};
	struct audit_params p = {.f = &flt};
	char next[COLL_AUDIT_CURSOR_MAX], *body = NULL;
	struct audit_out o = {0};
	size_t len = 0;
	int r;

	if (!audit_params_parse(c, &p))
		return reply_error(s, c, 400, "%s", p.err);
	o.f = open_memstream(&body, &len);
	if (!o.f)
		return reply_error(s, c, 500, "out of memory");
	fputs("{\"records\":[", o.f);
	r = coll_audit_query(s->store, &flt, audit_row, &o, next, sizeof(next));
	fprintf(o.f, "%s],\"count\":%zu,\"next\":", o.n ? "\n" : "", o.n);
	if (next[0])
		fputs_json_string(o.f, next);
	else
		fputs("null", o.f);
	fputs("}\n", o.f);
	return finish_json(s, c, o.f, &body, &len, r);
}

static enum MHD_Result handle_audit_verify(struct coll_server *s, struct MHD_Connection *c)
{
	struct coll_audit_filter flt = {0};
	struct audit_params p = {.f = &flt, .only = "node"};
	struct coll_chain_result res;
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (!audit_params_parse(c, &p))
		return reply_error(s, c, 400, "%s", p.err);
	if (!flt.node)
		return reply_error(s, c, 400, "node: required");
	r = coll_chain_verify_node(s->store, flt.node, 0, &res);
	if (r < 0) {
		if (r != -ENOMEM && r != -E2BIG)
			atomic_fetch_add(&s->db_errors, 1);
		return reply_error(
		    s, c, r == -ENOMEM || r == -E2BIG ? 500 : 503, "verify failed: %s",
		    r == -ENOMEM || r == -E2BIG ? strerror(-r) : coll_store_errmsg(s->store));
	}
	f = open_memstream(&body, &len);
	if (!f)
		return reply_error(s, c, 500, "out of memory");
	r = coll_chain_result_write_json(f, flt.node, &res);
	return finish_json(s, c, f, &body, &len, r < 0 ? -ENOMEM : 1);
}

static int break_row(const struct coll_audit_break *b, void *ud)
{
	struct audit_out *o = ud;

	fputs(o->n++ ? ",\n{\"record_id\":" : "\n{\"record_id\":", o->f);
	fputs_json_string(o->f, b->record_id);
	fputs(",\"node\":", o->f);
	fputs_json_string(o->f, b->node);
	fputs(",\"kind\":", o->f);
	fputs_json_string(o->f, b->kind);
	fputs(",\"reason\":", o->f);
	fputs_json_string(o->f, b->reason);
	fputs(",\"detected\":", o->f);
	fputs_json_string(o->f, b->detected);
	fputc('}', o->f);
	return 0;
}

static enum MHD_Result handle_audit_breaks(struct coll_server *s, struct MHD_Connection *c)
{
	struct coll_audit_filter flt = {.limit = COLL_AUDIT_LIMIT_DEFAULT};
	struct audit_params p = {.f = &flt, .only = "node limit"};
	struct audit_out o = {0};
	char *body = NULL;
	size_t len = 0;
	int r;

	if (!audit_params_parse(c, &p))
		return reply_error(s, c, 400, "%s", p.err);
	o.f = open_memstream(&body, &len);
	if (!o.f)
		return reply_error(s, c, 500, "out of memory");
	fputs("{\"breaks\":[", o.f);
	r = coll_store_break_query(s->store, flt.node, flt.limit, break_row, &o);
	fprintf(o.f, "%s],\"count\":%zu}\n", o.n ? "\n" : "", o.n);
	return finish_json(s, c, o.f, &body, &len, r < 0 ? r : 1);
}

/* ---- GET /v1/reports/showback ---- */

void coll_server_set_prices(struct coll_server *srv, const struct price_sheet *ps)
{
	atomic_store(&srv->prices, ps);
}

static enum MHD_Result handle_showback(struct coll_server *s, struct MHD_Connection *c)
{
	const struct price_sheet *ps = atomic_load(&s->prices);
	const char *from = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "from");
	const char *to = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "to");
	const char *by = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "by");
	const char *period = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "period");
	const char *format = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "format");
	const char *top = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "top");
	enum report_format fmt = REPORT_FMT_JSON;
	struct report_spec spec;
	struct report rep;
	char err[256], *body = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (!ps)
		return reply_error(s, c, 404, "no price sheet configured (serve --prices FILE)");
	if (report_spec_init(&spec, from, to, err, sizeof(err)) < 0 ||
	    (by && report_spec_set_by(&spec, by, err, sizeof(err)) < 0) ||
	    (period && report_spec_set_period(&spec, period, err, sizeof(err)) < 0))
		return reply_error(s, c, 400, "%s", err);
	if (format && (report_format_from_string(format, &fmt) < 0 ||
		       (fmt != REPORT_FMT_JSON && fmt != REPORT_FMT_CSV)))
		return reply_error(s, c, 400, "format: expected json or csv");
	if (top) {
		uint64_t v;

		if (parse_u64(top, &v) < 0 || v > 1000000)
			return reply_error(s, c, 400, "top: expected 0..1000000");
		spec.top = (size_t)v;
	}
	r = report_build(s->store, &spec, ps, &rep);
	if (r < 0) {
		if (r != -ENOMEM)
			atomic_fetch_add(&s->db_errors, 1);
		return reply_error(s, c, r == -ENOMEM ? 500 : 503, "report failed: %s",
				   coll_store_errmsg(s->store));
	}
	f = open_memstream(&body, &len);
	if (!f) {
		report_free(&rep);
		return reply_error(s, c, 500, "out of memory");
	}
	r = report_write(&rep, fmt, f);
	report_free(&rep);
	if (fclose(f) != 0 || r < 0) {
		free(body);
		return reply_error(s, c, 500, "out of memory");
	}
	return reply(s, c, 200, fmt == REPORT_FMT_CSV ? "text/csv" : "application/json", body, len);
}

static enum MHD_Result handle_metrics(struct coll_server *s, struct MHD_Connection *c)
{
	char *body = NULL;
	size_t len = 0;
	uint64_t cum = 0;
	FILE *f = open_memstream(&body, &len);

	if (!f)
		return reply_error(s, c, 500, "out of memory");
	fputs("# HELP corral_collector_http_requests_total HTTP requests by status code.\n"
	      "# TYPE corral_collector_http_requests_total counter\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(metric_codes); i++)
		fprintf(f, "corral_collector_http_requests_total{code=\"%u\"} %" PRIuFAST64 "\n",
			metric_codes[i], atomic_load(&s->req_by_code[i]));
	fprintf(f, "corral_collector_http_requests_total{code=\"other\"} %" PRIuFAST64 "\n",
		atomic_load(&s->req_by_code[ARRAY_SIZE(metric_codes)]));
	fprintf(
	    f,
	    "# HELP corral_collector_records_total Records by ingest outcome.\n"
	    "# TYPE corral_collector_records_total counter\n"
	    "corral_collector_records_total{status=\"accepted\"} %" PRIuFAST64 "\n"
	    "corral_collector_records_total{status=\"duplicate\"} %" PRIuFAST64 "\n"
	    "corral_collector_records_total{status=\"rejected\"} %" PRIuFAST64 "\n"
	    "corral_collector_records_total{status=\"conflict\"} %" PRIuFAST64 "\n"
	    "# HELP corral_collector_db_errors_total Failed database calls (answered 503).\n"
	    "# TYPE corral_collector_db_errors_total counter\n"
	    "corral_collector_db_errors_total %" PRIuFAST64 "\n"
	    "# HELP corral_collector_batch_duration_seconds Committed batches, parse to COMMIT.\n"
	    "# TYPE corral_collector_batch_duration_seconds histogram\n",
	    atomic_load(&s->rec_accepted), atomic_load(&s->rec_duplicate),
	    atomic_load(&s->rec_rejected), atomic_load(&s->rec_conflict),
	    atomic_load(&s->db_errors));
	for (size_t i = 0; i <= ARRAY_SIZE(latency_bounds); i++) {
		cum += atomic_load(&s->lat_bucket[i]);
		if (i < ARRAY_SIZE(latency_bounds))
			fprintf(f,
				"corral_collector_batch_duration_seconds_bucket{le=\"%g\"} %" PRIu64
				"\n",
				latency_bounds[i], cum);
		else
			fprintf(
			    f,
			    "corral_collector_batch_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64
			    "\n",
			    cum);
	}
	fprintf(f,
		"corral_collector_batch_duration_seconds_sum %.6f\n"
		"corral_collector_batch_duration_seconds_count %" PRIuFAST64 "\n",
		(double)atomic_load(&s->lat_sum_us) / 1e6, atomic_load(&s->batches));
	fprintf(f,
		"# HELP corral_collector_audit_records_checked_total New audit records whose hash "
		"chain was checked at ingest.\n"
		"# TYPE corral_collector_audit_records_checked_total counter\n"
		"corral_collector_audit_records_checked_total %" PRIuFAST64 "\n"
		"# HELP corral_collector_audit_chain_breaks_total Audit chain breaks flagged at "
		"ingest (listed in GET /v1/audit/breaks).\n"
		"# TYPE corral_collector_audit_chain_breaks_total counter\n"
		"corral_collector_audit_chain_breaks_total %" PRIuFAST64 "\n"
		"# HELP corral_collector_audit_chain_check_errors_total Batches whose chain check "
		"could not complete (database error; records stored, run audit verify).\n"
		"# TYPE corral_collector_audit_chain_check_errors_total counter\n"
		"corral_collector_audit_chain_check_errors_total %" PRIuFAST64 "\n",
		atomic_load(&s->audit_checked), atomic_load(&s->audit_breaks),
		atomic_load(&s->audit_check_errors));
	fprintf(f,
		"# HELP corral_collector_db_connections Database connections batches are inserted "
		"through (--db-connections).\n"
		"# TYPE corral_collector_db_connections gauge\n"
		"corral_collector_db_connections %zu\n"
		"# HELP corral_collector_db_pool_waits_total Batches that waited for a free "
		"database connection.\n"
		"# TYPE corral_collector_db_pool_waits_total counter\n"
		"corral_collector_db_pool_waits_total %" PRIuFAST64 "\n"
		"# HELP corral_collector_db_transactions_total Insert transactions; batches that "
		"arrive while every connection is busy share one (group commit).\n"
		"# TYPE corral_collector_db_transactions_total counter\n"
		"corral_collector_db_transactions_total %" PRIuFAST64 "\n"
		"# HELP corral_collector_db_sync_errors_total Failed fsyncs of the database's "
		"WAL after a commit (SQLite); after one the collector stores nothing until "
		"restarted.\n"
		"# TYPE corral_collector_db_sync_errors_total counter\n"
		"corral_collector_db_sync_errors_total %" PRIuFAST64 "\n"
		"# HELP corral_collector_ingest_inline_total Batches stored by the server thread "
		"that received them, every ingest worker being busy with a full queue.\n"
		"# TYPE corral_collector_ingest_inline_total counter\n"
		"corral_collector_ingest_inline_total %" PRIuFAST64 "\n",
		s->npool, atomic_load(&s->pool_waits), atomic_load(&s->groups),
		atomic_load(&s->sync_errors), atomic_load(&s->inline_batches));
	if (s->fold_started)
		fprintf(
		    f,
		    "# HELP corral_collector_rollup_folds_total Folds of the queued rollup "
		    "deltas into the rollup tables (PostgreSQL).\n"
		    "# TYPE corral_collector_rollup_folds_total counter\n"
		    "corral_collector_rollup_folds_total %" PRIuFAST64 "\n"
		    "# HELP corral_collector_rollup_folded_batches_total Queued transactions' "
		    "deltas those folds applied.\n"
		    "# TYPE corral_collector_rollup_folded_batches_total counter\n"
		    "corral_collector_rollup_folded_batches_total %" PRIuFAST64 "\n"
		    "# HELP corral_collector_rollup_fold_seconds_total Time spent folding.\n"
		    "# TYPE corral_collector_rollup_fold_seconds_total counter\n"
		    "corral_collector_rollup_fold_seconds_total %.6f\n"
		    "# HELP corral_collector_rollup_fold_busy_total Folds put off because another "
		    "collector was folding.\n"
		    "# TYPE corral_collector_rollup_fold_busy_total counter\n"
		    "corral_collector_rollup_fold_busy_total %" PRIuFAST64 "\n"
		    "# HELP corral_collector_rollup_fold_errors_total Folds that failed (the "
		    "deltas stay queued).\n"
		    "# TYPE corral_collector_rollup_fold_errors_total counter\n"
		    "corral_collector_rollup_fold_errors_total %" PRIuFAST64 "\n",
		    atomic_load(&s->folds), atomic_load(&s->folded_batches),
		    (double)atomic_load(&s->fold_us) / 1e6, atomic_load(&s->fold_busy),
		    atomic_load(&s->fold_errors));
	if (fclose(f) != 0) {
		free(body);
		return MHD_NO;
	}
	return reply(s, c, 200, "text/plain; version=0.0.4", body, len);
}

/* ---- dispatch ---- */

static bool content_type_ok(struct MHD_Connection *c)
{
	const char *ct =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	static const char *const ok[] = {"application/x-ndjson", "application/ndjson",
					 "application/jsonl", "application/json"};

	if (!ct)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		size_t l = strlen(ok[i]);

		if (strncasecmp(ct, ok[i], l) == 0 && (ct[l] == 0 || ct[l] == ';' || ct[l] == ' '))
			return true;
	}
	return false;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url,
				      const char *method, const char *version,
				      const char *upload_data, size_t *upload_data_size,
				      void **con_cls)
{
	struct coll_server *s = cls;
	struct request *rq = *con_cls;
	bool is_get =
	    strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
	bool is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
	const struct coll_token *tok;

	if (!rq) {
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		*con_cls = rq;
		atomic_fetch_add(&s->active, 1);
		rq->started = true;

		if (strcmp(url, "/healthz") == 0 || strcmp(url, "/metrics") == 0) {
			if (!is_get)
				return reply_error(s, c, 405, "%s: use GET", url);
			if (url[1] == 'm')
				return handle_metrics(s, c);
			if (coll_store_ping(s->store) < 0) {
				atomic_fetch_add(&s->db_errors, 1);
				return reply(s, c, 503, "text/plain",
					     strdup("database unavailable\n"),
					     strlen("database unavailable\n"));
			}
			return reply(s, c, 200, "text/plain", strdup("ok\n"), 3);
		}
		if (strcmp(url, "/v1/audit") == 0 || strcmp(url, "/v1/audit/verify") == 0 ||
		    strcmp(url, "/v1/audit/breaks") == 0) {
			if (!is_get)
				return reply_error(s, c, 405, "%s: use GET", url);
			tok = authenticate(s, c);
			if (!tok)
				return reply_error(s, c, 401, "missing or unknown bearer token");
			if (tok->role != COLL_ROLE_AUDITOR)
				return reply_error(s, c, 403,
						   "%s needs an auditor token, not a %s token", url,
						   coll_role_to_string(tok->role));
			if (url[9] == 0)
				return handle_audit(s, c);
			return url[10] == 'v' ? handle_audit_verify(s, c)
					      : handle_audit_breaks(s, c);
		}
		if (strcmp(url, "/v1/reports/showback") == 0) {
			if (!is_get)
				return reply_error(s, c, 405, "%s: use GET", url);
			tok = authenticate(s, c);
			if (!tok)
				return reply_error(s, c, 401, "missing or unknown bearer token");
			if (tok->role != COLL_ROLE_READER)
				return reply_error(s, c, 403,
						   "reports need a reader token, not a %s token",
						   coll_role_to_string(tok->role));
			return handle_showback(s, c);
		}
		if (strcmp(url, "/v1/records") != 0)
			return reply_error(s, c, 404, "no such endpoint: %.200s", url);
		if (!is_get && !is_post)
			return reply_error(s, c, 405, "/v1/records: use POST or GET");
		tok = authenticate(s, c);
		if (!tok)
			return reply_error(s, c, 401, "missing or unknown bearer token");
		if (is_get) {
			if (tok->role != COLL_ROLE_READER)
				return reply_error(
				    s, c, 403,
				    "reading records needs a reader token, not a %s token%s",
				    coll_role_to_string(tok->role),
				    tok->role == COLL_ROLE_AUDITOR
					? " (audit records: GET /v1/audit)"
					: "");
			return handle_query(s, c);
		}
		if (tok->role != COLL_ROLE_NODE)
			return reply_error(s, c, 403, "only node tokens may write records");
		if (!content_type_ok(c))
			return reply_error(s, c, 400, "Content-Type must be application/x-ndjson");
		{
			const char *cl = MHD_lookup_connection_value(
			    c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
			uint64_t v;

			if (cl && parse_u64(cl, &v) == 0) {
				const char *ex = MHD_lookup_connection_value(
				    c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);

				/* a client waiting for "100 Continue" reads the answer now; any
				 * other is sending the body: it is read, dropped and answered */
				if (v > s->max_body &&
				    ((ex && strcasecmp(ex, "100-continue") == 0) ||
				     v / TOO_BIG_DRAIN_FACTOR > s->max_body))
					return reply_error(s, c, 413,
							   "body of %" PRIu64
							   " bytes exceeds max_body %" PRIu64,
							   v, s->max_body);
				if (v > s->max_body) {
					rq->too_big = true;
					return MHD_YES;
				}
				rq->buf = malloc(v + 1);
				if (!rq->buf)
					return reply_error(s, c, 500, "out of memory");
				rq->cap = v + 1;
			}
		}
		return MHD_YES;
	}

	if (rq->post) { /* resumed: the worker has stored the batch */
		struct post_work *pw = rq->post;

		rq->post = NULL;
		return post_answer(s, c, pw);
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		if (rq->too_big || rq->len + n > s->max_body) {
			rq->too_big = true;
			rq->dropped += n;
			/* a body without end: not read forever */
			return rq->dropped / TOO_BIG_DRAIN_FACTOR > s->max_body ? MHD_NO : MHD_YES;
		}
		if (rq->len + n + 1 > rq->cap) {
			size_t nc = MAX(rq->cap * 2, rq->len + n + 1);
			char *nb;

			nc = MIN(nc, (size_t)s->max_body + 1);
			nb = realloc(rq->buf, nc);
			if (!nb)
				return MHD_NO;
			rq->buf = nb;
			rq->cap = nc;
		}
		memcpy(rq->buf + rq->len, upload_data, n);
		rq->len += n;
		return MHD_YES;
	}

	/* whole body received */
	if (rq->too_big)
		return reply_error(s, c, 413, "body of %" PRIu64 " bytes exceeds max_body %" PRIu64,
				   rq->len + rq->dropped, s->max_body);
	if (rq->len == 0)
		return reply_error(s, c, 400, "empty body");
	tok = authenticate(s, c);
	if (!tok)
		return reply_error(s, c, 401, "missing or unknown bearer token");
	return handle_post(s, c, tok, rq);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct coll_server *s = cls;
	struct request *rq = *con_cls;

	if (!rq)
		return;
	post_work_free(rq->post);
	free(rq->buf);
	free(rq);
	*con_cls = NULL;
	atomic_fetch_sub(&s->active, 1);
}

int coll_parse_listen(const char *s, void *ret_ss, unsigned *ret_len)
{
	struct sockaddr_storage *ss = ret_ss;
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon, *h, *hend;
	uint32_t port;

	if (!s || !*s)
		return -EINVAL;
	if (s[0] == '[') {
		hend = strchr(s, ']');
		if (!hend || hend[1] != ':')
			return -EINVAL;
		h = s + 1;
		colon = hend + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		h = s;
		hend = colon;
	}
	if ((size_t)(hend - h) >= sizeof(host) || parse_u32(colon + 1, &port) < 0 || port > 65535)
		return -EINVAL;
	memcpy(host, h, (size_t)(hend - h));
	host[hend - h] = 0;
	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -EINVAL;
		*ret_len = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return -EINVAL;
		*ret_len = sizeof(*a);
	}
	return 0;
}

static void stop_workers(struct coll_server *s)
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

int coll_server_start(const struct coll_server_config *cfg, struct coll_store *store,
		      const struct coll_tokens *tokens, struct coll_server **ret, char *err,
		      size_t errlen)
{
	struct sockaddr_storage ss;
	unsigned sslen = 0;
	struct coll_server *s;
	/* epoll, a pool of threads: a slow client holds a socket, not a thread */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
			 MHD_ALLOW_SUSPEND_RESUME;
	unsigned threads = cfg->threads ?: COLL_DEFAULT_THREADS,
		 maxconn = cfg->max_connections ?: COLL_DEFAULT_MAX_CONNECTIONS,
		 per_ip = cfg->connections_per_ip ?: COLL_DEFAULT_CONNECTIONS_PER_IP,
		 timeout = cfg->connection_timeout ?: COLL_DEFAULT_CONNECTION_TIMEOUT;
	struct rlimit rl;

	if (coll_parse_listen(cfg->listen, &ss, &sslen) < 0) {
		return err_set(err, errlen, -EINVAL,
			       "listen: expected ADDR:PORT or [ADDR6]:PORT, got '%.64s'",
			       cfg->listen ?: "");
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->store = store;
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_cond_init(&s->pool_free, NULL);
	s->pool[0] = store;
	s->npool = 1;
	s->tokens = tokens;
	s->log = cfg->log;
	if (coll_chain_heads_new(&s->heads) < 0) {
		free(s);
		return -ENOMEM;
	}
	pthread_mutex_init(&s->work_lock, NULL);
	pthread_cond_init(&s->work_cond, NULL);
	/* as many ingest workers as server threads: as many batches at the database at once as
	 * when each server thread waited for its own batch */
	s->workers = calloc(threads, sizeof(*s->workers));
	for (unsigned i = 0; s->workers && i < threads; i++) {
		if (pthread_create(&s->workers[i], NULL, ingest_worker, s) != 0)
			break; /* fewer workers; with none, batches are stored inline */
		s->nworkers++;
	}
	s->max_body = cfg->max_body ?: COLL_DEFAULT_MAX_BODY;
	s->max_records = cfg->max_records ?: COLL_DEFAULT_MAX_RECORDS;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* every connection is a descriptor: stay below the limit, keeping some for the database,
	 * the pool's epoll and event descriptors and the files a report opens */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (rlim_t)maxconn + 64 + 4 * threads)
		maxconn = rl.rlim_cur > 64 + 4 * threads + 16
			      ? (unsigned)(rl.rlim_cur - 64 - 4 * threads)
			      : 16;
	s->daemon = MHD_start_daemon(
	    flags, 0, NULL, NULL, access_handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	    MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, maxconn,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT, timeout,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)COLL_CONNECTION_MEMORY,
	    MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_LISTENING_ADDRESS_REUSE,
	    (unsigned)1, MHD_OPTION_END);
	if (!s->daemon) {
		int r = errno ? -errno : -EADDRINUSE;

		snprintf(err, errlen, "listen %s: cannot start HTTP server: %s", cfg->listen,
			 strerror(-r));
		stop_workers(s);
		coll_chain_heads_free(s->heads);
		free(s);
		return r;
	}
	*ret = s;
	return 0;
}

uint16_t coll_server_port(struct coll_server *s)
{
	const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);

	return i ? i->port : 0;
}

void coll_server_stop(struct coll_server *s, unsigned timeout_ms)
{
	MHD_socket fd;

	if (!s)
		return;
	fd = MHD_quiesce_daemon(s->daemon);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	/* in-flight batches commit and answer; then the daemon is stopped */
	for (unsigned waited = 0; atomic_load(&s->active) > 0 && waited < timeout_ms; waited += 20)
		poll(NULL, 0, 20);
	/* the workers store what is queued and resume those connections: none is suspended when
	 * the daemon stops */
	stop_workers(s);
	MHD_stop_daemon(s->daemon);
	if (s->fold_started) {
		pthread_mutex_lock(&s->fold_lock);
		s->fold_stop = true;
		pthread_cond_signal(&s->fold_cond);
		pthread_mutex_unlock(&s->fold_lock);
		pthread_join(s->fold_thread, NULL);
		pthread_cond_destroy(&s->fold_cond);
		pthread_mutex_destroy(&s->fold_lock);
	}
	coll_chain_heads_free(s->heads);
	free(s);
}
