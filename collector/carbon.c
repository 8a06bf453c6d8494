/* SPDX-License-Identifier: MIT */
/* Carbon intensity series (see collector/carbon.h). */
#include "collector/carbon.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/macro.h"
#include "common/fileio.h"

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static int32_t days_from_civil(int y, unsigned m, unsigned d)
{
	y -= m <= 2;
	const int era = (y >= 0 ? y : y - 399) / 400;
	const unsigned yoe = (unsigned)(y - era * 400);
	const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + (int32_t)doe - 719468;
}

static bool digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* "YYYY-MM-DD" (len 10) into days; false when not a valid date in 1970..2500. */
static bool parse_day(const char *s, int32_t *ret)
{
	static const unsigned mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int y;
	unsigned m, d;

	if (!digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2))
		return false;
	y = atoi(s);
	m = (unsigned)((s[5] - '0') * 10 + (s[6] - '0'));
	d = (unsigned)((s[8] - '0') * 10 + (s[9] - '0'));
	if (y < 1970 || y > 2500 || m < 1 || m > 12 || d < 1 || d > mdays[m - 1])
		return false;
	if (m == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
		return false;
	*ret = days_from_civil(y, m, d);
	return true;
}

/* One line "YYYY-MM-DDTHH,VALUE" (spaces around the comma allowed). */
static int parse_line(const char *s, int64_t *ret_hour, double *ret_g, const char **why)
{
	int32_t day;
	unsigned h;
	const char *v;
	char *end;
	double g;

	if (strlen(s) < 14 || !parse_day(s, &day) || s[10] != 'T' || !digits(s + 11, 2)) {
		*why = "expected YYYY-MM-DDTHH,gCO2e/kWh (a UTC hour)";
		return -EINVAL;
	}
	h = (unsigned)((s[11] - '0') * 10 + (s[12] - '0'));
	if (h > 23) {
		*why = "hour out of range (00..23)";
		return -EINVAL;
	}
	v = s + 13;
	while (*v == ' ' || *v == '\t')
		v++;
	if (*v != ',') {
		*why = "expected a comma after the hour";
		return -EINVAL;
	}
	v++;
	while (*v == ' ' || *v == '\t')
		v++;
	errno = 0;
	g = strtod(v, &end);
	while (end && (*end == ' ' || *end == '\t' || *end == '\r'))
		end++;
	if (end == v || errno || *end || !isfinite(g) || g < 0 || g > 100000) {
		*why = "expected a number of gCO2e/kWh, 0..100000";
		return -EINVAL;
	}
	*ret_hour = (int64_t)day * 24 + h;
	*ret_g = g;
	return 0;
}

int carbon_series_parse(const char *text, size_t len, const char *name, struct carbon_days *ret,
			char *err, size_t errlen)
{
	int64_t last = -1;
	double sum = 0;
	unsigned hours = 0;
	size_t lineno = 0;
	char line[256];

	ret->n = 0;
	for (size_t off = 0; off < len;) {
		const char *nl = memchr(text + off, '\n', len - off);
		size_t l = nl ? (size_t)(nl - (text + off)) : len - off;
		const char *why = NULL, *s;
		int64_t hour;
		int32_t day;
		double g;

		lineno++;
		if (l >= sizeof(line))
			return err_set(err, errlen, -EINVAL, "%s:%zu: line longer than %zu bytes",
				       name, lineno, sizeof(line) - 1);
		memcpy(line, text + off, l);
		line[l] = 0;
		off += l + (nl ? 1 : 0);
		if (memchr(line, 0, l))
			return err_set(err, errlen, -EINVAL, "%s:%zu: contains a NUL byte", name,
				       lineno);
		for (s = line; *s == ' ' || *s == '\t'; s++)
			;
		if (*s == 0 || *s == '#' || *s == '\r')
			continue;
		if (parse_line(s, &hour, &g, &why) < 0)
			return err_set(err, errlen, -EINVAL, "%s:%zu: %s", name, lineno, why);
		if (hour <= last)
			return err_set(err, errlen, -EINVAL,
				       "%s:%zu: hours must be strictly increasing", name, lineno);
		day = (int32_t)(hour / 24);
		if (last >= 0 && day != (int32_t)(last / 24)) {
			ret->g_per_kwh[ret->n - 1] = sum / hours;
			sum = 0;
			hours = 0;
		}
		if (hours == 0) {
			if (ret->n == CARBON_DAYS_MAX)
				return err_set(err, errlen, -EINVAL, "%s:%zu: more than %d days",
					       name, lineno, CARBON_DAYS_MAX);
			ret->day[ret->n++] = day;
		}
		sum += g;
		hours++;
		last = hour;
	}
	if (hours)
		ret->g_per_kwh[ret->n - 1] = sum / hours;
	if (ret->n == 0)
		return err_set(err, errlen, -EINVAL, "%s: no hour in the file", name);
	return 0;
}

int carbon_series_load(const char *path, struct carbon_days *ret, char *err, size_t errlen)
{
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = read_regular_file(path, 16 << 20, &buf, &len);

	if (r < 0)
		return err_set(err, errlen, r, "%s: %s", path, regular_file_strerror(r));
	return carbon_series_parse(buf, len, path, ret, err, errlen);
}

int carbon_days_get(const struct carbon_days *c, const char *day, double *ret)
{
	size_t lo = 0, hi = c->n;
	int32_t d;

	if (strlen(day) != 10 || !parse_day(day, &d))
		return -EINVAL;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (c->day[mid] < d)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == c->n || c->day[lo] != d)
		return -ENOENT;
	*ret = c->g_per_kwh[lo];
	return 0;
}
