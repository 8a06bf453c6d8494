/* SPDX-License-Identifier: MIT */
/*
 * The rate limit of the collector's log of refused requests (401/403), per client: each client
 * (the token's name, or the peer's address when the token is unknown) gets at most
 * REFUSE_LOG_PER_CLIENT lines per window of REFUSE_LOG_WINDOW_S seconds, so that one noisy
 * node does not hide the others' refusals; all clients together at most REFUSE_LOG_ALL lines
 * per window (a flood from many addresses stays bounded). The unlogged refusals are counted
 * and said later: a client's at its first refusal of a later window, or when its entry is
 * reused; the ones the overall cap held back at the next window. Memory: a fixed table of
 * REFUSE_LOG_CLIENTS clients (the one seen least recently is reused). Thread-safe.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REFUSE_LOG_WINDOW_S   10
#define REFUSE_LOG_PER_CLIENT 5
#define REFUSE_LOG_ALL	      50
#define REFUSE_LOG_CLIENTS    64
#define REFUSE_LOG_KEY_MAX    80

struct refuse_log_client {
	char key[REFUSE_LOG_KEY_MAX]; /* "" = free */
	uint64_t window;	      /* of its last refusal */
	unsigned logged;	      /* lines in that window */
	uint64_t unlogged;	      /* refusals not logged, not said yet */
};

struct refuse_log {
	pthread_mutex_t lock;
	struct refuse_log_client clients[REFUSE_LOG_CLIENTS];
	uint64_t window; /* of the overall count */
	unsigned logged; /* lines in it, all clients */
	uint64_t held;	 /* refusals the overall cap kept from the log, not said yet */
};

/* Refusals not logged, to be said in a line of their own. key "" for the overall cap's. */
struct refuse_log_missed {
	char key[REFUSE_LOG_KEY_MAX];
	uint64_t count;
};
#define REFUSE_LOG_MISSED_MAX 3

void refuse_log_init(struct refuse_log *l);
void refuse_log_fini(struct refuse_log *l);
/*
 * A refusal of client key (truncated to REFUSE_LOG_KEY_MAX - 1 bytes) at now_s (seconds of
 * any clock that does not go back): whether to log it. missed[0..*n_missed) (at most
 * REFUSE_LOG_MISSED_MAX) are counts of earlier refusals not logged, to be said first.
 */
bool refuse_log_allow(struct refuse_log *l, const char *key, uint64_t now_s,
		      struct refuse_log_missed *missed, size_t *n_missed);
