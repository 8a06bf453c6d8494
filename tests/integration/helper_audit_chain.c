/* SPDX-License-Identifier: MIT */
/*
 * Hash-chained audit records for tests/integration/collector_audit.sh (NDJSON on stdout), built
 * with the agent's own code (acct_record_compute_hash), so the hashes are real.
 *   helper_audit_chain --node N [--prefix P] --from I --to J [--skip K] [--tamper K]
 *                      [--restart K]
 * One chain per node, records 0, 1, 2, ... of it; prints records I..J-1 (J excluded).
 * Record i: id "<P><N>-a<i>", type exec (i % 3 == 0 or 1) or connect (i % 3 == 2), task
 * "<N>-t<i/4>", job "job<i/8>", user alice (task even) or bob (task odd),
 * time 2026-03-01T00:00:00Z + i seconds (UTC), event with argv "prog<i>".
 * --skip K:    record K is part of the chain but never printed (a record lost on the way).
 * --tamper K:  record K's event is changed after hashing (its hash no longer matches).
 * --restart K: record K has an empty prev_hash (a new chain where one was going on).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "accounting/record.h"
#include "common/macro.h"
#include "common/parse.h"

#define T0_NS (1772323200ULL * NSEC_PER_SEC) /* 2026-03-01T00:00:00Z */

static int make(const char *node, const char *prefix, uint64_t i, const char *prev,
		struct acct_record *r)
{
	char argv0[32];
	uint64_t task = i / 4;

	memset(r, 0, sizeof(*r));
	snprintf(r->record_id, sizeof(r->record_id), "%s%s-a%" PRIu64, prefix, node, i);
	r->type = i % 3 == 2 ? ACCT_AUDIT_CONNECT : ACCT_AUDIT_EXEC;
	r->time_ns = T0_NS + i * NSEC_PER_SEC;
	r->node = strdup(node);
	snprintf(r->task.id, sizeof(r->task.id), "%s-t%" PRIu64, node, task);
	if (asprintf(&r->task.job, "job%" PRIu64, i / 8) < 0)
		r->task.job = NULL;
	r->task.user = strdup(task % 2 ? "bob" : "alice");
	if (!r->node || !r->task.job || !r->task.user)
		return -ENOMEM;
	snprintf(argv0, sizeof(argv0), "prog%" PRIu64, i);
	r->event = r->type == ACCT_AUDIT_CONNECT
		       ? json_pack("{s:s,s:s,s:i,s:s,s:s,s:i,s:s}", "family", "inet", "address",
				   "10.0.0.1", "port", (int)(1000 + i % 60000), "protocol", "tcp",
				   "verdict", "allow", "pid", 100, "op", "connect")
		       : json_pack("{s:s,s:[s],s:b,s:i,s:i,s:i,s:i,s:s}", "path", "/usr/bin/prog",
				   "argv", argv0, "argv_truncated", 0, "pid", 100, "ppid", 1, "uid",
				   0, "gid", 0, "cwd", "/");
	if (!r->event)
		return -ENOMEM;
	snprintf(r->prev_hash, sizeof(r->prev_hash), "%s", prev);
	return acct_record_compute_hash(r);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"node", required_argument, NULL, 'n'},    {"prefix", required_argument, NULL, 'p'},
	    {"from", required_argument, NULL, 'f'},    {"to", required_argument, NULL, 't'},
	    {"skip", required_argument, NULL, 's'},    {"tamper", required_argument, NULL, 'm'},
	    {"restart", required_argument, NULL, 'r'}, {}};
	const char *node = NULL, *prefix = "";
	uint64_t from = 0, to = 0, skip = UINT64_MAX, tamper = UINT64_MAX, restart = UINT64_MAX;
	char prev[ACCT_HASH_HEX] = "";
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		uint64_t *dst = c == 'f'   ? &from
				: c == 't' ? &to
				: c == 's' ? &skip
				: c == 'm' ? &tamper
				: c == 'r' ? &restart
					   : NULL;

		if (c == 'n')
			node = optarg;
		else if (c == 'p')
			prefix = optarg;
		else if (!dst || parse_u64(optarg, dst) < 0) {
			fprintf(stderr, "usage: helper_audit_chain --node N [--prefix P] --from I "
					"--to J [--skip K] [--tamper K] [--restart K]\n");
			return 2;
		}
	}
	if (!node || to <= from) {
		fprintf(stderr, "helper_audit_chain: --node and --from < --to are required\n");
		return 2;
	}
	for (uint64_t i = 0; i < to; i++) {
		struct acct_record r;
		char *line = NULL;
		size_t len;

		if (make(node, prefix, i, i == restart ? "" : prev, &r) < 0) {
			fprintf(stderr, "helper_audit_chain: cannot build record %" PRIu64 "\n", i);
			return 1;
		}
		memcpy(prev, r.hash, sizeof(prev));
		if (i == tamper)
			json_object_set_new(r.event, "path", json_string("/usr/bin/tampered"));
		if (i >= from && i != skip) {
			if (acct_record_encode(&r, &line, &len) < 0) {
				fprintf(stderr, "helper_audit_chain: cannot encode %" PRIu64 "\n",
					i);
				return 1;
			}
			fwrite(line, 1, len, stdout);
			fputc('\n', stdout);
			free(line);
		}
		acct_record_clear(&r);
	}
	return fflush(stdout) == 0 ? 0 : 1;
}
