/* SPDX-License-Identifier: MIT */
/*
 * Load generator for the collector tests and benchmark: realistic task.end records.
 *   helper_ingest_load gen  --node N --count C [--start S] [--prefix P]   NDJSON to stdout
 *   helper_ingest_load csv  ...same...   rows of the records table, CSV (sqlite3 .import)
 *   helper_ingest_load copy ...same...   rows of the records table, PostgreSQL COPY text
 *   helper_ingest_load post --url U --token T --node N --count C [--batch B] [--start S]
 *                           [--connections K]
 *       (TLS: the environment's INGEST_CACERT verifies the collector, INGEST_CERT and
 *       INGEST_KEY are the client certificate and key)
 *       POSTs batches (HTTP/1.1 keep-alive, K connections in parallel, as K nodes uploading
 *       at once), every answer must be 200; prints
 *       "records=N accepted=A duplicate=D seconds=S rate=R connections=K start=T"
 *       (T: CLOCK_REALTIME of the first POST, seconds)
 *   helper_ingest_load keys --count C --window W [--fleet NODES]
 *       counts, without a database, the rollup rows the folds write: the records in windows
 *       of W (what one fold gets), each window's deltas built and merged as ingest and the
 *       fold do (coll_deltas_build, coll_deltas_merge), per table: rows upserted per 1,000
 *       records, rows that exist at the end (the inserts; the rest are updates) and the
 *       upserts per row. Without --fleet the records are ingest.sh's (one node, one job);
 *       with it, a fleet's: NODES nodes each ending one task per 10 s in turn, nodes in
 *       blocks of 16 running one job each for 4 hours, 400 users in 40 accounts, a project
 *       of 3 per account (make_fleet_record).
 * Records and the batch bodies are built before the clock starts, so only ingest is timed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "accounting/record.h"
#include "collector/store.h"
#include "common/macro.h"
#include "common/parse.h"

static const char *const accounts[] = {"physics", "chem", "bio", "astro", "ml", "geo"};
static const char *const users[] = {"alice", "bob",   "carol", "dave", "erin",
				    "frank", "grace", "heidi", "ivan", "judy"};
static const char *const projects[] = {"lattice", "md-sim", "genome", "survey", "llm"};

static int make_record(const char *node, const char *prefix, uint64_t i, struct acct_record *r)
{
	uint64_t base = 1796200000ULL * NSEC_PER_SEC; /* 2026-12 */
	uint64_t wall = (60 + (i * 7919) % 7200) * NSEC_PER_SEC;
	char project[32];
	int e;

	memset(r, 0, sizeof(*r));
	snprintf(r->record_id, sizeof(r->record_id), "%s%s-%012" PRIu64, prefix, node, i);
	r->type = ACCT_TASK_END;
	r->time_ns = base + i * 37 * NSEC_PER_SEC + (i % 1000000) * 1000;
	r->node = strdup(node);
	snprintf(r->task.id, sizeof(r->task.id), "%s-t%" PRIu64, node, i);
	r->task.job = strdup("job-sim");
	r->task.user = strdup(users[i % ARRAY_SIZE(users)]);
	r->task.uid = 1000 + (uint32_t)(i % ARRAY_SIZE(users));
	r->task.account = strdup(accounts[(i / 3) % ARRAY_SIZE(accounts)]);
	if (!r->node || !r->task.job || !r->task.user || !r->task.account)
		return -ENOMEM;
	snprintf(project, sizeof(project), "%s", projects[i % ARRAY_SIZE(projects)]);
	if ((e = acct_task_add_label(&r->task, "project", project)) < 0 ||
	    (e = acct_task_add_label(&r->task, "queue", i % 4 ? "batch" : "short")) < 0)
		return e;
	r->request.cpus = (double)(1 + i % 8);
	r->request.memory_bytes = (1ULL + i % 16) << 30;
	r->request.pids = 512;
	r->request.gpus = i % 10 == 0 ? 1 : 0;
	r->request.time_limit_s = 14400;
	r->usage.wall_ns = wall;
	r->usage.cpu_user_ns = wall / 10 * (1 + i % 8) * 8;
	r->usage.cpu_system_ns = wall / 50;
	r->usage.memory_peak_bytes = (512ULL + (i * 13) % 8192) << 20;
	r->usage.memory_byte_seconds =
	    (double)r->usage.memory_peak_bytes * 0.7 * (double)wall / 1e9;
	r->usage.io_read_bytes = (i * 104729) % (1ULL << 34);
	r->usage.io_write_bytes = (i * 1299709) % (1ULL << 32);
	r->usage.net_rx_bytes = (i * 15485863) % (1ULL << 30);
	r->usage.net_tx_bytes = (i * 32452843) % (1ULL << 28);
	if (r->request.gpus) {
		r->usage.gpu_seconds = (double)wall / 1e9 * 0.9;
		r->usage.gpu_memory_peak_bytes = 30ULL << 30;
		r->usage.gpu_util_avg = 0.83;
	}
	for (int f = 0; f < _ACCT_U_MAX; f++)
		r->sources[f] = f == ACCT_U_WALL_NS	    ? ACCT_SRC_AGENT
				: f >= ACCT_U_GPU_SECONDS   ? (r->request.gpus ? ACCT_SRC_NVML : 0)
				: f <= ACCT_U_CPU_SYSTEM_NS ? ACCT_SRC_EBPF
							    : ACCT_SRC_CGROUP;
	r->exit.status = i % 50 == 0 ? ACCT_EXIT_OOM_KILLED : ACCT_EXIT_EXITED;
	r->exit.code = i % 50 == 0 ? 0 : (i % 17 == 0 ? 1 : 0);
	return 0;
}

/*
 * Record i of a fleet of `nodes` nodes (keys mode): node i % nodes ends a task in round
 * i / nodes (one round = 10 s: every node ends one task per 10 s, in turn); nodes in blocks of
 * 16 run one job per block for 4 hours (1,440 rounds); the job's user is one of 400, in
 * one of 40 accounts; labels project (one of the account's 3) and queue, as ingest.sh's.
 * The usage is make_record's: only the keys and the time differ.
 */
static int make_fleet_record(uint64_t i, uint64_t nodes, struct acct_record *r)
{
	uint64_t n = i % nodes, round = i / nodes, block = n / 16, job, user;
	char node[32], buf[64];
	int e;

	snprintf(node, sizeof(node), "n%05" PRIu64, n);
	e = make_record(node, "", i, r);
	if (e < 0)
		return e;
	job = block * 1000003 + round / 1440;
	user = (job * 2654435761u) % 400;
	r->time_ns = 1796200000ULL * NSEC_PER_SEC + round * 10 * NSEC_PER_SEC +
		     n * 10 * NSEC_PER_SEC / nodes;
	free(r->task.job);
	free(r->task.user);
	free(r->task.account);
	snprintf(buf, sizeof(buf), "job-%" PRIu64, job);
	r->task.job = strdup(buf);
	snprintf(buf, sizeof(buf), "user%03" PRIu64, user);
	r->task.user = strdup(buf);
	snprintf(buf, sizeof(buf), "acct%02" PRIu64, user / 10);
	r->task.account = strdup(buf);
	snprintf(buf, sizeof(buf), "proj-%" PRIu64 "-%" PRIu64, user / 10, job % 3);
	free(r->task.labels[0].value);
	r->task.labels[0].value = strdup(buf);
	free(r->task.labels[1].value);
	r->task.labels[1].value = strdup(job % 4 ? "batch" : "short");
	if (!r->task.job || !r->task.user || !r->task.account || !r->task.labels[0].value ||
	    !r->task.labels[1].value)
		return -ENOMEM;
	return 0;
}

/* A rollup row's identity: the table, the bucket and the table's keys, one string. */
static char *delta_key(const struct coll_delta *d)
{
	char *k = NULL;

	if (asprintf(&k, "%d|%s|%s|%s|%s|%s|%s|%s", d->table, d->bucket, d->account, d->user,
		     d->label_key, d->label_value, d->job, d->node) < 0)
		return NULL;
	return k;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* keys mode: see the head of the file. */
static int do_keys(uint64_t count, uint64_t window, uint64_t fleet)
{
	uint64_t upserts[_COLL_ROLLUP_MAX] = {0}, rows[_COLL_ROLLUP_MAX] = {0};
	size_t nkeys = 0, capkeys = 0;
	char **keys = NULL;
	int rc = 0;

	for (uint64_t w0 = 0; w0 < count && !rc; w0 += window) {
		uint64_t nw = MIN(window, count - w0);
		struct acct_record *recs = calloc(nw, sizeof(*recs));
		struct coll_item *items = calloc(nw, sizeof(*items));
		struct coll_delta *d = NULL;
		size_t nd = 0;

		if (!recs || !items)
			return -ENOMEM;
		for (uint64_t i = 0; i < nw && !rc; i++) {
			rc = fleet ? make_fleet_record(w0 + i, fleet, &recs[i])
				   : make_record("bench", "", w0 + i, &recs[i]);
			items[i].rec = &recs[i];
			items[i].is_new = true;
		}
		if (!rc)
			rc = coll_deltas_build(items, nw, &d, &nd);
		if (!rc)
			nd = coll_deltas_merge(d, nd);
		for (size_t k = 0; k < nd && !rc; k++) {
			if (d[k].table == COLL_ROLLUP_OPEN)
				continue; /* applied at ingest, not by the fold */
			upserts[d[k].table]++;
			if (nkeys == capkeys) {
				capkeys = capkeys ? capkeys * 2 : 4096;
				keys = realloc(keys, capkeys * sizeof(*keys));
				if (!keys)
					return -ENOMEM;
			}
			if (!(keys[nkeys++] = delta_key(&d[k])))
				rc = -ENOMEM;
		}
		free(d);
		for (uint64_t i = 0; i < nw; i++)
			acct_record_clear(&recs[i]);
		free(recs);
		free(items);
	}
	if (rc)
		return rc;
	qsort(keys, nkeys, sizeof(*keys), cmp_str);
	for (size_t k = 0; k < nkeys; k++)
		if (k == 0 || strcmp(keys[k], keys[k - 1]) != 0)
			rows[atoi(keys[k])]++;
	printf("keys: %" PRIu64 " records, %s, folds of %" PRIu64 " records\n", count,
	       fleet ? "fleet" : "ingest.sh's (one node, one job)", window);
	printf("%-22s %16s %12s %16s\n", "table", "upserts/1k rec", "rows at end",
	       "upserts per row");
	uint64_t tu = 0, tr = 0;
	for (int t = 0; t < _COLL_ROLLUP_MAX; t++) {
		if (t == COLL_ROLLUP_OPEN)
			continue;
		tu += upserts[t];
		tr += rows[t];
		printf("%-22s %16.1f %12" PRIu64 " %16.2f\n", coll_rollup_table_name(t),
		       (double)upserts[t] * 1000 / (double)count, rows[t],
		       rows[t] ? (double)upserts[t] / (double)rows[t] : 0);
	}
	printf("%-22s %16.1f %12" PRIu64 " %16.2f\n", "all", (double)tu * 1000 / (double)count, tr,
	       tr ? (double)tu / (double)tr : 0);
	for (size_t k = 0; k < nkeys; k++)
		free(keys[k]);
	free(keys);
	return 0;
}

struct opts {
	const char *url, *token, *node, *prefix;
	uint64_t count, start, batch, connections;
};

static void csv_field(FILE *f, const char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '"')
			fputc('"', f);
		fputc(s[i], f);
	}
	fputc('"', f);
}

static void copy_field(FILE *f, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '\\' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')
			fputc('\\', f);
		fputc(s[i] == '\t' ? 't' : s[i] == '\n' ? 'n' : s[i] == '\r' ? 'r' : s[i], f);
	}
}

/* One row of the records table, in the collector's column order (CSV or COPY text). */
static int emit_row(FILE *f, const struct acct_record *rec, const char *json, size_t len, bool csv)
{
	struct coll_item it = {.rec = rec, .json = json, .json_len = len};
	struct coll_item_scratch sc = {0};
	struct coll_value v[COLL_N_COLS];
	int r = coll_item_values(&it, &sc, v);

	for (int c = 0; c < COLL_N_COLS && r >= 0; c++) {
		if (c)
			fputc(csv ? ',' : '\t', f);
		if (v[c].null)
			fputs(csv ? "" : "\\N", f);
		else if (coll_cols[c].kind == COLL_COL_INT)
			fprintf(f, "%" PRId64, v[c].i);
		else if (coll_cols[c].kind == COLL_COL_REAL)
			fprintf(f, "%.17g", v[c].d);
		else if (csv)
			csv_field(f, v[c].s, v[c].len);
		else
			copy_field(f, v[c].s, v[c].len);
	}
	fputc('\n', f);
	coll_item_scratch_free(&sc);
	return r;
}

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
	FILE *f = ud;

	return fwrite(p, sz, n, f);
}

static uint64_t json_count(const char *body, const char *key)
{
	json_t *o = json_loads(body, 0, NULL);
	uint64_t v = (uint64_t)json_integer_value(json_object_get(o, key));

	json_decref(o);
	return v;
}

struct worker {
	const struct opts *o;
	char **bodies; /* batch k's NDJSON body: bodies[k], blens[k] bytes, k < nb */
	size_t *blens, nb;
	unsigned id;
	uint64_t accepted, dup;
	int rc;
};

/*
 * Every batch's body, built before the clock starts, as the records are: on one 2-core machine
 * the generator shares the CPUs with the collector and its database, and an uploader builds
 * its body on its own node. Batch k holds records k * batch ... (k + 1) * batch - 1.
 */
static int build_bodies(const struct opts *o, char **lines, const size_t *lens, char ***ret,
			size_t **ret_len, size_t *ret_n)
{
	size_t nb = (size_t)((o->count + o->batch - 1) / o->batch);
	char **b = calloc(nb, sizeof(*b));
	size_t *bl = calloc(nb, sizeof(*bl));

	if (!b || !bl) {
		free(b);
		free(bl);
		return -1;
	}
	for (size_t k = 0; k < nb; k++) {
		uint64_t off = k * o->batch, n = MIN(o->batch, o->count - off);
		size_t len = 0;
		char *p;

		for (uint64_t i = off; i < off + n; i++)
			len += lens[i] + 1;
		p = b[k] = malloc(len);
		if (!p)
			return -1; /* (the process exits) */
		for (uint64_t i = off; i < off + n; i++) {
			memcpy(p, lines[i], lens[i]);
			p += lens[i];
			*p++ = '\n';
		}
		bl[k] = len;
	}
	*ret = b;
	*ret_len = bl;
	*ret_n = nb;
	return 0;
}

/* Connection w of o->connections posts batches w, w + C, w + 2C, ... on one keep-alive. */
static void *post_worker(void *p)
{
	struct worker *w = p;
	const struct opts *o = w->o;
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char auth[512];

	if (!c) {
		w->rc = 1;
		return NULL;
	}
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->token);
	h = curl_slist_append(h, auth);
	h = curl_slist_append(h, "Content-Type: application/x-ndjson");
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, o->url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	if (getenv("INGEST_CACERT"))
		curl_easy_setopt(c, CURLOPT_CAINFO, getenv("INGEST_CACERT"));
	if (getenv("INGEST_CERT"))
		curl_easy_setopt(c, CURLOPT_SSLCERT, getenv("INGEST_CERT"));
	if (getenv("INGEST_KEY"))
		curl_easy_setopt(c, CURLOPT_SSLKEY, getenv("INGEST_KEY"));
	for (size_t k = w->id; k < w->nb; k += o->connections) {
		char *resp = NULL;
		size_t rlen = 0;
		FILE *rf = open_memstream(&resp, &rlen);
		long code = 0;
		CURLcode cr;

		if (!rf) {
			w->rc = 1;
			break;
		}
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, w->bodies[k]);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)w->blens[k]);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, rf);
		cr = curl_easy_perform(c);
		fclose(rf);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		if (cr != CURLE_OK || code != 200) {
			fprintf(stderr,
				"helper_ingest_load: batch at %" PRIu64 ": %s, HTTP %ld: %.300s\n",
				(uint64_t)k * o->batch, curl_easy_strerror(cr), code, resp ?: "");
			w->rc = 1;
		} else {
			w->accepted += json_count(resp, "accepted");
			w->dup += json_count(resp, "duplicate");
		}
		free(resp);
		if (w->rc)
			break;
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return NULL;
}

static int do_post(const struct opts *o, char **lines, size_t *lens)
{
	struct worker *w = calloc(o->connections, sizeof(*w));
	pthread_t *th = calloc(o->connections, sizeof(*th));
	uint64_t accepted = 0, dup = 0;
	struct timespec t0, t1, start;
	char **bodies = NULL;
	size_t *blens = NULL, nb = 0;
	double secs;
	int rc = 0;

	if (!w || !th || build_bodies(o, lines, lens, &bodies, &blens, &nb) < 0)
		return 1;
	clock_gettime(CLOCK_REALTIME, &start);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0; i < o->connections; i++) {
		w[i] = (struct worker){.o = o, .bodies = bodies, .blens = blens, .nb = nb, .id = i};
		if (pthread_create(&th[i], NULL, post_worker, &w[i]) != 0)
			return 1;
	}
	for (unsigned i = 0; i < o->connections; i++) {
		pthread_join(th[i], NULL);
		rc |= w[i].rc;
		accepted += w[i].accepted;
		dup += w[i].dup;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("records=%" PRIu64 " accepted=%" PRIu64 " duplicate=%" PRIu64
	       " seconds=%.3f rate=%.0f connections=%" PRIu64 " start=%lld.%09ld\n",
	       o->count, accepted, dup, secs, (double)o->count / secs, o->connections,
	       (long long)start.tv_sec, start.tv_nsec);
	for (size_t k = 0; k < nb; k++)
		free(bodies[k]);
	free(bodies);
	free(blens);
	free(w);
	free(th);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"url", required_argument, NULL, 'u'},
	    {"token", required_argument, NULL, 't'},
	    {"node", required_argument, NULL, 'n'},
	    {"count", required_argument, NULL, 'c'},
	    {"start", required_argument, NULL, 's'},
	    {"batch", required_argument, NULL, 'b'},
	    {"prefix", required_argument, NULL, 'p'},
	    {"connections", required_argument, NULL, 'C'},
	    {"window", required_argument, NULL, 'w'},
	    {"fleet", required_argument, NULL, 'f'},
	    {},
	};
	struct opts o = {
	    .node = "node1", .prefix = "", .count = 1000, .batch = 500, .connections = 1};
	uint64_t window = 0, fleet = 0;
	const char *mode;
	char **lines;
	size_t *lens;
	int c, rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: helper_ingest_load gen|csv|copy|post|keys [options]\n");
		return 2;
	}
	mode = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'u':
			o.url = optarg;
			break;
		case 't':
			o.token = optarg;
			break;
		case 'n':
			o.node = optarg;
			break;
		case 'p':
			o.prefix = optarg;
			break;
		case 'w':
		case 'f':
			if (parse_u64(optarg, c == 'w' ? &window : &fleet) < 0) {
				fprintf(stderr, "helper_ingest_load: bad number '%s'\n", optarg);
				return 2;
			}
			break;
		case 'c':
		case 's':
		case 'C':
		case 'b': {
			uint64_t v;

			if (parse_u64(optarg, &v) < 0 || (c != 's' && v == 0) ||
			    (c == 'C' && v > 64)) {
				fprintf(stderr, "helper_ingest_load: bad number '%s'\n", optarg);
				return 2;
			}
			*(c == 'c'   ? &o.count
			  : c == 's' ? &o.start
			  : c == 'C' ? &o.connections
				     : &o.batch) = v;
			break;
		}
		default:
			return 2;
		}
	}
	if (strcmp(mode, "keys") == 0) {
		int e = do_keys(o.count, window ? window : o.count, fleet);

		if (e < 0)
			fprintf(stderr, "helper_ingest_load keys: %s\n", strerror(-e));
		return e < 0;
	}
	lines = calloc(o.count, sizeof(*lines));
	lens = calloc(o.count, sizeof(*lens));
	if (!lines || !lens)
		return 1;
	for (uint64_t i = 0; i < o.count; i++) {
		struct acct_record r;
		int e = make_record(o.node, o.prefix, o.start + i, &r);

		if (e >= 0)
			e = acct_record_encode(&r, &lines[i], &lens[i]);
		if (e < 0) {
			fprintf(stderr, "helper_ingest_load: record %" PRIu64 ": %s\n", i,
				strerror(-e));
			return 1;
		}
		if (strcmp(mode, "csv") == 0 || strcmp(mode, "copy") == 0)
			rc |= emit_row(stdout, &r, lines[i], lens[i],
				       mode[0] == 'c' && mode[1] == 's') < 0;
		acct_record_clear(&r);
	}
	if (strcmp(mode, "gen") == 0) {
		for (uint64_t i = 0; i < o.count; i++) {
			fwrite(lines[i], 1, lens[i], stdout);
			fputc('\n', stdout);
		}
	} else if (strcmp(mode, "post") == 0) {
		if (!o.url || !o.token) {
			fprintf(stderr,
				"helper_ingest_load post: --url and --token are required\n");
			return 2;
		}
		curl_global_init(CURL_GLOBAL_DEFAULT);
		rc = do_post(&o, lines, lens);
		curl_global_cleanup();
	} else if (strcmp(mode, "csv") != 0 && strcmp(mode, "copy") != 0) {
		fprintf(stderr, "helper_ingest_load: unknown mode '%s'\n", mode);
		return 2;
	}
	for (uint64_t i = 0; i < o.count; i++)
		free(lines[i]);
	free(lines);
	free(lens);
	return rc ? 1 : 0;
}
