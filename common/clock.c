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

/* v's last n decimal digits at p (v < 10^n) */
static char *put_digits(char *p, unsigned v, int n)
{
	for (int i = n - 1; i >= 0; i--, v /= 10)
		p[i] = (char)('0' + v % 10);
	return p + n;
}

/* What snprintf("%04d-%02d-%02dT%02d:%02d:%02d.%06uZ") wrote, digit by digit: the format call
 * was most of the instructions of each record a collector stores (every record has a time). */
void format_rfc3339_us(uint64_t realtime_ns, char *buf, size_t len)
{
	time_t sec = (time_t)(realtime_ns / NSEC_PER_SEC);
	unsigned usec = (unsigned)((realtime_ns % NSEC_PER_SEC) / 1000);
	char out[sizeof("YYYY-MM-DDTHH:MM:SS.uuuuuuZ")], *p = out;
	struct tm tm;
	size_t n;

	if (len == 0)
		return;
	gmtime_r(&sec, &tm); /* years 1970..2554: four digits */
	p = put_digits(p, (unsigned)tm.tm_year + 1900, 4);
	*p++ = '-';
	p = put_digits(p, (unsigned)tm.tm_mon + 1, 2);
	*p++ = '-';
	p = put_digits(p, (unsigned)tm.tm_mday, 2);
	*p++ = 'T';
	p = put_digits(p, (unsigned)tm.tm_hour, 2);
	*p++ = ':';
	p = put_digits(p, (unsigned)tm.tm_min, 2);
	*p++ = ':';
	p = put_digits(p, (unsigned)tm.tm_sec, 2);
	*p++ = '.';
	p = put_digits(p, usec, 6);
	*p++ = 'Z';
	n = MIN((size_t)(p - out), len - 1);
	memcpy(buf, out, n);
	buf[n] = 0;
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
