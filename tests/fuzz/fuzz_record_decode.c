/* SPDX-License-Identifier: MIT */
/*
 * Record decoder: any input either fails cleanly or decodes to a record that encodes, and
 * whose encoding decodes again to the same encoding (round-trip stability); the fast path
 * (acct_record_scan) takes an input only as the tree decoder reads it, and the decoder answers
 * as the tree decoder does (the same error message).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accounting/record.h"
#include "tests/unit/record_same.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The fast path against the tree decoder; returns the decoder's result (r: its record). */
static int differential(const char *buf, size_t size, struct acct_record *r, char *err,
			size_t errlen)
{
	struct acct_record s = {0}, t = {0}, a = {0};
	struct acct_arena arena = {0};
	char terr[256] = "", aerr[256] = "";
	int rs = acct_record_scan(buf, size, &s, NULL);
	int rt = acct_record_decode_tree(buf, size, &t, terr, sizeof(terr));
	int rd = acct_record_decode(buf, size, r, err, errlen);
	int ra = acct_record_decode_in(buf, size, &a, aerr, sizeof(aerr), &arena);

	if (rs != 0 && rs != 1)
		abort();
	if (rs == 0 && (rt != 0 || !record_same(&s, &t)))
		abort();
	if (rd != rt || (rd == 0 && !record_same(r, &t)) || (rd < 0 && strcmp(err, terr) != 0))
		abort();
	if (ra != rt || (ra == 0 && !record_same(&a, &t)) || (ra < 0 && strcmp(aerr, terr) != 0))
		abort();
	acct_record_clear(&s);
	acct_record_clear(&t);
	acct_record_clear(&a);
	acct_arena_free(&arena);
	return rd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct acct_record r = {0}, r2 = {0};
	char err[256], *enc = NULL, *enc2 = NULL, *canon = NULL;
	size_t n = 0, n2 = 0, cn = 0;

	if (differential((const char *)data, size, &r, err, sizeof(err)) < 0) {
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
