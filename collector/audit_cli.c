/* SPDX-License-Identifier: MIT */
/*
 * `corral-collector audit ...`: security-team queries over stored audit records.
 *   audit verify --db URI --node N      prove the node's hash chain intact, or name the first
 *                                       bad record (exit 1)
 *   audit --db URI [--node N] [--task ID] [--job J] [--user U] [--from T] [--to T]
 *         [--type exec|connect|syscall|limit|lost] [--limit N] [--format table|json]
 */
#include "collector/audit_cli.h"
#include "collector/audit_chain.h"
#include "collector/store.h"
#include "common/macro.h"
#include "common/util.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct audit_args {
	const char *db, *node, *task, *job, *user, *from, *to, *type, *format;
	uint64_t limit;
	bool json;
	size_t n;
};

static bool field_is(json_t *task, const char *key, const char *want)
{
	const char *v = json_string_value(json_object_get(task, key));

	return !want || (v && strcmp(v, want) == 0);
}

static int row_cb(const struct coll_row *row, void *ud)
{
	struct audit_args *a = ud;
	json_t *j, *task, *ev;
	json_error_t e;

	if (strncmp(row->type, "audit.", 6) != 0)
		return 0;
	if (a->type && strcmp(row->type + 6, a->type) != 0)
		return 0;
	if ((a->from && strcmp(row->time, a->from) < 0) || (a->to && strcmp(row->time, a->to) >= 0))
		return 0;
	j = json_loads(row->body, 0, &e);
	if (!j)
		return 0;
	task = json_object_get(j, "task");
	if (!field_is(task, "job", a->job) || !field_is(task, "user", a->user)) {
		json_decref(j);
		return 0;
	}
	if (a->json) {
		printf("%s\n", row->body);
	} else {
		char *evs;

		ev = json_object_get(j, "event");
		evs = json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
		printf("%-27s %-14s %-22s %-10s %s\n", row->time, row->type,
		       row->task_id ? row->task_id : "", row->user ? row->user : "",
		       evs ? evs : "");
		free(evs);
	}
	json_decref(j);
	a->n++;
	if (a->limit && a->n >= a->limit)
		return -ECANCELED;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: corral-collector audit verify --db URI --node N\n"
	    "       corral-collector audit --db URI [--node N] [--task ID] [--job J] [--user U]\n"
	    "              [--from RFC3339] [--to RFC3339] [--type "
	    "exec|connect|syscall|limit|lost]\n"
	    "              [--limit N] [--format table|json]\n");
}

int coll_cmd_audit(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"db", required_argument, NULL, 'd'},    {"node", required_argument, NULL, 'n'},
	    {"task", required_argument, NULL, 'k'},  {"job", required_argument, NULL, 'j'},
	    {"user", required_argument, NULL, 'u'},  {"from", required_argument, NULL, 'f'},
	    {"to", required_argument, NULL, 't'},    {"type", required_argument, NULL, 'T'},
	    {"limit", required_argument, NULL, 'L'}, {"format", required_argument, NULL, 'F'},
	    {"help", no_argument, NULL, 'h'},	     {}};
	struct audit_args a = {0};
	struct coll_store *store = NULL;
	bool verify = false;
	char err[512];
	int c, r;

	if (argc > 1 && strcmp(argv[1], "verify") == 0) {
		verify = true;
		argc--;
		argv++;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			a.db = optarg;
			break;
		case 'n':
			a.node = optarg;
			break;
		case 'k':
			a.task = optarg;
			break;
		case 'j':
			a.job = optarg;
			break;
		case 'u':
			a.user = optarg;
			break;
		case 'f':
			a.from = optarg;
			break;
		case 't':
			a.to = optarg;
			break;
		case 'T':
			if (strcmp(optarg, "exec") && strcmp(optarg, "connect") &&
			    strcmp(optarg, "syscall") && strcmp(optarg, "limit") &&
			    strcmp(optarg, "lost")) {
				fprintf(stderr,
					"corral-collector audit: --type: expected exec, connect, "
					"syscall, limit or lost, got '%s'\n",
					optarg);
				return 2;
			}
			a.type = optarg;
			break;
		case 'L':
			if (parse_u64(optarg, &a.limit) < 0) {
				fprintf(stderr,
					"corral-collector audit: --limit: expected a number\n");
				return 2;
			}
			break;
		case 'F':
			if (strcmp(optarg, "json") == 0)
				a.json = true;
			else if (strcmp(optarg, "table") != 0) {
				fprintf(
				    stderr,
				    "corral-collector audit: --format: expected table or json\n");
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!a.db) {
		fprintf(stderr, "corral-collector audit: --db is required\n");
		return 2;
	}
	if (verify && !a.node) {
		fprintf(stderr, "corral-collector audit verify: --node is required\n");
		return 2;
	}
	r = coll_store_open(a.db, COLL_STORE_NO_ROLLUPS, &store, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "corral-collector audit: --db: %s\n", err);
		return 1;
	}
	if (verify) {
		struct coll_chain_result res;

		r = coll_chain_verify_node(store, a.node, 0, &res);
		coll_store_close(store);
		if (r < 0) {
			fprintf(stderr, "corral-collector audit verify: %s\n", strerror(-r));
			return 1;
		}
		if (res.intact) {
			printf("node %s: audit chain intact (%llu records)\n", a.node,
			       (unsigned long long)res.checked);
			return 0;
		}
		printf("node %s: audit chain BROKEN at record %s: %s (%llu records checked)\n",
		       a.node, res.first_bad, res.why, (unsigned long long)res.checked);
		return 1;
	}
	{
		struct coll_query q = {.node = a.node, .task_id = a.task};

		if (!a.json)
			printf("%-27s %-14s %-22s %-10s %s\n", "TIME", "TYPE", "TASK", "USER",
			       "EVENT");
		r = coll_store_query(store, &q, row_cb, &a);
		if (r < 0 && r != -ECANCELED) {
			fprintf(stderr, "corral-collector audit: %s\n", coll_store_errmsg(store));
			coll_store_close(store);
			return 1;
		}
	}
	coll_store_close(store);
	if (!a.json)
		printf("(%zu records)\n", a.n);
	return 0;
}
