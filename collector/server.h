/* SPDX-License-Identifier: MIT */
/*
 * corral-collector HTTP server (libmicrohttpd: epoll in a pool of threads, bounded).
 *   POST /v1/records   NDJSON batch, node token    -> 200 / 422 / 401 / 403 / 413 / 400 / 503
 *   GET  /v1/records   ?type=&node=&task=&limit=   reader token -> NDJSON (no audit records)
 *   GET  /v1/audit     ?node=&task=&job=&user=&from=&to=&type=&limit=&after=   auditor token
 *   GET  /v1/audit/verify?node=   GET /v1/audit/breaks?node=&limit=          auditor token
 *   GET  /healthz      200 "ok" when the database answers, else 503
 *   GET  /metrics      Prometheus text
 * See docs/collector.md for the bodies. Library code: nothing is printed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collector/store.h"
#include "collector/tokens.h"

#define COLL_DEFAULT_LISTEN	 "127.0.0.1:8470"
#define COLL_DEFAULT_MAX_BODY	 (16u * 1024 * 1024)
#define COLL_DEFAULT_MAX_RECORDS 100000
/* Connection handling (docs/collector.md "Slow and hostile clients"): epoll in a pool of
 * threads, so an open connection costs a socket and a little memory, not a thread. */
#define COLL_DEFAULT_THREADS		32
#define COLL_DEFAULT_MAX_CONNECTIONS	10000 /* less when RLIMIT_NOFILE is lower */
#define COLL_DEFAULT_CONNECTIONS_PER_IP 256
#define COLL_DEFAULT_CONNECTION_TIMEOUT 30 /* s without a byte from the client */
#define COLL_CONNECTION_MEMORY                                                                     \
	(16u << 10) /* header buffer per connection (touched whole at                              \
		     * every request: RSS per keep-alive node) */
/* Load shedding (docs/collector.md "Load shedding"): a POST that finds this many batches per
 * thread waiting for the ingest workers is answered 503 with Retry-After. */
#define COLL_QUEUE_PER_THREAD	 4
#define COLL_DEFAULT_RETRY_AFTER 2 /* s, in every 503 */
#define COLL_QUERY_LIMIT_DEFAULT 1000
#define COLL_QUERY_LIMIT_MAX	 100000

struct coll_server_config {
	const char *listen;	      /* "ADDR:PORT" or "[ADDR6]:PORT"; port 0 = any */
	uint64_t max_body;	      /* bytes of one request body (413 beyond) */
	size_t max_records;	      /* lines of one batch (413 beyond) */
	void (*log)(const char *msg); /* the program's logger (audit chain breaks); NULL = none */
	unsigned threads;	      /* 0 = COLL_DEFAULT_THREADS */
	unsigned max_connections;     /* 0 = COLL_DEFAULT_MAX_CONNECTIONS */
	unsigned connections_per_ip;  /* 0 = COLL_DEFAULT_CONNECTIONS_PER_IP */
	unsigned connection_timeout;  /* s, 0 = COLL_DEFAULT_CONNECTION_TIMEOUT */
	/* SO_REUSEPORT: several collectors on this host share the port, the kernel spreads the
	 * connections (local scale-out). Off: a port in use is an error (-EADDRINUSE). */
	bool reuse_port;
	/* TLS (collector/tls.h): the port speaks HTTPS only; NULL = plain HTTP. With a client CA,
	 * a node token is taken only with a certificate naming its node. Must outlive the server.
	 */
	struct coll_tls *tls;
	unsigned retry_after; /* s in a 503's Retry-After, 0 = COLL_DEFAULT_RETRY_AFTER */
	size_t max_queued;    /* batches waiting for the database before 503, 0 = 4 x threads */
};

struct coll_server;

/* Parse "ADDR:PORT" into a socket address (numeric host only). */
int coll_parse_listen(const char *s, void *ret_sockaddr_storage, unsigned *ret_len);

/* Binds and starts serving. store and tokens must outlive the server. */
int coll_server_start(const struct coll_server_config *cfg, struct coll_store *store,
		      const struct coll_tokens *tokens, struct coll_server **ret, char *err,
		      size_t errlen);
uint16_t coll_server_port(struct coll_server *s);
/* One more store handle (its own database connection) for inserting batches, so concurrent
 * POSTs commit in parallel; the server's own store is the first. The caller keeps it open
 * until the server is stopped. -E2BIG beyond COLL_INGEST_POOL_MAX. */
#define COLL_INGEST_POOL_MAX 32
int coll_server_add_ingest_store(struct coll_server *srv, struct coll_store *st);
/* Where the store defers rollup maintenance (coll_store_defers_rollups): a thread folds the
 * queued deltas through st (a handle of its own) delay_ms after a commit, and once more at
 * stop. -EINVAL if st does not defer or a folder runs already. */
#define COLL_DEFAULT_FOLD_DELAY_MS 1000
/* The folder does not wait for the delay once this many records have committed since its last
 * fold began. */
#define COLL_FOLD_BACKLOG_RECORDS 10000
int coll_server_set_fold_store(struct coll_server *srv, struct coll_store *st, unsigned delay_ms);
/* Graceful stop: stop accepting, let in-flight requests finish (at most timeout_ms), stop. */
void coll_server_stop(struct coll_server *s, unsigned timeout_ms);
