/* SPDX-License-Identifier: MIT */
/*
 * A fleet of simulated nodes uploading to one collector (tests/bench/fleet.sh).
 *   helper_fleet --url http://127.0.0.1:PORT --nodes N --seconds S [--period-ms 10000]
 *                [--samples-every 3] [--batch 500] [--drain-timeout 300] [--seed X]
 *   helper_fleet tokens --nodes N      the collector's tokens file for those nodes, to stdout
 *
 * Node i is "fn<i>" with its own token and its own loopback source address (127.10.a.b, so
 * the collector's per-address limit sees one node per address, as on a real network), one
 * HTTP/1.1 keep-alive connection, and its own record ids ("fleet-fn<i>-<seq>"). Every
 * period-ms (phase random per node) a task of the node ends: one task.end record, and every
 * samples-every-th period a task.sample with it (10 s and 30 s by default: the rate of a
 * busy node). Records wait in the node's queue (its spool) until the collector answers 200;
 * a node sends what is queued, up to batch records, as soon as it has any and nothing is in
 * flight. A failure (no connection, a reset, 5xx) is retried after acct_retry_delay() — the
 * agent's rule: full jitter, Retry-After honoured with jitter.
 *
 * One thread, one epoll over every connection; the fd limit is raised to the hard limit.
 * After S seconds no new record is made, and the helper waits until every node's queue is
 * acknowledged (at most drain-timeout s). SIGUSR1 marks "the collector is back" (fleet.sh
 * sends it when it restarts a collector it had stopped): from then on the POST latencies are
 * kept apart (the storm), and the time until every record made before the mark is
 * acknowledged is the drain time.
 *
 * Prints one line of key=value (latencies in ms, measured from the first byte written to
 * the last byte of the answer):
 *   nodes= seconds= generated= acked= accepted= duplicate= posts= ok= s503= conn_err=
 *   p50= p99= max= storm_posts= storm_503= storm_p50= storm_p99= storm_max= drain_s=
 *   offered_rps= (made / S) stored_rps= (accepted / the time until the last answer, at
 *   least S) undrained=
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "accounting/record.h"
#include "accounting/retry.h"
#include "common/clock.h"
#include "common/macro.h"
#include "common/parse.h"

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 60000 /* the uploader's default */
#define RESP_MAX       (1u << 20)

enum nstate { N_IDLE, N_CONNECTING, N_SENDING, N_READING };

struct node {
	int fd;
	enum nstate st;
	uint64_t made;	    /* records made so far: seqs [0, made) */
	uint64_t acked;	    /* seqs [0, acked) are acknowledged */
	uint64_t inflight;  /* records in the request being sent (from acked) */
	uint64_t next_task; /* monotonic ns of the next task end */
	uint64_t retry_at;  /* monotonic ns before which nothing is sent; 0 = none */
	uint64_t t_send;    /* monotonic ns of the request's first byte */
	uint64_t *made_at;  /* per seq: monotonic ns it was made (storm drain); bit 0: a sample */
	uint64_t periods;   /* task ends so far */
	size_t made_cap;
	unsigned attempt, ra_attempt; /* failures without / answers with a Retry-After in a row */
	char *out;
	size_t out_len, out_pos;
	char *in;
	size_t in_len, in_cap;
};

struct lat {
	uint32_t *v; /* microseconds */
	size_t n, cap;
};

static struct {
	const char *host;
	uint16_t port;
	unsigned nodes, samples_every, batch;
	uint64_t seconds, period_ms, drain_timeout;
	uint64_t seed, rng;
	struct node *n;
	int ep;
	struct lat steady, storm;
	uint64_t posts, ok, s503, conn_err, other, accepted, duplicate, storm_posts, storm_503;
	uint64_t mark; /* SIGUSR1 seen at (monotonic ns), 0 = never */
	uint64_t drained_at;
	uint64_t last_ack; /* monotonic ns of the last 200 */
} F;

static volatile sig_atomic_t got_usr1;

static void on_usr1(int sig)
{
	(void)sig;
	got_usr1 = 1;
}

static uint64_t rnd(void)
{
	F.rng ^= F.rng >> 12;
	F.rng ^= F.rng << 25;
	F.rng ^= F.rng >> 27;
	return F.rng * 2685821657736338717ULL;
}

static void lat_add(struct lat *l, uint64_t ns)
{
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 4096;
		uint32_t *p = realloc(l->v, nc * sizeof(*p));

		if (!p)
			return;
		l->v = p;
		l->cap = nc;
	}
	l->v[l->n++] = (uint32_t)MIN(ns / 1000, (uint64_t)UINT32_MAX);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* the q-quantile in ms (sorts l) */
static double lat_q(struct lat *l, double q)
{
	size_t i;

	if (!l->n)
		return 0;
	qsort(l->v, l->n, sizeof(*l->v), cmp_u32);
	i = (size_t)(q * (double)(l->n - 1) + 0.5);
	return l->v[MIN(i, l->n - 1)] / 1000.0;
}

static void node_name(unsigned i, char *buf, size_t len)
{
	snprintf(buf, len, "fn%05u", i);
}

static void node_token(unsigned i, char *buf, size_t len)
{
	snprintf(buf, len, "tok-fleet-%05u-0123456789abcdef", i);
}

/* Record seq of node i: a task.end per period, a task.sample beside every samples_every-th. */
static int make_record(unsigned i, uint64_t seq, bool sample, char **ret, size_t *ret_len)
{
	uint64_t base = 1796200000ULL * NSEC_PER_SEC, wall = 10 * NSEC_PER_SEC;
	struct acct_record r = {0};
	char node[16];
	int e;

	node_name(i, node, sizeof(node));
	snprintf(r.record_id, sizeof(r.record_id), "fleet-%s-%09" PRIu64, node, seq);
	r.type = sample ? ACCT_TASK_SAMPLE : ACCT_TASK_END;
	r.time_ns = base + seq * 10 * NSEC_PER_SEC + i * 1000ULL;
	r.node = strdup(node);
	snprintf(r.task.id, sizeof(r.task.id), "%s-t%" PRIu64, node, seq);
	r.task.job = strdup("fleet");
	r.task.user = strdup(seq % 2 ? "alice" : "bob");
	r.task.uid = 1000 + (uint32_t)(seq % 2);
	r.task.account = strdup(i % 3 ? "physics" : "chem");
	if (!r.node || !r.task.job || !r.task.user || !r.task.account) {
		acct_record_clear(&r);
		return -ENOMEM;
	}
	r.request.cpus = 1 + (double)(seq % 4);
	r.request.memory_bytes = 2ULL << 30;
	r.request.pids = 512;
	r.request.time_limit_s = 3600;
	r.usage.wall_ns = wall;
	r.usage.cpu_user_ns = wall / 2;
	r.usage.cpu_system_ns = wall / 50;
	r.usage.memory_peak_bytes = (512ULL + seq % 1024) << 20;
	r.usage.memory_byte_seconds = (double)r.usage.memory_peak_bytes * 5;
	r.usage.io_read_bytes = seq * 4096;
	r.usage.io_write_bytes = seq * 8192;
	for (int f = 0; f < ACCT_U_GPU_SECONDS; f++)
		r.sources[f] = f == ACCT_U_WALL_NS	   ? ACCT_SRC_AGENT
			       : f <= ACCT_U_CPU_SYSTEM_NS ? ACCT_SRC_EBPF
							   : ACCT_SRC_CGROUP;
	if (r.type == ACCT_TASK_END)
		r.exit.status = ACCT_EXIT_EXITED;
	e = acct_record_encode(&r, ret, ret_len);
	acct_record_clear(&r);
	return e;
}

static void node_close(struct node *n)
{
	if (n->fd >= 0) {
		epoll_ctl(F.ep, EPOLL_CTL_DEL, n->fd, NULL);
		close(n->fd);
	}
	n->fd = -1;
	n->st = N_IDLE;
}

static void node_fail(struct node *n, uint64_t now, uint64_t retry_after_ms)
{
	struct acct_retry d =
	    acct_retry_delay(retry_after_ms ? n->ra_attempt++ : n->attempt++, BACKOFF_MIN_MS,
			     BACKOFF_MAX_MS, retry_after_ms, rnd());

	n->retry_at = now + d.delay_ms * 1000000ULL;
	n->inflight = 0;
}

static int node_connect(unsigned i, struct node *n)
{
	struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
	struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.u32 = i};
	int one = 1;

	n->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (n->fd < 0)
		return -errno;
	src.sin_addr.s_addr =
	    htonl((127u << 24) | (10u << 16) | ((1 + i / 250) << 8) | (1 + i % 250));
	setsockopt(n->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(n->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (bind(n->fd, (struct sockaddr *)&src, sizeof(src)) < 0)
		return -errno;
	dst.sin_port = htons(F.port);
	inet_pton(AF_INET, F.host, &dst.sin_addr);
	if (connect(n->fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS)
		return -errno;
	if (epoll_ctl(F.ep, EPOLL_CTL_ADD, n->fd, &ev) < 0)
		return -errno;
	n->st = N_CONNECTING;
	return 0;
}

/* Build the request for what node i has queued (up to batch records). */
static int node_build(unsigned i, struct node *n)
{
	char *body = NULL, tok[64], hdr[512];
	size_t blen = 0;
	FILE *f = open_memstream(&body, &blen);
	int hl;

	if (!f)
		return -ENOMEM;
	n->inflight = MIN(n->made - n->acked, (uint64_t)F.batch);
	for (uint64_t s = n->acked; s < n->acked + n->inflight; s++) {
		char *rec;
		size_t rl;
		int e = make_record(i, s, n->made_at[s] & 1, &rec, &rl);

		if (e < 0) {
			fclose(f);
			free(body);
			return e;
		}
		fwrite(rec, 1, rl, f);
		fputc('\n', f);
		free(rec);
	}
	if (fclose(f) != 0)
		return -ENOMEM;
	node_token(i, tok, sizeof(tok));
	hl = snprintf(hdr, sizeof(hdr),
		      "POST /v1/records HTTP/1.1\r\nHost: %s:%u\r\nUser-Agent: corrald/1\r\n"
		      "Authorization: Bearer %s\r\nContent-Type: application/x-ndjson\r\n"
		      "Content-Length: %zu\r\n\r\n",
		      F.host, F.port, tok, blen);
	free(n->out);
	n->out = malloc((size_t)hl + blen);
	if (!n->out) {
		free(body);
		return -ENOMEM;
	}
	memcpy(n->out, hdr, (size_t)hl);
	memcpy(n->out + hl, body, blen);
	free(body);
	n->out_len = (size_t)hl + blen;
	n->out_pos = 0;
	n->in_len = 0;
	return 0;
}

static void set_events(struct node *n, unsigned i, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.u32 = i};

	epoll_ctl(F.ep, EPOLL_CTL_MOD, n->fd, &ev);
}

static void node_try_send(unsigned i, struct node *n, uint64_t now)
{
	if (n->st != N_IDLE || n->made == n->acked || (n->retry_at && now < n->retry_at))
		return;
	n->retry_at = 0;
	if (node_build(i, n) < 0) {
		node_fail(n, now, 0);
		return;
	}
	F.posts++;
	if (F.mark)
		F.storm_posts++;
	n->t_send = now;
	if (n->fd < 0) {
		if (node_connect(i, n) < 0) {
			F.conn_err++;
			node_close(n);
			node_fail(n, now, 0);
		}
		return; /* sent once connected (EPOLLOUT) */
	}
	n->st = N_SENDING;
	set_events(n, i, EPOLLOUT | EPOLLIN);
}

/* An answer is complete in n->in: act on it. Returns false when the connection must close. */
static bool node_answer(struct node *n, uint64_t now, const char *body, size_t blen, int code,
			uint64_t retry_after_s, bool close_after)
{
	uint64_t ns = now - n->t_send;

	lat_add(F.mark ? &F.storm : &F.steady, ns);
	if (code == 200) {
		size_t acc = 0, dup = 0;

		if (sscanf(body, "{\"accepted\":%zu,\"duplicate\":%zu", &acc, &dup) != 2 ||
		    acc + dup != n->inflight) {
			fprintf(stderr, "helper_fleet: 200 whose counts do not match: %.*s\n",
				(int)MIN(blen, (size_t)200), body);
			F.other++;
			node_fail(n, now, 0);
			return false;
		}
		F.ok++;
		F.last_ack = now;
		F.accepted += acc;
		F.duplicate += dup;
		n->acked += n->inflight;
		n->inflight = 0;
		n->attempt = n->ra_attempt = 0;
		return !close_after;
	}
	if (code == 503) {
		F.s503++;
		if (F.mark)
			F.storm_503++;
	} else {
		F.other++;
		if (F.other < 10)
			fprintf(stderr, "helper_fleet: HTTP %d: %.*s\n", code,
				(int)MIN(blen, (size_t)200), body);
	}
	node_fail(n, now, retry_after_s * 1000);
	return !close_after;
}

/* Parse what has arrived; true when a whole answer was handled. */
static bool node_parse(struct node *n, uint64_t now, bool *keep)
{
	char *end, *p, *line;
	size_t hlen, clen = 0;
	uint64_t ra = 0;
	bool close_after = false;
	int code = 0;

	n->in[n->in_len] = 0;
	end = strstr(n->in, "\r\n\r\n");
	if (!end)
		return false;
	hlen = (size_t)(end - n->in) + 4;
	if (sscanf(n->in, "HTTP/1.%*d %d", &code) != 1)
		code = 0;
	for (line = strstr(n->in, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
		p = line + 2;
		if (strncasecmp(p, "Content-Length:", 15) == 0)
			clen = strtoul(p + 15, NULL, 10);
		else if (strncasecmp(p, "Retry-After:", 12) == 0) {
			char v[64];
			size_t k = strcspn(p + 12, "\r");

			snprintf(v, sizeof(v), "%.*s", (int)MIN(k, sizeof(v) - 1), p + 12);
			if (acct_retry_after_parse(v, now_ns(CLOCK_REALTIME) / NSEC_PER_SEC, &ra) <
			    0)
				ra = 0;
		} else if (strncasecmp(p, "Connection:", 11) == 0 && strcasestr(p, "close") &&
			   strcasestr(p, "close") < strstr(p, "\r\n"))
			close_after = true;
	}
	if (n->in_len < hlen + clen)
		return false;
	*keep = node_answer(n, now, n->in + hlen, clen, code, ra, close_after);
	n->in_len = 0;
	return true;
}

static void node_io(unsigned i, uint32_t events, uint64_t now)
{
	struct node *n = &F.n[i];

	if (n->st == N_CONNECTING) {
		int err = 0;
		socklen_t el = sizeof(err);

		if (getsockopt(n->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
			F.conn_err++;
			node_close(n);
			node_fail(n, now, 0);
			return;
		}
		if (!(events & EPOLLOUT))
			return;
		n->st = N_SENDING;
	}
	if (n->st == N_SENDING && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		while (n->out_pos < n->out_len) {
			ssize_t w =
			    send(n->fd, n->out + n->out_pos, n->out_len - n->out_pos, MSG_NOSIGNAL);

			if (w < 0 && errno == EAGAIN)
				return;
			if (w <= 0) {
				F.conn_err++;
				node_close(n);
				node_fail(n, now, 0);
				return;
			}
			n->out_pos += (size_t)w;
		}
		n->st = N_READING;
		set_events(n, i, EPOLLIN);
	}
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
		for (;;) {
			ssize_t r;
			bool keep = true;

			if (n->in_cap - n->in_len < 65536) {
				size_t nc = n->in_cap ? n->in_cap * 2 : 65536 + 1;
				char *p = nc > RESP_MAX ? NULL : realloc(n->in, nc);

				if (!p) {
					F.other++;
					node_close(n);
					node_fail(n, now, 0);
					return;
				}
				n->in = p;
				n->in_cap = nc;
			}
			r = recv(n->fd, n->in + n->in_len, n->in_cap - n->in_len - 1, 0);
			if (r < 0 && errno == EAGAIN)
				return;
			if (r <= 0) {
				/* closed: an idle keep-alive connection the server let go (or lost
				 * in an outage) is simply reopened next time; a request in flight
				 * failed */
				if (n->st != N_IDLE) {
					F.conn_err++;
					node_close(n);
					node_fail(n, now, 0);
				} else {
					node_close(n);
				}
				return;
			}
			n->in_len += (size_t)r;
			if (n->st == N_READING && node_parse(n, now, &keep)) {
				n->st = N_IDLE;
				if (!keep) {
					node_close(n);
					return;
				}
				node_try_send(i, n, now); /* drain the rest of the queue at once */
				return;
			}
		}
	}
}

/* Tasks end: records made, due sends started. */
static void tick(uint64_t now, bool making)
{
	for (unsigned i = 0; i < F.nodes; i++) {
		struct node *n = &F.n[i];

		while (making && now >= n->next_task) {
			uint64_t k = F.samples_every && ++n->periods % F.samples_every == 0 ? 2 : 1;

			for (uint64_t j = 0; j < k; j++) {
				if (n->made == n->made_cap) {
					size_t nc = n->made_cap ? n->made_cap * 2 : 16;
					uint64_t *p = realloc(n->made_at, nc * sizeof(*p));

					if (!p)
						break;
					n->made_at = p;
					n->made_cap = nc;
				}
				n->made_at[n->made++] = (n->next_task & ~1ULL) | (j == 1);
			}
			n->next_task += F.period_ms * 1000000ULL;
		}
		node_try_send(i, n, now);
	}
}

/* Every record made before the mark acknowledged? */
static bool drained_since_mark(void)
{
	for (unsigned i = 0; i < F.nodes; i++) {
		struct node *n = &F.n[i];

		if (n->acked < n->made && n->made_at[n->acked] < F.mark)
			return false;
	}
	return true;
}

static int usage(void)
{
	fprintf(stderr, "usage: helper_fleet --url http://HOST:PORT --nodes N --seconds S "
			"[--period-ms MS] [--samples-every K] [--batch B] [--drain-timeout S] "
			"[--seed X]\n       helper_fleet tokens --nodes N\n");
	return 2;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"url", required_argument, NULL, 'u'},
	    {"nodes", required_argument, NULL, 'n'},
	    {"seconds", required_argument, NULL, 's'},
	    {"period-ms", required_argument, NULL, 'p'},
	    {"samples-every", required_argument, NULL, 'k'},
	    {"batch", required_argument, NULL, 'b'},
	    {"drain-timeout", required_argument, NULL, 'd'},
	    {"seed", required_argument, NULL, 'r'},
	    {0},
	};
	char host[64] = "";
	bool tokens = argc > 1 && strcmp(argv[1], "tokens") == 0;
	uint64_t v, t0, t_end, t_stop;
	struct rlimit rl;
	struct epoll_event evs[512];
	unsigned port = 0;
	int c;

	F.period_ms = 10000;
	F.samples_every = 3;
	F.batch = 500;
	F.drain_timeout = 300;
	F.seed = 1;
	optind = tokens ? 2 : 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c != 'u' && (parse_u64(optarg, &v) < 0))
			return usage();
		switch (c) {
		case 'u':
			if (sscanf(optarg, "http://%63[0-9.]:%u", host, &port) != 2 || !port ||
			    port > 65535)
				return usage();
			break;
		case 'n':
			F.nodes = (unsigned)v;
			break;
		case 's':
			F.seconds = v;
			break;
		case 'p':
			F.period_ms = v;
			break;
		case 'k':
			F.samples_every = (unsigned)v;
			break;
		case 'b':
			F.batch = (unsigned)v;
			break;
		case 'd':
			F.drain_timeout = v;
			break;
		case 'r':
			F.seed = v;
			break;
		default:
			return usage();
		}
	}
	if (!F.nodes || F.nodes > 60000 || !F.period_ms || !F.batch)
		return usage();
	if (tokens) {
		char name[16], tok[64];

		for (unsigned i = 0; i < F.nodes; i++) {
			node_name(i, name, sizeof(name));
			node_token(i, tok, sizeof(tok));
			printf("node %s %s\n", name, tok);
		}
		return 0;
	}
	if (!host[0] || !F.seconds)
		return usage();
	F.host = host;
	F.port = (uint16_t)port;
	F.rng = F.seed * 0x9e3779b97f4a7c15ULL ?: 1;
	/* a descriptor per node, and a few */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)F.nodes + 32) {
		fprintf(stderr, "helper_fleet: RLIMIT_NOFILE %llu < %u nodes + 32\n",
			(unsigned long long)rl.rlim_cur, F.nodes);
		return 1;
	}
	signal(SIGUSR1, on_usr1);
	signal(SIGPIPE, SIG_IGN);
	F.ep = epoll_create1(EPOLL_CLOEXEC);
	F.n = calloc(F.nodes, sizeof(*F.n));
	if (F.ep < 0 || !F.n)
		return 1;
	t0 = now_ns(CLOCK_MONOTONIC);
	for (unsigned i = 0; i < F.nodes; i++) {
		F.n[i].fd = -1;
		/* each node's tasks end at its own phase of the period */
		F.n[i].next_task = t0 + rnd() % (F.period_ms * 1000000ULL);
	}
	t_end = t0 + F.seconds * NSEC_PER_SEC;
	t_stop = t_end + F.drain_timeout * NSEC_PER_SEC;
	for (;;) {
		uint64_t now = now_ns(CLOCK_MONOTONIC);
		bool making = now < t_end;
		int k;

		if (got_usr1 && !F.mark) {
			F.mark = now;
			fprintf(stderr, "helper_fleet: mark at %.3f s\n", (now - t0) / 1e9);
		}
		tick(now, making);
		if (F.mark && !F.drained_at && drained_since_mark())
			F.drained_at = now;
		if (!making) {
			uint64_t left = 0;

			for (unsigned i = 0; i < F.nodes; i++)
				left += F.n[i].made - F.n[i].acked;
			if (!left || now >= t_stop)
				break;
		}
		k = epoll_wait(F.ep, evs, ARRAY_SIZE(evs), 5);
		now = now_ns(CLOCK_MONOTONIC);
		for (int j = 0; j < k; j++)
			node_io(evs[j].data.u32, evs[j].events, now);
	}
	{
		uint64_t made = 0, acked = 0;
		double secs = (double)F.seconds,
		       active = F.last_ack > t0 ? (double)(F.last_ack - t0) / 1e9 : secs;

		for (unsigned i = 0; i < F.nodes; i++) {
			made += F.n[i].made;
			acked += F.n[i].acked;
		}
		printf("nodes=%u seconds=%" PRIu64 " generated=%" PRIu64 " acked=%" PRIu64
		       " accepted=%" PRIu64 " duplicate=%" PRIu64 " posts=%" PRIu64 " ok=%" PRIu64
		       " s503=%" PRIu64 " conn_err=%" PRIu64 " other=%" PRIu64
		       " p50=%.1f p99=%.1f max=%.1f",
		       F.nodes, F.seconds, made, acked, F.accepted, F.duplicate, F.posts, F.ok,
		       F.s503, F.conn_err, F.other, lat_q(&F.steady, 0.5), lat_q(&F.steady, 0.99),
		       lat_q(&F.steady, 1.0));
		printf(" storm_posts=%" PRIu64 " storm_503=%" PRIu64
		       " storm_p50=%.1f storm_p99=%.1f storm_max=%.1f drain_s=%.1f",
		       F.storm_posts, F.storm_503, lat_q(&F.storm, 0.5), lat_q(&F.storm, 0.99),
		       lat_q(&F.storm, 1.0),
		       F.drained_at ? (double)(F.drained_at - F.mark) / 1e9 : -1.0);
		printf(" offered_rps=%.1f stored_rps=%.1f undrained=%" PRIu64 "\n", made / secs,
		       F.accepted / MAX(active, secs), made - acked);
		return made == acked ? 0 : 1;
	}
}
