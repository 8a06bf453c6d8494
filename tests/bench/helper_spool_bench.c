/* SPDX-License-Identifier: MIT */
/*
 * helper_spool_bench DIR BATCH RECORDS SIZE REPEAT
 * Appends RECORDS records of SIZE bytes to a fresh spool in DIR, BATCH per
 * spool_append_many() (one fdatasync per batch), and, interleaved in the same run, writes the
 * same framed bytes with plain write() + fdatasync() per batch to a file in DIR (baseline),
 * batch by batch alternating with the spool.
 * Prints the median over REPEAT rounds of each:
 *   batch=B spool_us_per_rec=X base_us_per_rec=Y ratio=X/Y
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accounting/spool.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/parse.h"
#include "tests/bench/bench_stats.h"

#define FRAME 24 /* spool entry header, so the baseline writes the same number of bytes */

/*
 * One round: spool batches and baseline batches alternate, each timed on its own, so both
 * see the same disk conditions (the machine is shared; fsync latency drifts).
 */
static void run_round(const char *dir, const char *path, size_t batch, size_t records,
		      const char *rec, size_t size, double *ret_spool, double *ret_base)
{
	struct spool_opts o = {.dir = dir,
			       .max_bytes = 1ULL << 34,
			       .compress = getenv("SPOOL_BENCH_COMPRESS") &&
					   strcmp(getenv("SPOOL_BENCH_COMPRESS"), "1") == 0};
	const void **data = calloc(batch, sizeof(*data));
	size_t *lens = calloc(batch, sizeof(*lens));
	size_t blen = batch * (FRAME + size);
	char *buf = malloc(blen);
	struct spool *s = NULL;
	uint64_t ts = 0, tb = 0, t0;
	char cmd[8300];
	int r, fd;

	if (!data || !lens || !buf)
		exit(1);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		exit(1);
	r = spool_open(&o, &s);
	if (r < 0) {
		fprintf(stderr, "spool_open %s: %s\n", dir, strerror(-r));
		exit(1);
	}
	for (size_t i = 0; i < batch; i++) {
		data[i] = rec;
		lens[i] = size;
		memset(buf + i * (FRAME + size), 0, FRAME);
		memcpy(buf + i * (FRAME + size) + FRAME, rec, size);
	}
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0) {
		perror(path);
		exit(1);
	}
	for (size_t done = 0; done < records; done += batch) {
		size_t k = MIN(batch, records - done);

		t0 = now_ns(CLOCK_MONOTONIC);
		r = spool_append_many(s, data, lens, k, SPOOL_PRIO_KEEP);
		if (r < 0) {
			fprintf(stderr, "append: %s\n", strerror(-r));
			exit(1);
		}
		ts += now_ns(CLOCK_MONOTONIC) - t0;
		t0 = now_ns(CLOCK_MONOTONIC);
		if (write(fd, buf, k * (FRAME + size)) != (ssize_t)(k * (FRAME + size)) ||
		    fdatasync(fd) < 0) {
			perror("write");
			exit(1);
		}
		tb += now_ns(CLOCK_MONOTONIC) - t0;
	}
	close(fd);
	unlink(path);
	spool_close(s);
	free(data);
	free(lens);
	free(buf);
	*ret_spool = (double)ts / 1000.0 / (double)records;
	*ret_base = (double)tb / 1000.0 / (double)records;
}

int main(int argc, char **argv)
{
	uint64_t batch, records, size, repeat;
	char sdir[4096], bpath[4096];
	double *sp, *bp;
	char *rec;

	if (argc != 6 || parse_u64(argv[2], &batch) < 0 || parse_u64(argv[3], &records) < 0 ||
	    parse_u64(argv[4], &size) < 0 || parse_u64(argv[5], &repeat) < 0 || !batch ||
	    !records || !repeat || size > SPOOL_ENTRY_MAX || repeat > 101) {
		fprintf(stderr, "usage: %s DIR BATCH RECORDS SIZE REPEAT\n", argv[0]);
		return 2;
	}
	if (mkdir_p(argv[1], 0700) < 0) {
		perror(argv[1]);
		return 1;
	}
	snprintf(sdir, sizeof(sdir), "%s/spool", argv[1]);
	snprintf(bpath, sizeof(bpath), "%s/baseline.log", argv[1]);
	rec = malloc(size);
	sp = calloc(repeat, sizeof(*sp));
	bp = calloc(repeat, sizeof(*bp));
	if (!rec || !sp || !bp)
		return 1;
	memset(rec, 'r', size);
	/* SPOOL_BENCH_RECORD=FILE: the record is that file's bytes, repeated or cut to size */
	if (getenv("SPOOL_BENCH_RECORD")) {
		FILE *f = fopen(getenv("SPOOL_BENCH_RECORD"), "r");
		size_t k;

		if (!f) {
			perror(getenv("SPOOL_BENCH_RECORD"));
			return 1;
		}
		k = fread(rec, 1, size, f);
		fclose(f);
		for (size_t i = k; k && i < size; i++)
			rec[i] = rec[i % k];
	}
	for (uint64_t i = 0; i < repeat; i++)
		run_round(sdir, bpath, batch, records, rec, size, &sp[i], &bp[i]);
	qsort(sp, repeat, sizeof(*sp), bench_cmp_double);
	qsort(bp, repeat, sizeof(*bp), bench_cmp_double);
	printf("batch=%llu records=%llu size=%llu spool_us_per_rec=%.2f base_us_per_rec=%.2f "
	       "ratio=%.3f\n",
	       (unsigned long long)batch, (unsigned long long)records, (unsigned long long)size,
	       sp[repeat / 2], bp[repeat / 2], sp[repeat / 2] / bp[repeat / 2]);
	free(rec);
	free(sp);
	free(bp);
	return 0;
}
