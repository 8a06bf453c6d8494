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

int slot_index_grow(size_t **slot, size_t *nslot, size_t first, size_t n,
		    uint64_t (*hash)(const void *ctx, size_t i), const void *ctx)
{
	const size_t ns = *nslot ? *nslot * 2 : first;
	size_t *sl = calloc(ns, sizeof(*sl));

	if (!sl)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		size_t j = hash(ctx, i) & (ns - 1);

		while (sl[j])
			j = (j + 1) & (ns - 1);
		sl[j] = i + 1;
	}
	free(*slot);
	*slot = sl;
	*nslot = ns;
	return 0;
}
