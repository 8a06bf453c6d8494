/* SPDX-License-Identifier: MIT */
#include "collector/pgcopy.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PG_EPOCH_US 946684800000000LL /* 2000-01-01 in microseconds since 1970 */

/* n more bytes: taken in place while the buffer has room (every field of a batch but a few,
 * without a call), else through growbuf_room, which grows it */
static inline char *room(struct pgcopy *c, size_t n)
{
	struct growbuf *b = &c->b;

	if (!b->failed && b->cap - b->len >= n) {
		b->len += n;
		return b->p + b->len - n;
	}
	return growbuf_room(b, n, SIZE_MAX);
}

/* big-endian stores of 2, 4 and 8 bytes */
static inline void be16(char *p, uint16_t v)
{
	v = htobe16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void be32(char *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void be64(char *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

/* A field of pre[0..npre) then data[0..len): its length, then the bytes. */
static void field(struct pgcopy *c, const char *pre, size_t npre, const void *data, size_t len)
{
	char *p;

	if (len > INT32_MAX - npre) {
		c->b.failed = true;
		return;
	}
	p = room(c, 4 + npre + len);
	if (!p)
		return;
	be32(p, (uint32_t)(npre + len));
	if (npre)
		memcpy(p + 4, pre, npre);
	if (len)
		memcpy(p + 4 + npre, data, len);
}

void pgcopy_begin(struct pgcopy *c)
{
	static const char header[19] = "PGCOPY\n\377\r\n\0" /* + flags, extension length: 0 */;
	char *p;

	*c = (struct pgcopy){0};
	p = room(c, sizeof(header));
	if (p)
		memcpy(p, header, sizeof(header));
}

void pgcopy_row(struct pgcopy *c, unsigned nfields)
{
	char *p = room(c, 2);

	if (p)
		be16(p, (uint16_t)nfields);
}

void pgcopy_null(struct pgcopy *c)
{
	char *p = room(c, 4);

	if (p)
		memset(p, 0xff, 4); /* length -1 */
}

void pgcopy_text(struct pgcopy *c, const char *s, size_t len)
{
	field(c, NULL, 0, s, len);
}

void pgcopy_jsonb(struct pgcopy *c, const char *s, size_t len)
{
	field(c, "\1", 1, s, len); /* jsonb binary format version 1, then the text */
}

void pgcopy_int4(struct pgcopy *c, int32_t v)
{
	char *p = room(c, 4 + 4);

	if (!p)
		return;
	be32(p, 4);
	be32(p + 4, (uint32_t)v);
}

void pgcopy_int8(struct pgcopy *c, int64_t v)
{
	char *p = room(c, 4 + 8);

	if (!p)
		return;
	be32(p, 8);
	be64(p + 4, (uint64_t)v);
}

void pgcopy_float8(struct pgcopy *c, double v)
{
	uint64_t bits;

	memcpy(&bits, &v, sizeof(bits));
	pgcopy_int8(c, (int64_t)bits);
}

void pgcopy_timestamptz_ns(struct pgcopy *c, uint64_t realtime_ns)
{
	pgcopy_int8(c, (int64_t)(realtime_ns / 1000) - PG_EPOCH_US);
}

int pgcopy_end(struct pgcopy *c, char **ret, size_t *ret_len)
{
	char *p = room(c, 2);

	if (!p) {
		pgcopy_free(c);
		return -ENOMEM;
	}
	memset(p, 0xff, 2); /* field count -1 */
	*ret = c->b.p;
	*ret_len = c->b.len;
	c->b = (struct growbuf){0};
	return 0;
}

void pgcopy_free(struct pgcopy *c)
{
	free(c->b.p);
	c->b = (struct growbuf){0};
}
