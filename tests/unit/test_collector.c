/* SPDX-License-Identifier: MIT */
/* Collector: tokens file parsing, SQLite store idempotency, rollup sums. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "collector/pgcopy.h"
#include "collector/server.h"
#include "collector/store.h"
#include "collector/tokens.h"
#include "common/macro.h"

#define TOK_A "aaaaaaaaaaaaaaaa1"
#define TOK_B "bbbbbbbbbbbbbbbb2"

static int parse_str(const char *s, struct coll_tokens *t, char *err, size_t errlen)
{
	return coll_tokens_parse(s, strlen(s), t, err, errlen);
}

static void test_tokens_ok(void **state)
{
	struct coll_tokens t = {0};
	char err[256] = "";
	const struct coll_token *k;

	assert_int_equal(parse_str("# comment\n\nnode n1 " TOK_A "\r\n  reader ops " TOK_B "\n", &t,
				   err, sizeof(err)),
			 0);
	assert_int_equal(t.n, 2);
	k = coll_tokens_find(&t, TOK_A, strlen(TOK_A));
	assert_non_null(k);
	assert_int_equal(k->role, COLL_ROLE_NODE);
	assert_string_equal(k->name, "n1");
	k = coll_tokens_find(&t, TOK_B, strlen(TOK_B));
	assert_non_null(k);
	assert_int_equal(k->role, COLL_ROLE_READER);
	/* prefixes, extensions and other tokens do not match */
	assert_null(coll_tokens_find(&t, TOK_A, strlen(TOK_A) - 1));
	assert_null(coll_tokens_find(&t, TOK_A "x", strlen(TOK_A) + 1));
	assert_null(coll_tokens_find(&t, "", 0));
	coll_tokens_free(&t);
}

/* A fleet's tokens file: 20,000 tokens parse at once (the duplicate check is not quadratic),
 * each is found with its own name, a token one character off is not, and a token given twice
 * among them is named by its second line. */
static void test_tokens_many(void **state)
{
	enum { N = 20000 };
	struct coll_tokens t = {0};
	char *buf = malloc((size_t)N * 64 + 64), name[32], tok[48], err[256] = "";
	size_t len = 0;
	const struct coll_token *k;

	assert_non_null(buf);
	for (int i = 0; i < N; i++)
		len += (size_t)sprintf(buf + len, "node fn%05d tok-fleet-%05d-0123456789abcdef\n",
				       i, i);
	assert_int_equal(coll_tokens_parse(buf, len, &t, err, sizeof(err)), 0);
	assert_int_equal(t.n, N);
	for (int i = 0; i < N; i += 7) {
		snprintf(tok, sizeof(tok), "tok-fleet-%05d-0123456789abcdef", i);
		snprintf(name, sizeof(name), "fn%05d", i);
		k = coll_tokens_find(&t, tok, strlen(tok));
		assert_non_null(k);
		assert_string_equal(k->name, name);
		tok[strlen(tok) - 1] = 'g';
		assert_null(coll_tokens_find(&t, tok, strlen(tok)));
	}
	coll_tokens_free(&t);
	len += (size_t)sprintf(buf + len, "reader ops tok-fleet-12345-0123456789abcdef\n");
	assert_int_equal(coll_tokens_parse(buf, len, &t, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "line 20001: token already used by node 'fn12345'");
	free(buf);
}

static void expect_parse_error(const char *file, const char *msg)
{
	struct coll_tokens t = {0};
	char err[256] = "";

	assert_int_equal(parse_str(file, &t, err, sizeof(err)), -EINVAL);
	if (!strstr(err, msg))
		fail_msg("error '%s' does not contain '%s'", err, msg);
	assert_int_equal(t.n, 0);
}

static void test_tokens_errors(void **state)
{
	expect_parse_error("node n1 " TOK_A "\nadmin x " TOK_B "\n",
			   "line 2: unknown role 'admin'");
	expect_parse_error("node n1 short\n", "line 1: token must be 16..256 characters");
	expect_parse_error("node n1\n", "line 1: expected \"<role> <name> <token>\", got 2 fields");
	expect_parse_error("node n1 " TOK_A " extra\n", "got more than 3 fields");
	expect_parse_error("node n1 " TOK_A "\nnode n2 " TOK_A "\n",
			   "line 2: token already used by node 'n1'");
	expect_parse_error("# only comments\n\n", "no tokens defined");
	expect_parse_error("node n1 " TOK_A "\x01zz\n", "non-printable");
}

static void test_tokens_file_mode(void **state)
{
	char dir[] = "/tmp/test_collector.XXXXXX", path[256], err[256] = "";
	struct coll_tokens t = {0};
	FILE *f;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tokens", dir);
	f = fopen(path, "we");
	assert_non_null(f);
	fputs("node n1 " TOK_A "\n", f);
	fclose(f);
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(coll_tokens_load(path, &t, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "chmod 600"));
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(coll_tokens_load(path, &t, err, sizeof(err)), 0);
	assert_int_equal(t.n, 1);
	coll_tokens_free(&t);
	snprintf(err, sizeof(err), "%s/missing", dir);
	assert_int_equal(coll_tokens_load(err, &t, err, sizeof(err)), -ENOENT);
	unlink(path);
	rmdir(dir);
}

static void test_parse_listen(void **state)
{
	struct sockaddr_storage ss;
	unsigned len;

	assert_int_equal(coll_parse_listen("127.0.0.1:8470", &ss, &len), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(coll_parse_listen("[::1]:0", &ss, &len), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(coll_parse_listen("127.0.0.1", &ss, &len), -EINVAL);
	assert_int_equal(coll_parse_listen("127.0.0.1:70000", &ss, &len), -EINVAL);
	assert_int_equal(coll_parse_listen("host:80", &ss, &len), -EINVAL);
	assert_int_equal(coll_parse_listen("", &ss, &len), -EINVAL);
}

/* ---- store ---- */

struct fixture {
	char dir[64];
	char uri[128];
	struct coll_store *store;
	struct acct_record recs[8];
	char json[8][64];
	struct coll_item items[8];
};

#define T0 1796212800ULL /* 2026-12-02T12:00:00Z */

static void make_rec(struct fixture *fx, int i, const char *id, enum acct_type type,
		     const char *account, const char *user, uint64_t t, double cpus,
		     uint64_t wall_s, uint64_t cpu_s)
{
	struct acct_record *r = &fx->recs[i];

	memset(r, 0, sizeof(*r));
	snprintf(r->record_id, sizeof(r->record_id), "%s", id);
	r->type = type;
	r->time_ns = t * NSEC_PER_SEC;
	r->node = strdup("n1");
	snprintf(r->task.id, sizeof(r->task.id), "task-%s", id);
	r->task.account = strdup(account);
	r->task.user = strdup(user);
	assert_int_equal(acct_task_add_label(&r->task, "project", "p1"), 0);
	r->request.cpus = cpus;
	r->request.memory_bytes = 1000;
	r->usage.wall_ns = wall_s * NSEC_PER_SEC;
	r->usage.cpu_user_ns = cpu_s * NSEC_PER_SEC;
	r->usage.memory_byte_seconds = 500.0 * (double)wall_s;
	r->exit.status = type == ACCT_TASK_END ? ACCT_EXIT_EXITED : ACCT_EXIT_NONE;
	snprintf(fx->json[i], sizeof(fx->json[i]), "{\"record_id\":\"%s\"}", id);
	fx->items[i] =
	    (struct coll_item){.rec = r, .json = fx->json[i], .json_len = strlen(fx->json[i])};
}

static int setup_store(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	char err[256];

	assert_non_null(fx);
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_collector.XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->uri, sizeof(fx->uri), "sqlite:%s/c.db", fx->dir);
	assert_int_equal(coll_store_open(fx->uri, 0, &fx->store, err, sizeof(err)), 0);
	/* a: 2 cpus, 100 s wall, 50 s cpu -> charged 200 core-s; b: 1 cpu, 10 s, 30 s cpu -> 30 */
	make_rec(fx, 0, "a", ACCT_TASK_END, "physics", "alice", T0, 2, 100, 50);
	make_rec(fx, 1, "b", ACCT_TASK_END, "physics", "alice", T0 + 60, 1, 10, 30);
	make_rec(fx, 2, "s", ACCT_TASK_SAMPLE, "physics", "alice", T0 + 30, 1, 99, 99);
	make_rec(fx, 3, "c", ACCT_TASK_END, "chem", "bob", T0 + 86400, 1, 10, 5);
	*state = fx;
	return 0;
}

static int teardown_store(void **state)
{
	struct fixture *fx = *state;
	char cmd[128];

	coll_store_close(fx->store);
	for (size_t i = 0; i < ARRAY_SIZE(fx->recs); i++)
		acct_record_clear(&fx->recs[i]);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	assert_int_equal(system(cmd), 0);
	free(fx);
	return 0;
}

static void test_store_idempotent(void **state)
{
	struct fixture *fx = *state;
	uint64_t n = 0;
	int v = 0;
	char err[256];

	assert_int_equal(coll_store_schema_version(fx->store, &v), 0);
	assert_int_equal(v, COLL_SCHEMA_VERSION);
	assert_int_equal(coll_store_insert_batch(fx->store, fx->items, 3), 0);
	for (int i = 0; i < 3; i++)
		assert_true(fx->items[i].is_new);
	assert_int_equal(coll_store_count(fx->store, &n), 0);
	assert_int_equal(n, 3);

	/* resend: all duplicates, nothing added */
	assert_int_equal(coll_store_insert_batch(fx->store, fx->items, 3), 0);
	for (int i = 0; i < 3; i++)
		assert_false(fx->items[i].is_new);
	assert_int_equal(coll_store_count(fx->store, &n), 0);
	assert_int_equal(n, 3);

	/* a new record next to an old one, and the same new id twice in one batch */
	fx->items[4] = fx->items[3];
	fx->items[5] = fx->items[0];
	assert_int_equal(coll_store_insert_batch(fx->store, &fx->items[3], 3), 0);
	assert_true(fx->items[3].is_new);
	assert_false(fx->items[4].is_new);
	assert_false(fx->items[5].is_new);
	assert_int_equal(coll_store_count(fx->store, &n), 0);
	assert_int_equal(n, 4);

	/* reopening runs the migrations again: a no-op */
	coll_store_close(fx->store);
	assert_int_equal(coll_store_open(fx->uri, 0, &fx->store, err, sizeof(err)), 0);
	assert_int_equal(coll_store_count(fx->store, &n), 0);
	assert_int_equal(n, 4);
}

/* A stored body is read back by id; a conflict is kept once per (id, body). */
static void test_store_conflicts(void **state)
{
	struct fixture *fx = *state;
	_cleanup_free_ char *body = NULL;
	struct coll_conflict c = {.record_id = fx->recs[0].record_id,
				  .node = "n1",
				  .detected = "2026-12-06T00:00:00.000000Z",
				  .received_body = "{\"other\":1}",
				  .received_sha256 = "00ff"};

	assert_int_equal(coll_store_insert_batch(fx->store, fx->items, 1), 0);
	assert_int_equal(coll_store_body_get(fx->store, "nope", &body), -ENOENT);
	assert_int_equal(coll_store_body_get(fx->store, fx->recs[0].record_id, &body), 0);
	assert_string_equal(body, fx->json[0]);
	c.stored_body = body;
	assert_int_equal(coll_store_conflict_add(fx->store, &c), 1);
	assert_int_equal(coll_store_conflict_add(fx->store, &c), 0); /* the same body again */
	c.received_sha256 = "11ee";
	assert_int_equal(coll_store_conflict_add(fx->store, &c), 1);
	c.node = NULL;
	assert_int_equal(coll_store_conflict_add(fx->store, &c), -EINVAL);
}

/* The read-only descriptor of this process open on path (the store's own on its WAL), or -1. */
static int rdonly_fd_of(const char *path)
{
	char link[64], target[PATH_MAX];

	for (int fd = 3; fd < 1024; fd++) {
		ssize_t n;

		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (strcmp(target, path) == 0 && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
			return fd;
	}
	return -1;
}

/*
 * An ingest handle commits without fsync and syncs the WAL in coll_store_sync; handles that are
 * not for ingest commit durably. An fsync that fails fails every later insert of the handle.
 */
static void test_store_ingest_sync(void **state)
{
	struct fixture *fx = *state;
	struct coll_store *ing = NULL, *mem = NULL;
	char err[256], wal[PATH_MAX + 8];
	int p[2], fd;
	uint64_t n = 0;

	assert_false(coll_store_syncs(fx->store));
	assert_int_equal(coll_store_sync(fx->store), 0);
	assert_int_equal(
	    coll_store_open("sqlite::memory:", COLL_STORE_INGEST, &mem, err, sizeof(err)), 0);
	assert_false(coll_store_syncs(mem));
	coll_store_close(mem);

	assert_int_equal(coll_store_open(fx->uri, COLL_STORE_INGEST, &ing, err, sizeof(err)), 0);
	assert_true(coll_store_syncs(ing));
	assert_int_equal(coll_store_insert_batch(ing, fx->items, 2), 0);
	assert_int_equal(coll_store_sync(ing), 0);
	assert_int_equal(coll_store_sync(ing), 0); /* nothing new: no second fsync needed */

	/* a descriptor that cannot be synced (a pipe: EINVAL) in place of the store's WAL fd
	 * (SQLite's own, read-write, stays) */
	snprintf(wal, sizeof(wal), "%s/c.db-wal", fx->dir);
	fd = rdonly_fd_of(wal);
	assert_true(fd >= 0);
	assert_int_equal(pipe(p), 0);
	assert_true(dup2(p[0], fd) == fd);
	assert_int_equal(coll_store_insert_batch(ing, &fx->items[3], 1), 0);
	assert_int_equal(coll_store_sync(ing), -EINVAL);
	assert_int_equal(coll_store_sync(ing), -EINVAL); /* it sticks */
	assert_int_equal(coll_store_insert_batch(ing, &fx->items[2], 1), -EIO);
	assert_non_null(strstr(coll_store_errmsg(ing), "fsync of the WAL failed"));
	coll_store_close(ing);
	close(p[0]);
	close(p[1]);
	assert_int_equal(coll_store_count(fx->store, &n), 0);
	assert_int_equal(n, 3);
}

struct rows {
	size_t n;
	struct coll_rollup_row r[8];
	char keys[8][4][32];
};

static int collect(const struct coll_rollup_row *row, void *ud)
{
	struct rows *rs = ud;

	if (rs->n >= ARRAY_SIZE(rs->r))
		return -E2BIG;
	rs->r[rs->n] = *row;
	snprintf(rs->keys[rs->n][0], 32, "%s", row->bucket);
	snprintf(rs->keys[rs->n][1], 32, "%s", row->account);
	snprintf(rs->keys[rs->n][2], 32, "%s", row->user);
	snprintf(rs->keys[rs->n][3], 32, "%s=%s", row->label_key, row->label_value);
	rs->n++;
	return 0;
}

static void check_day(struct coll_store *s)
{
	struct rows rs = {0};

	assert_int_equal(coll_store_rollup_query(s, COLL_ROLLUP_DAY, NULL, NULL, collect, &rs), 0);
	assert_int_equal(rs.n, 2);
	assert_string_equal(rs.keys[0][0], "2026-12-02");
	assert_string_equal(rs.keys[0][1], "physics");
	assert_string_equal(rs.keys[0][2], "alice");
	/* the sample record does not count; a and b do */
	assert_float_equal(rs.r[0].v[COLL_SUM_TASKS], 2, 1e-9);
	assert_float_equal(rs.r[0].v[COLL_SUM_WALL_S], 110, 1e-9);
	assert_float_equal(rs.r[0].v[COLL_SUM_CPU_S], 80, 1e-9);
	assert_float_equal(rs.r[0].v[COLL_SUM_CPU_REQ_CORE_S], 210, 1e-9);
	assert_float_equal(rs.r[0].v[COLL_SUM_CPU_CHARGED_CORE_S], 230, 1e-9); /* 200 + 30 */
	assert_float_equal(rs.r[0].v[COLL_SUM_MEM_CHARGED_BYTE_S], 110000, 1e-6);
	assert_float_equal(rs.r[0].v[COLL_SUM_FAILED_TASKS], 0, 1e-9);
	assert_string_equal(rs.keys[1][0], "2026-12-03");
	assert_string_equal(rs.keys[1][1], "chem");
	assert_float_equal(rs.r[1].v[COLL_SUM_TASKS], 1, 1e-9);
}

static void test_rollup_sums(void **state)
{
	struct fixture *fx = *state;
	struct rows rs = {0};

	assert_int_equal(coll_store_insert_batch(fx->store, fx->items, 4), 0);
	check_day(fx->store);
	/* a resend must not add to the rollups */
	assert_int_equal(coll_store_insert_batch(fx->store, fx->items, 4), 0);
	check_day(fx->store);

	assert_int_equal(
	    coll_store_rollup_query(fx->store, COLL_ROLLUP_LABEL_DAY, NULL, NULL, collect, &rs), 0);
	assert_int_equal(rs.n, 2);
	assert_string_equal(rs.keys[0][3], "project=p1");
	assert_float_equal(rs.r[0].v[COLL_SUM_CPU_S], 80, 1e-9);
}

/*
 * An ingest handle (serve's) queues the bucketed deltas in rollup_pending; a fold, by any
 * handle, applies them once, and a rollup query folds first: the same sums as applied at once.
 */
static void test_rollup_sums_queued(void **state)
{
	struct fixture *fx = *state;
	struct coll_store *ing = NULL;
	struct rows rs = {0};
	char err[256];

	assert_int_equal(coll_store_open(fx->uri, COLL_STORE_INGEST, &ing, err, sizeof(err)), 0);
	assert_true(coll_store_defers_rollups(ing));
	assert_false(coll_store_defers_rollups(fx->store));
	assert_int_equal(coll_store_insert_batch(ing, fx->items, 4), 0);
	assert_int_equal(coll_store_sync(ing), 0);
	/* a resend queues nothing (no record is new) */
	assert_int_equal(coll_store_insert_batch(ing, fx->items, 4), 0);
	/* one queued batch, folded by another handle; then none */
	assert_int_equal(coll_store_fold(fx->store, true), 1);
	assert_int_equal(coll_store_fold(fx->store, true), 0);
	check_day(fx->store);
	/* queued again, applied by the query's own fold */
	make_rec(fx, 5, "d", ACCT_TASK_END, "chem", "bob", T0 + 86400, 1, 10, 5);
	assert_int_equal(coll_store_insert_batch(ing, &fx->items[5], 1), 0);
	assert_int_equal(
	    coll_store_rollup_query(ing, COLL_ROLLUP_LABEL_DAY, NULL, NULL, collect, &rs), 0);
	assert_int_equal(rs.n, 2);
	assert_float_equal(rs.r[0].v[COLL_SUM_CPU_S], 80, 1e-9);
	assert_float_equal(rs.r[1].v[COLL_SUM_CPU_S], 10, 1e-9);
	assert_int_equal(coll_store_fold(ing, true), 0);
	coll_store_close(ing);
}

/* A node.sample of node n1 (class cls) at time t (s) standing for the period p (s) before. */
static void make_node(struct acct_record *r, char **json, size_t *len, const char *id,
		      const char *cls, uint64_t t, uint64_t p, double cap, double alloc,
		      uint64_t used_cpu_s)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->record_id, sizeof(r->record_id), "%s", id);
	r->type = ACCT_NODE_SAMPLE;
	r->time_ns = t * NSEC_PER_SEC;
	r->node = strdup("n1");
	assert_int_equal(acct_record_node_sample(r), 0);
	r->ns->period_ns = p * NSEC_PER_SEC;
	r->ns->price_class = cls ? strdup(cls) : NULL;
	r->ns->cap_cpus = cap;
	r->ns->cap_memory_bytes = 1000;
	r->ns->cap_gpus = 2;
	r->ns->alloc_cpus = alloc;
	r->ns->alloc_memory_bytes = 400;
	r->ns->alloc_gpus = 1;
	r->ns->used_cpu_ns = used_cpu_s * NSEC_PER_SEC;
	r->ns->used_memory_bytes = 100;
	assert_int_equal(acct_record_encode(r, json, len), 0);
}

struct node_rows {
	size_t n;
	char key[8][64];
	double v[8][_COLL_SUM_MAX];
};

static int collect_node(const struct coll_rollup_row *row, void *ud)
{
	struct node_rows *rs = ud;

	if (rs->n >= ARRAY_SIZE(rs->key))
		return -E2BIG;
	snprintf(rs->key[rs->n], sizeof(rs->key[0]), "%s %s %s=%s", row->bucket, row->node,
		 row->label_key, row->label_value);
	memcpy(rs->v[rs->n], row->v, sizeof(row->v));
	rs->n++;
	return 0;
}

/* The figures worked out by hand from the records of test_node_rollup. */
static void check_node_days(struct coll_store *s)
{
	struct node_rows rs = {0};

	assert_int_equal(
	    coll_store_rollup_query(s, COLL_ROLLUP_NODE_DAY, NULL, NULL, collect_node, &rs), 0);
	assert_int_equal(rs.n, 3);
	/* 12-02, class std: the first record (period 0) counts once and covers nothing; the
	 * second 3600 s x 4 cores; the third's first 900 s (23:45..24:00) of 1800 s */
	assert_string_equal(rs.key[0], "2026-12-02 n1 price_class=");
	assert_float_equal(rs.v[0][COLL_SUM_TASKS], 0, 1e-12); /* no record ended in it */
	assert_float_equal(rs.v[0][COLL_SUM_WALL_S], 900, 1e-9);
	assert_string_equal(rs.key[1], "2026-12-02 n1 price_class=std");
	assert_float_equal(rs.v[1][COLL_SUM_TASKS], 2, 1e-12);
	assert_float_equal(rs.v[1][COLL_SUM_WALL_S], 3600, 1e-9);
	assert_float_equal(rs.v[1][COLL_SUM_CPU_CHARGED_CORE_S], 4 * 3600, 1e-9);
	assert_float_equal(rs.v[1][COLL_SUM_CPU_REQ_CORE_S], 2 * 3600, 1e-9);
	assert_float_equal(rs.v[1][COLL_SUM_CPU_S], 1000, 1e-9);
	assert_float_equal(rs.v[1][COLL_SUM_MEM_CHARGED_BYTE_S], 1000.0 * 3600, 1e-6);
	assert_float_equal(rs.v[1][COLL_SUM_MEM_REQ_BYTE_S], 400.0 * 3600, 1e-6);
	assert_float_equal(rs.v[1][COLL_SUM_MEM_BYTE_S], 100.0 * 3600, 1e-6);
	assert_float_equal(rs.v[1][COLL_SUM_GPU_CHARGED_S], 2 * 3600, 1e-9);
	assert_float_equal(rs.v[1][COLL_SUM_GPU_REQ_S], 3600, 1e-9);
	/* 12-03, no class: the third record's last 900 s, 8 cores */
	assert_string_equal(rs.key[2], "2026-12-03 n1 price_class=");
	assert_float_equal(rs.v[2][COLL_SUM_TASKS], 1, 1e-12);
	assert_float_equal(rs.v[2][COLL_SUM_WALL_S], 900, 1e-9);
	assert_float_equal(rs.v[2][COLL_SUM_CPU_CHARGED_CORE_S], 8 * 900, 1e-9);
	assert_float_equal(rs.v[2][COLL_SUM_CPU_S], 300, 1e-9);
	assert_float_equal(rs.v[0][COLL_SUM_CPU_CHARGED_CORE_S] +
			       rs.v[2][COLL_SUM_CPU_CHARGED_CORE_S],
			   8 * 1800, 1e-9);
}

/* node.sample records: rollup_node_day per node, class and day, the period spread over the
 * days it covers; the same sums applied at once, queued and folded, resent, and rebuilt by a
 * migration from the stored records. */
static void test_node_rollup(void **state)
{
	struct fixture *fx = *state;
	struct acct_record recs[3];
	struct coll_item items[3];
	char *json[3], err[256], path[128];
	struct coll_store *ing = NULL;
	size_t len[3];
	sqlite3 *db;
	int v;

	make_node(&recs[0], &json[0], &len[0], "n1/x/1", "std", T0 - 1800, 0, 4, 2, 0);
	make_node(&recs[1], &json[1], &len[1], "n1/x/2", "std", T0 + 1800, 3600, 4, 2, 1000);
	/* 2026-12-03T00:15Z, 1800 s, no class */
	make_node(&recs[2], &json[2], &len[2], "n1/x/3", NULL, T0 + 12 * 3600 + 900, 1800, 8, 0,
		  600);
	for (int i = 0; i < 3; i++)
		items[i] = (struct coll_item){.rec = &recs[i], .json = json[i], .json_len = len[i]};
	assert_int_equal(coll_store_open(fx->uri, COLL_STORE_INGEST, &ing, err, sizeof(err)), 0);
	assert_int_equal(coll_store_insert_batch(ing, items, 2), 0);
	assert_int_equal(coll_store_sync(ing), 0);
	assert_int_equal(coll_store_insert_batch(fx->store, items, 3), 0);
	assert_int_equal(coll_store_insert_batch(ing, items, 3), 0); /* all resent */
	assert_int_equal(coll_store_sync(ing), 0);
	coll_store_close(ing);
	check_node_days(fx->store);
	coll_store_close(fx->store);
	fx->store = NULL;

	/* set back to version 7 without the node table: the migration makes it and rebuilds */
	snprintf(path, sizeof(path), "%s/c.db", fx->dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "DROP TABLE rollup_node_day; UPDATE schema_version SET "
				      "version = 7;",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(coll_store_open(fx->uri, 0, &fx->store, err, sizeof(err)), 0);
	assert_int_equal(coll_store_schema_version(fx->store, &v), 0);
	assert_int_equal(v, COLL_SCHEMA_VERSION);
	check_node_days(fx->store);
	for (int i = 0; i < 3; i++) {
		acct_record_clear(&recs[i]);
		free(json[i]);
	}
}

/* rollup_open's row of task-u as "sample_ns wall_s cpu_req cpu_charged mem_byte_s mem_req
 * mem_charged", or "none". */
static void open_row(const char *dir, char *buf, size_t len)
{
	char path[160];
	sqlite3_stmt *st;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/c.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db,
					    "SELECT sample_ns, wall_s,"
					    " cpu_req_core_s, cpu_charged_core_s, mem_byte_s,"
					    " mem_req_byte_s, mem_charged_byte_s FROM rollup_open"
					    " WHERE task_id = 'task-u'",
					    -1, &st, NULL),
			 SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(
		    buf, len, "%lld %.3f %.3f %.3f %.3f %.3f %.3f",
		    (long long)(sqlite3_column_int64(st, 0) / (int64_t)NSEC_PER_SEC - (int64_t)T0),
		    sqlite3_column_double(st, 1), sqlite3_column_double(st, 2),
		    sqlite3_column_double(st, 3), sqlite3_column_double(st, 4),
		    sqlite3_column_double(st, 5), sqlite3_column_double(st, 6));
	else
		snprintf(buf, len, "none");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

/* A node.sample's tasks_unchanged: the open row of each listed task moves to the record's
 * time with the same usage (wall and requests grown, memory byte-seconds by rss x the time
 * since), only from the sample it names or later, never backwards, never after the end. */
static void test_open_touch(void **state)
{
	struct fixture *fx = *state;
	struct acct_record nr[4];
	struct coll_item ni[4];
	char *json[4], row[256];
	size_t len[4];
	/* node.sample times (s after T0), the age of the task's sample it names (ms) */
	static const uint64_t at[4] = {90, 80, 120, 300}, age[4] = {60000, 50000, 100, 270000};

	/* task-u: 2 cpus, memory 1000, 100 s wall at T0 + 30 s, 10 s cpu, 50,000 byte-s */
	acct_record_clear(&fx->recs[0]);
	make_rec(fx, 0, "u", ACCT_TASK_SAMPLE, "physics", "alice", T0 + 30, 2, 100, 10);
	assert_int_equal(coll_store_insert_batch(fx->store, fx->items, 1), 0);
	open_row(fx->dir, row, sizeof(row));
	assert_string_equal(row, "30 100.000 200.000 200.000 50000.000 100000.000 100000.000");
	for (int i = 0; i < 4; i++) {
		char id[32];

		snprintf(id, sizeof(id), "n1/x/t%d", i);
		make_node(&nr[i], &json[i], &len[i], id, NULL, T0 + at[i], 30, 4, 2, 0);
		assert_int_equal(acct_node_add_unchanged(nr[i].ns, "task-u", age[i], 200), 0);
		assert_int_equal(acct_node_add_unchanged(nr[i].ns, "task-none", 1000, 200), 0);
		ni[i] = (struct coll_item){.rec = &nr[i], .json = json[i], .json_len = len[i]};
	}
	/* at T0 + 90 s: 160 s wall, 320 core-s, 50,000 + 200 x 60 byte-s, 160,000 requested */
	assert_int_equal(coll_store_insert_batch(fx->store, &ni[0], 1), 0);
	open_row(fx->dir, row, sizeof(row));
	assert_string_equal(row, "90 160.000 320.000 320.000 62000.000 160000.000 160000.000");
	/* an older one changes nothing; one naming a sample the row does not hold neither */
	assert_int_equal(coll_store_insert_batch(fx->store, &ni[1], 2), 0);
	open_row(fx->dir, row, sizeof(row));
	assert_string_equal(row, "90 160.000 320.000 320.000 62000.000 160000.000 160000.000");
	/* a newer full sample replaces the row; the end removes it; a touch after the end adds
	 * nothing */
	acct_record_clear(&fx->recs[1]);
	make_rec(fx, 1, "u", ACCT_TASK_END, "physics", "alice", T0 + 200, 2, 270, 10);
	snprintf(fx->json[1], sizeof(fx->json[1]), "{\"record_id\":\"u-end\"}");
	snprintf(fx->recs[1].record_id, sizeof(fx->recs[1].record_id), "u-end");
	fx->items[1].json_len = strlen(fx->json[1]);
	assert_int_equal(coll_store_insert_batch(fx->store, &fx->items[1], 1), 0);
	assert_int_equal(coll_store_insert_batch(fx->store, &ni[3], 1), 0);
	open_row(fx->dir, row, sizeof(row));
	assert_string_equal(row, "none");
	for (int i = 0; i < 4; i++) {
		acct_record_clear(&nr[i]);
		free(json[i]);
	}
}

/* A sample and the touch of the same task in one batch: the touch (newer) applies after it. */
static void test_open_touch_one_batch(void **state)
{
	struct fixture *fx = *state;
	struct acct_record nr;
	struct coll_item items[2];
	char *json, row[256];
	size_t len;

	acct_record_clear(&fx->recs[0]);
	make_rec(fx, 0, "u", ACCT_TASK_SAMPLE, "physics", "alice", T0 + 30, 2, 100, 10);
	make_node(&nr, &json, &len, "n1/x/b", NULL, T0 + 90, 30, 4, 2, 0);
	assert_int_equal(acct_node_add_unchanged(nr.ns, "task-u", 60000, 200), 0);
	/* the touch first in the batch: order within a batch does not matter */
	items[0] = (struct coll_item){.rec = &nr, .json = json, .json_len = len};
	items[1] = fx->items[0];
	assert_int_equal(coll_store_insert_batch(fx->store, items, 2), 0);
	open_row(fx->dir, row, sizeof(row));
	assert_string_equal(row, "90 160.000 320.000 320.000 62000.000 160000.000 160000.000");
	acct_record_clear(&nr);
	free(json);
}

/* open_row of another task than task-u */
static void open_row_of(const char *dir, const char *task, char *buf, size_t len)
{
	char path[160], sql[256];
	sqlite3_stmt *st;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/c.db", dir);
	snprintf(sql, sizeof(sql),
		 "SELECT sample_ns, wall_s, cpu_req_core_s, mem_byte_s, mem_req_byte_s,"
		 " ifnull(rss_bytes, -1) FROM rollup_open WHERE task_id = '%s'",
		 task);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(
		    buf, len, "%lld %.3f %.3f %.3f %.3f %lld",
		    (long long)(sqlite3_column_int64(st, 0) / (int64_t)NSEC_PER_SEC - (int64_t)T0),
		    sqlite3_column_double(st, 1), sqlite3_column_double(st, 2),
		    sqlite3_column_double(st, 3), sqlite3_column_double(st, 4),
		    (long long)sqlite3_column_int64(st, 5));
	else
		snprintf(buf, len, "none");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

/* A node.sample at T0 + at s with a tasks_alive statement (n, digest of the ids given,
 * except), inserted alone; the body re-encoded (schema v2) and decoded back first. */
static void insert_alive(struct fixture *fx, const char *rid, uint64_t at, uint64_t since,
			 uint32_t n, const char *const *ids, size_t nids, const char *const *except,
			 size_t nexcept)
{
	struct acct_record nr, back;
	struct coll_item it;
	char *json, err[256];
	size_t len;

	make_node(&nr, &json, &len, rid, NULL, T0 + at, 30, 4, 2, 0);
	free(json);
	nr.ns->alive.present = true;
	nr.ns->alive.since_ns = (T0 + since) * NSEC_PER_SEC;
	nr.ns->alive.n = n;
	for (size_t i = 0; i < nids; i++)
		nr.ns->alive.digest = acct_alive_digest(nr.ns->alive.digest, ids[i]);
	for (size_t i = 0; i < nexcept; i++)
		assert_int_equal(acct_node_add_alive_except(nr.ns, except[i]), 0);
	assert_int_equal(acct_record_encode(&nr, &json, &len), 0);
	assert_non_null(strstr(json, "\"schema\":\"corral.record/v2\""));
	assert_int_equal(acct_record_decode(json, len, &back, err, sizeof(err)), 0);
	assert_true(back.ns->alive.present);
	assert_int_equal(back.ns->alive.n, n);
	assert_true(back.ns->alive.digest == nr.ns->alive.digest);
	assert_true(back.ns->alive.since_ns == nr.ns->alive.since_ns);
	assert_int_equal(back.ns->alive.n_except, nexcept);
	it = (struct coll_item){.rec = &back, .json = json, .json_len = len};
	assert_int_equal(coll_store_insert_batch(fx->store, &it, 1), 0);
	acct_record_clear(&nr);
	acct_record_clear(&back);
	free(json);
}

/*
 * tasks_alive: the rows of the tasks a node.sample listed move to a later node.sample's time
 * by the RSS kept from the listing, without naming them; never a row the statement does not
 * cover (more rows than n, another digest: none moves, counted), never one excepted, never
 * one whose task had a sample since (its RSS is no longer known). Figures by hand: task-u
 * 2 cpus, memory 1000, 100 s at T0 + 30 s, 50,000 byte-s; listed at T0 + 90 s with 200 B.
 */
static void test_open_alive(void **state)
{
	struct fixture *fx = *state;
	static const char *const u[] = {"task-u"}, *const uv[] = {"task-u", "task-v"};
	struct acct_record nr;
	struct coll_item it;
	char *json, row[256];
	size_t len;

	acct_record_clear(&fx->recs[0]);
	acct_record_clear(&fx->recs[1]);
	make_rec(fx, 0, "u", ACCT_TASK_SAMPLE, "physics", "alice", T0 + 30, 2, 100, 10);
	make_rec(fx, 1, "v", ACCT_TASK_SAMPLE, "physics", "alice", T0 + 30, 1, 100, 10);
	assert_int_equal(coll_store_insert_batch(fx->store, fx->items, 2), 0);
	/* a statement before any listing moves nothing (no RSS known): 0 rows, n 2 */
	insert_alive(fx, "n1/x/a0", 60, 30, 2, uv, 2, NULL, 0);
	open_row_of(fx->dir, "task-u", row, sizeof(row));
	assert_string_equal(row, "30 100.000 200.000 50000.000 100000.000 -1");
	/* both listed at T0 + 90 s */
	make_node(&nr, &json, &len, "n1/x/l", NULL, T0 + 90, 30, 4, 2, 0);
	assert_int_equal(acct_node_add_unchanged(nr.ns, "task-u", 60000, 200), 0);
	assert_int_equal(acct_node_add_unchanged(nr.ns, "task-v", 60000, 100), 0);
	it = (struct coll_item){.rec = &nr, .json = json, .json_len = len};
	assert_int_equal(coll_store_insert_batch(fx->store, &it, 1), 0);
	acct_record_clear(&nr);
	free(json);
	open_row_of(fx->dir, "task-u", row, sizeof(row));
	assert_string_equal(row, "90 160.000 320.000 62000.000 160000.000 200");
	/* T0 + 120 s, both alive: + 30 s, + 200 x 30 byte-s (task-v: + 100 x 30) */
	insert_alive(fx, "n1/x/a1", 120, 90, 2, uv, 2, NULL, 0);
	open_row_of(fx->dir, "task-u", row, sizeof(row));
	assert_string_equal(row, "120 190.000 380.000 68000.000 190000.000 200");
	open_row_of(fx->dir, "task-v", row, sizeof(row));
	assert_string_equal(row, "120 190.000 190.000 59000.000 190000.000 100");
	/* a statement for one task where the collector has two rows: refused, nothing moves;
	 * as many rows but another digest: refused too */
	insert_alive(fx, "n1/x/a2", 150, 90, 1, u, 1, NULL, 0);
	insert_alive(fx, "n1/x/a3", 150, 90, 2, u, 1, NULL, 0);
	open_row_of(fx->dir, "task-u", row, sizeof(row));
	assert_string_equal(row, "120 190.000 380.000 68000.000 190000.000 200");
	assert_int_equal((int)fx->store->alive_refused, 2);
	/* task-v excepted (it changed): only task-u moves */
	insert_alive(fx, "n1/x/a4", 180, 90, 1, u, 1, (const char *const[]){"task-v"}, 1);
	open_row_of(fx->dir, "task-u", row, sizeof(row));
	assert_string_equal(row, "180 250.000 500.000 80000.000 250000.000 200");
	open_row_of(fx->dir, "task-v", row, sizeof(row));
	assert_string_equal(row, "120 190.000 190.000 59000.000 190000.000 100");
	/* task-v's new sample (T0 + 181 s) clears its RSS: a later statement for both moves
	 * task-u only (fewer rows than n: one task has a newer sample) */
	acct_record_clear(&fx->recs[1]);
	make_rec(fx, 1, "v", ACCT_TASK_SAMPLE, "physics", "alice", T0 + 181, 1, 251, 20);
	snprintf(fx->recs[1].record_id, sizeof(fx->recs[1].record_id), "v-2");
	assert_int_equal(coll_store_insert_batch(fx->store, &fx->items[1], 1), 0);
	insert_alive(fx, "n1/x/a5", 210, 90, 2, uv, 2, NULL, 0);
	open_row_of(fx->dir, "task-u", row, sizeof(row));
	assert_string_equal(row, "210 280.000 560.000 86000.000 280000.000 200");
	open_row_of(fx->dir, "task-v", row, sizeof(row));
	assert_string_equal(row, "181 251.000 251.000 125500.000 251000.000 -1");
	assert_int_equal((int)fx->store->alive_refused, 2);
	/* a statement about another listing (since T0 + 60 s: none was made then) moves
	 * nothing: fewer rows than n, none of them that listing's */
	insert_alive(fx, "n1/x/a6", 240, 60, 1, u, 1, NULL, 0);
	open_row_of(fx->dir, "task-u", row, sizeof(row));
	assert_string_equal(row, "210 280.000 560.000 86000.000 280000.000 200");
}

/* tasks_alive: refused in a v1 record, and each bad shape refused naming the field */
static void test_alive_decode(void **state)
{
	static const char *const bad[][2] = {
	    {"v1", "tasks_alive: needs schema"},
	    {"[]", "tasks_alive: expected an object"},
	    {"{\"n\":1,\"except\":[]}", "tasks_alive.since: missing"},
	    {"{\"since\":\"yesterday\",\"n\":1,\"digest\":\"0000000000000000\",\"except\":[]}",
	     "tasks_alive.since: expected an RFC 3339"},
	    {"{\"since\":\"2026-12-02T11:59:00Z\",\"n\":1,\"except\":[]}",
	     "tasks_alive.digest: missing"},
	    {"{\"since\":\"2026-12-02T11:59:00Z\",\"n\":1,\"digest\":\"xyz\",\"except\":[]}",
	     "tasks_alive.digest: expected 16 hex"},
	    {"{\"since\":\"2026-12-02T11:59:00Z\",\"n\":-1,\"digest\":\"0000000000000000\","
	     "\"except\":[]}",
	     "tasks_alive.n"},
	    {"{\"since\":\"2026-12-02T11:59:00Z\",\"n\":1,\"digest\":\"0000000000000000\"}",
	     "tasks_alive.except: expected"},
	    {"{\"since\":\"2026-12-02T11:59:00Z\",\"n\":1,\"digest\":\"0000000000000000\","
	     "\"except\":[\"\"]}",
	     "tasks_alive.except[0]"},
	    {"{\"since\":\"2026-12-02T11:59:00Z\",\"n\":1,\"digest\":\"0000000000000000\","
	     "\"except\":[],\"x\":1}",
	     "tasks_alive"},
	};
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct acct_record r;
		char buf[1024], err[256];
		bool v1 = strcmp(bad[i][0], "v1") == 0;

		snprintf(
		    buf, sizeof(buf),
		    "{\"schema\":\"corral.record/%s\",\"record_id\":\"n/x/1\","
		    "\"type\":\"node.sample\",\"time\":\"2026-12-02T12:00:00Z\",\"node\":"
		    "\"n1\",\"capacity\":{\"cpus\":4,\"memory_bytes\":1000},\"tasks_alive\":%s}",
		    v1 ? "v1" : "v2",
		    v1 ? "{\"n\":0,\"digest\":\"0000000000000000\",\"except\":[]}" : bad[i][0]);
		assert_int_not_equal(acct_record_decode(buf, strlen(buf), &r, err, sizeof(err)), 0);
		if (!strstr(err, bad[i][1]))
			fail_msg("%s: %s", buf, err);
	}
}

/* rollup_node_alloc_day against plain SQL over rollup_job_day (its rows summed per day and
 * node) and the figures by hand; the count of rows that differ is 0. */
static void check_node_alloc(const char *dir)
{
	static const char diff[] =
	    "SELECT count(*) FROM (SELECT bucket, node, round(sum(cpu_charged_core_s), 6),"
	    " round(sum(mem_charged_byte_s), 3), round(sum(cpu_s), 6), round(sum(tasks), 6)"
	    " FROM rollup_job_day GROUP BY bucket, node EXCEPT SELECT bucket, node,"
	    " round(cpu_charged_core_s, 6), round(mem_charged_byte_s, 3), round(cpu_s, 6),"
	    " round(tasks, 6) FROM rollup_node_alloc_day)";
	static const char by_hand[] =
	    "SELECT group_concat(bucket || ' ' || node || ' ' || round(cpu_charged_core_s, 3), ';')"
	    " FROM (SELECT * FROM rollup_node_alloc_day ORDER BY bucket, node)";
	char path[160];
	sqlite3_stmt *st;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/c.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	for (int q = 0; q < 2; q++) {
		assert_int_equal(sqlite3_prepare_v2(db, q ? by_hand : diff, -1, &st, NULL),
				 SQLITE_OK);
		assert_int_equal(sqlite3_step(st), SQLITE_ROW);
		if (q)
			/* a (2 cpus x 100 s) + b (max(1 x 10, 30 s used)) on n1; c on n2 the next
			 * day; e on n2 over midnight: 2 cpus x 7200 s, half in each day */
			assert_string_equal((const char *)sqlite3_column_text(st, 0),
					    "2026-12-02 n1 230.0;2026-12-02 n2 7200.0;"
					    "2026-12-03 n2 7210.0");
		else
			assert_int_equal(sqlite3_column_int(st, 0), 0);
		sqlite3_finalize(st);
	}
	sqlite3_close(db);
}

/* The tasks' allocation per node and day (rollup_node_alloc_day, schema 10): records sent out
 * of order, resent, queued and folded or applied at once, and rebuilt by the migration from
 * version 9 from the stored records. */
static void test_node_alloc(void **state)
{
	struct fixture *fx = *state;
	struct coll_store *ing = NULL;
	char err[256], path[160];
	char *json[5] = {0};
	size_t len[5];
	sqlite3 *db;
	int v;

	make_rec(fx, 4, "e", ACCT_TASK_END, "chem", "bob", T0 + 12 * 3600 + 3600, 2, 7200, 10);
	free(fx->recs[3].node);
	fx->recs[3].node = strdup("n2");
	free(fx->recs[4].node);
	fx->recs[4].node = strdup("n2");
	/* real bodies, for the rebuild */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(acct_record_encode(&fx->recs[i], &json[i], &len[i]), 0);
		fx->items[i].json = json[i];
		fx->items[i].json_len = len[i];
	}
	assert_int_equal(coll_store_open(fx->uri, COLL_STORE_INGEST, &ing, err, sizeof(err)), 0);
	assert_int_equal(coll_store_insert_batch(ing, &fx->items[3], 2), 0); /* the later first */
	assert_int_equal(coll_store_sync(ing), 0);
	assert_int_equal(coll_store_insert_batch(fx->store, fx->items, 2), 0);
	assert_int_equal(coll_store_insert_batch(ing, fx->items, 5), 0); /* all resent */
	assert_int_equal(coll_store_sync(ing), 0);
	assert_int_equal(coll_store_fold(fx->store, true), 1);
	coll_store_close(ing);
	check_node_alloc(fx->dir);
	coll_store_close(fx->store);
	fx->store = NULL;

	/* set back to version 9 without the table: the migration makes it and rebuilds */
	snprintf(path, sizeof(path), "%s/c.db", fx->dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "DROP TABLE rollup_node_alloc_day; UPDATE schema_version SET "
				      "version = 9;",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	assert_int_equal(coll_store_open(fx->uri, 0, &fx->store, err, sizeof(err)), 0);
	assert_int_equal(coll_store_schema_version(fx->store, &v), 0);
	assert_int_equal(v, COLL_SCHEMA_VERSION);
	check_node_alloc(fx->dir);
	for (int i = 0; i < 5; i++)
		free(json[i]);
}

/* Deltas built ahead of the insert (the collector's request threads), every item taken as new. */
static struct coll_deltas pre_of(struct coll_item *items, size_t n)
{
	struct coll_deltas pre = {0};

	for (size_t i = 0; i < n; i++)
		items[i].is_new = true;
	assert_int_equal(coll_deltas_build(items, n, &pre.d, &pre.n), 0);
	return pre;
}

static void assert_deltas_equal(const struct coll_deltas *x, const struct coll_deltas *y)
{
	assert_int_equal(x->n, y->n);
	for (size_t i = 0; i < y->n; i++) {
		assert_int_equal(x->d[i].table, y->d[i].table);
		assert_int_equal(x->d[i].del, y->d[i].del);
		assert_string_equal(x->d[i].bucket, y->d[i].bucket);
		assert_string_equal(x->d[i].account, y->d[i].account);
		assert_string_equal(x->d[i].user, y->d[i].user);
		assert_string_equal(x->d[i].label_value, y->d[i].label_value);
		assert_string_equal(x->d[i].task_id, y->d[i].task_id);
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			assert_float_equal(x->d[i].v[k], y->d[i].v[k], 1e-6);
	}
}

static void test_rollup_sums_prebuilt(void **state)
{
	struct fixture *fx = *state;
	struct coll_deltas all = pre_of(fx->items, 4), first = pre_of(fx->items, 1);
	struct coll_deltas a = pre_of(fx->items, 1), b = pre_of(&fx->items[1], 3);
	struct coll_deltas group = {.d = calloc(a.n + b.n, sizeof(*group.d))};

	/* a group of two batches (a and b share their day rows): their own deltas merged are those
	 * of the whole group */
	assert_non_null(group.d);
	memcpy(group.d, a.d, a.n * sizeof(*a.d));
	memcpy(group.d + a.n, b.d, b.n * sizeof(*b.d));
	group.n = coll_deltas_merge(group.d, a.n + b.n);
	assert_deltas_equal(&group, &all);
	/* the same in one pass over the two sorted runs, in either order */
	{
		struct coll_deltas runs[2] = {a, b}, back[2] = {b, a};
		struct coll_deltas m = {.d = calloc(a.n + b.n, sizeof(*m.d))};

		assert_non_null(m.d);
		m.n = coll_deltas_merge_runs(runs, 2, m.d);
		assert_deltas_equal(&m, &all);
		m.n = coll_deltas_merge_runs(back, 2, m.d);
		assert_deltas_equal(&m, &all);
		assert_int_equal(coll_deltas_merge_runs(runs, COLL_DELTA_RUNS_MAX + 1, m.d),
				 SIZE_MAX);
		free(m.d);
	}

	/* one record stored first: the batch with it again is not all new, so the store
	 * counts the other three alone and ignores the deltas built with it */
	assert_int_equal(coll_store_insert_batch_pre(fx->store, fx->items, 1, &first), 0);
	assert_int_equal(coll_store_insert_batch_pre(fx->store, fx->items, 4, &group), 0);
	assert_false(fx->items[0].is_new);
	assert_true(fx->items[1].is_new);
	check_day(fx->store);
	/* a resend: all duplicates, the deltas built for them unused */
	assert_int_equal(coll_store_insert_batch_pre(fx->store, fx->items, 4, &all), 0);
	check_day(fx->store);
	free(all.d);
	free(first.d);
	free(a.d);
	free(b.d);
	free(group.d);
}

static void test_record_sums(void **state)
{
	struct acct_record r = {0};
	double v[_COLL_SUM_MAX];

	r.type = ACCT_TASK_END;
	r.request.gpus = 2;
	r.usage.wall_ns = 10 * NSEC_PER_SEC;
	r.usage.gpu_seconds = 5;
	r.exit.status = ACCT_EXIT_OOM_KILLED;
	coll_record_sums(&r, v);
	assert_float_equal(v[COLL_SUM_GPU_REQ_S], 20, 1e-9);
	assert_float_equal(v[COLL_SUM_GPU_CHARGED_S], 20, 1e-9);
	assert_float_equal(v[COLL_SUM_CPU_CHARGED_CORE_S], 0, 1e-9); /* unlimited, unused */
	assert_float_equal(v[COLL_SUM_FAILED_TASKS], 1, 1e-9);
}

static void test_store_bad_uri(void **state)
{
	struct coll_store *s = NULL;
	char err[256];

	assert_int_equal(coll_store_open("mysql://x", 0, &s, err, sizeof(err)), -EPROTONOSUPPORT);
	assert_non_null(strstr(err, "unknown database URI scheme"));
	assert_int_equal(coll_store_open("sqlite:", 0, &s, err, sizeof(err)), -EINVAL);
	assert_true(coll_store_open("sqlite:/nonexistent-dir/x/y.db", 0, &s, err, sizeof(err)) < 0);
}

/* The labels column: compact JSON, keys sorted, every byte escaped as JSON needs. */
static void test_labels_json(void **state)
{
	struct acct_record r = {0};
	json_t *got, *want;
	char *s;

	(void)state;
	assert_int_equal(acct_task_add_label(&r.task, "zone", "eu\"west\\1"), 0);
	assert_int_equal(acct_task_add_label(&r.task, "app", "tab\there\x01 \xc3\xa9"), 0);
	assert_int_equal(acct_task_add_label(&r.task, "b", ""), 0);
	s = coll_labels_json(&r);
	assert_non_null(s);
	assert_string_equal(s, "{\"app\":\"tab\\u0009here\\u0001 \xc3\xa9\",\"b\":\"\","
			       "\"zone\":\"eu\\\"west\\\\1\"}");
	got = json_loads(s, 0, NULL);
	want = json_pack("{s:s,s:s,s:s}", "zone", "eu\"west\\1", "app", "tab\there\x01 \xc3\xa9",
			 "b", "");
	assert_non_null(got);
	assert_true(json_equal(got, want));
	json_decref(got);
	json_decref(want);
	free(s);
	acct_record_clear(&r);
	s = coll_labels_json(&r);
	assert_string_equal(s, "{}");
	free(s);
}

/* Binary COPY layout, byte for byte (PostgreSQL's "COPY ... WITH (FORMAT binary)"). */
static void test_pgcopy(void **state)
{
	static const unsigned char want[] = {
	    'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0, /* signature */
	    0, 0, 0, 0, 0, 0, 0, 0,				     /* flags, extension */
	    0, 7,						     /* fields */
	    0xff, 0xff, 0xff, 0xff,				     /* NULL */
	    0, 0, 0, 2, 'h', 'i',				     /* text */
	    0, 0, 0, 3, 1, '{', '}',				     /* jsonb: version 1 */
	    0, 0, 0, 4, 0xff, 0xff, 0xff, 0xfe,			     /* int4 -2 */
	    0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 2,			     /* int8 2^32+2 */
	    0, 0, 0, 8, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,		     /* float8 1.5 */
	    /* 2000-01-01T00:00:01.000002999Z: 1000002 us after PostgreSQL's epoch */
	    0, 0, 0, 8, 0, 0, 0, 0, 0, 0x0f, 0x42, 0x42, 0, 1, 0, 0, 0,
	    0,		/* a row of one empty text */
	    0xff, 0xff, /* trailer */
	};
	struct pgcopy c;
	char *out = NULL;
	size_t len = 0;

	(void)state;
	pgcopy_begin(&c);
	pgcopy_row(&c, 7);
	pgcopy_null(&c);
	pgcopy_text(&c, "hi", 2);
	pgcopy_jsonb(&c, "{}", 2);
	pgcopy_int4(&c, -2);
	pgcopy_int8(&c, (1LL << 32) + 2);
	pgcopy_float8(&c, 1.5);
	pgcopy_timestamptz_ns(&c, 946684801000002999ULL);
	pgcopy_row(&c, 1);
	pgcopy_text(&c, "", 0);
	assert_int_equal(pgcopy_end(&c, &out, &len), 0);
	assert_int_equal(len, sizeof(want));
	assert_memory_equal(out, want, sizeof(want));
	free(out);

	/* growth past the first buffer keeps every byte */
	pgcopy_begin(&c);
	for (int i = 0; i < 5000; i++) {
		pgcopy_row(&c, 1);
		pgcopy_int8(&c, i);
	}
	assert_int_equal(pgcopy_end(&c, &out, &len), 0);
	assert_int_equal(len, 19 + 5000 * 14 + 2);
	assert_int_equal((unsigned char)out[19 + 4999 * 14 + 12], 4999 >> 8);
	assert_int_equal((unsigned char)out[19 + 4999 * 14 + 13], 4999 & 0xff);
	free(out);
}

/* The rollups' day of an hour, written by hand, against gmtime_r + strftime (every day from
 * 1970 to 2553, and each hour of two years); the count sums' mask against coll_sum_is_count. */
static void test_day_of_hour(void **state)
{
	char got[16], want[16];

	(void)state;
	for (uint64_t h = 0; h < 213302ULL * 24; h += 24) { /* 1970-01-01 .. 2553-12-31 */
		for (uint64_t k = 0; k < 24; k += h < 2 * 8784 ? 1 : 23) {
			time_t t = (time_t)((h + k) * 3600);
			struct tm tm;

			gmtime_r(&t, &tm);
			strftime(want, sizeof(want), "%Y-%m-%d", &tm);
			coll_day_of_hour(h + k, got);
			if (strcmp(got, want) != 0) {
				print_error("hour %llu: %s, want %s\n", (unsigned long long)(h + k),
					    got, want);
				fail();
			}
		}
	}
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		assert_int_equal(COLL_SUMS_COUNT >> s & 1, coll_sum_is_count(s));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tokens_ok),
	    cmocka_unit_test(test_tokens_many),
	    cmocka_unit_test(test_labels_json),
	    cmocka_unit_test(test_pgcopy),
	    cmocka_unit_test(test_tokens_errors),
	    cmocka_unit_test(test_tokens_file_mode),
	    cmocka_unit_test(test_parse_listen),
	    cmocka_unit_test(test_record_sums),
	    cmocka_unit_test(test_day_of_hour),
	    cmocka_unit_test(test_store_bad_uri),
	    cmocka_unit_test_setup_teardown(test_store_idempotent, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_store_ingest_sync, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_store_conflicts, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_rollup_sums, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_rollup_sums_queued, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_rollup_sums_prebuilt, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_open_touch, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_open_touch_one_batch, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_open_alive, setup_store, teardown_store),
	    cmocka_unit_test(test_alive_decode),
	    cmocka_unit_test_setup_teardown(test_node_rollup, setup_store, teardown_store),
	    cmocka_unit_test_setup_teardown(test_node_alloc, setup_store, teardown_store),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
