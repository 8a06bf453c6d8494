/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of collector/audit_chain.c: generated chains (intact, one record edited, one
 * deleted, out-of-order storage) verified as arrays and through a real SQLite store.
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
#include <sqlite3.h>

#include "collector/audit_chain.h"

#define N 8

static void make_chain(struct acct_record *recs, size_t n, const char *node)
{
	const char *prev = "";

	for (size_t i = 0; i < n; i++) {
		struct acct_record *r = &recs[i];

		memset(r, 0, sizeof(*r));
		snprintf(r->record_id, sizeof(r->record_id), "%s/boot/%zu", node, i);
		r->type = i % 2 ? ACCT_AUDIT_CONNECT : ACCT_AUDIT_EXEC;
		/* Timestamps deliberately not in chain order for the last two. */
		r->time_ns = 1764000000000000000ULL + (i >= n - 2 ? n * 2 - i : i) * 1000;
		r->node = strdup(node);
		snprintf(r->task.id, sizeof(r->task.id), "t%zu", i / 3);
		r->task.user = strdup("alice");
		r->event = i % 2
			       ? json_pack("{s:s,s:s,s:i,s:s}", "family", "inet", "address",
					   "10.0.0.1", "port", (int)(1000 + i), "verdict", "allow")
			       : json_pack("{s:s,s:[s]}", "path", "/usr/bin/ls", "argv", "ls");
		snprintf(r->prev_hash, sizeof(r->prev_hash), "%s", prev);
		assert_int_equal(acct_record_compute_hash(r), 0);
		prev = r->hash;
	}
}

static void free_chain(struct acct_record *recs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		acct_record_clear(&recs[i]);
}

static void test_intact(void **state)
{
	struct acct_record recs[N];
	size_t bad = 99;
	char why[256] = "";

	make_chain(recs, N, "n1");
	assert_int_equal(coll_chain_verify(recs, N, &bad, why, sizeof(why)), 0);
	assert_int_equal(bad, 99);
	/* A range starting mid-chain is intact too. */
	assert_int_equal(coll_chain_verify(recs + 3, N - 3, &bad, why, sizeof(why)), 0);
	assert_int_equal(coll_chain_verify(recs, 0, &bad, why, sizeof(why)), 0);
	free_chain(recs, N);
}

static void test_edited(void **state)
{
	struct acct_record recs[N];
	size_t bad = 99;
	char why[256] = "";

	make_chain(recs, N, "n1");
	json_object_set_new(recs[4].event, "path", json_string("/usr/bin/rm"));
	assert_int_equal(coll_chain_verify(recs, N, &bad, why, sizeof(why)), -EBADMSG);
	assert_int_equal(bad, 4);
	assert_non_null(strstr(why, "n1/boot/4"));
	assert_non_null(strstr(why, "hash does not match"));

	/* Edited and re-hashed: the record itself is consistent, the link after it breaks. */
	assert_int_equal(acct_record_compute_hash(&recs[4]), 0);
	assert_int_equal(coll_chain_verify(recs, N, &bad, why, sizeof(why)), -EBADMSG);
	assert_int_equal(bad, 5);
	assert_non_null(strstr(why, "n1/boot/5"));
	assert_non_null(strstr(why, "previous record n1/boot/4"));
	free_chain(recs, N);
}

static void test_deleted(void **state)
{
	struct acct_record recs[N], tmp;
	size_t bad = 99;
	char why[256] = "";

	make_chain(recs, N, "n1");
	tmp = recs[3];
	memmove(&recs[3], &recs[4], (N - 4) * sizeof(recs[0]));
	assert_int_equal(coll_chain_verify(recs, N - 1, &bad, why, sizeof(why)), -EBADMSG);
	assert_int_equal(bad, 3);
	assert_non_null(strstr(why, "n1/boot/4"));
	assert_non_null(strstr(why, "previous record n1/boot/2"));
	recs[N - 1] = tmp;
	free_chain(recs, N);
}

static void test_not_audit(void **state)
{
	struct acct_record recs[2];
	size_t bad = 0;

	make_chain(recs, 2, "n1");
	recs[1].type = ACCT_TASK_END;
	assert_int_equal(coll_chain_verify(recs, 2, &bad, NULL, 0), -EINVAL);
	recs[1].type = ACCT_AUDIT_EXEC;
	free_chain(recs, 2);
}

/* ---- through the SQLite store ---- */

struct fx {
	char dir[64], db[128], uri[160];
	struct coll_store *store;
	struct acct_record recs[N];
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	struct coll_item items[N];
	char *json[N], err[256];

	strcpy(fx->dir, "/tmp/test_audit_chain.XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->db, sizeof(fx->db), "%s/c.db", fx->dir);
	snprintf(fx->uri, sizeof(fx->uri), "sqlite:%s", fx->db);
	assert_int_equal(coll_store_open(fx->uri, 0, &fx->store, err, sizeof(err)), 0);
	make_chain(fx->recs, N, "n1");
	for (size_t i = 0; i < N; i++) {
		size_t len;

		assert_int_equal(acct_record_encode(&fx->recs[i], &json[i], &len), 0);
		items[i] =
		    (struct coll_item){.rec = &fx->recs[i], .json = json[i], .json_len = len};
	}
	assert_int_equal(coll_store_insert_batch(fx->store, items, N), 0);
	for (size_t i = 0; i < N; i++)
		free(json[i]);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	char p[200];

	coll_store_close(fx->store);
	free_chain(fx->recs, N);
	snprintf(p, sizeof(p), "rm -rf '%s'", fx->dir);
	if (system(p) != 0)
		return -1;
	free(fx);
	return 0;
}

static void sql(struct fx *fx, const char *stmt)
{
	sqlite3 *db;

	assert_int_equal(sqlite3_open(fx->db, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, stmt, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_changes(db), 1);
	sqlite3_close(db);
}

static void test_store_intact(void **state)
{
	struct fx *fx = *state;
	struct coll_chain_result res;

	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 0, &res), 0);
	assert_true(res.intact);
	assert_int_equal(res.checked, N);
	assert_string_equal(res.first_bad, "");
	assert_int_equal(coll_chain_verify_node(fx->store, "other", 0, &res), 0);
	assert_true(res.intact);
	assert_int_equal(res.checked, 0);
	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 4, &res), -E2BIG);
}

static void test_store_edited_row(void **state)
{
	struct fx *fx = *state;
	struct coll_chain_result res;

	sql(fx, "UPDATE records SET body = replace(body, '10.0.0.1', '10.6.6.6')"
		" WHERE record_id = 'n1/boot/5'");
	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 0, &res), 0);
	assert_false(res.intact);
	assert_string_equal(res.first_bad, "n1/boot/5");
	assert_non_null(strstr(res.why, "hash does not match"));
}

static void test_store_deleted_row(void **state)
{
	struct fx *fx = *state;
	struct coll_chain_result res;

	sql(fx, "DELETE FROM records WHERE record_id = 'n1/boot/2'");
	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 0, &res), 0);
	assert_false(res.intact);
	assert_int_equal(res.checked, N - 1);
	assert_string_equal(res.first_bad, "n1/boot/3");
	assert_non_null(strstr(res.why, "previous record n1/boot/1"));
}

static void test_store_deleted_first(void **state)
{
	struct fx *fx = *state;
	struct coll_chain_result res;

	sql(fx, "DELETE FROM records WHERE record_id = 'n1/boot/0'");
	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 0, &res), 0);
	assert_false(res.intact);
	assert_string_equal(res.first_bad, "n1/boot/1");
	assert_non_null(strstr(res.why, "does not start a chain"));
}

static void test_store_garbled_row(void **state)
{
	struct fx *fx = *state;
	struct coll_chain_result res;

	sql(fx, "UPDATE records SET body = substr(body, 1, 40) WHERE record_id = 'n1/boot/6'");
	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 0, &res), 0);
	assert_false(res.intact);
	assert_string_equal(res.first_bad, "n1/boot/6");
	assert_non_null(strstr(res.why, "does not decode"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_intact),
	    cmocka_unit_test(test_edited),
	    cmocka_unit_test(test_deleted),
	    cmocka_unit_test(test_not_audit),
	    cmocka_unit_test_setup_teardown(test_store_intact, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_store_edited_row, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_store_deleted_row, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_store_deleted_first, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_store_garbled_row, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
