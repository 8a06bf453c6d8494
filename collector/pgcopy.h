/* SPDX-License-Identifier: MIT */
/*
 * Writer of PostgreSQL's binary COPY format (COPY ... FROM STDIN WITH (FORMAT binary)): a
 * header, then per row a field count and per field a length and the value in the type's
 * binary "recv" form, then a trailer. Values go in as they are: no escaping or number
 * formatting here, and no text parsing on the server.
 *
 * Errors (no memory) are sticky: every call after one does nothing, pgcopy_end() returns
 * -ENOMEM. Texts must be valid in the server's encoding (UTF-8) and without NUL; records
 * reach the store already checked for both.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/growbuf.h"

struct pgcopy {
	struct growbuf b;
};

#define PGCOPY_HEADER_LEN  19 /* signature, flags, header extension length */
#define PGCOPY_TRAILER_LEN 2  /* field count -1 */

void pgcopy_begin(struct pgcopy *c);		     /* c needs no initialisation */
void pgcopy_row(struct pgcopy *c, unsigned nfields); /* before a row's fields */
void pgcopy_null(struct pgcopy *c);
void pgcopy_text(struct pgcopy *c, const char *s, size_t len); /* TEXT, JSON */
void pgcopy_jsonb(struct pgcopy *c, const char *s, size_t len);
void pgcopy_int4(struct pgcopy *c, int32_t v);
void pgcopy_int8(struct pgcopy *c, int64_t v);
void pgcopy_float8(struct pgcopy *c, double v);
/* TIMESTAMPTZ from nanoseconds since 1970 (microseconds since 2000 on the wire, truncated as
 * format_rfc3339_us() truncates). */
void pgcopy_timestamptz_ns(struct pgcopy *c, uint64_t realtime_ns);
/* Adds the trailer. 0 with *ret and *ret_len the data (the caller frees *ret), or -ENOMEM. */
int pgcopy_end(struct pgcopy *c, char **ret, size_t *ret_len);
void pgcopy_free(struct pgcopy *c);
