/* SPDX-License-Identifier: MIT */
/*
 * Read-only JSON tree for decoding records: parsed with yajl's event (SAX) parser into one
 * arena per document, so a typical 1 KiB record costs no malloc per value (jansson's tree
 * cost ~8x more per record at the collector; see docs/design.md "Record decoding").
 *
 * Rules are those of strict JSON plus: duplicate object keys rejected, strings must be valid
 * UTF-8 without NUL, integers must fit int64_t (otherwise an error, never a rounded value),
 * numbers with a fraction or exponent are reals, nesting limited to JTREE_MAX_DEPTH.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#define JTREE_MAX_DEPTH 64

enum jtype { JT_NULL, JT_FALSE, JT_TRUE, JT_INT, JT_REAL, JT_STRING, JT_OBJECT, JT_ARRAY };

struct jnode {
	enum jtype type;
	uint32_t key_hash; /* jtree_key_hash(key) inside an object */
	const char *key;   /* member name inside an object (NUL-terminated), else NULL */
	struct jnode *next;
	union {
		int64_t i;
		double d;
		struct {
			const char *s; /* NUL-terminated */
			size_t len;
		} str;
		struct {
			struct jnode *first, *last;
			size_t n;
		} kids;
	};
};

/* Heap chunks of allocations freed all at once: a tree's beyond its inline buffer, a batch's
 * strings (acct_arena). One chunk list; jarena_alloc gives n bytes, 16-byte aligned, from the
 * newest chunk, or a new chunk of MAX(chunk_min, n) bytes; NULL on ENOMEM. */
struct jarena_chunk {
	struct jarena_chunk *next;
	size_t size, used;
	char data[] __attribute__((aligned(16)));
};

void *jarena_grow(struct jarena_chunk **chunks, size_t chunk_min, size_t n);
void jarena_free(struct jarena_chunk **chunks);

static inline void *jarena_alloc(struct jarena_chunk **chunks, size_t chunk_min, size_t n)
{
	struct jarena_chunk *c = *chunks;

	n = (n + 15) & ~(size_t)15;
	if (!c || c->size - c->used < n)
		return jarena_grow(chunks, chunk_min, n);
	c->used += n;
	return c->data + c->used - n;
}

struct jtree {
	struct jnode *root;
	struct jarena_chunk *chunks; /* heap chunks beyond the inline one */
	size_t used;
	char inline_buf[8192] __attribute__((aligned(16)));
};

/* Parses buf[0..len) into t (t needs no initialisation). Returns 0, -EINVAL with a message
 * in err ("at byte N: ..."), or -ENOMEM. jtree_free(t) afterwards in every case. */
int jtree_parse(struct jtree *t, const char *buf, size_t len, char *err, size_t errlen);
void jtree_free(struct jtree *t);

/* A member name's hash (members are compared by hash before their names): its length and its
 * first and last 8 bytes mixed, a constant cost whatever the name (a byte-wise hash was a
 * tenth of a record's decode). */
static inline uint32_t jtree_key_hash(const char *s, size_t len)
{
	uint64_t a = 0, b = 0;

	if (len >= 8) {
		memcpy(&a, s, 8);
		memcpy(&b, s + len - 8, 8);
	} else {
		for (size_t i = 0; i < len; i++)
			a = a << 8 | (unsigned char)s[i];
	}
	a = (a ^ len) * 0x9e3779b97f4a7c15ULL ^ b * 0xc2b2ae3d27d4eb4fULL;
	return (uint32_t)(a >> 32 ^ a);
}

/* Member of an object (NULL if absent or o is not an object). */
const struct jnode *jtree_get(const struct jnode *o, const char *key);

static inline bool jtree_is_number(const struct jnode *n)
{
	return n && (n->type == JT_INT || n->type == JT_REAL);
}

static inline double jtree_number(const struct jnode *n)
{
	return n->type == JT_INT ? (double)n->i : n->d;
}

/* A jansson copy of n (new reference), NULL on ENOMEM. */
json_t *jtree_to_json(const struct jnode *n);
