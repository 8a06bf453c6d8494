/* SPDX-License-Identifier: MIT */
#include "common/growbuf.h"

#include <stdint.h>
#include <stdlib.h>

char *growbuf_room(struct growbuf *b, size_t n, size_t max)
{
	if (b->failed)
		return NULL;
	if (n > max || b->len > max - n) {
		b->failed = true;
		return NULL;
	}
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap - b->len < n) {
			if (cap > SIZE_MAX / 2) {
				b->failed = true;
				return NULL;
			}
			cap *= 2;
		}
		p = realloc(b->p, cap);
		if (!p) {
			b->failed = true;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	b->len += n;
	return b->p + b->len - n;
}
