/* SPDX-License-Identifier: MIT */
#include "common/growbuf.h"

#include <errno.h>
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

int grow_array(void **v, size_t *cap, size_t n, size_t size)
{
	void *nv;
	size_t nc;

	if (n < *cap)
		return 0;
	nc = *cap ? *cap * 2 : 1024;
	if (nc < n + 1 || nc > SIZE_MAX / size)
		return -ENOMEM;
	nv = realloc(*v, nc * size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = nc;
	return 0;
}
