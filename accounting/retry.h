/* SPDX-License-Identifier: MIT */
/*
 * When to try an upload again: the one rule of the agent's uploader (accounting/uploader.c)
 * and of the fleet benchmark's simulated nodes (tests/bench/helper_fleet.c).
 *
 * Without a Retry-After from the collector (no connection, no answer, a 5xx without one):
 * after the attempt-th failure in a row the ceiling is min_ms doubled attempt times, at most
 * max_ms, and the delay is uniform in [0, ceiling] ("full jitter").
 * With one (a 503 from a collector that sheds load, or whose database is down): the node
 * waits at least that long, plus a jitter uniform in [0, ceiling], where the ceiling is the
 * Retry-After doubled attempt times (attempt: answers with a Retry-After in a row before
 * this one), at most max_ms. Ten thousand nodes told "come back in 5 s" come back spread over
 * the 5 s after that, not all at once, and a collector that answers 503 again spreads them
 * wider each time; failures without a Retry-After (an outage) do not widen it, so a fleet
 * that waited through an outage is not sent away for minutes by its first 503. A Retry-After
 * beyond max_ms is cut to max_ms (a misconfigured collector cannot park the fleet for a day).
 */
#pragma once

#include <stdint.h>

struct acct_retry {
	uint64_t ceiling_ms; /* the exponential ceiling of this try */
	uint64_t delay_ms;   /* how long to wait before the next try */
};

/* attempt: failures of the same kind (with / without a Retry-After) in a row before this one,
 * 0 = the first. rnd: a uniformly distributed 64-bit number (the caller's PRNG).
 * retry_after_ms: 0 = none. */
struct acct_retry acct_retry_delay(unsigned attempt, uint64_t min_ms, uint64_t max_ms,
				   uint64_t retry_after_ms, uint64_t rnd);

/* The value of a Retry-After header in seconds: delay-seconds or an HTTP date; now: the
 * current time (s since the epoch). -EINVAL if neither; a date in the past gives 0. */
int acct_retry_after_parse(const char *value, int64_t now, uint64_t *ret_s);
