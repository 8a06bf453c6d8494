/* SPDX-License-Identifier: MIT */
/* Fuzz sbx_profile_compile: any input either compiles or fails with an error message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "isolation/seccomp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_filter *f = NULL;
	char err[256];
	int r;

	err[0] = 0;
	r = sbx_profile_compile((const char *)data, size, &f, err, sizeof(err));
	if (r == 0) {
		if (!f || sbx_filter_len(f) == 0)
			abort();
		sbx_filter_free(f);
	} else {
		if (f)
			abort();
		if (r == -22 && err[0] == 0)
			abort(); /* every -EINVAL names what is wrong */
		if (strlen(err) >= sizeof(err))
			abort();
	}
	return 0;
}
