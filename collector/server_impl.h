/* SPDX-License-Identifier: MIT */
/*
 * Inside the collector's HTTP server: the state the three parts share. server.c: HTTP
 * (libmicrohttpd), authentication, routing, the GET handlers, start and stop. ingest.c: POST
 * /v1/records (parallel decode, conflicts, the audit chain check, the group-commit pool of
 * store handles, the folder). metrics.c: GET /metrics, request counts and latency.
 */
#pragma once

#include "collector/refuse_log.h"
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "collector/audit_chain.h"
#include "collector/server.h"
#include "common/macro.h"

#define SRV_METRIC_CODES   10 /* srv_count_code's codes (metrics.c) */
#define SRV_LATENCY_BOUNDS 12 /* histogram bounds of the POST latency (metrics.c) */

struct ingest_job;
struct post_work;

/* Why a request was refused (401/403), for corral_collector_requests_refused_total. */
enum srv_refusal {
	SRV_REFUSE_TOKEN,	/* 401: no bearer token, or one the collector does not know */
	SRV_REFUSE_ROLE,	/* 403: a token of the wrong role for the endpoint */
	SRV_REFUSE_NODE,	/* 403: a node token writing another node's records */
	SRV_REFUSE_CERTIFICATE, /* 403: the client certificate does not match the token */
	_SRV_REFUSE_MAX,
};

struct coll_server {
	struct MHD_Daemon *daemon;
	struct coll_store *store;
	const struct coll_tokens *tokens;
	struct coll_tls *tls;			    /* NULL: plain HTTP */
	_Atomic(const struct price_sheet *) prices; /* GET /v1/reports/showback; NULL = off */
	uint64_t max_body;
	size_t max_records;
	atomic_int active; /* requests between first callback and completion */
	atomic_uint_fast64_t req_by_code[SRV_METRIC_CODES + 1]; /* last: other */
	atomic_uint_fast64_t rec_accepted, rec_duplicate, rec_rejected, rec_conflict;
	atomic_uint_fast64_t batches, db_errors;
	atomic_uint_fast64_t lat_bucket[SRV_LATENCY_BOUNDS + 1];
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
	/* node.sample tasks_alive statements refused (count or digest not those of the rows) */
	atomic_uint_fast64_t alive_refused;
	/* Folder: applies the rollup deltas ingest queued (coll_store_fold), on its own handle,
	 * fold_delay_ms after a commit, so the deltas of the batches meanwhile go together; at
	 * once when COLL_FOLD_BACKLOG_RECORDS records have committed since the last fold began
	 * (fold_backlog; fold_soon), so a fast ingest folds while it goes on instead of leaving
	 * one long fold for the end. */
	struct coll_store *fold_store;
	pthread_t fold_thread;
	bool fold_started;
	pthread_mutex_t fold_lock;
	pthread_cond_t fold_cond;
	bool fold_wanted, fold_soon, fold_stop;
	uint64_t fold_backlog;
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
	atomic_uint_fast64_t inline_batches, alone_batches;
	/* Load shedding: a POST that finds max_queued batches waiting for the ingest workers is
	 * answered 503 with Retry-After (every 503 carries one: retry_after_s). */
	size_t max_queued;
	unsigned retry_after_s;
	atomic_uint_fast64_t shed;
	/* refused requests: counted by reason, logged rate-limited (srv_refuse) */
	atomic_uint_fast64_t refused[_SRV_REFUSE_MAX];
	struct refuse_log refuse_log; /* per client (collector/refuse_log.h) */
};

struct request {
	bool started;
	bool too_big;	  /* the body is read and dropped, then answered 413 */
	uint64_t dropped; /* bytes of it dropped so far */
	char *buf;
	size_t len, cap;
	struct post_work *post; /* a batch at an ingest worker (its connection suspended) */
	bool zstd;		/* Content-Encoding: zstd, decoded once received */
};

/* An oversized body is read and dropped up to this many times max_body, so that a client that
 * does not wait for "100 Continue" reads a 413 instead of a reset; beyond, the connection is
 * closed. */
#define TOO_BIG_DRAIN_FACTOR 16

/* server.c */
enum MHD_Result srv_reply(struct coll_server *s, struct MHD_Connection *c, unsigned code,
			  const char *ctype, char *body, size_t len);
_printf_(4, 5) enum MHD_Result srv_reply_error(struct coll_server *s, struct MHD_Connection *c,
					       unsigned code, const char *fmt, ...);
const struct coll_token *srv_authenticate(struct coll_server *s, struct MHD_Connection *c);
/* Answers code (401 or 403) with the message, counts the refusal by why and logs it (the
 * client's address, the token's role and name, the request), rate-limited. */
const char *srv_refusal_name(enum srv_refusal why);
_printf_(6, 7) enum MHD_Result
    srv_refuse(struct coll_server *s, struct MHD_Connection *c, unsigned code, enum srv_refusal why,
	       const struct coll_token *tok, const char *fmt, ...);
_printf_(2, 3) void srv_log(struct coll_server *s, const char *fmt, ...);
/* ingest.c */
enum MHD_Result srv_handle_post(struct coll_server *s, struct MHD_Connection *c,
				const struct coll_token *tok, struct request *rq);
enum MHD_Result srv_post_answer(struct coll_server *s, struct MHD_Connection *c,
				struct post_work *pw);
void *srv_fold_main(void *arg);
void *srv_ingest_worker(void *arg);
void srv_stop_workers(struct coll_server *s);
/* MHD_OPTION_NOTIFY_CONNECTION: counts the calling server thread's connections */
void srv_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			   enum MHD_ConnectionNotificationCode toe);
void srv_post_work_free(struct post_work *pw);
/* Whether a POST is to be answered 503 now (the ingest queue is full); counts it. */
bool srv_shed(struct coll_server *s);
/* metrics.c */
void srv_count_code(struct coll_server *s, unsigned code);
double srv_elapsed_s(const struct timespec *t0);
void srv_observe_latency(struct coll_server *s, double secs);
enum MHD_Result srv_handle_metrics(struct coll_server *s, struct MHD_Connection *c);
