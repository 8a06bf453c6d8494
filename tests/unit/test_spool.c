/* SPDX-License-Identifier: MIT */
/* Spool: append/peek/ack/reopen, torn tail, corrupt CRC, shedding, rollover, seq across reopen;
 * group end without sync and the syncer thread that runs the fdatasync. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <endian.h>
#include <inttypes.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accounting/spool.h"
#include "common/macro.h"
#include "accounting/syncer.h"

#define HDR 24

struct tctx {
	char dir[64];
};

static int setup(void **state)
{
	struct tctx *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	strcpy(t->dir, "/tmp/test_spool.XXXXXX");
	assert_non_null(mkdtemp(t->dir));
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tctx *t = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
	assert_int_equal(system(cmd), 0);
	free(t);
	return 0;
}

static struct spool *open_spool(struct tctx *t, uint64_t max, uint64_t seg, uint64_t reserve)
{
	struct spool_opts o = {
	    .dir = t->dir, .max_bytes = max, .segment_bytes = seg, .keep_reserve = reserve};
	struct spool *s = NULL;

	assert_int_equal(spool_open(&o, &s), 0);
	return s;
}

struct got {
	size_t n;
	uint64_t seqs[256];
	char data[256][32];
	size_t stop_after;
};

static int collect(uint64_t seq, const void *data, size_t len, void *userdata)
{
	struct got *g = userdata;

	if (g->stop_after && g->n == g->stop_after)
		return -1;
	assert_true(g->n < 256);
	assert_true(len < 32);
	g->seqs[g->n] = seq;
	memcpy(g->data[g->n], data, len);
	g->data[g->n][len] = 0;
	g->n++;
	return 0;
}

static void append_str(struct spool *s, const char *str, enum spool_prio p, uint64_t want_seq)
{
	uint64_t seq = 0;

	assert_int_equal(spool_append(s, str, strlen(str), p, &seq), 0);
	if (want_seq)
		assert_int_equal(seq, want_seq);
}

static size_t count_segments(struct tctx *t)
{
	DIR *d = opendir(t->dir);
	struct dirent *de;
	size_t n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "seg-", 4) == 0)
			n++;
	closedir(d);
	return n;
}

static void seg_path(struct tctx *t, uint64_t seq, char *buf, size_t len)
{
	snprintf(buf, len, "%s/seg-%020llu.log", t->dir, (unsigned long long)seq);
}

static void test_append_peek_ack_reopen(void **state)
{
	struct tctx *t = *state;
	struct spool *s = open_spool(t, 0, 0, 0);
	struct spool_stats st;
	struct got g = {0};
	char buf[16];

	assert_int_equal(spool_first_unacked(s), 0);
	for (int i = 1; i <= 10; i++) {
		snprintf(buf, sizeof(buf), "rec%d", i);
		append_str(s, buf, SPOOL_PRIO_KEEP, (uint64_t)i);
	}
	assert_int_equal(spool_first_unacked(s), 1);
	assert_int_equal(spool_peek(s, 1, 4, SIZE_MAX, collect, &g), 4);
	assert_string_equal(g.data[0], "rec1");
	assert_int_equal(g.seqs[3], 4);
	/* cursor continues */
	assert_int_equal(spool_peek(s, 0, 3, SIZE_MAX, collect, &g), 3);
	assert_int_equal(g.seqs[6], 7);
	/* explicit from_seq rewinds */
	memset(&g, 0, sizeof(g));
	assert_int_equal(spool_peek(s, 2, 2, SIZE_MAX, collect, &g), 2);
	assert_int_equal(g.seqs[0], 2);
	/* byte bound: at least one entry, then stop before overflowing */
	memset(&g, 0, sizeof(g));
	assert_int_equal(spool_peek(s, 1, 100, 9, collect, &g), 2);
	memset(&g, 0, sizeof(g));
	assert_int_equal(spool_peek(s, 1, 100, 1, collect, &g), 1);
	/* callback stop */
	memset(&g, 0, sizeof(g));
	g.stop_after = 3;
	assert_int_equal(spool_peek(s, 1, 100, SIZE_MAX, collect, &g), 3);

	assert_int_equal(spool_ack(s, 6), 0);
	assert_int_equal(spool_first_unacked(s), 7);
	spool_get_stats(s, &st);
	assert_int_equal(st.entries_pending, 4);
	assert_int_equal(st.acked_upto, 6);
	spool_close(s);

	/* restart resumes after the last ack */
	s = open_spool(t, 0, 0, 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.entries_pending, 4);
	assert_int_equal(st.torn_bytes_truncated, 0);
	assert_int_equal(spool_first_unacked(s), 7);
	memset(&g, 0, sizeof(g));
	assert_int_equal(spool_peek(s, 0, 100, SIZE_MAX, collect, &g), 4);
	assert_string_equal(g.data[0], "rec7");
	assert_string_equal(g.data[3], "rec10");
	/* acking past the end is capped; everything acked removes the segment */
	assert_int_equal(spool_ack(s, 1000), 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.entries_pending, 0);
	assert_int_equal(st.acked_upto, 10);
	assert_int_equal(count_segments(t), 0);
	assert_int_equal(spool_first_unacked(s), 0);
	memset(&g, 0, sizeof(g));
	assert_int_equal(spool_peek(s, 0, 100, SIZE_MAX, collect, &g), 0);
	append_str(s, "rec11", SPOOL_PRIO_SHED, 11);
	assert_int_equal(spool_peek(s, 0, 100, SIZE_MAX, collect, &g), 1);
	assert_string_equal(g.data[0], "rec11");
	spool_close(s);
}

static void test_seq_monotonic_across_reopen(void **state)
{
	struct tctx *t = *state;
	struct spool *s = open_spool(t, 0, 0, 0);
	struct spool *s2 = NULL;
	struct spool_opts o = {.dir = t->dir};

	append_str(s, "a", SPOOL_PRIO_KEEP, 1);
	append_str(s, "b", SPOOL_PRIO_KEEP, 2);
	/* a second opener is refused while the first holds the lock */
	assert_int_equal(spool_open(&o, &s2), -EBUSY);
	assert_int_equal(spool_ack(s, 2), 0);
	assert_int_equal(count_segments(t), 0);
	spool_close(s);
	/* no segment left: the seq comes from the persisted ack */
	s = open_spool(t, 0, 0, 0);
	append_str(s, "c", SPOOL_PRIO_KEEP, 3);
	spool_close(s);
	s = open_spool(t, 0, 0, 0);
	append_str(s, "d", SPOOL_PRIO_KEEP, 4);
	spool_close(s);
}

static void test_torn_tail(void **state)
{
	struct tctx *t = *state;
	struct spool *s = open_spool(t, 0, 0, 0);
	struct spool_stats st;
	struct got g = {0};
	char path[128];
	struct stat sb;

	append_str(s, "one", SPOOL_PRIO_KEEP, 1);
	append_str(s, "two", SPOOL_PRIO_KEEP, 2);
	append_str(s, "three", SPOOL_PRIO_KEEP, 3);
	spool_close(s);
	seg_path(t, 1, path, sizeof(path));
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, 3 * HDR + 3 + 3 + 5);
	/* crash mid-append of entry 3: cut inside its payload */
	assert_int_equal(truncate(path, sb.st_size - 2), 0);

	s = open_spool(t, 0, 0, 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.torn_bytes_truncated, HDR + 3);
	assert_int_equal(st.entries_pending, 2);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, 2 * HDR + 6);
	/* appends continue cleanly after the cut; seq 3 is reused (it was never durable) */
	append_str(s, "four", SPOOL_PRIO_KEEP, 3);
	assert_int_equal(spool_peek(s, 1, 100, SIZE_MAX, collect, &g), 3);
	assert_string_equal(g.data[0], "one");
	assert_string_equal(g.data[1], "two");
	assert_string_equal(g.data[2], "four");
	spool_close(s);

	/* torn inside a header */
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(truncate(path, sb.st_size - (HDR + 4) + 10), 0);
	s = open_spool(t, 0, 0, 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.torn_bytes_truncated, 10);
	assert_int_equal(st.entries_pending, 2);
	spool_close(s);
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	unsigned char c;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, off), 1);
	c ^= 0xff;
	assert_int_equal(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

static void test_corrupt_crc(void **state)
{
	struct tctx *t = *state;
	/* 2 entries of 24+4 bytes per segment */
	struct spool *s = open_spool(t, 0, 2 * (HDR + 4), 0);
	struct spool_stats st;
	struct spool_damage dmg[8];
	struct got g = {0};
	char path[128], buf[8], kept[256];
	struct stat sb;

	for (int i = 1; i <= 6; i++) {
		snprintf(buf, sizeof(buf), "e%03d", i);
		append_str(s, buf, SPOOL_PRIO_KEEP, (uint64_t)i);
	}
	spool_close(s);
	assert_int_equal(count_segments(t), 3);
	/* middle of an older segment: payload of entry 1 (seg 1) */
	seg_path(t, 1, path, sizeof(path));
	flip_byte(path, HDR + 1);
	/* bad CRC at the very end of the last segment: a torn tail */
	seg_path(t, 5, path, sizeof(path));
	flip_byte(path, 2 * HDR + 4 + 2);

	s = open_spool(t, 0, 2 * (HDR + 4), 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.corrupt_entries_skipped, 1);
	assert_int_equal(st.corrupt_bytes_skipped, HDR + 4);
	assert_int_equal(st.torn_bytes_truncated, HDR + 4);
	assert_int_equal(st.entries_pending, 4);
	assert_int_equal(spool_peek(s, 1, 100, SIZE_MAX, collect, &g), 4);
	assert_string_equal(g.data[0], "e002");
	assert_string_equal(g.data[3], "e005");
	/* each region reported once, its bytes kept in damaged/ */
	assert_int_equal(st.corrupt_frames, 1);
	assert_int_equal(spool_take_damage(s, dmg, 8), 2);
	assert_int_equal(dmg[0].segment, 1);
	assert_int_equal(dmg[0].offset, 0);
	assert_int_equal(dmg[0].length, HDR + 4);
	assert_int_equal(dmg[0].next_seq, 2);
	assert_false(dmg[0].torn);
	assert_string_equal(dmg[0].file, "seg-00000000000000000001-at-0.bin");
	snprintf(kept, sizeof(kept), "%s/damaged/%s", t->dir, dmg[0].file);
	assert_int_equal(stat(kept, &sb), 0);
	assert_int_equal(sb.st_size, HDR + 4);
	assert_true(dmg[1].torn);
	assert_int_equal(dmg[1].segment, 5);
	assert_int_equal(dmg[1].offset, HDR + 4);
	assert_int_equal(spool_take_damage(s, dmg, 8), 0);
	/* acking through the damaged segment works and deletes it */
	assert_int_equal(spool_ack(s, 2), 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.entries_pending, 3);
	assert_int_equal(count_segments(t), 2);
	/* damage after open is skipped by peek too */
	seg_path(t, 3, path, sizeof(path));
	flip_byte(path, HDR + 2);
	memset(&g, 0, sizeof(g));
	assert_int_equal(spool_peek(s, 3, 100, SIZE_MAX, collect, &g), 2);
	assert_string_equal(g.data[0], "e004");
	assert_int_equal(spool_take_damage(s, dmg, 8), 1);
	assert_int_equal(dmg[0].segment, 3);
	assert_int_equal(dmg[0].next_seq, 4);
	memset(&g, 0, sizeof(g));
	assert_int_equal(spool_peek(s, 3, 100, SIZE_MAX, collect, &g), 2);
	assert_int_equal(spool_take_damage(s, dmg, 8), 0); /* read again: not new */
	spool_get_stats(s, &st);
	assert_int_equal(st.corrupt_frames, 2);
	spool_close(s);
	/* the next open skips it again, but it was reported: not again */
	s = open_spool(t, 0, 2 * (HDR + 4), 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.corrupt_entries_skipped, 1);
	assert_int_equal(st.corrupt_frames, 2); /* the spool's life: kept in its state file */
	assert_int_equal(spool_take_damage(s, dmg, 8), 0);
	spool_close(s);
}

static off_t file_size(struct tctx *t, const char *name)
{
	char p[128];
	struct stat sb;

	snprintf(p, sizeof(p), "%s/%s", t->dir, name);
	if (stat(p, &sb) < 0)
		return -1;
	return sb.st_size;
}

/* damaged/ held under damaged_max_bytes: the oldest copy emptied, counted, reported; the
 * counts survive a reopen; an emptied copy's name goes with its segment. */
static void test_damaged_cap(void **state)
{
	struct tctx *t = *state;
	struct spool_opts o = {
	    .dir = t->dir, .segment_bytes = 2 * (HDR + 4), .damaged_max_bytes = 2 * (HDR + 4)};
	struct spool *s = open_spool(t, 0, 2 * (HDR + 4), 0);
	struct spool_damage dmg[8];
	struct spool_stats st;
	char path[128], buf[8];

	for (int i = 1; i <= 8; i++) {
		snprintf(buf, sizeof(buf), "e%03d", i);
		append_str(s, buf, SPOOL_PRIO_KEEP, (uint64_t)i);
	}
	spool_close(s);
	for (uint64_t seg = 1; seg <= 5; seg += 2) {
		seg_path(t, seg, path, sizeof(path));
		flip_byte(path, HDR + 1);
	}
	assert_int_equal(spool_open(&o, &s), 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.corrupt_frames, 3);
	assert_int_equal(st.damaged_dropped, 1);
	assert_int_equal(spool_take_damage(s, dmg, 8), 4);
	assert_false(dmg[0].dropped || dmg[1].dropped || dmg[2].dropped);
	assert_true(dmg[3].dropped);
	assert_string_equal(dmg[3].file, "seg-00000000000000000001-at-0.bin");
	assert_int_equal(dmg[3].length, HDR + 4);
	assert_int_equal(file_size(t, "damaged/seg-00000000000000000001-at-0.bin"), 0);
	assert_int_equal(file_size(t, "damaged/seg-00000000000000000003-at-0.bin"), HDR + 4);
	assert_int_equal(file_size(t, "damaged/seg-00000000000000000005-at-0.bin"), HDR + 4);
	spool_close(s);
	/* reopened: nothing new to report (the emptied copy still names its region), counts kept */
	assert_int_equal(spool_open(&o, &s), 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.corrupt_frames, 3);
	assert_int_equal(st.damaged_dropped, 1);
	assert_int_equal(spool_take_damage(s, dmg, 8), 0);
	/* segments 1 and 3 acked away: the emptied copy of segment 1 goes at the next open */
	assert_int_equal(spool_ack(s, 4), 0);
	spool_close(s);
	assert_int_equal(spool_open(&o, &s), 0);
	assert_int_equal(file_size(t, "damaged/seg-00000000000000000001-at-0.bin"), -1);
	assert_int_equal(file_size(t, "damaged/seg-00000000000000000003-at-0.bin"), HDR + 4);
	spool_get_stats(s, &st);
	assert_int_equal(st.corrupt_frames, 3);
	assert_int_equal(spool_take_damage(s, dmg, 8), 0);
	spool_close(s);
}

/* The state file: an older spool's decimal "acked" read and rewritten in place in slot form;
 * a torn newest slot leaves the other. */
static void test_state_file(void **state)
{
	struct tctx *t = *state;
	struct spool *s = open_spool(t, 0, 0, 0);
	struct spool_stats st;
	char path[128];
	FILE *f;

	for (int i = 1; i <= 6; i++)
		append_str(s, "abcd", SPOOL_PRIO_KEEP, (uint64_t)i);
	spool_close(s);
	snprintf(path, sizeof(path), "%s/acked", t->dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("3\n", f);
	fclose(f);
	s = open_spool(t, 0, 0, 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.acked_upto, 3);
	assert_int_equal(st.entries_pending, 3);
	assert_int_equal(file_size(t, "acked"), 256); /* slot 1 written after the old line */
	assert_int_equal(spool_ack(s, 5), 0);	      /* slot 0, over the old line */
	spool_close(s);
	s = open_spool(t, 0, 0, 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.acked_upto, 5);
	spool_close(s);
	/* the newest slot (0) torn: the older one (ack 3) holds */
	flip_byte(path, 20);
	s = open_spool(t, 0, 0, 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.acked_upto, 3);
	assert_int_equal(st.entries_pending, 3);
	spool_close(s);
	/* zeros (the file made on a full disk, its first write torn): nothing known acked */
	assert_int_equal(truncate(path, 0), 0);
	assert_int_equal(truncate(path, 256), 0);
	s = open_spool(t, 0, 0, 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.acked_upto, 0);
	assert_int_equal(st.entries_pending, 6);
	spool_close(s);
	/* neither form: refused, not read as 0 */
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("garbage\n", f);
	fclose(f);
	{
		struct spool_opts o = {.dir = t->dir};

		assert_int_equal(spool_open(&o, &s), -EBADMSG);
	}
}

static void test_full_sheds_samples_first(void **state)
{
	struct tctx *t = *state;
	/* 10 entries of 32 bytes fit; the last 3 are reserved for KEEP */
	struct spool *s = open_spool(t, 10 * (HDR + 8), 0, 3 * (HDR + 8));
	struct spool_stats st;
	int shed = 0, keep = 0, r;

	for (;;) {
		r = spool_append(s, "sample01", 8, SPOOL_PRIO_SHED, NULL);
		if (r < 0)
			break;
		shed++;
	}
	assert_int_equal(r, -ENOSPC);
	assert_int_equal(shed, 7);
	for (;;) {
		r = spool_append(s, "endrec01", 8, SPOOL_PRIO_KEEP, NULL);
		if (r < 0)
			break;
		keep++;
	}
	assert_int_equal(r, -ENOSPC);
	assert_int_equal(keep, 3);
	spool_get_stats(s, &st);
	assert_int_equal(st.refused_full, 2);
	assert_int_equal(st.refused_keep, 1);
	assert_int_equal(st.entries_pending, 10);
	/* acking frees space (the segment goes once fully acked) */
	assert_int_equal(spool_ack(s, 10), 0);
	assert_int_equal(spool_append(s, "sample01", 8, SPOOL_PRIO_SHED, NULL), 0);
	spool_close(s);
}

/* Audit records never take the billing reserve, one at a time or in a batch, and the entries
 * they leave on disk read back as kept (class byte 1) after a reopen. */
static void test_audit_class_keeps_billing_reserve(void **state)
{
	struct tctx *t = *state;
	struct spool *s = open_spool(t, 10 * (HDR + 8), 0, 3 * (HDR + 8));
	const void *data[8];
	size_t lens[8];
	struct spool_stats st;
	struct got g = {0};
	int audit = 0, keep = 0, r;

	assert_true(spool_fits(s, 7, 7 * 8, SPOOL_PRIO_AUDIT));
	assert_false(spool_fits(s, 8, 8 * 8, SPOOL_PRIO_AUDIT));
	assert_true(spool_fits(s, 10, 10 * 8, SPOOL_PRIO_KEEP));
	assert_false(spool_fits(s, 1, 8, (enum spool_prio)9));
	for (int i = 0; i < 8; i++) {
		data[i] = "audit001";
		lens[i] = 8;
	}
	assert_int_equal(spool_append_many(s, data, lens, 5, SPOOL_PRIO_AUDIT), 5);
	/* a batch past the class limit: the part that fits goes in, the rest is refused */
	assert_int_equal(spool_append_many(s, data, lens, 4, SPOOL_PRIO_AUDIT), 2);
	for (;;) {
		r = spool_append(s, "audit002", 8, SPOOL_PRIO_AUDIT, NULL);
		if (r < 0)
			break;
		audit++;
	}
	assert_int_equal(r, -ENOSPC);
	assert_int_equal(audit, 0);
	assert_false(spool_fits(s, 1, 8, SPOOL_PRIO_AUDIT));
	for (;;) {
		r = spool_append(s, "endrec01", 8, SPOOL_PRIO_KEEP, NULL);
		if (r < 0)
			break;
		keep++;
	}
	assert_int_equal(keep, 3);
	spool_get_stats(s, &st);
	assert_int_equal(st.refused_audit, 2);
	assert_int_equal(st.refused_keep, 1);
	spool_close(s);
	s = open_spool(t, 10 * (HDR + 8), 0, 3 * (HDR + 8));
	spool_get_stats(s, &st);
	assert_int_equal(st.entries_pending, 10);
	assert_int_equal(st.corrupt_entries_skipped, 0);
	assert_int_equal(spool_peek(s, 1, 100, SIZE_MAX, collect, &g), 10);
	spool_close(s);
}

static void test_rollover_and_delete(void **state)
{
	struct tctx *t = *state;
	struct spool *s = open_spool(t, 0, 3 * (HDR + 4), 0);
	const void *data[7];
	size_t lens[7];
	char bufs[7][8];
	struct spool_stats st;
	struct got g = {0};

	for (int i = 0; i < 7; i++) {
		snprintf(bufs[i], sizeof(bufs[i]), "b%03d", i + 1);
		data[i] = bufs[i];
		lens[i] = 4;
	}
	assert_int_equal(spool_append_many(s, data, lens, 7, SPOOL_PRIO_SHED), 7);
	assert_int_equal(count_segments(t), 3); /* 1-3, 4-6, 7 */
	spool_get_stats(s, &st);
	assert_int_equal(st.segments, 3);
	assert_int_equal(spool_peek(s, 1, 100, SIZE_MAX, collect, &g), 7);
	assert_string_equal(g.data[6], "b007");
	assert_int_equal(spool_ack(s, 2), 0);
	assert_int_equal(count_segments(t), 3);
	assert_int_equal(spool_ack(s, 3), 0);
	assert_int_equal(count_segments(t), 2);
	assert_int_equal(spool_ack(s, 7), 0);
	assert_int_equal(count_segments(t), 0);
	spool_close(s);
	s = open_spool(t, 0, 3 * (HDR + 4), 0);
	append_str(s, "next", SPOOL_PRIO_KEEP, 8);
	assert_int_equal(count_segments(t), 1);
	spool_close(s);
}

static void test_bad_args(void **state)
{
	struct tctx *t = *state;
	struct spool_opts o = {.dir = t->dir, .max_bytes = 100, .keep_reserve = 100};
	struct spool *s = NULL;

	assert_int_equal(spool_open(&o, &s), -EINVAL);
	s = open_spool(t, 0, 0, 0);
	assert_int_equal(spool_append(s, "x", SPOOL_ENTRY_MAX + 1, SPOOL_PRIO_KEEP, NULL), -EINVAL);
	assert_int_equal(spool_append(s, "x", 1, (enum spool_prio)7, NULL), -EINVAL);
	spool_close(s);
}

/* spool_group_end: a descriptor of the written segment only when something was written;
 * the entries are there (peekable) before anyone syncs it. */
static void test_group_end(void **state)
{
	struct tctx *t = *state;
	struct spool *s = open_spool(t, 0, 0, 0);
	const void *bufs[2] = {"one", "two"};
	size_t lens[2] = {3, 3};
	struct got g = {0};
	struct stat a, b;
	char path[256];
	int fd;

	spool_group_begin(s);
	assert_int_equal(spool_group_end(s, &fd), 0);
	assert_int_equal(fd, -1); /* nothing written */

	spool_group_begin(s);
	assert_int_equal(spool_append_many(s, bufs, lens, 2, SPOOL_PRIO_KEEP), 2);
	assert_int_equal(spool_group_end(s, &fd), 0);
	assert_true(fd >= 3);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	seg_path(t, 1, path, sizeof(path));
	assert_int_equal(stat(path, &a), 0);
	assert_int_equal(fstat(fd, &b), 0);
	assert_true(a.st_ino == b.st_ino); /* the segment written to */
	assert_int_equal(fdatasync(fd), 0);
	close(fd);
	assert_int_equal(spool_peek(s, 1, 10, 1 << 20, collect, &g), 2);
	assert_string_equal(g.data[1], "two");
	spool_close(s);
}

static void wait_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	assert_int_equal(poll(&p, 1, 5000), 1);
}

/* Syncer: generations in order, a failing fdatasync reported once, folded submissions, stop
 * waits for what is pending. */
static void test_syncer(void **state)
{
	struct tctx *t = *state;
	struct syncer *y = NULL;
	char path[256];
	uint64_t gen;
	int err = 1, fd, p[2];

	snprintf(path, sizeof(path), "%s/f", t->dir);
	assert_int_equal(syncer_start(&y), 0);
	assert_int_equal(syncer_submitted(y), 0);
	assert_int_equal(syncer_done(y, &err), 0); /* nothing yet, and no wait */
	assert_int_equal(err, 0);

	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(syncer_submit(y, fd), 1);
	wait_readable(syncer_fd(y));
	assert_int_equal(syncer_done(y, &err), 1);
	assert_int_equal(err, 0);

	/* a pipe cannot be synced (EINVAL): the failure comes back once */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	close(p[0]);
	assert_int_equal(syncer_submit(y, p[1]), 2);
	do {
		wait_readable(syncer_fd(y));
		gen = syncer_done(y, &err);
	} while (gen < 2);
	assert_int_equal(err, -EINVAL);
	assert_int_equal(syncer_done(y, &err), 2);
	assert_int_equal(err, 0);

	/* many submissions at once: the newest generation is reached, every fd closed */
	for (int i = 0; i < 50; i++) {
		fd = open(path, O_WRONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		gen = syncer_submit(y, fd);
	}
	assert_int_equal(gen, 52);
	assert_int_equal(syncer_submitted(y), 52);
	syncer_stop(y); /* waits for generation 52 */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0 && fd < 20); /* the 50 descriptors were closed */
	close(fd);
	syncer_stop(NULL);
}

/* ---- compressed entries ------------------------------------------------------------------ */

#define BIG_N 40

struct big {
	size_t n;
	char *data[BIG_N];
	size_t len[BIG_N];
};

static int collect_big(uint64_t seq, const void *data, size_t len, void *userdata)
{
	struct big *b = userdata;

	assert_true(b->n < BIG_N);
	b->data[b->n] = malloc(len + 1);
	assert_non_null(b->data[b->n]);
	memcpy(b->data[b->n], data, len);
	b->data[b->n][len] = 0;
	b->len[b->n] = len;
	b->n++;
	return 0;
}

static void big_free(struct big *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->data[i]);
	memset(b, 0, sizeof(*b));
}

/* A task.sample-like record whose numbers and ids vary with i. */
static size_t sample_record(char *buf, size_t cap, int i)
{
	int n = snprintf(
	    buf, cap,
	    "{\"schema\":\"corral.record/v1\",\"record_id\":\"n%d/ab%d/%d\",\"type\":"
	    "\"task.sample\",\"time\":\"2026-12-06T09:%02d:%02d.%06dZ\",\"node\":\"n%d\",\"task\":{"
	    "\"id\":\"t-%08x-%d\",\"user\":\"u%d\",\"uid\":%d,\"labels\":{\"team\":\"x%d\"}},"
	    "\"request\":{\"cpus\":1.0,\"memory_bytes\":%d,\"pids\":0,\"gpus\":0,\"time_limit_s\":"
	    "0,\"cpu_time_limit_s\":0,\"gpu_memory_bytes\":0},\"usage\":{\"wall_ns\":%d,"
	    "\"cpu_user_ns\":%d,\"cpu_system_ns\":%d,\"memory_peak_bytes\":%d,"
	    "\"memory_byte_seconds\":%d.25,\"io_read_bytes\":%d,\"io_write_bytes\":12,"
	    "\"net_rx_bytes\":0,\"net_tx_bytes\":0,\"gpu_seconds\":0.0,\"gpu_memory_peak_bytes\":0,"
	    "\"gpu_util_avg\":0.0},\"sources\":{\"wall_ns\":\"agent\",\"cpu_user_ns\":\"ebpf\","
	    "\"cpu_system_ns\":\"ebpf\",\"memory_peak_bytes\":\"cgroup\",\"memory_byte_seconds\":"
	    "\"ebpf\",\"io_read_bytes\":\"ebpf\",\"io_write_bytes\":\"ebpf\",\"net_rx_bytes\":"
	    "\"ebpf\",\"net_tx_bytes\":\"ebpf\"},\"start_time\":%d}",
	    i, i * 7, i, i % 60, (i * 13) % 60, i * 977, i % 5, 0x6b1521e0 + i, i, i, 1000 + i, i,
	    i * 1048576, i * 1000003, i * 7919, i * 31, i * 4096, i * 123457, i * 2048,
	    17000000 + i);

	assert_true(n > 0 && (size_t)n < cap);
	return (size_t)n;
}

static void open_opts(struct tctx *t, bool compress, struct spool **ret)
{
	struct spool_opts o = {.dir = t->dir, .compress = compress};

	assert_int_equal(spool_open(&o, ret), 0);
}

/* CRC32C as the spool computes it, to forge a frame whose CRC holds. */
static uint32_t crc32c_ref(uint32_t crc, const unsigned char *p, size_t n)
{
	crc = ~crc;
	while (n--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0x82F63B78U & (0U - (crc & 1)));
	}
	return ~crc;
}

/* Counts and checks the entries of test_compressed_batch against what was appended. */
struct batch_check {
	char (*rec)[2048];
	size_t *sizes;
	size_t n;
};

static int check_batch(uint64_t seq, const void *data, size_t len, void *userdata)
{
	struct batch_check *c = userdata;

	assert_int_equal(seq, c->n + 1);
	assert_int_equal(len, c->sizes[c->n]);
	assert_memory_equal(data, c->rec[c->n], len);
	c->n++;
	return 0;
}

/*
 * One spool_append_many of 300 compressed entries (more than one writev's worth, over several
 * segments, random ones stored as they are among them), through the one reused buffer of
 * compressed entries: every entry reads back exact, in order.
 */
static void test_compressed_batch(void **state)
{
	enum { N = 300 };
	struct tctx *t = *state;
	static char rec[N][2048];
	static size_t sizes[N];
	const void *many[N];
	struct spool_opts o = {.dir = t->dir, .compress = true, .segment_bytes = 16 * 1024};
	struct batch_check c = {.rec = rec, .sizes = sizes};
	struct spool_stats st;
	struct spool *s = NULL;

	for (int i = 0; i < N; i++) {
		if (i % 37 == 5) { /* incompressible */
			sizes[i] = 300 + (size_t)i;
			for (size_t k = 0; k < sizes[i]; k++)
				rec[i][k] = (char)(rand() & 0xff);
		} else {
			sizes[i] = sample_record(rec[i], sizeof(rec[i]), i + 1);
		}
		many[i] = rec[i];
	}
	assert_int_equal(spool_open(&o, &s), 0);
	assert_int_equal(spool_append_many(s, many, sizes, N, SPOOL_PRIO_SHED), N);
	spool_get_stats(s, &st);
	assert_true(st.stored_bytes * 2 < st.payload_bytes);
	assert_true(count_segments(t) > 2);
	assert_int_equal(spool_peek(s, 1, N, SIZE_MAX, check_batch, &c), N);
	assert_int_equal(c.n, N);
	spool_close(s);
}

/* Entries compressed on append where smaller (records ~5x here), stored as is where not
 * (random bytes); readers get every entry back exactly, whether the reader compresses or not,
 * and an old uncompressed spool stays readable after compression is turned on. */
static void test_compressed(void **state)
{
	struct tctx *t = *state;
	char rec[BIG_N][2048], rnd[600];
	const void *many[8];
	size_t lens[8], sizes[BIG_N];
	struct spool_stats st;
	struct spool *s;
	struct big b = {0};
	int i;

	for (i = 0; i < BIG_N; i++)
		sizes[i] = sample_record(rec[i], sizeof(rec[i]), i + 1);
	for (i = 0; i < (int)sizeof(rnd); i++)
		rnd[i] = (char)(rand() & 0xff);

	/* 1. an old spool: 4 records as is */
	open_opts(t, false, &s);
	for (i = 0; i < 4; i++)
		assert_int_equal(spool_append(s, rec[i], sizes[i], SPOOL_PRIO_KEEP, NULL), 0);
	spool_get_stats(s, &st);
	assert_int_equal(st.stored_bytes, st.payload_bytes);
	spool_close(s);

	/* 2. compression on: single appends, a batch, and random bytes */
	open_opts(t, true, &s);
	for (i = 4; i < 20; i++)
		assert_int_equal(spool_append(s, rec[i], sizes[i], SPOOL_PRIO_SHED, NULL), 0);
	for (i = 0; i < 8; i++) {
		many[i] = rec[20 + i];
		lens[i] = sizes[20 + i];
	}
	assert_int_equal(spool_append_many(s, many, lens, 8, SPOOL_PRIO_KEEP), 8);
	assert_int_equal(spool_append(s, rnd, sizeof(rnd), SPOOL_PRIO_AUDIT, NULL), 0);
	spool_get_stats(s, &st);
	print_message("compressed: %" PRIu64 " record bytes stored in %" PRIu64 "\n",
		      st.payload_bytes, st.stored_bytes);
	/* 24 records at least 4x smaller; the random entry stored as it is */
	assert_true(st.stored_bytes * 4 < st.payload_bytes - sizeof(rnd) + 4 * sizeof(rnd));
	assert_true(st.stored_bytes >= sizeof(rnd));
	spool_close(s);

	/* 3. read back by a spool without compression: every entry exact */
	open_opts(t, false, &s);
	assert_int_equal(spool_peek(s, 1, BIG_N, SIZE_MAX, collect_big, &b), 29);
	for (i = 0; i < 28; i++) {
		assert_int_equal(b.len[i], sizes[i]);
		assert_memory_equal(b.data[i], rec[i], sizes[i]);
	}
	assert_int_equal(b.len[28], sizeof(rnd));
	assert_memory_equal(b.data[28], rnd, sizeof(rnd));
	big_free(&b);
	/* the batch bound counts records, not stored bytes: the first two and not a third */
	assert_int_equal(spool_peek(s, 1, BIG_N, sizes[0] + sizes[1] + 1, collect_big, &b), 2);
	big_free(&b);
	spool_close(s);
}

/* A frame whose CRC holds but whose compressed payload does not decode is skipped as
 * damaged (reported once), never handed out as garbage nor wedging the stream. */
static void test_compressed_undecodable(void **state)
{
	struct tctx *t = *state;
	unsigned char frame[HDR + 16];
	uint32_t v32, crc;
	uint64_t v64;
	struct spool_damage dmg[4];
	struct spool *s;
	struct big b = {0};
	char rec[2048], path[128];
	size_t n = sample_record(rec, sizeof(rec), 3);
	off_t off0;
	int fd;

	open_opts(t, true, &s);
	assert_int_equal(spool_append(s, rec, n, SPOOL_PRIO_KEEP, NULL), 0);
	spool_close(s);
	off0 = file_size(t, "seg-00000000000000000001.log");
	assert_true(off0 > HDR && off0 < (off_t)(HDR + n / 3));
	/* seq 2: encoding 1, 16 bytes that are no zstd frame, a valid CRC */
	memset(frame, 0, sizeof(frame));
	v32 = htole32(0x31505343U);
	memcpy(frame, &v32, 4);
	v32 = htole32(16);
	memcpy(frame + 4, &v32, 4);
	v64 = htole64(2);
	memcpy(frame + 8, &v64, 8);
	frame[16] = 1;
	frame[17] = 1;
	memset(frame + HDR, 'x', 16);
	crc = crc32c_ref(crc32c_ref(0, frame + 4, 16), frame + HDR, 16);
	v32 = htole32(crc);
	memcpy(frame + 20, &v32, 4);
	seg_path(t, 1, path, sizeof(path));
	fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, frame, sizeof(frame)), (ssize_t)sizeof(frame));
	close(fd);

	open_opts(t, true, &s);
	assert_int_equal(spool_append(s, rec, n, SPOOL_PRIO_KEEP, NULL), 0); /* seq 3 */
	assert_int_equal(spool_peek(s, 1, BIG_N, SIZE_MAX, collect_big, &b), 2);
	assert_memory_equal(b.data[0], rec, n);
	assert_memory_equal(b.data[1], rec, n);
	big_free(&b);
	assert_int_equal(spool_take_damage(s, dmg, 4), 1);
	assert_int_equal(dmg[0].offset, (uint64_t)off0);
	assert_int_equal(dmg[0].length, sizeof(frame));
	assert_int_equal(dmg[0].segment, 1);
	/* acking past it works */
	assert_int_equal(spool_ack(s, 3), 0);
	spool_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_append_peek_ack_reopen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_seq_monotonic_across_reopen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torn_tail, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_corrupt_crc, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_damaged_cap, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_state_file, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_full_sheds_samples_first, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rollover_and_delete, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_group_end, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_syncer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_compressed_batch, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_compressed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_compressed_undecodable, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_audit_class_keeps_billing_reserve, setup,
					    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
