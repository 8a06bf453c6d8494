/* SPDX-License-Identifier: MIT */
/*
 * The launch spawner's message decoder: any input is refused or decodes to a plan whose
 * encoding decodes again and encodes to the same bytes (fd indices are renumbered by the
 * first encoding, so that one is the reference).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "isolation/launch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fds[LAUNCH_WIRE_FDS_MAX], fds1[LAUNCH_WIRE_FDS_MAX], fds2[LAUNCH_WIRE_FDS_MAX];
	struct launch_wire *w = NULL, *w2 = NULL;
	char *enc = NULL, *enc2 = NULL;
	size_t n = 0, n2 = 0, nf = 0, nf2 = 0;

	for (int i = 0; i < LAUNCH_WIRE_FDS_MAX; i++)
		fds[i] = 100 + i;
	if (launch_wire_unpack(data, size, fds, LAUNCH_WIRE_FDS_MAX, &w) < 0)
		return 0;
	if (launch_wire_pack(launch_wire_plan(w), launch_wire_fds(w), &enc, &n, fds1, &nf) < 0)
		goto out; /* a decoded plan may exceed what one message holds: refused, fine */
	if (launch_wire_unpack(enc, n, fds1, nf, &w2) < 0)
		abort();
	if (launch_wire_pack(launch_wire_plan(w2), launch_wire_fds(w2), &enc2, &n2, fds2, &nf2) <
		0 ||
	    n2 != n || memcmp(enc, enc2, n) != 0 || nf2 != nf ||
	    memcmp(fds1, fds2, nf * sizeof(int)))
		abort();
out:
	free(enc);
	free(enc2);
	launch_wire_free(w);
	launch_wire_free(w2);
	return 0;
}
