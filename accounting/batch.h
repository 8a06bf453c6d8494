/* SPDX-License-Identifier: MIT */
/*
 * NDJSON batch parser: one schema v1 record per line (see accounting/record.h).
 * Used by corral-collector for `POST /v1/records` bodies and by tests.
 */
#pragma once

#include <stddef.h>

#include "accounting/record.h"

/*
 * Called once per line, in order. index is the 0-based line number (the "i" of the
 * collector's per-record results). On success r is the decoded record and error is NULL;
 * on a bad line r is NULL and error says why ("usage.cpu_user_ns: expected a non-negative
 * integer", "line exceeds 262144 bytes", "empty line").
 * r is owned by the parser and cleared after the callback returns; to keep it, move its
 * contents out (struct copy, then memset(r, 0, sizeof(*r))). Return <0 to stop parsing.
 */
typedef int (*acct_batch_fn)(size_t index, struct acct_record *r, const char *error,
			     void *userdata);

/*
 * Parse buf[0..len) as NDJSON. Lines end with "\n" or "\r\n"; one trailing line ending is
 * optional. A line longer than ACCT_RECORD_MAX_BYTES is reported as an error line (not
 * decoded). If the batch holds more than max_records lines, returns -E2BIG before calling
 * fn at all. Returns the number of lines (>= 0), or the callback's negative return value,
 * or -ENOMEM.
 */
int acct_batch_parse(const char *buf, size_t len, size_t max_records, acct_batch_fn fn,
		     void *userdata);
/* The same, the records' strings taken from arena where the fast path decodes them
 * (acct_record_decode_in): the arena must outlive the records fn keeps. */
int acct_batch_parse_in(const char *buf, size_t len, size_t max_records, acct_batch_fn fn,
			void *userdata, struct acct_arena *arena);

/* Number of lines acct_batch_parse would report (same line rules). */
size_t acct_batch_count_lines(const char *buf, size_t len);
