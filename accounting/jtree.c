/* SPDX-License-Identifier: MIT */
/* JSON tree from yajl events, arena allocated (see jtree.h). */
#include "accounting/jtree.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "common/error.h"
#include "common/macro.h"

struct jarena_chunk {
	struct jarena_chunk *next;
	size_t size, used;
	char data[] __attribute__((aligned(16)));
};

#define CHUNK_MIN (32 * 1024)

static void *arena_alloc(struct jtree *t, size_t n)
{
	struct jarena_chunk *c;

	n = (n + 15) & ~(size_t)15;
	if (!t->chunks && t->used + n <= sizeof(t->inline_buf)) {
		void *p = t->inline_buf + t->used;

		t->used += n;
		return p;
	}
	c = t->chunks;
	if (!c || c->used + n > c->size) {
		size_t size = MAX((size_t)CHUNK_MIN, n);

		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->size = size;
		c->used = 0;
		c->next = t->chunks;
		t->chunks = c;
	}
	c->used += n;
	return c->data + c->used - n;
}

struct pctx {
	struct jtree *t;
	struct jnode *stack[JTREE_MAX_DEPTH];
	int depth;
	const char *key; /* pending member name of the innermost object */
	uint32_t key_hash;
	char msg[96]; /* our reason when a callback cancels the parse */
	bool nomem;
};

static int cancel(struct pctx *p, const char *msg)
{
	snprintf(p->msg, sizeof(p->msg), "%s", msg);
	return 0;
}

/*
 * Strict UTF-8 (RFC 3629) without NUL: no overlong forms, no surrogates, nothing above
 * U+10FFFF, no zero byte (a C string would end there). The
 * parser's own check lets some of those through (an overlong "\xc0\xa0" in a key), and the JSON
 * encoder refuses them later: a record that decodes must encode.
 */
static bool utf8_valid(const unsigned char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned c = s[i];
		size_t n;
		uint32_t cp;
		uint64_t w;

		if (c < 0x80) {
			/* ASCII runs 8 bytes at a time (most strings are all ASCII), a word with a
			 * NUL byte left to the byte loop */
			while (len - i >= 8 &&
			       (memcpy(&w, s + i, 8), (w & 0x8080808080808080ULL) == 0 &&
							  ((w - 0x0101010101010101ULL) & ~w &
							   0x8080808080808080ULL) == 0))
				i += 8;
			while (i < len && s[i] < 0x80) {
				if (!s[i])
					return false;
				i++;
			}
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			cp = c & 0x07;
		} else {
			return false; /* a continuation byte, 0xc0/0xc1 (overlong), or past 0xf4 */
		}
		if (len - i <= n)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

static char *copy_str(struct pctx *p, const unsigned char *s, size_t len)
{
	char *d;

	if (!utf8_valid(s, len)) {
		cancel(p, memchr(s, 0, len) ? "NUL byte in string"
					    : "invalid UTF-8 in a string or key");
		return NULL;
	}
	d = arena_alloc(p->t, len + 1);
	if (!d) {
		p->nomem = true;
		cancel(p, "out of memory");
		return NULL;
	}
	memcpy(d, s, len);
	d[len] = 0;
	return d;
}

/* New value in the current container (or the root); NULL when the parse must stop. */
static struct jnode *add(struct pctx *p, enum jtype type)
{
	struct jnode *n, *parent = p->depth ? p->stack[p->depth - 1] : NULL;

	if (!parent && p->t->root) {
		cancel(p, "more than one value");
		return NULL;
	}
	n = arena_alloc(p->t, sizeof(*n));
	if (!n) {
		p->nomem = true;
		cancel(p, "out of memory");
		return NULL;
	}
	memset(n, 0, sizeof(*n));
	n->type = type;
	if (!parent) {
		p->t->root = n;
		return n;
	}
	if (parent->type == JT_OBJECT) {
		n->key = p->key;
		n->key_hash = p->key_hash;
		p->key = NULL;
	}
	if (parent->kids.last)
		parent->kids.last->next = n;
	else
		parent->kids.first = n;
	parent->kids.last = n;
	parent->kids.n++;
	return n;
}

static int on_null(void *ud)
{
	return add(ud, JT_NULL) != NULL;
}

static int on_bool(void *ud, int b)
{
	return add(ud, b ? JT_TRUE : JT_FALSE) != NULL;
}

static int on_number(void *ud, const char *s, size_t len)
{
	struct pctx *p = ud;
	char buf[64];
	struct jnode *n;
	char *end;
	bool real = false;

	for (size_t i = 0; i < len && !real; i++) /* one pass instead of three memchr */
		real = s[i] == '.' || s[i] == 'e' || s[i] == 'E';
	/* an integer of up to 18 digits cannot overflow: summed here (the parser passed it as
	 * JSON's -?digits) instead of by strtoll */
	if (!real && len > 0 && len <= 18) {
		bool neg = s[0] == '-';
		int64_t v = 0;

		for (size_t i = neg; i < len; i++)
			v = v * 10 + (s[i] - '0');
		n = add(p, JT_INT);
		if (!n)
			return 0;
		n->i = neg ? -v : v;
		return 1;
	}
	if (len >= sizeof(buf))
		return cancel(p, real ? "real number too long" : "too big integer");
	memcpy(buf, s, len);
	buf[len] = 0;
	n = add(p, real ? JT_REAL : JT_INT);
	if (!n)
		return 0;
	errno = 0;
	if (real) {
		n->d = strtod(buf, &end);
		if (*end || !isfinite(n->d))
			return cancel(p, "real number overflow");
	} else {
		n->i = strtoll(buf, &end, 10);
		if (*end || errno == ERANGE)
			return cancel(p, buf[0] == '-' ? "too big negative integer"
						       : "too big integer");
	}
	return 1;
}

static int on_string(void *ud, const unsigned char *s, size_t len)
{
	struct pctx *p = ud;
	char *d = copy_str(p, s, len);
	struct jnode *n;

	if (!d || !(n = add(p, JT_STRING)))
		return 0;
	n->str.s = d;
	n->str.len = len;
	return 1;
}

static int on_key(void *ud, const unsigned char *s, size_t len)
{
	struct pctx *p = ud;
	const struct jnode *o = p->stack[p->depth - 1];
	char *d = copy_str(p, s, len);
	const uint32_t h = jtree_key_hash((const char *)s, len);

	if (!d)
		return 0;
	for (const struct jnode *k = o->kids.first; k; k = k->next)
		if (k->key_hash == h && strcmp(k->key, d) == 0)
			return cancel(p, "duplicate object key");
	p->key = d;
	p->key_hash = h;
	return 1;
}

static int open_container(struct pctx *p, enum jtype type)
{
	struct jnode *n;

	if (p->depth >= JTREE_MAX_DEPTH)
		return cancel(p, "nesting too deep");
	n = add(p, type);
	if (!n)
		return 0;
	p->stack[p->depth++] = n;
	return 1;
}

static int on_start_map(void *ud)
{
	return open_container(ud, JT_OBJECT);
}

static int on_start_array(void *ud)
{
	return open_container(ud, JT_ARRAY);
}

static int on_end(void *ud)
{
	struct pctx *p = ud;

	p->depth--;
	return 1;
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_bool,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

int jtree_parse(struct jtree *t, const char *buf, size_t len, char *err, size_t errlen)
{
	struct pctx pc = {.t = t}, *p = &pc;
	yajl_handle h;
	yajl_status st;
	int r = 0;

	t->root = NULL;
	t->chunks = NULL;
	t->used = 0;
	h = yajl_alloc(&callbacks, NULL, p);
	if (!h)
		return -ENOMEM;
	st = yajl_parse(h, (const unsigned char *)buf, len);
	if (st == yajl_status_ok)
		st = yajl_complete_parse(h);
	if (st != yajl_status_ok) {
		size_t at = yajl_get_bytes_consumed(h);

		if (p->nomem) {
			r = -ENOMEM;
		} else if (st == yajl_status_client_canceled) {
			r = err_set(err, errlen, -EINVAL, "at byte %zu: %s", at, p->msg);
		} else {
			unsigned char *m = yajl_get_error(h, 0, NULL, 0);
			const char *s = m ? (const char *)m : "syntax error";

			/* yajl's text is "parse error: ..." / "lexical error: ..." + newline */
			snprintf(err, errlen, "at byte %zu: %.*s", at, (int)strcspn(s, "\n"), s);
			if (m)
				yajl_free_error(h, m);
			r = -EINVAL;
		}
	} else if (!t->root) {
		r = err_set(err, errlen, -EINVAL, "at byte 0: no value");
	}
	yajl_free(h);
	return r;
}

void jtree_free(struct jtree *t)
{
	struct jarena_chunk *c = t->chunks, *next;

	for (; c; c = next) {
		next = c->next;
		free(c);
	}
	t->chunks = NULL;
	t->root = NULL;
	t->used = 0;
}

const struct jnode *jtree_get(const struct jnode *o, const char *key)
{
	uint32_t h;

	if (!o || o->type != JT_OBJECT)
		return NULL;
	h = jtree_key_hash(key, strlen(key));
	for (const struct jnode *k = o->kids.first; k; k = k->next)
		if (k->key_hash == h && strcmp(k->key, key) == 0)
			return k;
	return NULL;
}

json_t *jtree_to_json(const struct jnode *n)
{
	json_t *v = NULL;

	switch (n->type) {
	case JT_NULL:
		return json_null();
	case JT_FALSE:
		return json_false();
	case JT_TRUE:
		return json_true();
	case JT_INT:
		return json_integer(n->i);
	case JT_REAL:
		return json_real(n->d);
	case JT_STRING:
		return json_stringn(n->str.s, n->str.len);
	case JT_OBJECT:
		v = json_object();
		break;
	case JT_ARRAY:
		v = json_array();
		break;
	}
	if (!v)
		return NULL;
	for (const struct jnode *k = n->kids.first; k; k = k->next) {
		json_t *c = jtree_to_json(k);
		int e = !c		       ? -1
			: n->type == JT_OBJECT ? json_object_set_new(v, k->key, c)
					       : json_array_append_new(v, c);

		if (e < 0) {
			json_decref(v);
			return NULL;
		}
	}
	return v;
}
