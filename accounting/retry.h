/* SPDX-License-Identifier: MIT */
/*
 * When to try an upload again: the one rule of the agent's uploader (accounting/uploader.c)
 * and of the fleet benchmark's simulated nodes (tests/bench/helper_fleet.c).
 *
 * After a failed try the ceiling doubles from min_ms up to max_ms. Without a Retry-After from
 * the collector the delay is uniform in [0, ceiling] ("full jitter"). With one (a 503 from a
 * collector that sheds load, or whose database is down) the node waits at least that long,
 * plus a jitter uniform in [0, max(Retry-After, ceiling)]: ten thousand nodes told "come back
 * in 5 s" come back spread over the 5 s after that, not all at once, and a collector that
 * answers 503 again and again spreads them wider each time. A Retry-After beyond max_ms is
 * cut to max_ms (a misconfigured collector cannot park the fleet for a day).
 */
#pragma once

#include <stdint.h>

struct acct_retry {
	uint64_t ceiling_ms; /* the exponential ceiling of this try */
	uint64_t delay_ms;   /* how long to wait before the next try */
};

/* attempt: tries that failed before this one (0 = the first failure). rnd: a uniformly
 * distributed 64-bit number (the caller's PRNG). retry_after_ms: 0 = none. */
struct acct_retry acct_retry_delay(unsigned attempt, uint64_t min_ms, uint64_t max_ms,
				   uint64_t retry_after_ms, uint64_t rnd);

/* The value of a Retry-After header in seconds: delay-seconds or an HTTP date; now: the
 * current time (s since the epoch). -EINVAL if neither; a date in the past gives 0. */
int acct_retry_after_parse(const char *value, int64_t now, uint64_t *ret_s);
