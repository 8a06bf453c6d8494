/* SPDX-License-Identifier: MIT */
/*
 * `corral-collector audit ...`: security-team queries over stored audit records.
 *   audit verify --db URI --node N [--format text|json]
 *                                       prove the node's hash chain intact, or name the first
 *                                       bad record (exit 1)
 *   audit breaks --db URI [--node N] [--limit N]   chain breaks flagged at ingest
 *   audit --db URI [--node N] [--task ID] [--job J] [--user U] [--from T] [--to T]
 *         [--type exec|connect|syscall|limit|lost] [--limit N] [--after CURSOR]
 *         [--format table|json]
 * The filters are those of GET /v1/audit (collector/audit_query.c), with the same checks.
 */
#include "collector/audit_cli.h"
#include "collector/audit_chain.h"
#include "collector/audit_query.h"
#include "collector/store.h"
#include "common/escape.h"
#include "common/macro.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct audit_args {
	const char *db;
	struct coll_audit_filter f;
	bool json;
	size_t n;
};

static int row_cb(const struct coll_row *row, void *ud)
{
	struct audit_args *a = ud;
	json_t *j, *ev;
	char *evs;

	a->n++;
	if (a->json) {
		printf("%s\n", row->body);
		return 0;
	}
	j = json_loads(row->body, 0, NULL);
	ev = j ? json_object_get(j, "event") : NULL;
	/* names and events come from agents and tasks: escaped for the terminal */
	evs = ev ? json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII) : NULL;
	{
		_cleanup_free_ char *task = esc_dup(row->task_id ? row->task_id : "");
		_cleanup_free_ char *user = esc_dup(row->user ? row->user : "");

		printf("%-27s %-14s %-22s %-10s %s\n", row->time, row->type, task ? task : "?",
		       user ? user : "?", evs ? evs : "");
	}
	free(evs);
	json_decref(j);
	return 0;
}

static int break_cb(const struct coll_audit_break *b, void *ud)
{
	size_t *n = ud;

	_cleanup_free_ char *node = esc_dup(b->node), *reason = esc_dup(b->reason);

	printf("%-27s %-12s %-8s %s\n", b->detected, node ? node : "?", b->kind,
	       reason ? reason : "?");
	(*n)++;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: corral-collector audit verify --db URI --node N [--format text|json]\n"
	    "       corral-collector audit breaks --db URI [--node N] [--limit N]\n"
	    "       corral-collector audit --db URI [--node N] [--task ID] [--job J] [--user U]\n"
	    "              [--from RFC3339] [--to RFC3339] [--type "
	    "exec|connect|syscall|limit|lost]\n"
	    "              [--limit N] [--after CURSOR] [--format table|json]\n");
}

static int cmd_verify(struct coll_store *store, const char *node, bool json)
{
	struct coll_chain_result res;
	int r = coll_chain_verify_node(store, node, 0, &res);

	if (r < 0) {
		fprintf(stderr, "corral-collector audit verify: %s\n",
			r == -ENOMEM || r == -E2BIG ? strerror(-r) : coll_store_errmsg(store));
		return 1;
	}
	if (json)
		coll_chain_result_write_json(stdout, node, &res);
	else if (res.intact) {
		printf("node %s: audit chain intact (%llu records)\n", node,
		       (unsigned long long)res.checked);
		if (res.held)
			printf("node %s: %llu record%s held as a conflict (received with an id "
			       "stored under another body; kept in table conflicts, links of the "
			       "chain): %s%s\n",
			       node, (unsigned long long)res.held, res.held == 1 ? "" : "s",
			       res.held_ids, res.held > COLL_CHAIN_HELD_IDS ? ", ..." : "");
		if (res.gaps)
			printf(
			    "node %s: %llu records shed by policy at %s and later (%llu audit.gap "
			    "record(s): the spool was full up to its billing reserve)\n",
			    node, (unsigned long long)res.shed, res.first_gap,
			    (unsigned long long)res.gaps);
		if (res.summaries)
			printf("node %s: %llu events past their task's record budget, counted in "
			       "%llu audit.summary record(s)\n",
			       node, (unsigned long long)res.summarized,
			       (unsigned long long)res.summaries);
	} else
		printf("node %s: audit chain BROKEN at record %s: %s (%llu records checked)\n",
		       node, res.first_bad, res.why, (unsigned long long)res.checked);
	return res.intact ? 0 : 1;
}

int coll_cmd_audit(int argc, char **argv)
{
	static const struct option opts[] = {{"db", required_argument, NULL, 'd'},
					     {"node", required_argument, NULL, 'n'},
					     {"task", required_argument, NULL, 'k'},
					     {"job", required_argument, NULL, 'j'},
					     {"user", required_argument, NULL, 'u'},
					     {"from", required_argument, NULL, 'f'},
					     {"to", required_argument, NULL, 't'},
					     {"type", required_argument, NULL, 'T'},
					     {"limit", required_argument, NULL, 'L'},
					     {"after", required_argument, NULL, 'A'},
					     {"format", required_argument, NULL, 'F'},
					     {"help", no_argument, NULL, 'h'},
					     {}};
	struct audit_args a = {0};
	struct coll_store *store = NULL;
	const char *sub = NULL, *format = NULL;
	char err[512], next[COLL_AUDIT_CURSOR_MAX];
	int c, idx, r;

	if (argc > 1 && (strcmp(argv[1], "verify") == 0 || strcmp(argv[1], "breaks") == 0)) {
		sub = argv[1];
		argc--;
		argv++;
	}
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
		switch (c) {
		case 'd':
			a.db = optarg;
			break;
		case 'F':
			format = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			fprintf(stderr,
				"corral-collector audit: option %s needs an argument; try --help\n",
				argv[optind - 1]);
			return 2;
		case '?':
			fprintf(stderr, "corral-collector audit: unknown option %s; try --help\n",
				argv[optind - 1]);
			return 2;
		default:
			/* the filter parameters: shared checks with GET /v1/audit */
			if (coll_audit_filter_set(&a.f, opts[idx].name, optarg, err, sizeof(err)) <
			    0) {
				fprintf(stderr, "corral-collector audit: --%s\n", err);
				return 2;
			}
			break;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "corral-collector audit: unexpected argument '%s'; try --help\n",
			argv[optind]);
		return 2;
	}
	if (format && strcmp(format, "json") == 0)
		a.json = true;
	else if (format && strcmp(format, sub && !strcmp(sub, "verify") ? "text" : "table") != 0) {
		fprintf(stderr, "corral-collector audit: --format: expected %s or json, got '%s'\n",
			sub && !strcmp(sub, "verify") ? "text" : "table", format);
		return 2;
	}
	if (!a.db) {
		fprintf(stderr, "corral-collector audit: --db is required\n");
		return 2;
	}
	if (sub && strcmp(sub, "verify") == 0 && !a.f.node) {
		fprintf(stderr, "corral-collector audit verify: --node is required\n");
		return 2;
	}
	r = coll_store_open(a.db, COLL_STORE_NO_ROLLUPS, &store, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "corral-collector audit: --db: %s\n", err);
		return 1;
	}
	if (sub && strcmp(sub, "verify") == 0) {
		r = cmd_verify(store, a.f.node, a.json);
		coll_store_close(store);
		return r;
	}
	if (sub) { /* breaks */
		printf("%-27s %-12s %-8s %s\n", "DETECTED", "NODE", "KIND", "REASON");
		r = coll_store_break_query(store, a.f.node, a.f.limit, break_cb, &a.n);
		if (r < 0)
			fprintf(stderr, "corral-collector audit breaks: %s\n",
				coll_store_errmsg(store));
		else
			printf("(%zu breaks)\n", a.n);
		coll_store_close(store);
		return r < 0 ? 1 : 0;
	}
	if (!a.json)
		printf("%-27s %-14s %-22s %-10s %s\n", "TIME", "TYPE", "TASK", "USER", "EVENT");
	r = coll_audit_query(store, &a.f, row_cb, &a, next, sizeof(next));
	if (r < 0) {
		fprintf(stderr, "corral-collector audit: %s\n", coll_store_errmsg(store));
		coll_store_close(store);
		return 1;
	}
	coll_store_close(store);
	if (!a.json)
		printf("(%zu records%s%s)\n", a.n, next[0] ? "; more with --after " : "", next);
	return 0;
}
