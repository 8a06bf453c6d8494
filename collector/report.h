/* SPDX-License-Identifier: MIT */
/*
 * Showback/chargeback reports from the rollup tables (never the raw records); see
 * docs/reports.md for the cost model. Money is integer cents; every amount of a group is a
 * sum of per-cell cent amounts, so any grouping sums to the grand total exactly.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "collector/prices.h"
#include "collector/store.h"

enum report_dim {
	REPORT_DIM_ACCOUNT,
	REPORT_DIM_USER,
	REPORT_DIM_LABEL,
	REPORT_DIM_JOB,
	REPORT_DIM_NODE,
};
enum report_period {
	REPORT_PERIOD_DAY,
	REPORT_PERIOD_WEEK,
	REPORT_PERIOD_MONTH,
	REPORT_PERIOD_ALL
};
enum report_format { REPORT_FMT_TABLE, REPORT_FMT_CSV, REPORT_FMT_JSON, REPORT_FMT_HTML };
enum report_cost {
	REPORT_COST_CPU,
	REPORT_COST_MEM,
	REPORT_COST_GPU,
	REPORT_COST_IO,
	REPORT_COST_NET,
	REPORT_COST_TOTAL, /* sum of the five above */
	REPORT_COST_WASTE, /* charged but unused CPU, memory and GPU */
	/* the nodes' idle capacity (collector/capacity.h), in REPORT_COST_TOTAL too: an
	 * "(idle)" row's, or a row's share of its period's (report_spec.idle); 0 otherwise */
	REPORT_COST_IDLE,
	/* the price sheet's [shared:NAME] amounts (docs/reports.md "Shared costs"), in
	 * REPORT_COST_TOTAL too: a row's part, or a "(shared)" row's unallocated amount */
	REPORT_COST_SHARED,
	_REPORT_COST_MAX,
};

#define REPORT_DIMS_MAX 5 /* account, user, job, node and one label */

/* Quantities of a report row: the rollup sums, then tasks still running (charged from their
 * latest task.sample; counted in the last day of the report they ran in), then the tasks
 * active in the row's period (ended in it, running, or carried past its last day: see
 * report_row_active). A row's COLL_SUM_CARRIED_TASKS is that of the last day of its period
 * (inside the range) only. REPORT_Q_CO2E_G: the carbon of the row's measured energy in grams
 * before rounding (each node's energy at its zone's intensity of the day; docs/reports.md
 * "Carbon"), the weight the period's rounded grams are apportioned by. */
#define REPORT_Q_RUNNING _COLL_SUM_MAX
#define REPORT_Q_ACTIVE	 (_COLL_SUM_MAX + 1)
#define REPORT_Q_CO2E_G	 (_COLL_SUM_MAX + 2)
#define REPORT_Q_MAX	 (_COLL_SUM_MAX + 3)

/* Idle capacity in a showback report (docs/reports.md "Idle in the showback report"). */
enum report_idle {
	REPORT_IDLE_OFF,
	REPORT_IDLE_ROW,	  /* an "(idle)" row per period */
	REPORT_IDLE_PROPORTIONAL, /* shared over the period's rows by their cost */
	REPORT_IDLE_BY_REQUEST,	  /* ... by their requested CPU, memory and GPU at base prices */
	REPORT_IDLE_TO_ACCOUNT,	  /* to one account's rows (by their cost) */
};

struct report_spec {
	char from[11], to[11]; /* YYYY-MM-DD, from <= day < to */
	size_t n_dims;
	enum report_dim dims[REPORT_DIMS_MAX];
	char label_key[PRICE_LABEL_MAX]; /* for REPORT_DIM_LABEL (at most one label dim) */
	bool parts; /* a job or node dimension: cells split by rollup_job_day (and, with a
		     * label, rollup_job_label_day) */
	enum report_period period;
	size_t top; /* 0 = all groups; else the N groups with the most waste */
	bool nodes; /* also list the nodes in scope (the HTML header; reads rollup_job_day) */
	enum report_idle idle;
	char idle_account[256]; /* REPORT_IDLE_TO_ACCOUNT */
};

/* Cost and energy of one UTC day of the range, all groups (the HTML's charts over time) */
struct report_day {
	char day[11];
	int64_t cents[_REPORT_COST_MAX];
	double energy_j[3]; /* the measured CPU, DRAM and GPU joules of the day's cells */
	double co2e_g_raw;  /* their carbon before rounding (the price sheet has [carbon]) */
	double unmeasured;  /* tasks ended on the day with a part of their energy not measured */
	/* the day's share of its period's rows' energy_mwh and co2e_g, apportioned over the
	 * period's days by their joules and grams (largest remainder), so the days of a period
	 * sum to its rows exactly (with --top: the total's, over all days) */
	int64_t energy_mwh, co2e_g;
};

/* Period labels: 2026-12-01 (day), 2026-W49 (ISO week), 2026-12 (month),
 * 2026-12-01..2026-12-07 (all: first and last day of the range, inclusive). */
#define REPORT_PERIOD_LEN 24

struct report_row {
	char period[REPORT_PERIOD_LEN];
	/* the days of the period inside the report's range (inclusive): a week or month at an
	 * end of the range is clipped to it */
	char first_day[11], last_day[11];
	char *key[REPORT_DIMS_MAX];
	double q[REPORT_Q_MAX];
	int64_t cents[_REPORT_COST_MAX];
	/* the measured energy (usage.energy_j: CPU, DRAM, GPU) in whole mWh: the total's
	 * rounded, apportioned over the rows by their joules (largest remainder), so the rows
	 * sum to the total exactly (docs/reports.md "Energy in reports") */
	int64_t energy_mwh;
	/* the carbon of that energy, whole grams CO2e (report.carbon; docs/reports.md
	 * "Carbon"): each period's grams apportioned over its rows, so rows sum to the total */
	int64_t co2e_g;
};

struct report {
	struct report_spec spec;
	char currency[16];
	size_t n;
	struct report_row *rows; /* sorted by period, then key */
	struct report_row total;
	size_t cells;		 /* rollup rows read (with rollup_open rows) */
	struct report_day *days; /* the days with a cost, in order */
	size_t n_days;
	char **nodes; /* spec.nodes: the nodes with a task in the range, sorted */
	size_t n_nodes;
	char sheet_name[64];
	struct price_set prices; /* the sheet's base prices */
	size_t n_overrides;
	char override_key[PRICE_LABEL_MAX];
	bool carbon; /* the sheet has [carbon] or [carbon:ZONE]: the co2e columns are written */
	bool shared; /* the sheet has [shared:NAME] sections: shared_cost is written */
	/* energy with no intensity (a series without that day, a node in no zone and no
	 * [carbon]): no carbon */
	int64_t carbon_uncovered_mwh;
};

/* out = day + n days (YYYY-MM-DD; a month YYYY-MM is taken as its first day). */
void report_day_add(const char *day, int n, char out[11]);
/* The label of the period of spec holding day; to_last: the range's last day. */
void report_period_of(const struct report_spec *spec, const char *to_last, const char *day,
		      char out[REPORT_PERIOD_LEN]);
/* The first and last day (inclusive) of that period, clipped to the range. */
void report_period_days(const struct report_spec *spec, const char *to_last, const char *day,
			char first[11], char last[11]);

/* Spec setters; -EINVAL with a message naming the parameter. */
int report_spec_init(struct report_spec *spec, const char *from, const char *to, char *err,
		     size_t errlen);
int report_spec_set_by(struct report_spec *spec, const char *by, char *err, size_t errlen);
int report_spec_set_period(struct report_spec *spec, const char *period, char *err, size_t errlen);
int report_format_from_string(const char *s, enum report_format *ret);
/* "row" (the --idle flag), "proportional", "by-request" or "to:ACCOUNT"; to:ACCOUNT needs
 * account among the dimensions (checked by report_spec_check). */
int report_spec_set_idle(struct report_spec *spec, const char *rule, char *err, size_t errlen);
/* Checks of the spec as a whole (after every setter); -EINVAL with a message. */
int report_spec_check(const struct report_spec *spec, char *err, size_t errlen);

int report_build(struct coll_store *s, const struct report_spec *spec, const struct price_sheet *ps,
		 struct report *ret);
void report_free(struct report *r);
int report_write(const struct report *r, enum report_format f, FILE *out);

/*
 * Split total (>= 0) into n parts proportional to the integer weights w[] (>= 0) by largest
 * remainder, in exact integer arithmetic: part i gets floor(total * w[i] / sum) and the cents
 * left go one each to the parts with the largest remainders (total * w[i] mod sum), a tie to
 * the lower index. The parts sum to total exactly. All weight zero: everything goes to part
 * 0. Exposed for tests.
 */
void report_apportion(int64_t total, const int64_t *w, size_t n, int64_t *out);
/*
 * Shared costs (a fixed amount per month spread over groups by a rule; docs/reports.md
 * "Shared costs"). report_shared_spread splits amount (cents; negative: a credit, spread as
 * its opposite and negated) over n groups: REPORT_SPREAD_EVEN in equal parts, the cents left
 * one each to the lowest indexes; REPORT_SPREAD_PROPORTIONAL by the weights w[] (a group's
 * cost in cents; a weight below 0 counts as 0) by report_apportion. (A "to:ACCOUNT" rule is
 * the caller passing that one group.) The parts sum to amount exactly. Returns the cents
 * left unallocated, which the caller reports as such (never lost): amount when there is no
 * group, or under REPORT_SPREAD_PROPORTIONAL when every weight is 0; else 0 (out[] all 0 in
 * the first case).
 */
enum report_spread { REPORT_SPREAD_PROPORTIONAL, REPORT_SPREAD_EVEN };
int64_t report_shared_spread(int64_t amount, enum report_spread rule, const int64_t *w, size_t n,
			     int64_t *out);
/* The cents of a monthly amount falling on one UTC day "YYYY-MM-DD": the amount apportioned
 * evenly over the days of its month (the extra cents to the first days), so the days of any
 * period sum exactly, and a whole month gives the amount. 0 for a text that is not a day. */
int64_t report_shared_day_cents(int64_t monthly, const char *day);
/* The apportioning weight of an amount of money (currency units): whole hundredths of a cent
 * (llround(money * 10000)), 0 for nothing or less. */
int64_t report_weight(double money);

/*
 * Efficiency of a row, one rule everywhere (docs/reports.md): used / charged reservation,
 * where a task's charged reservation is max(requested, used) (a task without a request is
 * charged what it used: 100 %). A group's is sum(used) / sum(charged) over the same tasks,
 * so 0 <= efficiency <= 1; 1 when nothing was charged (nothing reserved, nothing wasted).
 */
double report_cpu_eff(const struct report_row *row);
/* Tasks that ran at least partly in the row's period (inside the range): those that ended in
 * it, those still running in it, and those that ran on its last day and ended after it. Not
 * additive over periods (a task running for a week is active in each of its days). */
double report_row_active(const struct report_row *row);
double report_mem_eff(const struct report_row *row);
double report_gpu_eff(const struct report_row *row);

/* A double in 17 significant digits, %.17g's notation, that reads back as the same double
 * (whole numbers as integers); len >= 32. Exposed for tests. */
void report_num_full(char *buf, size_t len, double v);

/* Text a task chose (an account, user, job, node, label) as the table format and HTML show
 * it: common/escape.h's escapes (a backslash, C0 and C1 controls, DEL, bytes that are not
 * UTF-8 as \xHH) and the invisible format characters that reorder or hide text (bidi marks,
 * embeddings, overrides and isolates, zero-width characters, U+2028/U+2029, the BOM) as
 * \uXXXX. One line of valid UTF-8 (malloc'd; NULL when out of memory). */
char *report_shown(const char *s);

/* CSV cell text: quoted when needed, and a text a spreadsheet would read as a formula
 * (starting with =, +, -, @, tab or CR) prefixed with a ' (written to f). */
void report_csv_field(FILE *f, const char *s);

/* The server's price sheet for GET /v1/reports/showback (implemented in server.c). */
struct coll_server;
void coll_server_set_prices(struct coll_server *srv, const struct price_sheet *ps);

/* cents as "-12.34" (no currency). */
void report_money(char *buf, size_t len, int64_t cents);
/* An amount of money (currency units) in whole cents, rounded; 0 for nothing, less or NaN,
 * at most 9e15. */
int64_t report_cents(double money);

/* Text for HTML: shown as report_shown does, then markup (<>&"') escaped. */
void report_html_text(FILE *f, const char *text);
/* A JSON string of a key: as it is, or, where it is not valid UTF-8 (a database written by
 * other means: ingest refuses it), escaped as common/escape.h does, so the JSON stays valid. */
void report_json_text(FILE *f, const char *s);

/* 00:00 UTC of a day "YYYY-MM-DD" in ns since the epoch (0 when it is not a day). */
uint64_t report_day_start_ns(const char *day);

/*
 * The days of [from_ns, to_ns) a running task's latest sample covers ([start, sample]), in
 * order: fn(day "YYYY-MM-DD", frac: the day's share of what the sample measured, last: the
 * last such day, ud). A sample without wall time falls whole on its own day. Both reports
 * spread running tasks so, like a task.end at ingest. Stops at fn's first error (returned).
 */
struct coll_open_row;
typedef int (*report_day_fn)(const char *day, double frac, bool last, void *ud);
int report_open_days(const struct coll_open_row *row, uint64_t from_ns, uint64_t to_ns,
		     report_day_fn fn, void *ud);
