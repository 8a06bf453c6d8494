/* SPDX-License-Identifier: MIT */
/*
 * The billing split: what each record adds to the rollups (coll_record_sums), a task's usage
 * spread over the hours it ran and summed per day and month (record_span, coll_deltas_build),
 * and the merge of those deltas before they are applied or queued.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector/store.h"
#include "common/clock.h"
#include "common/macro.h"

/* A delta's key columns (here, beside the hot loops that compare and hash them). */
static const char **delta_key_slot(struct coll_delta *d, enum coll_key k)
{
	switch (k) {
	case COLL_KEY_ACCOUNT:
		return &d->account;
	case COLL_KEY_USER:
		return &d->user;
	case COLL_KEY_LABEL_KEY:
		return &d->label_key;
	case COLL_KEY_LABEL_VALUE:
		return &d->label_value;
	case COLL_KEY_JOB:
		return &d->job;
	case COLL_KEY_NODE:
		return &d->node;
	case COLL_KEY_TASK_ID:
		return &d->task_id;
	default:
		return NULL;
	}
}

const char *coll_delta_key(const struct coll_delta *d, enum coll_key k)
{
	const char **slot = delta_key_slot((struct coll_delta *)d, k);

	return slot ? *slot : "";
}

void coll_delta_set_key(struct coll_delta *d, enum coll_key k, const char *v)
{
	const char **slot = delta_key_slot(d, k);

	if (slot)
		*slot = v;
}

void coll_record_sums(const struct acct_record *r, double v[_COLL_SUM_MAX])
{
	double wall = (double)r->usage.wall_ns / 1e9;
	double cpu = (double)(r->usage.cpu_user_ns + r->usage.cpu_system_ns) / 1e9;
	double cpu_req = r->request.cpus * wall;
	double mem_req = (double)r->request.memory_bytes * wall;
	double gpu_req = (double)r->request.gpus * wall;

	memset(v, 0, sizeof(double) * _COLL_SUM_MAX);
	v[COLL_SUM_TASKS] = 1;
	v[COLL_SUM_FAILED_TASKS] =
	    !(r->exit.status == ACCT_EXIT_EXITED && r->exit.code == 0) ? 1 : 0;
	v[COLL_SUM_WALL_S] = wall;
	v[COLL_SUM_CPU_S] = cpu;
	v[COLL_SUM_CPU_REQ_CORE_S] = cpu_req;
	v[COLL_SUM_CPU_CHARGED_CORE_S] = MAX(cpu_req, cpu);
	v[COLL_SUM_MEM_BYTE_S] = r->usage.memory_byte_seconds;
	v[COLL_SUM_MEM_REQ_BYTE_S] = mem_req;
	v[COLL_SUM_MEM_CHARGED_BYTE_S] = MAX(mem_req, r->usage.memory_byte_seconds);
	v[COLL_SUM_GPU_S] = r->usage.gpu_seconds;
	v[COLL_SUM_GPU_REQ_S] = gpu_req;
	v[COLL_SUM_GPU_CHARGED_S] = MAX(gpu_req, r->usage.gpu_seconds);
	v[COLL_SUM_IO_READ_BYTES] = (double)r->usage.io_read_bytes;
	v[COLL_SUM_IO_WRITE_BYTES] = (double)r->usage.io_write_bytes;
	v[COLL_SUM_NET_RX_BYTES] = (double)r->usage.net_rx_bytes;
	v[COLL_SUM_NET_TX_BYTES] = (double)r->usage.net_tx_bytes;
	v[COLL_SUM_OOM_KILLED] = r->exit.status == ACCT_EXIT_OOM_KILLED;
	v[COLL_SUM_TIME_LIMIT] = r->exit.status == ACCT_EXIT_TIME_LIMIT;
	v[COLL_SUM_CPU_TIME_LIMIT] = r->exit.status == ACCT_EXIT_CPU_TIME_LIMIT;
	v[COLL_SUM_GPU_MEMORY_LIMIT] = r->exit.status == ACCT_EXIT_GPU_MEMORY_LIMIT;
	v[COLL_SUM_NO_REQUEST_TASKS] = !(r->request.cpus > 0) || r->request.memory_bytes == 0;
	/* energy: the measured parts (a part not measured has no figure to add) */
	v[COLL_SUM_ENERGY_UNMEASURED_TASKS] = !r->usage.energy.present;
	for (int p = 0; p < _ACCT_ENERGY_MAX && r->usage.energy.present; p++) {
		if (r->usage.energy.src[p] == ACCT_ESRC_NOT_MEASURED)
			v[COLL_SUM_ENERGY_UNMEASURED_TASKS] = 1;
		else
			v[COLL_SUM_ENERGY_CPU_J + p] = r->usage.energy.j[p];
	}
}

void coll_node_sums(const struct acct_record *r, double v[_COLL_SUM_MAX])
{
	const struct acct_node_sample *ns = r->ns;
	double p = (double)(ns ? ns->period_ns : 0) / 1e9;

	memset(v, 0, sizeof(double) * _COLL_SUM_MAX);
	if (!ns)
		return;
	v[COLL_SUM_TASKS] = 1;
	v[COLL_SUM_WALL_S] = p;
	v[COLL_SUM_CPU_S] = (double)ns->used_cpu_ns / 1e9;
	v[COLL_SUM_CPU_REQ_CORE_S] = ns->alloc_cpus * p;
	v[COLL_SUM_CPU_CHARGED_CORE_S] = ns->cap_cpus * p;
	v[COLL_SUM_MEM_BYTE_S] = (double)ns->used_memory_bytes * p;
	v[COLL_SUM_MEM_REQ_BYTE_S] = (double)ns->alloc_memory_bytes * p;
	v[COLL_SUM_MEM_CHARGED_BYTE_S] = (double)ns->cap_memory_bytes * p;
	v[COLL_SUM_GPU_REQ_S] = (double)ns->alloc_gpus * p;
	v[COLL_SUM_GPU_CHARGED_S] = (double)ns->cap_gpus * p;
	v[COLL_SUM_ENERGY_CPU_J] = ns->has_unattributed ? ns->unattributed_package_j : 0;
	v[COLL_SUM_ENERGY_DRAM_J] = ns->has_unattributed ? ns->unattributed_dram_j : 0;
	v[COLL_SUM_ENERGY_GPU_J] = ns->has_gpu_energy ? ns->energy_gpu_j : 0;
	/* node meaning (store.h COLL_ROLLUP_NODE_DAY): the GPUs' unattributed energy */
	v[COLL_SUM_GPU_S] =
	    ns->has_gpu_energy && ns->has_unattributed_gpu ? ns->unattributed_gpu_j : 0;
}

/* Deltas are ordered by table, then (OPEN) set before touch before del, bucket and the table's key
 * columns in primary key order: the order in which the backends take their row locks. */
static int delta_cmp(const void *a, const void *b)
{
	const struct coll_delta *x = a, *y = b;
	const struct coll_rollup_def *def;
	int c;

	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	if (x->del != y->del)
		return x->del ? 1 : -1;
	if (x->touch != y->touch)
		return x->touch ? 1 : -1;
	if (x->touch && !x->alive != !y->alive) /* a node's statement after the listed tasks */
		return x->alive ? 1 : -1;
	if ((c = strcmp(x->bucket, y->bucket)))
		return c;
	def = coll_rollup_def(x->table);
	for (size_t k = 0; k < def->n_keys; k++)
		if ((c = strcmp(coll_delta_key(x, def->keys[k]), coll_delta_key(y, def->keys[k]))))
			return c;
	return 0;
}

struct delta_slot {
	bool used;
	uint64_t hash;
	size_t idx;
};

static uint64_t fnv1a(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return (h ^ 0xff) * 0x100000001b3ULL; /* separator: "ab","c" differs from "a","bc" */
}

/*
 * The key strings' hashes by their address: a record's account, user, job, node and labels
 * are the same strings in each of its deltas (and "" in most columns), so each is hashed once
 * per merge instead of once per delta and column. The strings do not change during a merge.
 */
#define STR_HASH_SLOTS 256
struct str_hashes {
	const char *s[STR_HASH_SLOTS];
	uint64_t h[STR_HASH_SLOTS];
};

static uint64_t str_hash(struct str_hashes *c, const char *s)
{
	uintptr_t a = (uintptr_t)s;
	size_t i = (a >> 4 ^ a >> 12) & (STR_HASH_SLOTS - 1);

	if (c->s[i] != s) {
		c->s[i] = s;
		c->h[i] = fnv1a(0xcbf29ce484222325ULL, s);
	}
	return c->h[i];
}

/* Hash of exactly what delta_cmp compares. */
static uint64_t delta_hash(struct str_hashes *c, const struct coll_delta *d)
{
	const struct coll_rollup_def *def = coll_rollup_def(d->table);
	uint64_t h =
	    0xcbf29ce484222325ULL ^ ((uint64_t)d->table << 2 | (uint64_t)d->del << 1 | d->touch);

	h = fnv1a(h, d->bucket);
	for (size_t k = 0; k < def->n_keys; k++)
		h = (h ^ str_hash(c, coll_delta_key(d, def->keys[k]))) * 0x9e3779b97f4a7c15ULL;
	return h;
}

static void merge_into(struct coll_delta *prev, const struct coll_delta *d)
{
	if (prev->table != COLL_ROLLUP_OPEN)
		for (int s = 0; s < _COLL_SUM_MAX; s++)
			prev->v[s] += d->v[s];
	else if (!prev->del && d->sample_ns > prev->sample_ns)
		*prev = *d; /* the newest sample of a task */
}

/*
 * d[0..n) with equal keys merged (sums added, the newest sample of a task kept), sorted: the
 * fixed order in which the backends take row locks; the merged count. Merging goes through a
 * hash table first (a batch has many deltas per key), so only the distinct ones are sorted.
 */
size_t coll_deltas_merge(struct coll_delta *d, size_t n)
{
	_cleanup_free_ struct delta_slot *slot = NULL;
	_cleanup_free_ struct str_hashes *sh = NULL;
	size_t nslots = 16, o = 0;

	if (n == 0)
		return 0;
	while (nslots < 2 * n)
		nslots *= 2;
	slot = calloc(nslots, sizeof(*slot));
	sh = calloc(1, sizeof(*sh));
	if (!slot || !sh) { /* no memory for the table: merge by sorting alone */
		qsort(d, n, sizeof(*d), delta_cmp);
		for (size_t i = 0; i < n; i++) {
			if (o > 0 && delta_cmp(&d[o - 1], &d[i]) == 0) {
				merge_into(&d[o - 1], &d[i]);
				continue;
			}
			if (o != i)
				d[o] = d[i];
			o++;
		}
		return o;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t h = delta_hash(sh, &d[i]);
		size_t k = (size_t)h & (nslots - 1);

		for (; slot[k].used; k = (k + 1) & (nslots - 1))
			if (slot[k].hash == h && delta_cmp(&d[slot[k].idx], &d[i]) == 0)
				break;
		if (slot[k].used) {
			merge_into(&d[slot[k].idx], &d[i]);
			continue;
		}
		slot[k] = (struct delta_slot){.used = true, .hash = h, .idx = o};
		if (o != i)
			d[o] = d[i];
		o++;
	}
	qsort(d, o, sizeof(*d), delta_cmp);
	return o;
}

size_t coll_deltas_merge_runs(const struct coll_deltas *runs, size_t k, struct coll_delta *out)
{
	size_t pos[COLL_DELTA_RUNS_MAX] = {0}, o = 0;

	if (k > COLL_DELTA_RUNS_MAX)
		return SIZE_MAX;
	for (;;) {
		const struct coll_delta *min = NULL;
		size_t mi = 0;

		for (size_t i = 0; i < k; i++) {
			const struct coll_delta *h = pos[i] < runs[i].n ? &runs[i].d[pos[i]] : NULL;

			if (h && (!min || delta_cmp(h, min) < 0)) {
				min = h;
				mi = i;
			}
		}
		if (!min)
			return o;
		pos[mi]++;
		if (o > 0 && delta_cmp(&out[o - 1], min) == 0)
			merge_into(&out[o - 1], min);
		else
			out[o++] = *min;
	}
}

#define HOUR_NS (3600ULL * NSEC_PER_SEC)

/* The hours a record spreads over: [time - duration, time], the duration (a task.end's wall
 * time, a node.sample's period) clipped to COLL_SPREAD_MAX_S, the end's hour being the hour of
 * its last running instant (end - 1 ns), so a task ending at 13:00:00 belongs to 12:00. */
struct span {
	uint64_t start, end, h0, h1;
};

static void record_span(const struct acct_record *r, struct span *sp)
{
	uint64_t dur = r->type == ACCT_NODE_SAMPLE ? r->ns->period_ns : r->usage.wall_ns;

	dur = MIN(dur, COLL_SPREAD_MAX_S * NSEC_PER_SEC);
	sp->end = r->time_ns;
	sp->start = sp->end - MIN(dur, sp->end);
	sp->h0 = sp->start / HOUR_NS;
	sp->h1 = (sp->end > sp->start ? sp->end - 1 : sp->end) / HOUR_NS;
	if (sp->h0 > sp->h1)
		sp->h0 = sp->h1;
}

bool coll_day_is_month_end(const char *day)
{
	static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int y, m, d;

	/* YYYY-MM-DD by hand: this runs for every day row of ingest and of some reports */
	for (int i = 0; i < 10; i++)
		if (i == 4 || i == 7 ? day[i] != '-' : (unsigned)(day[i] - '0') > 9)
			return false; /* also at a NUL: the loop stops there */
	y = (day[0] - '0') * 1000 + (day[1] - '0') * 100 + (day[2] - '0') * 10 + (day[3] - '0');
	m = (day[5] - '0') * 10 + (day[6] - '0');
	d = (day[8] - '0') * 10 + (day[9] - '0');
	if (m < 1 || m > 12)
		return false;
	return d == mdays[m - 1] + (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0));
}

void coll_day_of_hour(uint64_t hour, char out[16])
{
	/* days to the civil date (H. Hinnant's days_from_civil inverse; eras of 400 years from
	 * 0000-03-01), digits written here: gmtime_r and strftime were ~900 instructions of every
	 * task.end's deltas */
	const uint64_t z = hour / 24 + 719468, era = z / 146097;
	const unsigned doe = (unsigned)(z - era * 146097);
	const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
	const unsigned d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
	const unsigned y = (unsigned)(yoe + era * 400) + (m <= 2); /* 1970..2554: four digits */

	out[0] = (char)('0' + y / 1000 % 10);
	out[1] = (char)('0' + y / 100 % 10);
	out[2] = (char)('0' + y / 10 % 10);
	out[3] = (char)('0' + y % 10);
	out[4] = '-';
	out[5] = (char)('0' + m / 10);
	out[6] = (char)('0' + m % 10);
	out[7] = '-';
	out[8] = (char)('0' + d / 10);
	out[9] = (char)('0' + d % 10);
	out[10] = 0;
}

/* x's bucket (zeroed by delta_push) set to b, cut to fit as snprintf would: a copy, not a
 * format call per delta (a few percent of the collector's ingest instructions). */
static void bucket_set(struct coll_delta *x, const char *b)
{
	memcpy(x->bucket, b, strnlen(b, sizeof(x->bucket) - 1));
}

static struct coll_delta *delta_push(struct coll_delta *d, size_t *nd, enum coll_rollup_table t,
				     const struct acct_record *r)
{
	struct coll_delta *x = &d[(*nd)++];

	memset(x, 0, sizeof(*x));
	x->table = t;
	x->account = r->task.account ?: "";
	x->user = r->task.user ?: "";
	x->label_key = x->label_value = x->job = x->node = x->task_id = "";
	return x;
}

/* Day-level deltas of one task.end for one day: day, job_day, and per label one label_day and
 * one job_label_day. (The job_month deltas are made from the batch's merged job_day ones.) */
static void push_day(struct coll_delta *d, size_t *nd, const struct acct_record *r, const char *day,
		     const double v[_COLL_SUM_MAX])
{
	for (size_t k = 0; k < 2 + 2 * r->task.n_labels; k++) {
		const size_t l = k >= 2 ? (k - 2) / 2 : 0;
		const bool per_job = k == 1 || (k >= 2 && k % 2 == 1);
		struct coll_delta *x = delta_push(d, nd,
						  k == 0    ? COLL_ROLLUP_DAY
						  : k == 1  ? COLL_ROLLUP_JOB_DAY
						  : per_job ? COLL_ROLLUP_JOB_LABEL_DAY
							    : COLL_ROLLUP_LABEL_DAY,
						  r);

		bucket_set(x, day);
		if (per_job) {
			x->job = r->task.job ?: "";
			x->node = r->node ?: "";
		}
		if (k >= 2) {
			x->label_key = r->task.labels[l].key;
			x->label_value = r->task.labels[l].value ?: "";
		}
		memcpy(x->v, v, sizeof(x->v));
	}
}

/*
 * Spreads a record's sums v over the hours of its span (record_span) in proportion (counts to
 * the hour of its last instant) and hands each day's sums to fn, with whether that day is the
 * span's last: a day's share is the sum of its hours' shares.
 */
typedef void (*day_fn)(struct coll_delta *d, size_t *nd, const struct acct_record *r,
		       const char *bucket, double day[_COLL_SUM_MAX], bool last);
static void spread_days(struct coll_delta *d, size_t *nd, const struct acct_record *r,
			const double v[_COLL_SUM_MAX], day_fn fn)
{
	double day[_COLL_SUM_MAX] = {0};
	char bucket[16];
	struct span sp;

	record_span(r, &sp);
	for (uint64_t h = sp.h0; h <= sp.h1; h++) {
		const uint64_t hs = h * HOUR_NS, he = hs + HOUR_NS;
		double frac = 1;

		if (sp.end > sp.start)
			frac = (double)(MIN(sp.end, he) - MAX(sp.start, hs)) /
			       (double)(sp.end - sp.start);
		for (int s = 0; s < _COLL_SUM_MAX; s++)
			day[s] += COLL_SUMS_COUNT >> s & 1 ? (h == sp.h1 ? v[s] : 0) : v[s] * frac;
		if (h == sp.h1 || (h + 1) % 24 == 0) {
			coll_day_of_hour(h, bucket);
			fn(d, nd, r, bucket, day, h == sp.h1);
			memset(day, 0, sizeof(day));
		}
	}
}

/* A task's day: the task goes on into the next unless it is the span's last. */
static void task_day(struct coll_delta *d, size_t *nd, const struct acct_record *r,
		     const char *bucket, double day[_COLL_SUM_MAX], bool last)
{
	day[COLL_SUM_CARRIED_TASKS] = !last;
	push_day(d, nd, r, bucket, day);
}

/* A node.sample's day: one node_day delta a day. */
static void node_day(struct coll_delta *d, size_t *nd, const struct acct_record *r,
		     const char *bucket, double day[_COLL_SUM_MAX], bool last)
{
	struct coll_delta *x = delta_push(d, nd, COLL_ROLLUP_NODE_DAY, r);

	bucket_set(x, bucket);
	x->account = x->user = "";
	x->node = r->node ?: "";
	x->label_key = COLL_NODE_CLASS_KEY;
	x->label_value = r->ns->price_class ?: "";
	memcpy(x->v, day, sizeof(x->v));
}

/* A node.sample's running tasks unchanged since their last sample: touches of their open
 * rows, to its time. */
static void push_unchanged(struct coll_delta *d, size_t *nd, const struct acct_record *r)
{
	for (size_t i = 0; i < r->ns->n_unchanged; i++) {
		const struct acct_task_unchanged *u = &r->ns->unchanged[i];
		struct coll_delta *x = delta_push(d, nd, COLL_ROLLUP_OPEN, r);
		uint64_t age = u->age_ms > r->time_ns / 1000000 ? r->time_ns : u->age_ms * 1000000;

		x->touch = true;
		x->account = x->user = x->job = "";
		x->node = r->node ?: "";
		x->task_id = u->id;
		x->sample_ns = r->time_ns;
		x->base_ns = r->time_ns - age;
		x->rss_bytes = u->rss_bytes;
	}
	if (r->ns->alive.present) {
		struct coll_delta *x = delta_push(d, nd, COLL_ROLLUP_OPEN, r);

		x->touch = true;
		x->account = x->user = x->job = "";
		x->node = r->node ?: "";
		x->task_id = "";
		x->sample_ns = r->time_ns;
		x->base_ns = r->ns->alive.since_ns;
		x->alive = &r->ns->alive;
	}
}

/* A task.end's and a node.sample's sums spread over their days; a task.end also closes its
 * task's open row. */
static void push_spread(struct coll_delta *d, size_t *nd, const struct acct_record *r)
{
	double v[_COLL_SUM_MAX];

	if (r->type == ACCT_NODE_SAMPLE) {
		coll_node_sums(r, v);
		spread_days(d, nd, r, v, node_day);
		push_unchanged(d, nd, r);
		return;
	}
	coll_record_sums(r, v);
	spread_days(d, nd, r, v, task_day);
	if (r->task.id[0]) {
		struct coll_delta *x = delta_push(d, nd, COLL_ROLLUP_OPEN, r);

		x->del = true;
		x->account = x->user = "";
		x->node = r->node ?: "";
		x->task_id = r->task.id;
	}
}

static void push_sample(struct coll_delta *d, size_t *nd, const struct acct_record *r)
{
	struct coll_delta *x = delta_push(d, nd, COLL_ROLLUP_OPEN, r);

	x->job = r->task.job ?: "";
	x->node = r->node ?: "";
	x->task_id = r->task.id;
	x->rec = r;
	x->sample_ns = r->time_ns;
	x->start_ns = r->time_ns - MIN(r->usage.wall_ns, r->time_ns);
	coll_record_sums(r, x->v);
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		if (COLL_SUMS_COUNT >> s & 1)
			x->v[s] = 0;
}

/* Deltas of one record (upper bound, for the allocation; a job_month and a node_alloc_day delta
 * per day counted). */
static size_t record_deltas(const struct acct_record *r)
{
	struct span sp;

	if (r->type == ACCT_TASK_SAMPLE)
		return r->task.id[0] ? 1 : 0;
	if (r->type == ACCT_NODE_SAMPLE) {
		if (!r->ns)
			return 0;
		record_span(r, &sp);
		return (size_t)(sp.h1 / 24 - sp.h0 / 24 + 1) + r->ns->n_unchanged + 1;
	}
	if (r->type != ACCT_TASK_END)
		return 0;
	record_span(r, &sp);
	return (size_t)(sp.h1 / 24 - sp.h0 / 24 + 1) * (4 + 2 * r->task.n_labels) + 1;
}

int coll_deltas_build(const struct coll_item *items, size_t n, struct coll_delta **ret,
		      size_t *ret_n)
{
	_cleanup_free_ struct coll_delta *d = NULL, *m = NULL;
	struct coll_delta *res;
	size_t cap = 0, nd = 0, out, nm, months;

	for (size_t i = 0; i < n; i++)
		if (items[i].is_new)
			cap += record_deltas(items[i].rec);
	if (cap == 0) {
		*ret = NULL;
		*ret_n = 0;
		return 0;
	}
	if (cap > COLL_DELTAS_MAX)
		return -E2BIG;
	d = malloc(cap * sizeof(*d)); /* delta_push zeroes each delta it takes */
	if (!d)
		return -ENOMEM;

	for (size_t i = 0; i < n; i++) {
		const struct acct_record *r = items[i].rec;

		if (!items[i].is_new)
			continue;
		if (r->type == ACCT_TASK_END || (r->type == ACCT_NODE_SAMPLE && r->ns))
			push_spread(d, &nd, r);
		else if (r->type == ACCT_TASK_SAMPLE && r->task.id[0])
			push_sample(d, &nd, r);
	}
	out = coll_deltas_merge(d, nd);
	/* derived from the merged job_day deltas, merged again: job_month (per month) and
	 * node_alloc_day (per day and node) */
	nm = 0;
	for (size_t i = 0; i < out; i++)
		nm += d[i].table == COLL_ROLLUP_JOB_DAY;
	m = malloc(MAX(2 * nm, (size_t)1) * sizeof(*m));
	if (!m)
		return -ENOMEM;
	nm = 0;
	for (size_t i = 0; i < out; i++)
		if (d[i].table == COLL_ROLLUP_JOB_DAY) {
			m[nm] = d[i];
			m[nm].table = COLL_ROLLUP_JOB_MONTH;
			/* the carried count of the month's last day only (not additive) */
			if (!coll_day_is_month_end(d[i].bucket))
				m[nm].v[COLL_SUM_CARRIED_TASKS] = 0;
			m[nm++].bucket[7] = 0;
			m[nm] = d[i];
			m[nm].table = COLL_ROLLUP_NODE_ALLOC_DAY;
			m[nm].account = m[nm].user = m[nm].job = "";
			nm++;
		}
	months = coll_deltas_merge(m, nm);
	/* both runs sorted: merged into one in the backends' order */
	res = malloc(MAX(out + months, (size_t)1) * sizeof(*res));
	if (!res)
		return -ENOMEM;
	for (size_t i = 0, j = 0, o = 0; o < out + months; o++)
		res[o] = j >= months || (i < out && delta_cmp(&d[i], &m[j]) < 0) ? d[i++] : m[j++];
	*ret_n = out + months;
	*ret = TAKE_PTR(res);
	return 0;
}

int coll_deltas_of_new(const struct coll_item *items, size_t n, const struct coll_deltas *pre,
		       const struct coll_delta **ret, size_t *ret_n, struct coll_delta **owned)
{
	bool all_new = true;
	int r;

	*owned = NULL;
	for (size_t i = 0; i < n && all_new; i++)
		all_new = items[i].is_new;
	if (pre && all_new) {
		*ret = pre->d;
		*ret_n = pre->n;
		return 0;
	}
	r = coll_deltas_build(items, n, owned, ret_n);
	*ret = *owned;
	return r;
}

size_t coll_deltas_keep(struct coll_delta *d, size_t n, unsigned mask)
{
	size_t out = 0;

	for (size_t i = 0; i < n; i++)
		if (mask & (1u << d[i].table))
			d[out++] = d[i];
	return out;
}
