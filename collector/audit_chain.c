/* SPDX-License-Identifier: MIT */
/*
 * Audit hash chain verification: over an array of records in chain order, and over a node's
 * records read back from the store. See collector/audit_chain.h and docs/audit.md.
 */
#include <errno.h>
#include <pthread.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector/audit_chain.h"
#include "common/macro.h"
#include "common/clock.h"

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
	size_t n_stored; /* recs[n_stored..n) are records held as conflicts */
	uint64_t gaps, shed, summaries, summarized;
	char first_gap[RFC3339_MAX];
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
	if (c->recs[c->n].type == ACCT_AUDIT_GAP) {
		json_t *ev = c->recs[c->n].event;
		const char *from = json_string_value(json_object_get(ev, "from"));

		c->gaps++;
		c->shed += (uint64_t)json_integer_value(json_object_get(ev, "shed"));
		if (from && (!c->first_gap[0] || strcmp(from, c->first_gap) < 0))
			snprintf(c->first_gap, sizeof(c->first_gap), "%s", from);
	} else if (c->recs[c->n].type == ACCT_AUDIT_SUMMARY) {
		c->summaries++;
		c->summarized +=
		    (uint64_t)json_integer_value(json_object_get(c->recs[c->n].event, "count"));
	}
	c->n++;
	return 0;
}

/*
 * Decodes a conflict's received body as an audit record of its node whose hash matches its
 * content: 1 when it is one (rec filled, the caller clears it), 0 when it is not (rec
 * cleared), -ENOMEM.
 */
static int held_decode(const struct coll_conflict *cf, struct acct_record *rec)
{
	char err[160];
	int r;

	r = acct_record_decode(cf->received_body, strlen(cf->received_body), rec, err, sizeof(err));
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return 0;
	if (acct_type_is_audit(rec->type) && rec->node && strcmp(rec->node, cf->node) == 0 &&
	    acct_record_verify_hash(rec) == 0)
		return 1;
	acct_record_clear(rec);
	return 0;
}

/*
 * A conflict's received body: kept as a link of the chain when it is an audit record whose
 * hash matches its content, that a stored record names as its predecessor, and whose hash no
 * stored record has (then it is the one missing link, not a second copy).
 */
static int on_held(const struct coll_conflict *cf, void *userdata)
{
	struct collect *c = userdata;
	struct acct_record rec = {0};
	bool wanted = true;
	int r;

	r = held_decode(cf, &rec);
	if (r <= 0)
		return r;
	for (size_t i = 0; i < c->n && wanted; i++)
		if (strcmp(c->recs[i].hash, rec.hash) == 0)
			wanted = false; /* stored, or held twice */
	if (wanted) {
		wanted = false;
		for (size_t i = 0; i < c->n_stored && !wanted; i++)
			wanted = strcmp(c->recs[i].prev_hash, rec.hash) == 0;
	}
	if (!wanted) {
		acct_record_clear(&rec);
		return 0;
	}
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 256;
		struct acct_record *nr = realloc(c->recs, nc * sizeof(*nr));

		if (!nr) {
			acct_record_clear(&rec);
			return -ENOMEM;
		}
		c->recs = nr;
		c->cap = nc;
	}
	c->recs[c->n++] = rec;
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
	c.n_stored = c.n;
	if (!c.decode_failed && c.n > 0) {
		r = coll_store_conflict_query(s, node, on_held, &c);
		if (r < 0)
			goto out_free;
	}
	res.checked = c.seen;
	res.gaps = c.gaps;
	res.shed = c.shed;
	res.summaries = c.summaries;
	res.summarized = c.summarized;
	memcpy(res.first_gap, c.first_gap, sizeof(res.first_gap));
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
	for (size_t i = 0; i < c.n; i++) {
		size_t l = strlen(res.held_ids);

		if (order[i] < c.n_stored || (r == -EBADMSG && i >= bad))
			continue;
		if (res.held++ < COLL_CHAIN_HELD_IDS)
			snprintf(res.held_ids + l, sizeof(res.held_ids) - l, "%s%s", l ? ", " : "",
				 ordered[i].record_id);
	}
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

/* ---- verification at ingest ---- */

static const char *const break_kinds[_COLL_BREAK_MAX] = {
    [COLL_BREAK_HASH] = "hash",
    [COLL_BREAK_LINK] = "link",
    [COLL_BREAK_RESTART] = "restart",
};

const char *coll_break_kind_to_string(enum coll_break_kind k)
{
	return (unsigned)k < _COLL_BREAK_MAX ? break_kinds[k] : NULL;
}

struct head {
	char *node;
	char hash[ACCT_HASH_HEX];
	char record_id[ACCT_ID_MAX];
};

struct coll_chain_heads {
	pthread_mutex_t lock;
	void *root; /* tsearch tree of struct head, by node */
};

static int head_cmp(const void *a, const void *b)
{
	return strcmp(((const struct head *)a)->node, ((const struct head *)b)->node);
}

static void head_free(void *p)
{
	struct head *h = p;

	free(h->node);
	free(h);
}

int coll_chain_heads_new(struct coll_chain_heads **ret)
{
	struct coll_chain_heads *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->lock, NULL);
	*ret = h;
	return 0;
}

void coll_chain_heads_free(struct coll_chain_heads *h)
{
	if (!h)
		return;
	tdestroy(h->root, head_free);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

static struct head *head_find(struct coll_chain_heads *h, const char *node)
{
	struct head key = {.node = (char *)node};
	void *p = tfind(&key, &h->root, head_cmp);

	return p ? *(struct head **)p : NULL;
}

/* Move (or create) the node's head to r; -ENOMEM leaves the node unknown. */
static int head_set(struct coll_chain_heads *h, struct head *cur, const struct acct_record *r)
{
	if (!cur) {
		void *p;

		cur = calloc(1, sizeof(*cur));
		if (!cur || !(cur->node = strdup(r->node))) {
			free(cur);
			return -ENOMEM;
		}
		p = tsearch(cur, &h->root, head_cmp);
		if (!p || *(struct head **)p != cur) {
			head_free(cur);
			return -ENOMEM;
		}
	}
	memcpy(cur->hash, r->hash, sizeof(cur->hash));
	memcpy(cur->record_id, r->record_id, sizeof(cur->record_id));
	return 0;
}

static int count_row(const struct coll_row *row, void *ud)
{
	(void)row;
	(*(size_t *)ud)++;
	return 0;
}

static bool checked_here(const struct coll_item *it)
{
	return it->is_new && acct_type_is_audit(it->rec->type) && it->rec->node;
}

struct held_find {
	const char *hash;
	bool found;
};

static int held_cb(const struct coll_conflict *cf, void *userdata)
{
	struct held_find *hf = userdata;
	struct acct_record rec = {0};
	int r;

	if (hf->found)
		return 0;
	r = held_decode(cf, &rec);
	if (r <= 0)
		return r;
	hf->found = strcmp(rec.hash, hf->hash) == 0;
	acct_record_clear(&rec);
	return 0;
}

/* Whether the node's record of that hash is held as a conflict: 1 yes, 0 no, -errno. */
static int held_link(struct coll_store *s, const char *node, const char *hash)
{
	struct held_find hf = {.hash = hash};
	int r = coll_store_conflict_query(s, node, held_cb, &hf);

	return r < 0 ? r : hf.found;
}

/*
 * Link check of one record whose head is unknown or different: 1 linked (to a stored record,
 * or to one held as a conflict), 0 a break (kind and why set), -errno when the store cannot
 * tell.
 */
static int link_lookup(struct coll_store *s, const struct coll_item *items, size_t n,
		       const struct acct_record *r, const struct head *cur,
		       struct coll_chain_break *b, struct coll_chain_ingest_stats *st)
{
	size_t found = 0, k = 0;
	struct coll_query q = {.node = r->node, .audit = COLL_QUERY_AUDIT_ONLY, .limit = 1};
	int ret;

	if (r->prev_hash[0] == 0) {
		if (cur) {
			b->kind = COLL_BREAK_RESTART;
			snprintf(b->why, sizeof(b->why),
				 "record %s: starts a new chain (empty prev_hash) after record %s",
				 r->record_id, cur->record_id);
			return 0;
		}
		/* A chain start is genuine when the node's only stored audit records are the
		 * ones this batch added. */
		for (size_t i = 0; i < n; i++)
			if (checked_here(&items[i]) && strcmp(items[i].rec->node, r->node) == 0)
				k++;
		q.limit = k + 1;
		st->lookups++;
		ret = coll_store_query(s, &q, count_row, &found);
		if (ret < 0)
			return ret;
		if (found <= k)
			return 1;
		b->kind = COLL_BREAK_RESTART;
		snprintf(b->why, sizeof(b->why),
			 "record %s: starts a new chain (empty prev_hash) but node %.64s has "
			 "earlier stored audit records",
			 r->record_id, r->node);
		return 0;
	}
	q.hash = r->prev_hash;
	st->lookups++;
	ret = coll_store_query(s, &q, count_row, &found);
	if (ret < 0)
		return ret;
	if (found)
		return 1;
	ret = held_link(s, r->node, r->prev_hash);
	if (ret != 0)
		return ret;
	b->kind = COLL_BREAK_LINK;
	snprintf(b->why, sizeof(b->why),
		 "record %s: prev_hash %.12s... is not the hash of any stored audit record of "
		 "node %.64s: a record is missing or was replaced%s%s",
		 r->record_id, r->prev_hash, r->node, cur ? "; previous record received: " : "",
		 cur ? cur->record_id : "");
	return 0;
}

int coll_chain_ingest(struct coll_chain_heads *h, struct coll_store *s,
		      const struct coll_item *items, size_t n, coll_chain_break_fn on_break,
		      void *userdata, struct coll_chain_ingest_stats *ret)
{
	struct coll_chain_ingest_stats st = {0};
	_cleanup_free_ signed char *hash_ok = NULL;
	char detected[RFC3339_MAX];
	size_t n_audit = 0;
	int first_err = 0, r;

	for (size_t i = 0; i < n; i++)
		if (checked_here(&items[i]))
			n_audit++;
	if (n_audit == 0)
		goto out;
	/* The hashes need no shared state: computed before taking the lock. */
	hash_ok = calloc(n, sizeof(*hash_ok));
	for (size_t i = 0; hash_ok && i < n; i++) {
		if (!checked_here(&items[i]))
			continue;
		r = acct_record_verify_hash(items[i].rec);
		if (r == -ENOMEM) {
			free(TAKE_PTR(hash_ok));
			break;
		}
		hash_ok[i] = r == 0;
	}
	if (!hash_ok) {
		st.unchecked = n_audit;
		first_err = -ENOMEM;
		goto out;
	}
	format_rfc3339_us(now_ns(CLOCK_REALTIME), detected, sizeof(detected));

	pthread_mutex_lock(&h->lock);
	for (size_t i = 0; i < n; i++) {
		const struct acct_record *rec = items[i].rec;
		struct coll_chain_break b = {.record_id = rec->record_id, .node = rec->node};
		struct head *cur;
		int linked = 1;

		if (!checked_here(&items[i]))
			continue;
		st.checked++;
		cur = head_find(h, rec->node);
		if (!hash_ok[i]) {
			b.kind = COLL_BREAK_HASH;
			snprintf(b.why, sizeof(b.why), "record %s: hash does not match its content",
				 rec->record_id);
			linked = 0;
		} else if (!cur || strcmp(rec->prev_hash, cur->hash) != 0) {
			linked = link_lookup(s, items, n, rec, cur, &b, &st);
		}
		if (linked < 0) {
			st.unchecked++;
			if (!first_err)
				first_err = linked;
		} else if (linked == 0) {
			struct coll_audit_break ab = {
			    .record_id = rec->record_id,
			    .node = rec->node,
			    .kind = coll_break_kind_to_string(b.kind),
			    .reason = b.why,
			    .detected = detected,
			};

			st.breaks++;
			r = coll_store_break_add(s, &ab);
			if (r < 0 && !first_err)
				first_err = r;
			b.listed = r > 0;
			if (on_break)
				on_break(&b, userdata);
		}
		r = head_set(h, cur, rec);
		if (r < 0 && !first_err)
			first_err = r;
	}
	pthread_mutex_unlock(&h->lock);
out:
	if (ret)
		*ret = st;
	return first_err;
}
