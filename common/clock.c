/* SPDX-License-Identifier: MIT */
#include "common/clock.h"
#include "common/macro.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t now_ns(int clockid)
{
	struct timespec ts;

	clock_gettime(clockid, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

void format_rfc3339_us(uint64_t realtime_ns, char *buf, size_t len)
{
	time_t sec = (time_t)(realtime_ns / NSEC_PER_SEC);
	unsigned usec = (unsigned)((realtime_ns % NSEC_PER_SEC) / 1000);
	struct tm tm;

	gmtime_r(&sec, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06uZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, usec);
}

int parse_rfc3339(const char *s, uint64_t *ret_realtime_ns)
{
	struct tm tm = {0};
	const char *p;
	uint64_t frac_ns = 0;
	time_t t;

	if (!s)
		return -EINVAL;
	p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -EINVAL;
	if (*p == '.') {
		uint64_t scale = 100000000ULL;

		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		while (isdigit((unsigned char)*p)) {
			frac_ns += (uint64_t)(*p - '0') * scale;
			scale /= 10;
			p++;
		}
	}
	if (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0)
		return -EINVAL;
	if (tm.tm_year < 70)
		return -ERANGE;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	*ret_realtime_ns = (uint64_t)t * NSEC_PER_SEC + frac_ns;
	return 0;
}
