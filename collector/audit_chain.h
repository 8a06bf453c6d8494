/* SPDX-License-Identifier: MIT */
/*
 * Audit hash chain verification (collector side). Each audit record carries prev_hash (the
 * hash of the node's previous audit record, "" at the start of the chain) and hash (SHA-256
 * of its canonical form, accounting/record.h). A chain is intact when every record's hash
 * matches its content and every prev_hash is the previous record's hash.
 * Library code: never prints, returns 0 or -errno. See docs/audit.md.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "accounting/record.h"
#include "collector/store.h"

/*
 * Verify recs[0..n) in chain order. recs[0]'s prev_hash is not checked (the range may start
 * anywhere). Returns 0 when intact; -EBADMSG with *ret_first_bad = index of the first bad
 * record and a reason in why ("record X: hash does not match its content" / "record X:
 * prev_hash ... is not the hash of the previous record Y"); -EINVAL for a non-audit record.
 */
int coll_chain_verify(const struct acct_record *recs, size_t n, size_t *ret_first_bad, char *why,
		      size_t whylen);

struct coll_chain_result {
	uint64_t checked;		 /* audit records of the node examined */
	bool intact;			 /* no break found */
	char first_bad[ACCT_ID_MAX];	 /* record_id of the first bad record, "" when intact */
	char why[2 * ACCT_ID_MAX + 192]; /* reason, "" when intact */
};

/*
 * Verify the whole audit chain of one node as stored: reads the node's audit.* rows
 * (coll_store_query, type NULL, filtered here), decodes each body, puts them in chain order
 * (following prev_hash links from the earliest stored record, falling back to the store's
 * time order where a link is missing), requires the first record to start a chain (empty
 * prev_hash), then runs coll_chain_verify. A body that does not decode is the first bad
 * record. At most max_records records are held in memory (-E2BIG beyond; 0 = 10 million).
 * Returns 0 with *ret filled (intact or not), or -errno when the store cannot be read.
 */
int coll_chain_verify_node(struct coll_store *s, const char *node, size_t max_records,
			   struct coll_chain_result *ret);
