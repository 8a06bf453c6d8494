/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of accounting/zframe.c: the dictionary's tables are built at their first use
 * only (a user of whole bodies, the uploader, never builds them), and frames and bodies still
 * round-trip.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "accounting/zframe.h"

static const char rec[] =
    "{\"schema\":\"corral.record/v1\",\"type\":\"task.sample\",\"node\":\"n1\","
    "\"task\":{\"id\":\"t-1\",\"user\":\"alice\"},\"usage\":{\"wall_ns\":1000,"
    "\"cpu_user_ns\":2000,\"cpu_system_ns\":3000,\"memory_peak_bytes\":4096}}";

static void test_bodies_build_no_dictionary(void **state)
{
	struct zframe *z = NULL;
	char *out = NULL, *back = NULL;
	size_t n = 0, m = 0;

	(void)state;
	assert_int_equal(zframe_new(0, &z), 0);
	assert_int_equal(zframe_tables_bytes(z), 0);
	assert_int_equal(zframe_body_pack(z, rec, sizeof(rec) - 1, &out, &n), 0);
	assert_int_equal(zframe_tables_bytes(z), 0);
	assert_int_equal(zframe_body_unpack(out, n, 1 << 20, &back, &m), 0);
	assert_int_equal(m, sizeof(rec) - 1);
	assert_memory_equal(back, rec, m);
	free(out);
	free(back);
	zframe_free(z);
}

static void test_frames_build_it_at_first_use(void **state)
{
	struct zframe *z = NULL;
	size_t cap = zframe_bound(sizeof(rec));
	char *out = malloc(cap), back[sizeof(rec)];
	ssize_t k, u;
	size_t after_pack;

	(void)state;
	assert_non_null(out);
	assert_int_equal(zframe_new(0, &z), 0);
	k = zframe_pack(z, rec, sizeof(rec) - 1, out, cap);
	assert_true(k > 0 && (size_t)k < sizeof(rec) - 1);
	after_pack = zframe_tables_bytes(z);
	assert_true(after_pack > 0);
	/* the second frame reuses the tables */
	assert_int_equal(zframe_pack(z, rec, sizeof(rec) - 1, out, cap), k);
	assert_int_equal(zframe_tables_bytes(z), after_pack);
	u = zframe_unpack(z, ZFRAME_ENC_DICT1, out, (size_t)k, back, sizeof(back));
	assert_int_equal(u, sizeof(rec) - 1);
	assert_memory_equal(back, rec, sizeof(rec) - 1);
	assert_true(zframe_tables_bytes(z) > after_pack);
	assert_int_equal(zframe_unpack(z, 7, out, (size_t)k, back, sizeof(back)), -EINVAL);
	free(out);
	zframe_free(z);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bodies_build_no_dictionary),
	    cmocka_unit_test(test_frames_build_it_at_first_use),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
