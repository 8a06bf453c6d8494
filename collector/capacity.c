/* SPDX-License-Identifier: MIT */
/*
 * Capacity and idle cost (docs/reports.md "Capacity and idle cost"). A unit is one
 * (day, node, price class) of rollup_node_day: its capacity per component (CPU core-seconds,
 * memory byte-seconds, GPU-seconds), the node's allocation that day (the charged
 * reservations of the tasks that ran on it: rollup_node_alloc_day, and running tasks' shares of the
 * day from their latest sample) and what those tasks used. A node that changed class during
 * a day has a unit per class, and its allocation is split over them by their capacity.
 * Each unit and component is priced and rounded to cents on its own:
 *     capacity  = cents(cap x price)
 *     allocated = cents(min(alloc, cap) x price)
 *     used      = cents(min(used, alloc, cap) x price)
 *     idle      = capacity - allocated
 * so allocated + idle = capacity for every unit, and for every sum of units: per node, per
 * period, per class, in total. Rounding is monotone, so 0 <= used <= allocated <= capacity.
 */
#include "collector/capacity.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/growbuf.h"
#include "common/macro.h"

#define GIB	 1073741824.0
#define NONE_VAL "(none)"

static const char *const by_names[] = {"node", "price_class", "none"};

int cap_by_from_string(const char *s, enum cap_by *ret)
{
	for (size_t i = 0; i < ARRAY_SIZE(by_names); i++)
		if (strcmp(s, by_names[i]) == 0) {
			*ret = (enum cap_by)i;
			return 0;
		}
	return -EINVAL;
}

/* The allocation and use of one (day, node), from the task rollups. */
struct dn {
	char day[11];
	char *node;
	double alloc[_CAP_COMP_MAX], used[_CAP_COMP_MAX];
	double cap_sum[_CAP_COMP_MAX]; /* capacity of its units (several classes in a day) */
	bool matched;		       /* a unit took it */
};

struct unit {
	char day[11];
	char *node, *cls;
	double v[_COLL_SUM_MAX];
};

struct cap_reader {
	struct dn *dn;
	size_t ndn, capdn;
	/* (day, node) -> index + 1 into dn, open addressing: the task rows (one per account,
	 * user, job and node a day) are summed as they come, so few (day, node)s are kept */
	size_t *slot;
	size_t nslot;
	/* the units of the (day, node) being read: rollup_node_day comes ordered by (day, node,
	 * class), so a node's classes of a day are read together and priced when the next
	 * (day, node) begins; no unit is kept after that */
	struct unit *u;
	size_t nu, capu;
	size_t node_rows;
	uint64_t from_ns, to_ns;
	/* the report's rows as they are summed: (period, node, class) -> index + 1 */
	const struct report_spec *spec;
	const struct price_sheet *ps;
	struct cap_report *rep;
	size_t caprows;
	size_t *rslot;
	size_t nrslot;
	char to_last[11];
	char period_day[11], period[REPORT_PERIOD_LEN]; /* the last day's period */
	/* the node-days without allocation come counted per capacity key (rollup_node_cap_day,
	 * or _month when month); the node rows read one by one add their difference to that */
	bool counted, month;
};

static uint64_t dn_hash(const char *day, const char *node)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (const char *p = day; *p && p - day < 10; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	h = (h ^ 0xff) * 0x100000001b3ULL;
	for (const char *p = node; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	return h ^ (h >> 29);
}

static uint64_t dn_hash_at(const void *ctx, size_t i)
{
	const struct cap_reader *rd = ctx;

	return dn_hash(rd->dn[i].day, rd->dn[i].node);
}

static int dn_add(struct cap_reader *rd, const char *day, const char *node, const double *alloc,
		  const double *used)
{
	struct dn *d;
	size_t j;

	if (rd->ndn * 2 >= rd->nslot &&
	    slot_index_grow(&rd->slot, &rd->nslot, 4096, rd->ndn, dn_hash_at, rd) < 0)
		return -ENOMEM;
	for (j = dn_hash(day, node) & (rd->nslot - 1); rd->slot[j]; j = (j + 1) & (rd->nslot - 1)) {
		d = &rd->dn[rd->slot[j] - 1];
		if (strncmp(d->day, day, 10) == 0 && strcmp(d->node, node) == 0) {
			for (int c = 0; c < _CAP_COMP_MAX; c++) {
				d->alloc[c] += alloc[c];
				d->used[c] += used[c];
			}
			return 0;
		}
	}
	if (grow_array((void **)&rd->dn, &rd->capdn, rd->ndn, sizeof(*rd->dn)) < 0)
		return -ENOMEM;
	rd->slot[j] = rd->ndn + 1;
	d = &rd->dn[rd->ndn];
	memset(d, 0, sizeof(*d));
	snprintf(d->day, sizeof(d->day), "%.10s", day);
	d->node = strdup(node);
	if (!d->node)
		return -ENOMEM;
	memcpy(d->alloc, alloc, sizeof(d->alloc));
	memcpy(d->used, used, sizeof(d->used));
	rd->ndn++;
	return 0;
}

/* A node's allocation on a day: its rollup_node_alloc_day row (the job_day rows summed). */
static int job_cb(const struct coll_rollup_row *row, void *ud)
{
	struct cap_reader *rd = ud;
	const double alloc[] = {row->v[COLL_SUM_CPU_CHARGED_CORE_S],
				row->v[COLL_SUM_MEM_CHARGED_BYTE_S],
				row->v[COLL_SUM_GPU_CHARGED_S]};
	const double used[] = {row->v[COLL_SUM_CPU_S], row->v[COLL_SUM_MEM_BYTE_S],
			       row->v[COLL_SUM_GPU_S]};

	return dn_add(rd, row->bucket, row->node, alloc, used);
}

struct open_day {
	struct cap_reader *rd;
	const struct coll_open_row *row;
};

static int open_day(const char *day, double frac, bool last, void *ud)
{
	const struct open_day *x = ud;
	const struct coll_open_row *row = x->row;
	const double alloc[] = {row->v[COLL_SUM_CPU_CHARGED_CORE_S] * frac,
				row->v[COLL_SUM_MEM_CHARGED_BYTE_S] * frac,
				row->v[COLL_SUM_GPU_CHARGED_S] * frac};
	const double used[] = {row->v[COLL_SUM_CPU_S] * frac, row->v[COLL_SUM_MEM_BYTE_S] * frac,
			       row->v[COLL_SUM_GPU_S] * frac};

	(void)last;
	return dn_add(x->rd, day, row->node, alloc, used);
}

/* A running task's share of each day of the report, as the showback report's. */
static int open_cb(const struct coll_open_row *row, void *ud)
{
	struct cap_reader *rd = ud;
	struct open_day x = {.rd = rd, .row = row};

	return report_open_days(row, rd->from_ns, rd->to_ns, open_day, &x);
}

static struct dn *dn_find(struct cap_reader *rd, const char *day, const char *node)
{
	if (!rd->nslot)
		return NULL;
	for (size_t j = dn_hash(day, node) & (rd->nslot - 1); rd->slot[j];
	     j = (j + 1) & (rd->nslot - 1)) {
		struct dn *d = &rd->dn[rd->slot[j] - 1];

		if (strncmp(d->day, day, 10) == 0 && strcmp(d->node, node) == 0)
			return d;
	}
	return NULL;
}

/* Money per unit of each component's quantity (core-s, byte-s, GPU-s) at price set p. */
static void unit_prices(const struct price_set *p, double out[_CAP_COMP_MAX])
{
	out[CAP_CPU] = p->p[PRICE_CPU_CORE_HOUR] / 3600.0;
	out[CAP_MEM] = p->p[PRICE_MEMORY_GIB_HOUR] / 3600.0 / GIB;
	out[CAP_GPU] = p->p[PRICE_GPU_HOUR] / 3600.0;
}

/* Display units: core-hours, GiB-hours, GPU-hours. */
static const double comp_scale[_CAP_COMP_MAX] = {1 / 3600.0, 1 / 3600.0 / GIB, 1 / 3600.0};

/* A priced unit before grouping. */
struct punit {
	char period[REPORT_PERIOD_LEN];
	char day[11];
	const char *node, *cls; /* "" when not grouped by it */
	double q[_CAP_Q_MAX];
	int64_t cents[_CAP_COMP_MAX][_CAP_PART_MAX];
};

static void price_unit(const struct unit *u, const struct dn *d, const struct price_sheet *ps,
		       struct punit *pu)
{
	const struct price_set *p = price_sheet_for_node(ps, u->node, u->cls[0] ? u->cls : NULL);
	const double cap[] = {u->v[COLL_SUM_CPU_CHARGED_CORE_S], u->v[COLL_SUM_MEM_CHARGED_BYTE_S],
			      u->v[COLL_SUM_GPU_CHARGED_S]};
	double up[_CAP_COMP_MAX];

	unit_prices(p, up);
	pu->q[CAP_Q_NODE_H] = u->v[COLL_SUM_WALL_S] / 3600.0;
	pu->q[CAP_Q_RECORDS] = u->v[COLL_SUM_TASKS];
	pu->q[CAP_Q_NODE_CPU_USED] = u->v[COLL_SUM_CPU_S] / 3600.0;
	for (int c = 0; c < _CAP_COMP_MAX; c++) {
		/* this unit's part of the node's allocation that day (by capacity when the node
		 * had several classes; all of it when it had one) */
		double share = 1, alloc, used, a, us;

		if (d && d->cap_sum[c] > 0 && d->cap_sum[c] != cap[c])
			share = cap[c] / d->cap_sum[c];
		alloc = d ? d->alloc[c] * share : 0;
		used = d ? d->used[c] * share : 0;
		a = MIN(alloc, cap[c]);
		us = MIN(used, a);
		pu->q[CAP_QI(c, CAP_QK_CAP)] = cap[c] * comp_scale[c];
		pu->q[CAP_QI(c, CAP_QK_ALLOC)] = a * comp_scale[c];
		pu->q[CAP_QI(c, CAP_QK_USED)] = us * comp_scale[c];
		pu->q[CAP_QI(c, CAP_QK_OVER)] = MAX(0.0, alloc - cap[c]) * comp_scale[c];
		pu->cents[c][CAP_PART_CAPACITY] = report_cents(cap[c] * up[c]);
		pu->cents[c][CAP_PART_ALLOCATED] = report_cents(a * up[c]);
		pu->cents[c][CAP_PART_USED] = report_cents(us * up[c]);
		pu->cents[c][CAP_PART_IDLE] =
		    pu->cents[c][CAP_PART_CAPACITY] - pu->cents[c][CAP_PART_ALLOCATED];
	}
}

static void row_add(struct cap_row *row, const struct punit *pu)
{
	for (int q = 0; q < _CAP_Q_MAX; q++)
		row->q[q] += pu->q[q];
	for (int c = 0; c < _CAP_COMP_MAX; c++)
		for (int k = 0; k < _CAP_PART_MAX; k++)
			row->cents[c][k] += pu->cents[c][k];
}

static void punit_sub(struct punit *a, const struct punit *b)
{
	for (int q = 0; q < _CAP_Q_MAX; q++)
		a->q[q] -= b->q[q];
	for (int c = 0; c < _CAP_COMP_MAX; c++)
		for (int k = 0; k < _CAP_PART_MAX; k++)
			a->cents[c][k] -= b->cents[c][k];
}

static void units_clear(struct cap_reader *rd)
{
	for (size_t i = 0; i < rd->nu; i++) {
		free(rd->u[i].node);
		free(rd->u[i].cls);
	}
	rd->nu = 0;
}

static void reader_free(struct cap_reader *rd)
{
	for (size_t i = 0; i < rd->ndn; i++)
		free(rd->dn[i].node);
	units_clear(rd);
	free(rd->dn);
	free(rd->u);
	free(rd->slot);
	free(rd->rslot);
}

static uint64_t row_hash(const char *period, const char *node, const char *cls)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (const char *k[] = {period, node, cls}, **p = k; p < k + 3; p++) {
		for (const char *c = *p; *c; c++)
			h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
		h = (h ^ 0xff) * 0x100000001b3ULL;
	}
	return h ^ (h >> 29);
}

static uint64_t row_hash_at(const void *ctx, size_t i)
{
	const struct cap_row *row = &((const struct cap_reader *)ctx)->rep->rows[i];

	return row_hash(row->period, row->node, row->price_class);
}

/* The priced unit pu of day on node in class added to its report row (made on first use) and
 * to the total. */
static int unit_add(struct cap_reader *rd, const char *day, const char *node, const char *cls,
		    const struct punit *pu)
{
	struct cap_report *rep = rd->rep;
	struct cap_row *row;
	size_t j;

	if (strcmp(rd->period_day, day) != 0) {
		snprintf(rd->period_day, sizeof(rd->period_day), "%s", day);
		report_period_of(rd->spec, rd->to_last, day, rd->period);
	}
	if (rep->by != CAP_BY_NODE)
		node = "";
	if (rep->by == CAP_BY_NONE)
		cls = "";
	if (rep->n * 2 >= rd->nrslot &&
	    slot_index_grow(&rd->rslot, &rd->nrslot, 1024, rep->n, row_hash_at, rd) < 0)
		return -ENOMEM;
	for (j = row_hash(rd->period, node, cls) & (rd->nrslot - 1); rd->rslot[j];
	     j = (j + 1) & (rd->nrslot - 1)) {
		row = &rep->rows[rd->rslot[j] - 1];
		if (strcmp(row->period, rd->period) == 0 && strcmp(row->node, node) == 0 &&
		    strcmp(row->price_class, cls) == 0)
			goto add;
	}
	if (grow_array((void **)&rep->rows, &rd->caprows, rep->n, sizeof(*rep->rows)) < 0)
		return -ENOMEM;
	row = &rep->rows[rep->n];
	memset(row, 0, sizeof(*row));
	snprintf(row->period, sizeof(row->period), "%s", rd->period);
	report_period_days(rd->spec, rd->to_last, day, row->first_day, row->last_day);
	row->node = strdup(node);
	row->price_class = strdup(cls);
	rep->n++;
	if (!row->node || !row->price_class)
		return -ENOMEM;
	rd->rslot[j] = rep->n;
add:
	row_add(row, pu);
	row_add(&rep->total, pu);
	return 0;
}

/* The units read for one (day, node), priced with the node's allocation that day (split over
 * its classes by their capacity) and added to the rows. */
static int units_flush(struct cap_reader *rd)
{
	struct dn *d;
	int r = 0;

	if (!rd->nu)
		return 0;
	d = dn_find(rd, rd->u[0].day, rd->u[0].node);
	if (d) {
		d->matched = true;
		for (size_t i = 0; i < rd->nu; i++) {
			d->cap_sum[CAP_CPU] += rd->u[i].v[COLL_SUM_CPU_CHARGED_CORE_S];
			d->cap_sum[CAP_MEM] += rd->u[i].v[COLL_SUM_MEM_CHARGED_BYTE_S];
			d->cap_sum[CAP_GPU] += rd->u[i].v[COLL_SUM_GPU_CHARGED_S];
		}
	}
	for (size_t i = 0; i < rd->nu && r >= 0; i++) {
		struct punit pu = {0};

		price_unit(&rd->u[i], d, rd->ps, &pu);
		if (rd->counted) {
			/* its capacity key's count priced it as idle (no allocation; in the day
			 * keys at its class's prices): only the difference is added */
			struct unit idle = rd->u[i];
			struct punit pi = {0};

			if (!rd->month)
				idle.node = (char *)"";
			price_unit(&idle, NULL, rd->ps, &pi);
			punit_sub(&pu, &pi);
		}
		r = unit_add(rd, rd->u[i].day, rd->u[i].node, rd->u[i].cls, &pu);
	}
	units_clear(rd);
	return r;
}

/* One key of rollup_node_cap_day/_month: units node-days of one capacity, none with
 * allocation (their difference comes with the node rows read one by one), priced once (the
 * cents of one node-day) and multiplied. */
static int counted_cb(const struct coll_node_cap_row *row, void *ud)
{
	struct cap_reader *rd = ud;
	struct unit u = {.node = (char *)row->node, .cls = (char *)row->label_value};
	struct punit pu = {0};
	char day[11];

	snprintf(day, sizeof(day), rd->month ? "%.7s-01" : "%.10s", row->bucket);
	memcpy(u.day, day, sizeof(u.day));
	u.v[COLL_SUM_CPU_CHARGED_CORE_S] = row->cpu_cap;
	u.v[COLL_SUM_MEM_CHARGED_BYTE_S] = row->mem_cap;
	u.v[COLL_SUM_GPU_CHARGED_S] = row->gpu_cap;
	u.v[COLL_SUM_TASKS] = row->tasks;
	u.v[COLL_SUM_WALL_S] = row->wall_s;
	u.v[COLL_SUM_CPU_S] = row->cpu_s;
	price_unit(&u, NULL, rd->ps, &pu);
	for (int c = 0; c < _CAP_COMP_MAX; c++) {
		pu.q[CAP_QI(c, CAP_QK_CAP)] *= (double)row->units;
		for (int k = 0; k < _CAP_PART_MAX; k++)
			pu.cents[c][k] *= row->units;
	}
	rd->node_rows++;
	return unit_add(rd, day, row->node, row->label_value, &pu);
}

/* Sums read from rollup_node_day: what price_unit takes of a unit. */
#define NODE_SUMS                                                                                  \
	(1u << COLL_SUM_TASKS | 1u << COLL_SUM_WALL_S | 1u << COLL_SUM_CPU_S |                     \
	 1u << COLL_SUM_CPU_CHARGED_CORE_S | 1u << COLL_SUM_MEM_CHARGED_BYTE_S |                   \
	 1u << COLL_SUM_GPU_CHARGED_S)
/* ... and from rollup_node_alloc_day: what job_cb takes */
#define ALLOC_SUMS                                                                                 \
	(1u << COLL_SUM_CPU_CHARGED_CORE_S | 1u << COLL_SUM_MEM_CHARGED_BYTE_S |                   \
	 1u << COLL_SUM_GPU_CHARGED_S | 1u << COLL_SUM_CPU_S | 1u << COLL_SUM_MEM_BYTE_S |         \
	 1u << COLL_SUM_GPU_S)

static int node_cb(const struct coll_rollup_row *row, void *ud)
{
	struct cap_reader *rd = ud;
	struct unit *u;
	int r;

	if (rd->nu && (strncmp(rd->u[0].day, row->bucket, 10) != 0 ||
		       strcmp(rd->u[0].node, row->node) != 0)) {
		r = units_flush(rd);
		if (r < 0)
			return r;
	}
	if (grow_array((void **)&rd->u, &rd->capu, rd->nu, sizeof(*rd->u)) < 0)
		return -ENOMEM;
	u = &rd->u[rd->nu];
	memset(u, 0, sizeof(*u));
	snprintf(u->day, sizeof(u->day), "%.10s", row->bucket);
	u->node = strdup(row->node);
	u->cls = strdup(row->label_value);
	rd->nu++;
	rd->node_rows++;
	if (!u->node || !u->cls)
		return -ENOMEM;
	memcpy(u->v, row->v, sizeof(u->v));
	return 0;
}

static int crow_cmp(const void *x, const void *y)
{
	const struct cap_row *a = x, *b = y;
	int r = strcmp(a->period, b->period);

	if (!r)
		r = strcmp(a->node, b->node);
	return r ? r : strcmp(a->price_class, b->price_class);
}

/* Whether the counted capacity keys give this report's rows: any period without nodes (the
 * day keys, the nodes with prices of their own read one by one); by node, the month keys
 * for whole months (a month or the whole range a period). */
static bool counted_fits(const struct report_spec *spec, enum cap_by by)
{
	if (strlen(spec->from) != 10 || strlen(spec->to) != 10)
		return false;
	if (by != CAP_BY_NODE)
		return true;
	return (spec->period == REPORT_PERIOD_MONTH || spec->period == REPORT_PERIOD_ALL) &&
	       strcmp(spec->from + 7, "-01") == 0 && strcmp(spec->to + 7, "-01") == 0;
}

int cap_build(struct coll_store *s, const struct report_spec *spec, enum cap_by by,
	      const struct price_sheet *ps, struct cap_report *ret)
{
	struct cap_reader rd = {.spec = spec, .ps = ps, .rep = ret};
	int r;

	memset(ret, 0, sizeof(*ret));
	ret->spec = *spec;
	ret->by = by;
	memcpy(ret->currency, ps->currency, sizeof(ret->currency));
	report_day_add(spec->to, -1, rd.to_last);
	rd.from_ns = report_day_start_ns(spec->from);
	rd.to_ns = report_day_start_ns(spec->to);

	/* the allocation first (a row per node and day with tasks, and the running tasks),
	 * then the node rows, each (day, node) priced as it is read */
	r = coll_store_rollup_query_sums(s, COLL_ROLLUP_NODE_ALLOC_DAY, spec->from, spec->to,
					 ALLOC_SUMS, job_cb, &rd);
	if (r >= 0)
		r = coll_store_open_query(s, open_cb, &rd);
	if (r >= 0 && counted_fits(spec, by)) {
		/* the node-days counted per capacity key (a few rows a node and month, or a
		 * class and day), then those with allocation, running tasks or prices of their
		 * own one by one */
		_cleanup_free_ const char **own = calloc(ps->n_nodes + 1, sizeof(*own));
		char from[11], to[11];

		rd.counted = true;
		rd.month = by == CAP_BY_NODE;
		snprintf(from, sizeof(from), "%.*s", rd.month ? 7 : 10, spec->from);
		snprintf(to, sizeof(to), "%.*s", rd.month ? 7 : 10, spec->to);
		for (size_t i = 0; own && !rd.month && i < ps->n_nodes; i++)
			own[i] = ps->nodes[i].value;
		r = own ? coll_store_node_cap_query(s, rd.month, from, to, counted_cb, &rd)
			: -ENOMEM;
		if (r >= 0)
			r = coll_store_node_day_priced(s, spec->from, spec->to, own,
						       rd.month ? 0 : ps->n_nodes, NODE_SUMS,
						       node_cb, &rd);
	} else if (r >= 0)
		r = coll_store_rollup_query_sums(s, COLL_ROLLUP_NODE_DAY, spec->from, spec->to,
						 NODE_SUMS, node_cb, &rd);
	if (r >= 0)
		r = units_flush(&rd);
	ret->node_rows = rd.node_rows;
	/* a unit of no capacity for each (day, node) with tasks and no node records: its
	 * allocation shows as overcommit */
	for (size_t i = 0; i < rd.ndn && r >= 0; i++) {
		struct unit none = {.node = rd.dn[i].node, .cls = ""};
		struct punit pu = {0};

		if (rd.dn[i].matched)
			continue;
		snprintf(none.day, sizeof(none.day), "%s", rd.dn[i].day);
		price_unit(&none, &rd.dn[i], ps, &pu);
		r = unit_add(&rd, rd.dn[i].day, rd.dn[i].node, "", &pu);
	}
	if (r >= 0 && ret->n)
		qsort(ret->rows, ret->n, sizeof(*ret->rows), crow_cmp);
	memcpy(ret->total.period, "total", 6);
	memcpy(ret->total.first_day, spec->from, 11);
	memcpy(ret->total.last_day, rd.to_last, 11);
	reader_free(&rd);
	if (r < 0)
		cap_free(ret);
	return r < 0 ? r : 0;
}

void cap_free(struct cap_report *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++) {
		free(r->rows[i].node);
		free(r->rows[i].price_class);
	}
	free(r->rows);
	memset(r, 0, sizeof(*r));
}

int64_t cap_row_cents(const struct cap_row *row, enum cap_part part)
{
	int64_t t = 0;

	for (int c = 0; c < _CAP_COMP_MAX; c++)
		t += row->cents[c][part];
	return t;
}

/* ---- output ---- */

static const char *const comp_names[_CAP_COMP_MAX] = {"cpu", "mem", "gpu"};
static const char *const comp_units[_CAP_COMP_MAX] = {"core_h", "gib_h", "h"};
static const char *const qk_names[_CAP_QK_MAX] = {"cap", "alloc", "used", "over"};
static const char *const part_names[_CAP_PART_MAX] = {"capacity", "allocated", "used", "idle"};

/* The name as a report shows it: "(none)" for an empty value. */
static const char *shown(const char *s)
{
	return s && *s ? s : NONE_VAL;
}

static void csv_header(const struct cap_report *r, FILE *f)
{
	fputs("period,first_day,last_day", f);
	if (r->by == CAP_BY_NODE)
		fputs(",node", f);
	if (r->by != CAP_BY_NONE)
		fputs(",price_class", f);
	fputs(",node_h,records", f);
	for (int c = 0; c < _CAP_COMP_MAX; c++)
		for (int k = 0; k < _CAP_QK_MAX; k++)
			fprintf(f, ",%s_%s_%s", comp_names[c], qk_names[k], comp_units[c]);
	fputs(",node_cpu_used_core_h", f);
	for (int c = 0; c < _CAP_COMP_MAX; c++)
		for (int k = 0; k < _CAP_PART_MAX; k++)
			fprintf(f, ",%s_%s_cost", comp_names[c], part_names[k]);
	for (int k = 0; k < _CAP_PART_MAX; k++)
		fprintf(f, ",%s_cost", part_names[k]);
	fputs(",allocated_unused_cost\n", f);
}

static void csv_row(const struct cap_report *r, const struct cap_row *row, bool total, FILE *f)
{
	char num[64];

	fprintf(f, "%s,%s,%s", row->period, row->first_day, row->last_day);
	if (r->by == CAP_BY_NODE) {
		fputc(',', f);
		report_csv_field(f, total ? "" : shown(row->node));
	}
	if (r->by != CAP_BY_NONE) {
		fputc(',', f);
		report_csv_field(f, total ? "" : shown(row->price_class));
	}
	for (int q = 0; q < _CAP_Q_MAX; q++) {
		report_num_full(num, sizeof(num), row->q[q]);
		fprintf(f, ",%s", num);
	}
	for (int c = 0; c < _CAP_COMP_MAX; c++)
		for (int k = 0; k < _CAP_PART_MAX; k++) {
			report_money(num, sizeof(num), row->cents[c][k]);
			fprintf(f, ",%s", num);
		}
	for (int k = 0; k < _CAP_PART_MAX; k++) {
		report_money(num, sizeof(num), cap_row_cents(row, k));
		fprintf(f, ",%s", num);
	}
	report_money(num, sizeof(num),
		     cap_row_cents(row, CAP_PART_ALLOCATED) - cap_row_cents(row, CAP_PART_USED));
	fprintf(f, ",%s\n", num);
}

static void json_row(const struct cap_report *r, const struct cap_row *row, bool total, FILE *f)
{
	char num[64];

	fprintf(f, "{\"period\":\"%s\",\"first_day\":\"%s\",\"last_day\":\"%s\"", row->period,
		row->first_day, row->last_day);
	if (r->by == CAP_BY_NODE && !total) {
		fputs(",\"node\":", f);
		report_json_text(f, shown(row->node));
	}
	if (r->by != CAP_BY_NONE && !total) {
		fputs(",\"price_class\":", f);
		report_json_text(f, shown(row->price_class));
	}
	report_num_full(num, sizeof(num), row->q[CAP_Q_NODE_H]);
	fprintf(f, ",\"node_h\":%s", num);
	report_num_full(num, sizeof(num), row->q[CAP_Q_RECORDS]);
	fprintf(f, ",\"records\":%s", num);
	for (int c = 0; c < _CAP_COMP_MAX; c++)
		for (int k = 0; k < _CAP_QK_MAX; k++) {
			report_num_full(num, sizeof(num), row->q[CAP_QI(c, k)]);
			fprintf(f, ",\"%s_%s_%s\":%s", comp_names[c], qk_names[k], comp_units[c],
				num);
		}
	report_num_full(num, sizeof(num), row->q[CAP_Q_NODE_CPU_USED]);
	fprintf(f, ",\"node_cpu_used_core_h\":%s", num);
	for (int c = 0; c < _CAP_COMP_MAX; c++)
		for (int k = 0; k < _CAP_PART_MAX; k++) {
			report_money(num, sizeof(num), row->cents[c][k]);
			fprintf(f, ",\"%s_%s_cost\":\"%s\"", comp_names[c], part_names[k], num);
		}
	for (int k = 0; k < _CAP_PART_MAX; k++) {
		report_money(num, sizeof(num), cap_row_cents(row, k));
		fprintf(f, ",\"%s_cost\":\"%s\"", part_names[k], num);
	}
	report_money(num, sizeof(num),
		     cap_row_cents(row, CAP_PART_ALLOCATED) - cap_row_cents(row, CAP_PART_USED));
	fprintf(f, ",\"allocated_unused_cost\":\"%s\"}", num);
}

static void write_json(const struct cap_report *r, FILE *f)
{
	fprintf(f, "{\"from\":\"%s\",\"to\":\"%s\",\"by\":\"%s\",\"currency\":", r->spec.from,
		r->spec.to, by_names[r->by]);
	report_json_text(f, r->currency);
	fputs(",\"rows\":[", f);
	for (size_t i = 0; i < r->n; i++) {
		if (i)
			fputc(',', f);
		json_row(r, &r->rows[i], false, f);
	}
	fputs("],\"total\":", f);
	json_row(r, &r->total, true, f);
	fputs("}\n", f);
}

static void num2(char *buf, size_t len, double v)
{
	snprintf(buf, len, v != 0 && fabs(v) < 1 ? "%.3g" : "%.2f", v);
}

static double pct(int64_t part, int64_t whole)
{
	return whole > 0 ? 100.0 * (double)part / (double)whole : 0;
}

static void write_table(const struct cap_report *r, FILE *f)
{
	char a[4][32], q[3][32];

	fprintf(f, "%-24s %-20s %-14s %10s %12s %12s %12s %12s %12s %12s %7s\n", "period",
		r->by == CAP_BY_NODE ? "node" : "", r->by != CAP_BY_NONE ? "price_class" : "",
		"node_h", "cpu_cap_ch", "cpu_alloc_ch", "capacity", "allocated", "used", "idle",
		"idle%");
	for (size_t i = 0; i <= r->n; i++) {
		const struct cap_row *row = i < r->n ? &r->rows[i] : &r->total;
		_cleanup_free_ char *node = report_shown(i < r->n ? shown(row->node) : "");
		_cleanup_free_ char *cls = report_shown(i < r->n ? shown(row->price_class) : "");

		for (int k = 0; k < _CAP_PART_MAX; k++)
			report_money(a[k], sizeof(a[k]), cap_row_cents(row, k));
		num2(q[0], sizeof(q[0]), row->q[CAP_Q_NODE_H]);
		num2(q[1], sizeof(q[1]), row->q[CAP_QI(CAP_CPU, CAP_QK_CAP)]);
		num2(q[2], sizeof(q[2]), row->q[CAP_QI(CAP_CPU, CAP_QK_ALLOC)]);
		fprintf(
		    f, "%-24s %-20s %-14s %10s %12s %12s %12s %12s %12s %12s %6.1f%%\n",
		    row->period, r->by == CAP_BY_NODE && node ? node : "",
		    r->by != CAP_BY_NONE && cls ? cls : "", q[0], q[1], q[2], a[0], a[1], a[2],
		    a[3],
		    pct(cap_row_cents(row, CAP_PART_IDLE), cap_row_cents(row, CAP_PART_CAPACITY)));
	}
	fprintf(f, "(%s; capacity = allocated + idle per node and day, to the cent)\n",
		r->currency);
}

/* Periods (rows summed per period) for the chart. */
struct hperiod {
	const char *period;
	int64_t used, unused, idle;
};

static void write_html(const struct cap_report *r, FILE *f)
{
	_cleanup_free_ struct hperiod *p = calloc(r->n + 1, sizeof(*p));
	static const char *const colors[] = {"#2b6cb0", "#90cdf4", "#e2e8f0"};
	static const char *const names[] = {"used", "allocated, unused", "idle"};
	const int W = 900, H = 300, L = 90, B = 40, T = 20;
	size_t np = 0;
	int64_t max = 0;
	char m[3][32];

	if (!p)
		return;
	for (size_t i = 0; i < r->n; i++) {
		const struct cap_row *row = &r->rows[i];

		if (!np || strcmp(p[np - 1].period, row->period) != 0)
			p[np++].period = row->period;
		p[np - 1].used += cap_row_cents(row, CAP_PART_USED);
		p[np - 1].unused +=
		    cap_row_cents(row, CAP_PART_ALLOCATED) - cap_row_cents(row, CAP_PART_USED);
		p[np - 1].idle += cap_row_cents(row, CAP_PART_IDLE);
	}
	for (size_t i = 0; i < np; i++)
		max = MAX(max, p[i].used + p[i].unused + p[i].idle);
	fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
	      "<title>Capacity and idle cost</title><style>body{font-family:sans-serif;margin:2em}"
	      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
	      "text-align:right}th{background:#f4f4f4}</style></head><body>\n",
	      f);
	fprintf(f, "<h1>Capacity and idle cost</h1>\n<p>%s 00:00 UTC to %s 00:00 UTC; currency ",
		r->spec.from, r->spec.to);
	report_html_text(f, r->currency);
	fputs(". Capacity = allocated + idle, per node and day, to the cent.</p>\n", f);
	report_money(m[0], sizeof(m[0]), cap_row_cents(&r->total, CAP_PART_CAPACITY));
	report_money(m[1], sizeof(m[1]), cap_row_cents(&r->total, CAP_PART_ALLOCATED));
	report_money(m[2], sizeof(m[2]), cap_row_cents(&r->total, CAP_PART_IDLE));
	fprintf(f,
		"<p>Capacity <b id=\"capacity-cost\">%s</b> = allocated <b "
		"id=\"allocated-cost\">%s</b> + idle <b id=\"idle-cost\">%s</b></p>\n",
		m[0], m[1], m[2]);
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">\n", W,
		H + B + T);
	for (size_t i = 0; i < np && max > 0; i++) {
		const double bw = (double)(W - L) / (double)np;
		const int64_t parts[3] = {p[i].used, p[i].unused, p[i].idle};
		double y = T + H;

		for (int k = 0; k < 3; k++) {
			double h = (double)H * (double)parts[k] / (double)max;

			report_money(m[0], sizeof(m[0]), parts[k]);
			y -= h;
			fprintf(f,
				"<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
				"height=\"%.1f\" fill=\"%s\"><title>%s %s: %s</title></rect>\n",
				k == 0	 ? "used"
				: k == 1 ? "unused"
					 : "idle",
				L + (double)i * bw + bw * 0.1, y, bw * 0.8, h, colors[k],
				p[i].period, names[k], m[0]);
		}
		if (np <= 12 || i % ((np + 11) / 12) == 0)
			fprintf(f,
				"<text x=\"%.1f\" y=\"%d\" font-size=\"10\" "
				"text-anchor=\"middle\">%s</text>\n",
				L + (double)i * bw + bw / 2, T + H + 15, p[i].period);
	}
	report_money(m[0], sizeof(m[0]), max);
	fprintf(f, "<text x=\"0\" y=\"%d\" font-size=\"10\">%s</text>\n", T + 10, m[0]);
	for (int k = 0; k < 3; k++)
		fprintf(f,
			"<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
			"<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n",
			L + 160 * k, T + H + 25, colors[k], L + 160 * k + 14, T + H + 34, names[k]);
	fputs("</svg>\n<table><tr><th>period</th><th>node</th><th>class</th><th>node h</th>"
	      "<th>capacity</th><th>allocated</th><th>used</th><th>idle</th></tr>\n",
	      f);
	for (size_t i = 0; i <= r->n && i <= 2000; i++) {
		const struct cap_row *row = i < r->n && i < 2000 ? &r->rows[i] : &r->total;

		fprintf(f, "<tr><td>%s</td><td>", row->period);
		if (row != &r->total)
			report_html_text(f, r->by == CAP_BY_NODE ? shown(row->node) : "");
		fputs("</td><td>", f);
		if (row != &r->total)
			report_html_text(f, r->by != CAP_BY_NONE ? shown(row->price_class) : "");
		num2(m[0], sizeof(m[0]), row->q[CAP_Q_NODE_H]);
		fprintf(f, "</td><td>%s</td>", m[0]);
		for (int k = 0; k < _CAP_PART_MAX; k++) {
			report_money(m[0], sizeof(m[0]), cap_row_cents(row, k));
			fprintf(f, "<td>%s ", m[0]);
			report_html_text(f, r->currency);
			fputs("</td>", f);
		}
		fputs("</tr>\n", f);
		if (row == &r->total)
			break;
	}
	fputs("</table>\n</body></html>\n", f);
}

int cap_write(const struct cap_report *r, enum report_format fmt, FILE *out)
{
	switch (fmt) {
	case REPORT_FMT_CSV:
		csv_header(r, out);
		for (size_t i = 0; i < r->n; i++)
			csv_row(r, &r->rows[i], false, out);
		csv_row(r, &r->total, true, out);
		break;
	case REPORT_FMT_JSON:
		write_json(r, out);
		break;
	case REPORT_FMT_TABLE:
		write_table(r, out);
		break;
	case REPORT_FMT_HTML:
		write_html(r, out);
		break;
	}
	return ferror(out) ? -EIO : 0;
}
