/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "collector/report.h"
#include "common/util.h"
#include "common/macro.h"

#define GIB	 1073741824.0
#define NONE_VAL "(none)"

/* ---- spec ---- */

static bool valid_day(const char *s)
{
	struct tm tm = {0};
	const char *e;

	if (strlen(s) != 10)
		return false;
	e = strptime(s, "%Y-%m-%d", &tm);
	if (!e || *e)
		return false;
	/* reject 2026-02-31 and friends: round trip through timegm */
	{
		struct tm t2 = tm;
		time_t t = timegm(&t2);
		struct tm back;

		gmtime_r(&t, &back);
		return back.tm_mday == tm.tm_mday && back.tm_mon == tm.tm_mon;
	}
}

int report_spec_init(struct report_spec *spec, const char *from, const char *to, char *err,
		     size_t errlen)
{
	memset(spec, 0, sizeof(*spec));
	spec->period = REPORT_PERIOD_ALL;
	spec->n_dims = 1;
	spec->dims[0] = REPORT_DIM_ACCOUNT;
	if (!from || !valid_day(from)) {
		snprintf(err, errlen, "from: expected a date YYYY-MM-DD");
		return -EINVAL;
	}
	if (!to || !valid_day(to)) {
		snprintf(err, errlen, "to: expected a date YYYY-MM-DD");
		return -EINVAL;
	}
	if (strcmp(from, to) >= 0) {
		snprintf(err, errlen, "to: must be after from (to is exclusive)");
		return -EINVAL;
	}
	memcpy(spec->from, from, 11);
	memcpy(spec->to, to, 11);
	return 0;
}

int report_spec_set_by(struct report_spec *spec, const char *by, char *err, size_t errlen)
{
	const char *p = by;
	bool have_label = false;

	spec->n_dims = 0;
	spec->parts = false;
	spec->label_key[0] = 0;
	while (*p) {
		const char *e = strchrnul(p, ',');
		size_t l = (size_t)(e - p);

		if (spec->n_dims >= REPORT_DIMS_MAX) {
			snprintf(err, errlen, "by: at most %d dimensions", REPORT_DIMS_MAX);
			return -EINVAL;
		}
		if (l == 7 && strncmp(p, "account", 7) == 0)
			spec->dims[spec->n_dims++] = REPORT_DIM_ACCOUNT;
		else if (l == 4 && strncmp(p, "user", 4) == 0)
			spec->dims[spec->n_dims++] = REPORT_DIM_USER;
		else if ((l == 3 && strncmp(p, "job", 3) == 0) ||
			 (l == 4 && strncmp(p, "node", 4) == 0)) {
			spec->dims[spec->n_dims++] = l == 3 ? REPORT_DIM_JOB : REPORT_DIM_NODE;
			spec->parts = true;
		} else if (l > 6 && strncmp(p, "label:", 6) == 0) {
			if (have_label) {
				snprintf(err, errlen, "by: at most one label: dimension");
				return -EINVAL;
			}
			if (l - 6 >= PRICE_LABEL_MAX) {
				snprintf(err, errlen, "by: label key too long");
				return -EINVAL;
			}
			memcpy(spec->label_key, p + 6, l - 6);
			spec->label_key[l - 6] = 0;
			have_label = true;
			spec->dims[spec->n_dims++] = REPORT_DIM_LABEL;
		} else {
			snprintf(err, errlen,
				 "by: expected account, user, job, node or label:KEY "
				 "(comma-separated), "
				 "got '%.*s'",
				 (int)MIN(l, (size_t)64), p);
			return -EINVAL;
		}
		for (size_t i = 0; i + 1 < spec->n_dims; i++)
			if (spec->dims[i] == spec->dims[spec->n_dims - 1]) {
				snprintf(err, errlen, "by: dimension repeated");
				return -EINVAL;
			}
		p = *e ? e + 1 : e;
		if (*e && !*p) {
			snprintf(err, errlen, "by: trailing comma");
			return -EINVAL;
		}
	}
	if (spec->n_dims == 0) {
		snprintf(err, errlen, "by: empty");
		return -EINVAL;
	}
	if (have_label && spec->parts) {
		/* rollup_label_day holds label sums per account and user, not per job or node */
		snprintf(err, errlen, "by: label:KEY cannot be combined with job or node");
		return -EINVAL;
	}
	return 0;
}

int report_spec_set_period(struct report_spec *spec, const char *period, char *err, size_t errlen)
{
	static const char *const names[] = {"day", "week", "month", "all"};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strcmp(period, names[i]) == 0) {
			spec->period = (enum report_period)i;
			return 0;
		}
	snprintf(err, errlen, "period: expected day, week, month or all");
	return -EINVAL;
}

int report_format_from_string(const char *s, enum report_format *ret)
{
	static const char *const names[] = {"table", "csv", "json", "html"};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strcmp(s, names[i]) == 0) {
			*ret = (enum report_format)i;
			return 0;
		}
	return -EINVAL;
}

static void period_of(const struct report_spec *spec, const char *day, char out[11])
{
	struct tm tm = {0};
	time_t t;

	switch (spec->period) {
	case REPORT_PERIOD_DAY:
		memcpy(out, day, 10);
		out[10] = 0;
		return;
	case REPORT_PERIOD_MONTH:
		memcpy(out, day, 7);
		out[7] = 0;
		return;
	case REPORT_PERIOD_ALL:
		memcpy(out, spec->from, 11);
		return;
	case REPORT_PERIOD_WEEK:
		break;
	}
	/* ISO week: the Monday starting it */
	if (!strptime(day, "%Y-%m-%d", &tm)) {
		memcpy(out, day, 10);
		out[10] = 0;
		return;
	}
	t = timegm(&tm);
	gmtime_r(&t, &tm);
	t -= (time_t)(((tm.tm_wday + 6) % 7) * 86400);
	gmtime_r(&t, &tm);
	strftime(out, 11, "%Y-%m-%d", &tm);
}

/* ---- reading the rollups ---- */

/* A (day, account, user) cell of rollup_day, the unit of rounding. Its parts: label rows
 * (rollup_label_day) and job/node rows (rollup_job_day) of the same key, chained. */
struct cell {
	char *day, *account, *user;
	double v[REPORT_Q_MAX];
	ssize_t first_label; /* index into labels, -1 = none */
	ssize_t first_part;  /* job/node rows, same array */
};

struct lcell {
	char *key, *value; /* label rows */
	char *job, *node;  /* job/node rows */
	double v[REPORT_Q_MAX];
	ssize_t next;
};

/* The share of a running task in one day of the report, before the cells are sorted. */
struct open_share {
	char day[11];
	char *account, *user, *job, *node, *labels;
	double v[REPORT_Q_MAX];
};

struct reader {
	const struct report_spec *spec;
	const struct price_sheet *ps;
	struct cell *cells;
	size_t n, cap;
	struct lcell *labels;
	size_t nl, capl;
	struct open_share *open;
	size_t no, capo;
	size_t open_rows;
	uint64_t from_ns, to_ns;
	int err;
};

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
	void *nv;
	size_t nc;

	if (n < *cap)
		return 0;
	nc = *cap ? *cap * 2 : 1024;
	nv = realloc(*v, nc * size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = nc;
	return 0;
}

static int cell_cmp3(const char *d, const char *a, const char *u, const struct cell *c)
{
	int r;

	if ((r = strcmp(d, c->day)) || (r = strcmp(a, c->account)) || (r = strcmp(u, c->user)))
		return r;
	return 0;
}

static int cell_sort_cmp(const void *x, const void *y)
{
	const struct cell *a = x;

	return cell_cmp3(a->day, a->account, a->user, y);
}

static int cell_add(struct reader *rd, const char *day, const char *account, const char *user,
		    const double *v, size_t nv)
{
	struct cell *c;

	if (grow((void **)&rd->cells, &rd->cap, rd->n, sizeof(*rd->cells)) < 0)
		return -ENOMEM;
	c = &rd->cells[rd->n];
	memset(c, 0, sizeof(*c));
	c->day = strdup(day);
	c->account = strdup(account);
	c->user = strdup(user);
	if (!c->day || !c->account || !c->user) {
		free(c->day);
		free(c->account);
		free(c->user);
		return -ENOMEM;
	}
	memcpy(c->v, v, nv * sizeof(double));
	c->first_label = c->first_part = -1;
	rd->n++;
	return 0;
}

static int day_cb(const struct coll_rollup_row *row, void *ud)
{
	return cell_add(ud, row->bucket, row->account, row->user, row->v, _COLL_SUM_MAX);
}

static struct cell *cell_find(struct reader *rd, const char *day, const char *account,
			      const char *user)
{
	size_t lo = 0, hi = rd->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int r = cell_cmp3(day, account, user, &rd->cells[mid]);

		if (r == 0)
			return &rd->cells[mid];
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* Chains a label (key != NULL) or job/node part to cell c. */
static int part_add(struct reader *rd, struct cell *c, const char *key, const char *value,
		    const char *job, const char *node, const double *v, size_t nv)
{
	struct lcell *l;

	if (grow((void **)&rd->labels, &rd->capl, rd->nl, sizeof(*rd->labels)) < 0)
		return -ENOMEM;
	l = &rd->labels[rd->nl];
	memset(l, 0, sizeof(*l));
	l->key = strdup(key ?: "");
	l->value = strdup(value ?: "");
	l->job = strdup(job ?: "");
	l->node = strdup(node ?: "");
	if (!l->key || !l->value || !l->job || !l->node) {
		free(l->key);
		free(l->value);
		free(l->job);
		free(l->node);
		return -ENOMEM;
	}
	memcpy(l->v, v, nv * sizeof(double));
	if (key) {
		l->next = c->first_label;
		c->first_label = (ssize_t)rd->nl++;
	} else {
		l->next = c->first_part;
		c->first_part = (ssize_t)rd->nl++;
	}
	return 0;
}

static bool label_wanted(const struct reader *rd, const char *key)
{
	return (rd->ps->override_key[0] && strcmp(key, rd->ps->override_key) == 0) ||
	       (rd->spec->label_key[0] && strcmp(key, rd->spec->label_key) == 0);
}

static int label_cb(const struct coll_rollup_row *row, void *ud)
{
	struct reader *rd = ud;
	struct cell *c;

	if (!label_wanted(rd, row->label_key))
		return 0;
	c = cell_find(rd, row->bucket, row->account, row->user);
	if (!c)
		return 0; /* cannot happen: label rows come with their day row */
	return part_add(rd, c, row->label_key, row->label_value, NULL, NULL, row->v, _COLL_SUM_MAX);
}

static int job_cb(const struct coll_rollup_row *row, void *ud)
{
	struct reader *rd = ud;
	struct cell *c = cell_find(rd, row->bucket, row->account, row->user);

	if (!c)
		return 0; /* cannot happen: job rows come with their day row */
	return part_add(rd, c, NULL, NULL, row->job, row->node, row->v, _COLL_SUM_MAX);
}

static uint64_t day_start_ns(const char *day)
{
	struct tm tm = {0};

	if (!strptime(day, "%Y-%m-%d", &tm))
		return 0;
	return (uint64_t)timegm(&tm) * NSEC_PER_SEC;
}

#define DAY_NS (86400ULL * NSEC_PER_SEC)

/*
 * A running task, from its latest sample: what the sample measured over [start, sample] is
 * spread over the days of that interval in proportion, like a task.end at ingest; only the
 * days inside the report count (so it is charged up to the report's end, and from its
 * start). It is counted as running once, in the last such day.
 */
static int open_cb(const struct coll_open_row *row, void *ud)
{
	struct reader *rd = ud;
	const uint64_t wall = row->sample_ns > row->start_ns ? row->sample_ns - row->start_ns : 0;
	uint64_t a = MAX(row->start_ns, rd->from_ns), b = MIN(row->sample_ns, rd->to_ns);

	rd->open_rows++;
	if (wall == 0) {
		if (row->sample_ns < rd->from_ns || row->sample_ns >= rd->to_ns)
			return 0;
		a = b = row->sample_ns;
	} else if (b <= a)
		return 0;
	for (uint64_t d = a / DAY_NS * DAY_NS; d <= (b > a ? b - 1 : b); d += DAY_NS) {
		const double frac =
		    wall ? (double)(MIN(b, d + DAY_NS) - MAX(a, d)) / (double)wall : 1.0;
		const bool last = d + DAY_NS >= b;
		struct open_share *o;
		time_t secs = (time_t)(d / NSEC_PER_SEC);
		struct tm tm;

		if (grow((void **)&rd->open, &rd->capo, rd->no, sizeof(*rd->open)) < 0)
			return -ENOMEM;
		o = &rd->open[rd->no];
		memset(o, 0, sizeof(*o));
		gmtime_r(&secs, &tm);
		strftime(o->day, sizeof(o->day), "%Y-%m-%d", &tm);
		for (int s = 0; s < _COLL_SUM_MAX; s++)
			o->v[s] = coll_sum_is_count(s) ? 0 : row->v[s] * frac;
		o->v[REPORT_Q_RUNNING] = last ? 1 : 0;
		o->account = strdup(row->account);
		o->user = strdup(row->user);
		o->job = strdup(row->job);
		o->node = strdup(row->node);
		o->labels = strdup(row->labels);
		rd->no++;
		if (!o->account || !o->user || !o->job || !o->node || !o->labels)
			return -ENOMEM;
	}
	return 0;
}

/* Sorted cells with duplicate keys (from running tasks) merged into one. */
static void cells_sort_merge(struct reader *rd)
{
	size_t out = 0;

	qsort(rd->cells, rd->n, sizeof(*rd->cells), cell_sort_cmp);
	for (size_t i = 0; i < rd->n; i++) {
		struct cell *c = &rd->cells[i];

		if (out > 0 && cell_sort_cmp(&rd->cells[out - 1], c) == 0) {
			for (int s = 0; s < REPORT_Q_MAX; s++)
				rd->cells[out - 1].v[s] += c->v[s];
			free(c->day);
			free(c->account);
			free(c->user);
			continue;
		}
		if (out != i)
			rd->cells[out] = *c;
		out++;
	}
	rd->n = out;
}

/* The running tasks' shares as parts of their cells: job/node, and the wanted labels. */
static int open_parts(struct reader *rd)
{
	for (size_t i = 0; i < rd->no; i++) {
		const struct open_share *o = &rd->open[i];
		struct cell *c = cell_find(rd, o->day, o->account, o->user);
		json_t *labels, *val;
		const char *key;
		int r = 0;

		if (!c)
			return -EIO; /* cannot happen: a cell was added for every share */
		if (rd->spec->parts) {
			r = part_add(rd, c, NULL, NULL, o->job, o->node, o->v, REPORT_Q_MAX);
			if (r < 0)
				return r;
		}
		if (!rd->ps->override_key[0] && !rd->spec->label_key[0])
			continue;
		labels = json_loads(o->labels, 0, NULL);
		if (!labels)
			continue; /* stored by the collector from a decoded record: always valid */
		json_object_foreach(labels, key, val)
		{
			if (r >= 0 && json_is_string(val) && label_wanted(rd, key))
				r = part_add(rd, c, key, json_string_value(val), NULL, NULL, o->v,
					     REPORT_Q_MAX);
		}
		json_decref(labels);
		if (r < 0)
			return r;
	}
	return 0;
}

static void reader_free(struct reader *rd)
{
	for (size_t i = 0; i < rd->n; i++) {
		free(rd->cells[i].day);
		free(rd->cells[i].account);
		free(rd->cells[i].user);
	}
	for (size_t i = 0; i < rd->nl; i++) {
		free(rd->labels[i].key);
		free(rd->labels[i].value);
		free(rd->labels[i].job);
		free(rd->labels[i].node);
	}
	for (size_t i = 0; i < rd->no; i++) {
		free(rd->open[i].account);
		free(rd->open[i].user);
		free(rd->open[i].job);
		free(rd->open[i].node);
		free(rd->open[i].labels);
	}
	free(rd->cells);
	free(rd->labels);
	free(rd->open);
}

/* ---- pricing ---- */

/* Unrounded money (currency units) of quantities v at price set p, per cost component. */
static void price_quantities(const double *v, const struct price_set *p, double out[])
{
	out[REPORT_COST_CPU] = v[COLL_SUM_CPU_CHARGED_CORE_S] / 3600.0 * p->p[PRICE_CPU_CORE_HOUR];
	out[REPORT_COST_MEM] =
	    v[COLL_SUM_MEM_CHARGED_BYTE_S] / 3600.0 / GIB * p->p[PRICE_MEMORY_GIB_HOUR];
	out[REPORT_COST_GPU] = v[COLL_SUM_GPU_CHARGED_S] / 3600.0 * p->p[PRICE_GPU_HOUR];
	out[REPORT_COST_IO] = v[COLL_SUM_IO_READ_BYTES] / GIB * p->p[PRICE_IO_READ_GIB] +
			      v[COLL_SUM_IO_WRITE_BYTES] / GIB * p->p[PRICE_IO_WRITE_GIB];
	out[REPORT_COST_NET] =
	    (v[COLL_SUM_NET_RX_BYTES] + v[COLL_SUM_NET_TX_BYTES]) / GIB * p->p[PRICE_NET_GIB];
	out[REPORT_COST_TOTAL] = 0;
	out[REPORT_COST_WASTE] =
	    MAX(0.0, v[COLL_SUM_CPU_CHARGED_CORE_S] - v[COLL_SUM_CPU_S]) / 3600.0 *
		p->p[PRICE_CPU_CORE_HOUR] +
	    MAX(0.0, v[COLL_SUM_MEM_CHARGED_BYTE_S] - v[COLL_SUM_MEM_BYTE_S]) / 3600.0 / GIB *
		p->p[PRICE_MEMORY_GIB_HOUR] +
	    MAX(0.0, v[COLL_SUM_GPU_CHARGED_S] - v[COLL_SUM_GPU_S]) / 3600.0 * p->p[PRICE_GPU_HOUR];
}

static int64_t to_cents(double money)
{
	double c = round(money * 100.0);

	if (!(c >= 0))
		return 0;
	if (c > 9e15)
		return (int64_t)9e15;
	return (int64_t)c;
}

void report_apportion(int64_t total, const double *w, size_t n, int64_t *out)
{
	double sum = 0;
	int64_t given = 0;

	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++)
		sum += w[i] > 0 ? w[i] : 0;
	if (!(sum > 0)) {
		memset(out, 0, n * sizeof(*out));
		out[n - 1] = total;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		double share = w[i] > 0 ? (double)total * (w[i] / sum) : 0;

		out[i] = (int64_t)floor(share);
		if (out[i] < 0)
			out[i] = 0;
		given += out[i];
	}
	/* hand out the rest one cent at a time, largest fractional part first */
	while (given < total) {
		size_t best = n - 1;
		double bestf = -1;

		for (size_t i = 0; i < n; i++) {
			double share = w[i] > 0 ? (double)total * (w[i] / sum) : 0;
			double f = share - (double)out[i];

			if (f > bestf) {
				bestf = f;
				best = i;
			}
		}
		out[best]++;
		given++;
	}
	/* floating error the other way (cannot normally happen) */
	for (size_t i = 0; given > total && i < n; i++)
		while (out[i] > 0 && given > total) {
			out[i]--;
			given--;
		}
}

/* ---- grouping ---- */

struct frag {
	char period[11];
	const char *key[REPORT_DIMS_MAX];
	double q[REPORT_Q_MAX];
	int64_t cents[_REPORT_COST_MAX];
};

struct fragv {
	struct frag *v;
	size_t n, cap;
};

static int frag_push(struct fragv *f, struct frag **ret)
{
	if (f->n == f->cap) {
		size_t nc = f->cap ? f->cap * 2 : 1024;
		struct frag *n = realloc(f->v, nc * sizeof(*n));

		if (!n)
			return -ENOMEM;
		f->v = n;
		f->cap = nc;
	}
	*ret = &f->v[f->n++];
	memset(*ret, 0, sizeof(**ret));
	return 0;
}

static int frag_cmp(const void *x, const void *y, void *ud)
{
	const struct frag *a = x, *b = y;
	const size_t ndims = *(const size_t *)ud;
	int r = strcmp(a->period, b->period);

	for (size_t i = 0; !r && i < ndims; i++)
		r = strcmp(a->key[i], b->key[i]);
	return r;
}

/* Cents of one day cell: the override label's parts at their prices, the rest at base. */
static void cell_cents(const struct reader *rd, const struct cell *c, int64_t cents[])
{
	const struct price_sheet *ps = rd->ps;
	double rest[_COLL_SUM_MAX], m[_REPORT_COST_MAX], acc[_REPORT_COST_MAX] = {0};

	memcpy(rest, c->v, sizeof(rest));
	if (ps->n_overrides)
		for (ssize_t li = c->first_label; li >= 0; li = rd->labels[li].next) {
			const struct lcell *l = &rd->labels[li];
			const struct price_set *p;

			if (strcmp(l->key, ps->override_key) != 0)
				continue;
			p = price_sheet_for(ps, l->value);
			if (p == &ps->base)
				continue;
			price_quantities(l->v, p, m);
			for (int k = 0; k < _REPORT_COST_MAX; k++)
				acc[k] += m[k];
			for (int s = 0; s < _COLL_SUM_MAX; s++)
				rest[s] -= l->v[s];
		}
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		rest[s] = MAX(0.0, rest[s]);
	price_quantities(rest, &ps->base, m);
	cents[REPORT_COST_TOTAL] = 0;
	for (int k = 0; k < _REPORT_COST_MAX; k++) {
		if (k == REPORT_COST_TOTAL)
			continue;
		cents[k] = to_cents(acc[k] + m[k]);
		if (k < REPORT_COST_TOTAL)
			cents[REPORT_COST_TOTAL] += cents[k];
	}
}

static const char *dim_value(const struct report_spec *spec, size_t d, const struct cell *c,
			     const char *label, const struct lcell *part)
{
	switch (spec->dims[d]) {
	case REPORT_DIM_ACCOUNT:
		return c->account;
	case REPORT_DIM_USER:
		return c->user;
	case REPORT_DIM_LABEL:
		return label;
	case REPORT_DIM_JOB:
		return part ? part->job : NONE_VAL;
	case REPORT_DIM_NODE:
		return part ? part->node : NONE_VAL;
	}
	return "";
}

/*
 * Splits cell c (cents already rounded) into n parts: parts[i] quantities q[i], keyed by
 * label[i] / part[i]. The cents of each component are apportioned by the parts' unrounded
 * money at price set p[i], so the parts sum to the cell exactly.
 */
static int emit_parts(const struct reader *rd, const struct cell *c, const char *period,
		      const int64_t cents[], size_t n, const double *const *q,
		      const struct price_set *const *p, const char *const *label,
		      const struct lcell *const *part, struct fragv *fv)
{
	const struct report_spec *spec = rd->spec;
	_cleanup_free_ double *w = calloc(n * _REPORT_COST_MAX, sizeof(double));
	_cleanup_free_ int64_t *out = calloc(n, sizeof(int64_t));
	double m[_REPORT_COST_MAX];
	size_t first = fv->n;
	struct frag *f;
	int r;

	if (!w || !out)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		price_quantities(q[i], p[i], m);
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			w[(size_t)k * n + i] = m[k];
		r = frag_push(fv, &f);
		if (r < 0)
			return r;
		memcpy(f->period, period, 11);
		for (size_t d = 0; d < spec->n_dims; d++)
			f->key[d] =
			    dim_value(spec, d, c, label ? label[i] : NULL, part ? part[i] : NULL);
		memcpy(f->q, q[i], sizeof(f->q));
	}
	for (int k = 0; k < _REPORT_COST_MAX; k++) {
		if (k == REPORT_COST_TOTAL)
			continue;
		report_apportion(cents[k], &w[(size_t)k * n], n, out);
		for (size_t i = 0; i < n; i++) {
			fv->v[first + i].cents[k] = out[i];
			if (k < REPORT_COST_TOTAL)
				fv->v[first + i].cents[REPORT_COST_TOTAL] += out[i];
		}
	}
	return 0;
}

static int emit_cell(const struct reader *rd, const struct cell *c, struct fragv *fv,
		     struct report_row *total)
{
	const struct report_spec *spec = rd->spec;
	int64_t cents[_REPORT_COST_MAX];
	char period[11];
	struct frag *f;
	size_t n = 0, i = 0;
	int r;

	cell_cents(rd, c, cents);
	period_of(spec, c->day, period);
	for (int s = 0; s < REPORT_Q_MAX; s++)
		total->q[s] += c->v[s];
	for (int k = 0; k < _REPORT_COST_MAX; k++)
		total->cents[k] += cents[k];

	if (spec->parts) {
		/* split by job and node: the cell's rollup_job_day rows (which sum to it) */
		_cleanup_free_ const double **q = NULL;
		_cleanup_free_ const struct price_set **p = NULL;
		_cleanup_free_ const struct lcell **part = NULL;

		for (ssize_t li = c->first_part; li >= 0; li = rd->labels[li].next)
			n++;
		if (n == 0)
			goto whole;
		q = calloc(n, sizeof(*q));
		p = calloc(n, sizeof(*p));
		part = calloc(n, sizeof(*part));
		if (!q || !p || !part)
			return -ENOMEM;
		for (ssize_t li = c->first_part; li >= 0; li = rd->labels[li].next, i++) {
			part[i] = &rd->labels[li];
			q[i] = rd->labels[li].v;
			p[i] = &rd->ps->base;
		}
		return emit_parts(rd, c, period, cents, n, q, p, NULL, part, fv);
	}
	if (spec->label_key[0]) {
		/* split by the label: its values, plus NONE_VAL for the tasks without it */
		_cleanup_free_ const double **q = NULL;
		_cleanup_free_ const struct price_set **p = NULL;
		_cleanup_free_ const char **label = NULL;
		double rest[REPORT_Q_MAX];
		const bool priced = strcmp(spec->label_key, rd->ps->override_key) == 0;

		n = 1;
		for (ssize_t li = c->first_label; li >= 0; li = rd->labels[li].next)
			if (strcmp(rd->labels[li].key, spec->label_key) == 0)
				n++;
		q = calloc(n, sizeof(*q));
		p = calloc(n, sizeof(*p));
		label = calloc(n, sizeof(*label));
		if (!q || !p || !label)
			return -ENOMEM;
		memcpy(rest, c->v, sizeof(rest));
		for (ssize_t li = c->first_label; li >= 0; li = rd->labels[li].next) {
			const struct lcell *l = &rd->labels[li];

			if (strcmp(l->key, spec->label_key) != 0)
				continue;
			q[i] = l->v;
			label[i] = l->value;
			p[i] = priced ? price_sheet_for(rd->ps, l->value) : &rd->ps->base;
			i++;
			for (int s = 0; s < REPORT_Q_MAX; s++)
				rest[s] -= l->v[s];
		}
		for (int s = 0; s < REPORT_Q_MAX; s++)
			rest[s] = MAX(0.0, rest[s]);
		q[i] = rest;
		label[i] = NONE_VAL;
		p[i] = &rd->ps->base;
		return emit_parts(rd, c, period, cents, n, q, p, label, NULL, fv);
	}
whole:
	r = frag_push(fv, &f);
	if (r < 0)
		return r;
	memcpy(f->period, period, 11);
	for (size_t d = 0; d < spec->n_dims; d++)
		f->key[d] = dim_value(spec, d, c, NULL, NULL);
	memcpy(f->q, c->v, sizeof(f->q));
	memcpy(f->cents, cents, sizeof(f->cents));
	return 0;
}

static int waste_cmp(const void *x, const void *y)
{
	const struct report_row *a = x, *b = y;

	if (a->cents[REPORT_COST_WASTE] != b->cents[REPORT_COST_WASTE])
		return a->cents[REPORT_COST_WASTE] > b->cents[REPORT_COST_WASTE] ? -1 : 1;
	return strcmp(a->period, b->period);
}

void report_free(struct report *r)
{
	for (size_t i = 0; i < r->n; i++)
		for (size_t d = 0; d < REPORT_DIMS_MAX; d++)
			free(r->rows[i].key[d]);
	free(r->rows);
	r->rows = NULL;
	r->n = 0;
}

int report_build(struct coll_store *s, const struct report_spec *spec, const struct price_sheet *ps,
		 struct report *ret)
{
	struct reader rd = {.spec = spec, .ps = ps};
	struct fragv fv = {0};
	int r;

	memset(ret, 0, sizeof(*ret));
	ret->spec = *spec;
	memcpy(ret->currency, ps->currency, sizeof(ret->currency));
	rd.from_ns = day_start_ns(spec->from);
	rd.to_ns = day_start_ns(spec->to);
	r = coll_store_rollup_query(s, COLL_ROLLUP_DAY, spec->from, spec->to, day_cb, &rd);
	if (r < 0)
		goto out;
	ret->cells = rd.n;
	r = coll_store_open_query(s, open_cb, &rd);
	if (r < 0)
		goto out;
	for (size_t i = 0; i < rd.no; i++) {
		r = cell_add(&rd, rd.open[i].day, rd.open[i].account, rd.open[i].user, rd.open[i].v,
			     REPORT_Q_MAX);
		if (r < 0)
			goto out;
	}
	cells_sort_merge(&rd);
	if (ps->n_overrides || spec->label_key[0]) {
		r = coll_store_rollup_query(s, COLL_ROLLUP_LABEL_DAY, spec->from, spec->to,
					    label_cb, &rd);
		if (r < 0)
			goto out;
	}
	if (spec->parts) {
		r = coll_store_rollup_query(s, COLL_ROLLUP_JOB_DAY, spec->from, spec->to, job_cb,
					    &rd);
		if (r < 0)
			goto out;
	}
	ret->cells += rd.nl + rd.open_rows;
	r = open_parts(&rd);
	if (r < 0)
		goto out;
	for (size_t i = 0; i < rd.n; i++) {
		r = emit_cell(&rd, &rd.cells[i], &fv, &ret->total);
		if (r < 0)
			goto out;
	}
	/* merge the fragments into groups */
	qsort_r(fv.v, fv.n, sizeof(*fv.v), frag_cmp, (void *)&spec->n_dims);
	for (size_t i = 0; i < fv.n;) {
		size_t j = i + 1;
		struct report_row *row;

		while (j < fv.n && strcmp(fv.v[i].period, fv.v[j].period) == 0) {
			bool same = true;

			for (size_t d = 0; d < spec->n_dims && same; d++)
				same = strcmp(fv.v[i].key[d], fv.v[j].key[d]) == 0;
			if (!same)
				break;
			j++;
		}
		if (ret->n % 256 == 0) {
			struct report_row *nr = realloc(ret->rows, (ret->n + 256) * sizeof(*nr));

			if (!nr) {
				r = -ENOMEM;
				goto out;
			}
			ret->rows = nr;
		}
		row = &ret->rows[ret->n];
		memset(row, 0, sizeof(*row));
		ret->n++;
		memcpy(row->period, fv.v[i].period, 11);
		for (size_t d = 0; d < spec->n_dims; d++) {
			row->key[d] = strdup(fv.v[i].key[d]);
			if (!row->key[d]) {
				r = -ENOMEM;
				goto out;
			}
		}
		for (size_t k = i; k < j; k++) {
			for (int x = 0; x < REPORT_Q_MAX; x++)
				row->q[x] += fv.v[k].q[x];
			for (int x = 0; x < _REPORT_COST_MAX; x++)
				row->cents[x] += fv.v[k].cents[x];
		}
		i = j;
	}
	if (spec->top && ret->n > spec->top) {
		qsort(ret->rows, ret->n, sizeof(*ret->rows), waste_cmp);
		for (size_t i = spec->top; i < ret->n; i++)
			for (size_t d = 0; d < REPORT_DIMS_MAX; d++)
				free(ret->rows[i].key[d]);
		ret->n = spec->top;
	} else if (spec->top)
		qsort(ret->rows, ret->n, sizeof(*ret->rows), waste_cmp);
	memcpy(ret->total.period, "total", 6);
	r = 0;
out:
	free(fv.v);
	reader_free(&rd);
	if (r < 0)
		report_free(ret);
	return r;
}

/* ---- output ---- */

static const char *const dim_names[] = {"account", "user", "label", "job", "node"};

static void dim_header(const struct report *r, size_t d, char *buf, size_t len)
{
	if (r->spec.dims[d] == REPORT_DIM_LABEL)
		snprintf(buf, len, "label:%s", r->spec.label_key);
	else
		snprintf(buf, len, "%s", dim_names[r->spec.dims[d]]);
}

static void money(char *buf, size_t len, int64_t cents)
{
	snprintf(buf, len, "%s%" PRId64 ".%02" PRId64, cents < 0 ? "-" : "",
		 (cents < 0 ? -cents : cents) / 100, (cents < 0 ? -cents : cents) % 100);
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static double cpu_eff(const struct report_row *row)
{
	return ratio(row->q[COLL_SUM_CPU_S], row->q[COLL_SUM_CPU_REQ_CORE_S]);
}

static double mem_eff(const struct report_row *row)
{
	return ratio(row->q[COLL_SUM_MEM_BYTE_S], row->q[COLL_SUM_MEM_REQ_BYTE_S]);
}

static void csv_field(FILE *f, const char *s)
{
	if (!strpbrk(s, ",\"\r\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static void html_str(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '&':
			fputs("&amp;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		case '\'':
			fputs("&#39;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

static const char *const cost_names[_REPORT_COST_MAX] = {
    "cpu_cost", "mem_cost", "gpu_cost", "io_cost", "net_cost", "cost", "waste"};

static void write_csv(const struct report *r, FILE *f)
{
	char h[PRICE_LABEL_MAX + 8], m[32];

	fputs("period", f);
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		fputc(',', f);
		csv_field(f, h);
	}
	fputs(",tasks,failed_tasks,cpu_core_h,cpu_used_core_h,mem_gib_h,gpu_h,io_gib,net_gib", f);
	for (int k = 0; k < _REPORT_COST_MAX; k++)
		fprintf(f, ",%s", cost_names[k]);
	fputs(",cpu_eff,mem_eff,oom_killed,time_limit,cpu_time_limit,gpu_memory_limit,"
	      "running_tasks\n",
	      f);
	for (size_t i = 0; i <= r->n; i++) {
		const struct report_row *row = i < r->n ? &r->rows[i] : &r->total;
		const double *q = row->q;

		fputs(row->period, f);
		for (size_t d = 0; d < r->spec.n_dims; d++) {
			fputc(',', f);
			csv_field(f, i < r->n ? row->key[d] : "");
		}
		fprintf(f, ",%.0f,%.0f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f", q[COLL_SUM_TASKS],
			q[COLL_SUM_FAILED_TASKS], q[COLL_SUM_CPU_CHARGED_CORE_S] / 3600,
			q[COLL_SUM_CPU_S] / 3600, q[COLL_SUM_MEM_CHARGED_BYTE_S] / 3600 / GIB,
			q[COLL_SUM_GPU_CHARGED_S] / 3600,
			(q[COLL_SUM_IO_READ_BYTES] + q[COLL_SUM_IO_WRITE_BYTES]) / GIB,
			(q[COLL_SUM_NET_RX_BYTES] + q[COLL_SUM_NET_TX_BYTES]) / GIB);
		for (int k = 0; k < _REPORT_COST_MAX; k++) {
			money(m, sizeof(m), row->cents[k]);
			fprintf(f, ",%s", m);
		}
		fprintf(f, ",%.4f,%.4f,%.0f,%.0f,%.0f,%.0f,%.0f\n", cpu_eff(row), mem_eff(row),
			q[COLL_SUM_OOM_KILLED], q[COLL_SUM_TIME_LIMIT], q[COLL_SUM_CPU_TIME_LIMIT],
			q[COLL_SUM_GPU_MEMORY_LIMIT], q[REPORT_Q_RUNNING]);
	}
}

static void json_row(const struct report *r, const struct report_row *row, bool is_total, FILE *f)
{
	char m[32], h[PRICE_LABEL_MAX + 8];
	const double *q = row->q;

	fputc('{', f);
	if (!is_total) {
		fputs("\"period\":", f);
		fputs_json_string(f, row->period);
		for (size_t d = 0; d < r->spec.n_dims; d++) {
			dim_header(r, d, h, sizeof(h));
			fputc(',', f);
			fputs_json_string(f, h);
			fputc(':', f);
			fputs_json_string(f, row->key[d]);
		}
		fputc(',', f);
	}
	fprintf(f,
		"\"tasks\":%.0f,\"failed_tasks\":%.0f,\"cpu_core_h\":%.6f,"
		"\"cpu_used_core_h\":%.6f,\"mem_gib_h\":%.6f,\"gpu_h\":%.6f,\"io_gib\":%.6f,"
		"\"net_gib\":%.6f",
		q[COLL_SUM_TASKS], q[COLL_SUM_FAILED_TASKS], q[COLL_SUM_CPU_CHARGED_CORE_S] / 3600,
		q[COLL_SUM_CPU_S] / 3600, q[COLL_SUM_MEM_CHARGED_BYTE_S] / 3600 / GIB,
		q[COLL_SUM_GPU_CHARGED_S] / 3600,
		(q[COLL_SUM_IO_READ_BYTES] + q[COLL_SUM_IO_WRITE_BYTES]) / GIB,
		(q[COLL_SUM_NET_RX_BYTES] + q[COLL_SUM_NET_TX_BYTES]) / GIB);
	for (int k = 0; k < _REPORT_COST_MAX; k++) {
		money(m, sizeof(m), row->cents[k]);
		fprintf(f, ",\"%s\":\"%s\"", cost_names[k], m);
	}
	fprintf(f,
		",\"cpu_eff\":%.4f,\"mem_eff\":%.4f,\"oom_killed\":%.0f,\"time_limit\":%.0f,"
		"\"cpu_time_limit\":%.0f,\"gpu_memory_limit\":%.0f,\"running_tasks\":%.0f}",
		cpu_eff(row), mem_eff(row), q[COLL_SUM_OOM_KILLED], q[COLL_SUM_TIME_LIMIT],
		q[COLL_SUM_CPU_TIME_LIMIT], q[COLL_SUM_GPU_MEMORY_LIMIT], q[REPORT_Q_RUNNING]);
}

static const char *const period_names[] = {"day", "week", "month", "all"};
static const char note_limits[] =
    "failed_tasks counts tasks that did not exit 0, oom_killed and time_limit those killed by "
    "that limit; tasks are counted in the day they ended, their usage is split over the days "
    "they ran; running_tasks are charged from their latest sample";
static const char note_mem[] =
    "mem_eff is average used memory over requested (time-integrated), not peak";

static void write_json(const struct report *r, FILE *f)
{
	char h[PRICE_LABEL_MAX + 8];

	fputs("{\"from\":", f);
	fputs_json_string(f, r->spec.from);
	fputs(",\"to\":", f);
	fputs_json_string(f, r->spec.to);
	fprintf(f, ",\"period\":\"%s\",\"currency\":", period_names[r->spec.period]);
	fputs_json_string(f, r->currency);
	fputs(",\"by\":[", f);
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		if (d)
			fputc(',', f);
		fputs_json_string(f, h);
	}
	fprintf(f, "],\"rollup_rows\":%zu,\"rows\":[", r->cells);
	for (size_t i = 0; i < r->n; i++) {
		if (i)
			fputc(',', f);
		fputc('\n', f);
		json_row(r, &r->rows[i], false, f);
	}
	fputs("],\n\"total\":", f);
	json_row(r, &r->total, true, f);
	fprintf(f, ",\"notes\":[\"%s\",\"%s\"]}\n", note_limits, note_mem);
}

static void row_label(const struct report *r, const struct report_row *row, FILE *f)
{
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		if (d)
			fputs(" / ", f);
		html_str(f, row->key[d][0] ? row->key[d] : "(empty)");
	}
}

static void write_table(const struct report *r, FILE *f)
{
	char h[PRICE_LABEL_MAX + 8], m[_REPORT_COST_MAX][32];

	fprintf(f, "%-10s", "PERIOD");
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		fprintf(f, " %-16s", h);
	}
	fprintf(f, " %8s %6s %6s %6s %6s %12s %12s %12s %12s %6s %6s\n", "TASKS", "FAILED", "OOM",
		"TLIMIT", "RUN", "CORE_H", "COST", "CPU_COST", "MEM_COST", "CPU_EF", "MEM_EF");
	for (size_t i = 0; i <= r->n; i++) {
		const struct report_row *row = i < r->n ? &r->rows[i] : &r->total;

		for (int k = 0; k < _REPORT_COST_MAX; k++)
			money(m[k], sizeof(m[k]), row->cents[k]);
		fprintf(f, "%-10s", i < r->n ? row->period : "TOTAL");
		for (size_t d = 0; d < r->spec.n_dims; d++)
			fprintf(f, " %-16s", i < r->n ? row->key[d] : "");
		fprintf(f, " %8.0f %6.0f %6.0f %6.0f %6.0f %12.2f %12s %12s %12s %6.2f %6.2f\n",
			row->q[COLL_SUM_TASKS], row->q[COLL_SUM_FAILED_TASKS],
			row->q[COLL_SUM_OOM_KILLED], row->q[COLL_SUM_TIME_LIMIT],
			row->q[REPORT_Q_RUNNING], row->q[COLL_SUM_CPU_CHARGED_CORE_S] / 3600,
			m[REPORT_COST_TOTAL], m[REPORT_COST_CPU], m[REPORT_COST_MEM], cpu_eff(row),
			mem_eff(row));
	}
	money(m[0], sizeof(m[0]), r->total.cents[REPORT_COST_WASTE]);
	fprintf(f, "(%s; waste %s; %zu rollup rows; %s)\n", r->currency, m[0], r->cells,
		note_limits);
}

static void write_html(const struct report *r, FILE *f)
{
	char m[32], h[PRICE_LABEL_MAX + 8];
	int64_t maxc = 1;
	const int bar_w = 520, row_h = 18;
	int y;

	for (size_t i = 0; i < r->n; i++)
		maxc = MAX(maxc, r->rows[i].cents[REPORT_COST_TOTAL]);
	fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Corral showback ", f);
	html_str(f, r->spec.from);
	fputs(" &ndash; ", f);
	html_str(f, r->spec.to);
	fputs("</title>\n<style>body{font-family:sans-serif;margin:2em;color:#222}"
	      "table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;"
	      "text-align:right}td.k,th.k{text-align:left}tr.total td{font-weight:bold}"
	      "svg text{font-size:11px}</style></head><body>\n<h1>Showback ",
	      f);
	html_str(f, r->spec.from);
	fputs(" to ", f);
	html_str(f, r->spec.to);
	fputs(" (exclusive)</h1>\n<p>Total cost: <b id=\"total-cost\">", f);
	money(m, sizeof(m), r->total.cents[REPORT_COST_TOTAL]);
	fputs(m, f);
	fputs("</b> ", f);
	html_str(f, r->currency);
	money(m, sizeof(m), r->total.cents[REPORT_COST_WASTE]);
	fprintf(f, "; waste (reserved, unused): <b id=\"total-waste\">%s</b>; period: %s.</p>\n", m,
		period_names[r->spec.period]);

	/* cost per group per period */
	fprintf(f,
		"<h2>Cost per group and period</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
		"width=\"900\" height=\"%zu\" id=\"cost-chart\">\n",
		(r->n + 1) * row_h + 10);
	y = 5;
	for (size_t i = 0; i < r->n; i++, y += row_h) {
		const struct report_row *row = &r->rows[i];
		int w = (int)((double)row->cents[REPORT_COST_TOTAL] / (double)maxc * bar_w);

		money(m, sizeof(m), row->cents[REPORT_COST_TOTAL]);
		fprintf(f, "<text x=\"0\" y=\"%d\">", y + 12);
		html_str(f, row->period);
		fputs(" ", f);
		row_label(r, row, f);
		fprintf(f,
			"</text><rect x=\"260\" y=\"%d\" width=\"%d\" height=\"%d\" "
			"fill=\"#4a7ab5\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
			y, MAX(w, 1), row_h - 4, 265 + w, y + 12, m);
	}
	fputs("</svg>\n", f);

	/* efficiency bars */
	fprintf(f,
		"<h2>Efficiency (used / requested)</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
		"width=\"900\" height=\"%zu\" id=\"eff-chart\">\n",
		(r->n + 1) * row_h * 2 + 10);
	y = 5;
	for (size_t i = 0; i < r->n; i++) {
		const struct report_row *row = &r->rows[i];
		double ce = MIN(cpu_eff(row), 1.0), me = MIN(mem_eff(row), 1.0);

		fprintf(f, "<text x=\"0\" y=\"%d\">", y + 12);
		html_str(f, row->period);
		fputs(" ", f);
		row_label(r, row, f);
		fprintf(
		    f,
		    "</text><rect x=\"260\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#e0e0e0\"/>"
		    "<rect x=\"260\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#5aa05a\"/>"
		    "<text x=\"%d\" y=\"%d\">CPU %.0f%%</text>\n",
		    y, bar_w / 2, row_h - 4, y, (int)(ce * bar_w / 2), row_h - 4, 270 + bar_w / 2,
		    y + 12, cpu_eff(row) * 100);
		y += row_h;
		fprintf(f,
			"<rect x=\"260\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#e0e0e0\"/>"
			"<rect x=\"260\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#c08a3a\"/>"
			"<text x=\"%d\" y=\"%d\">memory %.0f%%</text>\n",
			y, bar_w / 2, row_h - 4, y, (int)(me * bar_w / 2), row_h - 4,
			270 + bar_w / 2, y + 12, mem_eff(row) * 100);
		y += row_h;
	}
	fputs("</svg>\n<h2>Table</h2>\n<table id=\"report\"><tr><th class=\"k\">period</th>", f);
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		fputs("<th class=\"k\">", f);
		html_str(f, h);
		fputs("</th>", f);
	}
	fputs("<th>tasks</th><th>failed</th><th>OOM-killed</th><th>time limit</th>"
	      "<th>running</th><th>core-h</th><th>cost</th><th>waste</th>"
	      "<th>CPU eff</th><th>mem eff</th></tr>\n",
	      f);
	for (size_t i = 0; i <= r->n; i++) {
		const struct report_row *row = i < r->n ? &r->rows[i] : &r->total;

		fputs(i < r->n ? "<tr><td class=\"k\">" : "<tr class=\"total\"><td class=\"k\">",
		      f);
		html_str(f, i < r->n ? row->period : "total");
		fputs("</td>", f);
		for (size_t d = 0; d < r->spec.n_dims; d++) {
			fputs("<td class=\"k\">", f);
			html_str(f, i < r->n ? row->key[d] : "");
			fputs("</td>", f);
		}
		money(m, sizeof(m), row->cents[REPORT_COST_TOTAL]);
		fprintf(f,
			"<td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td>"
			"<td>%.2f</td><td class=\"cost\">%s</td>",
			row->q[COLL_SUM_TASKS], row->q[COLL_SUM_FAILED_TASKS],
			row->q[COLL_SUM_OOM_KILLED], row->q[COLL_SUM_TIME_LIMIT],
			row->q[REPORT_Q_RUNNING], row->q[COLL_SUM_CPU_CHARGED_CORE_S] / 3600, m);
		money(m, sizeof(m), row->cents[REPORT_COST_WASTE]);
		fprintf(f, "<td>%s</td><td>%.1f%%</td><td>%.1f%%</td></tr>\n", m,
			cpu_eff(row) * 100, mem_eff(row) * 100);
	}
	fprintf(f,
		"</table>\n<p><small>%s. %s. Costs are rounded to the cent per account, "
		"user and day, so every grouping sums to the total.</small></p>\n"
		"</body></html>\n",
		note_limits, note_mem);
}

int report_write(const struct report *r, enum report_format fmt, FILE *out)
{
	switch (fmt) {
	case REPORT_FMT_TABLE:
		write_table(r, out);
		break;
	case REPORT_FMT_CSV:
		write_csv(r, out);
		break;
	case REPORT_FMT_JSON:
		write_json(r, out);
		break;
	case REPORT_FMT_HTML:
		write_html(r, out);
		break;
	default:
		return -EINVAL;
	}
	return ferror(out) ? -EIO : 0;
}
