/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of collector/audit_chain.c: generated chains (intact, one record edited, one
 * deleted, out-of-order storage) verified as arrays and through a real SQLite store, and the
 * check at ingest (restarted collector, resend, lost / edited record, restarted chain).
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

/* Records 0..n) of a chain whose records tail-2 and tail-1 have swapped timestamps. */
static void make_chain_tail(struct acct_record *recs, size_t n, const char *node, size_t tail)
{
	const char *prev = "";

	for (size_t i = 0; i < n; i++) {
		struct acct_record *r = &recs[i];

		memset(r, 0, sizeof(*r));
		snprintf(r->record_id, sizeof(r->record_id), "%s/boot/%zu", node, i);
		r->type = i % 2 ? ACCT_AUDIT_CONNECT : ACCT_AUDIT_EXEC;
		/* Timestamps deliberately not in chain order for the last two. */
		r->time_ns =
		    1764000000000000000ULL + (i >= tail - 2 && i < tail ? tail * 2 - i : i) * 1000;
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

static void make_chain(struct acct_record *recs, size_t n, const char *node)
{
	make_chain_tail(recs, n, node, n);
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

/* Record i of the stored chain taken out of records and kept as a conflict instead (its id
 * stored with another body), its received body possibly edited. */
static void add_conflict(struct fx *fx, const struct acct_record *rec, bool edit)
{
	char *json, sha[ACCT_HASH_HEX];
	size_t len;

	assert_int_equal(acct_record_encode(rec, &json, &len), 0);
	if (edit) {
		char *p = strstr(json, "10.0.0.1");

		assert_non_null(p);
		p[7] = '9';
	}
	assert_int_equal(acct_sha256_hex(json, len, sha), 0);
	assert_int_equal(coll_store_conflict_add(
			     fx->store, &(struct coll_conflict){.record_id = rec->record_id,
								.node = "n1",
								.detected = "2026-01-01T00:00:00Z",
								.stored_body = "{}",
								.received_body = json,
								.received_sha256 = sha}),
			 1);
	free(json);
}

static void hold_as_conflict(struct fx *fx, size_t i, bool edit)
{
	char q[256];

	snprintf(q, sizeof(q), "DELETE FROM records WHERE record_id = '%s'", fx->recs[i].record_id);
	sql(fx, q);
	add_conflict(fx, &fx->recs[i], edit);
}

static void test_store_held_conflict(void **state)
{
	struct fx *fx = *state;
	struct coll_chain_result res;

	hold_as_conflict(fx, 3, false);
	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 0, &res), 0);
	assert_true(res.intact);
	assert_int_equal(res.checked, N - 1);
	assert_int_equal(res.held, 1);
	assert_string_equal(res.held_ids, "n1/boot/3");
	/* a stored record missing after it is still a break */
	sql(fx, "DELETE FROM records WHERE record_id = 'n1/boot/5'");
	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 0, &res), 0);
	assert_false(res.intact);
	/* the record after the gap in store order: 7 (6 and 7 are stored out of time order) */
	assert_string_equal(res.first_bad, "n1/boot/7");
	assert_int_equal(res.held, 1);
}

static void test_store_held_edited(void **state)
{
	struct fx *fx = *state;
	struct coll_chain_result res;

	/* the kept body does not match its hash: not a link, the gap is a break */
	hold_as_conflict(fx, 3, true);
	assert_int_equal(coll_chain_verify_node(fx->store, "n1", 0, &res), 0);
	assert_false(res.intact);
	assert_string_equal(res.first_bad, "n1/boot/4");
	assert_int_equal(res.held, 0);
}

/* ---- verification at ingest ---- */

struct seen {
	size_t n;
	char ids[8][ACCT_ID_MAX];
	enum coll_break_kind kinds[8];
	bool listed[8];
};

static void on_break(const struct coll_chain_break *b, void *ud)
{
	struct seen *s = ud;

	assert_true(s->n < 8);
	snprintf(s->ids[s->n], ACCT_ID_MAX, "%s", b->record_id);
	s->kinds[s->n] = b->kind;
	s->listed[s->n++] = b->listed;
}

/* Insert recs[from..to) except skip as one batch, then run the ingest check on it. */
static void ingest(struct fx *fx, struct coll_chain_heads *h, struct acct_record *recs, size_t from,
		   size_t to, size_t skip, struct seen *seen, struct coll_chain_ingest_stats *st)
{
	struct coll_item items[16];
	char *json[16];
	size_t n = 0;

	for (size_t i = from; i < to; i++) {
		size_t len;

		if (i == skip)
			continue;
		assert_int_equal(acct_record_encode(&recs[i], &json[n], &len), 0);
		items[n] = (struct coll_item){.rec = &recs[i], .json = json[n], .json_len = len};
		n++;
	}
	assert_int_equal(coll_store_insert_batch(fx->store, items, n), 0);
	assert_int_equal(coll_chain_ingest(h, fx->store, items, n, on_break, seen, st), 0);
	for (size_t i = 0; i < n; i++)
		free(json[i]);
}

static int count_breaks(const struct coll_audit_break *b, void *ud)
{
	(void)b;
	(*(size_t *)ud)++;
	return 0;
}

static void test_ingest_continues_stored_chain(void **state)
{
	struct fx *fx = *state;
	struct acct_record recs[N + 6];
	struct coll_chain_heads *h;
	struct coll_chain_ingest_stats st;
	struct seen seen = {0};

	/* records 0..N-1 are stored by setup; a fresh head set is a restarted collector */
	make_chain_tail(recs, N + 6, "n1", N); /* continues the stored chain */
	assert_int_equal(coll_chain_heads_new(&h), 0);
	ingest(fx, h, recs, N, N + 3, SIZE_MAX, &seen, &st);
	assert_int_equal(seen.n, 0);
	assert_int_equal(st.checked, 3);
	assert_int_equal(st.lookups, 1); /* the first one's predecessor, from the store */
	/* the next batch links in memory */
	ingest(fx, h, recs, N + 3, N + 6, SIZE_MAX, &seen, &st);
	assert_int_equal(seen.n, 0);
	assert_int_equal(st.lookups, 0);
	/* a resend: duplicates are not checked, so not breaks */
	ingest(fx, h, recs, N + 1, N + 6, SIZE_MAX, &seen, &st);
	assert_int_equal(st.checked, 0);
	assert_int_equal(seen.n, 0);
	coll_chain_heads_free(h);
	free_chain(recs, N + 6);
}

/* A record held as a conflict links the next one at ingest; a lost one does not. */
static void test_ingest_held_link(void **state)
{
	struct fx *fx = *state;
	struct acct_record recs[N + 6];
	struct coll_chain_heads *h;
	struct coll_chain_ingest_stats st;
	struct seen seen = {0};

	make_chain_tail(recs, N + 6, "n1", N);
	add_conflict(fx, &recs[N], false);
	assert_int_equal(coll_chain_heads_new(&h), 0);
	ingest(fx, h, recs, N, N + 3, N, &seen, &st);
	assert_int_equal(st.checked, 2);
	assert_int_equal(seen.n, 0);
	ingest(fx, h, recs, N + 3, N + 6, N + 4, &seen, &st);
	assert_int_equal(seen.n, 1);
	assert_string_equal(seen.ids[0], "n1/boot/13");
	assert_int_equal(seen.kinds[0], COLL_BREAK_LINK);
	coll_chain_heads_free(h);
	free_chain(recs, N + 6);
}

static void test_ingest_breaks(void **state)
{
	struct fx *fx = *state;
	struct acct_record recs[N + 8];
	struct coll_chain_heads *h, *h2;
	struct coll_chain_ingest_stats st;
	struct seen seen = {0};
	size_t listed = 0;

	make_chain_tail(recs, N + 8, "n1", N);
	assert_int_equal(coll_chain_heads_new(&h), 0);
	/* N+1 lost on the way: N+2 does not link (flagged), N+3 links to N+2 */
	ingest(fx, h, recs, N, N + 4, N + 1, &seen, &st);
	assert_int_equal(st.checked, 3);
	assert_int_equal(st.breaks, 1);
	assert_int_equal(seen.n, 1);
	assert_string_equal(seen.ids[0], "n1/boot/10");
	assert_int_equal(seen.kinds[0], COLL_BREAK_LINK);
	assert_true(seen.listed[0]);
	/* edited in transit: its hash fails; the next record still links to the claimed hash */
	json_object_set_new(recs[N + 4].event, "path", json_string("/usr/bin/rm"));
	ingest(fx, h, recs, N + 4, N + 6, SIZE_MAX, &seen, &st);
	assert_int_equal(st.breaks, 1);
	assert_string_equal(seen.ids[1], "n1/boot/12");
	assert_int_equal(seen.kinds[1], COLL_BREAK_HASH);
	/* a new chain where one was going on: with the head known, and with it unknown */
	recs[N + 6].prev_hash[0] = 0;
	assert_int_equal(acct_record_compute_hash(&recs[N + 6]), 0);
	ingest(fx, h, recs, N + 6, N + 7, SIZE_MAX, &seen, &st);
	assert_int_equal(seen.kinds[2], COLL_BREAK_RESTART);
	assert_int_equal(coll_chain_heads_new(&h2), 0);
	recs[N + 7].prev_hash[0] = 0;
	assert_int_equal(acct_record_compute_hash(&recs[N + 7]), 0);
	ingest(fx, h2, recs, N + 7, N + 8, SIZE_MAX, &seen, &st);
	assert_int_equal(st.lookups, 1);
	assert_int_equal(seen.n, 4);
	assert_int_equal(seen.kinds[3], COLL_BREAK_RESTART);
	assert_string_equal(seen.ids[3], "n1/boot/15");
	assert_int_equal(coll_store_break_query(fx->store, "n1", 0, count_breaks, &listed), 0);
	assert_int_equal(listed, 4);
	listed = 0;
	assert_int_equal(coll_store_break_query(fx->store, "other", 0, count_breaks, &listed), 0);
	assert_int_equal(listed, 0);
	coll_chain_heads_free(h);
	coll_chain_heads_free(h2);
	free_chain(recs, N + 8);
}

static void test_ingest_new_node(void **state)
{
	struct fx *fx = *state;
	struct acct_record recs[4];
	struct coll_chain_heads *h;
	struct coll_chain_ingest_stats st;
	struct seen seen = {0};

	/* a node's very first batch starts its chain: no break, with or without a head */
	make_chain(recs, 4, "n2");
	assert_int_equal(coll_chain_heads_new(&h), 0);
	ingest(fx, h, recs, 0, 4, SIZE_MAX, &seen, &st);
	assert_int_equal(st.checked, 4);
	assert_int_equal(seen.n, 0);
	coll_chain_heads_free(h);
	free_chain(recs, 4);
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
	    cmocka_unit_test_setup_teardown(test_store_held_conflict, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_store_held_edited, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ingest_continues_stored_chain, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ingest_held_link, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ingest_breaks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ingest_new_node, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
