/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of collector/audit_query.c: every parameter of the shared CLI/API filter (values
 * and the error naming the parameter), the cursor round trip, and paging over a SQLite store.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "collector/audit_query.h"
#include "common/clock.h"

static void expect_bad(const char *key, const char *value, const char *in_err)
{
	struct coll_audit_filter f = {0};
	char err[256] = "";

	assert_int_equal(coll_audit_filter_set(&f, key, value, err, sizeof(err)), -EINVAL);
	if (!strstr(err, in_err))
		fail_msg("%s=%s: error '%s' lacks '%s'", key, value ?: "(null)", err, in_err);
}

static void test_filter_values(void **state)
{
	struct coll_audit_filter f = {0};
	struct coll_query q;
	char err[256];
	uint64_t ns;

	(void)state;
	assert_int_equal(coll_audit_filter_set(&f, "node", "n1", err, sizeof(err)), 0);
	assert_int_equal(coll_audit_filter_set(&f, "task", "t-7", err, sizeof(err)), 0);
	assert_int_equal(coll_audit_filter_set(&f, "job", "j9", err, sizeof(err)), 0);
	assert_int_equal(coll_audit_filter_set(&f, "user", "alice", err, sizeof(err)), 0);
	assert_int_equal(coll_audit_filter_set(&f, "type", "connect", err, sizeof(err)), 0);
	assert_int_equal(
	    coll_audit_filter_set(&f, "from", "2026-03-01T00:00:00Z", err, sizeof(err)), 0);
	assert_int_equal(
	    coll_audit_filter_set(&f, "to", "2026-03-01T00:00:01.5Z", err, sizeof(err)), 0);
	assert_int_equal(coll_audit_filter_set(&f, "limit", "100000", err, sizeof(err)), 0);
	assert_string_equal(f.type, "audit.connect");
	assert_int_equal(parse_rfc3339("2026-03-01T00:00:00Z", &ns), 0);
	assert_true(f.from_ns == ns);
	assert_true(f.to_ns == ns + 1500000000ULL);
	assert_int_equal(f.limit, 100000);

	coll_audit_filter_query(&f, &q);
	assert_string_equal(q.node, "n1");
	assert_string_equal(q.task_id, "t-7");
	assert_string_equal(q.job, "j9");
	assert_string_equal(q.user, "alice");
	assert_string_equal(q.type, "audit.connect");
	assert_int_equal(q.audit, COLL_QUERY_AUDIT_ONLY);
	assert_null(q.after_id);
	assert_int_equal(q.limit, 0); /* coll_audit_query adds the page size */
	for (const char *const *t = (const char *const[]){"exec", "syscall", "limit", "lost", NULL};
	     *t; t++)
		assert_int_equal(coll_audit_filter_set(&f, "type", *t, err, sizeof(err)), 0);
	assert_string_equal(f.type, "audit.lost");
}

static void test_filter_errors(void **state)
{
	struct coll_audit_filter f = {0};
	char err[256];

	(void)state;
	expect_bad("limit", "0", "limit: expected 1..100000, got '0'");
	expect_bad("limit", "100001", "limit: expected 1..100000");
	expect_bad("limit", "-1", "limit:");
	expect_bad("limit", NULL, "limit:");
	expect_bad(
	    "type", "open",
	    "type: expected exec, connect, syscall, limit, lost, summary or gap, got 'open'");
	expect_bad("type", "audit.exec", "type:");
	expect_bad("from", "yesterday", "from: expected an RFC 3339 UTC time");
	expect_bad("to", "2026-03-01T00:00:00+02:00", "to: expected an RFC 3339");
	expect_bad("to", "2026-03-01", "to:");
	expect_bad("task", "", "task: expected a name");
	expect_bad("user", NULL, "user:");
	expect_bad("after", "12.zz", "after: expected a cursor");
	expect_bad("after", "12", "after:");
	expect_bad("after", "x.6e31", "after:");
	expect_bad("after", "12.6e3", "after:");
	expect_bad("bogus", "1", "unknown parameter 'bogus'");

	/* an empty range is an error of the parameter set last */
	assert_int_equal(
	    coll_audit_filter_set(&f, "from", "2026-03-02T00:00:00Z", err, sizeof(err)), 0);
	assert_int_equal(coll_audit_filter_set(&f, "to", "2026-03-02T00:00:00Z", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "to: must be later than from"));
	memset(&f, 0, sizeof(f));
	assert_int_equal(coll_audit_filter_set(&f, "to", "2026-03-01T00:00:00Z", err, sizeof(err)),
			 0);
	assert_int_equal(
	    coll_audit_filter_set(&f, "from", "2026-03-05T00:00:00Z", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "from: must be earlier than to"));
}

static void test_cursor(void **state)
{
	char buf[COLL_AUDIT_CURSOR_MAX], id[ACCT_ID_MAX], longid[ACCT_ID_MAX + 1];
	uint64_t t = 0;

	(void)state;
	assert_int_equal(
	    coll_audit_cursor_format(1772323200000000000ULL, "n1/boot&x=1 ?", buf, sizeof(buf)), 0);
	assert_null(strpbrk(buf, "/&=? %+")); /* safe in a query string as is */
	assert_int_equal(coll_audit_cursor_parse(buf, &t, id), 0);
	assert_true(t == 1772323200000000000ULL);
	assert_string_equal(id, "n1/boot&x=1 ?");
	memset(longid, 'a', ACCT_ID_MAX - 1);
	longid[ACCT_ID_MAX - 1] = 0;
	assert_int_equal(coll_audit_cursor_format(1, longid, buf, sizeof(buf)), 0);
	assert_int_equal(coll_audit_cursor_parse(buf, &t, id), 0);
	assert_string_equal(id, longid);
	assert_int_equal(coll_audit_cursor_format(1, longid, buf, 20), -ENOBUFS);
	assert_int_equal(coll_audit_cursor_format(1, "", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(coll_audit_cursor_parse("1.00", &t, id), -EINVAL); /* NUL byte */
	assert_int_equal(coll_audit_cursor_parse(".61", &t, id), -EINVAL);
	assert_int_equal(coll_audit_cursor_parse("1.", &t, id), -EINVAL);
	assert_int_equal(coll_audit_cursor_parse("1.6A", &t, id), -EINVAL);
}

/* ---- paging over a SQLite store ---- */

struct collect {
	char ids[64][ACCT_ID_MAX];
	size_t n;
};

static int collect_cb(const struct coll_row *row, void *ud)
{
	struct collect *c = ud;

	assert_true(c->n < 64);
	snprintf(c->ids[c->n++], ACCT_ID_MAX, "%s", row->record_id);
	return 0;
}

static void test_query_paging(void **state)
{
	char dir[] = "/tmp/test_audit_query.XXXXXX", uri[128], err[256],
	     next[COLL_AUDIT_CURSOR_MAX];
	struct acct_record recs[12];
	struct coll_item items[12];
	char *json[12];
	struct coll_store *st;
	struct coll_audit_filter f = {.limit = 5};
	struct collect all = {0};
	size_t pages = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(uri, sizeof(uri), "sqlite:%s/c.db", dir);
	assert_int_equal(coll_store_open(uri, 0, &st, err, sizeof(err)), 0);
	for (size_t i = 0; i < 12; i++) {
		struct acct_record *r = &recs[i];
		size_t len;

		memset(r, 0, sizeof(*r));
		/* pairs of records share a timestamp: the cursor must order by record_id too */
		snprintf(r->record_id, sizeof(r->record_id), "n1-%02zu", 11 - i);
		r->type = i == 3 ? ACCT_TASK_END : ACCT_AUDIT_EXEC;
		r->time_ns = 1772323200000000000ULL + (i / 2) * 1000;
		r->node = strdup("n1");
		snprintf(r->task.id, sizeof(r->task.id), "t%zu", i);
		r->task.user = strdup(i % 2 ? "bob" : "alice");
		r->exit.status = ACCT_EXIT_EXITED;
		if (r->type == ACCT_AUDIT_EXEC) {
			r->event = json_pack("{s:s}", "path", "/bin/true");
			assert_int_equal(acct_record_compute_hash(r), 0);
		}
		assert_int_equal(acct_record_encode(r, &json[i], &len), 0);
		items[i] = (struct coll_item){.rec = r, .json = json[i], .json_len = len};
	}
	assert_int_equal(coll_store_insert_batch(st, items, 12), 0);
	do {
		assert_int_equal(coll_audit_query(st, &f, collect_cb, &all, next, sizeof(next)), 0);
		pages++;
		if (next[0]) {
			char e[128];

			assert_int_equal(coll_audit_filter_set(&f, "after", next, e, sizeof(e)), 0);
		}
	} while (next[0] && pages < 10);
	assert_int_equal(pages, 3); /* 5 + 5 + 1: the task.end record is not an audit record */
	assert_int_equal(all.n, 11);
	for (size_t i = 1; i < all.n; i++) {
		/* (time, record_id) order: within a timestamp the lower id first */
		size_t a = 11 - (size_t)atoi(all.ids[i - 1] + 3),
		       b = 11 - (size_t)atoi(all.ids[i] + 3);

		assert_true(a / 2 < b / 2 ||
			    (a / 2 == b / 2 && strcmp(all.ids[i - 1], all.ids[i]) < 0));
	}
	/* the user filter through the store */
	memset(&f, 0, sizeof(f));
	memset(&all, 0, sizeof(all));
	assert_int_equal(coll_audit_filter_set(&f, "user", "bob", err, sizeof(err)), 0);
	assert_int_equal(coll_audit_query(st, &f, collect_cb, &all, next, sizeof(next)), 0);
	assert_int_equal(all.n, 5); /* odd i except 3 */
	assert_string_equal(next, "");
	coll_store_close(st);
	for (size_t i = 0; i < 12; i++) {
		free(json[i]);
		acct_record_clear(&recs[i]);
	}
	snprintf(err, sizeof(err), "rm -rf '%s'", dir);
	assert_int_equal(system(err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_filter_values),
	    cmocka_unit_test(test_filter_errors),
	    cmocka_unit_test(test_cursor),
	    cmocka_unit_test(test_query_paging),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
