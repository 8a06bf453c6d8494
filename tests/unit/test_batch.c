/* SPDX-License-Identifier: MIT */
/* NDJSON batch parser: line rules, error lines, limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "accounting/batch.h"
#include "common/macro.h"

#define REC(id)                                                                                    \
	"{\"schema\":\"corral.record/v1\",\"record_id\":\"" id "\",\"type\":\"task.sample\","      \
	"\"time\":\"2026-12-02T15:14:05Z\",\"node\":\"n\",\"task\":{\"id\":\"t\"},"                \
	"\"usage\":{\"wall_ns\":1}}"

struct seen {
	size_t n, ok, bad;
	char ids[8][ACCT_ID_MAX];
	char errs[8][128];
	size_t stop_at;
};

static int cb(size_t index, struct acct_record *r, const char *error, void *userdata)
{
	struct seen *s = userdata;

	assert_int_equal(index, s->n);
	if (r) {
		assert_null(error);
		snprintf(s->ids[index % 8], ACCT_ID_MAX, "%s", r->record_id);
		s->ok++;
	} else {
		assert_non_null(error);
		snprintf(s->errs[index % 8], 128, "%s", error);
		s->bad++;
	}
	s->n++;
	return s->stop_at && s->n == s->stop_at ? -ECANCELED : 0;
}

static void test_lines(void **state)
{
	static const char buf[] = REC("a") "\n" REC("b") "\r\n{bad\n" REC("c") "\r\n";
	struct seen s = {0};

	assert_int_equal(acct_batch_count_lines(buf, strlen(buf)), 4);
	assert_int_equal(acct_batch_parse(buf, strlen(buf), 10, cb, &s), 4);
	assert_int_equal(s.ok, 3);
	assert_int_equal(s.bad, 1);
	assert_string_equal(s.ids[0], "a");
	assert_string_equal(s.ids[1], "b");
	assert_string_equal(s.ids[3], "c");
	assert_non_null(strstr(s.errs[2], "invalid JSON"));
}

static void test_no_trailing_newline_and_empty(void **state)
{
	static const char buf[] = REC("a") "\n\n" REC("b");
	struct seen s = {0};

	assert_int_equal(acct_batch_parse(buf, strlen(buf), 10, cb, &s), 3);
	assert_int_equal(s.ok, 2);
	assert_string_equal(s.errs[1], "empty line");
	memset(&s, 0, sizeof(s));
	assert_int_equal(acct_batch_parse("", 0, 10, cb, &s), 0);
	assert_int_equal(s.n, 0);
}

static void test_limits(void **state)
{
	static const char buf[] = REC("a") "\n" REC("b") "\n" REC("c") "\n";
	struct seen s = {0};
	size_t n = ACCT_RECORD_MAX_BYTES + 10;
	_cleanup_free_ char *big = malloc(n + 1);

	assert_int_equal(acct_batch_parse(buf, strlen(buf), 2, cb, &s), -E2BIG);
	assert_int_equal(s.n, 0);
	s.stop_at = 2;
	assert_int_equal(acct_batch_parse(buf, strlen(buf), 3, cb, &s), -ECANCELED);
	assert_int_equal(s.n, 2);

	assert_non_null(big);
	memset(big, 'x', n);
	big[n] = '\n';
	memset(&s, 0, sizeof(s));
	assert_int_equal(acct_batch_parse(big, n + 1, 3, cb, &s), 1);
	assert_non_null(strstr(s.errs[0], "line exceeds"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lines),
	    cmocka_unit_test(test_no_trailing_newline_and_empty),
	    cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
