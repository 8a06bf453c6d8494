/* SPDX-License-Identifier: MIT */
#include "accounting/zframe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "common/macro.h"

/* The dictionary file, linked in as it is (see zframe.h: never edited). */
__asm__(".pushsection .rodata\n"
	".balign 16\n"
	".globl zframe_dict_v1_start\n"
	"zframe_dict_v1_start:\n"
	".incbin \"accounting/spool_dict_v1.ndjson\"\n"
	".globl zframe_dict_v1_end\n"
	"zframe_dict_v1_end:\n"
	".popsection\n");
extern const unsigned char zframe_dict_v1_start[], zframe_dict_v1_end[];

struct zframe {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	ZSTD_CDict *cdict;
	ZSTD_DDict *ddict;
	int level;
};

const void *zframe_dict(enum zframe_enc enc, size_t *ret_len)
{
	if (enc != ZFRAME_ENC_DICT1)
		return NULL;
	*ret_len = (size_t)(zframe_dict_v1_end - zframe_dict_v1_start);
	return zframe_dict_v1_start;
}

/*
 * Only the compression context up front: the dictionary's tables (and the decompression
 * side) are built at their first use, so that a user of whole bodies only (the uploader) never
 * builds them.
 */
int zframe_new(int level, struct zframe **ret)
{
	struct zframe *z = calloc(1, sizeof(*z));

	if (!z)
		return -ENOMEM;
	z->level = level > 0 ? MIN(level, ZSTD_maxCLevel()) : ZFRAME_LEVEL_DEFAULT;
	z->cctx = ZSTD_createCCtx();
	if (!z->cctx) {
		zframe_free(z);
		return -ENOMEM;
	}
	*ret = z;
	return 0;
}

static size_t dict_len(void)
{
	return (size_t)(zframe_dict_v1_end - zframe_dict_v1_start);
}

size_t zframe_tables_bytes(const struct zframe *z)
{
	return ZSTD_sizeof_CDict(z->cdict) + ZSTD_sizeof_DDict(z->ddict) +
	       ZSTD_sizeof_DCtx(z->dctx);
}

void zframe_free(struct zframe *z)
{
	if (!z)
		return;
	ZSTD_freeCCtx(z->cctx);
	ZSTD_freeDCtx(z->dctx);
	ZSTD_freeCDict(z->cdict);
	ZSTD_freeDDict(z->ddict);
	free(z);
}

size_t zframe_bound(size_t n)
{
	return ZSTD_compressBound(n);
}

ssize_t zframe_pack(struct zframe *z, const void *in, size_t n, void *out, size_t cap)
{
	size_t k;

	if (cap < ZSTD_compressBound(n))
		return -ENOBUFS;
	if (!z->cdict) {
		z->cdict = ZSTD_createCDict(zframe_dict_v1_start, dict_len(), z->level);
		if (!z->cdict)
			return -ENOMEM;
	}
	k = ZSTD_compress_usingCDict(z->cctx, out, cap, in, n, z->cdict);
	if (ZSTD_isError(k))
		return -EIO;
	return k < n ? (ssize_t)k : 0;
}

ssize_t zframe_unpack(struct zframe *z, enum zframe_enc enc, const void *in, size_t n, void *out,
		      size_t cap)
{
	unsigned long long sz;
	size_t k;

	if (enc != ZFRAME_ENC_DICT1)
		return -EINVAL;
	if (!z->dctx && !(z->dctx = ZSTD_createDCtx()))
		return -ENOMEM;
	if (!z->ddict && !(z->ddict = ZSTD_createDDict(zframe_dict_v1_start, dict_len())))
		return -ENOMEM;
	/* the frame says its size (zframe_pack writes it): refuse more than cap before work */
	sz = ZSTD_getFrameContentSize(in, n);
	if (sz == ZSTD_CONTENTSIZE_ERROR || sz == ZSTD_CONTENTSIZE_UNKNOWN || sz > cap)
		return -EBADMSG;
	k = ZSTD_decompress_usingDDict(z->dctx, out, cap, in, n, z->ddict);
	if (ZSTD_isError(k) || k != sz)
		return -EBADMSG;
	return (ssize_t)k;
}

int zframe_body_pack(struct zframe *z, const void *in, size_t n, char **ret, size_t *ret_len)
{
	size_t cap = ZSTD_compressBound(n), k;
	char *out = malloc(cap);

	if (!out)
		return -ENOMEM;
	k = ZSTD_compressCCtx(z->cctx, out, cap, in, n, z->level);
	if (ZSTD_isError(k)) {
		free(out);
		return -EIO;
	}
	*ret = out;
	*ret_len = k;
	return 0;
}

int zframe_body_unpack(const void *in, size_t n, size_t max, char **ret, size_t *ret_len)
{
	ZSTD_DStream *ds = ZSTD_createDStream();
	ZSTD_inBuffer ib = {.src = in, .size = n, .pos = 0};
	size_t cap = MIN(max, MAX(n * 4, (size_t)4096)) + 1, k = 1;
	char *out = NULL;
	size_t len = 0;
	int r = 0;

	if (!ds)
		return -ENOMEM;
	if (n == 0) {
		r = -EBADMSG;
		goto out;
	}
	out = malloc(cap);
	if (!out) {
		r = -ENOMEM;
		goto out;
	}
	while (ib.pos < ib.size || k != 0) {
		ZSTD_outBuffer ob;

		if (len + 1 == cap) {
			size_t nc;
			char *nb;

			if (len >= max) {
				/* full: one more byte out means the body exceeds max */
				char probe;

				ob = (ZSTD_outBuffer){.dst = &probe, .size = 1, .pos = 0};
				k = ZSTD_decompressStream(ds, &ob, &ib);
				if (ZSTD_isError(k)) {
					r = -EBADMSG;
					goto out;
				}
				if (ob.pos > 0) {
					r = -E2BIG;
					goto out;
				}
				if (k == 0 && ib.pos == ib.size)
					break;
				if (ib.pos == ib.size) {
					r = -EBADMSG; /* cut short */
					goto out;
				}
				continue;
			}
			nc = MIN(max + 1, cap * 2);
			nb = realloc(out, nc);
			if (!nb) {
				r = -ENOMEM;
				goto out;
			}
			out = nb;
			cap = nc;
		}
		ob = (ZSTD_outBuffer){.dst = out + len, .size = cap - 1 - len, .pos = 0};
		k = ZSTD_decompressStream(ds, &ob, &ib);
		if (ZSTD_isError(k)) {
			r = -EBADMSG;
			goto out;
		}
		len += ob.pos;
		if (ob.pos == 0 && ib.pos == ib.size && k != 0) {
			r = -EBADMSG; /* cut short: the frame wants more input */
			goto out;
		}
	}
	out[len] = 0;
	*ret = out;
	*ret_len = len;
	out = NULL;
out:
	free(out);
	ZSTD_freeDStream(ds);
	return r;
}
