/* SPDX-License-Identifier: MIT */
/*
 * Carbon intensity for the reports (collector/carbon.c, docs/reports.md "Carbon"): a constant,
 * or a time series file of hourly gCO2e/kWh, one line per UTC hour:
 *     # comment
 *     2026-12-01T00,312.5
 *     2026-12-01T01,298
 * Hours strictly increasing; values finite, >= 0 and <= 100000. Kept per UTC day as the mean
 * of that day's hours in the file (the reports work in days). Library code: nothing printed.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define CARBON_DAYS_MAX 1830 /* five years of days */

struct carbon_days {
	size_t n;
	int32_t day[CARBON_DAYS_MAX]; /* days since 1970-01-01, increasing */
	double g_per_kwh[CARBON_DAYS_MAX];
};

/* Parse a series; -EINVAL with "NAME:LINE: ..." in err (name: the file's, for messages). */
int carbon_series_parse(const char *text, size_t len, const char *name, struct carbon_days *ret,
			char *err, size_t errlen);
/* Read and parse a file (at most 16 MiB); -errno or -EINVAL, message in err. */
int carbon_series_load(const char *path, struct carbon_days *ret, char *err, size_t errlen);
/* The intensity of a UTC day "YYYY-MM-DD": 0, or -ENOENT when the series has no hour of it. */
int carbon_days_get(const struct carbon_days *c, const char *day, double *ret);
