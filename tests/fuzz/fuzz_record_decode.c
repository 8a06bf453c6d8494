/* SPDX-License-Identifier: MIT */
/*
 * Record decoder: any input either fails cleanly or decodes to a record that encodes, and
 * whose encoding decodes again to the same encoding (round-trip stability).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accounting/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct acct_record r = {0}, r2 = {0};
	char err[256], *enc = NULL, *enc2 = NULL, *canon = NULL;
	size_t n = 0, n2 = 0, cn = 0;

	if (acct_record_decode((const char *)data, size, &r, err, sizeof(err)) < 0) {
		if (!err[0])
			abort(); /* every failure names its cause */
		return 0;
	}
	if (acct_record_encode(&r, &enc, &n) == 0) {
		if (acct_record_decode(enc, n, &r2, err, sizeof(err)) < 0)
			abort();
		if (acct_record_encode(&r2, &enc2, &n2) < 0 || n != n2 || memcmp(enc, enc2, n) != 0)
			abort();
		if (acct_type_is_audit(r.type) && acct_record_canonical(&r, &canon, &cn) < 0)
			abort();
	}
	free(enc);
	free(enc2);
	free(canon);
	acct_record_clear(&r2);
	acct_record_clear(&r);
	return 0;
}
