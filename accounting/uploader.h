/* SPDX-License-Identifier: MIT */
/*
 * Uploader: streams spooled records to corral-collector (`POST <url>/v1/records`, NDJSON,
 * bearer token) with libcurl's multi interface, so it runs inside the agent's single-threaded
 * epoll loop: add upl_fd() to the loop (EPOLLIN), call upl_dispatch() when it is readable and
 * on every tick; upl_timeout_ms() says when it wants to run next. Never blocks.
 * Entries are acked in the spool only after the collector answered that the batch is committed.
 * Protocol, retry and dead-letter semantics: docs/pipeline.md "Uploader".
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "accounting/spool.h"

#define UPL_ERROR_MAX 256

#define UPL_URLS_MAX		   16
#define UPL_DEFAULT_FAILOVER_AFTER 3
#define UPL_DEFAULT_FAILBACK_MS	   300000

struct upl_opts {
	/* collector base URL ("https://collector:8443"), required; several, space-separated,
	 * in order of preference: batches go to one until it fails failover_after times in a row
	 * (no answer, or a 5xx/429; a timeout at once), then to the next; after a success on
	 * another than the first, back to the first in failback_ms, jittered by +-50%
	 * (docs/pipeline.md "Failover") */
	const char *url;
	const char *token;	   /* bearer token, required */
	const char *ca_file;	   /* optional CA bundle for TLS */
	const char *pinned_pubkey; /* optional CURLOPT_PINNEDPUBLICKEY ("sha256//BASE64;...") */
	const char *client_cert;   /* optional TLS client certificate (PEM), with client_key */
	const char *client_key;
	unsigned failover_after;     /* failures in a row before the next URL, 0 = 3 */
	uint64_t failback_ms;	     /* back to the first URL after this, 0 = 300 s */
	const char *state_dir;	     /* holds dead-letter.ndjson, required */
	size_t batch_records;	     /* max records per POST, 0 = 500 */
	size_t batch_bytes;	     /* max payload bytes per POST, 0 = 4 MiB */
	uint64_t batch_delay_ms;     /* wait this long for a batch to fill, 0 = 1000 */
	uint64_t connect_timeout_ms; /* 0 = 10 s */
	uint64_t request_timeout_ms; /* whole request, 0 = 60 s */
	uint64_t backoff_min_ms;     /* first retry ceiling, 0 = 500 */
	uint64_t backoff_max_ms;     /* ceiling cap, 0 = 60 s */
	uint64_t seed;		     /* jitter PRNG seed, 0 = from getrandom() */
	/* send bodies as zstd (Content-Encoding) once the collector advertises it */
	bool compress;
	/* Called before entries are acked (deleted from the spool); a negative return keeps
	 * them (backoff, then the batch is sent again: the collector answers duplicate).
	 * NULL = none. */
	int (*before_ack)(void *ud);
	void *before_ack_ud;
	/* Called for each record the collector answered "conflict" (another body is stored
	 * under its id), once it is in the dead-letter file. NULL = none. */
	void (*on_conflict)(void *ud, const char *record_id, uint64_t spool_seq);
	void *on_conflict_ud;
};

struct upl_stats {
	uint64_t batches_sent;	/* POSTs answered 200 */
	uint64_t records_acked; /* records acked in the spool (accepted + duplicate + dead) */
	uint64_t duplicates;	/* records the collector already had */
	uint64_t rejected;	/* records dead-lettered */
	uint64_t conflicts;	/* records the collector holds with another body (dead-lettered) */
	uint64_t retries;	/* failed attempts that led to a backoff */
	uint64_t requests;	/* POSTs started */
	long last_http_status;	/* 0 = no answer (network error) */
	char last_error[UPL_ERROR_MAX]; /* "" after a success */
	uint64_t last_error_ns;		/* CLOCK_REALTIME of the latest failure, 0 = none */
	uint64_t last_success_ns;	/* CLOCK_REALTIME of the latest acked batch, 0 = none */
	uint64_t backoff_ms;		/* delay chosen for the current backoff (0 = none) */
	uint64_t backoff_ceiling_ms;	/* current exponential ceiling */
	uint64_t retry_after_s;		/* the last 5xx/429's Retry-After (0 = none), honoured */
	uint64_t spool_pending;		/* entries waiting in the spool */
	size_t batch_limit;		/* current records-per-batch limit (halved on 413) */
	bool in_flight;
	const char *url;     /* base URL batches go to now (valid while the uploader lives) */
	unsigned url_index;  /* its place in the list, 0 = the first */
	uint64_t failovers;  /* moves to another URL (failover or failback) */
	uint64_t body_bytes; /* NDJSON bytes of the POSTs started */
	uint64_t wire_bytes; /* bytes of their bodies as sent (compressed or not) */
};

struct upl;

int upl_new(const struct upl_opts *opts, struct spool *spool, struct upl **ret);
/* Aborts a transfer in flight (its batch stays in the spool and is resent later). */
void upl_free(struct upl *u);
/* epoll fd (curl sockets + an internal timer) for the caller's epoll set. */
int upl_fd(const struct upl *u);
/* Do all pending work: socket IO, finished transfers, timers, start the next batch. */
int upl_dispatch(struct upl *u);
/* Milliseconds until upl_dispatch() wants to run again (-1 = only when upl_fd is readable). */
int upl_timeout_ms(const struct upl *u);
/* Records were appended: send now if a full batch is waiting (otherwise after batch_delay). */
void upl_kick(struct upl *u);
/* Forget the backoff and try at the next dispatch (e.g. operator request). */
void upl_retry_now(struct upl *u);
/*
 * Start no new batch: the one in flight (upl_stats.in_flight) still finishes and is acked or
 * left in the spool. For handing the spool to another uploader (a reload of the agent's
 * [collector] settings) without a batch the collector may have committed being aborted.
 */
void upl_hold(struct upl *u);
/* The counters of from (batches, records, retries, bytes, ...) and its last success added to
 * to's: the totals go on across such a hand-over, as a counter must. */
void upl_carry_stats(struct upl *to, const struct upl *from);
void upl_get_stats(const struct upl *u, struct upl_stats *ret);
