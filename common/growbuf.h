/* SPDX-License-Identifier: MIT */
/* A byte buffer that grows by doubling. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Grows from 4 KiB up to max bytes (SIZE_MAX: no bound). */
struct growbuf {
	char *p;
	size_t len, cap;
	bool failed; /* out of memory or past max: sticky, every later call does nothing */
};
/* n more bytes at the end, for the caller to fill; NULL once failed. free(b->p) after. */
char *growbuf_room(struct growbuf *b, size_t n, size_t max);

/* An array *v of *cap elements of size bytes made room for element n (doubling, from 1024):
 * 0 or -ENOMEM (then *v and *cap are as they were). */
int grow_array(void **v, size_t *cap, size_t n, size_t size);

/* An open-addressing index (linear probing) of n elements rebuilt at twice its size (first, a
 * power of two, when it has none): (*slot)[j] holds element i + 1, 0 is empty; hash(ctx, i) is
 * element i's hash. 0, or -ENOMEM with the index as it was. */
int slot_index_grow(size_t **slot, size_t *nslot, size_t first, size_t n,
		    uint64_t (*hash)(const void *ctx, size_t i), const void *ctx);
