/* SPDX-License-Identifier: MIT */
/*
 * Record emission (agent/emit.c) without root: record ids, the audit chain, the group commit
 * and its order, the audit.gap of shed records, the state files removed after the flush. The
 * truth is read back from the spool's files (spool_peek, records decoded and their hashes
 * computed again), not from the agent's own figures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "accounting/spool.h"
#include "agent/agent.h"
#include "agent/emit.h"
#include "agent/state.h"
#include "common/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fixture {
	char dir[64];
	struct agent a;
	struct task t;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char spool_dir[128];
	struct spool_opts so = {.no_fsync = true};

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/corral-test-emit.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	f->a.cfg.node = "n1";
	snprintf(f->a.boot_id, sizeof(f->a.boot_id), "0123456789abcdef0123456789abcdef0123");
	f->a.cfg.state_dir = f->dir;
	assert_int_equal(state_init_counters(&f->a), 0);
	snprintf(spool_dir, sizeof(spool_dir), "%s/spool", f->dir);
	so.dir = spool_dir;
	assert_int_equal(spool_open(&so, &f->a.spool), 0);
	f->t.agent = &f->a;
	snprintf(f->t.id, sizeof(f->t.id), "t-6b14f6c3-661f0a219d7ac");
	spec_init(&f->t.spec);
	f->t.user = "alice";
	f->t.uid = 1000;
	f->t.start_ns = 1765000000000000000ULL;
	f->t.status = ACCT_EXIT_EXITED;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	spool_close(f->a.spool);
	free(f->a.pend);
	free(f->a.unlink_stems);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static int emit_type(struct fixture *f, enum acct_type type)
{
	struct acct_record r;
	int rr;

	task_fill_record(&f->a, &f->t, type, &r);
	if (acct_type_is_audit(type))
		r.event = json_pack("{s:s}", "path", "/bin/true");
	rr = agent_emit_record(&f->a, &r);
	acct_record_clear(&r);
	return rr;
}

/* What the spool holds, in order: the records decoded. */
struct read_back {
	struct acct_record r[32];
	size_t n;
};

static int collect(uint64_t seq, const void *data, size_t len, void *ud)
{
	struct read_back *rb = ud;
	char err[128];

	(void)seq;
	assert_true(rb->n < 32);
	assert_int_equal(acct_record_decode(data, len, &rb->r[rb->n], err, sizeof(err)), 0);
	rb->n++;
	return 0;
}

static void read_spool(struct fixture *f, struct read_back *rb)
{
	memset(rb, 0, sizeof(*rb));
	assert_true(spool_peek(f->a.spool, 1, 32, SIZE_MAX, collect, rb) >= 0);
}

static void read_back_clear(struct read_back *rb)
{
	for (size_t i = 0; i < rb->n; i++)
		acct_record_clear(&rb->r[i]);
}

/* task.start and task.end ids come from the task id (a re-emission deduplicates); others are
 * the next of the node's sequence, never the same twice. */
static void test_ids(void **state)
{
	struct fixture *f = *state;
	struct read_back rb;

	assert_int_equal(emit_type(f, ACCT_TASK_START), 0);
	assert_int_equal(emit_type(f, ACCT_TASK_START), 0); /* again, after a restart */
	assert_int_equal(emit_type(f, ACCT_TASK_SAMPLE), 0);
	assert_int_equal(emit_type(f, ACCT_TASK_SAMPLE), 0);
	assert_int_equal(emit_type(f, ACCT_TASK_END), 0);
	agent_flush_records(&f->a);
	read_spool(f, &rb);
	assert_int_equal(rb.n, 5);
	/* billing first (start, start, end), then the samples */
	assert_int_equal(rb.r[0].type, ACCT_TASK_START);
	assert_string_equal(rb.r[0].record_id, "n1/t-6b14f6c3-661f0a219d7ac/start");
	assert_string_equal(rb.r[1].record_id, rb.r[0].record_id);
	assert_int_equal(rb.r[2].type, ACCT_TASK_END);
	assert_string_equal(rb.r[2].record_id, "n1/t-6b14f6c3-661f0a219d7ac/end");
	assert_int_equal(rb.r[3].type, ACCT_TASK_SAMPLE);
	assert_int_equal(rb.r[4].type, ACCT_TASK_SAMPLE);
	assert_string_not_equal(rb.r[3].record_id, rb.r[4].record_id);
	/* the sequence's ids name the node's instance */
	assert_non_null(strstr(rb.r[3].record_id, f->a.instance_id));
	assert_string_equal(rb.r[0].task.id, f->t.id);
	assert_string_equal(rb.r[0].task.user, "alice");
	read_back_clear(&rb);
}

/* Audit records are chained: each prev_hash is the hash before it, each hash is the record's
 * own (computed again here); the head is the last one. */
static void test_chain(void **state)
{
	struct fixture *f = *state;
	struct read_back rb;
	char prev[ACCT_HASH_HEX] = "";

	assert_int_equal(emit_type(f, ACCT_AUDIT_EXEC), 0);
	assert_int_equal(emit_type(f, ACCT_TASK_SAMPLE), 0);
	assert_int_equal(emit_type(f, ACCT_AUDIT_EXEC), 0);
	assert_int_equal(emit_type(f, ACCT_AUDIT_CONNECT), 0);
	/* nothing in the spool before the loop iteration's flush */
	read_spool(f, &rb);
	assert_int_equal(rb.n, 0);
	agent_flush_records(&f->a);
	read_spool(f, &rb);
	assert_int_equal(rb.n, 4);
	for (size_t i = 0; i < 3; i++) {
		struct acct_record *r = &rb.r[i];
		char hash[ACCT_HASH_HEX];

		assert_true(acct_type_is_audit(r->type));
		assert_string_equal(r->prev_hash, prev);
		memcpy(hash, r->hash, sizeof(hash));
		assert_int_equal(acct_record_compute_hash(r), 0);
		assert_string_equal(r->hash, hash);
		memcpy(prev, hash, sizeof(prev));
	}
	assert_string_equal(f->a.audit_head, prev);
	assert_int_equal(rb.r[3].type, ACCT_TASK_SAMPLE); /* samples last */
	read_back_clear(&rb);
}

/* Records shed (the spool refused them) are declared by an audit.gap chained ahead of the next
 * audit record that fits: the chain has no break, the gap says how many and of which task. */
static void test_gap(void **state)
{
	struct fixture *f = *state;
	struct acct_record shed;
	struct read_back rb;
	json_t *ev;

	assert_int_equal(emit_type(f, ACCT_AUDIT_EXEC), 0);
	agent_flush_records(&f->a);
	task_fill_record(&f->a, &f->t, ACCT_AUDIT_CONNECT, &shed);
	agent_gap_note(&f->a, &shed, 3);
	acct_record_clear(&shed);
	assert_int_equal(f->a.stats.audit_shed, 3);
	assert_int_equal(emit_type(f, ACCT_AUDIT_EXEC), 0);
	agent_flush_records(&f->a);
	assert_int_equal(f->a.gap.count, 0);
	assert_int_equal(f->a.stats.audit_gaps, 1);
	read_spool(f, &rb);
	assert_int_equal(rb.n, 3);
	assert_int_equal(rb.r[1].type, ACCT_AUDIT_GAP);
	ev = rb.r[1].event;
	assert_int_equal(json_integer_value(json_object_get(ev, "shed")), 3);
	assert_int_equal(
	    json_integer_value(json_object_get(json_object_get(ev, "by_type"),
					       acct_type_to_string(ACCT_AUDIT_CONNECT))),
	    3);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(ev, "tasks"), f->t.id)),
			 3);
	assert_string_equal(rb.r[1].prev_hash, rb.r[0].hash);
	assert_string_equal(rb.r[2].prev_hash, rb.r[1].hash);
	assert_int_equal(rb.r[2].type, ACCT_AUDIT_EXEC);
	read_back_clear(&rb);
}

static bool exists(const char *dir, const char *name)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

/* An ended task's live files go once the flush that spools its end record is done. */
static void test_files_after_flush(void **state)
{
	struct fixture *f = *state;
	char path[256];

	state_task_path(&f->a, &f->t, "tasks", ".json", path, sizeof(path));
	assert_int_equal(write_file_replace(path, "{}", 2, 0600), 0);
	state_task_path(&f->a, &f->t, "tasks", ".exit", path, sizeof(path));
	assert_int_equal(write_file_replace(path, "x", 1, 0600), 0);
	assert_int_equal(emit_type(f, ACCT_TASK_END), 0);
	state_remove_task_after_flush(&f->a, &f->t);
	assert_true(exists(f->dir, "tasks/t-6b14f6c3-661f0a219d7ac.json"));
	assert_true(exists(f->dir, "tasks/t-6b14f6c3-661f0a219d7ac.exit"));
	agent_flush_records(&f->a);
	assert_false(exists(f->dir, "tasks/t-6b14f6c3-661f0a219d7ac.json"));
	assert_false(exists(f->dir, "tasks/t-6b14f6c3-661f0a219d7ac.exit"));
	assert_int_equal(f->a.n_unlink, 0);
}

/* Without a spool (accounting off) records are not queued, but the chain still moves. */
static void test_no_spool(void **state)
{
	struct fixture *f = *state;
	char head[ACCT_HASH_HEX];

	spool_close(f->a.spool);
	f->a.spool = NULL;
	assert_int_equal(emit_type(f, ACCT_AUDIT_EXEC), 0);
	assert_int_equal(f->a.n_pend, 0);
	assert_int_equal(strlen(f->a.audit_head), ACCT_HASH_HEX - 1);
	memcpy(head, f->a.audit_head, sizeof(head));
	assert_int_equal(emit_type(f, ACCT_AUDIT_EXEC), 0);
	assert_string_not_equal(f->a.audit_head, head);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_ids, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_chain, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_gap, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_files_after_flush, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_spool, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
