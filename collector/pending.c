/* SPDX-License-Identifier: MIT */
/* The compact form of queued rollup deltas (see pending.h). */
#include "collector/pending.h"
#include "common/macro.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* 2^53: every whole double below it in magnitude is an int64 exactly */
#define WHOLE_MAX 9007199254740992.0

struct out {
	unsigned char *p;
	size_t len, cap;
};

static int reserve(struct out *o, size_t n)
{
	unsigned char *p;
	size_t cap;

	if (o->cap - o->len >= n)
		return 0;
	cap = MAX(o->cap * 2, o->len + n + 4096);
	p = realloc(o->p, cap);
	if (!p)
		return -ENOMEM;
	o->p = p;
	o->cap = cap;
	return 0;
}

static void put_varint(struct out *o, uint64_t v)
{
	while (v >= 0x80) {
		o->p[o->len++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	o->p[o->len++] = (unsigned char)v;
}

static bool is_whole(double v)
{
	return fabs(v) < WHOLE_MAX && v == (double)(int64_t)v;
}

int coll_pending_encode(const struct coll_delta *d, size_t nd, unsigned char **ret, size_t *len)
{
	struct out o = {0};
	int r = 0;

	for (size_t i = 0; i < nd && r == 0; i++) {
		const struct coll_rollup_def *def = coll_rollup_def(d[i].table);
		size_t bl = strlen(d[i].bucket), need = 2 + bl + 2 * 10 + _COLL_SUM_MAX * 10;
		uint32_t present = 0, whole = 0;

		if (d[i].table >= COLL_ROLLUP_OPEN || !def || bl >= sizeof(d[i].bucket)) {
			r = -EINVAL;
			break;
		}
		for (size_t k = 0; k < def->n_keys; k++)
			need += 10 + strlen(coll_delta_key(&d[i], def->keys[k]) ?: "");
		r = reserve(&o, need);
		if (r < 0)
			break;
		o.p[o.len++] = (unsigned char)d[i].table;
		o.p[o.len++] = (unsigned char)bl;
		memcpy(o.p + o.len, d[i].bucket, bl);
		o.len += bl;
		for (size_t k = 0; k < def->n_keys; k++) {
			const char *v = coll_delta_key(&d[i], def->keys[k]) ?: "";
			size_t vl = strlen(v);

			put_varint(&o, vl);
			memcpy(o.p + o.len, v, vl);
			o.len += vl;
		}
		for (int s = 0; s < _COLL_SUM_MAX; s++)
			if (d[i].v[s] != 0 || isnan(d[i].v[s])) {
				present |= 1u << s;
				if (is_whole(d[i].v[s]))
					whole |= 1u << s;
			}
		put_varint(&o, present);
		put_varint(&o, whole);
		for (int s = 0; s < _COLL_SUM_MAX; s++) {
			if (!(present & 1u << s))
				continue;
			if (whole & 1u << s) {
				int64_t w = (int64_t)d[i].v[s];

				put_varint(&o, ((uint64_t)w << 1) ^ (uint64_t)(w >> 63));
			} else {
				uint64_t bits;

				memcpy(&bits, &d[i].v[s], sizeof(bits));
				for (int b = 0; b < 8; b++)
					o.p[o.len++] = (unsigned char)(bits >> (8 * b));
			}
		}
	}
	if (r < 0) {
		free(o.p);
		return r;
	}
	*ret = o.p;
	*len = o.len;
	return 0;
}

struct in {
	const unsigned char *p;
	size_t len, o;
};

static int get_varint(struct in *in, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		unsigned char c;

		if (in->o >= in->len)
			return -EBADMSG;
		c = in->p[in->o++];
		*v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return 0;
	}
	return -EBADMSG;
}

/* The next n bytes as a string (with its NUL) to dst: -EBADMSG if short or holding a NUL. */
static int get_text(struct in *in, size_t n, char *dst)
{
	if (n > in->len - in->o || memchr(in->p + in->o, 0, n))
		return -EBADMSG;
	memcpy(dst, in->p + in->o, n);
	dst[n] = 0;
	in->o += n;
	return 0;
}

int coll_pending_decode(const unsigned char *p, size_t len, struct coll_delta *d, size_t *nd,
			char **arena)
{
	struct in in = {.p = p, .len = len};

	while (in.o < len) {
		struct coll_delta x = {0};
		const struct coll_rollup_def *def;
		uint64_t present, whole, n;

		if (len - in.o < 2 || p[in.o] >= COLL_ROLLUP_OPEN)
			return -EBADMSG;
		x.table = (enum coll_rollup_table)p[in.o++];
		def = coll_rollup_def(x.table);
		n = p[in.o++];
		if (n >= sizeof(x.bucket) || get_text(&in, n, x.bucket) < 0)
			return -EBADMSG;
		for (int k = 0; k < _COLL_KEY_MAX; k++)
			coll_delta_set_key(&x, k, "");
		for (size_t k = 0; k < def->n_keys; k++) {
			if (get_varint(&in, &n) < 0 || get_text(&in, n, *arena) < 0)
				return -EBADMSG;
			coll_delta_set_key(&x, def->keys[k], *arena);
			*arena += n + 1;
		}
		if (get_varint(&in, &present) < 0 || get_varint(&in, &whole) < 0 ||
		    present >> _COLL_SUM_MAX || (whole & ~present))
			return -EBADMSG;
		for (int s = 0; s < _COLL_SUM_MAX; s++) {
			if (!(present & 1u << s))
				continue;
			if (whole & 1u << s) {
				if (get_varint(&in, &n) < 0)
					return -EBADMSG;
				x.v[s] = (double)(int64_t)((n >> 1) ^ (~(n & 1) + 1));
			} else {
				uint64_t bits = 0;

				if (len - in.o < 8)
					return -EBADMSG;
				for (int b = 0; b < 8; b++)
					bits |= (uint64_t)p[in.o++] << (8 * b);
				memcpy(&x.v[s], &bits, sizeof(double));
			}
		}
		d[(*nd)++] = x;
	}
	return 0;
}

int coll_pending_reserve(struct coll_pending_set *s, size_t len)
{
	const size_t need = s->n + len / COLL_PENDING_ROW_MIN + 1;
	struct coll_delta *d;
	size_t cap;

	if (need <= s->cap)
		return 0;
	cap = MAX(need, 2 * s->cap);
	if (cap > SIZE_MAX / sizeof(*d))
		return -ENOMEM;
	d = realloc(s->d, cap * sizeof(*d));
	if (!d)
		return -ENOMEM;
	s->d = d;
	s->cap = cap;
	return 0;
}

/* below this many deltas a fold merges once, at its end */
#define SETTLE_MIN 65536

void coll_pending_settle(struct coll_pending_set *s)
{
	if (s->n < SETTLE_MIN || s->n < 2 * s->merged)
		return;
	s->n = s->merged = coll_deltas_merge(s->d, s->n);
}
