/* SPDX-License-Identifier: MIT */
/*
 * zstd as the collector and the spool meet it: an upload body (Content-Encoding: zstd, any
 * bytes a client sends) and a spool frame of encoding 1. Any input decodes within its bound or
 * fails cleanly; whatever decodes packs again and unpacks to the same bytes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accounting/zframe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OUT (256 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct zframe *z;
	static unsigned char out[MAX_OUT + 1], back[MAX_OUT + 1];
	static unsigned char packed[MAX_OUT + 4096];
	char *body = NULL;
	size_t n = 0;
	ssize_t k, p, u;
	int r;

	if (!z && zframe_new(0, &z) < 0)
		abort();
	r = zframe_body_unpack(data, size, MAX_OUT, &body, &n);
	if (r == 0) {
		if (n > MAX_OUT || body[n] != 0)
			abort();
		free(body);
	} else if (r != -E2BIG && r != -EBADMSG && r != -ENOMEM) {
		abort();
	}
	k = zframe_unpack(z, ZFRAME_ENC_DICT1, data, size, out, MAX_OUT);
	if (k < 0) {
		if (k != -EBADMSG)
			abort();
		return 0;
	}
	if (k > MAX_OUT)
		abort();
	p = zframe_pack(z, out, (size_t)k, packed, sizeof(packed));
	if (p < 0)
		abort();
	if (p > 0) {
		u = zframe_unpack(z, ZFRAME_ENC_DICT1, packed, (size_t)p, back, MAX_OUT);
		if (u != k || memcmp(out, back, (size_t)k) != 0)
			abort();
	}
	return 0;
}
