/* SPDX-License-Identifier: MIT */
/*
 * Uploader (see uploader.h and docs/pipeline.md "Uploader").
 *
 * One batch is in flight at a time. A batch is always the oldest unacked spool entries
 * (peeked from spool_first_unacked()), so a restart simply resends from the spool; the
 * collector's idempotent record_id makes a resend harmless. The spool is acked up to the
 * batch's last seq only after a 200 (committed), or once every record of the batch has been
 * either committed or written (fsync'd) to the dead-letter file.
 */
#include "accounting/uploader.h"

#include "accounting/zframe.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "accounting/record.h"
#include "accounting/retry.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/escape.h"
#include "common/fileio.h"

#define DEFAULT_BATCH_RECORDS 500
#define DEFAULT_BATCH_BYTES   (4u * 1024 * 1024)
#define RESPONSE_MAX	      (4u * 1024 * 1024)
#define DEAD_LETTER_NAME      "dead-letter.ndjson"
#define DEAD_LETTER_SCAN_MAX  (16u * 1024 * 1024)
#define DEAD_SEEN_MAX	      65536

struct bentry {
	uint64_t seq;
	size_t off, len; /* payload within batch.data */
	bool dead;	 /* dead-lettered: not sent again */
	bool done;	 /* committed by the collector in an earlier (partial) answer */
};

struct upl {
	CURLM *multi;
	CURL *easy;
	char curl_err[CURL_ERROR_SIZE]; /* libcurl's detail of a failed transfer */
	struct curl_slist *headers;
	char *post_url; /* post_urls[cur] */
	char *post_urls[UPL_URLS_MAX];
	char *base_urls[UPL_URLS_MAX];
	size_t n_urls, cur;
	unsigned url_fails, failover_after;
	uint64_t failback_ms, failback_at; /* monotonic ns, 0 = none */
	struct curl_slist *headers_zstd;   /* the same and Content-Encoding: zstd */
	struct zframe *z;		   /* NULL: bodies sent as they are */
	bool peer_zstd;			   /* the last answer advertised Accept-Encoding: zstd */
	bool sent_zstd;			   /* the POST in flight is compressed */
	char *zbody;
	size_t zbody_len;
	char *dead_path;
	struct spool *spool;
	int epfd, tfd;
	bool held; /* upl_hold: no new batch */

	size_t batch_records, batch_bytes, batch_limit;
	uint64_t batch_delay_ms, backoff_min_ms, backoff_max_ms;
	int (*before_ack)(void *ud);
	void *before_ack_ud;
	void (*on_conflict)(void *ud, const char *record_id, uint64_t spool_seq);
	void *on_conflict_ud;

	/* current batch (kept across 422 resends) */
	struct bentry *ents;
	size_t n_ents, cap_ents;
	char *data; /* payloads, concatenated */
	size_t data_len, data_cap;
	char *body; /* what is POSTed: live entries joined by '\n' */
	size_t body_len;
	size_t *body_map; /* body line i -> ents index */
	size_t n_body;
	bool in_flight;

	char *resp;
	size_t resp_len;
	bool resp_truncated;

	/* seqs > acked that are already in the dead-letter file (found at startup) */
	uint64_t *dead_seen;
	size_t n_dead_seen;

	uint64_t curl_deadline; /* monotonic ns, 0 = none */
	uint64_t backoff_until; /* monotonic ns, 0 = none */
	uint64_t pending_since; /* monotonic ns when the spool was first seen non-empty */
	unsigned attempt;
	unsigned ra_attempt; /* answers with a Retry-After in a row (acct_retry_delay) */
	bool drain;	     /* after a success: send the backlog without waiting */
	uint64_t rng;

	struct upl_stats st;
};

static uint64_t mono_ns(void)
{
	return now_ns(CLOCK_MONOTONIC);
}

/* xorshift64*: jitter only, not security. */
static uint64_t rnd(struct upl *u)
{
	u->rng ^= u->rng >> 12;
	u->rng ^= u->rng << 25;
	u->rng ^= u->rng >> 27;
	return u->rng * 2685821657736338717ULL;
}

_printf_(2, 3) static void set_error(struct upl *u, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(u->st.last_error, sizeof(u->st.last_error), fmt, ap);
	va_end(ap);
	u->st.last_error_ns = now_ns(CLOCK_REALTIME);
}

/* ---- curl <-> epoll ---------------------------------------------------------------------- */

static int sock_cb(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct upl *u = userp;
	struct epoll_event ev = {.data.fd = fd};

	if (what == CURL_POLL_REMOVE) {
		epoll_ctl(u->epfd, EPOLL_CTL_DEL, fd, NULL);
		return 0;
	}
	ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
	if (epoll_ctl(u->epfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
		if (errno != ENOENT || epoll_ctl(u->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			return -1;
	}
	return 0;
}

static int timer_cb(CURLM *m, long timeout_ms, void *userp)
{
	struct upl *u = userp;

	if (timeout_ms < 0)
		u->curl_deadline = 0;
	else
		u->curl_deadline = mono_ns() + (uint64_t)timeout_ms * 1000000ULL;
	return 0;
}

static uint64_t next_deadline(const struct upl *u)
{
	uint64_t d = 0;

#define CONSIDER(x)                                                                                \
	do {                                                                                       \
		if ((x) && (!d || (x) < d))                                                        \
			d = (x);                                                                   \
	} while (0)
	CONSIDER(u->curl_deadline);
	if (!u->in_flight) {
		if (u->backoff_until)
			CONSIDER(u->backoff_until);
		else if (u->pending_since)
			CONSIDER(u->pending_since + u->batch_delay_ms * 1000000ULL);
	}
#undef CONSIDER
	return d;
}

static void arm_timer(struct upl *u)
{
	struct itimerspec its = {0};
	uint64_t d = next_deadline(u), now = mono_ns();

	if (d) {
		uint64_t rel = d > now ? d - now : 1;

		its.it_value.tv_sec = (time_t)(rel / NSEC_PER_SEC);
		its.it_value.tv_nsec = (long)(rel % NSEC_PER_SEC);
	}
	(void)timerfd_settime(u->tfd, 0, &its, NULL);
}

int upl_timeout_ms(const struct upl *u)
{
	uint64_t d = next_deadline(u), now = mono_ns();

	if (!d)
		return -1;
	if (d <= now)
		return 0;
	return (int)MIN((d - now + 999999) / 1000000, (uint64_t)INT32_MAX);
}

int upl_fd(const struct upl *u)
{
	return u->epfd;
}

/* ---- setup ------------------------------------------------------------------------------- */

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct upl *u = userdata;
	size_t n = size * nmemb;
	char *p;

	if (u->resp_len + n > RESPONSE_MAX) {
		u->resp_truncated = true;
		return n; /* keep the connection; the body is just not parsed */
	}
	p = realloc(u->resp, u->resp_len + n + 1);
	if (!p)
		return 0;
	u->resp = p;
	memcpy(u->resp + u->resp_len, ptr, n);
	u->resp_len += n;
	u->resp[u->resp_len] = 0;
	return n;
}

static int load_dead_seen(struct upl *u);

/* The base URLs of o->url (space-separated) and their POST URLs; u->post_url the first. */
static int parse_urls(struct upl *u, const char *list)
{
	const char *p = list;

	while (*p) {
		size_t len;

		p += strspn(p, " \t");
		len = strcspn(p, " \t");
		if (!len)
			break;
		if (u->n_urls == UPL_URLS_MAX)
			return -E2BIG;
		u->base_urls[u->n_urls] = strndup(p, len);
		if (!u->base_urls[u->n_urls])
			return -ENOMEM;
		if (asprintf(&u->post_urls[u->n_urls], "%s%sv1/records", u->base_urls[u->n_urls],
			     p[len - 1] == '/' ? "" : "/") < 0) {
			u->post_urls[u->n_urls] = NULL;
			free(u->base_urls[u->n_urls]);
			return -ENOMEM;
		}
		u->n_urls++;
		p += len;
	}
	if (!u->n_urls)
		return -EINVAL;
	u->post_url = u->post_urls[0];
	return 0;
}

/* The request headers: plain, and (compress) the same with Content-Encoding: zstd. */
static int headers_make(struct upl *u, const struct upl_opts *o, const char *auth)
{
	struct curl_slist *h;
	int r;

	h = curl_slist_append(NULL, auth);
	if (h)
		u->headers = h;
	h = h ? curl_slist_append(u->headers, "Content-Type: application/x-ndjson") : NULL;
	h = h ? curl_slist_append(u->headers, "Expect:") : NULL;
	if (!h)
		return -ENOMEM;
	if (!o->compress)
		return 0;
	/* compressed once a collector says it takes zstd (RFC 7694), never before */
	r = zframe_new(0, &u->z);
	if (r < 0)
		return r;
	for (struct curl_slist *l = u->headers; l; l = l->next) {
		h = curl_slist_append(u->headers_zstd, l->data);
		if (!h)
			return -ENOMEM;
		u->headers_zstd = h;
	}
	h = curl_slist_append(u->headers_zstd, "Content-Encoding: zstd");
	return h ? 0 : -ENOMEM;
}

/* The easy handle's options: the URL in use, HTTP/1.1 POST, timeouts, TLS. */
static int easy_setup(struct upl *u, const struct upl_opts *o)
{
#define SETOPT(opt, val)                                                                           \
	do {                                                                                       \
		if (curl_easy_setopt(u->easy, opt, val) != CURLE_OK)                               \
			return -EINVAL;                                                            \
	} while (0)
	SETOPT(CURLOPT_URL, u->post_url);
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
	SETOPT(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	SETOPT(CURLOPT_HTTPHEADER, u->headers);
	SETOPT(CURLOPT_POST, 1L);
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
	SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
	SETOPT(CURLOPT_WRITEFUNCTION, write_cb);
	SETOPT(CURLOPT_WRITEDATA, u);
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS,
	       (long)(o->connect_timeout_ms ? o->connect_timeout_ms : 10000));
	SETOPT(CURLOPT_TIMEOUT_MS, (long)(o->request_timeout_ms ? o->request_timeout_ms : 60000));
	SETOPT(CURLOPT_USERAGENT, "corrald/1");
	if (o->ca_file)
		SETOPT(CURLOPT_CAINFO, o->ca_file);
	if (o->pinned_pubkey)
		SETOPT(CURLOPT_PINNEDPUBLICKEY, o->pinned_pubkey);
	if (o->client_cert) {
		SETOPT(CURLOPT_SSLCERT, o->client_cert);
		SETOPT(CURLOPT_SSLCERTTYPE, "PEM");
	}
	if (o->client_key) {
		SETOPT(CURLOPT_SSLKEY, o->client_key);
		SETOPT(CURLOPT_SSLKEYTYPE, "PEM");
	}
#undef SETOPT
	return 0;
}

int upl_new(const struct upl_opts *o, struct spool *spool, struct upl **ret)
{
	struct upl *u;
	struct epoll_event ev = {.events = EPOLLIN};
	_cleanup_free_ char *auth = NULL;
	int r = -EINVAL;

	if (!o || !spool || !o->url || !*o->url || !o->token || !o->state_dir ||
	    strpbrk(o->token, "\r\n"))
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->epfd = u->tfd = -1;
	u->spool = spool;
	u->batch_records = o->batch_records ? o->batch_records : DEFAULT_BATCH_RECORDS;
	u->batch_bytes = o->batch_bytes ? o->batch_bytes : DEFAULT_BATCH_BYTES;
	u->batch_limit = u->batch_records;
	u->batch_delay_ms = o->batch_delay_ms ? o->batch_delay_ms : 1000;
	u->before_ack = o->before_ack;
	u->before_ack_ud = o->before_ack_ud;
	u->on_conflict = o->on_conflict;
	u->on_conflict_ud = o->on_conflict_ud;
	u->backoff_min_ms = o->backoff_min_ms ? o->backoff_min_ms : 500;
	u->backoff_max_ms = o->backoff_max_ms ? o->backoff_max_ms : 60000;
	if (u->backoff_max_ms < u->backoff_min_ms)
		u->backoff_max_ms = u->backoff_min_ms;
	u->rng = o->seed;
	if (!u->rng && getrandom(&u->rng, sizeof(u->rng), GRND_NONBLOCK) != sizeof(u->rng))
		u->rng = mono_ns();
	if (!u->rng)
		u->rng = 0x9e3779b97f4a7c15ULL;

	u->failover_after = o->failover_after ? o->failover_after : UPL_DEFAULT_FAILOVER_AFTER;
	u->failback_ms = o->failback_ms ? o->failback_ms : UPL_DEFAULT_FAILBACK_MS;
	r = parse_urls(u, o->url);
	if (r < 0)
		goto out_free;
	r = -ENOMEM;
	if (asprintf(&u->dead_path, "%s/" DEAD_LETTER_NAME, o->state_dir) < 0) {
		u->dead_path = NULL;
		goto out_free;
	}
	if (asprintf(&auth, "Authorization: Bearer %s", o->token) < 0) {
		auth = NULL;
		goto out_free;
	}
	u->epfd = epoll_create1(EPOLL_CLOEXEC);
	u->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (u->epfd < 0 || u->tfd < 0) {
		r = -errno;
		goto out_free;
	}
	ev.data.fd = u->tfd;
	if (epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->tfd, &ev) < 0) {
		r = -errno;
		goto out_free;
	}

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		goto out_free;
	u->multi = curl_multi_init();
	u->easy = curl_easy_init();
	if (!u->multi || !u->easy)
		goto out_free;
	/* the reason behind a failed transfer ("certificate has expired"), which the error
	 * code's text alone does not give */
	curl_easy_setopt(u->easy, CURLOPT_ERRORBUFFER, u->curl_err);
	r = headers_make(u, o, auth);
	if (r < 0)
		goto out_free;

	curl_multi_setopt(u->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
	curl_multi_setopt(u->multi, CURLMOPT_SOCKETDATA, u);
	curl_multi_setopt(u->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(u->multi, CURLMOPT_TIMERDATA, u);
	curl_multi_setopt(u->multi, CURLMOPT_MAXCONNECTS, 2L);

	r = easy_setup(u, o);
	if (r < 0)
		goto out_free;

	r = mkdir_p(o->state_dir, 0700);
	if (r < 0)
		goto out_free;
	r = load_dead_seen(u);
	if (r < 0)
		goto out_free;
	*ret = u;
	return 0;

out_free:
	upl_free(u);
	return r;
}

static void batch_reset(struct upl *u)
{
	u->n_ents = 0;
	u->data_len = 0;
	free(u->body);
	u->body = NULL;
	u->body_len = 0;
	u->n_body = 0;
}

void upl_free(struct upl *u)
{
	if (!u)
		return;
	if (u->multi && u->easy && u->in_flight)
		curl_multi_remove_handle(u->multi, u->easy);
	if (u->easy)
		curl_easy_cleanup(u->easy);
	if (u->multi)
		curl_multi_cleanup(u->multi);
	curl_slist_free_all(u->headers);
	curl_slist_free_all(u->headers_zstd);
	zframe_free(u->z);
	free(u->zbody);
	batch_reset(u);
	free(u->ents);
	free(u->data);
	free(u->body_map);
	free(u->resp);
	free(u->dead_seen);
	for (size_t i = 0; i < u->n_urls; i++) {
		free(u->post_urls[i]);
		free(u->base_urls[i]);
	}
	free(u->dead_path);
	if (u->tfd >= 0)
		close(u->tfd);
	if (u->epfd >= 0)
		close(u->epfd);
	free(u);
}

/* ---- dead letters ------------------------------------------------------------------------ */

static bool dead_seen(const struct upl *u, uint64_t seq)
{
	for (size_t i = 0; i < u->n_dead_seen; i++)
		if (u->dead_seen[i] == seq)
			return true;
	return false;
}

/*
 * Records dead-lettered for the batch in flight when the agent last stopped: every line with
 * spool_seq > acked. They sit at the end of the file (lines are appended in seq order within
 * the unacked window), so only the tail is read.
 */
static int load_dead_seen(struct upl *u)
{
	_cleanup_close_ int fd = open(u->dead_path, O_RDONLY | O_CLOEXEC);
	struct spool_stats ss;
	_cleanup_free_ char *buf = NULL;
	struct stat sb;
	off_t start;
	size_t n = 0;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &sb) < 0)
		return -errno;
	spool_get_stats(u->spool, &ss);
	start = sb.st_size > (off_t)DEAD_LETTER_SCAN_MAX ? sb.st_size - DEAD_LETTER_SCAN_MAX : 0;
	buf = malloc((size_t)(sb.st_size - start) + 1);
	if (!buf)
		return -ENOMEM;
	while (n < (size_t)(sb.st_size - start)) {
		ssize_t k = pread(fd, buf + n, (size_t)(sb.st_size - start) - n, start + (off_t)n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	buf[n] = 0;
	for (char *line = buf, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		json_t *o, *v;

		nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		o = json_loads(line, 0, NULL);
		v = o ? json_object_get(o, "spool_seq") : NULL;
		if (json_is_integer(v) && json_integer_value(v) > 0 &&
		    (uint64_t)json_integer_value(v) > ss.acked_upto &&
		    u->n_dead_seen < DEAD_SEEN_MAX) {
			uint64_t *p = realloc(u->dead_seen, (u->n_dead_seen + 1) * sizeof(*p));

			if (!p) {
				json_decref(o);
				return -ENOMEM;
			}
			u->dead_seen = p;
			u->dead_seen[u->n_dead_seen++] = (uint64_t)json_integer_value(v);
		}
		json_decref(o);
	}
	return 0;
}

/* Append lines for the given batch entries to the dead-letter file and fsync it. */
static int dead_letter(struct upl *u, const size_t *idx, const char *const *reasons, size_t n,
		       long http_status, bool conflict)
{
	_cleanup_close_ int fd = -1;
	char ts[RFC3339_MAX];
	int r = 0;

	fd = open(u->dead_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	format_rfc3339_us(now_ns(CLOCK_REALTIME), ts, sizeof(ts));
	for (size_t k = 0; k < n; k++) {
		struct bentry *e = &u->ents[idx[k]];
		json_t *o, *rec;
		char *line, rid[ACCT_ID_MAX];
		size_t len;
		ssize_t w;

		if (dead_seen(u, e->seq))
			continue;
		rec = json_loadb(u->data + e->off, e->len, 0, NULL);
		snprintf(rid, sizeof(rid), "%s",
			 json_string_value(json_object_get(rec, "record_id")) ?: "?");
		o = json_pack("{s:s,s:s,s:I,s:i}", "time", ts, "reason",
			      reasons[k] ? reasons[k] : "", "spool_seq", (json_int_t)e->seq,
			      "http_status", (int)http_status);
		if (o && conflict)
			json_object_set_new(o, "status", json_string("conflict"));
		if (!o) {
			json_decref(rec);
			return -ENOMEM;
		}
		if (rec)
			json_object_set_new(o, "record", rec);
		else
			json_object_set_new(o, "record_raw",
					    json_stringn(u->data + e->off, e->len));
		line = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		if (!line)
			return -ENOMEM;
		len = strlen(line);
		line[len] = '\n'; /* json_dumps NUL: replaced, write len+1 bytes */
		w = write(fd, line, len + 1);
		free(line);
		if (w < 0)
			return -errno;
		if ((size_t)w != len + 1)
			return -EIO;
		if (conflict) {
			u->st.conflicts++;
			if (u->on_conflict)
				u->on_conflict(u->on_conflict_ud, rid, e->seq);
		} else {
			u->st.rejected++;
		}
	}
	if (fsync(fd) < 0)
		r = -errno;
	return r;
}

/* ---- batches ----------------------------------------------------------------------------- */

static int peek_cb(uint64_t seq, const void *data, size_t len, void *userdata)
{
	struct upl *u = userdata;

	if (u->n_ents == u->cap_ents) {
		size_t nc = u->cap_ents ? u->cap_ents * 2 : 64;
		struct bentry *n = realloc(u->ents, nc * sizeof(*n));

		if (!n)
			return -ENOMEM;
		u->ents = n;
		u->cap_ents = nc;
	}
	if (u->data_len + len > u->data_cap) {
		size_t nc = MAX(u->data_cap * 2, u->data_len + len);
		char *n = realloc(u->data, nc);

		if (!n)
			return -ENOMEM;
		u->data = n;
		u->data_cap = nc;
	}
	memcpy(u->data + u->data_len, data, len);
	u->ents[u->n_ents++] =
	    (struct bentry){.seq = seq, .off = u->data_len, .len = len, .dead = dead_seen(u, seq)};
	u->data_len += len;
	return 0;
}

/* Body of the live (not dead, not done) entries. Returns their count. */
static int build_body(struct upl *u)
{
	size_t live = 0, len = 0, *map;
	char *b, *p;

	for (size_t i = 0; i < u->n_ents; i++)
		if (!u->ents[i].dead && !u->ents[i].done) {
			live++;
			len += u->ents[i].len + 1;
		}
	free(u->body);
	u->body = NULL;
	u->body_len = u->n_body = 0;
	if (!live)
		return 0;
	b = malloc(len);
	map = realloc(u->body_map, live * sizeof(*map));
	if (!b || !map) {
		free(b);
		if (map)
			u->body_map = map;
		return -ENOMEM;
	}
	u->body_map = map;
	p = b;
	for (size_t i = 0; i < u->n_ents; i++) {
		if (u->ents[i].dead || u->ents[i].done)
			continue;
		memcpy(p, u->data + u->ents[i].off, u->ents[i].len);
		p += u->ents[i].len;
		*p++ = '\n';
		u->body_map[u->n_body++] = i;
	}
	u->body = b;
	u->body_len = len;
	return (int)live;
}

static int start_transfer(struct upl *u)
{
	free(u->resp);
	u->resp = NULL;
	u->resp_len = 0;
	u->resp_truncated = false;
	free(u->zbody);
	u->zbody = NULL;
	u->sent_zstd = false;
	if (u->z && u->peer_zstd &&
	    zframe_body_pack(u->z, u->body, u->body_len, &u->zbody, &u->zbody_len) == 0)
		u->sent_zstd = true;
	if (curl_easy_setopt(u->easy, CURLOPT_HTTPHEADER,
			     u->sent_zstd ? u->headers_zstd : u->headers) != CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_POSTFIELDS, u->sent_zstd ? u->zbody : u->body) !=
		CURLE_OK ||
	    curl_easy_setopt(u->easy, CURLOPT_POSTFIELDSIZE_LARGE,
			     (curl_off_t)(u->sent_zstd ? u->zbody_len : u->body_len)) != CURLE_OK)
		return -EINVAL;
	u->st.body_bytes += u->body_len;
	u->st.wire_bytes += u->sent_zstd ? u->zbody_len : u->body_len;
	u->curl_err[0] = 0;
	if (curl_multi_add_handle(u->multi, u->easy) != CURLM_OK)
		return -EIO;
	u->in_flight = true;
	u->st.requests++;
	return 0;
}

/* Ack the whole batch (every entry committed or dead-lettered). */
static int ack_batch(struct upl *u)
{
	uint64_t last;
	size_t n = u->n_ents;
	int r;

	if (!n)
		return 0;
	last = u->ents[n - 1].seq;
	if (u->before_ack) {
		r = u->before_ack(u->before_ack_ud);
		if (r < 0) {
			set_error(u, "before ack: %s", strerror(-r));
			return r;
		}
	}
	r = spool_ack(u->spool, last);
	if (r < 0) {
		set_error(u, "spool ack: %s", strerror(-r));
		return r;
	}
	u->st.records_acked += n;
	/* dead_seen entries at or below the ack are no longer needed */
	{
		size_t k = 0;

		for (size_t i = 0; i < u->n_dead_seen; i++)
			if (u->dead_seen[i] > last)
				u->dead_seen[k++] = u->dead_seen[i];
		u->n_dead_seen = k;
	}
	batch_reset(u);
	return 0;
}

/* Batches go to URL i from now on (no transfer in flight). */
static void use_url(struct upl *u, size_t i)
{
	if (i == u->cur)
		return;
	if (curl_easy_setopt(u->easy, CURLOPT_URL, u->post_urls[i]) != CURLE_OK)
		return; /* stays where it is */
	u->cur = i;
	u->post_url = u->post_urls[i];
	u->url_fails = 0;
	u->peer_zstd = false; /* another collector: plain until it advertises zstd */
	u->failback_at = 0;
	u->st.failovers++;
}

/* Read a fresh batch from the spool (or keep the current one) and POST it. */
static int maybe_start(struct upl *u, bool force)
{
	struct spool_stats ss;
	uint64_t now = mono_ns();
	int r;

	if (u->in_flight || u->held)
		return 0;
	if (u->failback_at && now >= u->failback_at)
		use_url(u, 0);
	if (u->backoff_until) {
		if (now < u->backoff_until)
			return 0;
		u->backoff_until = 0;
		u->st.backoff_ms = 0;
	}
	if (u->n_ents == 0) {
		uint64_t first;

		spool_get_stats(u->spool, &ss);
		u->st.spool_pending = ss.entries_pending;
		if (!ss.entries_pending) {
			u->pending_since = 0;
			u->drain = false;
			return 0;
		}
		if (!u->pending_since)
			u->pending_since = now;
		if (!force && !u->drain && ss.entries_pending < u->batch_limit &&
		    now < u->pending_since + u->batch_delay_ms * 1000000ULL)
			return 0;
		first = spool_first_unacked(u->spool);
		r = spool_peek(u->spool, first, u->batch_limit, u->batch_bytes, peek_cb, u);
		if (r < 0) {
			batch_reset(u);
			set_error(u, "spool read: %s", strerror(-r));
			return r;
		}
	}
	r = build_body(u);
	if (r < 0)
		return r;
	if (r == 0) /* everything in it was dead-lettered before */
		return ack_batch(u);
	return start_transfer(u);
}

/* The next try waits as acct_retry_delay() says (max: straight to the ceiling's cap, for
 * answers that resending soon cannot change); retry_after_ms: the collector's Retry-After. */
static void backoff_after(struct upl *u, bool max, uint64_t retry_after_ms)
{
	struct acct_retry d =
	    acct_retry_delay(max	      ? 64
			     : retry_after_ms ? u->ra_attempt++
					      : u->attempt,
			     u->backoff_min_ms, u->backoff_max_ms, retry_after_ms, rnd(u));

	u->attempt++;
	u->st.retries++;
	u->st.backoff_ceiling_ms = d.ceiling_ms;
	u->st.backoff_ms = d.delay_ms;
	u->backoff_until = mono_ns() + u->st.backoff_ms * 1000000ULL;
	/* the batch is re-read from the spool next time (it may have grown) unless partly done */
	{
		bool partial = false;

		for (size_t i = 0; i < u->n_ents; i++)
			partial |= u->ents[i].dead || u->ents[i].done;
		if (!partial)
			batch_reset(u);
	}
}

static void backoff(struct upl *u, bool max)
{
	backoff_after(u, max, 0);
}

/*
 * Parse {"results":[{"i":N,"record_id":"...","status":"accepted|duplicate|rejected",
 * "reason":"..."}]}. Fills status per body line: 0 unknown, 1 accepted, 2 duplicate,
 * 3 rejected, 4 conflict (reasons[i] borrowed from *root). Returns 0, or -EBADMSG if malformed.
 */
static int parse_results(struct upl *u, json_t **root, unsigned char *status, const char **reasons)
{
	json_t *res, *it;
	size_t k;

	*root = NULL;
	if (!u->resp || u->resp_truncated)
		return -EBADMSG;
	*root = json_loadb(u->resp, u->resp_len, 0, NULL);
	res = json_object_get(*root, "results");
	if (!res && json_is_object(*root)) {
		/* counts only: acceptable when they cover the whole batch */
		json_t *a = json_object_get(*root, "accepted"),
		       *d = json_object_get(*root, "duplicate");

		if (json_is_integer(a) && json_is_integer(d) && json_integer_value(a) >= 0 &&
		    json_integer_value(d) >= 0 &&
		    (size_t)(json_integer_value(a) + json_integer_value(d)) == u->n_body) {
			memset(status, 1, u->n_body);
			return 0;
		}
	}
	if (!json_is_array(res))
		return -EBADMSG;
	json_array_foreach(res, k, it)
	{
		json_t *ji = json_object_get(it, "i");
		const char *st = json_string_value(json_object_get(it, "status"));
		const char *rid = json_string_value(json_object_get(it, "record_id"));
		json_int_t i;

		if (!json_is_integer(ji) || !st)
			return -EBADMSG;
		i = json_integer_value(ji);
		if (i < 0 || (size_t)i >= u->n_body)
			return -EBADMSG;
		if (rid) {
			/* the index must name the record we sent there */
			const struct bentry *e = &u->ents[u->body_map[i]];
			size_t rl = strlen(rid);
			char pat[ACCT_ID_MAX + 16];

			if (rl >= ACCT_ID_MAX)
				return -EBADMSG;
			snprintf(pat, sizeof(pat), "\"record_id\":\"%s\"", rid);
			if (!memmem(u->data + e->off, e->len, pat, strlen(pat))) {
				/* escaped characters: compare the decoded id */
				json_t *rec = json_loadb(u->data + e->off, e->len, 0, NULL);
				const char *sent =
				    json_string_value(json_object_get(rec, "record_id"));
				bool same = sent && strcmp(sent, rid) == 0;

				json_decref(rec);
				if (!same)
					return -EBADMSG;
			}
		}
		if (strcmp(st, "accepted") == 0)
			status[i] = 1;
		else if (strcmp(st, "duplicate") == 0)
			status[i] = 2;
		else if (strcmp(st, "rejected") == 0) {
			status[i] = 3;
			reasons[i] = json_string_value(json_object_get(it, "reason"));
		} else if (strcmp(st, "conflict") == 0) {
			status[i] = 4;
			reasons[i] = json_string_value(json_object_get(it, "reason"));
		} else
			return -EBADMSG;
	}
	return 0;
}

static void count_dups(struct upl *u, const unsigned char *status)
{
	for (size_t i = 0; i < u->n_body; i++)
		if (status[i] == 2)
			u->st.duplicates++;
}

/*
 * The batch's records whose result is `want` (3 rejected, 4 conflict) go to the dead-letter
 * file with the collector's reason (dflt where it gave none) and are marked dead. Returns how
 * many, or a negative errno.
 */
static int dead_letter_status(struct upl *u, long code, const unsigned char *status,
			      const char **reasons, unsigned char want, const char *dflt)
{
	_cleanup_free_ size_t *idx = calloc(u->n_body ? u->n_body : 1, sizeof(*idx));
	_cleanup_free_ const char **why = calloc(u->n_body ? u->n_body : 1, sizeof(*why));
	size_t n = 0;
	int r;

	if (!idx || !why)
		return -ENOMEM;
	for (size_t i = 0; i < u->n_body; i++)
		if (status[i] == want) {
			idx[n] = u->body_map[i];
			why[n] = reasons[i] ? reasons[i] : dflt;
			n++;
		}
	if (n == 0)
		return 0;
	r = dead_letter(u, idx, why, n, code, want == 4);
	if (r < 0)
		return r;
	for (size_t k = 0; k < n; k++)
		u->ents[idx[k]].dead = true;
	return (int)MIN(n, (size_t)INT_MAX);
}

/* 422 (or another 4xx with results): dead-letter the rejected, resend the rest. */
static int handle_rejections(struct upl *u, long code, const unsigned char *status,
			     const char **reasons)
{
	int r = dead_letter_status(u, code, status, reasons, 3, "");

	if (r == 0)
		return -EBADMSG; /* a 4xx that rejects nothing: cannot make progress by resending */
	if (r < 0) {
		set_error(u, "dead-letter write: %s", strerror(-r));
		return r;
	}
	/* dead_seen guards against re-dead-lettering after a crash before the ack */
	for (size_t i = 0; i < u->n_body && u->n_dead_seen < DEAD_SEEN_MAX; i++) {
		uint64_t *p;

		if (status[i] != 3)
			continue;
		p = realloc(u->dead_seen, (u->n_dead_seen + 1) * sizeof(*p));
		if (!p)
			return -ENOMEM;
		u->dead_seen = p;
		u->dead_seen[u->n_dead_seen++] = u->ents[u->body_map[i]].seq;
	}
	/* nothing was stored: resend the rest now (no backoff) */
	return 0;
}

/*
 * 200: records the collector holds under the same id with another body (a conflict) were not
 * stored; they go to the dead-letter file (status "conflict"), are counted and reported to
 * on_conflict, and the batch is acked: the stream goes on.
 */
static int set_conflicts_aside(struct upl *u, long code, const unsigned char *status,
			       const char **reasons)
{
	int r = dead_letter_status(u, code, status, reasons, 4, "record_id conflict");

	return r < 0 ? r : 0;
}

/*
 * An attempt at the current URL got no answer or a 5xx/429: after failover_after in a row,
 * the next URL (the batch goes there whole: ids make a batch the first collector committed
 * but could not answer a duplicate, never a double). The backoff starts again from its
 * minimum, so the move costs at most failover_after short waits. A timeout (the connect
 * timeout or the whole request's) moves at once: a collector that holds connections without
 * answering would otherwise cost failover_after whole timeouts.
 */
static void note_failure(struct upl *u, bool at_once)
{
	size_t from = u->cur;

	if (u->n_urls < 2)
		return;
	u->url_fails = at_once ? u->failover_after : u->url_fails + 1;
	if (u->url_fails < u->failover_after)
		return;
	use_url(u, (u->cur + 1) % u->n_urls);
	if (u->cur == from)
		return;
	u->attempt = u->ra_attempt = 0;
	{
		size_t l = strlen(u->st.last_error);

		if (at_once)
			snprintf(u->st.last_error + l, sizeof(u->st.last_error) - l,
				 "; moving to %s", u->base_urls[u->cur]);
		else
			snprintf(u->st.last_error + l, sizeof(u->st.last_error) - l,
				 "; %u failures in a row, moving to %s", u->failover_after,
				 u->base_urls[u->cur]);
	}
}

/* A batch committed: away from the first URL, the way back is timed from the first one. */
static void note_success(struct upl *u)
{
	u->url_fails = 0;
	if (u->cur != 0 && !u->failback_at) {
		uint64_t ms = u->failback_ms / 2 + rnd(u) % (u->failback_ms + 1);

		u->failback_at = mono_ns() + ms * 1000000ULL;
	}
}

/* Whether the answer advertises Accept-Encoding: zstd (RFC 7694). */
static bool answer_takes_zstd(struct upl *u)
{
	struct curl_header *h = NULL;

	if (curl_easy_header(u->easy, "Accept-Encoding", 0, CURLH_HEADER, -1, &h) != CURLHE_OK ||
	    !h || !h->value)
		return false;
	for (const char *p = h->value; (p = strcasestr(p, "zstd")); p += 4) {
		char after = p[4];

		if ((p == h->value || p[-1] == ',' || p[-1] == ' ') &&
		    (after == 0 || after == ',' || after == ' ' || after == ';'))
			return true;
	}
	return false;
}

/*
 * A compressed POST refused by a collector that does not take zstd (415, or any other 4xx
 * from one that does not advertise it: an older collector reads the bytes as NDJSON): the
 * batch is sent again uncompressed, nothing dead-lettered. True when handled so.
 */
static bool zstd_refused(struct upl *u, long code)
{
	bool takes = answer_takes_zstd(u);

	if (u->sent_zstd && code >= 400 && code < 500 && code != 401 && code != 403 &&
	    code != 408 && code != 429 && (code == 415 || !takes)) {
		u->peer_zstd = false;
		set_error(u,
			  "HTTP %ld to a zstd body: the collector does not take zstd, sending "
			  "uncompressed",
			  code);
		batch_reset(u);
		u->drain = true;
		return true;
	}
	u->peer_zstd = takes;
	return false;
}

/* A 200: the results checked against the batch, conflicts set aside, the batch acked. */
static void handle_ok(struct upl *u, unsigned char *status, const char **reasons)
{
	json_t *root = NULL;
	long code = 200;
	int r;

	r = parse_results(u, &root, status, reasons);
	if (r == 0) {
		for (size_t i = 0; i < u->n_body; i++)
			if (status[i] != 1 && status[i] != 2 && status[i] != 4)
				r = -EBADMSG;
	}
	if (r == 0) {
		r = set_conflicts_aside(u, code, status, reasons);
		if (r < 0) {
			set_error(u, "dead-letter write: %s", strerror(-r));
			json_decref(root);
			backoff(u, false);
			return;
		}
	}
	if (r < 0) {
		/* committed or not, we cannot tell: resending is safe (idempotent
		 * ids) */
		set_error(u, "HTTP 200 with a results list that does not match the batch");
		json_decref(root);
		backoff(u, false);
		return;
	}
	count_dups(u, status);
	json_decref(root);
	u->st.batches_sent++;
	if (ack_batch(u) < 0) {
		backoff(u, false);
		return;
	}
	u->attempt = u->ra_attempt = 0;
	u->st.backoff_ceiling_ms = 0;
	u->st.last_error[0] = 0;
	u->st.last_success_ns = now_ns(CLOCK_REALTIME);
	u->drain = true;
	note_success(u);
}

static void handle_done(struct upl *u, CURLcode cc)
{
	_cleanup_free_ unsigned char *status = NULL;
	_cleanup_free_ const char **reasons = NULL;
	json_t *root = NULL;
	long code = 0;
	int r;

	curl_multi_remove_handle(u->multi, u->easy);
	u->in_flight = false;
	if (cc != CURLE_OK) {
		u->st.last_http_status = 0;
		set_error(u, "POST %s: %s%s%s", u->post_url, curl_easy_strerror(cc),
			  u->curl_err[0] ? ": " : "", u->curl_err);
		note_failure(u, cc == CURLE_OPERATION_TIMEDOUT);
		backoff(u, false);
		return;
	}
	curl_easy_getinfo(u->easy, CURLINFO_RESPONSE_CODE, &code);
	u->st.last_http_status = code;
	if (zstd_refused(u, code))
		return;
	status = calloc(u->n_body ? u->n_body : 1, 1);
	reasons = calloc(u->n_body ? u->n_body : 1, sizeof(*reasons));
	if (!status || !reasons) {
		set_error(u, "out of memory");
		backoff(u, false);
		return;
	}

	if (code == 200) {
		handle_ok(u, status, reasons);
		return;
	}
	if (code == 413) {
		size_t live = u->n_body;

		if (live > 1) {
			/* fewer records per POST; the batch is re-read at the new size */
			u->batch_limit = MAX(live / 2, (size_t)1);
			set_error(u, "HTTP 413: batch of %zu records too large, now %zu", live,
				  u->batch_limit);
			batch_reset(u);
			return;
		}
		/* one record the collector will never take */
		reasons[0] = "request too large (HTTP 413)";
		status[0] = 3;
		if (handle_rejections(u, code, status, reasons) < 0)
			backoff(u, false);
		return;
	}
	if (code == 401 || code == 403) {
		/* with the collector's reason ("... uses expired certificate"), escaped */
		json_t *j = u->resp && !u->resp_truncated
				? json_loadb(u->resp, u->resp_len, 0, NULL)
				: NULL;
		const char *why = json_string_value(json_object_get(j, "error"));
		_cleanup_free_ char *safe = why ? esc_dup(why) : NULL;

		set_error(u, "HTTP %ld: %s%s%s", code,
			  code == 401 ? "collector refused the token"
				      : "collector refused records for this node",
			  safe ? ": " : "", safe ?: "");
		json_decref(j);
		backoff(u, true);
		return;
	}
	if (code >= 400 && code < 500 && code != 429 && code != 408) {
		r = parse_results(u, &root, status, reasons);
		if (r == 0)
			r = handle_rejections(u, code, status, reasons);
		json_decref(root);
		if (r < 0) {
			set_error(u, "HTTP %ld from collector%s", code,
				  r == -EBADMSG ? " without usable per-record results" : "");
			backoff(u, false);
			return;
		}
		/* the rest is resent right away from the kept batch (maybe_start) */
		set_error(u, "HTTP %ld: records dead-lettered, resending the rest", code);
		return;
	}
	/* 503 from a collector shedding load or without its database, 429: come back no sooner
	 * than it asks, with jitter (acct_retry_delay) */
	{
		curl_off_t ra = 0;

		if (curl_easy_getinfo(u->easy, CURLINFO_RETRY_AFTER, &ra) != CURLE_OK || ra < 0)
			ra = 0;
		u->st.retry_after_s = (uint64_t)ra;
		set_error(u, "HTTP %ld from %s%s", code, u->post_url,
			  ra > 0 ? " (Retry-After honoured)" : "");
		if (code >= 500 || code == 429)
			note_failure(u, false);
		backoff_after(u, false, (uint64_t)MIN(ra, (curl_off_t)(UINT64_MAX / 2000)) * 1000);
	}
}

int upl_dispatch(struct upl *u)
{
	struct epoll_event evs[16];
	uint64_t retries0 = u->st.retries;
	int n, r = 0;

	for (int round = 0; round < 4; round++) {
		int running;
		CURLMsg *m;
		int left;

		n = epoll_wait(u->epfd, evs, ARRAY_SIZE(evs), 0);
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd, mask = 0;

			if (fd == u->tfd) {
				uint64_t x;

				(void)!read(u->tfd, &x, sizeof(x));
				continue;
			}
			if (evs[i].events & EPOLLIN)
				mask |= CURL_CSELECT_IN;
			if (evs[i].events & EPOLLOUT)
				mask |= CURL_CSELECT_OUT;
			if (evs[i].events & (EPOLLERR | EPOLLHUP))
				mask |= CURL_CSELECT_ERR;
			curl_multi_socket_action(u->multi, fd, mask, &running);
		}
		if (u->curl_deadline && mono_ns() >= u->curl_deadline) {
			u->curl_deadline = 0;
			curl_multi_socket_action(u->multi, CURL_SOCKET_TIMEOUT, 0, &running);
		}
		while ((m = curl_multi_info_read(u->multi, &left)))
			if (m->msg == CURLMSG_DONE && m->easy_handle == u->easy)
				handle_done(u, m->data.result);
		/* a failure seen in this call waits at least for the next one, even with a
		 * 0 ms jitter draw, so one dispatch never spins through several attempts */
		if (u->st.retries == retries0) {
			r = maybe_start(u, false);
			if (r < 0 && !u->backoff_until)
				backoff(u, false);
		}
		if (!(u->curl_deadline && mono_ns() >= u->curl_deadline) &&
		    n < (int)ARRAY_SIZE(evs))
			break;
	}
	{
		struct spool_stats ss;

		spool_get_stats(u->spool, &ss);
		u->st.spool_pending = ss.entries_pending;
	}
	arm_timer(u);
	return r < 0 ? r : 0;
}

void upl_hold(struct upl *u)
{
	u->held = true;
}

void upl_carry_stats(struct upl *to, const struct upl *from)
{
	const struct upl_stats *f = &from->st;
	struct upl_stats *t = &to->st;

	t->batches_sent += f->batches_sent;
	t->records_acked += f->records_acked;
	t->duplicates += f->duplicates;
	t->rejected += f->rejected;
	t->conflicts += f->conflicts;
	t->retries += f->retries;
	t->requests += f->requests;
	t->failovers += f->failovers;
	t->body_bytes += f->body_bytes;
	t->wire_bytes += f->wire_bytes;
	t->last_success_ns = MAX(t->last_success_ns, f->last_success_ns);
}

void upl_kick(struct upl *u)
{
	struct spool_stats ss;

	spool_get_stats(u->spool, &ss);
	if (!u->pending_since && ss.entries_pending)
		u->pending_since = mono_ns();
	if (ss.entries_pending >= u->batch_limit)
		u->drain = true;
	arm_timer(u);
}

void upl_retry_now(struct upl *u)
{
	u->backoff_until = 0;
	u->st.backoff_ms = 0;
	u->drain = true;
	arm_timer(u);
}

void upl_get_stats(const struct upl *u, struct upl_stats *ret)
{
	*ret = u->st;
	ret->batch_limit = u->batch_limit;
	ret->in_flight = u->in_flight;
	ret->url = u->base_urls[u->cur];
	ret->url_index = (unsigned)u->cur;
}
