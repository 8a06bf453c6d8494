/* SPDX-License-Identifier: MIT */
/* The upload retry rule (accounting/retry.c): exponential ceiling, full jitter, Retry-After
 * honoured with jitter, its cap; the Retry-After header's two forms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>

#include <cmocka.h>

#include "accounting/retry.h"

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

static void test_ceiling(void **state)
{
	static const uint64_t want[] = {500,   1000,  2000,   4000,   8000,   16000,
					32000, 64000, 128000, 256000, 300000, 300000};

	(void)state;
	for (unsigned a = 0; a < sizeof(want) / sizeof(want[0]); a++) {
		struct acct_retry r = acct_retry_delay(a, 500, 300000, 0, UINT64_MAX);

		assert_int_equal(r.ceiling_ms, want[a]);
		/* rnd % (ceiling + 1): the largest draw is the ceiling itself */
		assert_true(r.delay_ms <= r.ceiling_ms);
	}
	/* an attempt count far past the cap does not overflow */
	assert_int_equal(acct_retry_delay(1000, 500, 300000, 0, 7).ceiling_ms, 300000);
	/* max below min: min wins */
	assert_int_equal(acct_retry_delay(3, 500, 100, 0, 7).ceiling_ms, 500);
}

/* Full jitter without Retry-After: draws spread over [0, ceiling], mean near the middle. */
static void test_full_jitter(void **state)
{
	uint64_t s = 42, lo = UINT64_MAX, hi = 0, sum = 0, n = 20000;
	unsigned buckets[10] = {0};

	(void)state;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t d = acct_retry_delay(4, 500, 300000, 0, xorshift(&s)).delay_ms;

		assert_true(d <= 8000);
		lo = d < lo ? d : lo;
		hi = d > hi ? d : hi;
		sum += d;
		buckets[d * 10 / 8001]++;
	}
	assert_true(lo < 100);
	assert_true(hi > 7900);
	assert_true(sum / n > 3800 && sum / n < 4200);
	for (int b = 0; b < 10; b++) /* every tenth of the window gets 10% +- 2% */
		assert_true(buckets[b] > n / 10 - n / 50 && buckets[b] < n / 10 + n / 50);
}

/* With Retry-After: never sooner, spread over [RA, RA + max(RA, ceiling)]. */
static void test_retry_after(void **state)
{
	uint64_t s = 7, lo = UINT64_MAX, hi = 0;

	(void)state;
	for (int i = 0; i < 20000; i++) {
		uint64_t d = acct_retry_delay(0, 500, 300000, 5000, xorshift(&s)).delay_ms;

		assert_true(d >= 5000 && d <= 10000);
		lo = d < lo ? d : lo;
		hi = d > hi ? d : hi;
	}
	assert_true(lo < 5100 && hi > 9900); /* the herd is spread over the whole window */
	/* a third Retry-After in a row: the window is the Retry-After doubled twice */
	lo = UINT64_MAX;
	hi = 0;
	for (int i = 0; i < 20000; i++) {
		struct acct_retry r = acct_retry_delay(2, 500, 300000, 5000, xorshift(&s));

		assert_int_equal(r.ceiling_ms, 20000);
		assert_true(r.delay_ms >= 5000 && r.delay_ms <= 25000);
		lo = r.delay_ms < lo ? r.delay_ms : lo;
		hi = r.delay_ms > hi ? r.delay_ms : hi;
	}
	assert_true(lo < 5200 && hi > 24800);
	/* the window stops at the cap */
	assert_int_equal(acct_retry_delay(20, 500, 300000, 5000, 7).ceiling_ms, 300000);
	/* a Retry-After beyond the cap is cut to it */
	for (int i = 0; i < 2000; i++) {
		uint64_t d = acct_retry_delay(0, 500, 300000, 86400000, xorshift(&s)).delay_ms;

		assert_true(d >= 300000 && d <= 600000);
	}
	/* a short Retry-After is not raised to min_ms */
	assert_int_equal(acct_retry_delay(0, 500, 300000, 100, 101).delay_ms, 100);
	/* exact values for fixed draws */
	assert_int_equal(acct_retry_delay(0, 500, 300000, 2000, 0).delay_ms, 2000);
	assert_int_equal(acct_retry_delay(0, 500, 300000, 2000, 2000).delay_ms, 4000);
	assert_int_equal(acct_retry_delay(0, 500, 300000, 2000, 2001).delay_ms, 2000);
}

static void test_retry_after_parse(void **state)
{
	uint64_t v = 99;

	(void)state;
	assert_int_equal(acct_retry_after_parse("5", 0, &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(acct_retry_after_parse(" 120\r\n", 0, &v), 0);
	assert_int_equal(v, 120);
	/* Sun, 06 Nov 1994 08:49:37 GMT = 784111777 */
	assert_int_equal(acct_retry_after_parse("Sun, 06 Nov 1994 08:49:37 GMT", 784111700, &v), 0);
	assert_int_equal(v, 77);
	assert_int_equal(acct_retry_after_parse("Sun, 06 Nov 1994 08:49:37 GMT", 784111800, &v), 0);
	assert_int_equal(v, 0); /* in the past: now */
	v = 99;
	assert_int_equal(acct_retry_after_parse("soon", 0, &v), -EINVAL);
	assert_int_equal(acct_retry_after_parse("-1", 0, &v), -EINVAL);
	assert_int_equal(acct_retry_after_parse("5s", 0, &v), -EINVAL);
	assert_int_equal(acct_retry_after_parse("", 0, &v), -EINVAL);
	assert_int_equal(acct_retry_after_parse(NULL, 0, &v), -EINVAL);
	assert_int_equal(acct_retry_after_parse("99999999999999999999999", 0, &v), -EINVAL);
	assert_int_equal(v, 99); /* untouched on failure */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ceiling),
	    cmocka_unit_test(test_full_jitter),
	    cmocka_unit_test(test_retry_after),
	    cmocka_unit_test(test_retry_after_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
