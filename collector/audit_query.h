/* SPDX-License-Identifier: MIT */
/*
 * Audit record queries shared by `corral-collector audit` and GET /v1/audit: one filter, set
 * parameter by parameter from the command line or the query string (the same names, the same
 * checks, errors naming the parameter), run over the store oldest first with a keyset cursor.
 * Library code: never prints, returns 0 or -errno. See docs/audit.md.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "accounting/record.h"
#include "collector/audit_chain.h"
#include "collector/store.h"
#include "common/macro.h"

#define COLL_AUDIT_LIMIT_DEFAULT 1000 /* HTTP API default */
#define COLL_AUDIT_LIMIT_MAX	 100000
/* "<time_ns>.<hex of record_id>" */
#define COLL_AUDIT_CURSOR_MAX (DECIMAL_STR_MAX(uint64_t) + 1 + 2 * ACCT_ID_MAX)

struct coll_audit_filter {
	const char *node, *task, *job, *user; /* borrowed, NULL = any */
	const char *type;		      /* "audit.exec", ... (from exec|connect|...) */
	uint64_t from_ns, to_ns;	      /* from <= time < to; 0 = open */
	bool has_after;			      /* cursor given: rows after (after_ns, after_id) */
	uint64_t after_ns;
	char after_id[ACCT_ID_MAX];
	size_t limit; /* 0 = all */
};

/*
 * Set one parameter: node, task, job, user (non-empty, < 256 bytes), from, to (RFC 3339 UTC,
 * "2026-03-01T00:00:00Z"), type (exec|connect|syscall|limit|lost), limit (1..100000), after (a
 * cursor from a previous answer). -EINVAL with "<key>: expected ..., got '...'" in err, or
 * "unknown parameter '<key>'"; from >= to is reported by the one set last.
 */
int coll_audit_filter_set(struct coll_audit_filter *f, const char *key, const char *value,
			  char *err, size_t errlen);

/* The store query for f (limit excluded). */
void coll_audit_filter_query(const struct coll_audit_filter *f, struct coll_query *ret);

/* Cursor text of a row position, and back (-EINVAL when it is not one). */
int coll_audit_cursor_format(uint64_t time_ns, const char *record_id, char *buf, size_t len);
int coll_audit_cursor_parse(const char *s, uint64_t *ret_time_ns, char ret_id[ACCT_ID_MAX]);

/*
 * Stored audit records matching f, oldest first (time, then record_id): fn for each, at most
 * f->limit (0 = all). When more match, next (if not NULL) gets the cursor to pass as "after"
 * for the next page, else "". A negative return of fn stops the query and is returned.
 */
int coll_audit_query(struct coll_store *s, const struct coll_audit_filter *f, coll_row_fn fn,
		     void *ud, char *next, size_t nextlen);

/* {"node":..,"intact":..,"checked":N[,"first_bad":..,"why":..]} and a newline. */
int coll_chain_result_write_json(FILE *out, const char *node, const struct coll_chain_result *r);
