/* SPDX-License-Identifier: MIT */
/*
 * zstd for records: spool frames compressed one by one against a built-in dictionary (the
 * frame's encoding byte names it), and whole upload bodies (HTTP Content-Encoding: zstd).
 *
 * The dictionary of encoding ZFRAME_ENC_DICT1 is accounting/spool_dict_v1.ndjson, a raw
 * content dictionary (typical records of each kind): it is part of the spool format and never
 * changes; a better one becomes a new encoding number, and readers keep the old ones.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum zframe_enc {
	ZFRAME_ENC_RAW = 0,   /* payload stored as is */
	ZFRAME_ENC_DICT1 = 1, /* one zstd frame, raw-content dictionary v1 */
	_ZFRAME_ENC_MAX,
};

struct zframe;

/* Compression level: zstd's 1..19; 0 = ZFRAME_LEVEL_DEFAULT. */
#define ZFRAME_LEVEL_DEFAULT 3
/* The dictionary's tables are built at the first zframe_pack / zframe_unpack, not here. */
int zframe_new(int level, struct zframe **ret);
void zframe_free(struct zframe *z);
/* Bytes held by the dictionary's tables and the decompression context (0 before first use). */
size_t zframe_tables_bytes(const struct zframe *z);

/* Largest output of zframe_pack / zframe_body_pack for n input bytes. */
size_t zframe_bound(size_t n);
/* Compresses in[0..n) with dictionary v1 into out (cap >= zframe_bound(n)): the compressed
 * size, 0 when that is not smaller than n (store it raw), or -errno. */
ssize_t zframe_pack(struct zframe *z, const void *in, size_t n, void *out, size_t cap);
/* Decompresses a frame of encoding enc into out (at most cap bytes): its size, -EBADMSG when
 * it is not a valid frame of that encoding or holds more than cap bytes, -EINVAL for an
 * unknown encoding. */
ssize_t zframe_unpack(struct zframe *z, enum zframe_enc enc, const void *in, size_t n, void *out,
		      size_t cap);

/* A whole body as one zstd frame without dictionary (the HTTP "zstd" content coding):
 * malloc'd in *ret; 0 or -errno. */
int zframe_body_pack(struct zframe *z, const void *in, size_t n, char **ret, size_t *ret_len);
/*
 * Decompresses a zstd body (one or more frames, no dictionary) into a malloc'd, NUL-ended
 * buffer of at most max bytes, reading it as a stream so that a small body that expands
 * beyond max costs at most max bytes: 0, -E2BIG (more than max), -EBADMSG (not zstd, or cut
 * short), -ENOMEM.
 */
int zframe_body_unpack(const void *in, size_t n, size_t max, char **ret, size_t *ret_len);

/* The dictionary of an encoding (for tools and tests), NULL for none. */
const void *zframe_dict(enum zframe_enc enc, size_t *ret_len);
