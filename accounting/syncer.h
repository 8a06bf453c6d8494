/* SPDX-License-Identifier: MIT */
/*
 * A helper thread that runs fdatasync(2) off an event loop. The loop submits a descriptor
 * (the syncer owns it from then on) and gets a generation number; the syncer's eventfd
 * becomes readable when a generation is done. Submissions made while a sync runs are folded
 * into the next one: only the newest descriptor of them is synced, so the caller must make
 * sure an older one needs no sync of its own by then (the spool syncs a segment itself before
 * it moves on to the next). The thread calls nothing but fdatasync, close, write and the
 * pthread primitives: no allocation, so a fork of the loop's process while it runs is safe.
 */
#pragma once

#include <stdint.h>

struct syncer;

int syncer_start(struct syncer **ret);
int syncer_fd(const struct syncer *s); /* eventfd: EPOLLIN when a generation is done */
/* Hands fd over to be synced; returns its generation (1, 2, ...). */
uint64_t syncer_submit(struct syncer *s, int fd);
/* After the eventfd fired (or any time): the newest generation synced. *err gets the first
 * failure (-errno) since the last call, else 0. Clears the eventfd. */
uint64_t syncer_done(struct syncer *s, int *err);
/* Newest generation submitted. */
uint64_t syncer_submitted(const struct syncer *s);
/* Waits for everything submitted, then stops the thread (s may be NULL). */
void syncer_stop(struct syncer *s);
