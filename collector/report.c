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
#include "collector/capacity.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/growbuf.h"
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
		return err_set(err, errlen, -EINVAL, "from: expected a date YYYY-MM-DD");
	}
	if (!to || !valid_day(to)) {
		return err_set(err, errlen, -EINVAL, "to: expected a date YYYY-MM-DD");
	}
	if (strcmp(from, to) >= 0) {
		return err_set(err, errlen, -EINVAL, "to: must be after from (to is exclusive)");
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
			return err_set(err, errlen, -EINVAL, "by: at most %d dimensions",
				       REPORT_DIMS_MAX);
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
				return err_set(err, errlen, -EINVAL,
					       "by: at most one label: dimension");
			}
			if (l - 6 >= PRICE_LABEL_MAX) {
				return err_set(err, errlen, -EINVAL, "by: label key too long");
			}
			memcpy(spec->label_key, p + 6, l - 6);
			spec->label_key[l - 6] = 0;
			have_label = true;
			spec->dims[spec->n_dims++] = REPORT_DIM_LABEL;
		} else {
			return err_set(err, errlen, -EINVAL,
				       "by: expected account, user, job, node or label:KEY "
				       "(comma-separated), "
				       "got '%.*s'",
				       (int)MIN(l, (size_t)64), p);
		}
		for (size_t i = 0; i + 1 < spec->n_dims; i++)
			if (spec->dims[i] == spec->dims[spec->n_dims - 1]) {
				return err_set(err, errlen, -EINVAL, "by: dimension repeated");
			}
		p = *e ? e + 1 : e;
		if (*e && !*p) {
			return err_set(err, errlen, -EINVAL, "by: trailing comma");
		}
	}
	if (spec->n_dims == 0) {
		return err_set(err, errlen, -EINVAL, "by: empty");
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
	return err_set(err, errlen, -EINVAL, "period: expected day, week, month or all");
}

int report_spec_set_idle(struct report_spec *spec, const char *rule, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		enum report_idle idle;
	} rules[] = {{"row", REPORT_IDLE_ROW},
		     {"proportional", REPORT_IDLE_PROPORTIONAL},
		     {"by-request", REPORT_IDLE_BY_REQUEST}};

	for (size_t i = 0; i < ARRAY_SIZE(rules); i++)
		if (strcmp(rule, rules[i].name) == 0) {
			spec->idle = rules[i].idle;
			return 0;
		}
	if (strncmp(rule, "to:", 3) == 0 && rule[3] &&
	    strlen(rule + 3) < sizeof(spec->idle_account)) {
		spec->idle = REPORT_IDLE_TO_ACCOUNT;
		snprintf(spec->idle_account, sizeof(spec->idle_account), "%s", rule + 3);
		return 0;
	}
	return err_set(err, errlen, -EINVAL,
		       "share-idle: expected proportional, by-request or to:ACCOUNT, got '%.64s'",
		       rule);
}

int report_spec_check(const struct report_spec *spec, char *err, size_t errlen)
{
	bool account = false;

	for (size_t d = 0; d < spec->n_dims; d++)
		account |= spec->dims[d] == REPORT_DIM_ACCOUNT;
	if (spec->idle == REPORT_IDLE_TO_ACCOUNT && !account)
		return err_set(err, errlen, -EINVAL,
			       "share-idle: to:%s needs account among the --by dimensions",
			       spec->idle_account);
	return 0;
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

/* out = day + n days (YYYY-MM-DD; day may be a month YYYY-MM, taken as its first day) */
void report_day_add(const char *day, int n, char out[11])
{
	struct tm tm = {0};
	char buf[11];
	time_t t;

	snprintf(buf, sizeof(buf), strlen(day) == 7 ? "%.7s-01" : "%.10s", day);
	if (!strptime(buf, "%Y-%m-%d", &tm)) {
		memcpy(out, buf, 11);
		return;
	}
	t = timegm(&tm) + (time_t)n * 86400;
	gmtime_r(&t, &tm);
	strftime(out, 11, "%Y-%m-%d", &tm);
}

/* The label of the period holding day (see REPORT_PERIOD_LEN); to_last: the range's last day. */
void report_period_of(const struct report_spec *spec, const char *to_last, const char *day,
		      char out[REPORT_PERIOD_LEN])
{
	struct tm tm = {0};

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
		snprintf(out, REPORT_PERIOD_LEN, "%s..%s", spec->from, to_last);
		return;
	case REPORT_PERIOD_WEEK:
		break;
	}
	/* ISO 8601 week, with its ISO year (2027-01-01 is in 2026-W53) */
	if (!strptime(day, "%Y-%m-%d", &tm)) {
		snprintf(out, REPORT_PERIOD_LEN, "%.10s", day);
		return;
	}
	{
		time_t t = timegm(&tm);

		gmtime_r(&t, &tm);
	}
	strftime(out, REPORT_PERIOD_LEN, "%G-W%V", &tm);
}

/* The first and last day (inclusive) of the period holding day, clipped to the range (whose
 * last day is to_last). */
void report_period_days(const struct report_spec *spec, const char *to_last, const char *day,
			char first[11], char last[11])
{
	struct tm tm = {0};

	switch (spec->period) {
	case REPORT_PERIOD_DAY:
		snprintf(first, 11, "%.10s", day);
		memcpy(last, first, 11);
		break;
	case REPORT_PERIOD_WEEK:
		report_day_add(day, 0, first);
		if (strptime(first, "%Y-%m-%d", &tm)) {
			time_t t = timegm(&tm);

			gmtime_r(&t, &tm);
			report_day_add(first, -((tm.tm_wday + 6) % 7), first);
		}
		report_day_add(first, 6, last);
		break;
	case REPORT_PERIOD_MONTH: {
		char next[11];
		int y = 0, m = 0;

		snprintf(first, 11, "%.7s-01", day);
		if (sscanf(first, "%4d-%2d", &y, &m) == 2 && ++m > 12) {
			m = 1;
			y++;
		}
		snprintf(next, sizeof(next), "%04d-%02d-01", y, m);
		report_day_add(next, -1, last);
		break;
	}
	case REPORT_PERIOD_ALL:
		memcpy(first, spec->from, 11);
		memcpy(last, to_last, 11);
		break;
	}
	if (strcmp(first, spec->from) < 0)
		memcpy(first, spec->from, 11);
	if (strcmp(last, to_last) > 0)
		memcpy(last, to_last, 11);
}

/* ---- reading the rollups ---- */

/*
 * Strings of a report are interned: each distinct text is stored once (the rollups repeat a
 * few accounts, users, jobs and nodes over many rows), so rows cost no allocation and equal
 * strings are equal pointers (the grouping hashes pointers).
 */
struct strtab {
	const char **slot; /* open addressing, NULL = free */
	size_t cap, n;
	char **blocks; /* storage of the texts */
	size_t nblocks, used;
};

#define STRTAB_BLOCK 65536

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static int strtab_grow(struct strtab *t)
{
	const size_t nc = t->cap ? t->cap * 2 : 1024;
	const char **ns = calloc(nc, sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	for (size_t i = 0; i < t->cap; i++)
		if (t->slot[i]) {
			size_t j = str_hash(t->slot[i]) & (nc - 1);

			while (ns[j])
				j = (j + 1) & (nc - 1);
			ns[j] = t->slot[i];
		}
	free(t->slot);
	t->slot = ns;
	t->cap = nc;
	return 0;
}

/* The interned copy of s; NULL on -ENOMEM. */
static const char *intern(struct strtab *t, const char *s)
{
	const size_t len = strlen(s) + 1;
	size_t j;
	char *p;

	if (t->n * 2 >= t->cap && strtab_grow(t) < 0)
		return NULL;
	for (j = str_hash(s) & (t->cap - 1); t->slot[j]; j = (j + 1) & (t->cap - 1))
		if (strcmp(t->slot[j], s) == 0)
			return t->slot[j];
	if (len > STRTAB_BLOCK)
		return NULL; /* rollup keys are short: cannot happen */
	if (t->nblocks == 0 || t->used + len > STRTAB_BLOCK) {
		char **nb = realloc(t->blocks, (t->nblocks + 1) * sizeof(*nb));

		if (!nb)
			return NULL;
		t->blocks = nb;
		t->blocks[t->nblocks] = malloc(STRTAB_BLOCK);
		if (!t->blocks[t->nblocks])
			return NULL;
		t->nblocks++;
		t->used = 0;
	}
	p = t->blocks[t->nblocks - 1] + t->used;
	memcpy(p, s, len);
	t->used += len;
	t->slot[j] = p;
	t->n++;
	return p;
}

static void strtab_free(struct strtab *t)
{
	for (size_t i = 0; i < t->nblocks; i++)
		free(t->blocks[i]);
	free(t->blocks);
	free(t->slot);
}

/* A (day, account, user) cell of rollup_day, the unit of rounding. Its parts, chained: label
 * rows (rollup_label_day), job/node rows (rollup_job_day) and, when a label is combined with
 * job or node, the label's rows per job and node (rollup_job_label_day) of the same key. */
struct cell {
	const char *day, *account, *user; /* interned */
	double v[REPORT_Q_MAX];
	ssize_t first_label;		 /* index into parts, -1 = none */
	ssize_t first_part;		 /* job/node rows, same array */
	ssize_t first_jlabel;		 /* label rows per job/node, same array */
	int64_t cents[_REPORT_COST_MAX]; /* month cells: the sum of their day cells' cents */
};

enum part_kind { PART_LABEL, PART_JOB, PART_JOB_LABEL };

struct lcell {
	const char *key, *value; /* label rows (interned, "" for job/node rows) */
	const char *job, *node;	 /* job/node rows (interned, "" for label rows) */
	double v[REPORT_Q_MAX];
	ssize_t next;
};

/* The share of a running task in one day of the report, before the cells are sorted. */
struct open_share {
	char day[11];
	const char *account, *user, *job, *node; /* interned */
	char *labels;
	double v[REPORT_Q_MAX];
};

struct reader {
	const struct report_spec *spec;
	const struct price_sheet *ps;
	struct strtab strs;
	struct cell *cells;
	size_t n, cap;
	struct lcell *labels;
	size_t nl, capl;
	struct open_share *open;
	size_t no, capo;
	size_t open_rows;
	size_t last; /* cell_find's last answer */
	/* Month cells (see month_mode()): (month, account, user), split by rollup_job_month */
	bool month_mode;
	char full_from[8], full_to[8]; /* the whole months of the range: from <= month < to */
	struct cell *mcells;
	size_t nm, capm, mlast;
	uint64_t from_ns, to_ns;
	char to_last[11]; /* the range's last day */
	/* carbon (docs/reports.md "Carbon"): the energy without an intensity; the zone of a
	 * node cached by its interned name (direct-mapped) */
	double carbon_uncovered_j;
	struct {
		const char *node;
		int zone;
	} zone_cache[1024];
	int err;
};

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

	if (grow_array((void **)&rd->cells, &rd->cap, rd->n, sizeof(*rd->cells)) < 0)
		return -ENOMEM;
	c = &rd->cells[rd->n];
	memset(c, 0, sizeof(*c));
	c->day = intern(&rd->strs, day);
	c->account = intern(&rd->strs, account);
	c->user = intern(&rd->strs, user);
	if (!c->day || !c->account || !c->user)
		return -ENOMEM;
	memcpy(c->v, v, nv * sizeof(double));
	c->first_label = c->first_part = c->first_jlabel = -1;
	rd->n++;
	return 0;
}

static int day_cb(const struct coll_rollup_row *row, void *ud)
{
	return cell_add(ud, row->bucket, row->account, row->user, row->v, _COLL_SUM_MAX);
}

static struct cell *cell_find_in(struct cell *cells, size_t n, size_t *last, const char *day,
				 const char *account, const char *user)
{
	size_t lo = 0, hi = n;

	/* the part rows come in key order: most belong to the cell found last, or the next */
	for (size_t i = *last; i < n && i <= *last + 1; i++)
		if (cell_cmp3(day, account, user, &cells[i]) == 0) {
			*last = i;
			return &cells[i];
		}

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int r = cell_cmp3(day, account, user, &cells[mid]);

		if (r == 0) {
			*last = mid;
			return &cells[mid];
		}
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

static struct cell *cell_find(struct reader *rd, const char *day, const char *account,
			      const char *user)
{
	return cell_find_in(rd->cells, rd->n, &rd->last, day, account, user);
}

/* Whether day (YYYY-MM-DD) or month (YYYY-MM) is in a whole month of a month_mode report. */
static bool in_full_month(const struct reader *rd, const char *day)
{
	return rd->month_mode && strncmp(day, rd->full_from, 7) >= 0 &&
	       strncmp(day, rd->full_to, 7) < 0;
}

/* The cell of a day's row or share: its month cell in the whole months of a month_mode
 * report, else its day cell. */
static struct cell *part_cell(struct reader *rd, const char *day, const char *account,
			      const char *user)
{
	char month[8];

	if (!in_full_month(rd, day))
		return cell_find(rd, day, account, user);
	snprintf(month, sizeof(month), "%.7s", day);
	return cell_find_in(rd->mcells, rd->nm, &rd->mlast, month, account, user);
}

/* Chains a part of kind k to cell c. */
static int part_add(struct reader *rd, struct cell *c, enum part_kind k, const char *key,
		    const char *value, const char *job, const char *node, const double *v,
		    size_t nv)
{
	struct lcell *l;
	ssize_t *first = k == PART_LABEL ? &c->first_label
			 : k == PART_JOB ? &c->first_part
					 : &c->first_jlabel;

	if (grow_array((void **)&rd->labels, &rd->capl, rd->nl, sizeof(*rd->labels)) < 0)
		return -ENOMEM;
	l = &rd->labels[rd->nl];
	memset(l, 0, sizeof(*l));
	l->key = intern(&rd->strs, key ?: "");
	l->value = intern(&rd->strs, value ?: "");
	l->job = intern(&rd->strs, job ?: "");
	l->node = intern(&rd->strs, node ?: "");
	if (!l->key || !l->value || !l->job || !l->node)
		return -ENOMEM;
	memcpy(l->v, v, nv * sizeof(double));
	l->next = *first;
	*first = (ssize_t)rd->nl++;
	return 0;
}

static bool label_wanted(const struct reader *rd, const char *key)
{
	return (rd->ps->override_key[0] && strcmp(key, rd->ps->override_key) == 0) ||
	       (rd->spec->label_key[0] && strcmp(key, rd->spec->label_key) == 0);
}

/* A label combined with job or node: the cells are split by job/node and that label. */
static bool split_job_label(const struct report_spec *spec)
{
	return spec->parts && spec->label_key[0];
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
	return part_add(rd, c, PART_LABEL, row->label_key, row->label_value, NULL, NULL, row->v,
			_COLL_SUM_MAX);
}

static int job_cb(const struct coll_rollup_row *row, void *ud)
{
	struct reader *rd = ud;
	struct cell *c = part_cell(rd, row->bucket, row->account, row->user);

	if (!c)
		return 0; /* cannot happen: job rows come with their day row */
	return part_add(rd, c, PART_JOB, NULL, NULL, row->job, row->node, row->v, _COLL_SUM_MAX);
}

static int job_label_cb(const struct coll_rollup_row *row, void *ud)
{
	struct reader *rd = ud;
	struct cell *c;

	if (strcmp(row->label_key, rd->spec->label_key) != 0)
		return 0;
	c = cell_find(rd, row->bucket, row->account, row->user);
	if (!c)
		return 0; /* cannot happen: these rows come with their day row */
	return part_add(rd, c, PART_JOB_LABEL, row->label_key, row->label_value, row->job,
			row->node, row->v, _COLL_SUM_MAX);
}

static uint64_t day_start_ns(const char *day)
{
	struct tm tm = {0};

	if (!strptime(day, "%Y-%m-%d", &tm))
		return 0;
	return (uint64_t)timegm(&tm) * NSEC_PER_SEC;
}

uint64_t report_day_start_ns(const char *day)
{
	return day_start_ns(day);
}

#define DAY_NS (86400ULL * NSEC_PER_SEC)

int report_open_days(const struct coll_open_row *row, uint64_t from_ns, uint64_t to_ns,
		     report_day_fn fn, void *ud)
{
	const uint64_t wall = row->sample_ns > row->start_ns ? row->sample_ns - row->start_ns : 0;
	uint64_t a = MAX(row->start_ns, from_ns), b = MIN(row->sample_ns, to_ns);

	if (wall == 0) {
		if (row->sample_ns < from_ns || row->sample_ns >= to_ns)
			return 0;
		a = b = row->sample_ns;
	} else if (b <= a)
		return 0;
	for (uint64_t d = a / DAY_NS * DAY_NS; d <= (b > a ? b - 1 : b); d += DAY_NS) {
		const double frac =
		    wall ? (double)(MIN(b, d + DAY_NS) - MAX(a, d)) / (double)wall : 1.0;
		time_t secs = (time_t)(d / NSEC_PER_SEC);
		struct tm tm;
		char day[16];
		int r;

		gmtime_r(&secs, &tm);
		strftime(day, sizeof(day), "%Y-%m-%d", &tm);
		r = fn(day, frac, d + DAY_NS >= b, ud);
		if (r < 0)
			return r;
	}
	return 0;
}

struct open_day {
	struct reader *rd;
	const struct coll_open_row *row;
};

/* A running task's share of one day (report_open_days): counted as running once, in the last
 * day; carried into the next day before it. */
static int open_day(const char *day, double frac, bool last, void *ud)
{
	const struct open_day *x = ud;
	struct reader *rd = x->rd;
	const struct coll_open_row *row = x->row;
	struct open_share *o;

	if (grow_array((void **)&rd->open, &rd->capo, rd->no, sizeof(*rd->open)) < 0)
		return -ENOMEM;
	o = &rd->open[rd->no];
	memset(o, 0, sizeof(*o));
	snprintf(o->day, sizeof(o->day), "%s", day);
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		o->v[s] = coll_sum_is_count(s) ? 0 : row->v[s] * frac;
	o->v[REPORT_Q_RUNNING] = last ? 1 : 0;
	o->v[COLL_SUM_CARRIED_TASKS] = last ? 0 : 1; /* runs on into the next day */
	o->account = intern(&rd->strs, row->account);
	o->user = intern(&rd->strs, row->user);
	o->job = intern(&rd->strs, row->job);
	o->node = intern(&rd->strs, row->node);
	o->labels = strdup(row->labels);
	rd->no++;
	if (!o->account || !o->user || !o->job || !o->node || !o->labels)
		return -ENOMEM;
	return 0;
}

/*
 * A running task, from its latest sample: what the sample measured over [start, sample] is
 * spread over the days of that interval in proportion, like a task.end at ingest; only the
 * days inside the report count (so it is charged up to the report's end, and from its
 * start). It is counted as running once, in the last such day.
 */
static int open_cb(const struct coll_open_row *row, void *ud)
{
	struct reader *rd = ud;
	struct open_day x = {.rd = rd, .row = row};

	rd->open_rows++;
	return report_open_days(row, rd->from_ns, rd->to_ns, open_day, &x);
}

/* Sorted cells with duplicate keys (from running tasks; day cells of one month) merged. */
static void cells_sort_merge(struct cell *cells, size_t *n)
{
	size_t out = 0;

	if (*n == 0)
		return;
	qsort(cells, *n, sizeof(*cells), cell_sort_cmp);
	for (size_t i = 0; i < *n; i++) {
		struct cell *c = &cells[i];

		if (out > 0 && cell_sort_cmp(&cells[out - 1], c) == 0) {
			for (int s = 0; s < REPORT_Q_MAX; s++)
				cells[out - 1].v[s] += c->v[s];
			continue;
		}
		if (out != i)
			cells[out] = *c;
		out++;
	}
	*n = out;
}

/*
 * Month mode: a report by job and/or node (no label) per month or for all of its range reads
 * rollup_job_month for the whole months of the range instead of rollup_job_day (30 times
 * fewer rows): the day cells of (month, account, user) keep their cents, which are summed
 * into one month cell and apportioned to its job/node rows. Partial months at the range's
 * ends are split by day, as in other periods.
 */
static void month_mode_init(struct reader *rd)
{
	const struct report_spec *spec = rd->spec;
	int y, m;

	if (!spec->parts || spec->label_key[0] ||
	    (spec->period != REPORT_PERIOD_MONTH && spec->period != REPORT_PERIOD_ALL))
		return;
	if (sscanf(spec->from, "%4d-%2d", &y, &m) != 2)
		return;
	if (strcmp(spec->from + 8, "01") != 0 && ++m > 12) {
		m = 1;
		y++;
	}
	snprintf(rd->full_from, sizeof(rd->full_from), "%04d-%02d", y, m);
	snprintf(rd->full_to, sizeof(rd->full_to), "%.7s", spec->to);
	rd->month_mode = strcmp(rd->full_from, rd->full_to) < 0;
}

/* The month cells: the day cells of the whole months summed per (month, account, user). */
static int mcells_build(struct reader *rd)
{
	for (size_t i = 0; i < rd->n; i++) {
		const struct cell *c = &rd->cells[i];
		struct cell *mc;
		char month[8];

		if (!in_full_month(rd, c->day))
			continue;
		if (grow_array((void **)&rd->mcells, &rd->capm, rd->nm, sizeof(*rd->mcells)) < 0)
			return -ENOMEM;
		mc = &rd->mcells[rd->nm++];
		*mc = *c;
		if (!coll_day_is_month_end(c->day)) /* the month's last day's only */
			mc->v[COLL_SUM_CARRIED_TASKS] = 0;
		snprintf(month, sizeof(month), "%.7s", c->day);
		mc->day = intern(&rd->strs, month);
		if (!mc->day)
			return -ENOMEM;
		mc->first_label = mc->first_part = mc->first_jlabel = -1;
	}
	cells_sort_merge(rd->mcells, &rd->nm);
	return 0;
}

/* The running tasks' shares as parts of their cells: job/node, the wanted labels and, for a
 * label combined with job or node, that label per job/node. */
static int open_parts(struct reader *rd)
{
	for (size_t i = 0; i < rd->no; i++) {
		const struct open_share *o = &rd->open[i];
		struct cell *c = cell_find(rd, o->day, o->account, o->user);
		struct cell *pc = part_cell(rd, o->day, o->account, o->user);
		json_t *labels, *val;
		const char *key;
		int r = 0;

		if (!c || !pc)
			return -EIO; /* cannot happen: a cell was added for every share */
		if (rd->spec->parts) {
			double v[REPORT_Q_MAX];

			memcpy(v, o->v, sizeof(v));
			if (pc != c && !coll_day_is_month_end(o->day)) /* a month part */
				v[COLL_SUM_CARRIED_TASKS] = 0;
			r = part_add(rd, pc, PART_JOB, NULL, NULL, o->job, o->node, v,
				     REPORT_Q_MAX);
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
				r = part_add(rd, c, PART_LABEL, key, json_string_value(val), NULL,
					     NULL, o->v, REPORT_Q_MAX);
			if (r >= 0 && json_is_string(val) && split_job_label(rd->spec) &&
			    strcmp(key, rd->spec->label_key) == 0)
				r = part_add(rd, c, PART_JOB_LABEL, key, json_string_value(val),
					     o->job, o->node, o->v, REPORT_Q_MAX);
		}
		json_decref(labels);
		if (r < 0)
			return r;
	}
	return 0;
}

static void reader_free(struct reader *rd)
{
	for (size_t i = 0; i < rd->no; i++)
		free(rd->open[i].labels);
	free(rd->cells);
	free(rd->mcells);
	free(rd->labels);
	free(rd->open);
	strtab_free(&rd->strs);
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
	out[REPORT_COST_IDLE] = 0;
	out[REPORT_COST_SHARED] = 0;
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

int64_t report_cents(double money)
{
	return to_cents(money);
}

int64_t report_weight(double money)
{
	const double u = round(money * 10000.0);

	if (!(u > 0))
		return 0;
	return u > 1e18 ? (int64_t)1e18 : (int64_t)u;
}

int64_t report_shared_spread(int64_t amount, enum report_spread rule, const int64_t *w, size_t n,
			     int64_t *out)
{
	const int64_t mag = amount < 0 ? -amount : amount;
	int64_t sum = 0;

	if (n == 0)
		return amount;
	memset(out, 0, n * sizeof(*out));
	if (amount == 0)
		return 0;
	if (rule == REPORT_SPREAD_EVEN) {
		for (size_t i = 0; i < n; i++)
			out[i] = mag / (int64_t)n + ((int64_t)i < mag % (int64_t)n ? 1 : 0);
	} else {
		for (size_t i = 0; i < n && sum == 0; i++)
			sum = w[i] > 0 ? w[i] : 0;
		if (sum == 0)
			return amount; /* no weight: nothing to spread by */
		report_apportion(mag, w, n, out);
	}
	if (amount < 0)
		for (size_t i = 0; i < n; i++)
			out[i] = -out[i];
	return 0;
}

int64_t report_shared_day_cents(int64_t monthly, const char *day)
{
	static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int64_t w[31], out[31];
	int y, m, d, nd;
	char tail;

	if (!day || sscanf(day, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || m < 1 || m > 12)
		return 0;
	nd = mdays[m - 1] + (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0));
	if (d < 1 || d > nd)
		return 0;
	for (int i = 0; i < nd; i++)
		w[i] = 1;
	report_shared_spread(monthly, REPORT_SPREAD_EVEN, w, (size_t)nd, out);
	return out[d - 1];
}

void report_apportion(int64_t total, const int64_t *w, size_t n, int64_t *out)
{
	__int128 sum = 0;
	int64_t given = 0;

	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++)
		sum += w[i] > 0 ? w[i] : 0;
	memset(out, 0, n * sizeof(*out));
	if (sum == 0 || total <= 0) {
		out[0] = total;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		out[i] = (int64_t)((__int128)total * (w[i] > 0 ? w[i] : 0) / sum);
		given += out[i];
	}
	/* fewer than n cents left: one each to the largest remainders (total * w mod sum) among
	 * the parts that have none yet, ties to the lower index */
	while (given < total) {
		__int128 best_rem = -1;
		size_t best = 0;

		for (size_t i = 0; i < n; i++) {
			const __int128 p = (__int128)total * (w[i] > 0 ? w[i] : 0);

			if (out[i] > (int64_t)(p / sum))
				continue; /* had its cent */
			if (p % sum > best_rem) {
				best_rem = p % sum;
				best = i;
			}
		}
		out[best]++;
		given++;
	}
}

/* ---- grouping ---- */

/* A report row while it is built: keys interned, found by a hash of the key pointers. */
struct group {
	const char *period;
	const char *day; /* a day (or month cell) of the period, for its first and last day */
	const char *key[REPORT_DIMS_MAX];
	double q[REPORT_Q_MAX];
	int64_t cents[_REPORT_COST_MAX];
};

struct groups {
	size_t n_dims;
	bool carry; /* the cells added now end on their period's last day: their carried count
		     * is the period's */
	struct group *v;
	size_t n, cap;
	size_t *slot; /* index + 1 into v, 0 = free */
	size_t nslot;
};

static uint64_t group_hash(const struct groups *g, const char *period, const char *const *key)
{
	uint64_t h = (uint64_t)(uintptr_t)period * 0x9e3779b97f4a7c15ULL;

	for (size_t d = 0; d < g->n_dims; d++)
		h = (h ^ (uint64_t)(uintptr_t)key[d]) * 0x100000001b3ULL;
	return h ^ (h >> 29);
}

static bool group_is(const struct groups *g, const struct group *x, const char *period,
		     const char *const *key)
{
	if (x->period != period)
		return false;
	for (size_t d = 0; d < g->n_dims; d++)
		if (x->key[d] != key[d])
			return false;
	return true;
}

static uint64_t group_hash_at(const void *ctx, size_t i)
{
	const struct groups *g = ctx;

	return group_hash(g, g->v[i].period, g->v[i].key);
}

/* Adds quantities q and cents to the group of (period, key), created on first use. */
static int group_add(struct groups *g, const char *period, const char *day, const char *const *key,
		     const double *q, const int64_t *cents)
{
	struct group *x;
	size_t j;

	if (g->n * 2 >= g->nslot &&
	    slot_index_grow(&g->slot, &g->nslot, 4096, g->n, group_hash_at, g) < 0)
		return -ENOMEM;
	for (j = group_hash(g, period, key) & (g->nslot - 1); g->slot[j];
	     j = (j + 1) & (g->nslot - 1))
		if (group_is(g, &g->v[g->slot[j] - 1], period, key))
			break;
	if (g->slot[j])
		x = &g->v[g->slot[j] - 1];
	else {
		if (grow_array((void **)&g->v, &g->cap, g->n, sizeof(*g->v)) < 0)
			return -ENOMEM;
		x = &g->v[g->n];
		memset(x, 0, sizeof(*x));
		x->period = period;
		x->day = day;
		memcpy(x->key, key, g->n_dims * sizeof(*key));
		g->slot[j] = ++g->n;
	}
	for (int s = 0; s < REPORT_Q_MAX; s++)
		if (s != COLL_SUM_CARRIED_TASKS || g->carry)
			x->q[s] += q[s];
	for (int k = 0; k < _REPORT_COST_MAX; k++)
		x->cents[k] += cents[k];
	return 0;
}

static int group_cmp(const void *x, const void *y, void *ud)
{
	const struct group *a = x, *b = y;
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

struct emit {
	struct reader *rd;
	struct groups *g;
	const char *none;      /* interned NONE_VAL */
	const char *carry_day; /* the day (or month) g->carry was set for */
};

/* The value of dimension d for a part; an empty or missing value (no account, a blank label,
 * no such label) is NONE_VAL in every format. */
static const char *dim_value(const struct emit *e, size_t d, const struct cell *c,
			     const char *label, const struct lcell *part)
{
	const char *v = NULL;

	switch (e->rd->spec->dims[d]) {
	case REPORT_DIM_ACCOUNT:
		v = c->account;
		break;
	case REPORT_DIM_USER:
		v = c->user;
		break;
	case REPORT_DIM_LABEL:
		v = label;
		break;
	case REPORT_DIM_JOB:
		v = part ? part->job : NULL;
		break;
	case REPORT_DIM_NODE:
		v = part ? part->node : NULL;
		break;
	}
	return v && *v ? v : e->none;
}

/*
 * The rest of a whole after its parts were taken away (rest = whole - parts): negative
 * results and the rounding residue of subtracting sums made in another order (relative to the
 * whole, far below any measured quantity) are zero, so that a part with nothing in it makes no
 * row.
 */
static void rest_clean(double *rest, const double *whole)
{
	for (int s = 0; s < REPORT_Q_MAX; s++)
		if (!(rest[s] > 1e-11 * fabs(whole[s])))
			rest[s] = 0;
}

struct key_sort {
	const char *const (*keys)[REPORT_DIMS_MAX];
	size_t n_dims;
};

static int key_sort_cmp(const void *x, const void *y, void *ud)
{
	const struct key_sort *ks = ud;
	const size_t a = *(const size_t *)x, b = *(const size_t *)y;
	int r = 0;

	for (size_t d = 0; !r && d < ks->n_dims; d++)
		r = strcmp(ks->keys[a][d], ks->keys[b][d]);
	return r ? r : (a > b) - (a < b);
}

/*
 * Splits cell c (cents already rounded) into its report rows: parts[i] has quantities q[i],
 * keyed by label[i] / part[i]; the parts of one key (row) are taken together. The cents of
 * each component are apportioned to the keys by report_apportion, weighted by the keys'
 * money (report_weight of the sum of their parts' money at price set p[i]), the keys in
 * ascending order (ties to the lowest key), so the rows sum to the cell exactly and anyone
 * can compute the same cents from the same quantities.
 */
static int emit_parts(const struct emit *e, const struct cell *c, const char *period,
		      const int64_t cents[], size_t n, const double *const *q,
		      const struct price_set *const *p, const char *const *label,
		      const struct lcell *const *part)
{
	const struct report_spec *spec = e->rd->spec;
	_cleanup_free_ const char *(*keys)[REPORT_DIMS_MAX] = calloc(n, sizeof(*keys));
	_cleanup_free_ size_t *idx = calloc(n, sizeof(size_t)), *kof = calloc(n, sizeof(size_t));
	_cleanup_free_ double *mk = calloc(n * _REPORT_COST_MAX, sizeof(double));
	_cleanup_free_ int64_t *w = calloc(n * _REPORT_COST_MAX, sizeof(int64_t));
	_cleanup_free_ int64_t *out = calloc(n * _REPORT_COST_MAX, sizeof(int64_t));
	struct key_sort ks = {.keys = (const char *const(*)[REPORT_DIMS_MAX])keys,
			      .n_dims = spec->n_dims};
	double m[_REPORT_COST_MAX];
	size_t nk = 0;

	if (!keys || !idx || !kof || !mk || !w || !out)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		idx[i] = i;
		for (size_t d = 0; d < spec->n_dims; d++)
			keys[i][d] =
			    dim_value(e, d, c, label ? label[i] : NULL, part ? part[i] : NULL);
	}
	qsort_r(idx, n, sizeof(*idx), key_sort_cmp, &ks);
	for (size_t j = 0; j < n; j++) {
		const size_t i = idx[j];

		/* keys are interned: equal keys are equal pointers */
		if (j == 0 || memcmp(keys[i], keys[idx[j - 1]], spec->n_dims * sizeof(char *)))
			nk++;
		kof[i] = nk - 1;
		price_quantities(q[i], p[i], m);
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			mk[kof[i] * _REPORT_COST_MAX + (size_t)k] += m[k];
	}
	for (size_t j = 0; j < nk; j++)
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			w[(size_t)k * nk + j] = report_weight(mk[j * _REPORT_COST_MAX + (size_t)k]);
	for (int k = 0; k < _REPORT_COST_MAX; k++)
		if (k != REPORT_COST_TOTAL)
			report_apportion(cents[k], &w[(size_t)k * nk], nk, &out[(size_t)k * nk]);
	for (size_t j = 0; j < n; j++) {
		const size_t i = idx[j], key = kof[i];
		const bool first = j == 0 || kof[idx[j - 1]] != key;
		int64_t pc[_REPORT_COST_MAX] = {0};
		int r;

		for (int k = 0; first && k < _REPORT_COST_MAX; k++) {
			if (k == REPORT_COST_TOTAL)
				continue;
			pc[k] = out[(size_t)k * nk + key];
			if (k < REPORT_COST_TOTAL)
				pc[REPORT_COST_TOTAL] += pc[k];
		}
		r = group_add(e->g, period, c->day, keys[i], q[i], pc);
		if (r < 0)
			return r;
	}
	return 0;
}

static int jl_cmp(const void *x, const void *y)
{
	const struct lcell *a = *(const struct lcell *const *)x,
			   *b = *(const struct lcell *const *)y;
	int r;

	if ((r = strcmp(a->job, b->job)) || (r = strcmp(a->node, b->node)))
		return r;
	return strcmp(a->value, b->value);
}

/*
 * A label combined with job or node: the cell's job/node rows (several per job/node when
 * running tasks add theirs), each split into its rows of the label (rollup_job_label_day) and
 * NONE_VAL for the rest of it (the job/node's tasks without that label).
 */
static int emit_job_label(const struct emit *e, const struct cell *c, const char *period,
			  const int64_t cents[])
{
	const struct reader *rd = e->rd;
	const bool priced = strcmp(rd->spec->label_key, rd->ps->override_key) == 0;
	size_t nj = 0, nl = 0, n = 0, ng = 0, a = 0, b = 0;
	_cleanup_free_ const struct lcell **jp = NULL, **lp = NULL, **part = NULL;
	_cleanup_free_ const double **q = NULL;
	_cleanup_free_ const struct price_set **p = NULL;
	_cleanup_free_ const char **label = NULL;
	_cleanup_free_ double(*rest)[REPORT_Q_MAX] = NULL;

	for (ssize_t li = c->first_part; li >= 0; li = rd->labels[li].next)
		nj++;
	for (ssize_t li = c->first_jlabel; li >= 0; li = rd->labels[li].next)
		nl++;
	jp = calloc(nj + 1, sizeof(*jp));
	lp = calloc(nl + 1, sizeof(*lp));
	part = calloc(nj + nl + 1, sizeof(*part));
	q = calloc(nj + nl + 1, sizeof(*q));
	p = calloc(nj + nl + 1, sizeof(*p));
	label = calloc(nj + nl + 1, sizeof(*label));
	rest = calloc(nj + 1, sizeof(*rest));
	if (!jp || !lp || !part || !q || !p || !label || !rest)
		return -ENOMEM;
	for (ssize_t li = c->first_part; li >= 0; li = rd->labels[li].next)
		jp[a++] = &rd->labels[li];
	for (ssize_t li = c->first_jlabel; li >= 0; li = rd->labels[li].next)
		lp[b++] = &rd->labels[li];
	/* job rows have value "": sorted by (job, node) like the label rows */
	qsort(jp, nj, sizeof(*jp), jl_cmp);
	qsort(lp, nl, sizeof(*lp), jl_cmp);
	for (a = 0, b = 0; a < nj || b < nl;) {
		const struct lcell *j = a < nj ? jp[a] : NULL;
		int cmp = !j ? 1 : b >= nl ? -1 : strcmp(j->job, lp[b]->job);
		double *r;

		if (cmp == 0)
			cmp = strcmp(j->node, lp[b]->node);

		if (cmp > 0) { /* label rows without a job row: cannot happen, kept as they are */
			part[n] = lp[b];
			q[n] = lp[b]->v;
			label[n] = lp[b]->value;
			p[n++] = priced ? price_sheet_for(rd->ps, lp[b]->value) : &rd->ps->base;
			b++;
			continue;
		}
		double whole[REPORT_Q_MAX];

		r = rest[ng++];
		for (; a < nj && jp[a]->job == j->job && jp[a]->node == j->node; a++)
			for (int s = 0; s < REPORT_Q_MAX; s++)
				r[s] += jp[a]->v[s];
		memcpy(whole, r, sizeof(whole));
		for (; cmp == 0 && b < nl && lp[b]->job == j->job && lp[b]->node == j->node; b++) {
			part[n] = lp[b];
			q[n] = lp[b]->v;
			label[n] = lp[b]->value;
			p[n++] = priced ? price_sheet_for(rd->ps, lp[b]->value) : &rd->ps->base;
			for (int s = 0; s < REPORT_Q_MAX; s++)
				r[s] -= lp[b]->v[s];
		}
		rest_clean(r, whole);
		part[n] = j;
		q[n] = r;
		label[n] = e->none;
		p[n++] = &rd->ps->base;
	}
	return emit_parts(e, c, period, cents, n, q, p, label, part);
}

/* Groups the parts of cell c (a day cell, or a month cell) with its cents. */
static int emit_cell(struct emit *e, const struct cell *c, const int64_t cents[])
{
	const struct reader *rd = e->rd;
	const struct report_spec *spec = rd->spec;
	const char *key[REPORT_DIMS_MAX];
	char pbuf[REPORT_PERIOD_LEN];
	const char *period;
	size_t n = 0, i = 0;

	report_period_of(spec, rd->to_last, c->day, pbuf);
	period = intern(&e->rd->strs, pbuf);
	if (!period)
		return -ENOMEM;
	if (c->day != e->carry_day) { /* cells come sorted by day (then month) */
		char first[11], last[11], cday[11];

		report_period_days(spec, rd->to_last, c->day, first, last);
		if (strlen(c->day) == 7) { /* a whole month: its last day */
			report_day_add(c->day, 31, cday);
			snprintf(cday + 7, 4, "-01");
			report_day_add(cday, -1, cday);
		} else
			snprintf(cday, sizeof(cday), "%s", c->day);
		e->carry_day = c->day;
		e->g->carry = strcmp(cday, last) == 0;
	}

	if (spec->parts && c->first_part >= 0 && spec->label_key[0])
		return emit_job_label(e, c, period, cents);
	if (spec->parts && c->first_part >= 0) {
		/* split by job and node: the cell's rollup_job_day rows (which sum to it) */
		_cleanup_free_ const double **q = NULL;
		_cleanup_free_ const struct price_set **p = NULL;
		_cleanup_free_ const struct lcell **part = NULL;

		for (ssize_t li = c->first_part; li >= 0; li = rd->labels[li].next)
			n++;
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
		return emit_parts(e, c, period, cents, n, q, p, NULL, part);
	}
	if (spec->label_key[0] && !spec->parts) {
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
		rest_clean(rest, c->v);
		q[i] = rest;
		label[i] = e->none;
		p[i] = &rd->ps->base;
		return emit_parts(e, c, period, cents, n, q, p, label, NULL);
	}
	/* whole (also a cell without job/node rows: cannot happen, its parts are NONE_VAL) */
	for (size_t d = 0; d < spec->n_dims; d++)
		key[d] = dim_value(e, d, c, NULL, NULL);
	return group_add(e->g, period, c->day, key, c->v, cents);
}

/* A group with nothing in it (a label's rest where every task had the label): no row. */
static bool group_empty(const struct group *x)
{
	for (int s = 0; s < REPORT_Q_MAX; s++)
		if (x->q[s] != 0)
			return false;
	for (int k = 0; k < _REPORT_COST_MAX; k++)
		if (x->cents[k] != 0)
			return false;
	return true;
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
	for (size_t i = 0; i < r->n_nodes; i++)
		free(r->nodes[i]);
	free(r->nodes);
	r->nodes = NULL;
	r->n_nodes = 0;
	free(r->days);
	r->days = NULL;
	r->n_days = 0;
}

/* The nodes in scope: those of the job rows and running tasks, interned in a table of their
 * own (sorted afterwards). */
struct node_set {
	struct strtab t;
	const char **v;
	size_t n, cap;
};

static int node_add(struct node_set *ns, const char *node)
{
	const size_t before = ns->t.n;
	const char *p = intern(&ns->t, node);

	if (!p)
		return -ENOMEM;
	if (ns->t.n == before)
		return 0;
	if (grow_array((void **)&ns->v, &ns->cap, ns->n, sizeof(*ns->v)) < 0)
		return -ENOMEM;
	ns->v[ns->n++] = p;
	return 0;
}

static int node_cb(const struct coll_rollup_row *row, void *ud)
{
	return node_add(ud, row->node);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int report_nodes(struct coll_store *s, const struct report_spec *spec,
			const struct reader *rd, struct report *ret)
{
	struct node_set ns = {0};
	int r = coll_store_rollup_query(s, COLL_ROLLUP_JOB_DAY, spec->from, spec->to, node_cb, &ns);

	for (size_t i = 0; r >= 0 && i < rd->no; i++)
		r = node_add(&ns, rd->open[i].node);
	if (r >= 0 && ns.n) {
		qsort(ns.v, ns.n, sizeof(*ns.v), str_cmp);
		ret->nodes = calloc(ns.n, sizeof(*ret->nodes));
		if (!ret->nodes)
			r = -ENOMEM;
	}
	for (size_t i = 0; r >= 0 && i < ns.n; i++) {
		ret->nodes[i] = strdup(ns.v[i]);
		if (!ret->nodes[i])
			r = -ENOMEM;
		else
			ret->n_nodes++;
	}
	free(ns.v);
	strtab_free(&ns.t);
	return r < 0 ? r : 0;
}

/* The rollups of the job parts of a report (job, node): job_day, and job_month for the whole
 * months of a month report; job_label_day where a label splits the jobs. */
static int read_job_parts(struct coll_store *s, const struct report_spec *spec, struct reader *rd)
{
	int r = 0;

	if (spec->parts && rd->month_mode) {
		char a[11], b[11];

		snprintf(a, sizeof(a), "%s-01", rd->full_from);
		snprintf(b, sizeof(b), "%s-01", rd->full_to);
		if (strcmp(spec->from, a) < 0)
			r = coll_store_rollup_query(s, COLL_ROLLUP_JOB_DAY, spec->from, a, job_cb,
						    rd);
		if (r >= 0)
			r = coll_store_rollup_query(s, COLL_ROLLUP_JOB_MONTH, rd->full_from,
						    rd->full_to, job_cb, rd);
		if (r >= 0 && strcmp(b, spec->to) < 0)
			r = coll_store_rollup_query(s, COLL_ROLLUP_JOB_DAY, b, spec->to, job_cb,
						    rd);
		if (r < 0)
			return r;
	} else if (spec->parts) {
		r = coll_store_rollup_query(s, COLL_ROLLUP_JOB_DAY, spec->from, spec->to, job_cb,
					    rd);
		if (r < 0)
			return r;
	}
	if (split_job_label(spec)) {
		r = coll_store_rollup_query(s, COLL_ROLLUP_JOB_LABEL_DAY, spec->from, spec->to,
					    job_label_cb, rd);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The report's rows: its groups sorted by period then key, empty ones left out, cut to the top
 * spec->top by waste. */
static int rows_from_groups(const struct report_spec *spec, const struct reader *rd,
			    struct groups *g, struct report *ret)
{
	if (g->n) {
		qsort_r(g->v, g->n, sizeof(*g->v), group_cmp, &g->n_dims);
		ret->rows = calloc(g->n, sizeof(*ret->rows));
		if (!ret->rows)
			return -ENOMEM;
	}
	for (size_t i = 0; i < g->n; i++) {
		struct report_row *row;

		if (group_empty(&g->v[i]))
			continue;
		row = &ret->rows[ret->n++];
		snprintf(row->period, sizeof(row->period), "%s", g->v[i].period);
		report_period_days(spec, rd->to_last, g->v[i].day, row->first_day, row->last_day);
		for (size_t d = 0; d < spec->n_dims; d++) {
			row->key[d] = strdup(g->v[i].key[d]);
			if (!row->key[d])
				return -ENOMEM;
		}
		memcpy(row->q, g->v[i].q, sizeof(row->q));
		row->q[REPORT_Q_ACTIVE] = report_row_active(row);
		memcpy(row->cents, g->v[i].cents, sizeof(row->cents));
	}
	return 0;
}

/* --top: the N rows with the most waste, in that order. */
static void rows_top(const struct report_spec *spec, struct report *ret)
{
	if (spec->top && ret->n > spec->top) {
		qsort(ret->rows, ret->n, sizeof(*ret->rows), waste_cmp);
		for (size_t i = spec->top; i < ret->n; i++)
			for (size_t d = 0; d < REPORT_DIMS_MAX; d++)
				free(ret->rows[i].key[d]);
		ret->n = spec->top;
	} else if (spec->top)
		qsort(ret->rows, ret->n, sizeof(*ret->rows), waste_cmp);
}

static int row_key_cmp(const void *x, const void *y, void *ud)
{
	const struct report_row *a = x, *b = y;
	const size_t ndims = *(const size_t *)ud;
	int r = strcmp(a->period, b->period);

	for (size_t i = 0; !r && i < ndims; i++)
		r = strcmp(a->key[i], b->key[i]);
	return r;
}

/* A new row of period (its days as cap) with every key "(idle)" but account (if given). */
static struct report_row *row_new(struct report *ret, size_t *cap, const struct cap_row *p,
				  const char *account)
{
	struct report_row *row;

	if (grow_array((void **)&ret->rows, cap, ret->n, sizeof(*ret->rows)) < 0)
		return NULL;
	row = &ret->rows[ret->n];
	memset(row, 0, sizeof(*row));
	snprintf(row->period, sizeof(row->period), "%s", p->period);
	memcpy(row->first_day, p->first_day, sizeof(row->first_day));
	memcpy(row->last_day, p->last_day, sizeof(row->last_day));
	for (size_t d = 0; d < ret->spec.n_dims; d++) {
		row->key[d] =
		    strdup(account && ret->spec.dims[d] == REPORT_DIM_ACCOUNT ? account : "(idle)");
		if (!row->key[d])
			return NULL;
	}
	ret->n++;
	return row;
}

/* Weight of a row's requests (CPU, memory, GPU requested) at base prices. */
static int64_t request_weight(const struct report_row *row, const struct price_set *p)
{
	return report_weight(row->q[COLL_SUM_CPU_REQ_CORE_S] / 3600.0 * p->p[PRICE_CPU_CORE_HOUR] +
			     row->q[COLL_SUM_MEM_REQ_BYTE_S] / 3600.0 / GIB *
				 p->p[PRICE_MEMORY_GIB_HOUR] +
			     row->q[COLL_SUM_GPU_REQ_S] / 3600.0 * p->p[PRICE_GPU_HOUR]);
}

/*
 * The idle capacity of each period (collector/capacity.c, all nodes) into the rows, in cents:
 * an "(idle)" row, or shared over the period's rows (or one account's) by integer largest
 * remainder, so each period's rows gain exactly its idle cents. A period where the rule finds
 * no row, or only rows of weight 0, keeps its idle as an "(idle)" row (for to:ACCOUNT: a row
 * of that account).
 */
/* A period's idle cents: the days of the capacity report summed per period of the report. */
struct pidle {
	struct cap_row p; /* period, first_day, last_day */
	int64_t idle;
};

/* The capacity report's day rows (cap) into the report's days (the HTML's chart: idle per day)
 * and summed per period into *ret (malloc'd, *ret_n of them, in period order). */
static int idle_periods(const struct report_spec *spec, const struct cap_report *cap,
			struct report *ret, struct pidle **ret_p, size_t *ret_n)
{
	_cleanup_free_ struct report_day *days = NULL;
	struct pidle *per = calloc(cap->n + 1, sizeof(*per));
	size_t n = 0, nd = 0, j = 0;
	char to_last[11];

	days = calloc(cap->n + ret->n_days + 1, sizeof(*days));
	if (!per || !days) {
		free(per);
		return -ENOMEM;
	}
	report_day_add(spec->to, -1, to_last);
	for (size_t i = 0; i < cap->n; i++) {
		const struct cap_row *d = &cap->rows[i];
		const int64_t idle = cap_row_cents(d, CAP_PART_IDLE);
		char period[REPORT_PERIOD_LEN];

		for (; j < ret->n_days && strcmp(ret->days[j].day, d->first_day) < 0; j++)
			days[nd++] = ret->days[j];
		if (j < ret->n_days && strcmp(ret->days[j].day, d->first_day) == 0)
			days[nd] = ret->days[j++];
		else
			snprintf(days[nd].day, sizeof(days[nd].day), "%s", d->first_day);
		days[nd].cents[REPORT_COST_IDLE] += idle;
		days[nd++].cents[REPORT_COST_TOTAL] += idle;
		report_period_of(spec, to_last, d->first_day, period);
		if (!n || strcmp(per[n - 1].p.period, period) != 0) {
			snprintf(per[n].p.period, sizeof(per[n].p.period), "%s", period);
			report_period_days(spec, to_last, d->first_day, per[n].p.first_day,
					   per[n].p.last_day);
			n++;
		}
		per[n - 1].idle += idle;
	}
	for (; j < ret->n_days; j++)
		days[nd++] = ret->days[j];
	free(ret->days);
	ret->days = TAKE_PTR(days);
	ret->n_days = nd;
	*ret_p = per;
	*ret_n = n;
	return 0;
}

/*
 * The idle capacity of each period (collector/capacity.c, all nodes) into the rows, in cents:
 * an "(idle)" row, or shared over the period's rows (or one account's) by integer largest
 * remainder, so each period's rows gain exactly its idle cents. A period where the rule finds
 * no row, or only rows of weight 0, keeps its idle as an "(idle)" row (for to:ACCOUNT: a row
 * of that account). The capacity is read per day (each unit is a day: a period's idle is the
 * sum of its days'), which also gives the HTML its idle per day.
 */
static int apply_idle(struct coll_store *s, const struct report_spec *spec,
		      const struct price_sheet *ps, struct report *ret)
{
	struct report_spec by_day = *spec;
	_cleanup_free_ struct pidle *per = NULL;
	struct cap_report cap;
	size_t a_dim = 0, rows_cap = ret->n, n0, nper = 0;
	int r;

	if (spec->idle == REPORT_IDLE_OFF)
		return 0;
	for (size_t d = 0; d < spec->n_dims; d++)
		if (spec->dims[d] == REPORT_DIM_ACCOUNT)
			a_dim = d;
	by_day.period = REPORT_PERIOD_DAY;
	r = cap_build(s, &by_day, CAP_BY_NONE, ps, &cap);
	if (r < 0)
		return r;
	r = idle_periods(spec, &cap, ret, &per, &nper);
	cap_free(&cap);
	if (r < 0)
		return r;
	n0 = ret->n;
	for (size_t i = 0; i < nper; i++) {
		const struct cap_row *p = &per[i].p;
		const int64_t idle = per[i].idle;
		_cleanup_free_ size_t *idx = NULL;
		_cleanup_free_ int64_t *w = NULL, *out = NULL;
		struct report_row *row = NULL;
		size_t n = 0;
		int64_t sum = 0;

		if (idle == 0)
			continue;
		ret->total.cents[REPORT_COST_IDLE] += idle;
		ret->total.cents[REPORT_COST_TOTAL] += idle;
		idx = calloc(n0 + 1, sizeof(*idx));
		w = calloc(n0 + 1, sizeof(*w));
		out = calloc(n0 + 1, sizeof(*out));
		if (!idx || !w || !out)
			return -ENOMEM;
		for (size_t j = 0; spec->idle != REPORT_IDLE_ROW && j < n0; j++) {
			const struct report_row *x = &ret->rows[j];

			if (strcmp(x->period, p->period) != 0)
				continue;
			if (spec->idle == REPORT_IDLE_TO_ACCOUNT &&
			    strcmp(x->key[a_dim], spec->idle_account) != 0)
				continue;
			idx[n] = j;
			w[n] = spec->idle == REPORT_IDLE_BY_REQUEST ? request_weight(x, &ps->base)
								    : x->cents[REPORT_COST_TOTAL];
			sum += w[n++];
		}
		if (sum == 0 && spec->idle == REPORT_IDLE_BY_REQUEST)
			for (size_t j = 0; j < n; j++)
				sum += w[j] = ret->rows[idx[j]].cents[REPORT_COST_TOTAL];
		if (sum > 0) {
			report_apportion(idle, w, n, out);
			for (size_t j = 0; j < n; j++) {
				ret->rows[idx[j]].cents[REPORT_COST_IDLE] += out[j];
				ret->rows[idx[j]].cents[REPORT_COST_TOTAL] += out[j];
			}
			continue;
		}
		row = row_new(ret, &rows_cap, p,
			      spec->idle == REPORT_IDLE_TO_ACCOUNT ? spec->idle_account : NULL);
		if (!row)
			return -ENOMEM;
		row->cents[REPORT_COST_IDLE] = idle;
		row->cents[REPORT_COST_TOTAL] = idle;
	}
	if (ret->n > n0) {
		size_t nd = spec->n_dims;

		qsort_r(ret->rows, ret->n, sizeof(*ret->rows), row_key_cmp, &nd);
	}
	return 0;
}

/* A row's key of dimension dim (NULL when the report has no such dimension). */
static const char *row_dim_key(const struct report *ret, const struct report_row *x,
			       enum report_dim dim, const char *label_key)
{
	for (size_t d = 0; d < ret->spec.n_dims; d++)
		if (ret->spec.dims[d] == dim &&
		    (dim != REPORT_DIM_LABEL || strcmp(ret->spec.label_key, label_key) == 0))
			return x->key[d];
	return NULL;
}

/* Whether a row is one the report made itself ("(idle)", "(shared)"): never a recipient. */
static bool row_made(const struct report *ret, const struct report_row *x)
{
	for (size_t d = 0; d < ret->spec.n_dims; d++)
		if (strcmp(x->key[d], "(idle)") == 0 || strcmp(x->key[d], "(shared)") == 0)
			return true;
	return false;
}

/* The days add[] (sorted, n of them) merged into ret->days (sorted): a day in both gains add's
 * cents. */
static int days_merge_cents(struct report *ret, const struct report_day *add, size_t n)
{
	struct report_day *days = calloc(ret->n_days + n + 1, sizeof(*days));
	size_t nd = 0, i = 0, j = 0;

	if (!days)
		return -ENOMEM;
	while (i < ret->n_days || j < n) {
		const int c = i == ret->n_days ? 1
			      : j == n	       ? -1
					       : strcmp(ret->days[i].day, add[j].day);

		if (c < 0) {
			days[nd++] = ret->days[i++];
			continue;
		}
		if (c == 0)
			days[nd] = ret->days[i++];
		else
			memcpy(days[nd].day, add[j].day, sizeof(days[nd].day));
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			days[nd].cents[k] += add[j].cents[k];
		nd++;
		j++;
	}
	free(ret->days);
	ret->days = days;
	ret->n_days = nd;
	return 0;
}

/* The shared costs of each day of the range into ret->days (the HTML's cost per day): the
 * sections' day cents (report_shared_day_cents), which sum to each period's shared amount. */
static int shared_days(const struct report_spec *spec, const struct price_sheet *ps,
		       struct report *ret)
{
	_cleanup_free_ struct report_day *add = NULL;
	size_t n = 0, cap = 0;
	char day[11];

	for (memcpy(day, spec->from, 11); strcmp(day, spec->to) < 0; report_day_add(day, 1, day)) {
		int64_t c = 0;

		for (size_t k = 0; k < ps->n_shared; k++)
			c += report_shared_day_cents(ps->shared[k].cents, day);
		if (c == 0)
			continue;
		if (grow_array((void **)&add, &cap, n, sizeof(*add)) < 0)
			return -ENOMEM;
		memset(&add[n], 0, sizeof(*add));
		memcpy(add[n].day, day, sizeof(day));
		add[n].cents[REPORT_COST_SHARED] = c;
		add[n++].cents[REPORT_COST_TOTAL] = c;
	}
	return days_merge_cents(ret, add, n);
}

/*
 * The price sheet's shared costs into the rows (docs/reports.md "Shared costs"): for each
 * period of the range and each [shared:NAME], the days' cents of the monthly amount
 * (report_shared_day_cents) spread over the period's rows the section matches by its rule
 * (report_shared_spread); what no row takes (no matching row, no weight, a dimension the
 * report lacks) goes to a "(shared)" row of the period, so each period gains exactly its
 * amount. Weights are the rows' cost before shared costs (idle shares included).
 */
static int apply_shared(const struct report_spec *spec, const struct price_sheet *ps,
			struct report *ret)
{
	const size_t n0 = ret->n;
	size_t rows_cap = ret->n;
	char last[11], day[11];

	if (!ps || ps->n_shared == 0)
		return 0;
	ret->shared = true;
	report_day_add(spec->to, -1, last);
	for (memcpy(day, spec->from, 11); strcmp(day, spec->to) < 0;) {
		struct cap_row p;
		int64_t left = 0;

		memset(&p, 0, sizeof(p));
		report_period_of(spec, last, day, p.period);
		report_period_days(spec, last, day, p.first_day, p.last_day);
		for (size_t k = 0; k < ps->n_shared; k++) {
			const struct price_shared *sh = &ps->shared[k];
			_cleanup_free_ size_t *idx = calloc(n0 + 1, sizeof(*idx));
			_cleanup_free_ int64_t *w = calloc(n0 + 1, sizeof(*w));
			_cleanup_free_ int64_t *out = calloc(n0 + 1, sizeof(*out));
			int64_t amount = 0;
			size_t n = 0;
			char d[11];

			if (!idx || !w || !out)
				return -ENOMEM;
			for (memcpy(d, p.first_day, 11); strcmp(d, p.last_day) <= 0;
			     report_day_add(d, 1, d))
				amount += report_shared_day_cents(sh->cents, d);
			for (size_t j = 0; j < n0; j++) {
				const struct report_row *x = &ret->rows[j];
				const char *key = NULL;

				if (strcmp(x->period, p.period) != 0 || row_made(ret, x))
					continue;
				if (sh->match == PRICE_MATCH_ACCOUNT)
					key = row_dim_key(ret, x, REPORT_DIM_ACCOUNT, "");
				else if (sh->match == PRICE_MATCH_LABEL)
					key = row_dim_key(ret, x, REPORT_DIM_LABEL, sh->match_key);
				if (sh->match != PRICE_MATCH_ALL &&
				    (!key || strcmp(key, sh->match_value) != 0))
					continue;
				if (sh->spread == PRICE_SPREAD_TO &&
				    !((key = row_dim_key(ret, x, REPORT_DIM_ACCOUNT, "")) &&
				      strcmp(key, sh->to_account) == 0))
					continue;
				idx[n] = j;
				w[n++] = x->cents[REPORT_COST_TOTAL] - x->cents[REPORT_COST_SHARED];
			}
			left += report_shared_spread(amount,
						     sh->spread == PRICE_SPREAD_EVEN
							 ? REPORT_SPREAD_EVEN
							 : REPORT_SPREAD_PROPORTIONAL,
						     w, n, out);
			for (size_t j = 0; j < n; j++) {
				ret->rows[idx[j]].cents[REPORT_COST_SHARED] += out[j];
				ret->rows[idx[j]].cents[REPORT_COST_TOTAL] += out[j];
			}
			ret->total.cents[REPORT_COST_SHARED] += amount;
			ret->total.cents[REPORT_COST_TOTAL] += amount;
		}
		if (left != 0) {
			struct report_row *row = row_new(ret, &rows_cap, &p, NULL);

			if (!row)
				return -ENOMEM;
			for (size_t dd = 0; dd < spec->n_dims; dd++) {
				free(row->key[dd]);
				row->key[dd] = strdup("(shared)");
				if (!row->key[dd])
					return -ENOMEM;
			}
			row->cents[REPORT_COST_SHARED] = left;
			row->cents[REPORT_COST_TOTAL] = left;
		}
		report_day_add(p.last_day, 1, day);
	}
	if (ret->n > n0) {
		size_t nd = spec->n_dims;

		qsort_r(ret->rows, ret->n, sizeof(*ret->rows), row_key_cmp, &nd);
	}
	return shared_days(spec, ps, ret);
}

/* Every source of a report into rd: the day rollups, the open tasks, the label and job-part
 * rollups, the nodes; then the parts of the period's months. */
static double energy_j(const double *v)
{
	return v[COLL_SUM_ENERGY_CPU_J] + v[COLL_SUM_ENERGY_DRAM_J] + v[COLL_SUM_ENERGY_GPU_J];
}

/* The [carbon:ZONE] of a node (-1: the default [carbon]); -ENOMEM as -2. */
static int node_zone(struct reader *rd, const char *node)
{
	const char *n;
	size_t h;

	if (rd->ps->n_zones == 0)
		return -1;
	n = intern(&rd->strs, node ?: "");
	if (!n)
		return -2;
	h = ((uintptr_t)n >> 3) % ARRAY_SIZE(rd->zone_cache);
	if (rd->zone_cache[h].node != n) {
		rd->zone_cache[h].node = n;
		rd->zone_cache[h].zone = price_sheet_carbon_zone_of(rd->ps, n);
	}
	return rd->zone_cache[h].zone;
}

/* The grams of j joules on node (NULL: the default intensity) on day: 0, -ENOENT (no
 * intensity: counted in carbon_uncovered_j by the caller), -ENOMEM. */
static int carbon_grams(struct reader *rd, const char *node, const char *day, double j, double *ret)
{
	int z = node ? node_zone(rd, node) : -1;
	double g;

	if (z == -2)
		return -ENOMEM;
	if (price_sheet_carbon_zone(rd->ps, z, day, &g) < 0)
		return -ENOENT;
	*ret = j / 3.6e6 * g;
	return 0;
}

/* Adds the carbon of j joules on node on day to cell c (or to the uncovered energy). */
static int carbon_to_cell(struct reader *rd, struct cell *c, const char *node, const char *day,
			  double j)
{
	double g;
	int r;

	if (!(j > 0))
		return 0;
	r = carbon_grams(rd, node, day, j, &g);
	if (r == -ENOENT) {
		rd->carbon_uncovered_j += j;
		return 0;
	}
	if (r < 0)
		return r;
	c->v[REPORT_Q_CO2E_G] += g;
	return 0;
}

static int carbon_job_cb(const struct coll_rollup_row *row, void *ud)
{
	struct reader *rd = ud;
	struct cell *c = cell_find(rd, row->bucket, row->account, row->user);

	if (!c)
		return 0; /* cannot happen: job rows come with their day row */
	return carbon_to_cell(rd, c, row->node, row->bucket, energy_j(row->v));
}

/*
 * The carbon of each day cell (REPORT_Q_CO2E_G): its energy at the day's intensity; with
 * zones, the energy of each of its nodes (rollup_job_day, running tasks' shares) at that
 * node's zone's intensity.
 */
static int carbon_cells(struct coll_store *s, struct reader *rd)
{
	const uint32_t sums = 1u << COLL_SUM_ENERGY_CPU_J | 1u << COLL_SUM_ENERGY_DRAM_J |
			      1u << COLL_SUM_ENERGY_GPU_J;
	int r = 0;

	if (!price_sheet_has_carbon(rd->ps))
		return 0;
	if (rd->ps->n_zones == 0) {
		for (size_t i = 0; r >= 0 && i < rd->n; i++)
			r = carbon_to_cell(rd, &rd->cells[i], NULL, rd->cells[i].day,
					   energy_j(rd->cells[i].v));
		return r;
	}
	r = coll_store_rollup_query_sums(s, COLL_ROLLUP_JOB_DAY, rd->spec->from, rd->spec->to, sums,
					 carbon_job_cb, rd);
	for (size_t i = 0; r >= 0 && i < rd->no; i++) {
		const struct open_share *o = &rd->open[i];
		struct cell *c = cell_find(rd, o->day, o->account, o->user);

		if (c)
			r = carbon_to_cell(rd, c, o->node, o->day, energy_j(o->v));
	}
	return r;
}

/* The parts' carbon: a part on a known node and day at that node's zone's intensity, any
 * other (a label part, a month part) at its cell's mean intensity. */
static int carbon_parts_of(struct reader *rd, struct cell *c)
{
	const ssize_t first[3] = {c->first_label, c->first_part, c->first_jlabel};
	const double cj = energy_j(c->v);
	const double mean = cj > 0 ? c->v[REPORT_Q_CO2E_G] / cj : 0;
	const bool by_node = rd->ps->n_zones > 0 && strlen(c->day) == 10;

	for (int k = 0; k < 3; k++)
		for (ssize_t li = first[k]; li >= 0; li = rd->labels[li].next) {
			struct lcell *l = &rd->labels[li];
			double j = energy_j(l->v), g = 0;
			int r;

			l->v[REPORT_Q_CO2E_G] = 0;
			if (!(j > 0))
				continue;
			if (!by_node || !l->node[0]) {
				l->v[REPORT_Q_CO2E_G] = j * mean;
				continue;
			}
			r = carbon_grams(rd, l->node, c->day, j, &g);
			if (r == -ENOMEM)
				return r;
			l->v[REPORT_Q_CO2E_G] = r == 0 ? g : 0;
		}
	return 0;
}

static int carbon_parts(struct reader *rd)
{
	int r = 0;

	if (!price_sheet_has_carbon(rd->ps))
		return 0;
	for (size_t i = 0; r >= 0 && i < rd->n; i++)
		r = carbon_parts_of(rd, &rd->cells[i]);
	for (size_t i = 0; r >= 0 && i < rd->nm; i++)
		r = carbon_parts_of(rd, &rd->mcells[i]);
	return r;
}

static int report_read(struct coll_store *s, const struct report_spec *spec,
		       const struct price_sheet *ps, struct reader *rd, struct report *ret)
{
	int r;

	r = coll_store_rollup_query(s, COLL_ROLLUP_DAY, spec->from, spec->to, day_cb, rd);
	if (r < 0)
		return r;
	ret->cells = rd->n;
	r = coll_store_open_query(s, open_cb, rd);
	if (r < 0)
		return r;
	for (size_t i = 0; i < rd->no; i++) {
		r = cell_add(rd, rd->open[i].day, rd->open[i].account, rd->open[i].user,
			     rd->open[i].v, REPORT_Q_MAX);
		if (r < 0)
			return r;
	}
	cells_sort_merge(rd->cells, &rd->n);
	r = carbon_cells(s, rd);
	if (r < 0)
		return r;
	month_mode_init(rd);
	r = mcells_build(rd);
	if (r < 0)
		return r;
	if (ps->n_overrides || (spec->label_key[0] && !spec->parts)) {
		r = coll_store_rollup_query(s, COLL_ROLLUP_LABEL_DAY, spec->from, spec->to,
					    label_cb, rd);
		if (r < 0)
			return r;
	}
	r = read_job_parts(s, spec, rd);
	if (r < 0)
		return r;
	ret->cells += rd->nl + rd->open_rows;
	if (spec->nodes) {
		r = report_nodes(s, spec, rd, ret);
		if (r < 0)
			return r;
	}
	r = open_parts(rd);
	if (r < 0)
		return r;
	return carbon_parts(rd);
}

static double row_energy_j(const struct report_row *row)
{
	return row->q[COLL_SUM_ENERGY_CPU_J] + row->q[COLL_SUM_ENERGY_DRAM_J] +
	       row->q[COLL_SUM_ENERGY_GPU_J];
}

static int64_t j_to_mwh(double j)
{
	double m = round(j / 3.6);

	return m > 0 ? (m > 9e15 ? (int64_t)9e15 : (int64_t)m) : 0;
}

/*
 * The rows' energy in whole mWh (1 mWh = 3.6 J): the total's, rounded once, apportioned over
 * the rows by their joules in µJ (largest remainder), so that they sum to it exactly. With
 * --top (rows left out) each row is rounded alone and the total is theirs plus what was left
 * out, rounded.
 */
static int energy_rows(struct report *ret)
{
	_cleanup_free_ int64_t *w = NULL, *out = NULL;

	ret->total.energy_mwh = j_to_mwh(row_energy_j(&ret->total));
	if (ret->n == 0)
		return 0;
	if (ret->spec.top) {
		for (size_t i = 0; i < ret->n; i++)
			ret->rows[i].energy_mwh = j_to_mwh(row_energy_j(&ret->rows[i]));
		return 0;
	}
	w = calloc(ret->n, sizeof(*w));
	out = calloc(ret->n, sizeof(*out));
	if (!w || !out)
		return -ENOMEM;
	for (size_t i = 0; i < ret->n; i++) {
		double uj = round(row_energy_j(&ret->rows[i]) * 1e6);

		w[i] = uj > 0 ? (uj > 1e18 ? (int64_t)1e18 : (int64_t)uj) : 0;
	}
	report_apportion(ret->total.energy_mwh, w, ret->n, out);
	for (size_t i = 0; i < ret->n; i++)
		ret->rows[i].energy_mwh = out[i];
	return 0;
}

/* The carbon of each period, gCO2e, before rounding: its day cells' grams (carbon_cells)
 * summed per period label. */
struct period_carbon {
	const char *period; /* interned */
	double g;	    /* grams */
};
struct carbon_acc {
	struct period_carbon *v;
	size_t n, cap;
};

static int carbon_add(struct reader *rd, struct carbon_acc *ca, const struct cell *c)
{
	char pbuf[REPORT_PERIOD_LEN];
	const char *period;

	if (!(c->v[REPORT_Q_CO2E_G] > 0))
		return 0;
	report_period_of(rd->spec, rd->to_last, c->day, pbuf);
	period = intern(&rd->strs, pbuf);
	if (!period)
		return -ENOMEM;
	if (!ca->n || ca->v[ca->n - 1].period != period) {
		if (grow_array((void **)&ca->v, &ca->cap, ca->n, sizeof(*ca->v)) < 0)
			return -ENOMEM;
		ca->v[ca->n++] = (struct period_carbon){.period = period};
	}
	ca->v[ca->n - 1].g += c->v[REPORT_Q_CO2E_G];
	return 0;
}

static int64_t g_weight(double g)
{
	double ug = round(g * 1e6);

	return ug > 0 ? (ug > 1e18 ? (int64_t)1e18 : (int64_t)ug) : 0;
}

/*
 * Each period's grams, rounded once, apportioned over its rows by their own grams before
 * rounding (REPORT_Q_CO2E_G, largest remainder): the rows sum to the period's grams and the
 * total to the periods' sum. With --top each row's grams are rounded alone.
 */
static int carbon_rows(struct report *ret, const struct reader *rd, const struct carbon_acc *ca)
{
	_cleanup_free_ int64_t *w = NULL, *out = NULL;
	_cleanup_free_ size_t *idx = NULL;

	ret->carbon_uncovered_mwh = j_to_mwh(rd->carbon_uncovered_j);
	if (!ret->n)
		return 0;
	w = calloc(ret->n, sizeof(*w));
	out = calloc(ret->n, sizeof(*out));
	idx = calloc(ret->n, sizeof(*idx));
	if (!w || !out || !idx)
		return -ENOMEM;
	for (size_t p = 0; p < ca->n; p++) {
		const struct period_carbon *pc = &ca->v[p];
		int64_t grams = (int64_t)llround(pc->g);
		size_t k = 0;

		for (size_t i = 0; i < ret->n; i++) {
			struct report_row *row = &ret->rows[i];

			if (strcmp(row->period, pc->period) != 0)
				continue;
			if (ret->spec.top) {
				row->co2e_g = (int64_t)llround(row->q[REPORT_Q_CO2E_G]);
				ret->total.co2e_g += row->co2e_g;
				continue;
			}
			w[k] = g_weight(row->q[REPORT_Q_CO2E_G]);
			idx[k++] = i;
		}
		if (ret->spec.top)
			continue;
		if (k == 0) /* cannot happen: the period's cells made rows */
			continue;
		report_apportion(grams, w, k, out);
		for (size_t i = 0; i < k; i++)
			ret->rows[idx[i]].co2e_g = out[i];
		ret->total.co2e_g += grams;
	}
	return 0;
}

/* A weight from an amount in micro-units (µJ, µg): whole, at least 0, at most 1e18. */
static int64_t micro_weight(double v)
{
	double u = round(v * 1e6);

	return u > 0 ? (u > 1e18 ? (int64_t)1e18 : (int64_t)u) : 0;
}

/*
 * The days' energy_mwh and co2e_g (the HTML's energy and carbon over time): each period's
 * rows' sums apportioned over the period's days by their joules and raw grams (largest
 * remainder), so a period's days sum to its rows exactly and all days to the total. With --top
 * (rows left out) the total's over all the days.
 */
static int energy_days(struct report *ret)
{
	_cleanup_free_ int64_t *wj = NULL, *wg = NULL, *oj = NULL, *og = NULL;
	char last[11], period[REPORT_PERIOD_LEN], next[REPORT_PERIOD_LEN];
	size_t row = 0;

	if (!ret->n_days)
		return 0;
	wj = calloc(ret->n_days, sizeof(*wj));
	wg = calloc(ret->n_days, sizeof(*wg));
	oj = calloc(ret->n_days, sizeof(*oj));
	og = calloc(ret->n_days, sizeof(*og));
	if (!wj || !wg || !oj || !og)
		return -ENOMEM;
	report_day_add(ret->spec.to, -1, last);
	for (size_t i = 0, n; i < ret->n_days; i += n) {
		int64_t mwh = 0, g = 0;

		report_period_of(&ret->spec, last, ret->days[i].day, period);
		for (n = 0; i + n < ret->n_days; n++) {
			const struct report_day *d = &ret->days[i + n];

			report_period_of(&ret->spec, last, d->day, next);
			if (!ret->spec.top && strcmp(next, period) != 0)
				break;
			wj[n] = micro_weight(d->energy_j[0] + d->energy_j[1] + d->energy_j[2]);
			wg[n] = micro_weight(d->co2e_g_raw);
		}
		if (ret->spec.top) {
			mwh = ret->total.energy_mwh;
			g = ret->total.co2e_g;
		} else { /* the rows are sorted by period, as the days */
			for (; row < ret->n && strcmp(ret->rows[row].period, period) < 0; row++)
				;
			for (; row < ret->n && strcmp(ret->rows[row].period, period) == 0; row++) {
				mwh += ret->rows[row].energy_mwh;
				g += ret->rows[row].co2e_g;
			}
		}
		report_apportion(mwh, wj, n, oj);
		report_apportion(g, wg, n, og);
		for (size_t k = 0; k < n; k++) {
			ret->days[i + k].energy_mwh = oj[k];
			ret->days[i + k].co2e_g = og[k];
		}
	}
	return 0;
}

/* The period's entry of ca, added if new (idle energy can fall in a period without tasks). */
static struct period_carbon *carbon_period(struct carbon_acc *ca, const char *period)
{
	for (size_t i = 0; i < ca->n; i++)
		if (ca->v[i].period == period)
			return &ca->v[i];
	if (grow_array((void **)&ca->v, &ca->cap, ca->n, sizeof(*ca->v)) < 0)
		return NULL;
	ca->v[ca->n] = (struct period_carbon){.period = period};
	return &ca->v[ca->n++];
}

struct idle_energy {
	struct reader *rd;
	struct report *ret; /* its days (the HTML's energy per day) get the idle energy too */
	struct carbon_acc *ca;
	bool carbon;
	struct pidle_energy {
		const char *period; /* interned */
		char first_day[11], last_day[11];
		double j[3], g; /* package, DRAM, GPU; grams */
	} * v;
	size_t n, cap;
	int err;
};

/* The report's day (ret->days, sorted) of a day; NULL when it has none (no cost that day). */
static struct report_day *idle_day(struct report *ret, const char *day)
{
	size_t lo = 0, hi = ret->n_days;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(ret->days[mid].day, day);

		if (c == 0)
			return &ret->days[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int idle_energy_add(struct idle_energy *ie, const char *node, const char *bucket,
			   const double j[3])
{
	struct reader *rd = ie->rd;
	const double all = j[0] + j[1] + j[2];
	char pbuf[REPORT_PERIOD_LEN];
	struct pidle_energy *pe;
	struct report_day *day;
	const char *period;
	double g;
	int r;

	if (!(all > 0))
		return 0;
	report_period_of(rd->spec, rd->to_last, bucket, pbuf);
	period = intern(&rd->strs, pbuf);
	if (!period)
		return -ENOMEM;
	if (!ie->n || ie->v[ie->n - 1].period != period) { /* rows come ordered by day */
		if (grow_array((void **)&ie->v, &ie->cap, ie->n, sizeof(*ie->v)) < 0)
			return -ENOMEM;
		pe = &ie->v[ie->n++];
		memset(pe, 0, sizeof(*pe));
		pe->period = period;
		report_period_days(rd->spec, rd->to_last, bucket, pe->first_day, pe->last_day);
	}
	pe = &ie->v[ie->n - 1];
	day = idle_day(ie->ret, bucket);
	for (int k = 0; k < 3; k++) {
		pe->j[k] += j[k];
		if (day)
			day->energy_j[k] += j[k];
	}
	if (!ie->carbon)
		return 0;
	r = carbon_grams(rd, node, bucket, all, &g);
	if (r == -ENOENT) {
		rd->carbon_uncovered_j += all;
		return 0;
	}
	if (r < 0)
		return r;
	pe->g += g;
	if (day)
		day->co2e_g_raw += g;
	return 0;
}

static int idle_energy_cb(const struct coll_rollup_row *row, void *ud)
{
	/* node rows: gpu_s holds the GPUs' unattributed energy (store.h) */
	const double j[3] = {row->v[COLL_SUM_ENERGY_CPU_J], row->v[COLL_SUM_ENERGY_DRAM_J],
			     row->v[COLL_SUM_GPU_S]};

	return idle_energy_add(ud, row->node, row->bucket, j);
}

/* A day of rollup_node_energy_day: its energy at the default intensity (node NULL) */
static int idle_energy_day_cb(const struct coll_node_energy_row *row, void *ud)
{
	const double j[3] = {(double)row->mj[0] / 1000, (double)row->mj[1] / 1000,
			     (double)row->mj[2] / 1000};

	return idle_energy_add(ud, NULL, row->bucket, j);
}

/*
 * With idle capacity on (--idle, --share-idle): the nodes' unattributed energy
 * (rollup_node_day: node.sample unattributed package, DRAM and GPU energy), and its carbon at each
 * node's zone's intensity of the day, into an "(idle)" row of each period, the one of the
 * idle cost where there is one. The energy is never shared over the groups (a measurement,
 * not a price): tasks' energy + this = the nodes' measured energy.
 */
static int apply_idle_energy(struct coll_store *s, struct reader *rd, struct carbon_acc *ca,
			     struct report *ret)
{
	const uint32_t sums =
	    1u << COLL_SUM_ENERGY_CPU_J | 1u << COLL_SUM_ENERGY_DRAM_J | 1u << COLL_SUM_GPU_S;
	struct idle_energy ie = {.rd = rd, .ret = ret, .ca = ca, .carbon = ret->carbon};
	size_t rows_cap = ret->n, n0 = ret->n;
	int r;

	if (rd->spec->idle == REPORT_IDLE_OFF)
		return 0;
	/* one intensity for every node (no [carbon:ZONE]): the day's sums kept at ingest do;
	 * with zones each node row is read for its zone's intensity (slower) */
	if (rd->ps->n_zones == 0)
		r = coll_store_node_energy_query(s, rd->spec->from, rd->spec->to,
						 idle_energy_day_cb, &ie);
	else
		r = coll_store_rollup_query_sums(s, COLL_ROLLUP_NODE_DAY, rd->spec->from,
						 rd->spec->to, sums, idle_energy_cb, &ie);
	for (size_t i = 0; r >= 0 && i < ie.n; i++) {
		const struct pidle_energy *pe = &ie.v[i];
		struct report_row *row = NULL;
		struct period_carbon *pc;

		for (size_t k = 0; k < n0 && !row; k++) {
			struct report_row *x = &ret->rows[k];
			bool idle = strcmp(x->period, pe->period) == 0;

			for (size_t d = 0; idle && d < ret->spec.n_dims; d++)
				idle = strcmp(x->key[d], "(idle)") == 0;
			if (idle)
				row = x;
		}
		if (!row) {
			struct cap_row p = {0};

			snprintf(p.period, sizeof(p.period), "%s", pe->period);
			memcpy(p.first_day, pe->first_day, sizeof(p.first_day));
			memcpy(p.last_day, pe->last_day, sizeof(p.last_day));
			row = row_new(ret, &rows_cap, &p, NULL);
			if (!row) {
				r = -ENOMEM;
				break;
			}
		}
		row->q[COLL_SUM_ENERGY_CPU_J] += pe->j[0];
		row->q[COLL_SUM_ENERGY_DRAM_J] += pe->j[1];
		row->q[COLL_SUM_ENERGY_GPU_J] += pe->j[2];
		row->q[REPORT_Q_CO2E_G] += pe->g;
		ret->total.q[COLL_SUM_ENERGY_CPU_J] += pe->j[0];
		ret->total.q[COLL_SUM_ENERGY_DRAM_J] += pe->j[1];
		ret->total.q[COLL_SUM_ENERGY_GPU_J] += pe->j[2];
		ret->total.q[REPORT_Q_CO2E_G] += pe->g;
		if (pe->g > 0) {
			pc = carbon_period(ca, pe->period);
			if (!pc) {
				r = -ENOMEM;
				break;
			}
			pc->g += pe->g;
		}
	}
	free(ie.v);
	if (r >= 0 && ret->n > n0) {
		size_t nd = ret->spec.n_dims;

		qsort_r(ret->rows, ret->n, sizeof(*ret->rows), row_key_cmp, &nd);
	}
	return r < 0 ? r : 0;
}

int report_build(struct coll_store *s, const struct report_spec *spec, const struct price_sheet *ps,
		 struct report *ret)
{
	struct reader rd = {.spec = spec, .ps = ps};
	struct groups g = {.n_dims = spec->n_dims};
	struct emit e = {.rd = &rd, .g = &g};
	struct carbon_acc ca = {0};
	size_t days_cap = 0;
	int r;

	memset(ret, 0, sizeof(*ret));
	ret->spec = *spec;
	memcpy(ret->currency, ps->currency, sizeof(ret->currency));
	memcpy(ret->sheet_name, ps->name, sizeof(ret->sheet_name));
	ret->prices = ps->base;
	ret->n_overrides = ps->n_overrides;
	memcpy(ret->override_key, ps->override_key, sizeof(ret->override_key));
	ret->carbon = price_sheet_has_carbon(ps);
	report_day_add(spec->to, -1, rd.to_last);
	rd.from_ns = day_start_ns(spec->from);
	rd.to_ns = day_start_ns(spec->to);
	e.none = intern(&rd.strs, NONE_VAL);
	if (!e.none) {
		r = -ENOMEM;
		goto out;
	}
	r = report_read(s, spec, ps, &rd, ret);
	if (r < 0)
		goto out;
	for (size_t i = 0; i < rd.n; i++) {
		const struct cell *c = &rd.cells[i];
		int64_t cents[_REPORT_COST_MAX];
		struct report_day *day;

		cell_cents(&rd, c, cents);
		if (ret->carbon && (r = carbon_add(&rd, &ca, c)) < 0)
			goto out;
		if (!ret->n_days || strcmp(ret->days[ret->n_days - 1].day, c->day) != 0) {
			/* the cells are sorted by day first */
			if (grow_array((void **)&ret->days, &days_cap, ret->n_days,
				       sizeof(*ret->days)) < 0) {
				r = -ENOMEM;
				goto out;
			}
			memset(&ret->days[ret->n_days], 0, sizeof(*ret->days));
			snprintf(ret->days[ret->n_days].day, 11, "%s", c->day);
			ret->n_days++;
		}
		day = &ret->days[ret->n_days - 1];
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			day->cents[k] += cents[k];
		for (int p = 0; p < 3; p++)
			day->energy_j[p] += c->v[COLL_SUM_ENERGY_CPU_J + p];
		day->co2e_g_raw += c->v[REPORT_Q_CO2E_G];
		day->unmeasured += c->v[COLL_SUM_ENERGY_UNMEASURED_TASKS];
		for (int q = 0; q < REPORT_Q_MAX; q++)
			if (q != COLL_SUM_CARRIED_TASKS || strcmp(c->day, rd.to_last) == 0)
				ret->total.q[q] += c->v[q];
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			ret->total.cents[k] += cents[k];
		if (in_full_month(&rd, c->day)) {
			struct cell *mc = part_cell(&rd, c->day, c->account, c->user);

			if (!mc) {
				r = -EIO; /* cannot happen: mcells_build made it */
				goto out;
			}
			for (int k = 0; k < _REPORT_COST_MAX; k++)
				mc->cents[k] += cents[k];
			continue;
		}
		r = emit_cell(&e, c, cents);
		if (r < 0)
			goto out;
	}
	for (size_t i = 0; i < rd.nm; i++) {
		r = emit_cell(&e, &rd.mcells[i], rd.mcells[i].cents);
		if (r < 0)
			goto out;
	}
	r = rows_from_groups(spec, &rd, &g, ret);
	if (r < 0)
		goto out;
	r = apply_idle(s, spec, ps, ret);
	if (r == 0)
		r = apply_shared(spec, ps, ret);
	if (r == 0)
		r = apply_idle_energy(s, &rd, &ca, ret);
	if (r < 0)
		goto out;
	rows_top(spec, ret);
	r = energy_rows(ret);
	if (r == 0 && ret->carbon)
		r = carbon_rows(ret, &rd, &ca);
	if (r == 0)
		r = energy_days(ret);
	if (r < 0)
		goto out;
	ret->total.q[REPORT_Q_ACTIVE] = report_row_active(&ret->total);
	memcpy(ret->total.period, "total", 6);
	memcpy(ret->total.first_day, spec->from, 11);
	report_day_add(spec->to, -1, ret->total.last_day);
	r = 0;
out:
	free(ca.v);
	free(g.v);
	free(g.slot);
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

void report_money(char *buf, size_t len, int64_t cents)
{
	snprintf(buf, len, "%s%" PRId64 ".%02" PRId64, cents < 0 ? "-" : "",
		 (cents < 0 ? -cents : cents) / 100, (cents < 0 ? -cents : cents) % 100);
}

/* used / charged, in [0, 1]; 1 when nothing was charged (see report.h) */
static double eff(double used, double charged)
{
	double e;

	if (!(charged > 0))
		return 1;
	e = used / charged;
	/* used <= charged per task; sums of parts (a label's rest) may differ by a rounding */
	return e > 1 ? 1 : e > 0 ? e : 0;
}

double report_row_active(const struct report_row *row)
{
	return row->q[COLL_SUM_TASKS] + row->q[REPORT_Q_RUNNING] + row->q[COLL_SUM_CARRIED_TASKS];
}

double report_cpu_eff(const struct report_row *row)
{
	return eff(row->q[COLL_SUM_CPU_S], row->q[COLL_SUM_CPU_CHARGED_CORE_S]);
}

double report_mem_eff(const struct report_row *row)
{
	return eff(row->q[COLL_SUM_MEM_BYTE_S], row->q[COLL_SUM_MEM_CHARGED_BYTE_S]);
}

double report_gpu_eff(const struct report_row *row)
{
	return eff(row->q[COLL_SUM_GPU_S], row->q[COLL_SUM_GPU_CHARGED_S]);
}

/* 10^k in long double: exact up to 10^27, then as close as powl */
static long double pow10l_(int k)
{
	static const long double t[28] = {1e0L,	 1e1L,	1e2L,  1e3L,  1e4L,  1e5L,  1e6L,
					  1e7L,	 1e8L,	1e9L,  1e10L, 1e11L, 1e12L, 1e13L,
					  1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L,
					  1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};

	if (k >= 0 && k < 28)
		return t[k];
	if (k < 0 && k > -28)
		return 1 / t[-k];
	return powl(10.0L, k);
}

/* Machine formats (CSV, JSON): 17 significant digits, enough for the decimal to read back as
 * the same double, in %.17g's notation (fixed, or an exponent below 1e-4 and from 1e17; no
 * trailing zeros; whole numbers as integers). Written here rather than with snprintf("%.17g"):
 * glibc's exact conversion made a 90,000-row CSV report take 1.5 times the instructions of
 * the former six decimals (tests/bench/report.sh). The digits come from v scaled by a power of
 * ten in long double (64-bit mantissa): an error of a few parts in 1e19, far below the half
 * unit of the 17th digit, so the decimal is within half an ulp of v (test_report checks the
 * round trip over a million values). */
void report_num_full(char *buf, size_t len, double v)
{
	static const unsigned long long P17 = 100000000000000000ULL;
	char d[18], *p = buf, *end = buf + len - 1;
	unsigned long long m;
	long double x;
	int e10, nd = 17;

	if (len < 32 || !isfinite(v)) {
		snprintf(buf, len, "%.17g", v);
		return;
	}
	if (v < 0) {
		*p++ = '-';
		v = -v;
	}
	if (v == 0 || (v < 9007199254740992.0 && v == trunc(v))) {
		m = (unsigned long long)v;
		nd = 0;
		do
			d[nd++] = (char)('0' + m % 10);
		while ((m /= 10));
		while (nd && p < end)
			*p++ = d[--nd];
		*p = 0;
		return;
	}
	e10 = (int)floor(log10(v));
	x = (long double)v * pow10l_(16 - e10);
	if (x < 1e16L) {
		e10--;
		x = (long double)v * pow10l_(16 - e10);
	} else if (x >= 1e17L) {
		e10++;
		x = (long double)v * pow10l_(16 - e10);
	}
	m = (unsigned long long)llroundl(x);
	if (m >= P17) { /* rounded up to the next power of ten */
		m /= 10;
		e10++;
	}
	for (int i = 16; i >= 0; i--, m /= 10)
		d[i] = (char)('0' + m % 10);
	while (nd > 1 && d[nd - 1] == '0')
		nd--;
	if (e10 < -4 || e10 >= 17) {
		*p++ = d[0];
		if (nd > 1) {
			*p++ = '.';
			memcpy(p, d + 1, (size_t)nd - 1);
			p += nd - 1;
		}
		snprintf(p, (size_t)(end - p) + 1, "e%c%02d", e10 < 0 ? '-' : '+', abs(e10));
		return;
	}
	if (e10 < 0) {
		*p++ = '0';
		*p++ = '.';
		for (int i = -1; i > e10; i--)
			*p++ = '0';
		memcpy(p, d, (size_t)nd);
		p += nd;
	} else {
		for (int i = 0; i <= e10; i++)
			*p++ = i < nd ? d[i] : '0';
		if (nd > e10 + 1) {
			*p++ = '.';
			memcpy(p, d + e10 + 1, (size_t)(nd - e10 - 1));
			p += nd - e10 - 1;
		}
	}
	*p = 0;
}

/* Human formats (table, HTML): two decimals, more below 1 so that a nonzero quantity keeps
 * three significant digits (0.000347 core-h does not print as 0.00). */
static void num_human(char *buf, size_t len, double v)
{
	const double a = fabs(v);
	int dec = 2;

	if (v == 0) {
		snprintf(buf, len, "0");
		return;
	}
	if (a < 1e-12) {
		snprintf(buf, len, "%.3g", v);
		return;
	}
	if (a < 1)
		dec = 2 - (int)floor(log10(a));
	snprintf(buf, len, "%.*f", MIN(dec, 14), v);
}

/* The quantities of a row, in report units */
enum report_col {
	COL_CPU_CORE_H,
	COL_CPU_USED_CORE_H,
	COL_MEM_GIB_H,
	COL_MEM_USED_GIB_H,
	COL_GPU_H,
	COL_GPU_USED_H,
	COL_IO_GIB,
	COL_NET_GIB,
	COL_ENERGY_CPU_KWH,
	COL_ENERGY_DRAM_KWH,
	COL_ENERGY_GPU_KWH,
	_COL_MAX,
};
static const char *const col_names[_COL_MAX] = {
    "cpu_core_h",     "cpu_used_core_h", "mem_gib_h",	   "mem_used_gib_h",
    "gpu_h",	      "gpu_used_h",	 "io_gib",	   "net_gib",
    "energy_cpu_kwh", "energy_dram_kwh", "energy_gpu_kwh",
};

static void row_cols(const struct report_row *row, double out[_COL_MAX])
{
	const double *q = row->q;

	out[COL_CPU_CORE_H] = q[COLL_SUM_CPU_CHARGED_CORE_S] / 3600;
	out[COL_CPU_USED_CORE_H] = q[COLL_SUM_CPU_S] / 3600;
	out[COL_MEM_GIB_H] = q[COLL_SUM_MEM_CHARGED_BYTE_S] / 3600 / GIB;
	out[COL_MEM_USED_GIB_H] = q[COLL_SUM_MEM_BYTE_S] / 3600 / GIB;
	out[COL_GPU_H] = q[COLL_SUM_GPU_CHARGED_S] / 3600;
	out[COL_GPU_USED_H] = q[COLL_SUM_GPU_S] / 3600;
	out[COL_IO_GIB] = (q[COLL_SUM_IO_READ_BYTES] + q[COLL_SUM_IO_WRITE_BYTES]) / GIB;
	out[COL_NET_GIB] = (q[COLL_SUM_NET_RX_BYTES] + q[COLL_SUM_NET_TX_BYTES]) / GIB;
	out[COL_ENERGY_CPU_KWH] = q[COLL_SUM_ENERGY_CPU_J] / 3.6e6;
	out[COL_ENERGY_DRAM_KWH] = q[COLL_SUM_ENERGY_DRAM_J] / 3.6e6;
	out[COL_ENERGY_GPU_KWH] = q[COLL_SUM_ENERGY_GPU_J] / 3.6e6;
}

/* whole grams as kg: "1.234" */
static const char *kg_str(char *buf, size_t len, int64_t g)
{
	snprintf(buf, len, "%" PRId64 ".%03" PRId64, g / 1000, g % 1000);
	return buf;
}

/* whole mWh as kWh: "12.345678" */
static void kwh_str(char *buf, size_t len, int64_t mwh)
{
	snprintf(buf, len, "%" PRId64 ".%06" PRId64, mwh / 1000000, mwh % 1000000);
}

/* Counts of a row, in output order */
static const struct {
	const char *name;
	int q;
} count_cols[] = {
    {"tasks_ended", COLL_SUM_TASKS},
    {"tasks_active", REPORT_Q_ACTIVE},
    {"tasks_without_request", COLL_SUM_NO_REQUEST_TASKS},
    {"running_tasks", REPORT_Q_RUNNING},
    {"failed_tasks", COLL_SUM_FAILED_TASKS},
    {"oom_killed", COLL_SUM_OOM_KILLED},
    {"time_limit", COLL_SUM_TIME_LIMIT},
    {"cpu_time_limit", COLL_SUM_CPU_TIME_LIMIT},
    {"gpu_memory_limit", COLL_SUM_GPU_MEMORY_LIMIT},
    {"energy_unmeasured_tasks", COLL_SUM_ENERGY_UNMEASURED_TASKS},
};

void report_csv_field(FILE *f, const char *s)
{
	/* a spreadsheet takes a cell starting with one of these as a formula */
	const bool formula = s[0] && strchr("=+-@\t\r", s[0]);

	if (!formula && !strpbrk(s, ",\"\r\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	if (formula)
		fputc('\'', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* Invisible format characters that reorder or hide text: the bidi marks, embeddings,
 * overrides and isolates, zero-width characters, the line and paragraph separators, the
 * byte order mark, interlinear annotations. */
static bool format_char(uint32_t c)
{
	return c == 0x061c || c == 0x180e || (c >= 0x200b && c <= 0x200f) ||
	       (c >= 0x2028 && c <= 0x202e) || (c >= 0x2060 && c <= 0x206f) || c == 0xfeff ||
	       (c >= 0xfff9 && c <= 0xfffb);
}

char *report_shown(const char *s)
{
	_cleanup_free_ char *e = esc_dup(s);
	char *out, *o;

	if (!e)
		return NULL;
	/* esc_dup's text is valid UTF-8; a format character of 2 bytes (U+061C) or 3 becomes
	 * 6 bytes */
	out = o = malloc(3 * strlen(e) + 1);
	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)e; *p;) {
		uint32_t c = *p;
		int n = 1;

		if (*p >= 0xf0) {
			c = (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3f) << 12 |
			    (uint32_t)(p[2] & 0x3f) << 6 | (p[3] & 0x3f);
			n = 4;
		} else if (*p >= 0xe0) {
			c = (uint32_t)(p[0] & 0x0f) << 12 | (uint32_t)(p[1] & 0x3f) << 6 |
			    (p[2] & 0x3f);
			n = 3;
		} else if (*p >= 0xc0) {
			c = (uint32_t)(p[0] & 0x1f) << 6 | (p[1] & 0x3f);
			n = 2;
		}
		if (format_char(c))
			o += sprintf(o, "\\u%04x", (unsigned)c);
		else {
			memcpy(o, p, (size_t)n);
			o += n;
		}
		p += n;
	}
	*o = 0;
	return out;
}

/* Text for HTML: shown as report_shown does, then markup escaped. */
static void html_str(FILE *f, const char *text)
{
	_cleanup_free_ char *shown = report_shown(text);
	const char *s = shown ?: "?";

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

void report_html_text(FILE *f, const char *text)
{
	html_str(f, text);
}

static const char *const cost_names[_REPORT_COST_MAX] = {"cpu_cost", "mem_cost",  "gpu_cost",
							 "io_cost",  "net_cost",  "cost",
							 "waste",    "idle_cost", "shared_cost"};

/* The cost columns written: idle_cost only when the report has idle in it, shared_cost when
 * the price sheet has shared costs. */
static bool cost_shown(const struct report *r, int k)
{
	return k == REPORT_COST_IDLE	 ? r->spec.idle != REPORT_IDLE_OFF
	       : k == REPORT_COST_SHARED ? r->shared
					 : true;
}

static void write_csv(const struct report *r, FILE *f)
{
	char h[PRICE_LABEL_MAX + 8], m[32];

	fputs("period,first_day,last_day", f);
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		fputc(',', f);
		report_csv_field(f, h);
	}
	for (size_t c = 0; c < ARRAY_SIZE(count_cols); c++)
		fprintf(f, ",%s", count_cols[c].name);
	for (int c = 0; c < _COL_MAX; c++)
		fprintf(f, ",%s", col_names[c]);
	for (int k = 0; k < _REPORT_COST_MAX; k++)
		if (cost_shown(r, k))
			fprintf(f, ",%s", cost_names[k]);
	fputs(r->carbon ? ",energy_kwh,co2e_kg" : ",energy_kwh", f);
	fputs(",cpu_eff,mem_eff,gpu_eff\n", f);
	for (size_t i = 0; i <= r->n; i++) {
		const struct report_row *row = i < r->n ? &r->rows[i] : &r->total;
		double cols[_COL_MAX];

		fprintf(f, "%s,%s,%s", row->period, row->first_day, row->last_day);
		for (size_t d = 0; d < r->spec.n_dims; d++) {
			fputc(',', f);
			report_csv_field(f, i < r->n ? row->key[d] : "");
		}
		for (size_t c = 0; c < ARRAY_SIZE(count_cols); c++)
			fprintf(f, ",%.0f", row->q[count_cols[c].q]);
		row_cols(row, cols);
		for (int c = 0; c < _COL_MAX; c++) {
			report_num_full(m, sizeof(m), cols[c]);
			fprintf(f, ",%s", m);
		}
		for (int k = 0; k < _REPORT_COST_MAX; k++) {
			if (!cost_shown(r, k))
				continue;
			report_money(m, sizeof(m), row->cents[k]);
			fprintf(f, ",%s", m);
		}
		kwh_str(m, sizeof(m), row->energy_mwh);
		fprintf(f, ",%s", m);
		if (r->carbon)
			fprintf(f, ",%s", kg_str(m, sizeof(m), row->co2e_g));
		report_num_full(m, sizeof(m), report_cpu_eff(row));
		fprintf(f, ",%s", m);
		report_num_full(m, sizeof(m), report_mem_eff(row));
		fprintf(f, ",%s", m);
		report_num_full(m, sizeof(m), report_gpu_eff(row));
		fprintf(f, ",%s\n", m);
	}
}

void report_json_text(FILE *f, const char *s)
{
	_cleanup_free_ char *e = NULL;

	if (utf8_invalid_at(s) >= 0)
		e = esc_dup(s);
	fputs_json_string(f, e ?: s);
}

static void json_row(const struct report *r, const struct report_row *row, bool is_total, FILE *f)
{
	char m[32], h[PRICE_LABEL_MAX + 8];
	double cols[_COL_MAX];

	fputc('{', f);
	if (!is_total) {
		fputs("\"period\":", f);
		fputs_json_string(f, row->period);
		fputc(',', f);
	}
	fprintf(f, "\"first_day\":\"%s\",\"last_day\":\"%s\"", row->first_day, row->last_day);
	if (!is_total)
		for (size_t d = 0; d < r->spec.n_dims; d++) {
			dim_header(r, d, h, sizeof(h));
			fputc(',', f);
			fputs_json_string(f, h);
			fputc(':', f);
			report_json_text(f, row->key[d]);
		}
	for (size_t c = 0; c < ARRAY_SIZE(count_cols); c++)
		fprintf(f, ",\"%s\":%.0f", count_cols[c].name, row->q[count_cols[c].q]);
	row_cols(row, cols);
	for (int c = 0; c < _COL_MAX; c++) {
		report_num_full(m, sizeof(m), cols[c]);
		fprintf(f, ",\"%s\":%s", col_names[c], m);
	}
	for (int k = 0; k < _REPORT_COST_MAX; k++) {
		if (!cost_shown(r, k))
			continue;
		report_money(m, sizeof(m), row->cents[k]);
		fprintf(f, ",\"%s\":\"%s\"", cost_names[k], m);
	}
	kwh_str(m, sizeof(m), row->energy_mwh);
	fprintf(f, ",\"energy_kwh\":\"%s\"", m);
	if (r->carbon)
		fprintf(f, ",\"co2e_kg\":\"%s\"", kg_str(m, sizeof(m), row->co2e_g));
	if (r->carbon && is_total)
		fprintf(f, ",\"carbon_uncovered_kwh\":\"%s\"",
			(kwh_str(h, sizeof(h), r->carbon_uncovered_mwh), h));
	report_num_full(m, sizeof(m), report_cpu_eff(row));
	fprintf(f, ",\"cpu_eff\":%s", m);
	report_num_full(m, sizeof(m), report_mem_eff(row));
	fprintf(f, ",\"mem_eff\":%s", m);
	report_num_full(m, sizeof(m), report_gpu_eff(row));
	fprintf(f, ",\"gpu_eff\":%s}", m);
}

static const char *const period_names[] = {"day", "week", "month", "all"};
static const char note_limits[] =
    "tasks_ended counts the tasks that ended in the period, running_tasks those still running at "
    "its end (charged from their latest sample), tasks_active those that ran at least partly in "
    "it (ended, running, or running on past its last day; not additive over periods); usage and "
    "cost are split over the days a task ran; "
    "failed_tasks did not exit 0, oom_killed and the other limits count the tasks killed by it";
static const char note_eff[] =
    "efficiency = used / charged, where a task is charged max(requested, used): a task without "
    "a request is charged what it used (100 %, counted in tasks_without_request); a group's "
    "efficiency is sum(used) / sum(charged) over its tasks, between 0 and 1; memory is "
    "time-integrated (byte-seconds), not peak";
static const char note_none[] =
    "(none) stands for an empty or missing account, user, job, node or label value";

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
	fprintf(f, ",\"notes\":[\"%s\",\"%s\",\"%s\"]}\n", note_limits, note_eff, note_none);
}

/* Columns text takes on a terminal once shown (report_shown): its UTF-8 lead bytes. */
static int term_width(const char *text)
{
	_cleanup_free_ char *shown = report_shown(text);
	int n = 0;

	for (const unsigned char *p = (const unsigned char *)(shown ?: "?"); *p; p++)
		n += (*p & 0xc0) != 0x80;
	return n;
}

static void html_money(FILE *f, const struct report *r, int64_t cents);

/*
 * One cell of the table format or of an HTML table. Table (html false): a space, then text
 * shown as report_shown does, padded to width columns. HTML: <tag class="cls">, then text
 * shown and markup-escaped, or (text NULL) the amount cents with the report's currency, then
 * </tag>.
 */
static void put_cell(FILE *f, const struct report *r, bool html, const char *tag, const char *cls,
		     const char *text, int64_t cents, int width)
{
	if (!html) {
		_cleanup_free_ char *shown = report_shown(text);

		fputc(' ', f);
		fputs(shown ?: "?", f);
		for (int n = term_width(text); n < width; n++)
			fputc(' ', f);
		return;
	}
	fprintf(f, "<%s", tag);
	if (cls)
		fprintf(f, " class=\"%s\"", cls);
	fputc('>', f);
	if (text)
		html_str(f, text);
	else
		html_money(f, r, cents);
	fprintf(f, "</%s>", tag);
}

static void write_table(const struct report *r, FILE *f)
{
	char h[PRICE_LABEL_MAX + 8], m[_REPORT_COST_MAX][32], q[3][40], kwh[32], co2[48];
	int pw = 6, kw[REPORT_DIMS_MAX];

	for (size_t i = 0; i < r->n; i++)
		pw = MAX(pw, (int)strlen(r->rows[i].period));
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		kw[d] = MIN(MAX(8, term_width(h)), 24);
		for (size_t i = 0; i < r->n && kw[d] < 24; i++)
			kw[d] = MIN(MAX(kw[d], term_width(r->rows[i].key[d])), 24);
	}
	fprintf(f, "%-*s", pw, "PERIOD");
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		put_cell(f, r, false, NULL, NULL, h, 0, kw[d]);
	}
	fprintf(f, " %7s %7s %6s %5s %6s %5s %12s %12s %12s %12s %12s %13s%s %6s %6s %6s\n",
		"ENDED", "ACTIVE", "NO_REQ", "RUN", "FAILED", "OOM", "CORE_H", "GIB_H", "COST",
		"CPU_COST", "WASTE", "KWH", r->carbon ? "   KG_CO2E" : "", "CPU_EF", "MEM_EF",
		"GPU_EF");
	for (size_t i = 0; i <= r->n; i++) {
		const struct report_row *row = i < r->n ? &r->rows[i] : &r->total;
		double cols[_COL_MAX];

		for (int k = 0; k < _REPORT_COST_MAX; k++)
			report_money(m[k], sizeof(m[k]), row->cents[k]);
		row_cols(row, cols);
		num_human(q[0], sizeof(q[0]), cols[COL_CPU_CORE_H]);
		num_human(q[1], sizeof(q[1]), cols[COL_MEM_GIB_H]);
		kwh_str(kwh, sizeof(kwh), row->energy_mwh);
		/* a task whose energy was not (fully) measured adds nothing: say so, not a bare 0
		 */
		if (row->q[COLL_SUM_ENERGY_UNMEASURED_TASKS] > 0 && strlen(kwh) + 1 < sizeof(kwh))
			strcat(kwh, "*");
		co2[0] = 0;
		if (r->carbon)
			snprintf(co2, sizeof(co2), " %9s", kg_str(q[2], sizeof(q[2]), row->co2e_g));
		fprintf(f, "%-*s", pw, i < r->n ? row->period : "TOTAL");
		for (size_t d = 0; d < r->spec.n_dims; d++)
			put_cell(f, r, false, NULL, NULL, i < r->n ? row->key[d] : "", 0, kw[d]);
		fprintf(
		    f,
		    " %7.0f %7.0f %6.0f %5.0f %6.0f %5.0f %12s %12s %12s %12s %12s %13s%s %5.1f%% "
		    "%5.1f%% %5.1f%%\n",
		    row->q[COLL_SUM_TASKS], row->q[REPORT_Q_ACTIVE],
		    row->q[COLL_SUM_NO_REQUEST_TASKS], row->q[REPORT_Q_RUNNING],
		    row->q[COLL_SUM_FAILED_TASKS], row->q[COLL_SUM_OOM_KILLED], q[0], q[1],
		    m[REPORT_COST_TOTAL], m[REPORT_COST_CPU], m[REPORT_COST_WASTE], kwh, co2,
		    report_cpu_eff(row) * 100, report_mem_eff(row) * 100,
		    report_gpu_eff(row) * 100);
	}
	fprintf(f, "(amounts in %s; %zu rollup rows read)\n(%s)\n(%s)\n", r->currency, r->cells,
		note_eff, note_limits);
	if (r->total.q[COLL_SUM_ENERGY_UNMEASURED_TASKS] > 0)
		fprintf(f,
			"(KWH*: %.0f task(s) with a part of their energy not measured (no RAPL or "
			"NVML source on their node); KWH holds only the measured parts)\n",
			r->total.q[COLL_SUM_ENERGY_UNMEASURED_TASKS]);
	if (r->shared) {
		char sh[32];

		report_money(sh, sizeof(sh), r->total.cents[REPORT_COST_SHARED]);
		fprintf(
		    f,
		    "(shared costs: %s in total, in COST; per row as shared_cost in the CSV and "
		    "JSON; what no group took in (shared) rows)\n",
		    sh);
	}
	if (r->carbon) {
		char kg[32], un[32];

		kwh_str(un, sizeof(un), r->carbon_uncovered_mwh);
		fprintf(f,
			"(carbon: %s kg CO2e in total; per row in the CSV and JSON; %s kWh on days "
			"without an intensity)\n",
			kg_str(kg, sizeof(kg), r->total.co2e_g), un);
	}
}

/* ---- HTML ---- */

/* The cost charts' stacked parts: the five components, then (with --idle or --share-idle) the
 * nodes' idle capacity, then (a sheet with [shared:NAME]) the shared costs */
static const char *const comp_label_all[7] = {"CPU",	 "memory",	  "GPU",	 "IO",
					      "network", "idle capacity", "shared costs"};
static const char *const comp_color_all[7] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
					      "#59a14f", "#bab0ac", "#b07aa1"};
static const enum report_cost comp_cost_all[7] = {
    REPORT_COST_CPU, REPORT_COST_MEM,  REPORT_COST_GPU,	  REPORT_COST_IO,
    REPORT_COST_NET, REPORT_COST_IDLE, REPORT_COST_SHARED};

/* The parts a cost chart stacks: 5, plus idle and shared costs where the report has them. */
static int chart_parts(const struct report *r)
{
	return 5 + (r->spec.idle != REPORT_IDLE_OFF) + r->shared;
}

/* The k-th part of r's cost charts, an index into the *_all arrays */
static int part_of(const struct report *r, int k)
{
	return k < 5 || r->spec.idle != REPORT_IDLE_OFF ? k : k + 1;
}

static const char *comp_label(const struct report *r, int k)
{
	return comp_label_all[part_of(r, k)];
}

static const char *comp_color(const struct report *r, int k)
{
	return comp_color_all[part_of(r, k)];
}

static enum report_cost comp_cost(const struct report *r, int k)
{
	return comp_cost_all[part_of(r, k)];
}

/* The energy charts' stacked parts (usage.energy_j) */
static const char *const epart_label[3] = {"CPU", "DRAM", "GPU"};
static const char *const epart_name[3] = {"cpu", "dram", "gpu"};
static const char *const epart_color[3] = {"#4e79a7", "#f28e2b", "#e15759"};

#define HTML_TOP       10   /* groups in the charts, then "other" */
#define HTML_ROWS_MAX  2000 /* rows of the detail table */
#define HTML_NODES_MAX 40   /* nodes named in the header */

/* A group of the report over all its periods (the charts' unit) */
struct hgroup {
	size_t row; /* a row with its key */
	double q[REPORT_Q_MAX];
	int64_t cents[_REPORT_COST_MAX];
	int64_t energy_mwh, co2e_g;
	size_t n; /* groups folded in ("other") */
};

static int key_cmp(const void *x, const void *y, void *ud)
{
	const struct report *r = ud;
	const struct report_row *a = &r->rows[*(const size_t *)x],
				*b = &r->rows[*(const size_t *)y];
	int c = 0;

	for (size_t d = 0; !c && d < r->spec.n_dims; d++)
		c = strcmp(a->key[d], b->key[d]);
	return c;
}

static int hgroup_cost_cmp(const void *x, const void *y)
{
	const struct hgroup *a = x, *b = y;

	if (a->cents[REPORT_COST_TOTAL] != b->cents[REPORT_COST_TOTAL])
		return a->cents[REPORT_COST_TOTAL] > b->cents[REPORT_COST_TOTAL] ? -1 : 1;
	return a->row < b->row ? -1 : a->row > b->row;
}

/* The rows folded per key, most expensive first; *ret_n groups (malloc'd, NULL if none). */
static struct hgroup *html_groups(const struct report *r, size_t *ret_n)
{
	_cleanup_free_ size_t *idx = calloc(r->n + 1, sizeof(*idx));
	struct hgroup *g = calloc(r->n + 1, sizeof(*g));
	size_t n = 0;

	*ret_n = 0;
	if (!idx || !g) {
		free(g);
		return NULL;
	}
	for (size_t i = 0; i < r->n; i++)
		idx[i] = i;
	qsort_r(idx, r->n, sizeof(*idx), key_cmp, (void *)r);
	for (size_t i = 0; i < r->n; i++) {
		const struct report_row *row = &r->rows[idx[i]];

		if (!n || key_cmp(&g[n - 1].row, &idx[i], (void *)r) != 0)
			g[n++] = (struct hgroup){.row = idx[i], .n = 1};
		/* the carried count of the range's last day: the group's tasks active in the
		 * range are those ended in it, running, or carried past its end */
		for (int q = 0; q < REPORT_Q_MAX; q++)
			if (q != COLL_SUM_CARRIED_TASKS ||
			    strcmp(row->last_day, r->total.last_day) == 0)
				g[n - 1].q[q] += row->q[q];
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			g[n - 1].cents[k] += row->cents[k];
		g[n - 1].energy_mwh += row->energy_mwh;
		g[n - 1].co2e_g += row->co2e_g;
	}
	for (size_t i = 0; i < n; i++) {
		struct report_row tmp = {0};

		memcpy(tmp.q, g[i].q, sizeof(tmp.q));
		g[i].q[REPORT_Q_ACTIVE] = report_row_active(&tmp);
	}
	qsort(g, n, sizeof(*g), hgroup_cost_cmp);
	*ret_n = n;
	return g;
}

static void html_money(FILE *f, const struct report *r, int64_t cents)
{
	char m[32];

	report_money(m, sizeof(m), cents);
	fprintf(f, "%s&#8239;", m);
	html_str(f, r->currency);
}

static void html_key(FILE *f, const struct report *r, const struct hgroup *g)
{
	if (g->n > 1 || g->row == SIZE_MAX) {
		fprintf(f, "other (%zu groups)", g->n);
		return;
	}
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		if (d)
			fputs(" / ", f);
		html_str(f, r->rows[g->row].key[d]);
	}
}

/* A round axis maximum (1, 2 or 5 times a power of ten, at least max) and its step */
static int64_t nice_axis(int64_t max, int64_t *step)
{
	int64_t p = 1;

	if (max <= 0)
		max = 1;
	while (p * 10 <= max / 4 + 1)
		p *= 10;
	for (;;) {
		static const int m[] = {1, 2, 5};

		for (int i = 0; i < 3; i++)
			if (p * m[i] * 4 >= max) {
				*step = p * m[i];
				return (max + *step - 1) / *step * *step;
			}
		p *= 10;
	}
}

static void html_legend(FILE *f, const struct report *r, int x, int y)
{
	x = MIN(x, 950 - chart_parts(r) * 95);
	for (int k = 0; k < chart_parts(r); k++)
		fprintf(f,
			"<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
			"<text x=\"%d\" y=\"%d\">%s</text>\n",
			x + k * 95, y, comp_color(r, k), x + k * 95 + 16, y + 10, comp_label(r, k));
}

/* A days chart's tick and label (MM-DD) under the bar centred at x; the axis at y. */
static void svg_day_tick(FILE *f, double x, int y, const char *day)
{
	fprintf(f,
		"<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>"
		"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.5s</text>\n",
		x, x, y, y + 4, x, y + 16, day + 5);
}

/* A days chart's axis title at (x, y) and its end. */
static void svg_days_end(FILE *f, const struct report *r, int x, int y)
{
	fprintf(f,
		"<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">day (UTC), %s to %s</text>\n"
		"</svg>\n",
		x, y, r->spec.from, r->total.last_day);
}

/* Cost per day of the range (days without cost too), stacked by component, with axes and a
 * legend */
static void html_days_chart(FILE *f, const struct report *r)
{
	const int W = 960, H = 300, L = 90, R = 10, T = 30, B = 40;
	const int pw = W - L - R, ph = H - T - B;
	int64_t max = 0, step, top;
	const size_t nd =
	    (size_t)((day_start_ns(r->spec.to) - day_start_ns(r->spec.from)) / DAY_NS);
	size_t j = 0;
	const double bw = nd ? (double)pw / (double)nd : pw;
	const size_t every = nd > 12 ? (nd + 11) / 12 : 1;

	for (size_t i = 0; i < r->n_days; i++)
		max = MAX(max, r->days[i].cents[REPORT_COST_TOTAL]);
	top = nice_axis(max, &step);
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"id=\"days-chart\" role=\"img\" aria-label=\"cost per day by component\">\n",
		W, H);
	html_legend(f, r, L, 6);
	for (int64_t v = 0; v <= top; v += step) {
		const double y = T + ph - (double)v / (double)top * ph;
		char m[32];

		report_money(m, sizeof(m), v);
		fprintf(f,
			"<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
			"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s&#8239;",
			L, W - R, y, y, L - 6, y + 4, m);
		html_str(f, r->currency);
		fputs("</text>\n", f);
	}
	fprintf(f,
		"<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>"
		"<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n",
		L, W - R, T + ph, T + ph, L, L, T, T + ph);
	for (size_t i = 0; i < nd; i++) {
		struct report_day zero = {{0}}, *d = &zero;
		const double x = L + (double)i * bw;
		double y = T + ph;

		report_day_add(r->spec.from, (int)i, zero.day);
		if (j < r->n_days && strcmp(r->days[j].day, zero.day) == 0)
			d = &r->days[j++];
		fprintf(f, "<g class=\"day\" data-day=\"%s\"><title>%s: ", d->day, d->day);
		html_money(f, r, d->cents[REPORT_COST_TOTAL]);
		for (int k = 0; k < chart_parts(r); k++) {
			fprintf(f, "; %s ", comp_label(r, k));
			html_money(f, r, d->cents[comp_cost(r, k)]);
		}
		fputs("</title>", f);
		for (int k = 0; k < chart_parts(r); k++) {
			const int64_t c = d->cents[comp_cost(r, k)];
			const double h = (double)c / (double)top * ph;
			char m[32];

			if (c <= 0)
				continue;
			y -= h;
			report_money(m, sizeof(m), c);
			fprintf(f,
				"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
				"fill=\"%s\" data-component=\"%s\" data-amount=\"%s\"/>",
				x + bw * 0.1, y, MAX(bw * 0.8, 0.5), h, comp_color(r, k),
				cost_names[comp_cost(r, k)], m);
		}
		fputs("</g>\n", f);
		if (i % every == 0)
			svg_day_tick(f, x + bw / 2, T + ph, d->day);
	}
	svg_days_end(f, r, L + pw / 2, H - 6);
}

/* The top groups and "other": cost stacked by component, then efficiency and waste */
static void html_groups_chart(FILE *f, const struct report *r, const struct hgroup *g, size_t ng)
{
	const int W = 960, L = 300, bar = 440, rh = 26;
	const int H = (int)ng * rh + 60;
	int64_t max = 1, step, top;
	int y = 40;

	for (size_t i = 0; i < ng; i++)
		max = MAX(max, g[i].cents[REPORT_COST_TOTAL]);
	top = nice_axis(max, &step);
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"id=\"groups-chart\" role=\"img\" aria-label=\"cost per group by component\">\n",
		W, H);
	html_legend(f, r, L, 6);
	for (int64_t v = 0; v <= top; v += step) {
		const double x = L + (double)v / (double)top * bar;
		char m[32];

		report_money(m, sizeof(m), v);
		fprintf(f,
			"<line x1=\"%.1f\" x2=\"%.1f\" y1=\"30\" y2=\"%d\" stroke=\"#e5e5e5\"/>"
			"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s&#8239;",
			x, x, H - 18, x, H - 4, m);
		html_str(f, r->currency);
		fputs("</text>\n", f);
	}
	for (size_t i = 0; i < ng; i++, y += rh) {
		double x = L;

		fprintf(f, "<g class=\"group\"><text x=\"%d\" y=\"%d\" text-anchor=\"end\">", L - 8,
			y + 15);
		html_key(f, r, &g[i]);
		fputs("</text>", f);
		for (int k = 0; k < chart_parts(r); k++) {
			const int64_t c = g[i].cents[comp_cost(r, k)];
			const double w = (double)c / (double)top * bar;
			char m[32];

			if (c <= 0)
				continue;
			report_money(m, sizeof(m), c);
			fprintf(f,
				"<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
				"fill=\"%s\" data-component=\"%s\" data-amount=\"%s\"><title>%s ",
				x, y + 3, w, rh - 8, comp_color(r, k), cost_names[comp_cost(r, k)],
				m, comp_label(r, k));
			html_money(f, r, c);
			fputs("</title></rect>", f);
			x += w;
		}
		fprintf(f, "<text class=\"amount\" x=\"%.1f\" y=\"%d\">", x + 6, y + 15);
		html_money(f, r, g[i].cents[REPORT_COST_TOTAL]);
		fputs("</text></g>\n", f);
	}
	fputs("</svg>\n", f);
}

static void html_eff_chart(FILE *f, const struct report *r, const struct hgroup *g, size_t ng)
{
	const int W = 960, L = 300, bar = 300, rh = 40;
	const int H = (int)ng * rh + 50;
	int y = 40;

	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"id=\"eff-chart\" role=\"img\" aria-label=\"efficiency and waste per group\">\n"
		"<rect x=\"%d\" y=\"6\" width=\"12\" height=\"12\" fill=\"%s\"/>"
		"<text x=\"%d\" y=\"16\">CPU used / charged</text>"
		"<rect x=\"%d\" y=\"6\" width=\"12\" height=\"12\" fill=\"%s\"/>"
		"<text x=\"%d\" y=\"16\">memory used / charged</text>"
		"<rect x=\"%d\" y=\"6\" width=\"12\" height=\"12\" fill=\"#d9d9d9\"/>"
		"<text x=\"%d\" y=\"16\">reserved, unused</text>\n",
		W, H, L, comp_color_all[0], L + 16, L + 170, comp_color_all[1], L + 186, L + 360,
		L + 376);
	for (int t = 0; t <= 4; t++)
		fprintf(f,
			"<line x1=\"%d\" x2=\"%d\" y1=\"30\" y2=\"%d\" stroke=\"#e5e5e5\"/>"
			"<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d%%</text>\n",
			L + t * bar / 4, L + t * bar / 4, H - 18, L + t * bar / 4, H - 4, t * 25);
	for (size_t i = 0; i < ng; i++, y += rh) {
		struct report_row tmp = {0};
		double e[2];

		memcpy(tmp.q, g[i].q, sizeof(tmp.q));
		e[0] = report_cpu_eff(&tmp);
		e[1] = report_mem_eff(&tmp);
		fprintf(f, "<g class=\"eff\"><text x=\"%d\" y=\"%d\" text-anchor=\"end\">", L - 8,
			y + 20);
		html_key(f, r, &g[i]);
		fputs("</text>", f);
		for (int k = 0; k < 2; k++)
			fprintf(
			    f,
			    "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"14\" fill=\"#d9d9d9\"/>"
			    "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"14\" fill=\"%s\"/>"
			    "<text x=\"%d\" y=\"%d\">%s %.1f%%</text>",
			    L, y + 2 + k * 17, bar, L, y + 2 + k * 17, e[k] * bar, comp_color(r, k),
			    L + bar + 8, y + 14 + k * 17, k ? "memory" : "CPU", e[k] * 100);
		fprintf(f, "<text class=\"waste\" x=\"%d\" y=\"%d\">waste ", L + bar + 130, y + 22);
		html_money(f, r, g[i].cents[REPORT_COST_WASTE]);
		fputs("</text></g>\n", f);
	}
	fputs("</svg>\n", f);
}

/* An energy or carbon amount in the charts: kWh from whole mWh, or kg CO2e from whole grams */
static void eamount_str(char *buf, size_t len, bool co2e, int64_t v)
{
	if (co2e)
		kg_str(buf, len, v);
	else
		kwh_str(buf, len, v);
}

/* A bar's parts: the measured energy's CPU, DRAM and GPU parts (joules j[]) of its whole mWh,
 * apportioned by their microjoules so that they sum to it exactly; carbon is one part. */
static int bar_parts(bool co2e, int64_t total, const double j[3], int64_t out[3])
{
	int64_t w[3];

	if (co2e) {
		out[0] = total;
		return 1;
	}
	for (int p = 0; p < 3; p++)
		w[p] = micro_weight(j[p]);
	report_apportion(total, w, 3, out);
	return 3;
}

static void unmeasured_note(FILE *f, double n)
{
	if (n > 0)
		fprintf(f,
			"; %.0f task(s) with a part of their energy not measured: the figure holds "
			"only the measured parts",
			n);
}

/* One day's bar of an energy or carbon chart: x its left, bw its width, base the axis' y,
 * scale pixels per unit (mWh or g). */
static void eday_bar(FILE *f, const struct report_day *d, bool co2e, double x, double bw,
		     double base, double scale)
{
	const char *unit = co2e ? "kg CO2e" : "kWh";
	const int np = co2e ? 1 : 3;
	int64_t part[3], total;
	double y = base;
	char m[32];

	total = co2e ? d->co2e_g : d->energy_mwh;
	bar_parts(co2e, total, d->energy_j, part);
	eamount_str(m, sizeof(m), co2e, total);
	fprintf(f,
		"<g class=\"eday\" data-day=\"%s\" data-total=\"%s\" "
		"data-unmeasured=\"%.0f\"><title>%s: %s %s",
		d->day, m, d->unmeasured, d->day, m, unit);
	for (int p = 0; p < np && !co2e; p++) {
		eamount_str(m, sizeof(m), co2e, part[p]);
		fprintf(f, "%s%s %s", p ? ", " : " (", epart_label[p], m);
	}
	fputs(co2e ? "" : ")", f);
	unmeasured_note(f, d->unmeasured);
	fputs("</title>", f);
	for (int p = 0; p < np; p++) {
		const double h = (double)part[p] * scale;

		if (part[p] <= 0)
			continue;
		y -= h;
		eamount_str(m, sizeof(m), co2e, part[p]);
		fprintf(f,
			"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
			"fill=\"%s\" data-part=\"%s\" data-amount=\"%s\"/>",
			x + bw * 0.1, y, MAX(bw * 0.8, 0.5), h, co2e ? "#59a14f" : epart_color[p],
			co2e ? "co2e" : epart_name[p], m);
	}
	if (d->unmeasured > 0)
		fprintf(f,
			"<text class=\"unmeasured\" x=\"%.1f\" y=\"%.1f\" "
			"text-anchor=\"middle\">*</text>",
			x + bw / 2, y - 3);
	fputs("</g>\n", f);
}

/*
 * An energy or carbon chart's opening: the <svg> of W x H, id "kwh-PERs-chart" or
 * "co2e-PERs-chart" with the label "... per PER" (per "day" or "group"), and the legend of its
 * parts (CPU / DRAM / GPU, or kg CO2e) from x = L.
 */
static void energy_chart_open(FILE *f, int W, int H, int L, const char *per, bool co2e)
{
	const int np = co2e ? 1 : 3;

	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"id=\"%s-%ss-chart\" role=\"img\" aria-label=\"%s per %s\">\n",
		W, H, co2e ? "co2e" : "kwh", per, co2e ? "carbon" : "measured energy by part", per);
	for (int p = 0; p < np; p++)
		fprintf(f,
			"<rect x=\"%d\" y=\"6\" width=\"12\" height=\"12\" fill=\"%s\"/>"
			"<text x=\"%d\" y=\"16\">%s</text>\n",
			L + p * 95, co2e ? "#59a14f" : epart_color[p], L + p * 95 + 16,
			co2e ? "kg CO2e" : epart_label[p]);
}

/*
 * Energy (kWh, stacked CPU / DRAM / GPU) or carbon (kg CO2e) per day of the range. A day
 * with tasks whose energy was not (fully) measured carries data-unmeasured and a "*" over
 * its bar, never a bare figure read as complete.
 */
static void html_energy_days_chart(FILE *f, const struct report *r, bool co2e)
{
	const int W = 960, H = 260, L = 90, R = 10, T = 30, B = 40;
	const int pw = W - L - R, ph = H - T - B;
	int64_t max = 0, step, top;
	const size_t nd =
	    (size_t)((day_start_ns(r->spec.to) - day_start_ns(r->spec.from)) / DAY_NS);
	size_t j = 0;
	const double bw = nd ? (double)pw / (double)nd : pw;
	const size_t every = nd > 12 ? (nd + 11) / 12 : 1;
	const int np = co2e ? 1 : 3;

	for (size_t i = 0; i < r->n_days; i++)
		max = MAX(max, co2e ? r->days[i].co2e_g : r->days[i].energy_mwh);
	top = nice_axis(max, &step);
	energy_chart_open(f, W, H, L, "day", co2e);
	fprintf(f, "<text x=\"%d\" y=\"16\">* tasks not measured</text>\n", L + np * 95 + 20);
	for (int64_t v = 0; v <= top; v += step) {
		const double y = T + ph - (double)v / (double)top * ph;
		char m[32];

		eamount_str(m, sizeof(m), co2e, v);
		fprintf(f,
			"<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
			"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
			L, W - R, y, y, L - 6, y + 4, m);
	}
	fprintf(f,
		"<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>"
		"<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n",
		L, W - R, T + ph, T + ph, L, L, T, T + ph);
	for (size_t i = 0; i < nd; i++) {
		struct report_day zero = {{0}}, *d = &zero;
		const double x = L + (double)i * bw;

		report_day_add(r->spec.from, (int)i, zero.day);
		if (j < r->n_days && strcmp(r->days[j].day, zero.day) == 0)
			d = &r->days[j++];
		if (d != &zero) /* a day without a cell or a shared cost has nothing to draw */
			eday_bar(f, d, co2e, x, bw, T + ph, (double)ph / (double)top);
		if (i % every == 0)
			svg_day_tick(f, x + bw / 2, T + ph, d->day);
	}
	svg_days_end(f, r, L + pw / 2, H - 6);
}

/*
 * Energy (kWh, stacked CPU / DRAM / GPU) or carbon (kg CO2e) of the top groups and "other". A
 * group with tasks whose energy was not (fully) measured says so next to its bar ("*" and the
 * count; "not measured" when nothing of it was), never a plain 0.
 */
static void html_energy_groups_chart(FILE *f, const struct report *r, const struct hgroup *g,
				     size_t ng, bool co2e)
{
	const int W = 960, L = 300, bar = 400, rh = 26;
	const int H = (int)ng * rh + 60;
	const char *unit = co2e ? "kg CO2e" : "kWh";
	const int np = co2e ? 1 : 3;
	int64_t max = 0, step, top;
	int y = 40;

	for (size_t i = 0; i < ng; i++)
		max = MAX(max, co2e ? g[i].co2e_g : g[i].energy_mwh);
	top = nice_axis(max, &step);
	energy_chart_open(f, W, H, L, "group", co2e);
	for (int64_t v = 0; v <= top; v += step) {
		const double x = L + (double)v / (double)top * bar;
		char m[32];

		eamount_str(m, sizeof(m), co2e, v);
		fprintf(f,
			"<line x1=\"%.1f\" x2=\"%.1f\" y1=\"30\" y2=\"%d\" stroke=\"#e5e5e5\"/>"
			"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
			x, x, H - 18, x, H - 4, m);
	}
	for (size_t i = 0; i < ng; i++, y += rh) {
		const double un = g[i].q[COLL_SUM_ENERGY_UNMEASURED_TASKS];
		const int64_t total = co2e ? g[i].co2e_g : g[i].energy_mwh;
		const double j[3] = {g[i].q[COLL_SUM_ENERGY_CPU_J], g[i].q[COLL_SUM_ENERGY_DRAM_J],
				     g[i].q[COLL_SUM_ENERGY_GPU_J]};
		int64_t part[3];
		double x = L;
		char m[32];

		bar_parts(co2e, total, j, part);
		eamount_str(m, sizeof(m), co2e, total);
		fprintf(f,
			"<g class=\"egroup\" data-total=\"%s\" data-unmeasured=\"%.0f\"><text "
			"x=\"%d\" y=\"%d\" text-anchor=\"end\">",
			m, un, L - 8, y + 15);
		html_key(f, r, &g[i]);
		fputs("</text>", f);
		for (int p = 0; p < np; p++) {
			const double w = (double)part[p] / (double)top * bar;

			if (part[p] <= 0)
				continue;
			eamount_str(m, sizeof(m), co2e, part[p]);
			fprintf(
			    f,
			    "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\" "
			    "data-part=\"%s\" data-amount=\"%s\"><title>%s %s %s</title></rect>",
			    x, y + 3, w, rh - 8, co2e ? "#59a14f" : epart_color[p],
			    co2e ? "co2e" : epart_name[p], m, co2e ? "" : epart_label[p], m, unit);
			x += w;
		}
		eamount_str(m, sizeof(m), co2e, total);
		fprintf(f, "<text class=\"eamount\" x=\"%.1f\" y=\"%d\">", x + 6, y + 15);
		if (un > 0 && total == 0)
			fprintf(f, "not measured (%.0f task(s))", un);
		else if (un > 0)
			fprintf(f, "%s %s* (%.0f task(s) not measured)", m, unit, un);
		else
			fprintf(f, "%s %s", m, unit);
		fputs("</text></g>\n", f);
	}
	fputs("</svg>\n", f);
}

static void html_pct(FILE *f, double e)
{
	fprintf(f, "<td>%.1f%%</td>", e * 100);
}

/* The summary of the top groups, "other" and the total: counts, cost by component, waste,
 * efficiency */
static void html_groups_table(FILE *f, const struct report *r, const struct hgroup *g, size_t ng)
{
	char h[PRICE_LABEL_MAX + 8];

	fputs("<table id=\"groups\"><tr><th class=\"k\">", f);
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		if (d)
			fputs(" / ", f);
		html_str(f, h);
	}
	fputs("</th><th>tasks ended</th><th>tasks active</th><th>without request</th>"
	      "<th>running</th>",
	      f);
	for (int k = 0; k < chart_parts(r); k++)
		fprintf(f, "<th>%s</th>", comp_label(r, k));
	fputs("<th>cost</th><th>waste</th><th>CPU eff</th><th>mem eff</th><th>GPU eff</th></tr>\n",
	      f);
	for (size_t i = 0; i <= ng; i++) {
		struct report_row tmp = {0};
		const bool total = i == ng;

		memcpy(tmp.q, total ? r->total.q : g[i].q, sizeof(tmp.q));
		memcpy(tmp.cents, total ? r->total.cents : g[i].cents, sizeof(tmp.cents));
		fputs(total ? "<tr class=\"total\"><td class=\"k\">total"
			    : (g[i].n > 1 ? "<tr class=\"other\"><td class=\"k\">"
					  : "<tr class=\"group\"><td class=\"k\">"),
		      f);
		if (!total)
			html_key(f, r, &g[i]);
		fprintf(f, "</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td>",
			tmp.q[COLL_SUM_TASKS], tmp.q[REPORT_Q_ACTIVE],
			tmp.q[COLL_SUM_NO_REQUEST_TASKS], tmp.q[REPORT_Q_RUNNING]);
		for (int k = 0; k < chart_parts(r); k++)
			put_cell(f, r, true, "td", cost_names[comp_cost(r, k)], NULL,
				 tmp.cents[comp_cost(r, k)], 0);
		for (int k = REPORT_COST_TOTAL; k <= REPORT_COST_WASTE; k++)
			put_cell(f, r, true, "td", cost_names[k], NULL, tmp.cents[k], 0);
		html_pct(f, report_cpu_eff(&tmp));
		html_pct(f, report_mem_eff(&tmp));
		html_pct(f, report_gpu_eff(&tmp));
		fputs("</tr>\n", f);
	}
	fputs("</table>\n", f);
}

static void html_rows_table(FILE *f, const struct report *r)
{
	char h[PRICE_LABEL_MAX + 8], q[2][40];
	const size_t n = MIN(r->n, (size_t)HTML_ROWS_MAX);

	fputs("<table id=\"report\"><tr><th class=\"k\">period</th>", f);
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		put_cell(f, r, true, "th", "k", h, 0, 0);
	}
	fputs("<th>tasks ended</th><th>tasks active</th><th>without request</th><th>running</th>"
	      "<th>failed</th>"
	      "<th>OOM-killed</th><th>time limit</th><th>core-h</th><th>GiB-h</th><th>cost</th>"
	      "<th>waste</th><th>kWh</th>",
	      f);
	fputs(r->carbon ? "<th>kg CO2e</th><th>CPU eff</th><th>mem eff</th></tr>\n"
			: "<th>CPU eff</th><th>mem eff</th></tr>\n",
	      f);
	for (size_t i = 0; i < n; i++) {
		const struct report_row *row = &r->rows[i];
		double cols[_COL_MAX];

		fputs("<tr>", f);
		put_cell(f, r, true, "td", "k", row->period, 0, 0);
		for (size_t d = 0; d < r->spec.n_dims; d++)
			put_cell(f, r, true, "td", "k", row->key[d], 0, 0);
		row_cols(row, cols);
		num_human(q[0], sizeof(q[0]), cols[COL_CPU_CORE_H]);
		num_human(q[1], sizeof(q[1]), cols[COL_MEM_GIB_H]);
		fprintf(f,
			"<td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%.0f</td>"
			"<td>%.0f</td><td>%.0f</td><td>%s</td><td>%s</td>",
			row->q[COLL_SUM_TASKS], row->q[REPORT_Q_ACTIVE],
			row->q[COLL_SUM_NO_REQUEST_TASKS], row->q[REPORT_Q_RUNNING],
			row->q[COLL_SUM_FAILED_TASKS], row->q[COLL_SUM_OOM_KILLED],
			row->q[COLL_SUM_TIME_LIMIT], q[0], q[1]);
		put_cell(f, r, true, "td", "cost", NULL, row->cents[REPORT_COST_TOTAL], 0);
		put_cell(f, r, true, "td", "waste", NULL, row->cents[REPORT_COST_WASTE], 0);
		kwh_str(q[0], sizeof(q[0]), row->energy_mwh);
		fprintf(f, "<td>%s</td>", q[0]);
		if (r->carbon)
			fprintf(f, "<td>%s</td>", kg_str(q[0], sizeof(q[0]), row->co2e_g));
		html_pct(f, report_cpu_eff(row));
		html_pct(f, report_mem_eff(row));
		fputs("</tr>\n", f);
	}
	fputs("</table>\n", f);
	if (r->n > n)
		fprintf(
		    f,
		    "<p class=\"note\">%zu more rows are not shown here: the CSV and JSON formats "
		    "have every row.</p>\n",
		    r->n - n);
}

/* The report's header: window, generation time, price sheet, nodes, grouping and the notes. */
static void html_header(FILE *f, const struct report *r, const char *last, const char *now,
			int ndays, size_t ng)
{
	static const char *const price_label[_PRICE_MAX][2] = {
	    {"CPU", "core-h"},	{"memory", "GiB-h"}, {"GPU", "GPU-h"},
	    {"IO read", "GiB"}, {"IO write", "GiB"}, {"network", "GiB"}};
	char h[PRICE_LABEL_MAX + 8];

	fputs("</h1>\n<dl id=\"header\"><dt>window</dt><dd id=\"window\">", f);
	html_str(f, r->spec.from);
	fputs(" 00:00 UTC to ", f);
	html_str(f, r->spec.to);
	fprintf(f, " 00:00 UTC (%d day%s; the last day is ", ndays, ndays == 1 ? "" : "s");
	html_str(f, last);
	fprintf(f, ")</dd><dt>generated</dt><dd id=\"generated\">%s</dd>", now);
	fputs("<dt>price sheet</dt><dd id=\"price-sheet\">", f);
	html_str(f, r->sheet_name[0] ? r->sheet_name : "(given as text)");
	fputs(" &mdash; ", f);
	html_str(f, r->currency);
	fputs(": ", f);
	for (int u = 0; u < _PRICE_MAX; u++) {
		char p[32];

		snprintf(p, sizeof(p), "%.10g", r->prices.p[u]);
		if (u)
			fputs(", ", f);
		fprintf(f, "%s %s/%s", price_label[u][0], p, price_label[u][1]);
	}
	if (r->n_overrides) {
		fprintf(f, "; %zu override%s for label ", r->n_overrides,
			r->n_overrides == 1 ? "" : "s");
		html_str(f, r->override_key);
	}
	fputs("</dd><dt>nodes in scope</dt><dd id=\"nodes\">", f);
	if (!r->spec.nodes)
		fputs("(not listed)", f);
	else if (!r->n_nodes)
		fputs("none", f);
	else {
		fprintf(f, "%zu: ", r->n_nodes);
		for (size_t i = 0; i < MIN(r->n_nodes, (size_t)HTML_NODES_MAX); i++) {
			if (i)
				fputs(", ", f);
			html_str(f, r->nodes[i]);
		}
		if (r->n_nodes > HTML_NODES_MAX)
			fprintf(f, " and %zu more", r->n_nodes - HTML_NODES_MAX);
	}
	fputs("</dd><dt>grouping</dt><dd>by ", f);
	for (size_t d = 0; d < r->spec.n_dims; d++) {
		dim_header(r, d, h, sizeof(h));
		if (d)
			fputs(", ", f);
		html_str(f, h);
	}
	fprintf(f, "; period %s; %zu rows, %zu groups</dd>", period_names[r->spec.period], r->n,
		ng);
	fputs("<dt>efficiency</dt><dd id=\"rule\">", f);
	html_str(f, note_eff);
	fputs("</dd><dt>blank values</dt><dd>", f);
	html_str(f, note_none);
	fputs("</dd></dl>\n", f);
}

/* The energy and carbon charts, per day and per group, with their notes */
static void html_energy_sections(FILE *f, const struct report *r, const struct hgroup *g, size_t ng,
				 bool other)
{
	char m[32];

	fputs("<h2>Measured energy</h2>\n<p class=\"note\">CPU package and DRAM energy (RAPL) and "
	      "GPU energy (NVML) attributed to the tasks (usage.energy_j), in kWh; the parts of "
	      "each bar sum to its figure (whole mWh) exactly, the days of a period to its rows, "
	      "the groups to the total.",
	      f);
	if (r->total.q[COLL_SUM_ENERGY_UNMEASURED_TASKS] > 0)
		fprintf(f,
			" <b id=\"unmeasured\">%.0f task(s)</b> had a part of their energy not "
			"measured (no RAPL or NVML source on their node): their bars hold only the "
			"measured parts and are marked *.",
			r->total.q[COLL_SUM_ENERGY_UNMEASURED_TASKS]);
	fputs("</p>\n", f);
	html_energy_days_chart(f, r, false);
	fprintf(f, "<h3>Measured energy per group%s</h3>\n",
		other ? " (the top groups, then all others in one bar)" : "");
	html_energy_groups_chart(f, r, g, ng, false);
	if (!r->carbon)
		return;
	kwh_str(m, sizeof(m), r->carbon_uncovered_mwh);
	fprintf(f,
		"<h2>Carbon</h2>\n<p class=\"note\">The measured energy times the price sheet's "
		"carbon intensity, in kg CO2e (whole grams apportioned as the energy is); %s kWh "
		"fell on days without an intensity and has no carbon here.</p>\n",
		m);
	html_energy_days_chart(f, r, true);
	fprintf(f, "<h3>Carbon per group%s</h3>\n",
		other ? " (the top groups, then all others in one bar)" : "");
	html_energy_groups_chart(f, r, g, ng, true);
}

/* The top groups of g (ng, most expensive first), then one "other" bucket holding the rest (its
 * sums exact) folded into g[HTML_TOP]; returns the groups shown. */
static size_t html_fold_other(struct hgroup *g, size_t ng)
{
	struct hgroup *o;

	if (!g || ng <= HTML_TOP + 1)
		return ng;
	o = &g[HTML_TOP];
	for (size_t i = HTML_TOP + 1; i < ng; i++) {
		for (int q = 0; q < REPORT_Q_MAX; q++)
			o->q[q] += g[i].q[q];
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			o->cents[k] += g[i].cents[k];
		o->energy_mwh += g[i].energy_mwh;
		o->co2e_g += g[i].co2e_g;
		o->n += g[i].n;
	}
	o->row = SIZE_MAX;
	return HTML_TOP + 1;
}

static void write_html(const struct report *r, FILE *f)
{
	char last[11], now[32];
	const time_t t = time(NULL);
	struct tm tm;
	size_t ng = 0, shown;
	struct hgroup *g = html_groups(r, &ng);
	struct report_row tot = r->total;
	int ndays;

	gmtime_r(&t, &tm);
	strftime(now, sizeof(now), "%Y-%m-%d %H:%M:%S UTC", &tm);
	report_day_add(r->spec.to, -1, last);
	ndays = (int)((day_start_ns(r->spec.to) - day_start_ns(r->spec.from)) / DAY_NS);
	shown = html_fold_other(g, ng);

	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
	      "<title>Corral showback ",
	      f);
	html_str(f, r->spec.from);
	fputs(" to ", f);
	html_str(f, last);
	fputs("</title>\n<style>"
	      "body{font-family:sans-serif;margin:2em;color:#222;max-width:1200px}"
	      "h1{margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}"
	      "dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:0}"
	      "dt{color:#666}dd{margin:0}"
	      ".kpi{display:flex;gap:12px;flex-wrap:wrap;margin:1em 0}"
	      ".kpi div{border:1px solid #ccc;border-radius:4px;padding:8px 14px;min-width:120px}"
	      ".kpi b{display:block;font-size:1.5em}.kpi b b{display:inline;font-size:1em}"
	      ".kpi span{color:#666;font-size:.85em}"
	      "table{border-collapse:collapse;font-size:.85em}"
	      "td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right;"
	      "white-space:nowrap}td.k,th.k{text-align:left}"
	      "tr.total td,tr.other td{font-weight:bold}tr.other td{font-style:italic}"
	      "svg text{font-size:11px}.note{color:#666;font-size:.85em}"
	      "</style></head><body>\n<h1>Showback ",
	      f);
	html_str(f, r->spec.from);
	fputs(" to ", f);
	html_str(f, last);
	html_header(f, r, last, now, ndays, ng);

	/* headline figures (total-cost: the number alone, for scripts) */
	fputs("<div class=\"kpi\"><div><span>total cost</span><b><b id=\"total-cost\">", f);
	{
		char m[32];

		report_money(m, sizeof(m), tot.cents[REPORT_COST_TOTAL]);
		fputs(m, f);
	}
	fputs("</b>&#8239;", f);
	html_str(f, r->currency);
	fputs("</b></div>", f);
	if (r->spec.idle != REPORT_IDLE_OFF) {
		fputs("<div><span>of which idle capacity</span><b id=\"total-idle\">", f);
		html_money(f, r, tot.cents[REPORT_COST_IDLE]);
		fputs("</b></div>", f);
	}
	if (r->shared) {
		fputs("<div><span>of which shared costs</span><b id=\"total-shared\">", f);
		html_money(f, r, tot.cents[REPORT_COST_SHARED]);
		fputs("</b></div>", f);
	}
	fputs("<div><span>waste (reserved, unused)</span><b id=\"total-waste\">", f);
	html_money(f, r, tot.cents[REPORT_COST_WASTE]);
	fprintf(f,
		"</b></div><div><span>CPU efficiency</span><b>%.1f%%</b></div>"
		"<div><span>memory efficiency</span><b>%.1f%%</b></div>"
		"<div><span>tasks ended</span><b>%.0f</b></div>"
		"<div><span>tasks active</span><b>%.0f</b></div>"
		"<div><span>without request</span><b>%.0f</b></div>"
		"<div><span>running</span><b>%.0f</b></div></div>\n",
		report_cpu_eff(&tot) * 100, report_mem_eff(&tot) * 100, tot.q[COLL_SUM_TASKS],
		tot.q[REPORT_Q_ACTIVE], tot.q[COLL_SUM_NO_REQUEST_TASKS], tot.q[REPORT_Q_RUNNING]);

	fputs("<h2>Cost per day, by component</h2>\n", f);
	if (r->spec.idle != REPORT_IDLE_OFF)
		fprintf(f,
			"<p class=\"note\">Idle capacity: what the nodes' capacity cost beyond the "
			"tasks' charged reservations (the capacity report's idle), %s.</p>\n",
			r->spec.idle == REPORT_IDLE_ROW ? "shown as its own (idle) rows"
			: r->spec.idle == REPORT_IDLE_PROPORTIONAL
			    ? "shared over the rows of each period by their cost"
			: r->spec.idle == REPORT_IDLE_BY_REQUEST
			    ? "shared over the rows of each period by their requests"
			    : "charged to one account");
	html_days_chart(f, r);
	if (g && shown) {
		fprintf(f, "<h2>Cost per group%s</h2>\n",
			shown < ng ? " (the top groups, then all others in one bar)" : "");
		html_groups_chart(f, r, g, shown);
		html_energy_sections(f, r, g, shown, shown < ng);
		fputs("<h2>Efficiency and waste per group</h2>\n", f);
		html_eff_chart(f, r, g, shown);
		fputs("<h2>Groups</h2>\n", f);
		html_groups_table(f, r, g, shown);
	}
	fputs("<h2>Rows</h2>\n", f);
	html_rows_table(f, r);
	fprintf(f,
		"<p class=\"note\">%s. Costs are rounded to the cent per account, user and day, so "
		"every grouping sums to the total.</p>\n</body></html>\n",
		note_limits);
	free(g);
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
