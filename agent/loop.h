/* SPDX-License-Identifier: MIT */
/*
 * The agent's event loop: one epoll set, a handler per file descriptor (in the manner of
 * redis' ae.c). Each part of the agent registers its own descriptors with the function that
 * handles them; the loop knows nothing of what they are.
 */
#pragma once

#include <stdint.h>

struct loop;

/* Called with the data given to loop_add and the epoll events that fired (EPOLLIN, ...). */
typedef void loop_fn(void *data, int fd, uint32_t events);

int loop_new(struct loop **ret);
/* Closes the epoll set, not the registered descriptors. NULL is a no-op. */
void loop_free(struct loop *l);
/*
 * Watch fd for events (EPOLLIN, EPOLLOUT, ...): fn(data, fd, events) runs when one fires.
 * -EBADF for a negative fd, -EEXIST if fd is watched already, else epoll_ctl's error.
 */
int loop_add(struct loop *l, int fd, uint32_t events, loop_fn *fn, void *data);
/* Change the events a watched fd waits for (-ENOENT if it is not watched). */
int loop_mod(struct loop *l, int fd, uint32_t events);
/*
 * Stop watching fd (before closing it). An event of fd already read by the current
 * loop_run_once and not yet dispatched is dropped. A negative or unwatched fd, or a NULL loop,
 * is a no-op.
 */
void loop_del(struct loop *l, int fd);
/*
 * Wait up to timeout_ms (-1: forever, 0: poll) and run the handlers of the events that
 * fired. Returns how many ran, or -errno (-EINTR when a signal interrupted the wait).
 */
int loop_run_once(struct loop *l, int timeout_ms);
