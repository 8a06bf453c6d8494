/* SPDX-License-Identifier: MIT */
/*
 * The compact form of a batch's bucketed rollup deltas, as PostgreSQL ingest queues them in
 * rollup_pending (docs/collector.md, "Queued deltas"). Per delta: the table (1 byte), the
 * bucket (length byte, bytes), the table's own keys (varint length, bytes each), a bitmap of
 * the sums that are not zero and a bitmap of those among them that are whole numbers (both
 * varints), then each such sum: a zigzag varint if whole, else the 8 bytes of the double,
 * little-endian. Exact:
 * decoding gives back every sum bit for bit (a -0.0 comes back as 0).
 */
#ifndef CORRAL_COLLECTOR_PENDING_H
#define CORRAL_COLLECTOR_PENDING_H

#include <stddef.h>

#include "collector/store.h"

/* rollup_pending.layout of this form. Values below 1000 are the older form: rollup_in rows
 * of that many fields in binary COPY layout. */
#define COLL_PENDING_LAYOUT_COMPACT 1001

/* The fewest bytes one delta takes (table, bucket length, two key lengths, two bitmaps): at
 * most len / COLL_PENDING_ROW_MIN deltas are in len bytes. */
#define COLL_PENDING_ROW_MIN 6

/* Bucketed deltas (no COLL_ROLLUP_OPEN) of d[0..nd) encoded, malloc'd to *ret. -EINVAL for a
 * delta that cannot be (rollup_open, a bucket of 16 bytes or more). */
int coll_pending_encode(const struct coll_delta *d, size_t nd, unsigned char **ret, size_t *len);

/*
 * The deltas of one encoded batch appended to d (room for len / COLL_PENDING_ROW_MIN more),
 * *nd counts them. Key texts are copied to *arena with a NUL (len + 1 bytes suffice for one
 * batch); keys the table does not have are "". -EBADMSG for anything but well-formed input:
 * truncated, an unknown table, a bucket or key with a NUL, bits set past the sums.
 */
int coll_pending_decode(const unsigned char *p, size_t len, struct coll_delta *d, size_t *nd,
			char **arena);

/*
 * The deltas of the batches one fold takes, gathered: before each batch of len bytes is
 * decoded into d[n..), coll_pending_reserve makes room for its len / COLL_PENDING_ROW_MIN
 * (grown, not zeroed: the room a batch does not fill is never touched); after it,
 * coll_pending_settle merges the whole in place (coll_deltas_merge) once it has doubled since
 * the last merge, so the memory follows the distinct keys rather than the batches (a fold of a
 * minute of a fleet takes tens of thousands of batches of a few keys each).
 */
struct coll_pending_set {
	struct coll_delta *d;
	size_t n, cap, merged;
};
/* -ENOMEM */
int coll_pending_reserve(struct coll_pending_set *s, size_t len);
void coll_pending_settle(struct coll_pending_set *s);

#endif
