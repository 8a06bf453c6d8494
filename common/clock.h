/* SPDX-License-Identifier: MIT */
/* Clock reads and RFC 3339 UTC timestamps. */
#pragma once

#include <stddef.h>
#include <stdint.h>

uint64_t now_ns(int clockid);
/* RFC 3339 UTC with microseconds: "2026-12-02T15:04:05.123456Z". buf >= 32. */
void format_rfc3339_us(uint64_t realtime_ns, char *buf, size_t len);
#define RFC3339_MAX 32
/* Parse what format_rfc3339_us writes (also accepts no fraction and +00:00). */
int parse_rfc3339(const char *s, uint64_t *ret_realtime_ns);
