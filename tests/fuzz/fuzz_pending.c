/* SPDX-License-Identifier: MIT */
/*
 * Fuzz the decoder of queued rollup deltas (rollup_pending, the compact form): never crash or
 * read past the input, stay within the arena the fold allocates, and whatever decodes encodes
 * and decodes again to the same deltas (not always the same bytes: a varint with needless
 * continuation bytes or a whole number sent as a double decode fine, and encode shorter).
 */
#include "collector/pending.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_delta(const struct coll_delta *a, const struct coll_delta *b)
{
	if (a->table != b->table || strcmp(a->bucket, b->bucket) != 0)
		return false;
	for (int k = 0; k < _COLL_KEY_MAX; k++)
		if (strcmp(coll_delta_key(a, k), coll_delta_key(b, k)) != 0)
			return false;
	for (int s = 0; s < _COLL_SUM_MAX; s++) /* -0.0 comes back as 0; NaN bit for bit */
		if (a->v[s] != b->v[s] && memcmp(&a->v[s], &b->v[s], sizeof(double)) != 0)
			return false;
	return true;
}

static struct coll_delta *decode(const uint8_t *p, size_t len, size_t *nd, char **arena, int *r)
{
	struct coll_delta *d = calloc(len / COLL_PENDING_ROW_MIN + 1, sizeof(*d));
	char *ap;

	*arena = ap = malloc(len + 1);
	if (!d || !ap)
		abort();
	*nd = 0;
	*r = coll_pending_decode(p, len, d, nd, &ap);
	if ((size_t)(ap - *arena) > len + 1)
		abort();
	return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *arena, *arena2;
	unsigned char *enc = NULL;
	size_t nd, nd2, elen = 0;
	struct coll_delta *d, *d2;
	int r;

	d = decode(data, size, &nd, &arena, &r);
	if (r == 0) {
		if (coll_pending_encode(d, nd, &enc, &elen) != 0)
			abort();
		d2 = decode(enc, elen, &nd2, &arena2, &r);
		if (r != 0 || nd2 != nd)
			abort();
		for (size_t i = 0; i < nd; i++)
			if (!same_delta(&d[i], &d2[i]))
				abort();
		free(d2);
		free(arena2);
		free(enc);
	} else if (r != -EBADMSG) {
		abort();
	}
	free(d);
	free(arena);
	return 0;
}
