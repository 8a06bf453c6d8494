/* SPDX-License-Identifier: MIT */
/* A byte buffer that grows by doubling. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

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
