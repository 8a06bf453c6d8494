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
#include "common/clock.h"
#include "collector/store.h"

/*
 * Verify recs[0..n) in chain order. recs[0]'s prev_hash is not checked (the range may start
 * anywhere). Returns 0 when intact; -EBADMSG with *ret_first_bad = index of the first bad
 * record and a reason in why ("record X: hash does not match its content" / "record X:
 * prev_hash ... is not the hash of the previous record Y"); -EINVAL for a non-audit record.
 */
int coll_chain_verify(const struct acct_record *recs, size_t n, size_t *ret_first_bad, char *why,
		      size_t whylen);

#define COLL_CHAIN_HELD_IDS 8
struct coll_chain_result {
	uint64_t checked;		 /* audit records of the node examined */
	bool intact;			 /* no break found */
	char first_bad[ACCT_ID_MAX];	 /* record_id of the first bad record, "" when intact */
	char why[2 * ACCT_ID_MAX + 192]; /* reason, "" when intact */
	/* declared, not broken: audit.gap records (records the agent shed by policy) and
	 * audit.summary records (events past a task's budget, counted) */
	uint64_t gaps, shed, summaries, summarized;
	char first_gap[RFC3339_MAX]; /* "from" of the earliest gap, "" when none */
	/* links of the chain that are records held as conflicts (table conflicts: the id was
	 * stored with another body, so this one was kept aside, not stored): not a break */
	uint64_t held;
	char held_ids[COLL_CHAIN_HELD_IDS * ACCT_ID_MAX + 16]; /* the first of them, ", " */
};

/*
 * Verify the whole audit chain of one node as stored: reads the node's audit.* rows
 * (coll_store_query, type NULL, filtered here), decodes each body, puts them in chain order
 * (following prev_hash links from the earliest stored record, falling back to the store's
 * time order where a link is missing), requires the first record to start a chain (empty
 * prev_hash), then runs coll_chain_verify. A body that does not decode is the first bad
 * record. A record held as a conflict (coll_store_conflict_query: received, not stored, its id
 * holding another body) takes its place in the chain when a stored record names it as its
 * predecessor and no stored record has its hash; it is counted in held, not a break (its
 * hash and both links are checked as any record's). At most max_records records are held in memory
 * (-E2BIG beyond; 0 = 10 million). Returns 0 with *ret filled (intact or not), or -errno when the
 * store cannot be read.
 */
int coll_chain_verify_node(struct coll_store *s, const char *node, size_t max_records,
			   struct coll_chain_result *ret);

/* ---- verification at ingest ---- */

enum coll_break_kind {
	COLL_BREAK_HASH,    /* the record's hash does not match its content */
	COLL_BREAK_LINK,    /* its prev_hash is the hash of no stored record of the node */
	COLL_BREAK_RESTART, /* empty prev_hash although the node has earlier audit records */
	_COLL_BREAK_MAX,
	_COLL_BREAK_INVALID = -1,
};
const char *coll_break_kind_to_string(enum coll_break_kind k);

struct coll_chain_break {
	const char *record_id; /* borrowed from the batch */
	const char *node;
	enum coll_break_kind kind;
	char why[2 * ACCT_ID_MAX + 256];
	bool listed; /* this call added it to audit_breaks (false: already there, or failed) */
};
typedef void (*coll_chain_break_fn)(const struct coll_chain_break *b, void *userdata);

/* Per-node chain heads (last audit record checked at ingest), shared by the server threads. */
struct coll_chain_heads;
int coll_chain_heads_new(struct coll_chain_heads **ret);
void coll_chain_heads_free(struct coll_chain_heads *h);

struct coll_chain_ingest_stats {
	size_t checked;	  /* new audit records checked */
	size_t breaks;	  /* of them, flagged */
	size_t lookups;	  /* predecessors looked up in the store (head unknown or stale) */
	size_t unchecked; /* left unchecked because the store failed */
};

/*
 * Check the audit records of a committed batch (items[].is_new as insert_batch set it), in
 * batch order, against the chain heads: each new record's hash must match its content and
 * its prev_hash must be the hash of the node's previous record. Fast path: prev_hash equals
 * the in-memory head. Otherwise (collector restarted, another collector took the previous
 * batch, a break) the predecessor is looked up in the store by its hash; an empty prev_hash
 * is accepted only for a node without earlier audit records. Duplicates are not checked (they
 * were when first stored). A break is added to audit_breaks, on_break is called for it (may
 * be NULL), and the head moves on to the record anyway, so one gap is flagged once. Records
 * are never rejected here. Returns 0, or the first store error (the other records are still
 * checked; *ret counts what was left unchecked).
 */
int coll_chain_ingest(struct coll_chain_heads *h, struct coll_store *s,
		      const struct coll_item *items, size_t n, coll_chain_break_fn on_break,
		      void *userdata, struct coll_chain_ingest_stats *ret);
