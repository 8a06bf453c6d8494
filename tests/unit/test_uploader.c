/* SPDX-License-Identifier: MIT */
/*
 * Uploader against a fake collector (libmicrohttpd on loopback, scripted answers):
 * nothing lost, nothing stored twice, dead-letter content, backoff growth, 401/413, resume
 * after reopening the spool.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "accounting/batch.h"
#include "accounting/record.h"
#include "accounting/spool.h"
#include "accounting/uploader.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"

#define MAX_IDS 4096

enum action {
	A_AUTO, /* like the collector: 422 if any line is invalid, else commit + 200 */
	A_500,
	A_DROP,	       /* close the connection without an answer, store nothing */
	A_COMMIT_DROP, /* commit, then lose the answer */
	A_401,
	A_HANG, /* answer 500 only after 600 ms (past the client's timeout in test_failover_timeout)
		 */
};

struct fake {
	pthread_mutex_t mu;
	enum action script[32];
	size_t n_script, pos;
	size_t max_batch; /* 413 above this many lines, 0 = no limit */
	char ids[MAX_IDS][ACCT_ID_MAX];
	unsigned stored[MAX_IDS];
	size_t n_ids;
	size_t posts;
	int bad_auth;
	struct MHD_Daemon *d;
	uint16_t port;
};

struct req {
	char *body;
	size_t len;
};

static size_t id_index(struct fake *f, const char *id)
{
	for (size_t i = 0; i < f->n_ids; i++)
		if (strcmp(f->ids[i], id) == 0)
			return i;
	assert_true(f->n_ids < MAX_IDS);
	snprintf(f->ids[f->n_ids], ACCT_ID_MAX, "%s", id);
	f->stored[f->n_ids] = 0;
	return f->n_ids++;
}

struct parsed {
	struct fake *f;
	json_t *results;
	size_t bad;
	char ids[1024][ACCT_ID_MAX];
};

static int parse_line(size_t index, struct acct_record *r, const char *error, void *userdata)
{
	struct parsed *p = userdata;
	json_t *it;

	if (index >= 1024)
		return -E2BIG;
	if (r) {
		snprintf(p->ids[index], ACCT_ID_MAX, "%s", r->record_id);
		it = json_pack("{s:I,s:s,s:s}", "i", (json_int_t)index, "record_id", r->record_id,
			       "status", "accepted");
	} else {
		p->ids[index][0] = 0;
		p->bad++;
		it = json_pack("{s:I,s:s,s:s}", "i", (json_int_t)index, "status", "rejected",
			       "reason", error);
	}
	json_array_append_new(p->results, it);
	return 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, json_t *body)
{
	char *s = body ? json_dumps(body, JSON_COMPACT) : strdup("{}");
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result r = MHD_queue_response(c, code, resp);

	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls)
{
	struct fake *f = cls;
	struct req *rq = *con_cls;
	struct parsed *p;
	enum action a;
	const char *auth;
	unsigned code = 200;
	enum MHD_Result ret;
	size_t n, accepted = 0, dup = 0, conflict = 0;
	json_t *body;

	if (!rq) {
		rq = calloc(1, sizeof(*rq));
		*con_cls = rq;
		return MHD_YES;
	}
	if (*upload_data_size) {
		rq->body = realloc(rq->body, rq->len + *upload_data_size);
		memcpy(rq->body + rq->len, upload_data, *upload_data_size);
		rq->len += *upload_data_size;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (strcmp(method, "POST") != 0 || strcmp(url, "/v1/records") != 0)
		return reply(c, 404, NULL);
	auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	pthread_mutex_lock(&f->mu);
	f->posts++;
	if (!auth || strcmp(auth, "Bearer sekrit") != 0)
		f->bad_auth++;
	a = f->pos < f->n_script ? f->script[f->pos++] : A_AUTO;
	if (a == A_500 || a == A_401) {
		pthread_mutex_unlock(&f->mu);
		return reply(c, a == A_500 ? 500 : 401, NULL);
	}
	if (a == A_DROP) {
		pthread_mutex_unlock(&f->mu);
		return MHD_NO;
	}
	if (a == A_HANG) {
		pthread_mutex_unlock(&f->mu);
		usleep(600000);
		return reply(c, 500, NULL);
	}
	n = acct_batch_count_lines(rq->body, rq->len);
	if (f->max_batch && n > f->max_batch) {
		pthread_mutex_unlock(&f->mu);
		return reply(c, 413, NULL);
	}
	p = calloc(1, sizeof(*p));
	p->f = f;
	p->results = json_array();
	assert_true(acct_batch_parse(rq->body, rq->len, 1024, parse_line, p) >= 0);
	if (p->bad) {
		/* nothing stored: accepted entries are reported, but not committed */
		code = 422;
	} else {
		for (size_t i = 0; i < n; i++) {
			size_t k = id_index(f, p->ids[i]);
			json_t *it = json_array_get(p->results, i);

			/* "-cfl-" ids: another body is stored under them (a conflict) */
			if (strstr(p->ids[i], "-cfl-")) {
				json_object_set_new(it, "status", json_string("conflict"));
				json_object_set_new(it, "reason", json_string("another body"));
				conflict++;
				continue;
			}
			/* stored counts inserts: a duplicate is ON CONFLICT DO NOTHING */
			if (f->stored[k]) {
				json_object_set_new(it, "status", json_string("duplicate"));
				dup++;
			} else {
				accepted++;
				f->stored[k]++;
			}
		}
	}
	pthread_mutex_unlock(&f->mu);
	body = json_pack("{s:I,s:I,s:I,s:I,s:o}", "accepted", (json_int_t)accepted, "duplicate",
			 (json_int_t)dup, "conflict", (json_int_t)conflict, "rejected",
			 (json_int_t)p->bad, "results", p->results);
	free(p);
	if (a == A_COMMIT_DROP) {
		json_decref(body);
		return MHD_NO;
	}
	ret = reply(c, code, body);
	json_decref(body);
	return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct req *rq = *con_cls;

	if (rq) {
		free(rq->body);
		free(rq);
		*con_cls = NULL;
	}
}

/* Self-signed EC P-256 certificate for 127.0.0.1; PEM key/cert and the key's pin. */
struct tls_material {
	char *key_pem, *cert_pem;
	char pin[128];
};

struct tctx {
	char dir[64];
	char spool_dir[96];
	char url[64];
	struct fake f;
	struct spool *s;
	struct upl *u;
	struct upl_opts o;
	uint64_t next_id;
	struct tls_material tls;
	char ca_path[128];
};

/* Self-signed EC P-256 certificate for 127.0.0.1 (see make_tls). */
static char *bio_string(BIO *b)
{
	char *p;
	long n = BIO_get_mem_data(b, &p);
	char *s = malloc((size_t)n + 1);

	assert_non_null(s);
	memcpy(s, p, (size_t)n);
	s[n] = 0;
	return s;
}

static void make_tls(struct tls_material *m)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_NAME *name;
	X509_EXTENSION *ext;
	BIO *b;
	unsigned char *der = NULL, md[32];
	int dlen;

	assert_non_null(k);
	assert_non_null(x);
	X509_set_version(x, 2); /* v3: extensions follow */
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, k);
	name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"127.0.0.1", -1,
				   -1, 0);
	X509_set_issuer_name(x, name);
	ext = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, "IP:127.0.0.1");
	assert_non_null(ext);
	X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	assert_true(X509_sign(x, k, EVP_sha256()) > 0);

	b = BIO_new(BIO_s_mem());
	PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL);
	m->key_pem = bio_string(b);
	BIO_free(b);
	b = BIO_new(BIO_s_mem());
	PEM_write_bio_X509(b, x);
	m->cert_pem = bio_string(b);
	BIO_free(b);

	dlen = i2d_PUBKEY(k, &der);
	assert_true(dlen > 0);
	SHA256(der, (size_t)dlen, md);
	strcpy(m->pin, "sha256//");
	EVP_EncodeBlock((unsigned char *)m->pin + 8, md, 32);
	OPENSSL_free(der);
	X509_free(x);
	EVP_PKEY_free(k);
}

static int setup_common(void **state, bool tls)
{
	struct tctx *t = calloc(1, sizeof(*t));
	const union MHD_DaemonInfo *di;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	assert_non_null(t);
	strcpy(t->dir, "/tmp/test_uploader.XXXXXX");
	assert_non_null(mkdtemp(t->dir));
	snprintf(t->spool_dir, sizeof(t->spool_dir), "%s/spool", t->dir);
	pthread_mutex_init(&t->f.mu, NULL);
	if (tls) {
		make_tls(&t->tls);
		snprintf(t->ca_path, sizeof(t->ca_path), "%s/ca.pem", t->dir);
		assert_int_equal(
		    write_file_atomic(t->ca_path, t->tls.cert_pem, strlen(t->tls.cert_pem), 0600),
		    0);
		t->f.d = MHD_start_daemon(
		    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_TLS, 0, NULL, NULL, handler, &t->f,
		    MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_SOCK_ADDR, &sa,
		    MHD_OPTION_HTTPS_MEM_KEY, t->tls.key_pem, MHD_OPTION_HTTPS_MEM_CERT,
		    t->tls.cert_pem, MHD_OPTION_END);
	} else {
		t->f.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler,
					  &t->f, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
					  MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
	}
	assert_non_null(t->f.d);
	di = MHD_get_daemon_info(t->f.d, MHD_DAEMON_INFO_BIND_PORT);
	assert_non_null(di);
	t->f.port = di->port;
	snprintf(t->url, sizeof(t->url), "%s://127.0.0.1:%u", tls ? "https" : "http", t->f.port);
	t->o = (struct upl_opts){
	    .url = t->url,
	    .token = "sekrit",
	    .state_dir = t->dir,
	    .batch_records = 500,
	    .batch_delay_ms = 1,
	    .backoff_min_ms = 5,
	    .backoff_max_ms = 40,
	    .request_timeout_ms = 5000,
	    .seed = 42,
	};
	*state = t;
	return 0;
}

static int setup(void **state)
{
	return setup_common(state, false);
}

static int setup_tls(void **state)
{
	return setup_common(state, true);
}

static int teardown(void **state)
{
	struct tctx *t = *state;
	char cmd[128];

	upl_free(t->u);
	spool_close(t->s);
	MHD_stop_daemon(t->f.d);
	free(t->tls.key_pem);
	free(t->tls.cert_pem);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
	assert_int_equal(system(cmd), 0);
	free(t);
	return 0;
}

static void start(struct tctx *t)
{
	struct spool_opts so = {.dir = t->spool_dir, .no_fsync = true};

	if (!t->s)
		assert_int_equal(spool_open(&so, &t->s), 0);
	assert_int_equal(upl_new(&t->o, t->s, &t->u), 0);
}

static void stop(struct tctx *t)
{
	upl_free(t->u);
	t->u = NULL;
	spool_close(t->s);
	t->s = NULL;
}

/* Append n records; those with bad=true have an invalid usage field; tag names them. */
static void add_records_tagged(struct tctx *t, size_t n, bool bad, const char *tag)
{
	for (size_t i = 0; i < n; i++) {
		char line[512];
		uint64_t id = ++t->next_id;

		snprintf(
		    line, sizeof(line),
		    "{\"schema\":\"corral.record/v1\",\"record_id\":\"n1-%s-%llu\","
		    "\"type\":\"task.sample\",\"time\":\"2026-12-02T15:14:05Z\",\"node\":\"n1\","
		    "\"task\":{\"id\":\"t%llu\"},\"usage\":{\"cpu_user_ns\":%s}}",
		    tag, (unsigned long long)id, (unsigned long long)id, bad ? "-1" : "1000");
		assert_int_equal(spool_append(t->s, line, strlen(line),
					      bad ? SPOOL_PRIO_KEEP : SPOOL_PRIO_SHED, NULL),
				 0);
	}
	if (t->u)
		upl_kick(t->u);
}

static void add_records(struct tctx *t, size_t n, bool bad)
{
	add_records_tagged(t, n, bad, bad ? "bad" : "ok");
}

typedef bool (*pred_fn)(struct tctx *t);

/* Drive the uploader like the agent loop would, until pred holds (10 s at most). */
static bool run_until(struct tctx *t, pred_fn pred)
{
	uint64_t end = now_ns(CLOCK_MONOTONIC) + 10 * NSEC_PER_SEC;

	while (now_ns(CLOCK_MONOTONIC) < end) {
		struct pollfd pfd = {.fd = upl_fd(t->u), .events = POLLIN};
		int to = upl_timeout_ms(t->u);

		if (pred(t))
			return true;
		if (to < 0 || to > 100)
			to = 100;
		(void)poll(&pfd, 1, to);
		assert_int_equal(upl_dispatch(t->u), 0);
	}
	return pred(t);
}

static bool spool_empty(struct tctx *t)
{
	struct spool_stats ss;

	spool_get_stats(t->s, &ss);
	return ss.entries_pending == 0;
}

/* every "ok" id stored exactly once, no "bad" id stored; returns number of ok ids */
static size_t check_stored_once(struct tctx *t)
{
	size_t ok = 0;

	pthread_mutex_lock(&t->f.mu);
	for (size_t i = 0; i < t->f.n_ids; i++) {
		if (strstr(t->f.ids[i], "-bad-"))
			assert_int_equal(t->f.stored[i], 0);
		if (t->f.stored[i]) {
			assert_int_equal(t->f.stored[i], 1);
			ok++;
		}
	}
	assert_int_equal(t->f.bad_auth, 0);
	pthread_mutex_unlock(&t->f.mu);
	return ok;
}

static size_t dead_letter_lines(struct tctx *t, const char *must_contain)
{
	char path[128];
	_cleanup_free_ char *buf = NULL;
	size_t n = 0, len;

	snprintf(path, sizeof(path), "%s/dead-letter.ndjson", t->dir);
	if (read_file(path, 1 << 20, &buf, &len) < 0)
		return 0;
	for (char *l = buf, *nl; l && *l; l = nl ? nl + 1 : NULL) {
		json_t *o, *rec;

		nl = strchr(l, '\n');
		if (nl)
			*nl = 0;
		o = json_loads(l, 0, NULL);
		assert_non_null(o);
		rec = json_object_get(o, "record");
		assert_non_null(rec);
		assert_true(strstr(json_string_value(json_object_get(rec, "record_id")), "-bad-") ||
			    strstr(json_string_value(json_object_get(rec, "record_id")), "-cfl-"));
		assert_non_null(json_string_value(json_object_get(o, "time")));
		if (must_contain)
			assert_non_null(
			    strstr(json_string_value(json_object_get(o, "reason")), must_contain));
		json_decref(o);
		n++;
	}
	return n;
}

static void test_batches(void **state)
{
	struct tctx *t = *state;
	struct upl_stats st;

	start(t);
	add_records(t, 1200, false);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 1200);
	upl_get_stats(t->u, &st);
	assert_int_equal(st.batches_sent, 3); /* 500 + 500 + 200 */
	assert_int_equal(st.records_acked, 1200);
	assert_int_equal(st.duplicates, 0);
	assert_int_equal(st.retries, 0);
	assert_int_equal(st.last_http_status, 200);
	assert_string_equal(st.last_error, "");
	assert_int_equal(st.spool_pending, 0);
	assert_int_equal(dead_letter_lines(t, NULL), 0);
}

static void test_dead_letter(void **state)
{
	struct tctx *t = *state;
	struct upl_stats st;

	start(t);
	add_records(t, 5, false);
	add_records(t, 2, true);
	add_records(t, 5, false);
	add_records(t, 1, true);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 10);
	upl_get_stats(t->u, &st);
	assert_int_equal(st.rejected, 3);
	assert_int_equal(st.records_acked, 13);
	assert_int_equal(st.batches_sent, 1);
	assert_int_equal(dead_letter_lines(t, "usage.cpu_user_ns: expected a non-negative integer"),
			 3);
	assert_int_equal(t->f.posts, 2); /* 422, then the rest */
}

static void on_conflict(void *ud, const char *record_id, uint64_t seq)
{
	size_t *n = ud;

	assert_non_null(strstr(record_id, "-cfl-"));
	assert_true(seq > 0);
	(*n)++;
}

/* A conflict is set aside (dead-letter, counted, reported) and the stream goes on. */
static void test_conflict(void **state)
{
	struct tctx *t = *state;
	struct upl_stats st;
	size_t reported = 0;

	t->o.on_conflict = on_conflict;
	t->o.on_conflict_ud = &reported;
	start(t);
	add_records(t, 4, false);
	add_records_tagged(t, 2, false, "cfl");
	add_records(t, 4, false);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 8);
	upl_get_stats(t->u, &st);
	assert_int_equal(st.conflicts, 2);
	assert_int_equal(st.rejected, 0);
	assert_int_equal(st.records_acked, 10);
	assert_int_equal(st.retries, 0);
	assert_int_equal(reported, 2);
	assert_int_equal(dead_letter_lines(t, "another body"), 2);
	assert_int_equal(t->f.posts, 1);
	/* later records flow as before */
	add_records(t, 3, false);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 11);
}

static void test_faults(void **state)
{
	struct tctx *t = *state;
	struct upl_stats st;

	t->f.script[0] = A_500;
	t->f.script[1] = A_DROP;
	t->f.script[2] = A_COMMIT_DROP;
	t->f.script[3] = A_500;
	t->f.n_script = 4;
	start(t);
	add_records(t, 50, false);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 50);
	upl_get_stats(t->u, &st);
	/* libcurl itself retries a request once when a reused connection turns out dead, so
	 * a drop may not reach the uploader as a failure */
	assert_true(st.retries >= 3 && st.retries <= 4);
	assert_int_equal(t->f.posts, 5);
	assert_int_equal(st.duplicates, 50); /* the commit whose answer was lost */
	assert_int_equal(st.records_acked, 50);
	assert_int_equal(st.backoff_ceiling_ms, 0); /* reset by the success */
}

static void test_backoff_growth(void **state)
{
	struct tctx *t = *state;
	uint64_t want[] = {5, 10, 20, 40, 40, 40};
	struct upl_stats st;

	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		t->f.script[i] = A_500;
	t->f.n_script = ARRAY_SIZE(want);
	start(t);
	add_records(t, 3, false);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		uint64_t end = now_ns(CLOCK_MONOTONIC) + 10 * NSEC_PER_SEC;

		do {
			struct pollfd pfd = {.fd = upl_fd(t->u), .events = POLLIN};

			(void)poll(&pfd, 1, 20);
			assert_int_equal(upl_dispatch(t->u), 0);
			upl_get_stats(t->u, &st);
		} while (st.retries < i + 1 && now_ns(CLOCK_MONOTONIC) < end);
		assert_int_equal(st.retries, i + 1);
		assert_int_equal(st.backoff_ceiling_ms, want[i]);
		assert_true(st.backoff_ms <= want[i]);
		assert_int_equal(st.last_http_status, 500);
	}
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 3);
}

/* ids stored by f (each at most once); a "-<tag>-" in all of them */
static size_t stored_ids(struct fake *f, const char *tag)
{
	size_t n = 0;

	pthread_mutex_lock(&f->mu);
	for (size_t i = 0; i < f->n_ids; i++) {
		assert_true(f->stored[i] <= 1);
		if (f->stored[i]) {
			assert_non_null(strstr(f->ids[i], tag));
			n++;
		}
	}
	pthread_mutex_unlock(&f->mu);
	return n;
}

static bool at_second(struct tctx *t)
{
	struct upl_stats st;

	upl_get_stats(t->u, &st);
	return st.url_index == 1 && spool_empty(t);
}

static bool back_at_first(struct tctx *t)
{
	struct upl_stats st;

	upl_get_stats(t->u, &st);
	return st.url_index == 0 && spool_empty(t);
}

/* Two URLs: the first answers 500 three times (failover_after), the batch goes to the second,
 * the next batches too until the failback time, then to the first again. */
static void test_failover(void **state)
{
	struct tctx *t = *state;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct fake f2 = {0};
	const union MHD_DaemonInfo *di;
	struct upl_stats st;
	char urls[160];

	pthread_mutex_init(&f2.mu, NULL);
	f2.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler, &f2,
				MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_SOCK_ADDR,
				&sa, MHD_OPTION_END);
	assert_non_null(f2.d);
	di = MHD_get_daemon_info(f2.d, MHD_DAEMON_INFO_BIND_PORT);
	snprintf(urls, sizeof(urls), "%s  http://127.0.0.1:%u/", t->url, di->port);
	t->o.url = urls;
	t->o.failover_after = 3;
	t->o.failback_ms = 300;
	for (size_t i = 0; i < 3; i++)
		t->f.script[i] = A_500;
	t->f.n_script = 3;
	start(t);
	upl_get_stats(t->u, &st);
	assert_int_equal(st.url_index, 0);
	assert_string_equal(st.url, t->url);
	add_records_tagged(t, 40, false, "one");
	assert_true(run_until(t, at_second));
	upl_get_stats(t->u, &st);
	assert_int_equal(st.failovers, 1);
	assert_int_equal(t->f.posts, 3);
	assert_int_equal(stored_ids(&t->f, "-one-"), 0);
	assert_int_equal(stored_ids(&f2, "-one-"), 40);
	assert_non_null(strstr(st.url, "http://127.0.0.1:"));
	assert_string_not_equal(st.url, t->url);
	/* after the failback delay (150-450 ms), the first again */
	assert_true(run_until(t, back_at_first));
	add_records_tagged(t, 30, false, "two");
	assert_true(run_until(t, spool_empty));
	upl_get_stats(t->u, &st);
	assert_int_equal(st.failovers, 2);
	assert_int_equal(st.url_index, 0);
	assert_int_equal(stored_ids(&t->f, "-two-"), 30);
	assert_int_equal(stored_ids(&f2, "-one-"), 40); /* and none of the second lot */
	MHD_stop_daemon(f2.d);
}

/* A timeout moves to the next URL at once, not after failover_after failures. */
static void test_failover_timeout(void **state)
{
	struct tctx *t = *state;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct fake f2 = {0};
	const union MHD_DaemonInfo *di;
	struct upl_stats st;
	char urls[160];

	pthread_mutex_init(&f2.mu, NULL);
	f2.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler, &f2,
				MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_SOCK_ADDR,
				&sa, MHD_OPTION_END);
	assert_non_null(f2.d);
	di = MHD_get_daemon_info(f2.d, MHD_DAEMON_INFO_BIND_PORT);
	snprintf(urls, sizeof(urls), "%s http://127.0.0.1:%u", t->url, di->port);
	t->o.url = urls;
	t->o.failover_after = 3;
	t->o.request_timeout_ms = 200;
	t->f.script[0] = A_HANG;
	t->f.n_script = 1;
	start(t);
	add_records_tagged(t, 10, false, "one");
	assert_true(run_until(t, at_second));
	upl_get_stats(t->u, &st);
	assert_int_equal(st.failovers, 1);
	assert_int_equal(st.retries, 1);
	assert_int_equal(t->f.posts, 1);
	assert_int_equal(stored_ids(&t->f, "-one-"), 0);
	assert_int_equal(stored_ids(&f2, "-one-"), 10);
	MHD_stop_daemon(f2.d);
}

static bool got_401(struct tctx *t)
{
	struct upl_stats st;

	upl_get_stats(t->u, &st);
	return st.last_http_status == 401;
}

static void test_unauthorized(void **state)
{
	struct tctx *t = *state;
	struct upl_stats st;

	t->f.script[0] = A_401;
	t->f.n_script = 1;
	start(t);
	add_records(t, 4, false);
	assert_true(run_until(t, got_401));
	upl_get_stats(t->u, &st);
	assert_non_null(strstr(st.last_error, "token"));
	assert_int_equal(st.backoff_ceiling_ms, 40); /* straight to the cap */
	assert_int_equal(st.spool_pending, 4);	     /* data kept */
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 4);
}

static void test_too_large(void **state)
{
	struct tctx *t = *state;
	struct upl_stats st;

	t->f.max_batch = 8;
	t->o.batch_records = 32;
	start(t);
	add_records(t, 40, false);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 40);
	upl_get_stats(t->u, &st);
	assert_int_equal(st.batch_limit, 8);
	assert_int_equal(st.retries, 0);
}

static bool two_posts(struct tctx *t)
{
	size_t n;

	pthread_mutex_lock(&t->f.mu);
	n = t->f.posts;
	pthread_mutex_unlock(&t->f.mu);
	return n >= 2;
}

static void test_resume_after_reopen(void **state)
{
	struct tctx *t = *state;
	struct upl_stats st;

	/* 422 (dead-letter written), then the resend of the rest is lost, then "crash" */
	t->f.script[0] = A_AUTO;
	t->f.script[1] = A_DROP;
	t->f.n_script = 2;
	start(t);
	add_records(t, 6, false);
	add_records(t, 2, true);
	add_records(t, 6, false);
	assert_true(run_until(t, two_posts));
	assert_int_equal(dead_letter_lines(t, NULL), 2);
	assert_false(spool_empty(t));
	stop(t);

	/* restart: resend from the spool; the dead letters are not written twice */
	start(t);
	add_records(t, 3, false);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 15);
	assert_int_equal(dead_letter_lines(t, NULL), 2);
	upl_get_stats(t->u, &st);
	assert_int_equal(st.rejected, 0);
	assert_int_equal(st.duplicates, 0);
	stop(t);

	/* and again with nothing left to do */
	start(t);
	add_records(t, 1, false);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 16);
}

static void test_bad_opts(void **state)
{
	struct tctx *t = *state;
	struct spool_opts so = {.dir = t->spool_dir, .no_fsync = true};
	struct upl *u = NULL;

	assert_int_equal(spool_open(&so, &t->s), 0);
	t->o.token = "a\r\nX-Evil: 1";
	assert_int_equal(upl_new(&t->o, t->s, &u), -EINVAL);
	t->o.token = "sekrit";
	t->o.url = NULL;
	assert_int_equal(upl_new(&t->o, t->s, &u), -EINVAL);
}

static bool failed_once(struct tctx *t)
{
	struct upl_stats st;

	upl_get_stats(t->u, &st);
	return st.retries >= 1;
}

static void test_tls_pinning(void **state)
{
	struct tctx *t = *state;
	struct upl_stats st;

	/* right CA and right pin: delivered */
	t->o.ca_file = t->ca_path;
	t->o.pinned_pubkey = t->tls.pin;
	start(t);
	add_records(t, 5, false);
	assert_true(run_until(t, spool_empty));
	assert_int_equal(check_stored_once(t), 5);
	stop(t);

	/* valid chain but another key pinned: refused, data kept */
	t->o.pinned_pubkey = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
	start(t);
	add_records(t, 2, false);
	assert_true(run_until(t, failed_once));
	upl_get_stats(t->u, &st);
	assert_int_equal(st.last_http_status, 0);
	assert_non_null(strcasestr(st.last_error, "pinned"));
	assert_int_equal(st.spool_pending, 2);
	stop(t);

	/* no CA for a self-signed server: refused */
	t->o.ca_file = NULL;
	t->o.pinned_pubkey = NULL;
	start(t);
	assert_true(run_until(t, failed_once));
	upl_get_stats(t->u, &st);
	assert_int_equal(st.spool_pending, 2);
	assert_int_equal(check_stored_once(t), 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dead_letter, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_faults, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conflict, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_backoff_growth, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failover, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failover_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unauthorized, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_too_large, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_resume_after_reopen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_opts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tls_pinning, setup_tls, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
