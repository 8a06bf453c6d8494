/* SPDX-License-Identifier: MIT */
/* NDJSON batch parser: line splitting, per-line errors, limits. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accounting/batch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct counts {
	size_t calls, ok;
};

static int cb(size_t index, struct acct_record *r, const char *error, void *userdata)
{
	struct counts *c = userdata;

	if (index != c->calls || (!r) == (!error))
		abort();
	c->calls++;
	if (r)
		c->ok++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct counts c = {0};
	size_t lines = acct_batch_count_lines((const char *)data, size);
	int r;

	r = acct_batch_parse((const char *)data, size, 64, cb, &c);
	if (lines > 64) {
		if (r != -E2BIG || c.calls)
			abort();
		return 0;
	}
	if (r < 0 || (size_t)r != lines || c.calls != lines)
		abort();
	return 0;
}
