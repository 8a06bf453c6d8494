/* SPDX-License-Identifier: MIT */
/* GET /metrics: request counts, record counters, the POST latency histogram (server_impl.h). */
#include <inttypes.h>

#include "collector/server_impl.h"
#include "corral_version.h"

static const unsigned metric_codes[] = {200, 400, 401, 403, 404, 405, 413, 422, 500, 503};

static const double latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
					0.1,   0.25,   0.5,   1,    2.5,   10};

struct post_work;

void srv_count_code(struct coll_server *s, unsigned code)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(metric_codes); i++)
		if (metric_codes[i] == code)
			break;
	atomic_fetch_add(&s->req_by_code[i], 1);
}

double srv_elapsed_s(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

void srv_observe_latency(struct coll_server *s, double secs)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(latency_bounds); i++)
		if (secs <= latency_bounds[i])
			break;
	atomic_fetch_add(&s->lat_bucket[i], 1);
	atomic_fetch_add(&s->lat_sum_us, (uint64_t)(secs * 1e6));
	atomic_fetch_add(&s->batches, 1);
}

/* The audit chain check, the database pool and the folder. */
static void write_store_metrics(struct coll_server *s, FILE *f)
{
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
		"# HELP corral_collector_alive_statements_refused_total node.sample tasks_alive "
		"statements not applied: their count or digest is not that of the open rows they "
		"name (the rows stay; the node's next listing or samples move them).\n"
		"# TYPE corral_collector_alive_statements_refused_total counter\n"
		"corral_collector_alive_statements_refused_total %" PRIuFAST64 "\n"
		"# HELP corral_collector_ingest_inline_total Batches stored by the server thread "
		"that received them, every ingest worker being busy with a full queue.\n"
		"# TYPE corral_collector_ingest_inline_total counter\n"
		"corral_collector_ingest_inline_total %" PRIuFAST64 "\n"
		"# HELP corral_collector_ingest_alone_total Batches stored by the server thread "
		"that received them, their connection being its only one (the others go to an "
		"ingest worker, the connection suspended meanwhile).\n"
		"# TYPE corral_collector_ingest_alone_total counter\n"
		"corral_collector_ingest_alone_total %" PRIuFAST64 "\n"
		"# HELP corral_collector_shed_total POSTs answered 503 with Retry-After because "
		"max_queued batches were waiting for the database.\n"
		"# TYPE corral_collector_shed_total counter\n"
		"corral_collector_shed_total %" PRIuFAST64 "\n",
		s->npool, atomic_load(&s->pool_waits), atomic_load(&s->groups),
		atomic_load(&s->sync_errors), atomic_load(&s->alive_refused),
		atomic_load(&s->inline_batches), atomic_load(&s->alone_batches),
		atomic_load(&s->shed));
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
}

enum MHD_Result srv_handle_metrics(struct coll_server *s, struct MHD_Connection *c)
{
	char *body = NULL;
	size_t len = 0;
	uint64_t cum = 0;
	FILE *f = open_memstream(&body, &len);

	if (!f)
		return srv_reply_error(s, c, 500, "out of memory");
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
	fputs("# HELP corral_collector_requests_refused_total Requests refused (401, 403) by "
	      "reason; each is logged, at most 5 lines per 10 s.\n"
	      "# TYPE corral_collector_requests_refused_total counter\n",
	      f);
	for (int i = 0; i < _SRV_REFUSE_MAX; i++)
		fprintf(f,
			"corral_collector_requests_refused_total{reason=\"%s\"} %" PRIuFAST64 "\n",
			srv_refusal_name((enum srv_refusal)i), atomic_load(&s->refused[i]));
	fprintf(f,
		"# HELP corral_build_info The program's version.\n"
		"# TYPE corral_build_info gauge\n"
		"corral_build_info{program=\"corral-collector\",version=\"%s\"} 1\n",
		CORRAL_VERSION);
	write_store_metrics(s, f);
	if (fclose(f) != 0) {
		free(body);
		return MHD_NO;
	}
	return srv_reply(s, c, 200, "text/plain; version=0.0.4", body, len);
}
