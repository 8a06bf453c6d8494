/* SPDX-License-Identifier: MIT */
/*
 * Record decoder cost per record, side by side in one run (interleaved rounds, medians):
 *   decode   acct_record_decode (yajl events -> arena tree -> validated record)
 *   jansson  json_loadb + json_decref of the same line (the tree the decoder used to build
 *            before validation even started: the baseline)
 *   events   yajl parse with empty callbacks (the floor: lexing alone)
 *   helper_decode_bench FILE.ndjson [ROUNDS]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <yajl/yajl_parse.h>

#include "accounting/record.h"
#include "common/macro.h"
#include "tests/bench/bench_stats.h"

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cb_none(void *ud)
{
	(void)ud;
	return 1;
}

static int cb_bool(void *ud, int b)
{
	(void)ud;
	(void)b;
	return 1;
}

static int cb_text(void *ud, const char *s, size_t l)
{
	(void)ud;
	(void)s;
	(void)l;
	return 1;
}

static int cb_str(void *ud, const unsigned char *s, size_t l)
{
	(void)ud;
	(void)s;
	(void)l;
	return 1;
}

static const yajl_callbacks empty = {
    .yajl_null = cb_none,
    .yajl_boolean = cb_bool,
    .yajl_number = cb_text,
    .yajl_string = cb_str,
    .yajl_start_map = cb_none,
    .yajl_map_key = cb_str,
    .yajl_end_map = cb_none,
    .yajl_start_array = cb_none,
    .yajl_end_array = cb_none,
};

int main(int argc, char **argv)
{
	char **lines = NULL, *buf = NULL;
	size_t *lens = NULL, n = 0, cap = 0, len = 0, blen = 0;
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	double t_dec[64], t_jan[64], t_ev[64];
	FILE *f;

	if (argc < 2 || rounds < 1 || rounds > 64) {
		fprintf(stderr, "usage: helper_decode_bench FILE.ndjson [ROUNDS<=64]\n");
		return 2;
	}
	f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	while (getline(&buf, &blen, f) > 0) {
		len = strcspn(buf, "\n");
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			lines = realloc(lines, cap * sizeof(*lines));
			lens = realloc(lens, cap * sizeof(*lens));
			if (!lines || !lens)
				return 1;
		}
		lines[n] = strndup(buf, len);
		lens[n++] = len;
	}
	fclose(f);
	free(buf);
	if (n == 0) {
		fprintf(stderr, "helper_decode_bench: no records in %s\n", argv[1]);
		return 1;
	}
	for (int r = 0; r < rounds; r++) {
		double t0 = now();

		for (size_t i = 0; i < n; i++) {
			struct acct_record rec;
			char err[256];

			if (acct_record_decode(lines[i], lens[i], &rec, err, sizeof(err)) < 0) {
				fprintf(stderr, "record %zu: %s\n", i, err);
				return 1;
			}
			acct_record_clear(&rec);
		}
		t_dec[r] = (now() - t0) / (double)n * 1e6;
		t0 = now();
		for (size_t i = 0; i < n; i++) {
			json_error_t je;

			json_decref(json_loadb(lines[i], lens[i], JSON_REJECT_DUPLICATES, &je));
		}
		t_jan[r] = (now() - t0) / (double)n * 1e6;
		t0 = now();
		for (size_t i = 0; i < n; i++) {
			yajl_handle h = yajl_alloc(&empty, NULL, NULL);

			if (!h ||
			    yajl_parse(h, (const unsigned char *)lines[i], lens[i]) !=
				yajl_status_ok ||
			    yajl_complete_parse(h) != yajl_status_ok)
				return 1;
			yajl_free(h);
		}
		t_ev[r] = (now() - t0) / (double)n * 1e6;
	}
	qsort(t_dec, (size_t)rounds, sizeof(double), bench_cmp_double);
	qsort(t_jan, (size_t)rounds, sizeof(double), bench_cmp_double);
	qsort(t_ev, (size_t)rounds, sizeof(double), bench_cmp_double);
	printf("decode: %zu records (%.0f bytes each), %d rounds, median us/record\n", n,
	       (double)len, rounds);
	printf("%-34s %10s %10s\n", "", "us/record", "vs jansson");
	printf("%-34s %10.2f %10.2f\n", "acct_record_decode (full)", t_dec[rounds / 2],
	       t_dec[rounds / 2] / t_jan[rounds / 2]);
	printf("%-34s %10.2f %10.2f\n", "jansson json_loadb (tree only)", t_jan[rounds / 2], 1.0);
	printf("%-34s %10.2f %10.2f\n", "yajl events only", t_ev[rounds / 2],
	       t_ev[rounds / 2] / t_jan[rounds / 2]);
	for (size_t i = 0; i < n; i++)
		free(lines[i]);
	free(lines);
	free(lens);
	return 0;
}
