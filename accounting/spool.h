/* SPDX-License-Identifier: MIT */
/*
 * Durable spool: append-only segment files of CRC-framed entries, fsync'd before an append
 * returns. Entries are removed only when acked (a segment file is deleted once every entry
 * in it is acked). A torn tail (crash mid-write) is detected and truncated on open.
 * Bounded by max_bytes, in three admission classes: samples and audit records may use the
 * spool up to max_bytes - keep_reserve; the reserve is for billing entries (task.start,
 * task.end) alone, so no volume of audit or sample records can refuse a bill.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum spool_prio {
	SPOOL_PRIO_SHED,  /* task.sample: up to max_bytes - keep_reserve */
	SPOOL_PRIO_KEEP,  /* billing (task.start/end): may use the reserve too */
	SPOOL_PRIO_AUDIT, /* audit records: up to max_bytes - keep_reserve, never the reserve.
			   * On disk the entry's class byte says 1 (kept) as for KEEP. */
	_SPOOL_PRIO_MAX,
};

struct spool_opts {
	const char *dir;	/* created if missing */
	uint64_t max_bytes;	/* total bytes on disk, 0 = default 1 GiB */
	uint64_t segment_bytes; /* roll-over size, 0 = default 16 MiB */
	uint64_t keep_reserve;	/* bytes only KEEP (billing) entries may use, 0 = max/10 */
	bool no_fsync;		/* tests/bench only */
	/* Called when persisting an ack fails for want of space (ENOSPC, EDQUOT): returns 0 if
	 * it freed some (the write is tried once more), <0 if not. NULL = none. An ack that
	 * cannot be persisted deletes nothing, so a full disk would keep the spool full. */
	int (*free_space)(void *ud);
	void *free_space_ud;
	/* bytes of copies of damaged regions kept in <dir>/damaged/; beyond, the oldest are
	 * emptied (spool_damage.dropped). 0 = SPOOL_DEFAULT_DAMAGED_MAX */
	uint64_t damaged_max_bytes;
	/* entries compressed one by one (zstd, built-in dictionary) where that is smaller;
	 * either way readers get the record as appended */
	bool compress;
};
#define SPOOL_DEFAULT_DAMAGED_MAX (64ULL << 20)

struct spool_stats {
	uint64_t entries_pending;
	uint64_t bytes_on_disk;
	uint64_t appended;
	uint64_t refused_full;	/* entries refused because the spool was full */
	uint64_t refused_keep;	/* of those, KEEP entries (the serious kind) */
	uint64_t refused_audit; /* of those, AUDIT entries */
	uint64_t torn_bytes_truncated;
	uint64_t corrupt_entries_skipped; /* damaged regions skipped in the middle of segments */
	uint64_t corrupt_bytes_skipped;
	/* damaged regions (middle of a segment, at open or found later) seen for the first time:
	 * each is kept in damaged/ and reported once by spool_take_damage */
	uint64_t corrupt_frames;  /* over the spool's life (kept in its state file) */
	uint64_t damaged_dropped; /* copies in damaged/ emptied for room (kept likewise) */
	/* acks that could not be made durable (no room at all): the acked segments went, a
	 * restart before the next durable ack resends entries the collector has */
	uint64_t acks_not_durable;
	uint64_t segments;
	uint64_t acked_upto; /* highest acked sequence number (persisted) */
	uint64_t next_seq;   /* sequence number the next append gets */
	/* since open: bytes of records appended, and the bytes they took on disk (payloads,
	 * without frame headers) */
	uint64_t payload_bytes;
	uint64_t stored_bytes;
};

/* Largest payload of one entry. */
#define SPOOL_ENTRY_MAX (1024 * 1024)

struct spool;

/* Opens (creating if needed) and recovers the spool; -EBUSY if another process holds it. */
int spool_open(const struct spool_opts *opts, struct spool **ret);
void spool_close(struct spool *s);
/* Append one entry (fsync'd unless batching, see spool_append_many). -ENOSPC when full. */
int spool_append(struct spool *s, const void *data, size_t len, enum spool_prio prio,
		 uint64_t *ret_seq);
/* Append n entries with one fsync. Returns number appended (>=0) or -errno. */
int spool_append_many(struct spool *s, const void *const *data, const size_t *lens, size_t n,
		      enum spool_prio prio);
/* Group commit over several spool_append_many calls (e.g. one per priority): their fsync is
 * deferred to spool_group_commit (one fdatasync; a segment rollover still syncs the old one).
 * Entries count as durable only after the commit returns 0. */
void spool_group_begin(struct spool *s);
int spool_group_commit(struct spool *s);
/* Ends a group without syncing: *ret_fd gets a new descriptor (O_CLOEXEC) of the segment
 * whose fdatasync makes the group's entries durable, for the caller to sync and close (on
 * another thread, say), or -1 when nothing needs a sync (nothing written, or no_fsync). When
 * no descriptor can be made it syncs here instead. 0 or -errno (that sync failed). The
 * entries may be peeked before the caller's sync: what an ack removes is on the collector. */
int spool_group_end(struct spool *s, int *ret_fd);

/*
 * Iterate unacked entries in order, at most max entries / max_bytes of payload (at least one
 * entry is always handed out, so an entry larger than max_bytes cannot wedge the stream).
 * from_seq = 0 continues after the last entry handed out by the previous peek (cursor);
 * otherwise starts at the first unacked entry with seq >= from_seq. The callback returns <0 to
 * stop (that entry does not count). Returns the number of entries handed out, or -errno.
 * data is valid only during the callback.
 */
typedef int (*spool_entry_fn)(uint64_t seq, const void *data, size_t len, void *userdata);
int spool_peek(struct spool *s, uint64_t from_seq, size_t max, size_t max_bytes, spool_entry_fn fn,
	       void *userdata);
/* Mark entries up to and including seq as acked; deletes fully acked segments (durably). */
int spool_ack(struct spool *s, uint64_t upto_seq);
/* Whether n more entries of payload_bytes in all would be admitted in class prio now (each
 * entry also costs its frame header). */
bool spool_fits(const struct spool *s, size_t n, uint64_t payload_bytes, enum spool_prio prio);
/* Lowest unacked sequence number (0 if empty). */
uint64_t spool_first_unacked(const struct spool *s);
void spool_get_stats(const struct spool *s, struct spool_stats *ret);

/*
 * A region of a segment that did not verify (bad magic, length, sequence or CRC) and was
 * skipped (corrupt) or, at the end of the last segment at open, truncated (torn). Its bytes
 * (at most SPOOL_DAMAGE_KEEP_MAX) are kept in <dir>/damaged/<file> for inspection; a region
 * whose file already exists (seen by an earlier open) is not reported again.
 */
#define SPOOL_DAMAGE_KEEP_MAX (1024 * 1024)
struct spool_damage {
	uint64_t segment; /* the segment's name seq (seg-<20 digits>.log) */
	uint64_t offset;  /* first byte of the region */
	uint64_t length;
	uint64_t next_seq; /* seq of the first valid entry after it, 0 if none */
	bool torn;	   /* truncated tail of the last segment (a crash mid-append) */
	char file[64];	   /* name under damaged/, "" if it could not be kept */
	int keep_error;	   /* -errno of keeping it, 0 if kept */
	/* not a region: the kept copy file (length bytes) emptied, damaged/ over its cap */
	bool dropped;
};
/* Hands out the regions found since the last call (at most max); returns their number.
 * Beyond SPOOL_DAMAGE_QUEUE of them unreported, the rest are only counted. */
#define SPOOL_DAMAGE_QUEUE 64
size_t spool_take_damage(struct spool *s, struct spool_damage *ret, size_t max);
