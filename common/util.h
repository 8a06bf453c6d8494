/* SPDX-License-Identifier: MIT */
/* Checked parsing, whole-file IO and time helpers. All return 0 or a negative errno. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* "123", "64M", "2G", "1.5GiB", "512k" (binary multiples, case-insensitive) -> bytes.
 * "max"/"infinity" are not accepted here; callers handle those. -EINVAL, -ERANGE (from 2^63
 * bytes up: beyond a JSON integer). */
int parse_size(const char *s, uint64_t *ret);
/* Strict unsigned decimal, whole string. */
int parse_u64(const char *s, uint64_t *ret);
int parse_u32(const char *s, uint32_t *ret);
int parse_int(const char *s, int *ret);
/* Finite, non-negative decimal number ("0.5", "2"). */
int parse_double(const char *s, double *ret);
/* Seconds, optionally fractional, or with suffix s/m/h/d ("90", "1.5", "2m", "1h") -> ns. */
int parse_duration_ns(const char *s, uint64_t *ret);
/* "yes/no/true/false/1/0/on/off" */
int parse_bool(const char *s, bool *ret);
/* Signal by name ("TERM", "SIGKILL") or number. */
int parse_signal(const char *s, int *ret);

/* Read a whole file (at most max bytes; -EFBIG beyond), NUL-terminated. */
int read_file(const char *path, size_t max, char **ret, size_t *ret_len);
int read_file_at(int dirfd, const char *name, size_t max, char **ret, size_t *ret_len);
/* Read a file holding one unsigned integer (trailing newline allowed). */
int read_u64_file_at(int dirfd, const char *name, uint64_t *ret);
/* Write a string to an existing file (cgroupfs style: one write). */
int write_file_at(int dirfd, const char *name, const char *s);
/* Write tmp + fsync + rename + fsync(dir). */
int write_file_atomic(const char *path, const void *buf, size_t len, mode_t mode);
/*
 * Write tmp + rename, no fsync: atomic against a crash of the process (readers see the old or
 * the new content), not against power loss. For state that is void after a reboot anyway.
 */
int write_file_replace(const char *path, const void *buf, size_t len, mode_t mode);
/* mkdir -p with mode. */
int mkdir_p(const char *path, mode_t mode);

/* A byte buffer that grows by doubling (from 4 KiB) up to max bytes (SIZE_MAX: no bound). */
struct growbuf {
	char *p;
	size_t len, cap;
	bool failed; /* out of memory or past max: sticky, every later call does nothing */
};
/* n more bytes at the end, for the caller to fill; NULL once failed. free(b->p) after. */
char *growbuf_room(struct growbuf *b, size_t n, size_t max);

uint64_t now_ns(int clockid);
/* RFC 3339 UTC with microseconds: "2026-12-02T15:04:05.123456Z". buf >= 32. */
void format_rfc3339_us(uint64_t realtime_ns, char *buf, size_t len);
#define RFC3339_MAX 32
/* Parse what format_rfc3339_us writes (also accepts no fraction and +00:00). */
int parse_rfc3339(const char *s, uint64_t *ret_realtime_ns);

/* Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat). */
int proc_start_time(pid_t pid, uint64_t *ret);
/* /proc/sys/kernel/random/boot_id, 36 chars + NUL. */
int read_boot_id(char buf[37]);

/* s as a JSON string literal: quotes, backslash and control characters escaped (UTF-8
 * passes through). */
void fputs_json_string(FILE *f, const char *s);
