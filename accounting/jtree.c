/* SPDX-License-Identifier: MIT */
/* JSON tree from one hand-written strict pass over the text, arena allocated (see jtree.h). */
#include "accounting/jtree.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/error.h"
#include "common/macro.h"

#define CHUNK_MIN (32 * 1024)

/* n already rounded up to 16 by jarena_alloc: a new chunk in front of the list */
void *jarena_grow(struct jarena_chunk **chunks, size_t chunk_min, size_t n)
{
	size_t size = MAX(chunk_min, n);
	struct jarena_chunk *c = malloc(sizeof(*c) + size);

	if (!c)
		return NULL;
	c->size = size;
	c->used = n;
	c->next = *chunks;
	*chunks = c;
	return c->data;
}

void jarena_free(struct jarena_chunk **chunks)
{
	struct jarena_chunk *c = *chunks, *next;

	for (; c; c = next) {
		next = c->next;
		free(c);
	}
	*chunks = NULL;
}

/* The inline buffer first, then heap chunks */
static void *arena_alloc(struct jtree *t, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (!t->chunks && t->used + n <= sizeof(t->inline_buf)) {
		void *p = t->inline_buf + t->used;

		t->used += n;
		return p;
	}
	return jarena_alloc(&t->chunks, CHUNK_MIN, n);
}

struct pctx {
	struct jtree *t;
	const unsigned char *base, *c, *end; /* the text, the next byte, its end */
	struct jnode *stack[JTREE_MAX_DEPTH];
	int depth;
	const char *key; /* pending member name of the innermost object */
	uint32_t key_hash;
	const char *msg; /* why the parse stopped (a literal) */
	size_t at;	 /* where: the offset of the byte or token at fault */
	bool nomem;
};

/* Stops the parse at the byte c (NULL: the current one); always 0. */
static int fail_at(struct pctx *p, const unsigned char *c, const char *msg)
{
	p->msg = msg;
	p->at = (size_t)((c ? c : p->c) - p->base);
	return 0;
}

static int fail_nomem(struct pctx *p)
{
	p->nomem = true;
	return fail_at(p, NULL, "out of memory");
}

/*
 * Strict UTF-8 (RFC 3629) without NUL: no overlong forms, no surrogates, nothing above
 * U+10FFFF, no zero byte (a C string would end there): a record that decodes must encode.
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

/* New value in the current container (or the root); NULL when the parse must stop. */
static struct jnode *add(struct pctx *p, enum jtype type)
{
	struct jnode *n, *parent = p->depth ? p->stack[p->depth - 1] : NULL;

	n = arena_alloc(p->t, sizeof(*n));
	if (!n) {
		fail_nomem(p);
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

/* A number's text s[0..len) (JSON's grammar already checked) as a node. */
static int add_number(struct pctx *p, const unsigned char *s, size_t len, bool real)
{
	char buf[64], *text = buf;
	struct jnode *n;
	char *end;

	/* an integer of up to 18 digits cannot overflow: summed here instead of by strtoll */
	if (!real && len <= 18) {
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
	if (!real && len >= sizeof(buf))
		return fail_at(p, s, "too big integer");
	/* a real may be long (many digits round to one double): its text then in the arena */
	if (len >= sizeof(buf) && !(text = arena_alloc(p->t, len + 1)))
		return fail_nomem(p);
	memcpy(text, s, len);
	text[len] = 0;
	n = add(p, real ? JT_REAL : JT_INT);
	if (!n)
		return 0;
	errno = 0;
	if (real) {
		n->d = strtod(text, &end);
		if (*end || !isfinite(n->d))
			return fail_at(p, s, "real number overflow");
	} else {
		n->i = strtoll(buf, &end, 10);
		if (*end || errno == ERANGE)
			return fail_at(
			    p, s, buf[0] == '-' ? "too big negative integer" : "too big integer");
	}
	return 1;
}

/* The number at p->c (a '-' or a digit), JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?
 * ([eE][+-]?[0-9]+)? */
static int parse_number(struct pctx *p)
{
	const unsigned char *s = p->c, *c = s, *end = p->end;
	bool real = false;

	if (*c == '-')
		c++;
	if (c == end || *c < '0' || *c > '9')
		return fail_at(p, c,
			       "lexical error: malformed number, a digit is required "
			       "after the minus sign");
	if (*c++ != '0')
		while (c < end && *c >= '0' && *c <= '9')
			c++;
	if (c < end && *c == '.') {
		real = true;
		if (++c == end || *c < '0' || *c > '9')
			return fail_at(p, c,
				       "lexical error: malformed number, a digit is "
				       "required after the decimal point");
		while (c < end && *c >= '0' && *c <= '9')
			c++;
	}
	if (c < end && (*c == 'e' || *c == 'E')) {
		real = true;
		if (++c < end && (*c == '+' || *c == '-'))
			c++;
		if (c == end || *c < '0' || *c > '9')
			return fail_at(p, c,
				       "lexical error: malformed number, a digit is "
				       "required in the exponent");
		while (c < end && *c >= '0' && *c <= '9')
			c++;
	}
	p->c = c;
	return add_number(p, s, (size_t)(c - s), real);
}

static int hex4(const unsigned char *s, uint32_t *ret)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++) {
		unsigned c = s[i];

		if (c >= '0' && c <= '9')
			c -= '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			c = (c | 0x20) - 'a' + 10;
		else
			return -1;
		v = v << 4 | c;
	}
	*ret = v;
	return 0;
}

/* The escapes of s[0..len) (a string's text between its quotes, checked for a complete
 * escape before each quote) decoded into d; returns d's length, or -1 (message set). */
static ssize_t unescape(struct pctx *p, const unsigned char *s, size_t len, char *d)
{
	size_t i = 0, o = 0;

	while (i < len) {
		uint32_t cp, lo;

		if (s[i] != '\\') {
			d[o++] = (char)s[i++];
			continue;
		}
		switch (s[i + 1]) {
		case '"':
		case '\\':
		case '/':
			d[o++] = (char)s[i + 1];
			i += 2;
			continue;
		case 'b':
			d[o++] = '\b';
			i += 2;
			continue;
		case 'f':
			d[o++] = '\f';
			i += 2;
			continue;
		case 'n':
			d[o++] = '\n';
			i += 2;
			continue;
		case 'r':
			d[o++] = '\r';
			i += 2;
			continue;
		case 't':
			d[o++] = '\t';
			i += 2;
			continue;
		case 'u':
			break;
		default:
			fail_at(p, s + i,
				"lexical error: inside a string, '\\' occurs before a "
				"character which it may not");
			return -1;
		}
		if (len - i < 6 || hex4(s + i + 2, &cp) < 0) {
			fail_at(p, s + i,
				"lexical error: invalid (non-hex) character occurs after "
				"'\\u' inside string");
			return -1;
		}
		i += 6;
		if (cp >= 0xd800 && cp <= 0xdbff) {
			/* a high surrogate needs its low half next; anything else is not a
			 * character */
			if (len - i < 6 || s[i] != '\\' || s[i + 1] != 'u' ||
			    hex4(s + i + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff) {
				fail_at(p, s + i - 6,
					"invalid UTF-8 in a string or key (a lone "
					"surrogate escape)");
				return -1;
			}
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			i += 6;
		} else if (cp >= 0xdc00 && cp <= 0xdfff) {
			fail_at(p, s + i - 6,
				"invalid UTF-8 in a string or key (a lone surrogate escape)");
			return -1;
		}
		if (cp < 0x80) {
			d[o++] = (char)cp;
		} else if (cp < 0x800) {
			d[o++] = (char)(0xc0 | cp >> 6);
			d[o++] = (char)(0x80 | (cp & 0x3f));
		} else if (cp < 0x10000) {
			d[o++] = (char)(0xe0 | cp >> 12);
			d[o++] = (char)(0x80 | (cp >> 6 & 0x3f));
			d[o++] = (char)(0x80 | (cp & 0x3f));
		} else {
			d[o++] = (char)(0xf0 | cp >> 18);
			d[o++] = (char)(0x80 | (cp >> 12 & 0x3f));
			d[o++] = (char)(0x80 | (cp >> 6 & 0x3f));
			d[o++] = (char)(0x80 | (cp & 0x3f));
		}
	}
	return (ssize_t)o;
}

/* Bytes that stop the scan of a string: the quote, the backslash, control characters (1),
 * and bytes past ASCII (2: noted, then a UTF-8 check of the whole string). */
static const unsigned char str_stop[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
    [0x80 ... 0xff] = 2,
};

/* The string at p->c (its opening quote) into the arena, NUL-terminated and checked (strict
 * UTF-8 without NUL); NULL when the parse must stop. A string of ASCII without escapes (most
 * of a record) needs no UTF-8 check after the scan. */
static char *parse_string(struct pctx *p, size_t *ret_len)
{
	const unsigned char *s = p->c + 1, *c = s, *end = p->end;
	bool escaped = false, ascii = true;
	ssize_t n;
	char *d;

	for (;;) {
#ifdef __SSE2__
		/* 16 bytes a step while no byte of them stops the scan: most strings end in the
		 * first step, at the quote's bit */
		while (end - c >= 16) {
			const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)c);
			const __m128i stop = _mm_or_si128(
			    _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
					 _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
			    _mm_cmplt_epi8(v, _mm_set1_epi8(0x20))); /* signed: also >= 0x80 */
			const unsigned mask = (unsigned)_mm_movemask_epi8(stop);

			if (mask) {
				c += __builtin_ctz(mask);
				break;
			}
			c += 16;
		}
#endif
		while (c < end && !str_stop[*c])
			c++;
		if (c == end) {
			fail_at(p, end, "parse error: premature EOF");
			return NULL;
		}
		if (str_stop[*c] == 2) {
			ascii = false;
			c++;
			continue;
		}
		if (*c == '"')
			break;
		if (*c != '\\') {
			fail_at(p, c, "lexical error: invalid character inside string");
			return NULL;
		}
		escaped = true;
		if (++c == end) {
			fail_at(p, end, "parse error: premature EOF");
			return NULL;
		}
		if (*c < 0x20) {
			fail_at(p, c, "lexical error: invalid character inside string");
			return NULL;
		}
		c++; /* the escaped byte: a quote or backslash there does not end the scan */
	}
	d = arena_alloc(p->t, (size_t)(c - s) + 1);
	if (!d) {
		fail_nomem(p);
		return NULL;
	}
	if (escaped) {
		n = unescape(p, s, (size_t)(c - s), d);
		if (n < 0)
			return NULL;
	} else {
		n = c - s;
		memcpy(d, s, (size_t)n);
	}
	if ((escaped || !ascii) && !utf8_valid((const unsigned char *)d, (size_t)n)) {
		fail_at(p, s - 1,
			memchr(d, 0, (size_t)n) ? "NUL byte in string"
						: "invalid UTF-8 in a string or key");
		return NULL;
	}
	d[n] = 0;
	*ret_len = (size_t)n;
	p->c = c + 1;
	return d;
}

static inline void skip_ws(struct pctx *p)
{
	const unsigned char *c = p->c, *end = p->end;

	while (c < end && (*c == ' ' || *c == '\n' || *c == '\t' || *c == '\r'))
		c++;
	p->c = c;
}

/* A member name at p->c, its ':' and the whitespace after it. */
static int parse_key(struct pctx *p)
{
	const struct jnode *o = p->stack[p->depth - 1];
	const unsigned char *at = p->c;
	uint32_t h;
	size_t len;
	char *d;

	if (p->c == p->end)
		return fail_at(p, NULL, "parse error: premature EOF");
	if (*p->c != '"')
		return fail_at(p, NULL, "parse error: invalid object key (must be a string)");
	d = parse_string(p, &len);
	if (!d)
		return 0;
	h = jtree_key_hash(d, len);
	for (const struct jnode *k = o->kids.first; k; k = k->next)
		if (k->key_hash == h && strcmp(k->key, d) == 0)
			return fail_at(p, at, "duplicate object key");
	p->key = d;
	p->key_hash = h;
	skip_ws(p);
	if (p->c == p->end)
		return fail_at(p, NULL, "parse error: premature EOF");
	if (*p->c != ':')
		return fail_at(p, NULL,
			       "parse error: object key and value must be separated by "
			       "a colon (':')");
	p->c++;
	skip_ws(p);
	return 1;
}

static bool literal(struct pctx *p, const char *word, size_t len)
{
	if ((size_t)(p->end - p->c) < len || memcmp(p->c, word, len) != 0)
		return false;
	p->c += len;
	return true;
}

/* The whole text, one value with optional whitespace around it. Iterative: the containers
 * open at any point are p->stack[0..depth). */
static int parse(struct pctx *p)
{
	struct jnode *n;
	size_t len;
	char *s;

	skip_ws(p);
	if (p->c == p->end)
		return fail_at(p, NULL, "no value");
value:
	if (p->c == p->end)
		return fail_at(p, NULL, "parse error: premature EOF");
	switch (*p->c) {
	case '{':
	case '[':
		if (p->depth >= JTREE_MAX_DEPTH)
			return fail_at(p, NULL, "nesting too deep");
		n = add(p, *p->c == '{' ? JT_OBJECT : JT_ARRAY);
		if (!n)
			return 0;
		p->stack[p->depth++] = n;
		p->c++;
		skip_ws(p);
		if (p->c < p->end && *p->c == (n->type == JT_OBJECT ? '}' : ']')) {
			p->c++;
			p->depth--;
			goto after_value;
		}
		if (n->type == JT_OBJECT) {
			if (!parse_key(p))
				return 0;
		}
		goto value;
	case '"':
		s = parse_string(p, &len);
		if (!s || !(n = add(p, JT_STRING)))
			return 0;
		n->str.s = s;
		n->str.len = len;
		break;
	case 't':
		if (!literal(p, "true", 4))
			goto bad_literal;
		if (!add(p, JT_TRUE))
			return 0;
		break;
	case 'f':
		if (!literal(p, "false", 5))
			goto bad_literal;
		if (!add(p, JT_FALSE))
			return 0;
		break;
	case 'n':
		if (!literal(p, "null", 4))
			goto bad_literal;
		if (!add(p, JT_NULL))
			return 0;
		break;
	case '-':
	case '0' ... '9':
		if (!parse_number(p))
			return 0;
		break;
	default:
		return fail_at(p, NULL, "lexical error: invalid char in json text");
	}
after_value:
	skip_ws(p);
	if (!p->depth) {
		if (p->c != p->end)
			return fail_at(p, NULL, "parse error: trailing garbage");
		return 1;
	}
	n = p->stack[p->depth - 1];
	if (p->c == p->end)
		return fail_at(p, NULL, "parse error: premature EOF");
	if (*p->c == ',') {
		p->c++;
		skip_ws(p);
		if (n->type == JT_OBJECT && !parse_key(p))
			return 0;
		goto value;
	}
	if (*p->c == (n->type == JT_OBJECT ? '}' : ']')) {
		p->c++;
		p->depth--;
		goto after_value;
	}
	return fail_at(p, NULL,
		       n->type == JT_OBJECT
			   ? "parse error: after key and value, inside map, I "
			     "expect ',' or '}'"
			   : "parse error: after array element, I expect ',' or ']'");
bad_literal:
	return fail_at(p, NULL, "lexical error: invalid string in json text");
}

int jtree_parse(struct jtree *t, const char *buf, size_t len, char *err, size_t errlen)
{
	struct pctx pc = {.t = t}, *p = &pc;

	t->root = NULL;
	t->chunks = NULL;
	t->used = 0;
	if (len > 0 && !buf)
		return -EINVAL;
	p->base = p->c = (const unsigned char *)buf;
	p->end = p->base + len;
	if (parse(p))
		return 0;
	if (p->nomem)
		return -ENOMEM;
	return err_set(err, errlen, -EINVAL, "at byte %zu: %s", p->at, p->msg);
}

void jtree_free(struct jtree *t)
{
	jarena_free(&t->chunks);
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
