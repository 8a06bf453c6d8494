/* SPDX-License-Identifier: MIT */
/*
 * Audit hash chain verification: over an array of records in chain order, and over a node's
 * records read back from the store. See collector/audit_chain.h and docs/audit.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/audit_chain.h"
#include "common/macro.h"

#define CHAIN_DEFAULT_MAX 10000000u

int coll_chain_verify(const struct acct_record *recs, size_t n, size_t *ret_first_bad, char *why,
		      size_t whylen)
{
	for (size_t i = 0; i < n; i++) {
		const struct acct_record *r = &recs[i];

		if (!acct_type_is_audit(r->type)) {
			if (why && whylen)
				snprintf(why, whylen, "record %s: not an audit record",
					 r->record_id);
			return -EINVAL;
		}
		if (acct_record_verify_hash(r) < 0) {
			if (why && whylen)
				snprintf(why, whylen, "record %s: hash does not match its content",
					 r->record_id);
			*ret_first_bad = i;
			return -EBADMSG;
		}
		if (i > 0 && strcmp(r->prev_hash, recs[i - 1].hash) != 0) {
			if (why && whylen)
				snprintf(
				    why, whylen,
				    "record %s: prev_hash %.12s... is not the hash of the "
				    "previous record %s (%.12s...): a record is missing or was "
				    "replaced",
				    r->record_id, r->prev_hash[0] ? r->prev_hash : "(empty)",
				    recs[i - 1].record_id, recs[i - 1].hash);
			*ret_first_bad = i;
			return -EBADMSG;
		}
	}
	return 0;
}

struct collect {
	struct acct_record *recs;
	size_t n, cap, max;
	bool decode_failed;
	char bad_id[ACCT_ID_MAX];
	char err[160];
	uint64_t seen;
};

static int on_row(const struct coll_row *row, void *userdata)
{
	struct collect *c = userdata;
	enum acct_type t = acct_type_from_string(row->type);
	char err[160];
	int r;

	if (t == _ACCT_TYPE_INVALID || !acct_type_is_audit(t) || c->decode_failed)
		return 0;
	c->seen++;
	if (c->n == c->max)
		return -E2BIG;
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 256;
		struct acct_record *nr = realloc(c->recs, nc * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		c->recs = nr;
		c->cap = nc;
	}
	r = acct_record_decode(row->body, strlen(row->body), &c->recs[c->n], err, sizeof(err));
	if (r == -ENOMEM)
		return r;
	if (r < 0 || !acct_type_is_audit(c->recs[c->n].type)) {
		if (r == 0)
			acct_record_clear(&c->recs[c->n]);
		c->decode_failed = true;
		snprintf(c->bad_id, sizeof(c->bad_id), "%s", row->record_id);
		snprintf(c->err, sizeof(c->err), "%s", r < 0 ? err : "type changed");
		return 0;
	}
	c->n++;
	return 0;
}

struct by_prev {
	const char *prev;
	size_t idx;
};

static int cmp_by_prev(const void *a, const void *b)
{
	const struct by_prev *x = a, *y = b;
	int c = strcmp(x->prev, y->prev);

	if (c)
		return c;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/*
 * Chain order: from the first stored record, follow "whose prev_hash is my hash" (the first
 * unused one in store order when several claim the same predecessor); where no record
 * links, continue with the next unused record in store order. Intact chains come out in
 * chain order whatever the store's order; a break shows up at the record after the gap.
 */
static int chain_order(const struct acct_record *recs, size_t n, size_t *order)
{
	_cleanup_free_ struct by_prev *bp = calloc(n ? n : 1, sizeof(*bp));
	_cleanup_free_ bool *used = calloc(n ? n : 1, sizeof(*used));
	size_t scan = 0, cur = 0;

	if (!bp || !used)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		bp[i] = (struct by_prev){.prev = recs[i].prev_hash, .idx = i};
	qsort(bp, n, sizeof(*bp), cmp_by_prev);
	for (size_t k = 0; k < n; k++) {
		struct by_prev key = {.prev = recs[cur].hash, .idx = 0};
		size_t lo = 0, hi = n;
		bool found = false;

		order[k] = cur;
		used[cur] = true;
		/* lower bound of (hash, 0) */
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (cmp_by_prev(&bp[mid], &key) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < n && !strcmp(bp[lo].prev, recs[cur].hash); lo++)
			if (!used[bp[lo].idx]) {
				cur = bp[lo].idx;
				found = true;
				break;
			}
		if (found)
			continue;
		while (scan < n && used[scan])
			scan++;
		if (scan == n)
			break;
		cur = scan;
	}
	return 0;
}

int coll_chain_verify_node(struct coll_store *s, const char *node, size_t max_records,
			   struct coll_chain_result *ret)
{
	struct coll_query q = {.node = node};
	struct collect c = {.max = max_records ? max_records : CHAIN_DEFAULT_MAX};
	struct coll_chain_result res = {.intact = true};
	_cleanup_free_ size_t *order = NULL;
	_cleanup_free_ struct acct_record *ordered = NULL;
	size_t bad = 0;
	int r;

	if (!node || !*node)
		return -EINVAL;
	r = coll_store_query(s, &q, on_row, &c);
	if (r < 0)
		goto out_free;
	res.checked = c.seen;
	if (c.decode_failed) {
		res.intact = false;
		snprintf(res.first_bad, sizeof(res.first_bad), "%s", c.bad_id);
		snprintf(res.why, sizeof(res.why), "record %s: stored body does not decode: %s",
			 c.bad_id, c.err);
		goto out_done;
	}
	if (c.n == 0)
		goto out_done;
	order = calloc(c.n, sizeof(*order));
	ordered = calloc(c.n, sizeof(*ordered));
	if (!order || !ordered) {
		r = -ENOMEM;
		goto out_free;
	}
	r = chain_order(c.recs, c.n, order);
	if (r < 0)
		goto out_free;
	/* Shallow copies: c.recs keeps ownership. */
	for (size_t i = 0; i < c.n; i++)
		ordered[i] = c.recs[order[i]];
	if (ordered[0].prev_hash[0]) {
		res.intact = false;
		snprintf(res.first_bad, sizeof(res.first_bad), "%s", ordered[0].record_id);
		snprintf(res.why, sizeof(res.why),
			 "record %s: first stored record does not start a chain (prev_hash "
			 "%.12s...): earlier records are missing",
			 ordered[0].record_id, ordered[0].prev_hash);
		goto out_done;
	}
	r = coll_chain_verify(ordered, c.n, &bad, res.why, sizeof(res.why));
	if (r == -EBADMSG) {
		res.intact = false;
		snprintf(res.first_bad, sizeof(res.first_bad), "%s", ordered[bad].record_id);
		r = 0;
	} else if (r < 0) {
		goto out_free;
	}
out_done:
	*ret = res;
	r = 0;
out_free:
	for (size_t i = 0; i < c.n; i++)
		acct_record_clear(&c.recs[i]);
	free(c.recs);
	return r;
}
