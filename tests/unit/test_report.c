/* SPDX-License-Identifier: MIT */
/* Price sheet parsing, apportioning, and report reconciliation on generated rollups. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "accounting/record.h"
#include "collector/carbon.h"
#include "collector/prices.h"
#include "collector/report.h"
#include "collector/store.h"
#include "common/macro.h"

#define SHEET                                                                                      \
	"[prices]\ncurrency = CHF\ncpu_core_hour = 0.10\nmemory_gib_hour = 0.01\n"                 \
	"gpu_hour = 2.5\nio_read_gib = 0.001\nio_write_gib = 0.002\nnet_gib = 0.05\n"

/* ---- price sheet ---- */

static void test_prices_ok(void **state)
{
	struct price_sheet ps;
	char err[256] = "";

	assert_int_equal(price_sheet_parse(SHEET "[label:tier=spot]\ncpu_core_hour = 0.03\n"
						 "[label:tier=preempt]\ngpu_hour=1\n",
					   &ps, err, sizeof(err)),
			 0);
	assert_string_equal(ps.currency, "CHF");
	assert_true(fabs(ps.base.p[PRICE_CPU_CORE_HOUR] - 0.10) < 1e-12);
	assert_true(fabs(ps.base.p[PRICE_NET_GIB] - 0.05) < 1e-12);
	assert_string_equal(ps.override_key, "tier");
	assert_int_equal(ps.n_overrides, 2);
	assert_true(fabs(price_sheet_for(&ps, "spot")->p[PRICE_CPU_CORE_HOUR] - 0.03) < 1e-12);
	/* unset keys inherit [prices] */
	assert_true(fabs(price_sheet_for(&ps, "spot")->p[PRICE_GPU_HOUR] - 2.5) < 1e-12);
	assert_true(fabs(price_sheet_for(&ps, "preempt")->p[PRICE_GPU_HOUR] - 1) < 1e-12);
	assert_ptr_equal(price_sheet_for(&ps, "ondemand"), &ps.base);
	assert_ptr_equal(price_sheet_for(&ps, NULL), &ps.base);
	/* currency defaults */
	assert_int_equal(price_sheet_parse("[prices]\ncpu_core_hour=1\nmemory_gib_hour=1\n"
					   "gpu_hour=1\nio_read_gib=0\nio_write_gib=0\nnet_gib=0\n",
					   &ps, err, sizeof(err)),
			 0);
	assert_string_equal(ps.currency, "EUR");
	/* capacity prices: a node's section, else its class's, else [prices]; unset keys of
	 * either inherit [prices] */
	assert_int_equal(price_sheet_parse(SHEET "[node_class:gpu]\ngpu_hour = 3\n"
						 "[node:n7]\ncpu_core_hour = 0.2\n",
					   &ps, err, sizeof(err)),
			 0);
	assert_true(fabs(price_sheet_for_node(&ps, "n1", "gpu")->p[PRICE_GPU_HOUR] - 3) < 1e-12);
	assert_true(fabs(price_sheet_for_node(&ps, "n1", "gpu")->p[PRICE_CPU_CORE_HOUR] - 0.10) <
		    1e-12);
	assert_true(fabs(price_sheet_for_node(&ps, "n7", "gpu")->p[PRICE_CPU_CORE_HOUR] - 0.2) <
		    1e-12);
	assert_true(fabs(price_sheet_for_node(&ps, "n7", "gpu")->p[PRICE_GPU_HOUR] - 2.5) < 1e-12);
	assert_ptr_equal(price_sheet_for_node(&ps, "n1", "cpu"), &ps.base);
	assert_ptr_equal(price_sheet_for_node(&ps, NULL, NULL), &ps.base);
}

static void expect_error(const char *text, const char *needle)
{
	struct price_sheet ps;
	char err[256] = "";

	assert_int_equal(price_sheet_parse(text, &ps, err, sizeof(err)), -EINVAL);
	if (!strstr(err, needle))
		fail_msg("error '%s' does not name '%s'", err, needle);
}

static void test_prices_errors(void **state)
{
	expect_error(SHEET "cpu_hour = 1\n", "cpu_hour");
	expect_error(SHEET "cpu_core_hour = 2\n", "cpu_core_hour: set twice");
	expect_error("[prices]\ncpu_core_hour = 0.1\n", "memory_gib_hour: missing");
	expect_error(SHEET "[label:tier=spot]\ngpu_hour = -1\n", "gpu_hour");
	expect_error(SHEET "[label:tier=spot]\ngpu_hour = cheap\n", "cheap");
	expect_error(SHEET "[label:tier=spot]\ngpu_hour = 1e99\n", "gpu_hour");
	expect_error(SHEET "[label:tier=spot]\ngpu_hour = nan\n", "gpu_hour");
	expect_error(SHEET "[label:tier=spot]\nbogus = 1\n", "bogus");
	expect_error(SHEET "[label:tier]\ngpu_hour = 1\n", "label:KEY=VALUE");
	expect_error(SHEET "[label:tier=spot]\ngpu_hour = 1\n[label:zone=a]\ngpu_hour = 1\n",
		     "one label key");
	expect_error(SHEET "[discounts]\nx = 1\n", "unknown section [discounts]");
	expect_error(SHEET "currency = \n", "currency");
	expect_error(SHEET "currency = <b>\n", "currency");
	expect_error("no section = 1\n", "line 1");
	expect_error(SHEET "[node_class:]\ngpu_hour = 1\n", "[node_class:]: expected a name");
	expect_error(SHEET "[node_class:gpu]\ngpu_hours = 1\n",
		     "unknown key [node_class:gpu] gpu_hours");
	expect_error(SHEET "[node:n1]\ncpu_core_hour = x\n", "[node:n1] cpu_core_hour");
	expect_error(SHEET "[node:n1]\ncpu_core_hour = 1\ncpu_core_hour = 2\n", "set twice");
}

/* ---- carbon ---- */

static void carbon_error(const char *text, const char *needle)
{
	struct carbon_days *c = calloc(1, sizeof(*c));
	char err[256] = "";

	assert_non_null(c);
	assert_int_equal(carbon_series_parse(text, strlen(text), "grid.csv", c, err, sizeof(err)),
			 -EINVAL);
	if (!strstr(err, needle))
		fail_msg("error '%s' does not name '%s'", err, needle);
	free(c);
}

static void test_carbon_series(void **state)
{
	static const char ok[] = "# hourly gCO2e/kWh\n"
				 "2026-12-01T00,300\n"
				 "2026-12-01T01 , 200.5\r\n"
				 "\n"
				 "2026-12-02T23,100\n"
				 "2028-02-29T00,7";
	struct carbon_days *c = calloc(1, sizeof(*c));
	struct price_sheet ps;
	char err[256] = "";
	double g;

	assert_non_null(c);
	assert_int_equal(carbon_series_parse(ok, strlen(ok), "grid.csv", c, err, sizeof(err)), 0);
	assert_int_equal(c->n, 3);
	assert_int_equal(carbon_days_get(c, "2026-12-01", &g), 0);
	assert_true(fabs(g - 250.25) < 1e-12); /* the mean of the day's hours */
	assert_int_equal(carbon_days_get(c, "2026-12-02", &g), 0);
	assert_true(g == 100);
	assert_int_equal(carbon_days_get(c, "2028-02-29", &g), 0);
	assert_int_equal(carbon_days_get(c, "2026-12-03", &g), -ENOENT);
	free(c);
	carbon_error("2026-12-01T00,1\n2026-12-01T24,1\n", "grid.csv:2: hour out of range");
	carbon_error("2026-12-01T01,1\n2026-12-01T01,2\n", "grid.csv:2: hours must be strictly");
	carbon_error("\n\n2026-12-01T01;1\n", "grid.csv:3: expected a comma");
	carbon_error("2026-12-01T01,-1\n", "grid.csv:1: expected a number");
	carbon_error("2026-12-01T01,1e9\n", "grid.csv:1: expected a number");
	carbon_error("2026-12-01T01,nan\n", "grid.csv:1: expected a number");
	carbon_error("2026-12-01T01,5 g\n", "grid.csv:1: expected a number");
	carbon_error("2026-02-30T01,5\n", "grid.csv:1: expected YYYY-MM-DDTHH");
	carbon_error("2026-12-01 01,5\n", "grid.csv:1: expected YYYY-MM-DDTHH");
	carbon_error("# nothing\n", "grid.csv: no hour");
	/* the sheet's [carbon] */
	assert_int_equal(
	    price_sheet_parse(SHEET "[carbon]\ngco2e_per_kwh = 350\n", &ps, err, sizeof(err)), 0);
	assert_int_equal(price_sheet_carbon(&ps, "2026-12-01", &g), 0);
	assert_true(g == 350);
	expect_error(SHEET "[carbon]\ngco2e_per_kwh = 350\nseries = a.csv\n", "set twice");
	expect_error(SHEET "[carbon]\ngco2e_per_kwh = -3\n", "[carbon] gco2e_per_kwh");
	expect_error(SHEET "[carbon]\ngrams = 3\n", "unknown key [carbon] grams");
	/* zones: the first matching zone in sheet order, else the default */
	assert_int_equal(price_sheet_parse(SHEET
					   "[carbon]\ngco2e_per_kwh = 350\n"
					   "[carbon:nordic]\nnodes = se-*, fi-1 ,\n"
					   "gco2e_per_kwh = 30\n"
					   "[carbon:all-se]\nnodes=se-*\ngco2e_per_kwh = 90\n",
					   &ps, err, sizeof(err)),
			 0);
	assert_true(price_sheet_has_carbon(&ps));
	assert_int_equal(ps.n_zones, 2);
	assert_int_equal(price_sheet_carbon_zone_of(&ps, "se-17"), 0);
	assert_int_equal(price_sheet_carbon_zone_of(&ps, "fi-1"), 0);
	assert_int_equal(price_sheet_carbon_zone_of(&ps, "fi-10"), -1);
	assert_int_equal(price_sheet_carbon_zone_of(&ps, "de-1"), -1);
	assert_int_equal(price_sheet_carbon_zone(&ps, 0, "2026-12-01", &g), 0);
	assert_true(g == 30);
	assert_int_equal(price_sheet_carbon_zone(&ps, -1, "2026-12-01", &g), 0);
	assert_true(g == 350);
	/* zones without a default: other nodes have no intensity */
	assert_int_equal(price_sheet_parse(SHEET "[carbon:a]\nnodes = n[0-9]\nseries = a.csv\n",
					   &ps, err, sizeof(err)),
			 0);
	assert_true(price_sheet_has_carbon(&ps));
	assert_int_equal(price_sheet_carbon_zone_of(&ps, "n7"), 0);
	assert_int_equal(price_sheet_carbon_zone(&ps, -1, "2026-12-01", &g), -ENOENT);
	expect_error(SHEET "[carbon:a]\nnodes = n1\n",
		     "[carbon:a] gco2e_per_kwh or series: missing");
	expect_error(SHEET "[carbon:a]\ngco2e_per_kwh = 1\n", "[carbon:a] nodes: missing");
	expect_error(SHEET "[carbon:a]\nnodes = , ,\ngco2e_per_kwh = 1\n",
		     "line 10: [carbon:a] nodes");
	expect_error(SHEET "[carbon:a]\nnodes = n1\nnodes = n2\n",
		     "line 11: [carbon:a] nodes: set twice");
	expect_error(SHEET "[carbon:a]\ngco2e_per_kwh = 1\nseries = a.csv\n",
		     "line 11: [carbon:a] series: the intensity is set twice");
	expect_error(SHEET "[carbon:a]\ngco2e_per_kwh = 1e6\n",
		     "line 10: [carbon:a] gco2e_per_kwh");
	expect_error(SHEET "[carbon:]\ngco2e_per_kwh = 1\n", "[carbon:]: expected a zone name");
	expect_error(SHEET "[carbon:a]\nzone = x\n", "unknown key [carbon:a] zone");
	expect_error(SHEET "[carbon]\nnodes = x\n", "unknown key [carbon] nodes");
	expect_error(SHEET "[carbon:1]\nnodes=a\ngco2e_per_kwh=1\n[carbon:2]\nnodes=a\n"
			   "gco2e_per_kwh=1\n[carbon:3]\nnodes=a\ngco2e_per_kwh=1\n[carbon:4]\n"
			   "nodes=a\ngco2e_per_kwh=1\n[carbon:5]\nnodes=a\ngco2e_per_kwh=1\n"
			   "[carbon:6]\nnodes=a\ngco2e_per_kwh=1\n[carbon:7]\nnodes=a\n"
			   "gco2e_per_kwh=1\n[carbon:8]\nnodes=a\ngco2e_per_kwh=1\n[carbon:9]\n"
			   "nodes=a\n",
		     "more than 8 carbon zones");
}

/* ---- shared costs ---- */

static void test_shared_spread(void **state)
{
	int64_t out[8], w[8];
	char day[11];

	(void)state;
	/* no group: the whole amount unallocated, nothing written */
	assert_int_equal(report_shared_spread(120000, REPORT_SPREAD_EVEN, NULL, 0, out), 120000);
	assert_int_equal(report_shared_spread(-500, REPORT_SPREAD_PROPORTIONAL, NULL, 0, out),
			 -500);
	/* one group takes it all, whatever the rule */
	assert_int_equal(
	    report_shared_spread(999, REPORT_SPREAD_PROPORTIONAL, (int64_t[]){5}, 1, out), 0);
	assert_int_equal(out[0], 999);
	assert_int_equal(report_shared_spread(999, REPORT_SPREAD_EVEN, (int64_t[]){0}, 1, out), 0);
	assert_int_equal(out[0], 999);
	/* even: 100 / 3 = 34, 33, 33 */
	assert_int_equal(report_shared_spread(100, REPORT_SPREAD_EVEN, NULL, 3, out), 0);
	assert_int_equal(out[0], 34);
	assert_int_equal(out[1], 33);
	assert_int_equal(out[2], 33);
	/* a credit: -100 spread as -34, -33, -33 */
	assert_int_equal(report_shared_spread(-100, REPORT_SPREAD_EVEN, NULL, 3, out), 0);
	assert_int_equal(out[0], -34);
	assert_int_equal(out[2], -33);
	/* proportional to costs 100, 200, 700 of 1200.00 */
	assert_int_equal(report_shared_spread(120000, REPORT_SPREAD_PROPORTIONAL,
					      (int64_t[]){100, 200, 700}, 3, out),
			 0);
	assert_int_equal(out[0], 12000);
	assert_int_equal(out[1], 24000);
	assert_int_equal(out[2], 84000);
	/* negative and zero weights count 0 */
	assert_int_equal(
	    report_shared_spread(10, REPORT_SPREAD_PROPORTIONAL, (int64_t[]){-50, 0, 3}, 3, out),
	    0);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 0);
	assert_int_equal(out[2], 10);
	/* every weight 0 or less: nothing to spread by, all unallocated */
	assert_int_equal(
	    report_shared_spread(10, REPORT_SPREAD_PROPORTIONAL, (int64_t[]){-1, 0}, 2, out), 10);
	assert_int_equal(out[0] + out[1], 0);
	/* zero: nothing anywhere */
	assert_int_equal(report_shared_spread(0, REPORT_SPREAD_EVEN, NULL, 2, out), 0);
	assert_int_equal(out[0] + out[1], 0);
	/* the parts always sum to the amount */
	srand(11);
	for (int it = 0; it < 2000; it++) {
		int64_t amount = rand() % 200001 - 100000, sum = 0, left;
		size_t n = 1 + (size_t)(rand() % 8);
		enum report_spread rule =
		    rand() % 2 ? REPORT_SPREAD_EVEN : REPORT_SPREAD_PROPORTIONAL;

		for (size_t i = 0; i < n; i++)
			w[i] = rand() % 4 == 0 ? -(rand() % 100) : rand() % 100000;
		left = report_shared_spread(amount, rule, w, n, out);
		for (size_t i = 0; i < n; i++) {
			sum += out[i];
			assert_true(amount >= 0 ? out[i] >= 0 : out[i] <= 0);
		}
		assert_int_equal(sum + left, amount);
	}
	/* days: 1200.00 over November's 30 days is 40.00 a day; over December's 31, 38.70 and
	 * the 30 cents left to the first 30 days (38.71) */
	assert_int_equal(report_shared_day_cents(120000, "2026-11-15"), 4000);
	assert_int_equal(report_shared_day_cents(120000, "2026-12-01"), 3871);
	assert_int_equal(report_shared_day_cents(120000, "2026-12-31"), 3870);
	assert_int_equal(report_shared_day_cents(120000, "2026-12-32"), 0);
	assert_int_equal(report_shared_day_cents(120000, "2026-13-01"), 0);
	assert_int_equal(report_shared_day_cents(120000, "nope"), 0);
	/* every month of a leap and a common year sums to the amount exactly */
	for (int y = 2024; y <= 2025; y++)
		for (int m = 1; m <= 12; m++) {
			int64_t sum = 0;

			for (int d = 1; d <= 31; d++) {
				snprintf(day, sizeof(day), "%04d-%02d-%02d", y, m, d);
				sum += report_shared_day_cents(123457, day);
			}
			assert_int_equal(sum, 123457);
		}
	snprintf(day, sizeof(day), "2024-02-29");
	assert_int_not_equal(report_shared_day_cents(2900, day), 0);
	assert_int_equal(report_shared_day_cents(2900, "2025-02-29"), 0);
}

/* ---- apportion ---- */

static void test_apportion(void **state)
{
	int64_t out[8], w[8];

	report_apportion(100, (int64_t[]){1, 1, 1}, 3, out);
	/* 33 each and one left: the remainders tie, the lowest index gets it */
	assert_int_equal(out[0], 34);
	assert_int_equal(out[1], 33);
	assert_int_equal(out[2], 33);
	report_apportion(7, (int64_t[]){0, 0}, 2, out);
	assert_int_equal(out[0], 7);
	assert_int_equal(out[1], 0);
	/* 10 x (1, 2, 4) / 7 = 1.43, 2.86, 5.71: floors 1, 2, 5, the two cents left to the
	 * largest remainders (6/7, 5/7) */
	report_apportion(10, (int64_t[]){1, 2, 4}, 3, out);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 3);
	assert_int_equal(out[2], 6);
	assert_int_equal(report_weight(0.12345), 1235); /* hundredths of a cent */
	assert_int_equal(report_weight(-1), 0);
	srand(7);
	for (int it = 0; it < 2000; it++) {
		int64_t total = rand() % 100000, sum = 0, wsum = 0;
		size_t n = 1 + (size_t)(rand() % 8);

		for (size_t i = 0; i < n; i++) {
			w[i] = rand() % 3 == 0 ? 0 : rand() % 1000000;
			wsum += w[i];
		}
		report_apportion(total, w, n, out);
		for (size_t i = 0; i < n; i++) {
			assert_true(out[i] >= 0);
			/* within one cent of the exact share */
			if (wsum)
				assert_true(fabs((double)out[i] - (double)total * (double)w[i] /
								      (double)wsum) < 1.0);
			sum += out[i];
		}
		assert_int_equal(sum, total);
	}
}

/* ---- reports over a store ---- */

struct fixture {
	char dir[64];
	char uri[128];
	struct coll_store *store;
	struct price_sheet ps;
	double money_unrounded; /* independent sum of base-priced money, no override */
};

#define DAY0 1796169600ULL /* 2026-12-02T00:00:00Z */

static void fill(struct acct_record *r, int i, const char *account, const char *user, uint64_t t,
		 double cpus, uint64_t wall_s, uint64_t cpu_s)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->record_id, sizeof(r->record_id), "rec-%08d", i);
	r->type = ACCT_TASK_END;
	r->time_ns = t * NSEC_PER_SEC;
	r->node = strdup("n1");
	snprintf(r->task.id, sizeof(r->task.id), "task-%d", i);
	r->task.account = strdup(account);
	r->task.user = strdup(user);
	r->request.cpus = cpus;
	r->usage.wall_ns = wall_s * NSEC_PER_SEC;
	r->usage.cpu_user_ns = cpu_s * NSEC_PER_SEC;
	r->exit.status = ACCT_EXIT_EXITED;
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	char err[256];

	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_report.XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->uri, sizeof(fx->uri), "sqlite:%s/c.db", fx->dir);
	assert_int_equal(coll_store_open(fx->uri, 0, &fx->store, err, sizeof(err)), 0);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	char cmd[128];

	coll_store_close(fx->store);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	assert_int_equal(system(cmd), 0);
	free(fx);
	return 0;
}

static void insert(struct fixture *fx, struct acct_record *recs, size_t n)
{
	struct coll_item *items = calloc(n, sizeof(*items));

	assert_non_null(items);
	for (size_t i = 0; i < n; i++)
		items[i] = (struct coll_item){.rec = &recs[i], .json = "{}", .json_len = 2};
	assert_int_equal(coll_store_insert_batch(fx->store, items, n), 0);
	free(items);
}

static void build(struct fixture *fx, const char *by, const char *period, struct report *rep)
{
	struct report_spec spec;
	char err[256];

	assert_int_equal(report_spec_init(&spec, "2026-11-01", "2027-02-01", err, sizeof(err)), 0);
	assert_int_equal(report_spec_set_by(&spec, by, err, sizeof(err)), 0);
	assert_int_equal(report_spec_set_period(&spec, period, err, sizeof(err)), 0);
	assert_int_equal(report_build(fx->store, &spec, &fx->ps, rep), 0);
}

/* The worked example of docs/reports.md "Energy in reports" and "Carbon": three users' tasks
 * of 1/3 kWh each (1,000,000 J CPU + 200,000 J DRAM) at 350 gCO2e/kWh. */
static void test_energy_example(void **state)
{
	struct fixture *fx = *state;
	static const char *const users[] = {"ann", "ben", "cat"};
	struct acct_record recs[3];
	struct report rep;
	char err[256];
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	FILE *f;

	assert_int_equal(
	    price_sheet_parse(SHEET "[carbon]\ngco2e_per_kwh = 350\n", &fx->ps, err, sizeof(err)),
	    0);
	for (int i = 0; i < 3; i++) {
		fill(&recs[i], i, "physics", users[i], DAY0 + 3600, 1, 3600, 1800);
		recs[i].usage.energy = (struct acct_energy){
		    .present = true,
		    .j = {1000000, 200000, 0},
		    .src = {ACCT_ESRC_RAPL, ACCT_ESRC_RAPL, ACCT_ESRC_NONE},
		};
	}
	insert(fx, recs, 3);
	build(fx, "user", "day", &rep);
	assert_int_equal(rep.n, 3);
	/* 1,000,000 mWh over three equal rows: 333,333 each and one left, to the first */
	assert_int_equal(rep.rows[0].energy_mwh, 333334);
	assert_int_equal(rep.rows[1].energy_mwh, 333333);
	assert_int_equal(rep.rows[2].energy_mwh, 333333);
	assert_int_equal(rep.total.energy_mwh, 1000000);
	/* 350 g over three: 116 each and two left, to the first two */
	assert_int_equal(rep.rows[0].co2e_g, 117);
	assert_int_equal(rep.rows[1].co2e_g, 117);
	assert_int_equal(rep.rows[2].co2e_g, 116);
	assert_int_equal(rep.total.co2e_g, 350);
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(report_write(&rep, REPORT_FMT_CSV, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(buf, ",energy_kwh,co2e_kg,"));
	assert_non_null(strstr(buf, ",0.333334,0.117,"));
	assert_non_null(strstr(buf, ",0.333333,0.116,"));
	assert_non_null(strstr(buf, ",1.000000,0.350,"));
	report_free(&rep);
	for (int i = 0; i < 3; i++)
		acct_record_clear(&recs[i]);
}

static void write_text(const char *dir, const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* The carbon zones example of docs/reports.md "Carbon": 1/3 kWh each on se-1 (zone nordic,
 * 30 g/kWh), de-1 (zone central, a series of mean 390 on 2026-12-02) and n1 (no zone: the
 * default 350), and 1/3 kWh on de-1 on 2026-12-03, a day the series lacks. */
static void test_carbon_zones(void **state)
{
	struct fixture *fx = *state;
	static const char *const users[] = {"ann", "ben", "cat", "dan"};
	static const char *const nodes[] = {"se-1", "de-1", "n1", "de-1"};
	struct acct_record recs[4];
	struct report rep;
	char err[256], path[128];
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	FILE *f;

	write_text(fx->dir, "central.csv",
		   "# central grid\n2026-12-02T00,380\n2026-12-02T01,400\n");
	write_text(fx->dir, "prices.ini",
		   SHEET "[carbon]\ngco2e_per_kwh = 350\n[carbon:nordic]\nnodes = se-*, fi-*\n"
			 "gco2e_per_kwh = 30\n[carbon:central]\nnodes = de-*\n"
			 "series = central.csv\n");
	snprintf(path, sizeof(path), "%s/prices.ini", fx->dir);
	assert_int_equal(price_sheet_load(path, &fx->ps, err, sizeof(err)), 0);
	for (int i = 0; i < 4; i++) {
		fill(&recs[i], i, "physics", users[i], DAY0 + 3600 + (i == 3 ? 86400 : 0), 1, 3600,
		     1800);
		free(recs[i].node);
		recs[i].node = strdup(nodes[i]);
		recs[i].usage.energy = (struct acct_energy){
		    .present = true,
		    .j = {1000000, 200000, 0},
		    .src = {ACCT_ESRC_RAPL, ACCT_ESRC_RAPL, ACCT_ESRC_NONE},
		};
	}
	insert(fx, recs, 4);
	/* by user: 10 + 130 + 116.67 = 256.67 g on 2026-12-02, rounded once to 257; the
	 * floors 10 + 130 + 116 leave one gram, to the largest remainder (cat) */
	build(fx, "user", "day", &rep);
	assert_int_equal(rep.n, 4);
	assert_string_equal(rep.rows[0].key[0], "ann");
	assert_int_equal(rep.rows[0].co2e_g, 10);
	assert_int_equal(rep.rows[1].co2e_g, 130);
	assert_int_equal(rep.rows[2].co2e_g, 117);
	assert_string_equal(rep.rows[3].key[0], "dan");
	assert_int_equal(rep.rows[3].co2e_g, 0);
	assert_int_equal(rep.total.co2e_g, 257);
	assert_int_equal(rep.carbon_uncovered_mwh, 333333);
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(report_write(&rep, REPORT_FMT_JSON, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(buf, "\"co2e_kg\":\"0.257\",\"carbon_uncovered_kwh\":\"0.333333\""));
	report_free(&rep);
	/* by node: each node's own zone, the same grams */
	build(fx, "node", "all", &rep);
	assert_int_equal(rep.n, 3);
	assert_string_equal(rep.rows[0].key[0], "de-1");
	assert_int_equal(rep.rows[0].co2e_g, 130);
	assert_string_equal(rep.rows[1].key[0], "n1");
	assert_int_equal(rep.rows[1].co2e_g, 117);
	assert_string_equal(rep.rows[2].key[0], "se-1");
	assert_int_equal(rep.rows[2].co2e_g, 10);
	assert_int_equal(rep.total.co2e_g, 257);
	report_free(&rep);
	/* by account: one row, every zone in it */
	build(fx, "account", "all", &rep);
	assert_int_equal(rep.n, 1);
	assert_int_equal(rep.rows[0].co2e_g, 257);
	report_free(&rep);
	for (int i = 0; i < 4; i++)
		acct_record_clear(&recs[i]);
}

/* The idle energy example of docs/reports.md "Energy in reports": the zones example's tasks,
 * and node.sample records of se-1 (0.1 kWh unattributed package energy) and n1 (0.3 kWh:
 * 0.15 package + 0.05 DRAM + 0.1 GPU) in the hour before 2026-12-02T02:00. With --idle the
 * "(idle)" row of 2026-12-02 has their 0.4 kWh and 0.1 x 30 + 0.3 x 350 = 108 g. */
static void test_idle_energy(void **state)
{
	struct fixture *fx = *state;
	static const char *const users[] = {"ann", "ben", "cat", "dan"};
	static const char *const nodes[] = {"se-1", "de-1", "n1", "de-1"};
	struct acct_record recs[6];
	struct report_spec spec;
	struct report rep;
	char err[256], path[128];

	write_text(fx->dir, "central.csv", "2026-12-02T00,380\n2026-12-02T01,400\n");
	write_text(fx->dir, "prices.ini",
		   SHEET "[carbon]\ngco2e_per_kwh = 350\n[carbon:nordic]\nnodes = se-*, fi-*\n"
			 "gco2e_per_kwh = 30\n[carbon:central]\nnodes = de-*\n"
			 "series = central.csv\n");
	snprintf(path, sizeof(path), "%s/prices.ini", fx->dir);
	assert_int_equal(price_sheet_load(path, &fx->ps, err, sizeof(err)), 0);
	for (int i = 0; i < 4; i++) {
		fill(&recs[i], i, "physics", users[i], DAY0 + 3600 + (i == 3 ? 86400 : 0), 1, 3600,
		     1800);
		free(recs[i].node);
		recs[i].node = strdup(nodes[i]);
		recs[i].usage.energy = (struct acct_energy){
		    .present = true,
		    .j = {1000000, 200000, 0},
		    .src = {ACCT_ESRC_RAPL, ACCT_ESRC_RAPL, ACCT_ESRC_NONE},
		};
	}
	for (int i = 4; i < 6; i++) {
		memset(&recs[i], 0, sizeof(recs[i]));
		snprintf(recs[i].record_id, sizeof(recs[i].record_id), "ns-%d", i);
		recs[i].type = ACCT_NODE_SAMPLE;
		recs[i].time_ns = (DAY0 + 7200) * NSEC_PER_SEC;
		recs[i].node = strdup(i == 4 ? "se-1" : "n1");
		assert_int_equal(acct_record_node_sample(&recs[i]), 0);
		recs[i].ns->period_ns = 3600 * NSEC_PER_SEC;
		recs[i].ns->has_unattributed = true;
		recs[i].ns->unattributed_package_j = i == 4 ? 360000 : 540000;
		recs[i].ns->unattributed_dram_j = i == 4 ? 0 : 180000;
	}
	/* n1's GPUs: 0.2 kWh, half of it given to no task */
	recs[5].ns->has_gpu_energy = recs[5].ns->has_unattributed_gpu = true;
	recs[5].ns->energy_gpu_j = 720000;
	recs[5].ns->unattributed_gpu_j = 360000;
	insert(fx, recs, 6);
	assert_int_equal(report_spec_init(&spec, "2026-11-01", "2027-02-01", err, sizeof(err)), 0);
	assert_int_equal(report_spec_set_by(&spec, "user", err, sizeof(err)), 0);
	assert_int_equal(report_spec_set_period(&spec, "day", err, sizeof(err)), 0);
	/* without --idle: no idle row, the tasks' energy only */
	assert_int_equal(report_build(fx->store, &spec, &fx->ps, &rep), 0);
	assert_int_equal(rep.n, 4);
	assert_int_equal(rep.total.energy_mwh, 1333333);
	assert_int_equal(rep.total.co2e_g, 257);
	report_free(&rep);
	assert_int_equal(report_spec_set_idle(&spec, "row", err, sizeof(err)), 0);
	assert_int_equal(report_build(fx->store, &spec, &fx->ps, &rep), 0);
	assert_int_equal(rep.n, 5);
	assert_string_equal(rep.rows[0].key[0], "(idle)");
	assert_string_equal(rep.rows[0].period, "2026-12-02");
	assert_int_equal(rep.rows[0].energy_mwh, 400000);
	assert_int_equal(rep.rows[0].co2e_g, 108);
	assert_true(fabs(rep.rows[0].q[COLL_SUM_ENERGY_DRAM_J] - 180000) < 1e-6);
	assert_true(fabs(rep.rows[0].q[COLL_SUM_ENERGY_GPU_J] - 360000) < 1e-6);
	/* 2026-12-02: 10 + 130 + 116.67 + 108 = 364.67 g, 365; the gram left to cat */
	assert_int_equal(rep.rows[1].co2e_g, 10);
	assert_int_equal(rep.rows[2].co2e_g, 130);
	assert_int_equal(rep.rows[3].co2e_g, 117);
	assert_int_equal(rep.total.co2e_g, 365);
	/* tasks' energy + unattributed = the nodes' measured energy, rows summing exactly */
	assert_int_equal(rep.total.energy_mwh, 1733333);
	assert_int_equal(rep.rows[0].energy_mwh + rep.rows[1].energy_mwh + rep.rows[2].energy_mwh +
			     rep.rows[3].energy_mwh + rep.rows[4].energy_mwh,
			 1733333);
	report_free(&rep);
	for (int i = 0; i < 6; i++)
		acct_record_clear(&recs[i]);
}

/* Shared costs (docs/reports.md "Shared costs"): by account and month over 2026-11..2027-01,
 * tasks of chem and physics in December only. ops (1200.00, even over all) gives December's
 * two rows 600.00 each; lab (31.00 to physics' groups) 31.00 to physics in December; spot
 * (100.00 on a label the report does not group by) is unallocated every month; November and
 * January have no row: their whole 1,331.00 are "(shared)" rows. */
static void test_shared_report(void **state)
{
	struct fixture *fx = *state;
	struct acct_record recs[2];
	struct report rep;
	char err[256];
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int64_t sum = 0;
	FILE *f;

	assert_int_equal(price_sheet_parse(SHEET
					   "[shared:ops]\namount = 1200.00\nmatch = all\n"
					   "spread = even\n[shared:lab]\namount = 31\n"
					   "match = account:physics\nspread = proportional\n"
					   "[shared:spot]\namount = 100\nmatch = label:tier=spot\n"
					   "spread = to:physics\n",
					   &fx->ps, err, sizeof(err)),
			 0);
	assert_int_equal(fx->ps.n_shared, 3);
	fill(&recs[0], 0, "chem", "ann", DAY0 + 3600, 3, 3600, 1800);
	fill(&recs[1], 1, "physics", "ben", DAY0 + 3600, 1, 3600, 1800);
	insert(fx, recs, 2);
	build(fx, "account", "month", &rep);
	assert_int_equal(rep.n, 5);
	assert_string_equal(rep.rows[0].period, "2026-11");
	assert_string_equal(rep.rows[0].key[0], "(shared)");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_SHARED], 133100);
	assert_int_equal(rep.rows[0].cents[REPORT_COST_TOTAL], 133100);
	assert_string_equal(rep.rows[1].key[0], "(shared)");
	assert_string_equal(rep.rows[1].period, "2026-12");
	assert_int_equal(rep.rows[1].cents[REPORT_COST_SHARED], 10000);
	assert_string_equal(rep.rows[2].key[0], "chem");
	assert_int_equal(rep.rows[2].cents[REPORT_COST_SHARED], 60000);
	assert_string_equal(rep.rows[3].key[0], "physics");
	assert_int_equal(rep.rows[3].cents[REPORT_COST_SHARED], 63100);
	assert_string_equal(rep.rows[4].period, "2027-01");
	assert_string_equal(rep.rows[4].key[0], "(shared)");
	assert_int_equal(rep.rows[4].cents[REPORT_COST_SHARED], 133100);
	assert_int_equal(rep.total.cents[REPORT_COST_SHARED], 399300);
	for (size_t i = 0; i < rep.n; i++)
		sum += rep.rows[i].cents[REPORT_COST_TOTAL];
	assert_int_equal(sum, rep.total.cents[REPORT_COST_TOTAL]);
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(report_write(&rep, REPORT_FMT_CSV, f), 0);
	assert_int_equal(report_write(&rep, REPORT_FMT_JSON, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(buf, ",waste,shared_cost,"));
	assert_non_null(strstr(buf, ",3993.00,"));
	assert_non_null(strstr(buf, "\"shared_cost\":\"631.00\""));
	free(buf);
	buf = NULL;
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(report_write(&rep, REPORT_FMT_HTML, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(buf, "<th>shared costs</th>"));
	assert_non_null(strstr(buf, "id=\"total-shared\">3993.00"));
	/* stacked in the cost charts: a day of November (4000 + 104 + 334 cents of the three
	 * monthly amounts, the first days taking the cents left) and physics' 631.00 */
	assert_non_null(strstr(buf, "data-component=\"shared_cost\" data-amount=\"44.38\""));
	assert_non_null(strstr(buf, "data-component=\"shared_cost\" data-amount=\"631.00\""));
	assert_non_null(strstr(buf, "id=\"kwh-days-chart\""));
	assert_non_null(strstr(buf, "id=\"kwh-groups-chart\""));
	report_free(&rep);
	for (int i = 0; i < 2; i++)
		acct_record_clear(&recs[i]);
	expect_error(SHEET "[shared:a]\namount = x\n", "line 10: [shared:a] amount");
	expect_error(SHEET "[shared:a]\nmatch = some\n", "[shared:a] match");
	expect_error(SHEET "[shared:a]\nmatch = label:k\n", "[shared:a] match");
	expect_error(SHEET "[shared:a]\nspread = fair\n", "[shared:a] spread");
	expect_error(SHEET "[shared:a]\nwho = x\n", "unknown key [shared:a] who");
	expect_error(SHEET "[shared:a]\namount = 1\namount = 2\n", "[shared:a] amount: set twice");
	expect_error(SHEET "[shared:a]\namount = 1\nmatch = all\n", "[shared:a] spread: missing");
	expect_error(SHEET "[shared:]\namount = 1\n", "[shared:]: expected a name");
}

/* One exact case: 2 cpus for 1 h using 0.5 core-h -> charged 2 core-h at 0.10 = 0.20,
 * waste 1.5 core-h = 0.15; the spot task (same shape) at 0.03 -> 0.06, waste 0.045 -> 0.05
 * (rounded half away from zero: 4.5 cents -> 5). */
static void test_report_exact(void **state)
{
	struct fixture *fx = *state;
	struct acct_record recs[2];
	struct report rep;
	char err[256];
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	FILE *f;

	assert_int_equal(price_sheet_parse(SHEET "[label:tier=spot]\ncpu_core_hour = 0.03\n",
					   &fx->ps, err, sizeof(err)),
			 0);
	fill(&recs[0], 0, "physics", "alice", DAY0 + 3600, 2, 3600, 1800);
	fill(&recs[1], 1, "physics", "bob", DAY0 + 7200, 2, 3600, 1800);
	assert_int_equal(acct_task_add_label(&recs[1].task, "tier", "spot"), 0);
	insert(fx, recs, 2);

	build(fx, "user", "day", &rep);
	assert_int_equal(rep.n, 2);
	assert_string_equal(rep.rows[0].period, "2026-12-02");
	assert_string_equal(rep.rows[0].key[0], "alice");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_CPU], 20);
	assert_int_equal(rep.rows[0].cents[REPORT_COST_WASTE], 15);
	assert_int_equal(rep.rows[1].cents[REPORT_COST_CPU], 6);
	assert_int_equal(rep.rows[1].cents[REPORT_COST_WASTE], 5);
	assert_int_equal(rep.total.cents[REPORT_COST_TOTAL], 26);
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(report_write(&rep, REPORT_FMT_CSV, f), 0);
	assert_int_equal(fclose(f), 0);
	/* counts (no energy_j in these records: energy not measured), quantities in full
	 * precision (energy 0), cents, kWh, efficiency (no memory request: 100 %) */
	assert_non_null(strstr(buf, "\n2026-12-02,2026-12-02,2026-12-02,alice,1,1,1,0,0,0,0,0,0,1,"
				    "2,0.5,0,0,0,0,0,0,0,0,0,0.20,0.00,0.00,0.00,0.00,0.20,0.15,"
				    "0.000000,0.25,1,1\n"));
	assert_non_null(strstr(buf, "\ntotal,2026-11-01,2027-01-31,,2,2,2,"));
	report_free(&rep);

	/* by the override label: the spot part is priced at the spot rate */
	build(fx, "label:tier", "month", &rep);
	assert_int_equal(rep.n, 2);
	assert_string_equal(rep.rows[0].period, "2026-12");
	assert_string_equal(rep.rows[0].key[0], "(none)");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_TOTAL], 20);
	assert_string_equal(rep.rows[1].key[0], "spot");
	assert_int_equal(rep.rows[1].cents[REPORT_COST_TOTAL], 6);
	report_free(&rep);

	/* the override label with job and node: the same prices per job */
	build(fx, "job,label:tier,node", "day", &rep);
	assert_int_equal(rep.n, 2);
	assert_string_equal(rep.rows[0].key[0], "(none)"); /* no job: as a missing label */
	assert_string_equal(rep.rows[0].key[1], "(none)");
	assert_string_equal(rep.rows[0].key[2], "n1");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_TOTAL], 20);
	assert_int_equal(rep.rows[0].cents[REPORT_COST_WASTE], 15);
	assert_string_equal(rep.rows[1].key[1], "spot");
	assert_int_equal(rep.rows[1].cents[REPORT_COST_TOTAL], 6);
	assert_int_equal(rep.rows[1].cents[REPORT_COST_WASTE], 5);
	assert_float_equal(rep.rows[1].q[COLL_SUM_TASKS], 1, 1e-9);
	report_free(&rep);
	for (int i = 0; i < 2; i++)
		acct_record_clear(&recs[i]);
}

static void set_job(struct acct_record *r, const char *job, const char *node)
{
	free(r->task.job);
	free(r->node);
	r->task.job = strdup(job);
	r->node = strdup(node);
	assert_non_null(r->task.job);
	assert_non_null(r->node);
}

static void build_range(struct fixture *fx, const char *from, const char *to, const char *by,
			const char *period, struct report *rep)
{
	struct report_spec spec;
	char err[256];

	assert_int_equal(report_spec_init(&spec, from, to, err, sizeof(err)), 0);
	assert_int_equal(report_spec_set_by(&spec, by, err, sizeof(err)), 0);
	assert_int_equal(report_spec_set_period(&spec, period, err, sizeof(err)), 0);
	assert_int_equal(report_build(fx->store, &spec, &fx->ps, rep), 0);
}

static void check_reconciles(struct fixture *fx, const char *by, const char *period, int64_t *grand)
{
	struct report rep;
	int64_t sum[_REPORT_COST_MAX] = {0};
	double tasks = 0, oom = 0, tlim = 0;

	build(fx, by, period, &rep);
	for (size_t i = 0; i < rep.n; i++) {
		int64_t parts = 0;

		for (int k = 0; k < _REPORT_COST_MAX; k++)
			sum[k] += rep.rows[i].cents[k];
		for (int k = 0; k < REPORT_COST_TOTAL; k++)
			parts += rep.rows[i].cents[k];
		assert_int_equal(parts, rep.rows[i].cents[REPORT_COST_TOTAL]);
		tasks += rep.rows[i].q[COLL_SUM_TASKS];
		oom += rep.rows[i].q[COLL_SUM_OOM_KILLED];
		tlim += rep.rows[i].q[COLL_SUM_TIME_LIMIT];
	}
	assert_true(fabs(oom - rep.total.q[COLL_SUM_OOM_KILLED]) < 1e-6);
	assert_true(fabs(tlim - rep.total.q[COLL_SUM_TIME_LIMIT]) < 1e-6);
	assert_true(rep.total.q[COLL_SUM_OOM_KILLED] > 100 &&
		    rep.total.q[COLL_SUM_TIME_LIMIT] > 50);
	for (int k = 0; k < _REPORT_COST_MAX; k++)
		if (sum[k] != rep.total.cents[k])
			fail_msg("by %s per %s: %s sums to %lld, total %lld", by, period,
				 k == REPORT_COST_TOTAL ? "cost" : "a component", (long long)sum[k],
				 (long long)rep.total.cents[k]);
	if (*grand < 0)
		*grand = rep.total.cents[REPORT_COST_TOTAL];
	assert_int_equal(rep.total.cents[REPORT_COST_TOTAL], *grand);
	/* label groupings split tasks by their label rows; task counts still add up */
	assert_true(fabs(tasks - rep.total.q[COLL_SUM_TASKS]) < 1e-6);
	report_free(&rep);
}

/* A grouping that includes account splits each (day or month, account, user) cell into parts:
 * summed per period and account, its cents are the account report's, exactly. */
static void check_same_per_account(struct fixture *fx, const char *by, const char *period)
{
	struct report ref, rep;
	size_t acc_dim = 0, j = 0;

	build(fx, "account", period, &ref);
	build(fx, by, period, &rep);
	while (rep.spec.dims[acc_dim] != REPORT_DIM_ACCOUNT)
		acc_dim++;
	for (size_t i = 0; i < ref.n; i++) {
		int64_t sum[_REPORT_COST_MAX] = {0};
		double tasks = 0;

		for (j = 0; j < rep.n; j++)
			if (strcmp(rep.rows[j].period, ref.rows[i].period) == 0 &&
			    strcmp(rep.rows[j].key[acc_dim], ref.rows[i].key[0]) == 0) {
				for (int k = 0; k < _REPORT_COST_MAX; k++)
					sum[k] += rep.rows[j].cents[k];
				tasks += rep.rows[j].q[COLL_SUM_TASKS];
			}
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			if (sum[k] != ref.rows[i].cents[k])
				fail_msg("by %s per %s: %s %s cost %d: %lld, by account %lld", by,
					 period, ref.rows[i].period, ref.rows[i].key[0], k,
					 (long long)sum[k], (long long)ref.rows[i].cents[k]);
		assert_true(fabs(tasks - ref.rows[i].q[COLL_SUM_TASKS]) < 1e-6);
	}
	report_free(&ref);
	report_free(&rep);
}

/* The joint rollup of a label with job and node: summed over the label, the quantities are the
 * job/node report's; summed over job and node, the label report's. */
static void check_joint_label(struct fixture *fx, const char *period)
{
	static const int qs[] = {COLL_SUM_TASKS, COLL_SUM_CPU_CHARGED_CORE_S, COLL_SUM_MEM_BYTE_S,
				 COLL_SUM_OOM_KILLED, COLL_SUM_NET_RX_BYTES};
	struct report joint, jn, lab;

	build(fx, "label:project,job,node", period, &joint);
	build(fx, "job,node", period, &jn);
	build(fx, "label:project", period, &lab);
	for (int pass = 0; pass < 2; pass++) {
		const struct report *ref = pass ? &lab : &jn;

		for (size_t i = 0; i < ref->n; i++) {
			double sum[ARRAY_SIZE(qs)] = {0};

			for (size_t j = 0; j < joint.n; j++) {
				const struct report_row *x = &joint.rows[j];
				bool same = strcmp(x->period, ref->rows[i].period) == 0;

				if (pass)
					same = same && strcmp(x->key[0], ref->rows[i].key[0]) == 0;
				else
					same = same &&
					       strcmp(x->key[1], ref->rows[i].key[0]) == 0 &&
					       strcmp(x->key[2], ref->rows[i].key[1]) == 0;
				for (size_t k = 0; same && k < ARRAY_SIZE(qs); k++)
					sum[k] += x->q[qs[k]];
			}
			for (size_t k = 0; k < ARRAY_SIZE(qs); k++)
				if (fabs(sum[k] - ref->rows[i].q[qs[k]]) >
				    1e-6 * MAX(1.0, fabs(ref->rows[i].q[qs[k]])))
					fail_msg(
					    "per %s: label:project,job,node %s summed: %g, %s %g",
					    period, coll_sum_name(qs[k]), sum[k],
					    pass ? "label:project" : "job,node",
					    ref->rows[i].q[qs[k]]);
		}
	}
	assert_true(joint.n > jn.n && joint.n > lab.n);
	assert_int_equal(joint.total.cents[REPORT_COST_TOTAL], jn.total.cents[REPORT_COST_TOTAL]);
	report_free(&joint);
	report_free(&jn);
	report_free(&lab);
}

static void test_report_reconciles(void **state)
{
	struct fixture *fx = *state;
	static const char *const accounts[] = {"physics", "chem", "bio", "", "astro", "geo"};
	static const char *const users[] = {"alice", "bob", "carol", "dave", ""};
	static const char *const projects[] = {"lattice", "qcd", "fold", "x,y \"q\""};
	static const char *const bys[] = {"account",
					  "user",
					  "account,user",
					  "label:project",
					  "label:tier",
					  "user,label:project",
					  "label:project,account,user",
					  "job",
					  "node",
					  "account,job",
					  "job,node",
					  "account,user,job,node",
					  "label:project,job",
					  "node,label:project",
					  "label:project,job,node",
					  "label:tier,node",
					  "account,user,job,node,label:tier",
					  "account,label:project,job,node"};
	static const char *const periods[] = {"day", "week", "month", "all"};
	const size_t n = 3000;
	struct acct_record *recs = calloc(n, sizeof(*recs));
	char err[256];
	double unrounded = 0;
	int64_t grand = -1;
	struct report rep;

	assert_non_null(recs);
	assert_int_equal(price_sheet_parse(SHEET, &fx->ps, err, sizeof(err)), 0);
	srand(42);
	for (size_t i = 0; i < n; i++) {
		struct acct_record *r = &recs[i];
		uint64_t wall = 1 + (uint64_t)(rand() % 20000);
		double cpus = (double)(1 + rand() % 16) / 2;
		uint64_t cpu = (uint64_t)((double)wall * cpus * (double)(rand() % 130) / 100.0);

		fill(r, (int)i, accounts[rand() % 6], users[rand() % 5],
		     DAY0 - 20 * 86400 + (uint64_t)(rand() % (60 * 86400)), cpus, wall, cpu);
		r->request.memory_bytes = (uint64_t)(1 + rand() % 64) << 28;
		r->usage.memory_byte_seconds =
		    (double)r->request.memory_bytes * (double)wall * (double)(rand() % 120) / 100;
		r->request.gpus = rand() % 5 == 0 ? (uint32_t)(1 + rand() % 4) : 0;
		r->usage.gpu_seconds = (double)r->request.gpus * (double)wall * 0.7;
		r->usage.io_read_bytes = (uint64_t)rand() * 997;
		r->usage.io_write_bytes = (uint64_t)rand() * 13;
		r->usage.net_rx_bytes = (uint64_t)rand() * 101;
		r->usage.net_tx_bytes = (uint64_t)rand() * 7;
		if (rand() % 4)
			assert_int_equal(
			    acct_task_add_label(&r->task, "project", projects[rand() % 4]), 0);
		if (rand() % 3 == 0)
			assert_int_equal(acct_task_add_label(&r->task, "tier", "spot"), 0);
		if (rand() % 7 == 0)
			r->exit.status = ACCT_EXIT_OOM_KILLED;
		else if (rand() % 9 == 0)
			r->exit.status = ACCT_EXIT_TIME_LIMIT;
		{
			char job[16], node[16];

			snprintf(job, sizeof(job), "job%d", rand() % 40);
			snprintf(node, sizeof(node), "node%d", rand() % 12);
			set_job(r, job, node);
		}
		{
			double v[_COLL_SUM_MAX];

			coll_record_sums(r, v);
			unrounded += v[COLL_SUM_CPU_CHARGED_CORE_S] / 3600 * 0.10 +
				     v[COLL_SUM_MEM_CHARGED_BYTE_S] / 3600 / 1073741824.0 * 0.01 +
				     v[COLL_SUM_GPU_CHARGED_S] / 3600 * 2.5 +
				     v[COLL_SUM_IO_READ_BYTES] / 1073741824.0 * 0.001 +
				     v[COLL_SUM_IO_WRITE_BYTES] / 1073741824.0 * 0.002 +
				     (v[COLL_SUM_NET_RX_BYTES] + v[COLL_SUM_NET_TX_BYTES]) /
					 1073741824.0 * 0.05;
		}
	}
	for (size_t i = 0; i < n; i += 500)
		insert(fx, &recs[i], MIN((size_t)500, n - i));

	for (size_t b = 0; b < ARRAY_SIZE(bys); b++)
		for (size_t p = 0; p < ARRAY_SIZE(periods); p++)
			check_reconciles(fx, bys[b], periods[p], &grand);

	for (size_t p = 0; p < ARRAY_SIZE(periods); p++) {
		check_same_per_account(fx, "account,job", periods[p]);
		check_same_per_account(fx, "account,label:project,job,node", periods[p]);
		check_same_per_account(fx, "user,node,account,label:tier", periods[p]);
		check_joint_label(fx, periods[p]);
	}

	/* the grand total is the unrounded money, rounded per cell: within half a cent per
	 * (day, account, user) cell and component of it */
	build(fx, "account,user", "day", &rep);
	assert_true(rep.n > 100);
	assert_true(fabs((double)grand - unrounded * 100) <= 0.5 * 5 * (double)rep.n + 1e-6);
	assert_true(rep.total.q[COLL_SUM_TASKS] == (double)n);
	report_free(&rep);

	/* with a spot override the total changes, but still reconciles everywhere */
	assert_int_equal(price_sheet_parse(SHEET "[label:tier=spot]\ncpu_core_hour = 0.02\n"
						 "memory_gib_hour = 0.001\n",
					   &fx->ps, err, sizeof(err)),
			 0);
	{
		int64_t g2 = -1;

		for (size_t b = 0; b < ARRAY_SIZE(bys); b++)
			check_reconciles(fx, bys[b], "week", &g2);
		assert_true(g2 < grand);
		check_same_per_account(fx, "account,label:tier,job,node", "month");
		check_same_per_account(fx, "account,label:tier,node", "week");
	}

	/* top-N wasters: sorted by waste, at most N */
	{
		struct report_spec spec;

		assert_int_equal(
		    report_spec_init(&spec, "2026-11-01", "2027-02-01", err, sizeof(err)), 0);
		spec.top = 3;
		assert_int_equal(report_build(fx->store, &spec, &fx->ps, &rep), 0);
		assert_int_equal(rep.n, 3);
		assert_true(rep.rows[0].cents[REPORT_COST_WASTE] >=
			    rep.rows[1].cents[REPORT_COST_WASTE]);
		assert_true(rep.rows[1].cents[REPORT_COST_WASTE] >=
			    rep.rows[2].cents[REPORT_COST_WASTE]);
		report_free(&rep);
	}
	for (size_t i = 0; i < n; i++)
		acct_record_clear(&recs[i]);
	free(recs);
}

static void test_spec_errors(void **state)
{
	struct report_spec spec;
	char err[256];

	assert_int_equal(report_spec_init(&spec, "2026-13-01", "2027-01-01", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "from"));
	assert_int_equal(report_spec_init(&spec, "2026-02-30", "2027-01-01", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(report_spec_init(&spec, "2026-01-01", "2026-01-01", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "to"));
	assert_int_equal(report_spec_init(&spec, "2026-01-01", "2026-02-01", err, sizeof(err)), 0);
	assert_int_equal(report_spec_set_by(&spec, "nodes", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "nodes"));
	assert_int_equal(report_spec_set_by(&spec, "job,label:x", err, sizeof(err)), 0);
	assert_true(spec.parts);
	assert_string_equal(spec.label_key, "x");
	assert_int_equal(
	    report_spec_set_by(&spec, "account,user,job,node,label:x", err, sizeof(err)), 0);
	assert_int_equal(spec.n_dims, 5);
	assert_int_equal(
	    report_spec_set_by(&spec, "account,user,job,node,label:x,label:y", err, sizeof(err)),
	    -EINVAL);
	assert_non_null(strstr(err, "at most 5"));
	assert_int_equal(report_spec_set_by(&spec, "account,user,job,node", err, sizeof(err)), 0);
	assert_true(spec.parts);
	assert_int_equal(spec.n_dims, 4);
	assert_int_equal(report_spec_set_by(&spec, "account,account", err, sizeof(err)), -EINVAL);
	assert_int_equal(report_spec_set_by(&spec, "label:a,label:b", err, sizeof(err)), -EINVAL);
	assert_int_equal(report_spec_set_by(&spec, "account,", err, sizeof(err)), -EINVAL);
	assert_int_equal(report_spec_set_by(&spec, "", err, sizeof(err)), -EINVAL);
	assert_int_equal(report_spec_set_by(&spec, "account,user,label:x", err, sizeof(err)), 0);
	assert_int_equal(spec.n_dims, 3);
	assert_false(spec.parts);
	assert_string_equal(spec.label_key, "x");
	assert_int_equal(report_spec_set_period(&spec, "year", err, sizeof(err)), -EINVAL);
	assert_int_equal(report_spec_set_period(&spec, "week", err, sizeof(err)), 0);
}

static void test_week_period(void **state)
{
	struct fixture *fx = *state;
	struct acct_record recs[2];
	struct report rep;
	char err[256];

	assert_int_equal(price_sheet_parse(SHEET, &fx->ps, err, sizeof(err)), 0);
	/* 2026-12-02 is a Wednesday (week of Monday 2026-11-30); 2026-12-07 a Monday. Both
	 * tasks ran one hour up to 10 s past midnight: recs[1] from Sunday 12-06 23:00:10, so
	 * 3590 s of it belong to the week of 11-30 and 10 s to the week of 12-07, where it is
	 * counted (a task counts in the day it ended). */
	fill(&recs[0], 0, "a", "u", DAY0 + 10, 1, 3600, 3600);
	fill(&recs[1], 1, "a", "u", DAY0 + 5 * 86400 + 10, 1, 3600, 3600);
	insert(fx, recs, 2);
	build(fx, "account", "week", &rep);
	assert_int_equal(rep.n, 2);
	assert_string_equal(rep.rows[0].period, "2026-W49");
	assert_string_equal(rep.rows[1].period, "2026-W50");
	/* the week of 2026-11-30 clipped to the report's range (from 2026-11-01: whole) */
	assert_string_equal(rep.rows[0].first_day, "2026-11-30");
	assert_string_equal(rep.rows[0].last_day, "2026-12-06");
	assert_string_equal(rep.rows[1].first_day, "2026-12-07");
	/* cells 12-01 (3590 s: 9.97 -> 10 cents), 12-02 (10 s: 0), 12-06 (10), 12-07 (0) */
	assert_int_equal(rep.rows[0].cents[REPORT_COST_CPU], 20);
	assert_int_equal(rep.rows[1].cents[REPORT_COST_CPU], 0);
	assert_float_equal(rep.rows[0].q[COLL_SUM_TASKS], 1, 1e-9);
	assert_float_equal(rep.rows[1].q[COLL_SUM_TASKS], 1, 1e-9);
	assert_float_equal(rep.rows[0].q[COLL_SUM_CPU_S], 3600 + 3590, 1e-6);
	assert_float_equal(rep.rows[1].q[COLL_SUM_CPU_S], 10, 1e-6);
	report_free(&rep);
	for (int i = 0; i < 2; i++)
		acct_record_clear(&recs[i]);
}

/* A task over midnight is split in proportion; it is never counted twice, whatever the range.
 * Limit deaths are counted per reason and group. */
static void test_straddle_and_kills(void **state)
{
	struct fixture *fx = *state;
	struct acct_record recs[4];
	struct report rep, a, b;
	char err[256];

	assert_int_equal(price_sheet_parse(SHEET, &fx->ps, err, sizeof(err)), 0);
	/* 2 cpus, 12 h, ends 2026-12-02T06:00 -> 24 core-h = 2.40: 1.20 on 12-01, 1.20 on 12-02 */
	fill(&recs[0], 0, "a", "u", DAY0 + 6 * 3600, 2, 12 * 3600, 0);
	set_job(&recs[0], "j1", "n1");
	fill(&recs[1], 1, "b", "u", DAY0 + 3600, 1, 3600, 3600);
	recs[1].exit.status = ACCT_EXIT_OOM_KILLED;
	set_job(&recs[1], "j2", "n2");
	fill(&recs[2], 2, "b", "v", DAY0 + 7200, 1, 3600, 3600);
	recs[2].exit.status = ACCT_EXIT_TIME_LIMIT;
	set_job(&recs[2], "j2", "n3");
	fill(&recs[3], 3, "b", "v", DAY0 + 7300, 1, 3600, 3600);
	recs[3].exit.status = ACCT_EXIT_OOM_KILLED;
	set_job(&recs[3], "j3", "n3");
	insert(fx, recs, 4);

	build_range(fx, "2026-12-01", "2026-12-02", "account", "all", &a);
	build_range(fx, "2026-12-02", "2026-12-03", "account", "all", &b);
	build_range(fx, "2026-12-01", "2026-12-03", "account", "day", &rep);
	assert_int_equal(a.n, 1);
	assert_string_equal(a.rows[0].key[0], "a");
	assert_int_equal(a.rows[0].cents[REPORT_COST_CPU], 120);
	assert_float_equal(a.rows[0].q[COLL_SUM_TASKS], 0, 1e-9);  /* it ended on 12-02 */
	assert_float_equal(a.rows[0].q[REPORT_Q_ACTIVE], 1, 1e-9); /* and ran on 12-01 */
	assert_int_equal(b.rows[0].cents[REPORT_COST_CPU], 120);
	assert_float_equal(b.rows[0].q[COLL_SUM_TASKS], 1, 1e-9);
	assert_float_equal(b.rows[0].q[REPORT_Q_ACTIVE], 1, 1e-9);
	/* per day: active on both days, ended on the second; over both days: once */
	assert_string_equal(rep.rows[0].key[0], "a");
	assert_float_equal(rep.rows[0].q[COLL_SUM_TASKS], 0, 1e-9);
	assert_float_equal(rep.rows[0].q[REPORT_Q_ACTIVE], 1, 1e-9);
	assert_float_equal(rep.rows[1].q[REPORT_Q_ACTIVE], 1, 1e-9);
	assert_float_equal(rep.total.q[REPORT_Q_ACTIVE], 4, 1e-9);
	assert_int_equal(a.total.cents[REPORT_COST_TOTAL] + b.total.cents[REPORT_COST_TOTAL],
			 rep.total.cents[REPORT_COST_TOTAL]);
	assert_int_equal(rep.total.cents[REPORT_COST_CPU], 240 + 30);
	assert_float_equal(rep.total.q[COLL_SUM_TASKS], 4, 1e-9);
	report_free(&a);
	report_free(&b);
	report_free(&rep);

	/* kills per reason, per group */
	build(fx, "account", "all", &rep);
	assert_int_equal(rep.n, 2);
	assert_string_equal(rep.rows[1].key[0], "b");
	assert_float_equal(rep.rows[1].q[COLL_SUM_FAILED_TASKS], 3, 1e-9);
	assert_float_equal(rep.rows[1].q[COLL_SUM_OOM_KILLED], 2, 1e-9);
	assert_float_equal(rep.rows[1].q[COLL_SUM_TIME_LIMIT], 1, 1e-9);
	assert_float_equal(rep.rows[0].q[COLL_SUM_OOM_KILLED], 0, 1e-9);
	assert_float_equal(rep.rows[0].q[REPORT_Q_ACTIVE], 1, 1e-9);
	assert_float_equal(rep.rows[1].q[REPORT_Q_ACTIVE], 3, 1e-9);
	report_free(&rep);
	/* 12-01 alone: the long task ran on it, by job too (day and month rows) */
	build_range(fx, "2026-12-01", "2026-12-02", "job,node", "day", &rep);
	assert_int_equal(rep.n, 1);
	assert_float_equal(rep.rows[0].q[COLL_SUM_TASKS], 0, 1e-9);
	assert_float_equal(rep.rows[0].q[REPORT_Q_ACTIVE], 1, 1e-9);
	assert_float_equal(rep.total.q[REPORT_Q_ACTIVE], 1, 1e-9);
	report_free(&rep);
	/* a whole month (rollup_job_month) */
	build_range(fx, "2026-12-01", "2027-01-01", "job,node", "month", &rep);
	assert_int_equal(rep.n, 4);
	assert_string_equal(rep.rows[0].key[0], "j1");
	assert_float_equal(rep.rows[0].q[REPORT_Q_ACTIVE], 1, 1e-9);
	assert_float_equal(rep.total.q[REPORT_Q_ACTIVE], 4, 1e-9);
	report_free(&rep);
	build(fx, "job", "week", &rep);
	assert_float_equal(rep.total.q[REPORT_Q_ACTIVE], 4, 1e-9);
	for (size_t i = 0; i < rep.n; i++)
		assert_float_equal(rep.rows[i].q[REPORT_Q_ACTIVE], rep.rows[i].q[COLL_SUM_TASKS],
				   1e-9);
	report_free(&rep);
	build(fx, "job", "all", &rep);
	assert_int_equal(rep.n, 3);
	assert_string_equal(rep.rows[1].key[0], "j2");
	assert_float_equal(rep.rows[1].q[COLL_SUM_OOM_KILLED], 1, 1e-9);
	assert_float_equal(rep.rows[1].q[COLL_SUM_TIME_LIMIT], 1, 1e-9);
	assert_int_equal(rep.rows[1].cents[REPORT_COST_CPU], 20);
	assert_string_equal(rep.rows[2].key[0], "j3");
	assert_float_equal(rep.rows[2].q[COLL_SUM_OOM_KILLED], 1, 1e-9);
	report_free(&rep);
	build(fx, "node", "all", &rep);
	assert_int_equal(rep.n, 3);
	assert_string_equal(rep.rows[2].key[0], "n3");
	assert_float_equal(rep.rows[2].q[COLL_SUM_TASKS], 2, 1e-9);
	assert_float_equal(rep.rows[2].q[COLL_SUM_TIME_LIMIT], 1, 1e-9);
	assert_int_equal(rep.rows[2].cents[REPORT_COST_CPU], 20);
	report_free(&rep);
	for (int i = 0; i < 4; i++)
		acct_record_clear(&recs[i]);
}

/* A task with samples and no task.end is charged from its latest sample, up to the report's
 * end; its task.end replaces it (never both), and a sample arriving after the end is ignored. */
static void test_running_tasks(void **state)
{
	struct fixture *fx = *state;
	struct acct_record recs[4];
	struct report rep;
	char err[256];

	assert_int_equal(price_sheet_parse(SHEET "[label:tier=spot]\ncpu_core_hour = 0.05\n",
					   &fx->ps, err, sizeof(err)),
			 0);
	/* latest sample: 1 cpu, 3 h so far (12-01T23:00 .. 12-02T02:00), nothing used */
	fill(&recs[0], 0, "a", "u", DAY0 + 2 * 3600, 1, 3 * 3600, 0);
	fill(&recs[1], 1, "a", "u", DAY0 + 1 * 3600, 1, 2 * 3600, 0); /* older sample */
	fill(&recs[2], 2, "a", "u", DAY0 + 4 * 3600, 1, 5 * 3600, 0); /* the end */
	fill(&recs[3], 3, "a", "u", DAY0 + 3 * 3600, 1, 4 * 3600, 0); /* late sample */
	for (int i = 0; i < 4; i++) {
		snprintf(recs[i].task.id, sizeof(recs[i].task.id), "run-1");
		set_job(&recs[i], "j1", "n2");
		assert_int_equal(acct_task_add_label(&recs[i].task, "project", "p"), 0);
		if (i != 2) {
			recs[i].type = ACCT_TASK_SAMPLE;
			recs[i].exit.status = ACCT_EXIT_NONE;
		}
	}
	insert(fx, &recs[0], 1);
	insert(fx, &recs[1], 1); /* older than the stored one: ignored */

	build(fx, "account", "day", &rep);
	assert_int_equal(rep.n, 2);
	assert_string_equal(rep.rows[0].period, "2026-12-01");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_CPU], 10);
	assert_float_equal(rep.rows[0].q[REPORT_Q_RUNNING], 0, 1e-9);
	assert_float_equal(rep.rows[0].q[REPORT_Q_ACTIVE], 1, 1e-9); /* ran on into 12-02 */
	assert_int_equal(rep.rows[1].cents[REPORT_COST_CPU], 20);
	assert_float_equal(rep.rows[1].q[REPORT_Q_RUNNING], 1, 1e-9);
	assert_float_equal(rep.rows[1].q[REPORT_Q_ACTIVE], 1, 1e-9);
	assert_float_equal(rep.total.q[COLL_SUM_TASKS], 0, 1e-9);
	assert_float_equal(rep.total.q[REPORT_Q_ACTIVE], 1, 1e-9);
	report_free(&rep);
	/* up to the report's end only, and counted running there */
	build_range(fx, "2026-11-01", "2026-12-02", "account", "all", &rep);
	assert_int_equal(rep.total.cents[REPORT_COST_CPU], 10);
	assert_float_equal(rep.total.q[REPORT_Q_RUNNING], 1, 1e-9);
	report_free(&rep);
	build(fx, "job,node", "all", &rep);
	assert_int_equal(rep.n, 1);
	assert_string_equal(rep.rows[0].key[0], "j1");
	assert_string_equal(rep.rows[0].key[1], "n2");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_CPU], 30);
	report_free(&rep);
	/* every task has the label: no empty (none) row */
	build(fx, "label:project", "all", &rep);
	assert_int_equal(rep.n, 1);
	assert_string_equal(rep.rows[0].period, "2026-11-01..2027-01-31");
	assert_string_equal(rep.rows[0].key[0], "p");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_CPU], 30);
	assert_float_equal(rep.rows[0].q[REPORT_Q_RUNNING], 1, 1e-9);
	report_free(&rep);
	build(fx, "label:project,job,node", "all", &rep);
	assert_int_equal(rep.n, 1);
	assert_string_equal(rep.rows[0].key[0], "p");
	assert_string_equal(rep.rows[0].key[1], "j1");
	assert_string_equal(rep.rows[0].key[2], "n2");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_CPU], 30);
	assert_float_equal(rep.rows[0].q[REPORT_Q_RUNNING], 1, 1e-9);
	report_free(&rep);

	/* the end arrives: 5 core-h = 0.50 (1 h on 12-01, 4 h on 12-02), running no more */
	insert(fx, &recs[2], 1);
	insert(fx, &recs[3], 1);
	build(fx, "account", "day", &rep);
	assert_int_equal(rep.n, 2);
	assert_int_equal(rep.rows[0].cents[REPORT_COST_CPU], 10);
	assert_float_equal(rep.rows[0].q[REPORT_Q_ACTIVE], 1, 1e-9);
	assert_int_equal(rep.rows[1].cents[REPORT_COST_CPU], 40);
	assert_float_equal(rep.rows[1].q[REPORT_Q_ACTIVE], 1, 1e-9);
	assert_int_equal(rep.total.cents[REPORT_COST_TOTAL], 50);
	assert_float_equal(rep.total.q[REPORT_Q_RUNNING], 0, 1e-9);
	assert_float_equal(rep.total.q[COLL_SUM_TASKS], 1, 1e-9);
	report_free(&rep);
	build(fx, "node,label:project", "day", &rep);
	assert_int_equal(rep.n, 2); /* no empty (none) rows */
	assert_string_equal(rep.rows[0].key[0], "n2");
	assert_string_equal(rep.rows[0].key[1], "p");
	assert_int_equal(rep.rows[0].cents[REPORT_COST_CPU], 10);
	assert_string_equal(rep.rows[1].key[1], "p");
	assert_int_equal(rep.rows[1].cents[REPORT_COST_CPU], 40);
	assert_float_equal(rep.rows[1].q[COLL_SUM_TASKS], 1, 1e-9);
	assert_float_equal(rep.total.q[REPORT_Q_RUNNING], 0, 1e-9);
	report_free(&rep);
	for (int i = 0; i < 4; i++)
		acct_record_clear(&recs[i]);
}

/* The report of by/period equals ref in every row, key, cent and quantity. */
static void assert_reports_equal(struct fixture *fx, const char *by, const char *period,
				 const struct report *ref)
{
	struct report rep;

	build(fx, by, period, &rep);
	assert_int_equal(rep.n, ref->n);
	for (size_t i = 0; i <= rep.n; i++) {
		const struct report_row *a = i < rep.n ? &rep.rows[i] : &rep.total;
		const struct report_row *b = i < rep.n ? &ref->rows[i] : &ref->total;

		assert_string_equal(a->period, b->period);
		for (size_t d = 0; i < rep.n && d < rep.spec.n_dims; d++)
			assert_string_equal(a->key[d], b->key[d]);
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			assert_int_equal(a->cents[k], b->cents[k]);
		for (int q = 0; q < REPORT_Q_MAX; q++)
			assert_true(fabs(a->q[q] - b->q[q]) <= 1e-9 * MAX(1.0, fabs(b->q[q])));
	}
	report_free(&rep);
}

/* A version 1 database (rollups keyed by the end's day only) is migrated: the rollups are
 * rebuilt from the stored records, and the report equals that of a fresh ingest. */
static void test_migrate_v1(void **state)
{
	struct fixture *fx = *state;
	static const char v1_ddl[] =
	    "CREATE TABLE schema_version (version INTEGER NOT NULL);"
	    "INSERT INTO schema_version VALUES (1);"
	    "CREATE TABLE records (record_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL,"
	    " time TEXT NOT NULL, time_ns INTEGER NOT NULL, node TEXT NOT NULL, task_id TEXT,"
	    " job TEXT, \"user\" TEXT, account TEXT, labels TEXT, req_cpus REAL,"
	    " req_memory_bytes INTEGER, req_gpus INTEGER, req_time_limit_s INTEGER,"
	    " wall_ns INTEGER, cpu_user_ns INTEGER, cpu_system_ns INTEGER,"
	    " memory_peak_bytes INTEGER, memory_byte_seconds REAL, io_read_bytes INTEGER,"
	    " io_write_bytes INTEGER, net_rx_bytes INTEGER, net_tx_bytes INTEGER,"
	    " gpu_seconds REAL, exit_status TEXT, body TEXT NOT NULL);"
	    "CREATE INDEX records_type_time ON records(type, time_ns);"
	    "CREATE INDEX records_task ON records(task_id);"
	    "CREATE TABLE rollup_hour (bucket TEXT NOT NULL, account TEXT NOT NULL,"
	    " \"user\" TEXT NOT NULL, tasks REAL NOT NULL DEFAULT 0,"
	    " PRIMARY KEY (bucket, account, \"user\"));"
	    "CREATE TABLE rollup_day (bucket TEXT NOT NULL, account TEXT NOT NULL,"
	    " \"user\" TEXT NOT NULL, tasks REAL NOT NULL DEFAULT 0,"
	    " PRIMARY KEY (bucket, account, \"user\"));"
	    "CREATE TABLE rollup_label_day (bucket TEXT NOT NULL, label_key TEXT NOT NULL,"
	    " label_value TEXT NOT NULL, account TEXT NOT NULL, \"user\" TEXT NOT NULL,"
	    " tasks REAL NOT NULL DEFAULT 0,"
	    " PRIMARY KEY (bucket, label_key, label_value, account, \"user\"));"
	    "INSERT INTO rollup_day VALUES ('2026-12-02', 'stale', '', 99);";
	struct acct_record recs[3];
	struct coll_item items[3];
	char *json[3], uri[160], path[128], err[256];
	size_t len[3];
	struct coll_store *old = NULL;
	struct report fresh, migrated, fresh_joint;
	sqlite3 *db = NULL;
	sqlite3_stmt *ins = NULL;
	int v = 0;

	assert_int_equal(price_sheet_parse(SHEET, &fx->ps, err, sizeof(err)), 0);
	fill(&recs[0], 0, "a", "u", DAY0 + 6 * 3600, 2, 12 * 3600, 3600);
	fill(&recs[1], 1, "b", "u", DAY0 + 3600, 1, 3600, 1800);
	recs[1].exit.status = ACCT_EXIT_OOM_KILLED;
	fill(&recs[2], 2, "b", "u", DAY0 + 3600, 4, 7200, 0);
	recs[2].type = ACCT_TASK_SAMPLE;
	recs[2].exit.status = ACCT_EXIT_NONE;
	for (int i = 0; i < 3; i++) {
		set_job(&recs[i], "j", "n1");
		if (i != 1)
			assert_int_equal(acct_task_add_label(&recs[i].task, "project", "p"), 0);
		assert_int_equal(acct_record_encode(&recs[i], &json[i], &len[i]), 0);
		items[i] = (struct coll_item){.rec = &recs[i], .json = json[i], .json_len = len[i]};
	}
	assert_int_equal(coll_store_insert_batch(fx->store, items, 3), 0);
	build(fx, "account,job", "day", &fresh);
	build(fx, "account,label:project,job,node", "month", &fresh_joint);

	snprintf(path, sizeof(path), "%s/v1.db", fx->dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, v1_ddl, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db,
					    "INSERT INTO records (record_id, type, time, time_ns,"
					    " node, body) VALUES (?, ?, '', ?, 'n1', ?)",
					    -1, &ins, NULL),
			 SQLITE_OK);
	for (int i = 0; i < 3; i++) {
		sqlite3_bind_text(ins, 1, recs[i].record_id, -1, SQLITE_STATIC);
		sqlite3_bind_text(ins, 2, acct_type_to_string(recs[i].type), -1, SQLITE_STATIC);
		sqlite3_bind_int64(ins, 3, (int64_t)recs[i].time_ns);
		sqlite3_bind_text(ins, 4, json[i], (int)len[i], SQLITE_STATIC);
		assert_int_equal(sqlite3_step(ins), SQLITE_DONE);
		sqlite3_reset(ins);
	}
	sqlite3_finalize(ins);
	sqlite3_close(db);

	old = fx->store;
	snprintf(uri, sizeof(uri), "sqlite:%s", path);
	assert_int_equal(coll_store_open(uri, 0, &fx->store, err, sizeof(err)), 0);
	assert_int_equal(coll_store_schema_version(fx->store, &v), 0);
	assert_int_equal(v, COLL_SCHEMA_VERSION);
	assert_reports_equal(fx, "account,label:project,job,node", "month", &fresh_joint);
	build(fx, "account,job", "day", &migrated);
	assert_int_equal(migrated.n, fresh.n);
	for (size_t i = 0; i < fresh.n; i++) {
		assert_string_equal(migrated.rows[i].key[0], fresh.rows[i].key[0]);
		for (int k = 0; k < _REPORT_COST_MAX; k++)
			assert_int_equal(migrated.rows[i].cents[k], fresh.rows[i].cents[k]);
	}
	assert_int_equal(migrated.total.cents[REPORT_COST_TOTAL],
			 fresh.total.cents[REPORT_COST_TOTAL]);
	assert_float_equal(migrated.total.q[COLL_SUM_OOM_KILLED], 1, 1e-9);
	assert_float_equal(migrated.total.q[REPORT_Q_RUNNING], 1, 1e-9);
	assert_float_equal(migrated.total.q[COLL_SUM_TASKS], 2, 1e-9); /* not the stale row */
	report_free(&fresh);
	report_free(&fresh_joint);
	report_free(&migrated);
	coll_store_close(fx->store);
	fx->store = old;
	for (int i = 0; i < 3; i++) {
		free(json[i]);
		acct_record_clear(&recs[i]);
	}
}

/* A version 2 database (no rollup_job_label_day, no rollup_job_month) is migrated: the two
 * tables are filled from the stored records and the reports by label with job and node, and
 * by job and node per month, equal those of the database ingested at version 3. */
static void test_migrate_v2(void **state)
{
	struct fixture *fx = *state;
	static const char *const reports[][2] = {{"label:project,job,node", "day"},
						 {"job,node", "month"},
						 {"account,node", "all"},
						 {"user,job,label:project", "month"}};
	const size_t n = 600;
	struct acct_record *recs = calloc(n, sizeof(*recs));
	struct coll_item *items = calloc(n, sizeof(*items));
	char **json = calloc(n, sizeof(*json)), err[256], cmd[512];
	struct report want[ARRAY_SIZE(reports)];
	sqlite3 *db = NULL;
	int v = 0;

	assert_non_null(recs);
	assert_non_null(items);
	assert_non_null(json);
	assert_int_equal(price_sheet_parse(SHEET "[label:project=qcd]\ncpu_core_hour = 0.02\n",
					   &fx->ps, err, sizeof(err)),
			 0);
	srand(7);
	for (size_t i = 0; i < n; i++) {
		char job[16], node[16];
		size_t len;

		fill(&recs[i], (int)i, i % 3 ? "chem" : "bio", i % 2 ? "ann" : "ben",
		     DAY0 - 40 * 86400 + (uint64_t)(rand() % (50 * 86400)), 1 + rand() % 4,
		     1 + (uint64_t)(rand() % 90000), (uint64_t)(rand() % 3600));
		snprintf(job, sizeof(job), "job%d", rand() % 5);
		snprintf(node, sizeof(node), "node%d", rand() % 3);
		set_job(&recs[i], job, node);
		if (rand() % 3)
			assert_int_equal(acct_task_add_label(&recs[i].task, "project",
							     rand() % 2 ? "qcd" : "fold"),
					 0);
		if (i % 10 == 0) { /* a running task: its latest sample */
			recs[i].type = ACCT_TASK_SAMPLE;
			recs[i].exit.status = ACCT_EXIT_NONE;
		}
		assert_int_equal(acct_record_encode(&recs[i], &json[i], &len), 0);
		items[i] = (struct coll_item){.rec = &recs[i], .json = json[i], .json_len = len};
	}
	assert_int_equal(coll_store_insert_batch(fx->store, items, n), 0);
	for (size_t k = 0; k < ARRAY_SIZE(reports); k++)
		build(fx, reports[k][0], reports[k][1], &want[k]);
	coll_store_close(fx->store);

	/* back to version 2: the v3 tables did not exist */
	snprintf(cmd, sizeof(cmd), "%s/c.db", fx->dir);
	assert_int_equal(sqlite3_open(cmd, &db), SQLITE_OK);
	assert_int_equal(
	    sqlite3_exec(db,
			 "DROP TABLE rollup_job_label_day; DROP TABLE rollup_job_month;"
			 " UPDATE schema_version SET version = 2;",
			 NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(db);

	assert_int_equal(coll_store_open(fx->uri, 0, &fx->store, err, sizeof(err)), 0);
	assert_int_equal(coll_store_schema_version(fx->store, &v), 0);
	assert_int_equal(v, COLL_SCHEMA_VERSION);
	for (size_t k = 0; k < ARRAY_SIZE(reports); k++) {
		assert_true(want[k].n > 3);
		assert_reports_equal(fx, reports[k][0], reports[k][1], &want[k]);
		report_free(&want[k]);
	}
	for (size_t i = 0; i < n; i++) {
		free(json[i]);
		acct_record_clear(&recs[i]);
	}
	free(json);
	free(items);
	free(recs);
}

/* Invariants of every row of every grouping and period, over random tasks with and without
 * requests (using more than requested, or nothing), blank and missing labels and accounts,
 * running tasks: 0 <= efficiency <= 1, no row with nothing in it, no blank key, periods inside
 * the range; and the total's efficiency and tasks_without_request recomputed from the
 * records' own fields. */
static void test_efficiency_property(void **state)
{
	struct fixture *fx = *state;
	static const char *const accounts[] = {"physics", "bio", "", "=cmd", "chem"};
	static const char *const projects[] = {"lattice", "qcd", "", "-2+3"};
	static const char *const bys[] = {"account",
					  "user",
					  "label:project",
					  "job",
					  "node",
					  "account,label:project",
					  "label:project,job,node",
					  "account,user,job,node"};
	static const char *const periods[] = {"day", "week", "month", "all"};
	const size_t n = 1500;
	struct acct_record *recs = calloc(n, sizeof(*recs));
	double cpu_used = 0, cpu_charged = 0, mem_used = 0, mem_charged = 0, no_req = 0, ended = 0;
	char err[256];

	assert_non_null(recs);
	assert_int_equal(price_sheet_parse(SHEET, &fx->ps, err, sizeof(err)), 0);
	srand(7);
	for (size_t i = 0; i < n; i++) {
		struct acct_record *r = &recs[i];
		uint64_t wall = 1 + (uint64_t)(rand() % 200000);
		double cpus = rand() % 3 == 0 ? 0 : (double)(1 + rand() % 16) / 4;
		uint64_t cpu = (uint64_t)((double)wall * (cpus > 0 ? cpus : 1) *
					  (double)(rand() % 300) / 100.0);
		char job[16], node[16];

		fill(r, (int)i, accounts[rand() % 5], rand() % 4 ? "alice" : "",
		     DAY0 - 20 * 86400 + (uint64_t)(rand() % (60 * 86400)), cpus, wall, cpu);
		r->request.memory_bytes = rand() % 3 == 0 ? 0 : (uint64_t)(1 + rand() % 64) << 26;
		r->usage.memory_byte_seconds =
		    (double)((uint64_t)1 << 30) * (double)wall * (double)(rand() % 200) / 100;
		r->request.gpus = rand() % 5 == 0 ? (uint32_t)(1 + rand() % 4) : 0;
		r->usage.gpu_seconds = (double)r->request.gpus * (double)wall * 0.6;
		if (rand() % 4)
			assert_int_equal(
			    acct_task_add_label(&r->task, "project", projects[rand() % 4]), 0);
		snprintf(job, sizeof(job), "job%d", rand() % 20);
		if (rand() % 10 == 0)
			job[0] = 0; /* no job */
		snprintf(node, sizeof(node), "node%d", rand() % 6);
		set_job(r, job, node);
		if (i % 50 == 0) { /* a running task: its latest sample */
			r->type = ACCT_TASK_SAMPLE;
			r->exit.status = ACCT_EXIT_NONE;
			continue;
		}
		/* the truth, from the record's own fields (not coll_record_sums) */
		{
			const double w = (double)wall;
			const double used = (double)cpu;
			const double mu = r->usage.memory_byte_seconds;

			cpu_used += used;
			cpu_charged += MAX(cpus * w, used);
			mem_used += mu;
			mem_charged += MAX((double)r->request.memory_bytes * w, mu);
			no_req += cpus == 0 || r->request.memory_bytes == 0;
			ended++;
		}
	}
	for (size_t i = 0; i < n; i += 500)
		insert(fx, &recs[i], MIN((size_t)500, n - i));

	for (size_t b = 0; b < ARRAY_SIZE(bys); b++)
		for (size_t p = 0; p < ARRAY_SIZE(periods); p++) {
			struct report rep;

			build(fx, bys[b], periods[p], &rep);
			assert_true(rep.n > 0);
			for (size_t i = 0; i <= rep.n; i++) {
				const struct report_row *row =
				    i < rep.n ? &rep.rows[i] : &rep.total;
				const double e[3] = {report_cpu_eff(row), report_mem_eff(row),
						     report_gpu_eff(row)};
				bool something = false;

				for (int k = 0; k < 3; k++)
					if (!(e[k] >= 0 && e[k] <= 1))
						fail_msg("by %s per %s row %zu: efficiency %d = %g",
							 bys[b], periods[p], i, k, e[k]);
				for (int q = 0; q < REPORT_Q_MAX; q++)
					something |= row->q[q] != 0;
				for (int k = 0; k < _REPORT_COST_MAX; k++)
					something |= row->cents[k] != 0;
				assert_true(something);
				assert_true(row->q[COLL_SUM_NO_REQUEST_TASKS] <=
					    row->q[COLL_SUM_TASKS]);
				assert_true(strcmp(row->first_day, "2026-11-01") >= 0);
				assert_true(strcmp(row->last_day, "2027-01-31") <= 0);
				assert_true(strcmp(row->first_day, row->last_day) <= 0);
				for (size_t d = 0; i < rep.n && d < rep.spec.n_dims; d++)
					assert_true(row->key[d][0] != 0);
				if (i == rep.n)
					continue;
				switch (rep.spec.period) {
				case REPORT_PERIOD_DAY:
					assert_string_equal(row->period, row->first_day);
					assert_string_equal(row->period, row->last_day);
					break;
				case REPORT_PERIOD_WEEK:
					assert_int_equal(strlen(row->period), 8);
					assert_int_equal(row->period[4], '-');
					assert_int_equal(row->period[5], 'W');
					break;
				case REPORT_PERIOD_MONTH:
					assert_int_equal(strlen(row->period), 7);
					assert_memory_equal(row->period, row->first_day, 7);
					assert_memory_equal(row->period, row->last_day, 7);
					break;
				case REPORT_PERIOD_ALL:
					assert_string_equal(row->period, "2026-11-01..2027-01-31");
					break;
				}
			}
			/* the running tasks are charged too: compare the ended ones' only */
			if (b == 0 && p == 3) {
				assert_float_equal(rep.total.q[COLL_SUM_TASKS], ended, 1e-9);
				assert_float_equal(rep.total.q[COLL_SUM_NO_REQUEST_TASKS], no_req,
						   1e-9);
			}
			report_free(&rep);
		}
	/* without the running tasks, the total efficiency is the records' exactly */
	{
		struct report rep;
		struct report_spec spec;

		for (size_t i = 0; i < n; i += 50)
			recs[i].type = ACCT_TASK_END, recs[i].exit.status = ACCT_EXIT_EXITED;
		/* their task.end (same usage) replaces each running task */
		for (size_t i = 0; i < n; i += 50) {
			const double w = (double)recs[i].usage.wall_ns / 1e9;
			const double used = (double)recs[i].usage.cpu_user_ns / 1e9;
			const double mu = recs[i].usage.memory_byte_seconds;

			snprintf(recs[i].record_id, sizeof(recs[i].record_id), "end-%08zu", i);
			insert(fx, &recs[i], 1);
			cpu_used += used;
			cpu_charged += MAX(recs[i].request.cpus * w, used);
			mem_used += mu;
			mem_charged += MAX((double)recs[i].request.memory_bytes * w, mu);
			no_req += recs[i].request.cpus == 0 || recs[i].request.memory_bytes == 0;
		}
		assert_int_equal(
		    report_spec_init(&spec, "2026-01-01", "2027-12-31", err, sizeof(err)), 0);
		assert_int_equal(report_build(fx->store, &spec, &fx->ps, &rep), 0);
		assert_float_equal(rep.total.q[REPORT_Q_RUNNING], 0, 1e-9);
		assert_float_equal(rep.total.q[COLL_SUM_NO_REQUEST_TASKS], no_req, 1e-9);
		assert_true(fabs(report_cpu_eff(&rep.total) - cpu_used / cpu_charged) < 1e-9);
		assert_true(fabs(report_mem_eff(&rep.total) - mem_used / mem_charged) < 1e-9);
		assert_true(cpu_used / cpu_charged < 0.99); /* the test's data waste some */
		report_free(&rep);
	}
	for (size_t i = 0; i < n; i++)
		acct_record_clear(&recs[i]);
	free(recs);
}

/* CSV cells a spreadsheet would evaluate are neutralised with a leading quote; the table
 * shows a small quantity as nonzero. */
/* Names as the table and HTML show them: controls, backslash, bytes that are not UTF-8 and
 * the format characters that reorder or hide text escaped; other text kept. */
static void test_shown(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
	    {"plain", "plain"},
	    {"caf\xc3\xa9", "caf\xc3\xa9"},		      /* é kept */
	    {"a\x01\n\\", "a\\x01\\n\\\\"},		      /* controls, backslash */
	    {"x\xe2\x80\xaey", "x\\u202ey"},		      /* RIGHT-TO-LEFT OVERRIDE */
	    {"\xe2\x81\xa6i\xe2\x81\xa9", "\\u2066i\\u2069"}, /* isolates */
	    {"\xef\xbb\xbf\xe2\x80\xa8", "\\ufeff\\u2028"},   /* BOM, line separator */
	    {"\xc2\x85", "\\xc2\\x85"},			      /* C1 NEL */
	    {"\xd8\x9c", "\\u061c"},			      /* ARABIC LETTER MARK: 2 bytes */
	    {"b\xff", "b\\xff"},			      /* not UTF-8 */
	    {"\xe2\x80\xaf", "\xe2\x80\xaf"},		      /* narrow no-break space kept */
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *s = report_shown(cases[i].in);

		assert_non_null(s);
		assert_string_equal(s, cases[i].out);
		free(s);
	}
}

static void test_month_end(void **state)
{
	(void)state;
	assert_true(coll_day_is_month_end("2026-11-30"));
	assert_false(coll_day_is_month_end("2026-11-29"));
	assert_true(coll_day_is_month_end("2026-12-31"));
	assert_true(coll_day_is_month_end("2026-02-28"));
	assert_false(coll_day_is_month_end("2024-02-28"));
	assert_true(coll_day_is_month_end("2024-02-29"));
	assert_true(coll_day_is_month_end("2000-02-29"));
	assert_true(coll_day_is_month_end("2100-02-28"));
	assert_false(coll_day_is_month_end("2026-11"));
	assert_false(coll_day_is_month_end("2026-13-31"));
	assert_false(coll_day_is_month_end(""));
}

static void test_csv_neutralised(void **state)
{
	struct fixture *fx = *state;
	static const char *const evil[] = {
	    "=HYPERLINK(\"http://x\",\"y\")", "+cmd", "-2+3", "@SUM(A1)", "\tx", "\rx"};
	struct acct_record recs[ARRAY_SIZE(evil)];
	_cleanup_free_ char *buf = NULL, *tab = NULL;
	size_t len = 0;
	struct report rep;
	char err[256];
	FILE *f;

	assert_int_equal(price_sheet_parse(SHEET, &fx->ps, err, sizeof(err)), 0);
	for (size_t i = 0; i < ARRAY_SIZE(evil); i++) {
		fill(&recs[i], (int)i, evil[i], "u", DAY0 + 100, 1, 2,
		     1); /* 2 s: 0.000556 core-h */
		assert_int_equal(acct_task_add_label(&recs[i].task, "project", evil[i]), 0);
	}
	insert(fx, recs, ARRAY_SIZE(evil));
	build(fx, "account,label:project", "day", &rep);
	assert_int_equal(rep.n, ARRAY_SIZE(evil));
	f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(report_write(&rep, REPORT_FMT_CSV, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(buf, ",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\","));
	assert_non_null(strstr(buf, ",\"'+cmd\",\"'+cmd\","));
	assert_non_null(strstr(buf, ",\"'-2+3\",\"'-2+3\","));
	assert_non_null(strstr(buf, ",\"'@SUM(A1)\","));
	assert_non_null(strstr(buf, ",\"'\tx\","));
	assert_non_null(strstr(buf, ",\"'\rx\","));
	/* no field (after a separator or a line start, outside quotes) starts a formula */
	for (const char *p = buf; *p; p++)
		if (p == buf || p[-1] == ',' || p[-1] == '\n')
			assert_null(strchr("=+@", *p));
	f = open_memstream(&tab, &len);
	assert_non_null(f);
	assert_int_equal(report_write(&rep, REPORT_FMT_TABLE, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(tab, " 0.00333 ")); /* 6 tasks x 2 s x 1 cpu, total core-h */
	assert_null(strchr(tab, '\r'));		   /* control bytes escaped on a terminal */
	/* no energy in these records: marked, never a bare 0 kWh */
	assert_non_null(strstr(tab, " 0.000000* "));
	assert_non_null(strstr(tab, "(KWH*: 6 task(s) with a part of their energy not measured"));
	report_free(&rep);
	for (size_t i = 0; i < ARRAY_SIZE(evil); i++)
		acct_record_clear(&recs[i]);
}

/* report_num_full: every value reads back as the same double, in %.17g's notation */
static void test_num_full(void **state)
{
	static const double edge[] = {0,
				      1,
				      -1,
				      0.1,
				      0.5,
				      0.25,
				      1e-5,
				      1e-4,
				      0.00055555555555555556,
				      9.9999999999999995e-5,
				      99999999999999999.0,
				      1e16,
				      1e17,
				      1e22,
				      1e23,
				      123456789012345678.0,
				      9007199254740993.0,
				      4.9406564584124654e-324,
				      2.2250738585072014e-308,
				      1.7976931348623157e308,
				      0.30000000000000004,
				      2.0 / 3600,
				      1.0 / 3};
	char buf[40], ref[40];
	uint64_t s = 88172645463325252ULL;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(edge) + 500000; i++) {
		double v;

		if (i < ARRAY_SIZE(edge))
			v = edge[i];
		else {
			/* xorshift: random bit patterns (finite ones), and random decimals */
			s ^= s << 13, s ^= s >> 7, s ^= s << 17;
			if (i % 2) {
				memcpy(&v, &s, sizeof(v));
				if (!isfinite(v))
					continue;
			} else
				v = (double)(s % 1000000007) / pow(10, (double)(s % 23)) *
				    (s % 3 ? 1 : 3600);
		}
		report_num_full(buf, sizeof(buf), v);
		if (strtod(buf, NULL) != v)
			fail_msg("%.17g printed as %s", v, buf);
		/* the notation of %.17g: same exponent style, no trailing zeros */
		snprintf(ref, sizeof(ref), "%.17g", v);
		if ((strchr(buf, 'e') != NULL) != (strchr(ref, 'e') != NULL) &&
		    !(v == trunc(v) && fabs(v) < 9007199254740992.0))
			fail_msg("%.17g: %s vs %s", v, buf, ref);
		if (strchr(buf, '.') && !strchr(buf, 'e') && buf[strlen(buf) - 1] == '0')
			fail_msg("trailing zero: %s", buf);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_prices_ok),
	    cmocka_unit_test(test_prices_errors),
	    cmocka_unit_test(test_apportion),
	    cmocka_unit_test(test_num_full),
	    cmocka_unit_test(test_shown),
	    cmocka_unit_test(test_month_end),
	    cmocka_unit_test(test_spec_errors),
	    cmocka_unit_test_setup_teardown(test_report_exact, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_week_period, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_report_reconciles, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_straddle_and_kills, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_running_tasks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_migrate_v1, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_migrate_v2, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_efficiency_property, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_csv_neutralised, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_energy_example, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_carbon_zones, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_idle_energy, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shared_report, setup, teardown),
	    cmocka_unit_test(test_carbon_series),
	    cmocka_unit_test(test_shared_spread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
