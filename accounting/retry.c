/* SPDX-License-Identifier: MIT */
#include "accounting/retry.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/macro.h"
#include "common/parse.h"

struct acct_retry acct_retry_delay(unsigned attempt, uint64_t min_ms, uint64_t max_ms,
				   uint64_t retry_after_ms, uint64_t rnd)
{
	struct acct_retry r = {.ceiling_ms = min_ms ?: 1};

	if (max_ms < r.ceiling_ms)
		max_ms = r.ceiling_ms;
	if (retry_after_ms)
		r.ceiling_ms = retry_after_ms = MIN(retry_after_ms, max_ms);
	for (unsigned i = 0; i < attempt && r.ceiling_ms < max_ms; i++)
		r.ceiling_ms *= 2;
	r.ceiling_ms = MIN(r.ceiling_ms, max_ms);
	r.delay_ms = retry_after_ms + rnd % (r.ceiling_ms + 1);
	return r;
}

int acct_retry_after_parse(const char *value, int64_t now, uint64_t *ret_s)
{
	struct tm tm = {0};
	const char *end;
	uint64_t v;
	time_t t;

	if (!value)
		return -EINVAL;
	while (*value == ' ' || *value == '\t')
		value++;
	if (*value >= '0' && *value <= '9') {
		char buf[24];
		size_t n = strcspn(value, " \t\r\n");

		if (n >= sizeof(buf))
			return -EINVAL;
		memcpy(buf, value, n);
		buf[n] = 0;
		if (parse_u64(buf, &v) < 0)
			return -EINVAL;
		*ret_s = v;
		return 0;
	}
	/* IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT" (the only date form senders may use) */
	end = strptime(value, "%a, %d %b %Y %H:%M:%S GMT", &tm);
	if (!end)
		return -EINVAL;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	*ret_s = (int64_t)t > now ? (uint64_t)((int64_t)t - now) : 0;
	return 0;
}
