/* SPDX-License-Identifier: MIT */
/*
 * Fuzz the carbon intensity series parser (collector/carbon.c): never crash or read past the
 * input; on success the days are strictly increasing, each intensity within 0..100000 and
 * found again by carbon_days_get; on failure the message names the file and a line.
 */
#include "collector/carbon.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct carbon_days c;
	char err[256] = "";
	int r = carbon_series_parse((const char *)data, size, "f.csv", &c, err, sizeof(err));

	if (r != 0) {
		if (r != -EINVAL || strncmp(err, "f.csv:", 6) != 0)
			abort();
		return 0;
	}
	if (c.n == 0 || c.n > CARBON_DAYS_MAX)
		abort();
	for (size_t i = 0; i < c.n; i++) {
		char day[16];
		time_t t = (time_t)c.day[i] * 86400;
		struct tm tm;
		double g;

		if ((i && c.day[i] <= c.day[i - 1]) || !isfinite(c.g_per_kwh[i]) ||
		    c.g_per_kwh[i] < 0 || c.g_per_kwh[i] > 100000)
			abort();
		gmtime_r(&t, &tm);
		strftime(day, sizeof(day), "%Y-%m-%d", &tm);
		if (carbon_days_get(&c, day, &g) != 0 || g != c.g_per_kwh[i])
			abort();
	}
	return 0;
}
