/* SPDX-License-Identifier: MIT */
/* Checked parsing of numbers, sizes, durations, booleans and signals: the whole string, or
 * -EINVAL (-ERANGE when out of range). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

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
