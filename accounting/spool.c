/* SPDX-License-Identifier: MIT */
/*
 * Durable spool (see spool.h and docs/pipeline.md "Spool").
 *
 * On disk: <dir>/seg-<first seq, 20 digits>.log segment files of entries
 *   0  u32 magic "CSP1"        4  u32 payload length     8  u64 seq
 *   16 u8 prio   17 u8 encoding   18 2 bytes zero   20 u32 CRC32C of bytes 4..20 and the
 *   payload   24 payload (as stored: length and CRC are of the stored bytes)
 * Encoding (accounting/zframe.h): 0 the record as is, 1 one zstd frame against the built-in
 * dictionary v1 (written when [spool] compress is on and it is smaller). Readers hand out the
 * record decoded.
 * (little endian), plus <dir>/acked (the spool's state, written in place: below) and
 * <dir>/lock (flock'd while open).
 *
 * <dir>/acked holds two slots of STATE_SLOT bytes, each one line
 *   "CSPS gen=<20 digits> acked=<20> corrupt=<20> dropped=<20> crc=<8 hex>\n"
 * (gen: a write counter; acked: the highest acked seq; corrupt: damaged regions found over the
 * spool's life; dropped: kept copies of them removed for want of room; crc: CRC32C of the line
 * before " crc="). A write goes to the slot the valid one with the higher gen is not, in place
 * (pwrite + fdatasync), so recording an ack needs no new space on the filesystem once the file
 * exists, and a torn write leaves the other slot. An older spool's file (the decimal seq alone)
 * is read as acked and rewritten in the slot form within the block it already has.
 *
 * Appends go to the last segment with O_APPEND and are fdatasync'd before returning, so an
 * entry is either complete on disk or is a torn tail that open() truncates. Acks are persisted
 * before any segment is unlinked, so a crash between the two only leaves a segment that the
 * next open() deletes.
 */
#include "accounting/spool.h"

#include "accounting/zframe.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/macro.h"
#include "common/fileio.h"
#include "common/parse.h"

#define SPOOL_MAGIC	      0x31505343U /* "CSP1" little endian */
#define HDR_SIZE	      24
#define SEG_NAME_MAX	      32 /* "seg-" + 20 digits + ".log" + NUL */
#define DEFAULT_MAX_BYTES     (1024ULL * 1024 * 1024)
#define DEFAULT_SEGMENT_BYTES (16ULL * 1024 * 1024)
#define SEGMENTS_MAX	      65536

struct segment {
	uint64_t name_seq;  /* seq in the file name */
	uint64_t first_seq; /* first valid entry, 0 if none */
	uint64_t last_seq;  /* last valid entry, 0 if none */
	uint64_t n_entries; /* valid entries */
	uint64_t size;	    /* bytes on disk */
	bool damaged;	    /* had a skipped region: seqs may have gaps */
};

struct spool {
	int dfd;
	int lock_fd;
	int state_fd; /* <dir>/acked, O_RDWR; -1 when it could not be made (full filesystem) */
	uint64_t state_gen;
	uint64_t damaged_max; /* bytes of damaged/ copies kept */
	int wfd; /* last segment, O_APPEND; -1 until the first append after open/rollover */
	char *dir;
	uint64_t max_bytes, segment_bytes, keep_reserve;
	bool no_fsync;
	bool in_group, group_dirty; /* spool_group_begin .. spool_group_commit */

	struct segment *segs;
	size_t n_segs;
	uint64_t acked;
	uint64_t next_seq;
	uint64_t pending;
	uint64_t bytes;

	/* peek cursor: cur_seq is the next seq to hand out; (cur_seg_name, cur_off) its position
	 * when cur_valid */
	uint64_t cur_seq;
	uint64_t cur_seg_name;
	uint64_t cur_off;
	bool cur_valid;

	struct spool_stats st;
	int (*free_space)(void *ud);
	void *free_space_ud;

	uint64_t state_saved_corrupt, state_saved_dropped;
	bool state_loaded; /* spool_open is done scanning */
	/* damaged regions not yet handed to spool_take_damage */
	struct spool_damage damage[SPOOL_DAMAGE_QUEUE];
	size_t n_damage;

	struct zframe *z;    /* NULL: appends stored as is (reading needs it: made on demand) */
	bool compress;	     /* spool_opts.compress */
	unsigned char *zbuf; /* a compressed entry (zframe_bound(SPOOL_ENTRY_MAX)) */
	/* spool_append_many's compressed entries of one writev, one after the other; kept
	 * from call to call (grown, never shrunk): no allocation per entry */
	unsigned char *pack;
	size_t pack_cap;
	unsigned char *dbuf; /* a decoded entry (SPOOL_ENTRY_MAX + 1) */
};

/* ---- CRC32C (Castagnoli), table driven -------------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void)
{
	if (crc_table[1])
		return;
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78U : c >> 1;
		crc_table[i] = c;
	}
}

static uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* ---- entry format ------------------------------------------------------------------------ */

struct hdr {
	uint32_t len;
	uint64_t seq;
	uint8_t prio;
	uint8_t enc; /* enum zframe_enc */
};

static void hdr_encode(unsigned char *b, uint32_t len, uint64_t seq, uint8_t prio, uint8_t enc,
		       const void *payload)
{
	uint32_t v32;
	uint64_t v64;

	v32 = htole32(SPOOL_MAGIC);
	memcpy(b, &v32, 4);
	v32 = htole32(len);
	memcpy(b + 4, &v32, 4);
	v64 = htole64(seq);
	memcpy(b + 8, &v64, 8);
	b[16] = prio;
	b[17] = enc;
	b[18] = b[19] = 0;
	v32 = crc32c(crc32c(0, b + 4, 16), payload, len);
	v32 = htole32(v32);
	memcpy(b + 20, &v32, 4);
}

/* Header sanity without the payload: magic, length bound, prio, pad. */
static bool hdr_decode(const unsigned char *b, struct hdr *h, uint32_t *crc)
{
	uint32_t v32;
	uint64_t v64;

	memcpy(&v32, b, 4);
	if (le32toh(v32) != SPOOL_MAGIC)
		return false;
	memcpy(&v32, b + 4, 4);
	h->len = le32toh(v32);
	memcpy(&v64, b + 8, 8);
	h->seq = le64toh(v64);
	h->prio = b[16];
	h->enc = b[17];
	memcpy(&v32, b + 20, 4);
	*crc = le32toh(v32);
	return h->len <= SPOOL_ENTRY_MAX && h->prio <= 1 && h->seq > 0 &&
	       h->enc < _ZFRAME_ENC_MAX && !b[18] && !b[19];
}

/* A complete, CRC-valid entry at buf[pos..n) with seq > min_seq? */
static bool entry_valid_at(const unsigned char *buf, size_t n, size_t pos, uint64_t min_seq,
			   struct hdr *h)
{
	uint32_t crc;

	if (n - pos < HDR_SIZE || !hdr_decode(buf + pos, h, &crc))
		return false;
	if (h->len > n - pos - HDR_SIZE || h->seq <= min_seq)
		return false;
	return crc32c(crc32c(0, buf + pos + 4, 16), buf + pos + HDR_SIZE, h->len) == crc;
}

/* Next offset > pos where a valid entry starts, or n. */
static size_t resync(const unsigned char *buf, size_t n, size_t pos, uint64_t min_seq)
{
	struct hdr h;

	for (size_t p = pos + 1; p + HDR_SIZE <= n; p++)
		if (buf[p] == 'C' && entry_valid_at(buf, n, p, min_seq, &h))
			return p;
	return n;
}

static int read_all_at(int fd, void *buf, size_t len, uint64_t off)
{
	unsigned char *p = buf;

	while (len > 0) {
		ssize_t k = pread(fd, p, len, (off_t)off);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (k == 0)
			return -ENODATA;
		p += k;
		len -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

static void seg_name(uint64_t seq, char buf[SEG_NAME_MAX])
{
	snprintf(buf, SEG_NAME_MAX, "seg-%020" PRIu64 ".log", seq);
}

static int seg_parse_name(const char *name, uint64_t *seq)
{
	char digits[21];

	if (strlen(name) != 28 || strncmp(name, "seg-", 4) != 0 || strcmp(name + 24, ".log") != 0)
		return -EINVAL;
	memcpy(digits, name + 4, 20);
	digits[20] = 0;
	return parse_u64(digits, seq);
}

static int cmp_seg(const void *a, const void *b)
{
	const struct segment *x = a, *y = b;

	return x->name_seq < y->name_seq ? -1 : x->name_seq > y->name_seq;
}

static int dir_sync(struct spool *s)
{
	if (s->no_fsync)
		return 0;
	return fsync(s->dfd) < 0 ? -errno : 0;
}

/* ---- state file -------------------------------------------------------------------------- */

#define STATE_SLOT   128
#define STATE_CRC_AT 114 /* the line's bytes before " crc=" */

static void state_format(const struct spool *s, uint64_t gen, uint64_t acked,
			 char out[STATE_SLOT + 1])
{
	int n = snprintf(out, STATE_SLOT + 1,
			 "CSPS gen=%020" PRIu64 " acked=%020" PRIu64 " corrupt=%020" PRIu64
			 " dropped=%020" PRIu64,
			 gen, acked, s->st.corrupt_frames, s->st.damaged_dropped);

	snprintf(out + n, (size_t)(STATE_SLOT + 1 - n), " crc=%08x\n", crc32c(0, out, (size_t)n));
}

static bool state_parse(const char *slot, uint64_t v[4])
{
	char line[STATE_SLOT + 1];
	unsigned crc;

	memcpy(line, slot, STATE_SLOT);
	line[STATE_SLOT] = 0;
	if (memcmp(line, "CSPS gen=", 9) != 0 || line[STATE_SLOT - 1] != '\n' ||
	    strlen(line) != STATE_SLOT)
		return false;
	if (sscanf(line,
		   "CSPS gen=%20" SCNu64 " acked=%20" SCNu64 " corrupt=%20" SCNu64
		   " dropped=%20" SCNu64 " crc=%8x",
		   &v[0], &v[1], &v[2], &v[3], &crc) != 5)
		return false;
	return crc == crc32c(0, line, STATE_CRC_AT);
}

/* Reads <dir>/acked (either form); a missing one is an empty spool's. */
static int state_load(struct spool *s)
{
	char buf[2 * STATE_SLOT + 1];
	bool found = false;
	uint64_t v[4];
	ssize_t n;
	int fd;

	s->acked = 0;
	fd = openat(s->dfd, "acked", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	s->state_fd = fd;
	n = pread(fd, buf, 2 * STATE_SLOT, 0);
	if (n < 0)
		return -errno;
	for (size_t k = 0; k < 2; k++)
		if ((size_t)n >= (k + 1) * STATE_SLOT && state_parse(buf + k * STATE_SLOT, v) &&
		    (!found || v[0] > s->state_gen)) {
			found = true;
			s->state_gen = v[0];
			s->acked = v[1];
			s->st.corrupt_frames = v[2];
			s->st.damaged_dropped = v[3];
		}
	if (!found) {
		/* an older spool's: the decimal seq; empty or zeros (made on a full disk, or its
		 * first write torn): nothing acked yet that is known, everything is sent again */
		char *end;

		buf[n] = 0;
		if (n > 0 && buf[0]) {
			errno = 0;
			s->acked = strtoull(buf, &end, 10);
			if (errno || end == buf || (*end && *end != '\n'))
				return -EBADMSG;
		}
	}
	s->state_saved_corrupt = s->st.corrupt_frames;
	s->state_saved_dropped = s->st.damaged_dropped;
	return 0;
}

/* Writes the state with acked in place (the file is made if missing: that needs space once). */
static int state_save(struct spool *s, uint64_t acked)
{
	char line[STATE_SLOT + 1];
	uint64_t gen = s->state_gen + 1;
	ssize_t w;
	int r;

	if (s->state_fd < 0) {
		s->state_fd =
		    openat(s->dfd, "acked", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (s->state_fd < 0)
			return -errno;
		r = dir_sync(s);
		if (r < 0)
			return r;
	}
	state_format(s, gen, acked, line);
	w = pwrite(s->state_fd, line, STATE_SLOT, (off_t)(gen % 2) * STATE_SLOT);
	if (w < 0)
		return -errno;
	if (w != STATE_SLOT)
		return -ENOSPC; /* a short write: no room for the block */
	if (!s->no_fsync && fdatasync(s->state_fd) < 0)
		return -errno;
	s->state_gen = gen;
	s->state_saved_corrupt = s->st.corrupt_frames;
	s->state_saved_dropped = s->st.damaged_dropped;
	return 0;
}

/* ---- damaged regions -------------------------------------------------------------------- */

struct dcopy {
	char name[64];
	uint64_t size;
	struct timespec mtime;
};

static int dcopy_cmp(const void *a, const void *b)
{
	const struct dcopy *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

static void queue_damage(struct spool *s, const struct spool_damage *d)
{
	if (s->n_damage < SPOOL_DAMAGE_QUEUE)
		s->damage[s->n_damage++] = *d;
}

/*
 * damaged/ kept under damaged_max bytes: the oldest copies are emptied first (each counted in
 * damaged_dropped and reported). An emptied copy keeps its name, so that the region is not
 * reported again while its segment exists; once the segment is gone the name goes too.
 */
static void damaged_trim(struct spool *s)
{
	_cleanup_free_ struct dcopy *c = NULL;
	size_t n = 0, cap = 0;
	uint64_t total = 0, first_seg = s->n_segs ? s->segs[0].name_seq : UINT64_MAX;
	struct dirent *de;
	int fd = openat(s->dfd, "damaged", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d))) {
		unsigned long long seg;
		struct stat st;

		if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof(c->name) ||
		    fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		if (st.st_size == 0) {
			if (sscanf(de->d_name, "seg-%20llu-", &seg) == 1 && seg < first_seg)
				(void)unlinkat(fd, de->d_name, 0);
			continue;
		}
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct dcopy *p = realloc(c, nc * sizeof(*c));

			if (!p)
				break;
			c = p;
			cap = nc;
		}
		snprintf(c[n].name, sizeof(c[n].name), "%s", de->d_name);
		c[n].size = (uint64_t)st.st_size;
		c[n].mtime = st.st_mtim;
		total += c[n].size;
		n++;
	}
	if (total > s->damaged_max && n > 0) {
		qsort(c, n, sizeof(*c), dcopy_cmp);
		for (size_t i = 0; i < n && total > s->damaged_max; i++) {
			int tfd =
			    openat(fd, c[i].name, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
			struct spool_damage dr = {.length = c[i].size, .dropped = true};

			if (tfd < 0)
				continue;
			close(tfd);
			total -= c[i].size;
			s->st.damaged_dropped++;
			snprintf(dr.file, sizeof(dr.file), "%s", c[i].name);
			(void)sscanf(c[i].name, "seg-%20" SCNu64 "-at-%20" SCNu64, &dr.segment,
				     &dr.offset);
			queue_damage(s, &dr);
		}
	}
	closedir(d);
}

/*
 * A region that did not verify: keep its bytes in damaged/ (O_EXCL: a region an earlier open
 * already kept is not new, so each is reported and counted once) and queue the report.
 */
static void note_damage(struct spool *s, uint64_t seg, uint64_t off, const unsigned char *bytes,
			size_t len, uint64_t next_seq, bool torn)
{
	struct spool_damage d = {
	    .segment = seg, .offset = off, .length = len, .next_seq = next_seq, .torn = torn};
	size_t keep = MIN(len, (size_t)SPOOL_DAMAGE_KEEP_MAX);
	char path[96];
	int fd;

	snprintf(d.file, sizeof(d.file), "seg-%020" PRIu64 "-at-%" PRIu64 "%s.bin", seg, off,
		 torn ? "-torn" : "");
	snprintf(path, sizeof(path), "damaged/%s", d.file);
	if (mkdirat(s->dfd, "damaged", 0700) < 0 && errno != EEXIST) {
		d.keep_error = -errno;
	} else {
		fd = openat(s->dfd, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			    0600);
		if (fd < 0 && errno == EEXIST)
			return; /* kept and reported before */
		if (fd < 0) {
			d.keep_error = -errno;
		} else {
			if (write(fd, bytes, keep) != (ssize_t)keep)
				d.keep_error = -EIO;
			else if (!s->no_fsync && fsync(fd) < 0)
				d.keep_error = -errno;
			close(fd);
		}
	}
	if (d.keep_error)
		d.file[0] = 0;
	if (!torn)
		s->st.corrupt_frames++;
	queue_damage(s, &d);
	if (!d.keep_error)
		damaged_trim(s);
	/* found after open: the count is made durable now (at open: once the scan is done) */
	if (s->state_loaded)
		(void)state_save(s, s->acked);
}

size_t spool_take_damage(struct spool *s, struct spool_damage *ret, size_t max)
{
	size_t n = MIN(max, s->n_damage);

	memcpy(ret, s->damage, n * sizeof(*ret));
	memmove(s->damage, s->damage + n, (s->n_damage - n) * sizeof(*ret));
	s->n_damage -= n;
	return n;
}

/* seq of the valid entry at buf[pos..n), 0 if none */
static uint64_t seq_at(const unsigned char *buf, size_t n, size_t pos)
{
	struct hdr h;

	return entry_valid_at(buf, n, pos, 0, &h) ? h.seq : 0;
}

/* ---- open / recovery --------------------------------------------------------------------- */

/*
 * Verify one segment: counts valid entries, skips damaged regions, and (last segment only)
 * truncates a torn tail. min_seq is the previous segment's last seq.
 */
static int scan_segment(struct spool *s, struct segment *g, bool last, uint64_t min_seq)
{
	char name[SEG_NAME_MAX];
	_cleanup_close_ int fd = -1;
	_cleanup_free_ unsigned char *buf = NULL;
	struct stat stt;
	size_t n, pos = 0;
	int r;

	seg_name(g->name_seq, name);
	fd = openat(s->dfd, name, (last ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &stt) < 0)
		return -errno;
	n = (size_t)stt.st_size;
	if (n > 0) {
		buf = malloc(n);
		if (!buf)
			return -ENOMEM;
		r = read_all_at(fd, buf, n, 0);
		if (r < 0)
			return r == -ENODATA ? -EIO : r;
	}

	while (pos < n) {
		struct hdr h;
		size_t next;

		if (entry_valid_at(buf, n, pos, min_seq, &h)) {
			if (!g->first_seq)
				g->first_seq = h.seq;
			g->last_seq = min_seq = h.seq;
			g->n_entries++;
			if (h.seq > s->acked)
				s->pending++;
			pos += HDR_SIZE + h.len;
			continue;
		}
		next = resync(buf, n, pos, min_seq);
		if (next == n && last) {
			/* torn tail: a crash mid-append; drop it so appends continue cleanly */
			note_damage(s, g->name_seq, pos, buf + pos, n - pos, 0, true);
			if (ftruncate(fd, (off_t)pos) < 0)
				return -errno;
			if (!s->no_fsync && fsync(fd) < 0)
				return -errno;
			s->st.torn_bytes_truncated += n - pos;
			n = pos;
			break;
		}
		s->st.corrupt_entries_skipped++;
		s->st.corrupt_bytes_skipped += next - pos;
		note_damage(s, g->name_seq, pos, buf + pos, next - pos, seq_at(buf, n, next),
			    false);
		g->damaged = true;
		pos = next;
	}
	g->size = n;
	return 0;
}

static int load_segments(struct spool *s)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int fd;

	fd = openat(s->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		uint64_t seq;
		struct segment *n;

		if (seg_parse_name(de->d_name, &seq) < 0)
			continue;
		if (s->n_segs >= SEGMENTS_MAX)
			return -E2BIG;
		n = realloc(s->segs, (s->n_segs + 1) * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->segs = n;
		s->segs[s->n_segs++] = (struct segment){.name_seq = seq};
	}
	if (s->n_segs > 1)
		qsort(s->segs, s->n_segs, sizeof(*s->segs), cmp_seg);
	return 0;
}

static int unlink_segment(struct spool *s, size_t i)
{
	char name[SEG_NAME_MAX];

	seg_name(s->segs[i].name_seq, name);
	if (unlinkat(s->dfd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	s->bytes -= s->segs[i].size;
	memmove(&s->segs[i], &s->segs[i + 1], (s->n_segs - i - 1) * sizeof(*s->segs));
	s->n_segs--;
	return 0;
}

/* Delete every segment whose entries are all acked (the last one too: appends recreate, unless
 * keep_last: it holds the sequence's floor when the ack could not be made durable). */
static int gc_segments(struct spool *s, bool keep_last)
{
	bool removed = false, last_removed = false;
	int r;

	while (s->n_segs > 0) {
		struct segment *g = &s->segs[0];
		bool last = s->n_segs == 1;

		if (g->n_entries > 0 && g->last_seq > s->acked)
			break;
		/* an empty last segment is kept: it is where appends go */
		if (last && ((g->n_entries == 0 && !g->damaged) || keep_last))
			break;
		if (last)
			last_removed = true;
		r = unlink_segment(s, 0);
		if (r < 0)
			return r;
		removed = true;
	}
	if (last_removed && s->wfd >= 0) {
		close(s->wfd);
		s->wfd = -1;
	}
	if (removed) {
		s->cur_valid = false;
		return dir_sync(s);
	}
	return 0;
}

int spool_open(const struct spool_opts *opts, struct spool **ret)
{
	struct spool *s;
	uint64_t min_seq = 0;
	int r;

	if (!opts || !opts->dir || !*opts->dir)
		return -EINVAL;
	crc_init();
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->dfd = s->lock_fd = s->wfd = s->state_fd = -1;
	s->damaged_max = opts->damaged_max_bytes ?: SPOOL_DEFAULT_DAMAGED_MAX;
	s->max_bytes = opts->max_bytes ? opts->max_bytes : DEFAULT_MAX_BYTES;
	s->segment_bytes = opts->segment_bytes ? opts->segment_bytes : DEFAULT_SEGMENT_BYTES;
	s->keep_reserve = opts->keep_reserve ? opts->keep_reserve : s->max_bytes / 10;
	s->no_fsync = opts->no_fsync;
	s->compress = opts->compress;
	s->free_space = opts->free_space;
	s->free_space_ud = opts->free_space_ud;
	r = -EINVAL;
	if (s->keep_reserve >= s->max_bytes || s->segment_bytes < HDR_SIZE)
		goto out_free;
	r = -ENOMEM;
	s->dir = strdup(opts->dir);
	if (!s->dir)
		goto out_free;
	r = mkdir_p(opts->dir, 0700);
	if (r < 0)
		goto out_free;
	s->dfd = open(opts->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dfd < 0) {
		r = -errno;
		goto out_free;
	}
	s->lock_fd = openat(s->dfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (s->lock_fd < 0) {
		r = -errno;
		goto out_free;
	}
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto out_free;
	}
	r = state_load(s);
	if (r < 0)
		goto out_free;
	r = load_segments(s);
	if (r < 0)
		goto out_free;
	for (size_t i = 0; i < s->n_segs; i++) {
		r = scan_segment(s, &s->segs[i], i + 1 == s->n_segs, min_seq);
		if (r < 0)
			goto out_free;
		if (s->segs[i].last_seq)
			min_seq = s->segs[i].last_seq;
		s->bytes += s->segs[i].size;
	}
	s->next_seq =
	    MAX(MAX(s->acked, min_seq) + 1, s->n_segs ? s->segs[s->n_segs - 1].name_seq : 1);
	r = gc_segments(s, false);
	if (r < 0)
		goto out_free;
	damaged_trim(s);
	/*
	 * The state file in its slot form from the start, so that no ack needs new space: an
	 * older spool's is rewritten within its block; a missing one is made (on a full
	 * filesystem that waits for the first ack: see spool_ack). New damage is counted.
	 */
	s->state_loaded = true;
	if (s->state_gen == 0 || s->st.corrupt_frames != s->state_saved_corrupt ||
	    s->st.damaged_dropped != s->state_saved_dropped) {
		r = state_save(s, s->acked);
		if (r < 0 && r != -ENOSPC && r != -EDQUOT)
			goto out_free;
	}
	*ret = s;
	return 0;

out_free:
	spool_close(s);
	return r;
}

void spool_close(struct spool *s)
{
	if (!s)
		return;
	if (s->wfd >= 0)
		close(s->wfd);
	if (s->state_fd >= 0)
		close(s->state_fd);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	if (s->dfd >= 0)
		close(s->dfd);
	free(s->segs);
	free(s->dir);
	zframe_free(s->z);
	free(s->zbuf);
	free(s->pack);
	free(s->dbuf);
	free(s);
}

/* ---- encoding ---------------------------------------------------------------------------- */

static int zready(struct spool *s)
{
	return s->z ? 0 : zframe_new(0, &s->z);
}

/*
 * The bytes to store for a record: compressed into out (zframe_bound(len) bytes) when
 * compression is on and that is smaller, else the record itself. 0 or -errno.
 */
static int encode(struct spool *s, const void *data, size_t len, unsigned char *out,
		  const void **ret, size_t *ret_len, uint8_t *ret_enc)
{
	ssize_t k = 0;
	int r;

	*ret = data;
	*ret_len = len;
	*ret_enc = ZFRAME_ENC_RAW;
	if (s->compress) {
		r = zready(s);
		if (r < 0)
			return r;
		k = zframe_pack(s->z, data, len, out, zframe_bound(len));
		if (k < 0)
			return (int)k;
	}
	if (k > 0) {
		*ret = out;
		*ret_len = (size_t)k;
		*ret_enc = ZFRAME_ENC_DICT1;
	}
	return 0;
}

/* A stored payload as the record: *ret points at buf or at s->dbuf. -EBADMSG: not decodable. */
static int decode(struct spool *s, const struct hdr *h, const unsigned char *buf, const void **ret,
		  size_t *ret_len)
{
	ssize_t k;
	int r;

	*ret = buf;
	*ret_len = h->len;
	if (h->enc == ZFRAME_ENC_RAW)
		return 0;
	r = zready(s);
	if (r < 0)
		return r;
	if (!s->dbuf) {
		s->dbuf = malloc(SPOOL_ENTRY_MAX + 1);
		if (!s->dbuf)
			return -ENOMEM;
	}
	k = zframe_unpack(s->z, h->enc, buf, h->len, s->dbuf, SPOOL_ENTRY_MAX);
	if (k < 0)
		return k == -ENOMEM ? -ENOMEM : -EBADMSG;
	s->dbuf[k] = 0;
	*ret = s->dbuf;
	*ret_len = (size_t)k;
	return 0;
}

/* ---- append ------------------------------------------------------------------------------ */

static int sync_fd(struct spool *s, int fd)
{
	if (s->no_fsync || fd < 0)
		return 0;
	return fdatasync(fd) < 0 ? -errno : 0;
}

/* Make sure the last segment is open for append and has room for an entry of size sz. */
static int prepare_segment(struct spool *s, uint64_t sz)
{
	struct segment *g = s->n_segs ? &s->segs[s->n_segs - 1] : NULL;
	char name[SEG_NAME_MAX];
	struct segment *n;
	int fd, r;

	if (g && (g->size == 0 || g->size + sz <= s->segment_bytes)) {
		if (s->wfd >= 0)
			return 0;
		seg_name(g->name_seq, name);
		s->wfd = openat(s->dfd, name, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
		return s->wfd < 0 ? -errno : 0;
	}
	/* roll over: the old segment is already synced (every append syncs before returning) */
	if (s->n_segs >= SEGMENTS_MAX)
		return -ENOSPC;
	n = realloc(s->segs, (s->n_segs + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	s->segs = n;
	seg_name(s->next_seq, name);
	fd = openat(s->dfd, name, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		    0600);
	if (fd < 0)
		return -errno;
	r = dir_sync(s);
	if (r < 0) {
		close(fd);
		unlinkat(s->dfd, name, 0);
		return r;
	}
	if (s->wfd >= 0)
		close(s->wfd);
	s->wfd = fd;
	s->segs[s->n_segs++] = (struct segment){.name_seq = s->next_seq};
	return 0;
}

static uint64_t class_limit(const struct spool *s, enum spool_prio prio)
{
	return prio == SPOOL_PRIO_KEEP ? s->max_bytes : s->max_bytes - s->keep_reserve;
}

static bool fits(const struct spool *s, uint64_t sz, enum spool_prio prio)
{
	return s->bytes + sz <= class_limit(s, prio);
}

bool spool_fits(const struct spool *s, size_t n, uint64_t payload_bytes, enum spool_prio prio)
{
	uint64_t sz = (uint64_t)n * HDR_SIZE + payload_bytes;

	if ((unsigned)prio >= _SPOOL_PRIO_MAX || sz < payload_bytes)
		return false;
	return fits(s, sz, prio);
}

/* The class byte on disk: 0 shed-able, 1 kept (billing and audit alike). */
static uint8_t disk_prio(enum spool_prio prio)
{
	return prio == SPOOL_PRIO_SHED ? 0 : 1;
}

static void count_refusal(struct spool *s, enum spool_prio prio)
{
	s->st.refused_full++;
	if (prio == SPOOL_PRIO_KEEP)
		s->st.refused_keep++;
	else if (prio == SPOOL_PRIO_AUDIT)
		s->st.refused_audit++;
}

/* Write one entry (no sync). On failure the segment is cut back to its previous size. */
static int append_one(struct spool *s, const void *data, size_t len, enum spool_prio prio,
		      bool *rolled_fd_synced)
{
	unsigned char hdr[HDR_SIZE];
	struct iovec iov[2];
	struct segment *g;
	const void *stored;
	size_t raw_len = len;
	uint64_t sz;
	uint8_t enc;
	int old_wfd = s->wfd, r;
	ssize_t k;

	if (!data || len > SPOOL_ENTRY_MAX)
		return -EINVAL;
	if ((unsigned)prio >= _SPOOL_PRIO_MAX)
		return -EINVAL;
	if (s->compress && !s->zbuf) {
		s->zbuf = malloc(zframe_bound(SPOOL_ENTRY_MAX));
		if (!s->zbuf)
			return -ENOMEM;
	}
	r = encode(s, data, len, s->zbuf, &stored, &len, &enc);
	if (r < 0)
		return r;
	sz = HDR_SIZE + (uint64_t)len;
	if (!fits(s, sz, prio)) {
		count_refusal(s, prio);
		return -ENOSPC;
	}
	/* a rollover closes the old fd; sync it first so a batch stays durable */
	if (s->n_segs && s->wfd >= 0 && s->segs[s->n_segs - 1].size > 0 &&
	    s->segs[s->n_segs - 1].size + sz > s->segment_bytes) {
		r = sync_fd(s, old_wfd);
		if (r < 0)
			return r;
		*rolled_fd_synced = true;
	}
	r = prepare_segment(s, sz);
	if (r < 0)
		return r;
	g = &s->segs[s->n_segs - 1];
	hdr_encode(hdr, (uint32_t)len, s->next_seq, disk_prio(prio), enc, stored);
	iov[0] = (struct iovec){.iov_base = hdr, .iov_len = HDR_SIZE};
	iov[1] = (struct iovec){.iov_base = (void *)stored, .iov_len = len};
	do
		k = writev(s->wfd, iov, 2);
	while (k < 0 && errno == EINTR);
	if (k < 0 || (uint64_t)k != sz) {
		r = k < 0 ? -errno : -EIO;
		/* cut a partial write back so the segment stays well-formed */
		if (ftruncate(s->wfd, (off_t)g->size) < 0)
			return r;
		return r == -ENOSPC || r == -EDQUOT ? -ENOSPC : r;
	}
	g->size += sz;
	if (!g->first_seq)
		g->first_seq = s->next_seq;
	g->last_seq = s->next_seq;
	g->n_entries++;
	s->bytes += sz;
	s->pending++;
	s->st.appended++;
	s->st.payload_bytes += raw_len;
	s->st.stored_bytes += len;
	s->next_seq++;
	return 0;
}

int spool_append(struct spool *s, const void *data, size_t len, enum spool_prio prio,
		 uint64_t *ret_seq)
{
	bool synced = false;
	uint64_t seq = s->next_seq;
	int r;

	r = append_one(s, data, len, prio, &synced);
	if (r < 0)
		return r;
	r = sync_fd(s, s->wfd);
	if (r < 0)
		return r;
	if (ret_seq)
		*ret_seq = seq;
	return 0;
}

/*
 * A batch is staged (headers + iovecs) and written with one writev() per STAGE_MAX entries
 * or segment, then synced once: the per-record cost is the payload copy into the page cache,
 * not a syscall each. Counters move only after a write succeeded; a failed write is cut back.
 */
#define STAGE_MAX 128

struct stage {
	unsigned char hdr[STAGE_MAX][HDR_SIZE];
	struct iovec iov[2 * STAGE_MAX];
	size_t pack_used; /* bytes of s->pack the staged compressed entries hold */
	size_t n;
	uint64_t bytes;
	uint64_t raw; /* the records' own bytes */
};

static void stage_reset(struct stage *st)
{
	st->pack_used = 0;
	st->n = 0;
	st->bytes = 0;
	st->raw = 0;
}

static int stage_flush(struct spool *s, struct stage *st)
{
	struct segment *g;
	size_t off = 0, iovcnt = 2 * st->n;
	uint64_t written = 0;

	if (!st->n)
		return 0;
	g = &s->segs[s->n_segs - 1];
	while (written < st->bytes) {
		ssize_t k = writev(s->wfd, st->iov + off, (int)MIN(iovcnt - off, (size_t)1024));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			int r = k < 0 ? -errno : -EIO;

			(void)!ftruncate(s->wfd, (off_t)g->size);
			stage_reset(st);
			return r == -EDQUOT ? -ENOSPC : r;
		}
		written += (uint64_t)k;
		/* advance the iovec array past what was written */
		while (k > 0 && off < iovcnt) {
			if ((size_t)k >= st->iov[off].iov_len) {
				k -= (ssize_t)st->iov[off].iov_len;
				st->iov[off].iov_len = 0;
				off++;
			} else {
				st->iov[off].iov_base = (char *)st->iov[off].iov_base + k;
				st->iov[off].iov_len -= (size_t)k;
				k = 0;
			}
		}
	}
	g->size += st->bytes;
	if (!g->first_seq)
		g->first_seq = s->next_seq;
	g->last_seq = s->next_seq + st->n - 1;
	g->n_entries += st->n;
	s->bytes += st->bytes;
	s->pending += st->n;
	s->st.appended += st->n;
	s->st.payload_bytes += st->raw;
	s->st.stored_bytes += st->bytes - (uint64_t)HDR_SIZE * st->n;
	s->next_seq += st->n;
	stage_reset(st);
	return 0;
}

/*
 * Room for a compressed entry of up to need bytes at s->pack + st->pack_used. The staged
 * entries point into s->pack: it grows only while the stage is empty (else the stage is
 * written first, *done = i, and the buffer doubled for the next ones).
 */
static int stage_pack_room(struct spool *s, struct stage *st, size_t need, size_t *done, size_t i)
{
	size_t cap;
	unsigned char *nb;

	if (st->pack_used + need <= s->pack_cap)
		return 0;
	cap = MAX(s->pack_cap * 2, (size_t)64 * 1024);
	if (st->n) {
		int r = stage_flush(s, st);

		if (r < 0)
			return r;
		*done = i;
	}
	cap = MAX(cap, need);
	nb = realloc(s->pack, cap);
	if (!nb)
		return -ENOMEM;
	s->pack = nb;
	s->pack_cap = cap;
	return 0;
}

int spool_append_many(struct spool *s, const void *const *data, const size_t *lens, size_t n,
		      enum spool_prio prio)
{
	_cleanup_free_ struct stage *st = NULL;
	size_t i, done = 0;
	int r = 0;

	if (n > INT32_MAX || (n && (!data || !lens)))
		return -EINVAL;
	if ((unsigned)prio >= _SPOOL_PRIO_MAX)
		return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		unsigned char *packed = NULL;
		const void *stored;
		size_t len;
		uint64_t sz;
		uint8_t enc;
		struct segment *g;

		if (!data[i] || lens[i] > SPOOL_ENTRY_MAX) {
			r = -EINVAL;
			break;
		}
		if (s->compress) {
			r = stage_pack_room(s, st, zframe_bound(lens[i]), &done, i);
			if (r < 0)
				break;
			packed = s->pack + st->pack_used;
		}
		r = encode(s, data[i], lens[i], packed, &stored, &len, &enc);
		if (r < 0)
			break;
		sz = HDR_SIZE + (uint64_t)len;
		if (s->bytes + st->bytes + sz > class_limit(s, prio)) {
			count_refusal(s, prio);
			r = -ENOSPC;
			break;
		}
		g = s->n_segs ? &s->segs[s->n_segs - 1] : NULL;
		if (st->n == STAGE_MAX || (st->n && g->size + st->bytes + sz > s->segment_bytes)) {
			r = stage_flush(s, st);
			if (r < 0)
				break;
			done = i;
			if (packed && stored == packed) {
				/* the emptied stage starts at the buffer's start again */
				memmove(s->pack, packed, len);
				stored = packed = s->pack;
			}
		}
		if (!st->n) {
			/* same rollover rule as a single append; sync the old segment first */
			if (g && s->wfd >= 0 && g->size > 0 && g->size + sz > s->segment_bytes) {
				r = sync_fd(s, s->wfd);
				if (r < 0)
					break;
			}
			r = prepare_segment(s, sz);
			if (r < 0)
				break;
		}
		hdr_encode(st->hdr[st->n], (uint32_t)len, s->next_seq + st->n, disk_prio(prio), enc,
			   stored);
		st->iov[2 * st->n] =
		    (struct iovec){.iov_base = st->hdr[st->n], .iov_len = HDR_SIZE};
		st->iov[2 * st->n + 1] = (struct iovec){.iov_base = (void *)stored, .iov_len = len};
		if (packed && stored == packed)
			st->pack_used += len;
		st->raw += lens[i];
		st->n++;
		st->bytes += sz;
	}
	if (st->n) {
		int q = stage_flush(s, st);

		if (q < 0)
			r = q;
		else
			done = i;
	}
	if (done > 0) {
		int q = 0;

		if (s->in_group)
			s->group_dirty = true;
		else
			q = sync_fd(s, s->wfd);
		if (q < 0)
			return q;
		return (int)done;
	}
	return r < 0 ? r : 0;
}

void spool_group_begin(struct spool *s)
{
	s->in_group = true;
}

int spool_group_commit(struct spool *s)
{
	int r = 0;

	if (s->group_dirty)
		r = sync_fd(s, s->wfd);
	s->in_group = s->group_dirty = false;
	return r;
}

int spool_group_end(struct spool *s, int *ret_fd)
{
	bool dirty = s->group_dirty;

	*ret_fd = -1;
	s->in_group = s->group_dirty = false;
	if (!dirty || s->no_fsync || s->wfd < 0)
		return 0;
	*ret_fd = fcntl(s->wfd, F_DUPFD_CLOEXEC, 3);
	if (*ret_fd >= 0)
		return 0;
	return sync_fd(s, s->wfd); /* no descriptor to spare: sync now */
}

/* ---- peek -------------------------------------------------------------------------------- */

static ssize_t seg_index(const struct spool *s, uint64_t name_seq)
{
	for (size_t i = 0; i < s->n_segs; i++)
		if (s->segs[i].name_seq == name_seq)
			return (ssize_t)i;
	return -1;
}

/*
 * Read the entry at (segment i, *off). Returns 1 with the entry (payload in *buf, grown as
 * needed), 0 at the end of the segment, <0 on error. A damaged region is skipped (*off moves
 * past it) by reading the rest of the segment and resyncing.
 */
static int read_entry(struct spool *s, int fd, const struct segment *g, uint64_t *off,
		      uint64_t min_seq, struct hdr *h, unsigned char **buf, size_t *cap)
{
	unsigned char hb[HDR_SIZE];
	uint32_t crc;
	int r;

	while (*off + HDR_SIZE <= g->size) {
		r = read_all_at(fd, hb, HDR_SIZE, *off);
		if (r < 0)
			return r == -ENODATA ? 0 : r;
		if (hdr_decode(hb, h, &crc) && *off + HDR_SIZE + h->len <= g->size &&
		    h->seq > min_seq) {
			if (*cap < h->len + 1u) {
				unsigned char *nb = realloc(*buf, h->len + 1u);

				if (!nb)
					return -ENOMEM;
				*buf = nb;
				*cap = h->len + 1u;
			}
			r = read_all_at(fd, *buf, h->len, *off + HDR_SIZE);
			if (r < 0)
				return r == -ENODATA ? -EIO : r;
			if (crc32c(crc32c(0, hb + 4, 16), *buf, h->len) == crc) {
				(*buf)[h->len] = 0;
				return 1;
			}
		}
		/* damaged since open (or skipped at open): resync within the segment */
		{
			size_t rest = (size_t)(g->size - *off);
			_cleanup_free_ unsigned char *tmp = malloc(rest ? rest : 1);
			size_t next;

			if (!tmp)
				return -ENOMEM;
			r = read_all_at(fd, tmp, rest, *off);
			if (r < 0)
				return r == -ENODATA ? -EIO : r;
			next = resync(tmp, rest, 0, min_seq);
			note_damage(s, g->name_seq, *off, tmp, next, seq_at(tmp, rest, next),
				    false);
			*off += next;
		}
	}
	return 0;
}

/* A frame at off of g whose CRC holds but whose payload does not decode: a damaged region
 * (the whole frame kept and reported), skipped. */
static int note_undecodable(struct spool *s, int fd, const struct segment *g, uint64_t off,
			    const struct hdr *h)
{
	size_t n = HDR_SIZE + h->len;
	_cleanup_free_ unsigned char *frame = malloc(n);
	int r;

	if (!frame)
		return -ENOMEM;
	r = read_all_at(fd, frame, n, off);
	if (r < 0)
		return r == -ENODATA ? -EIO : r;
	s->st.corrupt_entries_skipped++;
	s->st.corrupt_bytes_skipped += n;
	note_damage(s, g->name_seq, off, frame, n, 0, false);
	return 0;
}

int spool_peek(struct spool *s, uint64_t from_seq, size_t max, size_t max_bytes, spool_entry_fn fn,
	       void *userdata)
{
	_cleanup_free_ unsigned char *buf = NULL;
	size_t cap = 0, count = 0, bytes = 0;
	uint64_t want, off = 0;
	ssize_t si = 0;
	bool use_cursor;
	int r;

	if (!fn)
		return -EINVAL;
	if (from_seq == 0)
		want = s->cur_seq;
	else
		want = from_seq;
	want = MAX(want, s->acked + 1);
	use_cursor = s->cur_valid && s->cur_seq == want;
	if (use_cursor) {
		si = seg_index(s, s->cur_seg_name);
		off = s->cur_off;
		if (si < 0)
			use_cursor = false;
	}
	if (!use_cursor) {
		/* last segment whose name seq <= want (names are the first seq written there) */
		si = 0;
		for (size_t i = 0; i < s->n_segs; i++)
			if (s->segs[i].name_seq <= want)
				si = (ssize_t)i;
		off = 0;
	}

	for (; (size_t)si < s->n_segs && count < max; si++, off = 0) {
		const struct segment *g = &s->segs[si];
		char name[SEG_NAME_MAX];
		_cleanup_close_ int fd = -1;

		if (g->n_entries == 0 || g->last_seq < want)
			continue;
		seg_name(g->name_seq, name);
		fd = openat(s->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return -errno;
		while (count < max) {
			struct hdr h;
			uint64_t at = off;
			const void *rec;
			size_t rec_len;

			r = read_entry(s, fd, g, &off, 0, &h, &buf, &cap);
			if (r < 0)
				return r;
			if (r == 0)
				break;
			off += HDR_SIZE + h.len;
			if (h.seq < want)
				continue;
			r = decode(s, &h, buf, &rec, &rec_len);
			if (r == -EBADMSG) {
				/* CRC-valid but not decodable: damaged as a bad CRC is */
				r = note_undecodable(s, fd, g, at, &h);
				if (r < 0)
					return r;
				want = h.seq + 1;
				continue;
			}
			if (r < 0)
				return r;
			if (count > 0 && bytes + rec_len > max_bytes) {
				off = at;
				goto out_stop;
			}
			r = fn(h.seq, rec, rec_len, userdata);
			if (r < 0) {
				off = at;
				goto out_stop;
			}
			count++;
			bytes += rec_len;
			want = h.seq + 1;
		}
		if (count >= max) {
			s->cur_seg_name = g->name_seq;
			s->cur_off = off;
			s->cur_seq = want;
			s->cur_valid = true;
			return (int)count;
		}
		continue;
	out_stop:
		s->cur_seg_name = g->name_seq;
		s->cur_off = off;
		s->cur_seq = want;
		s->cur_valid = true;
		return (int)count;
	}
	/* at the end: the next peek(0) continues with whatever is appended next */
	s->cur_valid = false;
	s->cur_seq = want;
	return (int)count;
}

/* ---- ack --------------------------------------------------------------------------------- */

/* Valid entries of g with seq in (lo, hi]. */
static int count_range(struct spool *s, const struct segment *g, uint64_t lo, uint64_t hi,
		       uint64_t *ret)
{
	_cleanup_free_ unsigned char *buf = NULL;
	char name[SEG_NAME_MAX];
	_cleanup_close_ int fd = -1;
	uint64_t off = 0, n = 0;
	size_t cap = 0;
	struct hdr h;
	int r;

	*ret = 0;
	if (g->n_entries == 0 || g->last_seq <= lo || g->first_seq > hi)
		return 0;
	if (!g->damaged && g->last_seq - g->first_seq + 1 == g->n_entries) {
		uint64_t a = MAX(lo + 1, g->first_seq), b = MIN(hi, g->last_seq);

		*ret = b >= a ? b - a + 1 : 0;
		return 0;
	}
	seg_name(g->name_seq, name);
	fd = openat(s->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	while ((r = read_entry(s, fd, g, &off, 0, &h, &buf, &cap)) > 0) {
		off += HDR_SIZE + h.len;
		if (h.seq > lo && h.seq <= hi)
			n++;
	}
	if (r < 0)
		return r;
	*ret = n;
	return 0;
}

int spool_ack(struct spool *s, uint64_t upto_seq)
{
	uint64_t acked = 0;
	int r;

	upto_seq = MIN(upto_seq, s->next_seq - 1);
	if (upto_seq <= s->acked)
		return 0;
	for (size_t i = 0; i < s->n_segs; i++) {
		uint64_t n;

		r = count_range(s, &s->segs[i], s->acked, upto_seq, &n);
		if (r < 0)
			return r;
		acked += n;
	}
	/* the ack must be durable before any segment goes away */
	r = state_save(s, upto_seq);
	if ((r == -ENOSPC || r == -EDQUOT) && s->free_space && s->free_space(s->free_space_ud) == 0)
		r = state_save(s, upto_seq);
	if (r < 0 && r != -ENOSPC && r != -EDQUOT)
		return r;
	s->acked = upto_seq;
	s->pending -= MIN(acked, s->pending);
	if (s->cur_valid && s->cur_seq <= s->acked)
		s->cur_valid = false;
	if (r == 0)
		return gc_segments(s, false);
	/*
	 * No room even for the state file (made on a full filesystem, no reserve to give up):
	 * the acked segments go all the same, first all but the last (it holds the sequence's
	 * floor), then, if that left no room, the last too, and the ack is written into the room
	 * they leave. Until it is, a restart resends what followed the last durable ack (the
	 * collector answers "duplicate"); one between the last segment's removal and the write
	 * would number new entries from that ack on again (docs/pipeline.md "Full disk").
	 */
	s->st.acks_not_durable++;
	r = gc_segments(s, true);
	if (r < 0)
		return r;
	if (state_save(s, upto_seq) == 0)
		return 0;
	r = gc_segments(s, false);
	if (r < 0)
		return r;
	(void)state_save(s, upto_seq);
	return 0;
}

uint64_t spool_first_unacked(const struct spool *s)
{
	if (s->pending == 0)
		return 0;
	for (size_t i = 0; i < s->n_segs; i++) {
		const struct segment *g = &s->segs[i];

		if (g->n_entries == 0 || g->last_seq <= s->acked)
			continue;
		if (g->first_seq > s->acked)
			return g->first_seq;
		/* in a damaged segment acked+1 may be a gap: harmless, peek skips to the next */
		return s->acked + 1;
	}
	return 0;
}

void spool_get_stats(const struct spool *s, struct spool_stats *ret)
{
	*ret = s->st;
	ret->entries_pending = s->pending;
	ret->bytes_on_disk = s->bytes;
	ret->segments = s->n_segs;
	ret->acked_upto = s->acked;
	ret->next_seq = s->next_seq;
}
