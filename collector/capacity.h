/* SPDX-License-Identifier: MIT */
/*
 * Capacity and idle cost (docs/reports.md "Capacity and idle cost"): the nodes' capacity from
 * rollup_node_day priced at their class's prices, the tasks' charged reservations on each node
 * (rollup_node_alloc_day, the job_day rows per node, and running tasks) as its allocation, the rest
 * idle. Money is integer cents per (day, node, class, component), so per node, per period and for
 * any grouping: allocated + idle = capacity    and    used + allocated-unused = allocated exactly,
 * to the cent.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "collector/prices.h"
#include "collector/report.h"
#include "collector/store.h"

enum cap_by {
	CAP_BY_NODE,  /* a row per node and price class */
	CAP_BY_CLASS, /* a row per price class */
	CAP_BY_NONE,  /* a row per period */
};

enum cap_comp { CAP_CPU, CAP_MEM, CAP_GPU, _CAP_COMP_MAX };

/* Money parts of a component; idle = capacity - allocated, used <= allocated <= capacity. */
enum cap_part {
	CAP_PART_CAPACITY,
	CAP_PART_ALLOCATED,
	CAP_PART_USED,
	CAP_PART_IDLE,
	_CAP_PART_MAX,
};

/* Quantities of a row: node-hours covered by node records, records, then per component
 * (core-hours, GiB-hours, GPU-hours; CAP_QI) its capacity, its allocation (the tasks' charged
 * reservations, at most the capacity), what the tasks used of it (at most the allocation) and
 * the allocation beyond the capacity (overcommit, not priced); and the node's own CPU use
 * (core-hours, all processes: node.sample used.cpu_ns). */
enum cap_qk { CAP_QK_CAP, CAP_QK_ALLOC, CAP_QK_USED, CAP_QK_OVER, _CAP_QK_MAX };
#define CAP_Q_NODE_H	    0
#define CAP_Q_RECORDS	    1
#define CAP_QI(comp, k)	    (2 + _CAP_QK_MAX * (comp) + (k))
#define CAP_Q_NODE_CPU_USED CAP_QI(_CAP_COMP_MAX, 0)
#define _CAP_Q_MAX	    (CAP_Q_NODE_CPU_USED + 1)

struct cap_row {
	char period[REPORT_PERIOD_LEN];
	char first_day[11], last_day[11];
	char *node, *price_class; /* "" where the grouping has none */
	double q[_CAP_Q_MAX];
	int64_t cents[_CAP_COMP_MAX][_CAP_PART_MAX];
};

struct cap_report {
	struct report_spec spec; /* from, to, period */
	enum cap_by by;
	char currency[16];
	size_t n;
	struct cap_row *rows; /* sorted by period, node, class */
	struct cap_row total;
	size_t node_rows; /* rollup_node_day rows read */
};

int cap_by_from_string(const char *s, enum cap_by *ret);
int cap_build(struct coll_store *s, const struct report_spec *spec, enum cap_by by,
	      const struct price_sheet *ps, struct cap_report *ret);
void cap_free(struct cap_report *r);
int cap_write(const struct cap_report *r, enum report_format f, FILE *out);
/* The row's money of one part summed over the components. */
int64_t cap_row_cents(const struct cap_row *row, enum cap_part part);
