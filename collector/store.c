/* SPDX-License-Identifier: MIT */
/* Backend dispatch and the parts both backends share: record columns and rollup deltas. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector/store.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/clock.h"

static const char *const sum_names[_COLL_SUM_MAX] = {
    [COLL_SUM_TASKS] = "tasks",
    [COLL_SUM_FAILED_TASKS] = "failed_tasks",
    [COLL_SUM_WALL_S] = "wall_s",
    [COLL_SUM_CPU_S] = "cpu_s",
    [COLL_SUM_CPU_REQ_CORE_S] = "cpu_req_core_s",
    [COLL_SUM_CPU_CHARGED_CORE_S] = "cpu_charged_core_s",
    [COLL_SUM_MEM_BYTE_S] = "mem_byte_s",
    [COLL_SUM_MEM_REQ_BYTE_S] = "mem_req_byte_s",
    [COLL_SUM_MEM_CHARGED_BYTE_S] = "mem_charged_byte_s",
    [COLL_SUM_GPU_S] = "gpu_s",
    [COLL_SUM_GPU_REQ_S] = "gpu_req_s",
    [COLL_SUM_GPU_CHARGED_S] = "gpu_charged_s",
    [COLL_SUM_IO_READ_BYTES] = "io_read_bytes",
    [COLL_SUM_IO_WRITE_BYTES] = "io_write_bytes",
    [COLL_SUM_NET_RX_BYTES] = "net_rx_bytes",
    [COLL_SUM_NET_TX_BYTES] = "net_tx_bytes",
    [COLL_SUM_OOM_KILLED] = "oom_killed",
    [COLL_SUM_TIME_LIMIT] = "time_limit",
    [COLL_SUM_CPU_TIME_LIMIT] = "cpu_time_limit",
    [COLL_SUM_GPU_MEMORY_LIMIT] = "gpu_memory_limit",
    [COLL_SUM_NO_REQUEST_TASKS] = "no_request_tasks",
    [COLL_SUM_CARRIED_TASKS] = "carried_tasks",
};

const char *coll_sum_name(enum coll_sum s)
{
	return (unsigned)s < _COLL_SUM_MAX ? sum_names[s] : NULL;
}

bool coll_sum_is_count(enum coll_sum s)
{
	switch (s) {
	case COLL_SUM_TASKS:
	case COLL_SUM_FAILED_TASKS:
	case COLL_SUM_OOM_KILLED:
	case COLL_SUM_TIME_LIMIT:
	case COLL_SUM_CPU_TIME_LIMIT:
	case COLL_SUM_GPU_MEMORY_LIMIT:
	case COLL_SUM_NO_REQUEST_TASKS:
	case COLL_SUM_CARRIED_TASKS:
		return true;
	default:
		return false;
	}
}

static const struct coll_rollup_def rollup_defs[_COLL_ROLLUP_MAX] = {
    [COLL_ROLLUP_DAY] = {"rollup_day", 2, {COLL_KEY_ACCOUNT, COLL_KEY_USER}},
    [COLL_ROLLUP_LABEL_DAY] = {"rollup_label_day",
			       4,
			       {COLL_KEY_LABEL_KEY, COLL_KEY_LABEL_VALUE, COLL_KEY_ACCOUNT,
				COLL_KEY_USER}},
    [COLL_ROLLUP_JOB_DAY] = {"rollup_job_day",
			     4,
			     {COLL_KEY_ACCOUNT, COLL_KEY_USER, COLL_KEY_JOB, COLL_KEY_NODE}},
    [COLL_ROLLUP_JOB_LABEL_DAY] = {"rollup_job_label_day",
				   6,
				   {COLL_KEY_LABEL_KEY, COLL_KEY_LABEL_VALUE, COLL_KEY_ACCOUNT,
				    COLL_KEY_USER, COLL_KEY_JOB, COLL_KEY_NODE}},
    [COLL_ROLLUP_JOB_MONTH] = {"rollup_job_month",
			       4,
			       {COLL_KEY_ACCOUNT, COLL_KEY_USER, COLL_KEY_JOB, COLL_KEY_NODE}},
    [COLL_ROLLUP_OPEN] = {"rollup_open", 2, {COLL_KEY_NODE, COLL_KEY_TASK_ID}},
};

const struct coll_rollup_def *coll_rollup_def(enum coll_rollup_table t)
{
	return (unsigned)t < _COLL_ROLLUP_MAX ? &rollup_defs[t] : NULL;
}

const char *coll_rollup_table_name(enum coll_rollup_table t)
{
	return (unsigned)t < _COLL_ROLLUP_MAX ? rollup_defs[t].name : NULL;
}

static const char *const key_columns[_COLL_KEY_MAX] = {
    [COLL_KEY_ACCOUNT] = "account",
    [COLL_KEY_USER] = "\"user\"",
    [COLL_KEY_LABEL_KEY] = "label_key",
    [COLL_KEY_LABEL_VALUE] = "label_value",
    [COLL_KEY_JOB] = "job",
    [COLL_KEY_NODE] = "node",
    [COLL_KEY_TASK_ID] = "task_id",
};

const char *coll_key_column(enum coll_key k)
{
	return (unsigned)k < _COLL_KEY_MAX ? key_columns[k] : NULL;
}

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

static char *put_json_str(char *o, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	*o++ = '"';
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			*o++ = '\\';
			*o++ = (char)*p;
		} else if (*p < 0x20) {
			memcpy(o, "\\u00", 4);
			o[4] = hex[*p >> 4];
			o[5] = hex[*p & 15];
			o += 6;
		} else
			*o++ = (char)*p;
	}
	*o++ = '"';
	return o;
}

/* Compact, keys sorted by strcmp (what jansson's JSON_SORT_KEYS printed before), written
 * directly: this runs for every ingested record. */
char *coll_labels_json(const struct acct_record *r)
{
	const struct acct_label *l = r->task.labels;
	size_t n = MIN(r->task.n_labels, (size_t)ACCT_LABELS_MAX), idx[ACCT_LABELS_MAX];
	size_t cap = 3;
	char *buf, *o;

	for (size_t i = 0; i < n; i++) {
		size_t j = i;

		cap += 6 * (strlen(l[i].key) + strlen(l[i].value ?: "")) + 6;
		for (; j > 0 && strcmp(l[idx[j - 1]].key, l[i].key) > 0; j--)
			idx[j] = idx[j - 1];
		idx[j] = i;
	}
	buf = malloc(cap);
	if (!buf)
		return NULL;
	o = buf;
	*o++ = '{';
	for (size_t i = 0; i < n; i++) {
		if (i)
			*o++ = ',';
		o = put_json_str(o, l[idx[i]].key);
		*o++ = ':';
		o = put_json_str(o, l[idx[i]].value ?: "");
	}
	*o++ = '}';
	*o = 0;
	return buf;
}

const struct coll_col coll_cols[COLL_N_COLS] = {
    {"record_id", COLL_COL_TEXT},
    {"type", COLL_COL_TEXT},
    {"time", COLL_COL_TIME},
    {"time_ns", COLL_COL_INT},
    {"node", COLL_COL_TEXT},
    {"task_id", COLL_COL_TEXT},
    {"job", COLL_COL_TEXT},
    {"\"user\"", COLL_COL_TEXT},
    {"account", COLL_COL_TEXT},
    {"labels", COLL_COL_JSONB},
    {"req_cpus", COLL_COL_REAL},
    {"req_memory_bytes", COLL_COL_INT},
    {"req_gpus", COLL_COL_INT},
    {"req_time_limit_s", COLL_COL_INT},
    {"wall_ns", COLL_COL_INT},
    {"cpu_user_ns", COLL_COL_INT},
    {"cpu_system_ns", COLL_COL_INT},
    {"memory_peak_bytes", COLL_COL_INT},
    {"memory_byte_seconds", COLL_COL_REAL},
    {"io_read_bytes", COLL_COL_INT},
    {"io_write_bytes", COLL_COL_INT},
    {"net_rx_bytes", COLL_COL_INT},
    {"net_tx_bytes", COLL_COL_INT},
    {"gpu_seconds", COLL_COL_REAL},
    {"exit_status", COLL_COL_TEXT},
    {"body", COLL_COL_JSON},
};

/* SQL integers are signed 64-bit: clamp the (absurd) values above INT64_MAX. */
static int64_t clamp_u64(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

static void set_text(struct coll_value *v, const char *s)
{
	if (!s) {
		v->null = true;
		return;
	}
	v->s = s;
	v->len = strlen(s);
}

static void set_int(struct coll_value *v, uint64_t x)
{
	v->i = clamp_u64(x);
}

int coll_item_values(const struct coll_item *it, struct coll_item_scratch *sc,
		     struct coll_value vals[COLL_N_COLS])
{
	const struct acct_record *r = it->rec;
	int k = 0;

	memset(vals, 0, sizeof(struct coll_value) * COLL_N_COLS);
	format_rfc3339_us(r->time_ns, sc->time, sizeof(sc->time));
	sc->labels = coll_labels_json(r);
	if (!sc->labels)
		return -ENOMEM;

	set_text(&vals[k++], r->record_id);
	set_text(&vals[k++], acct_type_to_string(r->type));
	set_text(&vals[k++], sc->time);
	set_int(&vals[k++], r->time_ns);
	set_text(&vals[k++], r->node);
	set_text(&vals[k++], r->task.id[0] ? r->task.id : NULL);
	set_text(&vals[k++], r->task.job);
	set_text(&vals[k++], r->task.user);
	set_text(&vals[k++], r->task.account);
	set_text(&vals[k++], sc->labels);
	vals[k++].d = r->request.cpus;
	set_int(&vals[k++], r->request.memory_bytes);
	set_int(&vals[k++], r->request.gpus);
	set_int(&vals[k++], r->request.time_limit_s);
	set_int(&vals[k++], r->usage.wall_ns);
	set_int(&vals[k++], r->usage.cpu_user_ns);
	set_int(&vals[k++], r->usage.cpu_system_ns);
	set_int(&vals[k++], r->usage.memory_peak_bytes);
	vals[k++].d = r->usage.memory_byte_seconds;
	set_int(&vals[k++], r->usage.io_read_bytes);
	set_int(&vals[k++], r->usage.io_write_bytes);
	set_int(&vals[k++], r->usage.net_rx_bytes);
	set_int(&vals[k++], r->usage.net_tx_bytes);
	vals[k++].d = r->usage.gpu_seconds;
	if (r->exit.status != ACCT_EXIT_NONE)
		set_text(&vals[k++], acct_exit_status_to_string(r->exit.status));
	else
		vals[k++].null = true;
	vals[k].s = it->json;
	vals[k++].len = it->json_len;
	return 0;
}

void coll_item_scratch_free(struct coll_item_scratch *sc)
{
	free(sc->labels);
	sc->labels = NULL;
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
}

/* Deltas are ordered by table, then (OPEN) set before del, bucket and the table's key columns
 * in primary key order: the order in which the backends take their row locks. */
static int delta_cmp(const void *a, const void *b)
{
	const struct coll_delta *x = a, *y = b;
	const struct coll_rollup_def *def;
	int c;

	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	if (x->del != y->del)
		return x->del ? 1 : -1;
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

/* Hash of exactly what delta_cmp compares. */
static uint64_t delta_hash(const struct coll_delta *d)
{
	const struct coll_rollup_def *def = coll_rollup_def(d->table);
	uint64_t h = 0xcbf29ce484222325ULL ^ ((uint64_t)d->table << 1 | d->del);

	h = fnv1a(h, d->bucket);
	for (size_t k = 0; k < def->n_keys; k++)
		h = fnv1a(h, coll_delta_key(d, def->keys[k]));
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
	size_t nslots = 16, o = 0;

	if (n == 0)
		return 0;
	while (nslots < 2 * n)
		nslots *= 2;
	slot = calloc(nslots, sizeof(*slot));
	if (!slot) { /* no memory for the table: merge by sorting alone */
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
		uint64_t h = delta_hash(&d[i]);
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

/* The hours a task.end spreads over: [start, end] with the end's hour being the hour of its
 * last running instant (end - 1 ns), so a task ending at 13:00:00 belongs to 12:00. */
struct span {
	uint64_t start, end, h0, h1;
};

static void task_span(const struct acct_record *r, struct span *sp)
{
	uint64_t wall = MIN(r->usage.wall_ns, COLL_SPREAD_MAX_S * NSEC_PER_SEC);

	sp->end = r->time_ns;
	sp->start = sp->end - MIN(wall, sp->end);
	sp->h0 = sp->start / HOUR_NS;
	sp->h1 = (sp->end > sp->start ? sp->end - 1 : sp->end) / HOUR_NS;
	if (sp->h0 > sp->h1)
		sp->h0 = sp->h1;
}

bool coll_day_is_month_end(const char *day)
{
	static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int y, m, dd;

	if (sscanf(day, "%4d-%2d-%2d", &y, &m, &dd) != 3 || m < 1 || m > 12)
		return false;
	return dd == mdays[m - 1] + (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0));
}

static void day_of(uint64_t hour, char out[16])
{
	time_t secs = (time_t)(hour * 3600);
	struct tm tm;

	gmtime_r(&secs, &tm);
	strftime(out, 16, "%Y-%m-%d", &tm);
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

		snprintf(x->bucket, sizeof(x->bucket), "%s", day);
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

static void push_task_end(struct coll_delta *d, size_t *nd, const struct acct_record *r)
{
	double v[_COLL_SUM_MAX], day[_COLL_SUM_MAX] = {0};
	struct span sp;
	char bucket[16];

	coll_record_sums(r, v);
	task_span(r, &sp);
	/* the day's share is the sum of its hours' shares */
	for (uint64_t h = sp.h0; h <= sp.h1; h++) {
		const uint64_t hs = h * HOUR_NS, he = hs + HOUR_NS;
		double frac = 1;

		if (sp.end > sp.start)
			frac = (double)(MIN(sp.end, he) - MAX(sp.start, hs)) /
			       (double)(sp.end - sp.start);
		for (int s = 0; s < _COLL_SUM_MAX; s++) {
			if (coll_sum_is_count(s))
				day[s] += h == sp.h1 ? v[s] : 0;
			else
				day[s] += v[s] * frac;
		}
		if (h == sp.h1 || (h + 1) % 24 == 0) {
			/* a day before the last one: the task goes on into the next */
			day[COLL_SUM_CARRIED_TASKS] = h != sp.h1;
			day_of(h, bucket);
			push_day(d, nd, r, bucket, day);
			memset(day, 0, sizeof(day));
		}
	}
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
		if (coll_sum_is_count(s))
			x->v[s] = 0;
}

/* Deltas of one record (upper bound, for the allocation; a job_month delta per day counted). */
static size_t record_deltas(const struct acct_record *r)
{
	struct span sp;

	if (r->type == ACCT_TASK_SAMPLE)
		return r->task.id[0] ? 1 : 0;
	if (r->type != ACCT_TASK_END)
		return 0;
	task_span(r, &sp);
	return (size_t)(sp.h1 / 24 - sp.h0 / 24 + 1) * (3 + 2 * r->task.n_labels) + 1;
}

int coll_deltas_build(const struct coll_item *items, size_t n, struct coll_delta **ret,
		      size_t *ret_n)
{
	_cleanup_free_ struct coll_delta *d = NULL, *m = NULL;
	size_t cap = 0, nd = 0, out, nm, open, months;

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
	d = calloc(cap, sizeof(*d));
	if (!d)
		return -ENOMEM;

	for (size_t i = 0; i < n; i++) {
		const struct acct_record *r = items[i].rec;

		if (!items[i].is_new)
			continue;
		if (r->type == ACCT_TASK_END)
			push_task_end(d, &nd, r);
		else if (r->type == ACCT_TASK_SAMPLE && r->task.id[0])
			push_sample(d, &nd, r);
	}
	out = coll_deltas_merge(d, nd);
	/* job_month: the merged job_day deltas per month, merged again, placed after the tables
	 * before it (rollup_open, last, moves behind them; the capacity counts them) */
	nm = 0;
	for (size_t i = 0; i < out; i++)
		nm += d[i].table == COLL_ROLLUP_JOB_DAY;
	m = malloc(MAX(nm, (size_t)1) * sizeof(*m));
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
		}
	months = coll_deltas_merge(m, nm);
	for (open = 0; open < out && d[open].table < COLL_ROLLUP_JOB_MONTH;)
		open++;
	memmove(d + open + months, d + open, (out - open) * sizeof(*d));
	memcpy(d + open, m, months * sizeof(*d));
	*ret_n = out + months;
	*ret = TAKE_PTR(d);
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

/* ---- dispatch ---- */

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

int coll_store_open(const char *uri, unsigned flags, struct coll_store **ret, char *err,
		    size_t errlen)
{
	const struct coll_store_ops *ops;
	struct coll_store *s = NULL;
	int r;

	if (errlen)
		err[0] = 0;
	if (!uri || !*uri) {
		return err_set(err, errlen, -EINVAL, "empty database URI");
	}
	if (has_prefix(uri, "sqlite:"))
		ops = &coll_store_sqlite_ops;
	else if (has_prefix(uri, "postgresql:") || has_prefix(uri, "postgres:"))
		ops = &coll_store_pg_ops;
	else {
		return err_set(err, errlen, -EPROTONOSUPPORT,
			       "unknown database URI scheme in '%.64s' (want sqlite:/path or "
			       "postgresql://...)",
			       uri);
	}
	r = ops->open(uri, flags, &s, err, errlen);
	if (r < 0)
		return r;
	s->ops = ops;
	s->no_rollups = flags & COLL_STORE_NO_ROLLUPS;
	pthread_mutex_init(&s->lock, NULL);
	*ret = s;
	return 0;
}

void coll_store_close(struct coll_store *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	s->ops->close(s);
}

#define LOCKED(s, call)                                                                            \
	({                                                                                         \
		int _r;                                                                            \
		pthread_mutex_lock(&(s)->lock);                                                    \
		_r = (call);                                                                       \
		pthread_mutex_unlock(&(s)->lock);                                                  \
		_r;                                                                                \
	})

int coll_store_insert_batch(struct coll_store *s, struct coll_item *items, size_t n)
{
	return coll_store_insert_batch_pre(s, items, n, NULL);
}

int coll_store_insert_batch_pre(struct coll_store *s, struct coll_item *items, size_t n,
				const struct coll_deltas *pre)
{
	if (n == 0)
		return 0;
	return LOCKED(s, s->ops->insert_batch(s, items, n, pre));
}

int coll_store_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud)
{
	return LOCKED(s, s->ops->query(s, q, fn, ud));
}

int coll_store_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			    const char *to, coll_rollup_fn fn, void *ud)
{
	if ((unsigned)t >= _COLL_ROLLUP_MAX || t == COLL_ROLLUP_OPEN)
		return -EINVAL;
	return LOCKED(s, s->ops->rollup_query(s, t, from, to, fn, ud));
}

int coll_store_open_query(struct coll_store *s, coll_open_fn fn, void *ud)
{
	return LOCKED(s, s->ops->open_query(s, fn, ud));
}

int coll_store_rollup_batch(struct coll_store *s, struct coll_item *items, size_t n)
{
	if (n == 0)
		return 0;
	return LOCKED(s, s->ops->rollup_batch(s, items, n));
}

bool coll_store_defers_rollups(const struct coll_store *s)
{
	return s->queues_rollups && !s->no_rollups;
}

int coll_store_fold(struct coll_store *s, bool wait)
{
	if (!s->ops->fold || s->no_rollups)
		return 0;
	return LOCKED(s, s->ops->fold(s, wait));
}

int coll_store_sync(struct coll_store *s)
{
	return s->ops->sync ? s->ops->sync(s) : 0;
}

bool coll_store_syncs(const struct coll_store *s)
{
	return s->defers_sync;
}

int coll_store_count(struct coll_store *s, uint64_t *ret)
{
	return LOCKED(s, s->ops->count(s, ret));
}

int coll_store_ping(struct coll_store *s)
{
	return LOCKED(s, s->ops->ping(s));
}

int coll_store_schema_version(struct coll_store *s, int *ret)
{
	return LOCKED(s, s->ops->schema_version(s, ret));
}

int coll_store_break_add(struct coll_store *s, const struct coll_audit_break *b)
{
	if (!b->record_id || !b->node || !b->kind || !b->reason || !b->detected)
		return -EINVAL;
	return LOCKED(s, s->ops->break_add(s, b));
}

int coll_store_body_get(struct coll_store *s, const char *record_id, char **ret)
{
	return LOCKED(s, s->ops->body_get(s, record_id, ret));
}

int coll_store_conflict_add(struct coll_store *s, const struct coll_conflict *c)
{
	if (!c->record_id || !c->node || !c->detected || !c->stored_body || !c->received_body ||
	    !c->received_sha256)
		return -EINVAL;
	return LOCKED(s, s->ops->conflict_add(s, c));
}

int coll_store_break_query(struct coll_store *s, const char *node, size_t limit, coll_break_fn fn,
			   void *ud)
{
	return LOCKED(s, s->ops->break_query(s, node, limit, fn, ud));
}

const char *coll_store_errmsg(struct coll_store *s)
{
	return s->errmsg;
}

/* ---- DDL shared by the backends ---- */

static void pk_columns(FILE *f, enum coll_rollup_table t)
{
	const struct coll_rollup_def *def = coll_rollup_def(t);

	if (t != COLL_ROLLUP_OPEN)
		fputs("bucket", f);
	for (size_t k = 0; k < def->n_keys; k++)
		fprintf(f, "%s%s", k || t != COLL_ROLLUP_OPEN ? ", " : "",
			coll_key_column(def->keys[k]));
}

char *coll_rollup_pk(enum coll_rollup_table t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	pk_columns(f, t);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

char *coll_rollup_ddl(enum coll_rollup_table t, const char *real_type, const char *int_type)
{
	const struct coll_rollup_def *def = coll_rollup_def(t);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	fprintf(f, "CREATE TABLE %s (", def->name);
	if (t != COLL_ROLLUP_OPEN)
		fputs("bucket TEXT NOT NULL, ", f);
	for (size_t k = 0; k < def->n_keys; k++)
		fprintf(f, "%s TEXT NOT NULL, ", coll_key_column(def->keys[k]));
	if (t == COLL_ROLLUP_OPEN)
		fprintf(f,
			"account TEXT NOT NULL, \"user\" TEXT NOT NULL, job TEXT NOT NULL,"
			" labels TEXT NOT NULL, start_ns %s NOT NULL, sample_ns %s NOT NULL, ",
			int_type, int_type);
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		fprintf(f, "%s %s NOT NULL DEFAULT 0, ", coll_sum_name(s), real_type);
	fputs("PRIMARY KEY (", f);
	pk_columns(f, t);
	fputs("));", f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
