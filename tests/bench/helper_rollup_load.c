/* SPDX-License-Identifier: MIT */
/*
 * Bulk rollup generator for tests/bench/report.sh: TASKS task.end records (ACCOUNTS accounts,
 * USERS users each, 2 jobs per user on 4 nodes of the account, over DAYS days from
 * 2026-09-01, in time order) fed in batches through coll_store_rollup_batch(): the rollup
 * maintenance of ingest (coll_deltas_build + the backend's upserts, one transaction per
 * batch) without storing the raw records.
 *   helper_rollup_load --db URI --tasks N --accounts A --days D [--users U] [--batch B]
 * Prints "tasks=N seconds=S rate=R" (records/s of rollup maintenance; generation included).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accounting/record.h"
#include "collector/store.h"
#include "common/macro.h"

#define START_NS (1788220800ULL * NSEC_PER_SEC) /* 2026-09-01T00:00:00Z */

/* "<prefix><i>" for i < n */
static char **names(const char *prefix, size_t n)
{
	char **v = calloc(n, sizeof(*v));

	if (!v)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (asprintf(&v[i], "%s%zu", prefix, i) < 0)
			return NULL;
	return v;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"db", required_argument, NULL, 'd'},
	    {"tasks", required_argument, NULL, 'n'},
	    {"accounts", required_argument, NULL, 'a'},
	    {"days", required_argument, NULL, 'D'},
	    {"users", required_argument, NULL, 'u'},
	    {"batch", required_argument, NULL, 'b'},
	    {},
	};
	const char *db = NULL;
	uint64_t n = 0, na = 1000, nd = 90, nu = 2, batch = 20000;
	struct acct_record *recs;
	struct coll_item *items;
	struct coll_store *s = NULL;
	char **acc, **usr, **job, **node, err[256];
	double t0;
	int c, r;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			db = optarg;
			break;
		case 'n':
			n = strtoull(optarg, NULL, 10);
			break;
		case 'a':
			na = strtoull(optarg, NULL, 10);
			break;
		case 'D':
			nd = strtoull(optarg, NULL, 10);
			break;
		case 'u':
			nu = strtoull(optarg, NULL, 10);
			break;
		case 'b':
			batch = strtoull(optarg, NULL, 10);
			break;
		default:
			return 2;
		}
	}
	if (!db || !n || !na || !nd || !nu || !batch) {
		fprintf(stderr,
			"usage: %s --db URI --tasks N --accounts A --days D [--users U] "
			"[--batch B]\n",
			argv[0]);
		return 2;
	}
	acc = names("acct", na);
	usr = names("user", nu);
	job = names("job", nu * 2);
	node = names("node", 200);
	recs = calloc(batch, sizeof(*recs));
	items = calloc(batch, sizeof(*items));
	if (!acc || !usr || !job || !node || !recs || !items) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	r = coll_store_open(db, 0, &s, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "open %s: %s\n", db, err);
		return 1;
	}
	t0 = now_s();
	for (uint64_t i0 = 0; i0 < n; i0 += batch) {
		size_t m = (size_t)MIN(batch, n - i0);

		for (size_t k = 0; k < m; k++) {
			const uint64_t i = i0 + k, a = i % na, u = (i / na) % nu;
			struct acct_record *x = &recs[k];
			const uint64_t wall = (600 + (i * 7919) % 7200) * NSEC_PER_SEC;

			memset(x, 0, sizeof(*x));
			snprintf(x->record_id, sizeof(x->record_id), "b-%" PRIu64, i);
			snprintf(x->task.id, sizeof(x->task.id), "t%" PRIu64, i);
			x->type = ACCT_TASK_END;
			x->time_ns = START_NS + wall + i * (nd * 86400 * NSEC_PER_SEC / n);
			x->node = node[(a * 7 + (i / 3) % 4) % 200];
			x->task.account = acc[a];
			x->task.user = usr[u];
			x->task.job = job[u * 2 + (i / 7) % 2];
			x->request.cpus = (double)(1 + i % 4);
			x->request.memory_bytes = (uint64_t)(1 + i % 8) << 30;
			x->request.gpus = i % 10 == 0 ? 1 : 0;
			x->usage.wall_ns = wall;
			x->usage.cpu_user_ns = wall / 100 * (i % 350);
			x->usage.memory_byte_seconds =
			    (double)x->request.memory_bytes * (double)wall / 1e9 * 0.6;
			x->usage.gpu_seconds = x->request.gpus * (double)wall / 1e9 * 0.8;
			x->usage.io_read_bytes = i * 7 % 1000000007;
			x->usage.io_write_bytes = i * 13 % 100000007;
			x->usage.net_rx_bytes = i * 3 % 10000007;
			x->exit.status = i % 97 == 0   ? ACCT_EXIT_OOM_KILLED
					 : i % 89 == 0 ? ACCT_EXIT_TIME_LIMIT
						       : ACCT_EXIT_EXITED;
			items[k] = (struct coll_item){.rec = x, .json = "{}", .json_len = 2};
		}
		r = coll_store_rollup_batch(s, items, m);
		if (r < 0) {
			fprintf(stderr, "rollup batch at %" PRIu64 ": %s (%s)\n", i0, strerror(-r),
				coll_store_errmsg(s));
			return 1;
		}
	}
	printf("tasks=%" PRIu64 " seconds=%.3f rate=%.0f\n", n, now_s() - t0,
	       (double)n / (now_s() - t0));
	coll_store_close(s);
	return 0;
}
