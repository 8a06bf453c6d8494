/* SPDX-License-Identifier: MIT */
/* The compact form of queued rollup deltas (collector/pending.c): exact round trips, size,
 * and every malformed input refused. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "collector/pending.h"
#include "common/macro.h"

/* Deltas of every bucketed table, with sums of every kind: zero, whole (small, negative,
 * large, 2^53 and past it), fractions, -0.0, a NaN and infinities. */
static size_t sample(struct coll_delta *d)
{
	static const double vals[] = {0,
				      1,
				      -1,
				      3,
				      1e15,
				      -12345678,
				      0.25,
				      1.0 / 3,
				      -0.0,
				      9007199254740992.0,
				      1e300,
				      -1e-300,
				      INFINITY,
				      -INFINITY,
				      17179869184.0,
				      2,
				      0,
				      7.5,
				      4294967296.0,
				      123456789012.0};
	size_t n = 0;

	for (int t = 0; t < COLL_ROLLUP_OPEN; t++)
		for (int j = 0; j < 3; j++) {
			struct coll_delta *x = &d[n++];

			memset(x, 0, sizeof(*x));
			x->table = t;
			snprintf(x->bucket, sizeof(x->bucket),
				 t == COLL_ROLLUP_JOB_MONTH ? "2026-1%d" : "2026-12-0%d", j);
			for (int k = 0; k < _COLL_KEY_MAX; k++)
				coll_delta_set_key(x, k, "");
			x->account = j == 2 ? "" : "physics";
			x->user = "alice";
			if (t == COLL_ROLLUP_LABEL_DAY || t == COLL_ROLLUP_JOB_LABEL_DAY) {
				x->label_key = "project";
				x->label_value =
				    j ? "a-much-longer-label-value-of-the-project-that-"
					"takes-more-than-127-bytes-so-its-length-needs-"
					"two-bytes-of-varint-to-be-written-out-in-full"
				      : "x";
			}
			if (t == COLL_ROLLUP_NODE_DAY) {
				x->account = x->user = "";
				x->label_key = "price_class";
				x->label_value = j ? "gpu-h100" : "";
				x->node = "node-7";
			}
			if (t == COLL_ROLLUP_NODE_ALLOC_DAY) {
				x->account = x->user = "";
				x->node = j ? "node-7" : "";
			}
			if (t == COLL_ROLLUP_JOB_DAY || t == COLL_ROLLUP_JOB_LABEL_DAY ||
			    t == COLL_ROLLUP_JOB_MONTH) {
				x->job = "job-42";
				x->node = "node-7";
			}
			for (int s = 0; s < _COLL_SUM_MAX; s++)
				x->v[s] = vals[(s + (size_t)j * 7 + (size_t)t) % ARRAY_SIZE(vals)];
		}
	d[0].v[3] = NAN;
	return n;
}

static void assert_same(const struct coll_delta *a, const struct coll_delta *b)
{
	assert_int_equal(a->table, b->table);
	assert_string_equal(a->bucket, b->bucket);
	for (int k = 0; k < _COLL_KEY_MAX; k++)
		assert_string_equal(coll_delta_key(a, k), coll_delta_key(b, k));
	for (int s = 0; s < _COLL_SUM_MAX; s++) {
		if (isnan(a->v[s])) {
			assert_memory_equal(&a->v[s], &b->v[s], sizeof(double));
			continue;
		}
		/* exact, and -0.0 comes back as 0 */
		assert_true(a->v[s] == b->v[s]);
		assert_int_equal(!!signbit(b->v[s]), a->v[s] != 0 && signbit(a->v[s]));
	}
}

static void test_round_trip(void **state)
{
	struct coll_delta d[3 * COLL_ROLLUP_OPEN], out[3 * COLL_ROLLUP_OPEN + 1];
	unsigned char *enc = NULL;
	size_t n = sample(d), len = 0, nout = 0;
	char *arena, *ap;

	(void)state;
	assert_int_equal(coll_pending_encode(d, n, &enc, &len), 0);
	assert_true(len / COLL_PENDING_ROW_MIN + 1 >= n);
	arena = ap = malloc(len + 1);
	assert_non_null(arena);
	assert_int_equal(coll_pending_decode(enc, len, out, &nout, &ap), 0);
	assert_int_equal(nout, n);
	assert_true((size_t)(ap - arena) <= len + 1);
	for (size_t i = 0; i < n; i++)
		assert_same(&d[i], &out[i]);
	free(arena);
	free(enc);
}

/* Whole numbers go as varints: a day delta with small counts takes a few dozen bytes, not the
 * 2 + 29 * 4 + 4 + 10 + 160 of a rollup_in row. */
static void test_size(void **state)
{
	struct coll_delta d = {.table = COLL_ROLLUP_DAY, .bucket = "2026-12-04"};
	unsigned char *enc = NULL;
	size_t len = 0;

	(void)state;
	for (int k = 0; k < _COLL_KEY_MAX; k++)
		coll_delta_set_key(&d, k, "");
	d.account = "physics";
	d.user = "alice";
	d.v[COLL_SUM_TASKS] = 3;
	d.v[COLL_SUM_WALL_S] = 12.5;
	d.v[COLL_SUM_IO_READ_BYTES] = 17179869184.0;
	assert_int_equal(coll_pending_encode(&d, 1, &enc, &len), 0);
	/* table, bucket 1 + 10, keys 1 + 7 and 1 + 5, bitmaps 2 + 2 (bits 0, 2, 12), then
	 * 3 as 1 byte, 12.5 as 8, 2^34 as 6 */
	assert_int_equal(len, 1 + 11 + 8 + 6 + 2 + 2 + 1 + 8 + 6);
	free(enc);
}

static void test_refused(void **state)
{
	struct coll_delta d[3 * COLL_ROLLUP_OPEN], out[3 * COLL_ROLLUP_OPEN + 1];
	unsigned char *enc = NULL, *bad;
	size_t n = sample(d), len = 0, nout, boundaries = 0;
	char *arena, *ap;

	(void)state;
	assert_int_equal(coll_pending_encode(d, n, &enc, &len), 0);
	arena = malloc(len + 1);
	bad = malloc(len);
	assert_non_null(arena);
	assert_non_null(bad);
	/* every prefix: a whole number of deltas, or refused */
	for (size_t cut = 0; cut < len; cut++) {
		int r;

		nout = 0;
		ap = arena;
		r = coll_pending_decode(enc, cut, out, &nout, &ap);
		assert_true(r == 0 || r == -EBADMSG);
		boundaries += r == 0;
	}
	assert_int_equal(boundaries, n); /* 0 and each delta's end but the last */
	/* an unknown table, rollup_open, a NUL in a key, bits past the sums, a whole bit
	 * without its present bit */
	memcpy(bad, enc, len);
	bad[0] = COLL_ROLLUP_OPEN;
	nout = 0, ap = arena;
	assert_int_equal(coll_pending_decode(bad, len, out, &nout, &ap), -EBADMSG);
	bad[0] = 200;
	nout = 0, ap = arena;
	assert_int_equal(coll_pending_decode(bad, len, out, &nout, &ap), -EBADMSG);
	memcpy(bad, enc, len);
	bad[1 + 1 + 10 + 1 + 2] = 0; /* in "physics" */
	nout = 0, ap = arena;
	assert_int_equal(coll_pending_decode(bad, len, out, &nout, &ap), -EBADMSG);
	{
		static const unsigned char past[] = {0, 0, 0, 0, 0x80, 0x80, 0x40, 0};
		static const unsigned char whole[] = {0, 0, 0, 0, 0, 1};
		static const unsigned char bucket[] = {0,   16,	 '2', '0', '2', '6', '-', '1',
						       '2', '-', '0', '1', 'x', 'x', 'x', 'x',
						       'x', 'x', 0,   0,   0,	0};
		static const unsigned char longvarint[] = {0,	 0,    0xff, 0xff, 0xff, 0xff, 0xff,
							   0xff, 0xff, 0xff, 0xff, 0xff, 0x01};

		nout = 0, ap = arena;
		assert_int_equal(coll_pending_decode(past, sizeof(past), out, &nout, &ap),
				 -EBADMSG);
		nout = 0, ap = arena;
		assert_int_equal(coll_pending_decode(whole, sizeof(whole), out, &nout, &ap),
				 -EBADMSG);
		nout = 0, ap = arena;
		assert_int_equal(coll_pending_decode(bucket, sizeof(bucket), out, &nout, &ap),
				 -EBADMSG);
		nout = 0, ap = arena;
		assert_int_equal(
		    coll_pending_decode(longvarint, sizeof(longvarint), out, &nout, &ap), -EBADMSG);
	}
	/* what cannot be encoded */
	d[0].table = COLL_ROLLUP_OPEN;
	assert_int_equal(coll_pending_encode(d, 1, &bad, &len), -EINVAL);
	free(arena);
	free(enc);
	free(bad);
}

/*
 * A fold's gathering of many batches (coll_pending_reserve, coll_pending_settle): every
 * delta is summed once, and the room follows the distinct keys, not the batches: 300 batches
 * of 500 deltas over 20 keys (150,000 decoded) never hold room for all of them.
 */
static void test_gather(void **state)
{
	(void)state;
	enum { KEYS = 20, PER = 500, BATCHES = 300 };
	static const char *users[KEYS] = {"u0",	 "u1",	"u2",  "u3",  "u4",  "u5",  "u6",
					  "u7",	 "u8",	"u9",  "u10", "u11", "u12", "u13",
					  "u14", "u15", "u16", "u17", "u18", "u19"};
	struct coll_delta *d = calloc(PER, sizeof(*d));
	struct coll_pending_set set = {0};
	unsigned char *enc = NULL;
	size_t len = 0, n;
	char *arena, *ap;

	(void)state;
	assert_non_null(d);
	for (int i = 0; i < PER; i++) {
		d[i].table = COLL_ROLLUP_DAY;
		strcpy(d[i].bucket, "2026-12-06");
		for (int k = 0; k < _COLL_KEY_MAX; k++)
			coll_delta_set_key(&d[i], k, "");
		d[i].account = "physics";
		d[i].user = users[i % KEYS];
		d[i].v[0] = 1;
		d[i].v[1] = 0.5;
	}
	assert_int_equal(coll_pending_encode(d, PER, &enc, &len), 0);
	arena = ap = malloc(BATCHES * (len + 1));
	assert_non_null(arena);
	for (int b = 0; b < BATCHES; b++) {
		assert_int_equal(coll_pending_reserve(&set, len), 0);
		assert_int_equal(coll_pending_decode(enc, len, set.d, &set.n, &ap), 0);
		coll_pending_settle(&set);
	}
	assert_true(set.cap < (size_t)PER * BATCHES);
	n = coll_deltas_merge(set.d, set.n);
	assert_int_equal(n, KEYS);
	for (size_t i = 0; i < n; i++) {
		assert_true(set.d[i].v[0] == (double)PER / KEYS * BATCHES);
		assert_true(set.d[i].v[1] == (double)PER / KEYS * BATCHES / 2);
	}
	free(set.d);
	free(arena);
	free(enc);
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_size),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_gather),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
