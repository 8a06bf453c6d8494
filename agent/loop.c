/* SPDX-License-Identifier: MIT */
/*
 * One epoll set and a table of handlers indexed by file descriptor. The epoll data of each
 * registration carries the fd and the generation of its table slot: an event read in the same
 * batch as a loop_del of its fd (or of a delete and a new registration of the same number) is
 * recognized as stale and dropped, so a handler never runs for an fd its owner gave up.
 */
#include "agent/loop.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define LOOP_BATCH 64

struct loop_slot {
	loop_fn *fn; /* NULL: not watched */
	void *data;
	uint32_t gen;
};

struct loop {
	int epfd;
	struct loop_slot *slots;
	size_t n_slots;
};

int loop_new(struct loop **ret)
{
	struct loop *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		int r = -errno;

		free(l);
		return r;
	}
	*ret = l;
	return 0;
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	close(l->epfd);
	free(l->slots);
	free(l);
}

static uint64_t slot_key(int fd, uint32_t gen)
{
	return (uint64_t)gen << 32 | (uint32_t)fd;
}

/* The slot of fd, the table grown to hold it; NULL when out of memory. */
static struct loop_slot *slot_get(struct loop *l, int fd)
{
	if ((size_t)fd >= l->n_slots) {
		size_t n = l->n_slots ? l->n_slots : 64;
		struct loop_slot *s;

		while (n <= (size_t)fd)
			n *= 2;
		s = realloc(l->slots, n * sizeof(*s));
		if (!s)
			return NULL;
		memset(s + l->n_slots, 0, (n - l->n_slots) * sizeof(*s));
		l->slots = s;
		l->n_slots = n;
	}
	return &l->slots[fd];
}

int loop_add(struct loop *l, int fd, uint32_t events, loop_fn *fn, void *data)
{
	struct epoll_event ev = {.events = events};
	struct loop_slot *s;

	if (fd < 0)
		return -EBADF;
	if (!fn)
		return -EINVAL;
	s = slot_get(l, fd);
	if (!s)
		return -ENOMEM;
	/* A slot still set belongs to an fd closed without loop_del (epoll dropped it with
	 * the close): the kernel's answer decides, and a new registration takes the slot. */
	ev.data.u64 = slot_key(fd, s->gen + 1);
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	s->gen++;
	s->fn = fn;
	s->data = data;
	return 0;
}

int loop_mod(struct loop *l, int fd, uint32_t events)
{
	struct epoll_event ev = {.events = events};

	if (fd < 0 || (size_t)fd >= l->n_slots || !l->slots[fd].fn)
		return -ENOENT;
	ev.data.u64 = slot_key(fd, l->slots[fd].gen);
	if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
		return -errno;
	return 0;
}

void loop_del(struct loop *l, int fd)
{
	if (!l || fd < 0 || (size_t)fd >= l->n_slots || !l->slots[fd].fn)
		return;
	(void)epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
	l->slots[fd].fn = NULL;
	l->slots[fd].data = NULL;
	l->slots[fd].gen++;
}

int loop_run_once(struct loop *l, int timeout_ms)
{
	struct epoll_event evs[LOOP_BATCH];
	int n, ran = 0;

	n = epoll_wait(l->epfd, evs, LOOP_BATCH, timeout_ms);
	if (n < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		int fd = (int)(uint32_t)evs[i].data.u64;
		uint32_t gen = (uint32_t)(evs[i].data.u64 >> 32);
		struct loop_slot *s;

		if ((size_t)fd >= l->n_slots)
			continue;
		s = &l->slots[fd];
		if (!s->fn || s->gen != gen)
			continue; /* deleted (or replaced) by an earlier handler of this batch */
		s->fn(s->data, fd, evs[i].events);
		ran++;
	}
	return ran;
}
