/* SPDX-License-Identifier: MIT */
/* NDJSON batch parser (see batch.h). */
#include "accounting/batch.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/macro.h"

/* Next line of buf[pos..len): sets *line_len (without "\r\n"/"\n"), returns next pos. */
static size_t next_line(const char *buf, size_t len, size_t pos, size_t *line_len)
{
	const char *nl = memchr(buf + pos, '\n', len - pos);
	size_t end = nl ? (size_t)(nl - buf) : len;
	size_t n = end - pos;

	if (n > 0 && buf[end - 1] == '\r')
		n--;
	*line_len = n;
	return nl ? end + 1 : len;
}

size_t acct_batch_count_lines(const char *buf, size_t len)
{
	size_t pos = 0, n = 0, l;

	while (pos < len) {
		pos = next_line(buf, len, pos, &l);
		n++;
	}
	return n;
}

int acct_batch_parse(const char *buf, size_t len, size_t max_records, acct_batch_fn fn,
		     void *userdata)
{
	return acct_batch_parse_in(buf, len, max_records, fn, userdata, NULL);
}

int acct_batch_parse_in(const char *buf, size_t len, size_t max_records, acct_batch_fn fn,
			void *userdata, struct acct_arena *arena)
{
	size_t pos = 0, index = 0, l;
	char err[256];

	if (len > 0 && !buf)
		return -EINVAL;
	if (acct_batch_count_lines(buf, len) > max_records)
		return -E2BIG;

	while (pos < len) {
		const char *line = buf + pos;
		struct acct_record rec = {0};
		int r;

		pos = next_line(buf, len, pos, &l);
		if (l == 0) {
			r = fn(index, NULL, "empty line", userdata);
		} else if (l > ACCT_RECORD_MAX_BYTES) {
			snprintf(err, sizeof(err), "line exceeds %d bytes", ACCT_RECORD_MAX_BYTES);
			r = fn(index, NULL, err, userdata);
		} else {
			r = acct_record_decode_in(line, l, &rec, err, sizeof(err), arena);
			if (r == -ENOMEM)
				return r;
			if (r < 0)
				r = fn(index, NULL, err[0] ? err : "invalid record", userdata);
			else
				r = fn(index, &rec, NULL, userdata);
			acct_record_clear(&rec);
		}
		if (r < 0)
			return r;
		index++;
	}
	return (int)MIN(index, (size_t)INT32_MAX);
}
