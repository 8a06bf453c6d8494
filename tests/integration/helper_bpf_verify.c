/* SPDX-License-Identifier: MIT */
/*
 * helper_bpf_verify [--max-insns N] [--max-ms MS] [--prog NAME] [OBJECT.bpf.o]: loads each
 * program of a BPF object on its own (the others not loaded, every map created) and prints
 * what the running kernel's verifier spent on it:
 *   NAME insns=I verified_insns=V states=S peak_states=P verify_us=U load_ms=L
 * (insns: the program's size; verified_insns: instructions the verifier processed,
 * bpf_prog_info.verified_insns; states, peak_states, verify_us: the verifier's own statistics,
 * log level 4; load_ms: the wall time of the load). Without OBJECT: the audit programs as
 * corrald loads them (the object embedded in its skeleton). Exits 1 when a program does not
 * load, or verifies more than N instructions, or takes more than MS milliseconds to load;
 * 2 on a usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/audit_types.h"
#include "audit.skel.h"

#define LOG_SIZE (64 * 1024)

struct stats {
	uint64_t states, peak_states, verify_us;
};

static char log_buf[LOG_SIZE];

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return level == LIBBPF_WARN ? vfprintf(stderr, fmt, ap) : 0;
}
#pragma GCC diagnostic pop

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* "... total_states S peak_states P ..." and "verification time U usec" (log level 4). */
static void parse_stats(const char *log, struct stats *st)
{
	const char *p;

	memset(st, 0, sizeof(*st));
	p = strstr(log, "total_states ");
	if (p)
		st->states = strtoull(p + strlen("total_states "), NULL, 10);
	p = strstr(log, "peak_states ");
	if (p)
		st->peak_states = strtoull(p + strlen("peak_states "), NULL, 10);
	p = strstr(log, "verification time ");
	if (p)
		st->verify_us = strtoull(p + strlen("verification time "), NULL, 10);
}

static struct bpf_object *open_object(const char *path)
{
	size_t size;
	const void *elf;

	if (path)
		return bpf_object__open_file(path, NULL);
	elf = audit_bpf__elf_bytes(&size);
	return bpf_object__open_mem(elf, size, NULL);
}

/* A refused program (not for its size: that would take as long again): the verifier's
 * reason, the last lines of its full log. */
static void print_log_tail(const char *path, int idx)
{
	static char full[4 << 20];
	struct bpf_program *p, *target = NULL;
	struct bpf_object *obj = open_object(path);
	const char *tail;
	int i = 0, lines = 0;

	if (!obj)
		return;
	bpf_object__for_each_program(p, obj)
	{
		bool mine = i++ == idx;

		bpf_program__set_autoload(p, mine);
		if (mine)
			target = p;
	}
	full[0] = '\0';
	if (target) {
		bpf_program__set_log_level(target, 1);
		bpf_program__set_log_buf(target, full, sizeof(full));
		bpf_object__load(obj);
	}
	bpf_object__close(obj);
	tail = full + strlen(full);
	while (tail > full && lines <= 40)
		if (*--tail == '\n')
			lines++;
	printf("--- verifier log, last lines:\n%s\n", tail);
}

/*
 * Loads program number idx of the object alone and prints its line: 0 within the limits, -1
 * not, 1 past the last program, -2 the object did not open.
 */
static int check_one(const char *path, int idx, const char *only, uint64_t max_insns, double max_ms,
		     int *seen)
{
	struct bpf_prog_info info = {};
	uint32_t info_len = sizeof(info);
	struct bpf_program *p, *target = NULL;
	struct bpf_object *obj;
	struct stats st;
	char name[128];
	double t0, ms;
	int i = 0, r, fails = 0;

	obj = open_object(path);
	if (!obj) {
		fprintf(stderr, "cannot open %s: %s\n", path ? path : "the audit object",
			strerror(errno));
		return -2;
	}
	bpf_object__for_each_program(p, obj)
	{
		bool mine = i++ == idx;

		bpf_program__set_autoload(p, mine);
		if (mine)
			target = p;
	}
	if (!target) {
		bpf_object__close(obj);
		return 1; /* past the last program */
	}
	snprintf(name, sizeof(name), "%s", bpf_program__name(target));
	if (only && strcmp(only, name) != 0) {
		bpf_object__close(obj);
		return 0;
	}
	(*seen)++;
	log_buf[0] = '\0';
	bpf_program__set_log_level(target, 4);
	bpf_program__set_log_buf(target, log_buf, sizeof(log_buf));
	t0 = now_ms();
	r = bpf_object__load(obj);
	ms = now_ms() - t0;
	parse_stats(log_buf, &st);
	if (r) {
		printf("%s FAIL load: %s (after %.0f ms; states=%" PRIu64 " verify_us=%" PRIu64
		       ")\n",
		       name, strerror(-r), ms, st.states, st.verify_us);
		bpf_object__close(obj);
		if (r != -E2BIG)
			print_log_tail(path, idx);
		return -1;
	}
	r = bpf_obj_get_info_by_fd(bpf_program__fd(target), &info, &info_len);
	if (r) {
		printf("%s FAIL bpf_obj_get_info_by_fd: %s\n", name, strerror(errno));
		bpf_object__close(obj);
		return -1;
	}
	printf("%s insns=%zu verified_insns=%u states=%" PRIu64 " peak_states=%" PRIu64
	       " verify_us=%" PRIu64 " load_ms=%.1f\n",
	       name, bpf_program__insn_cnt(target), info.verified_insns, st.states, st.peak_states,
	       st.verify_us, ms);
	if (max_insns && info.verified_insns > max_insns) {
		printf("%s FAIL verified_insns %u > %" PRIu64 "\n", name, info.verified_insns,
		       max_insns);
		fails++;
	}
	if (max_ms > 0 && ms > max_ms) {
		printf("%s FAIL load took %.0f ms > %.0f ms\n", name, ms, max_ms);
		fails++;
	}
	bpf_object__close(obj);
	return fails ? -1 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: helper_bpf_verify [--max-insns N] [--max-ms MS] [--prog NAME] "
			"[OBJECT.bpf.o]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t max_insns = 0;
	double max_ms = 0;
	const char *path = NULL, *only = NULL;
	int failed = 0, seen = 0;

	for (int i = 1; i < argc; i++) {
		char *end;

		if (strcmp(argv[i], "--max-insns") == 0 && i + 1 < argc) {
			errno = 0;
			max_insns = strtoull(argv[++i], &end, 10);
			if (errno || *end || !max_insns)
				usage();
		} else if (strcmp(argv[i], "--max-ms") == 0 && i + 1 < argc) {
			max_ms = strtod(argv[++i], &end);
			if (*end || max_ms <= 0)
				usage();
		} else if (strcmp(argv[i], "--prog") == 0 && i + 1 < argc) {
			only = argv[++i];
		} else if (argv[i][0] == '-' || path) {
			usage();
		} else {
			path = argv[i];
		}
	}
	libbpf_set_print(quiet_print);
	for (int idx = 0;; idx++) {
		int r = check_one(path, idx, only, max_insns, max_ms, &seen);

		if (r > 0)
			break;
		if (r == -2) /* the object itself did not open */
			return 1;
		if (r < 0)
			failed++;
	}
	if (only && !seen) {
		fprintf(stderr, "no program named %s\n", only);
		return 2;
	}
	printf("%d programs, %d over the limits or not loaded\n", seen, failed);
	return failed ? 1 : 0;
}
