/* SPDX-License-Identifier: MIT */
#include "accounting/syncer.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct syncer {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake, idle;
	int efd;
	int fd;		   /* newest descriptor submitted and not taken, or -1 */
	uint64_t want;	   /* newest generation submitted */
	uint64_t done;	   /* newest generation synced */
	int err;	   /* first failure not yet reported */
	bool stop, active; /* active: a sync is running */
};

static void *run(void *arg)
{
	struct syncer *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		uint64_t gen, one = 1;
		int fd, r;

		while (s->fd < 0 && !s->stop)
			pthread_cond_wait(&s->wake, &s->lock);
		if (s->fd < 0)
			break; /* stopping, and nothing left */
		fd = s->fd;
		gen = s->want;
		s->fd = -1;
		s->active = true;
		pthread_mutex_unlock(&s->lock);

		r = fdatasync(fd) < 0 ? -errno : 0;
		close(fd);

		pthread_mutex_lock(&s->lock);
		s->active = false;
		s->done = gen;
		if (r < 0 && !s->err)
			s->err = r;
		(void)!write(s->efd, &one, sizeof(one));
		pthread_cond_broadcast(&s->idle);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int syncer_start(struct syncer **ret)
{
	struct syncer *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->fd = -1;
	s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->efd < 0) {
		r = -errno;
		free(s);
		return r;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	pthread_cond_init(&s->idle, NULL);
	r = -pthread_create(&s->thread, NULL, run, s);
	if (r < 0) {
		close(s->efd);
		pthread_mutex_destroy(&s->lock);
		pthread_cond_destroy(&s->wake);
		pthread_cond_destroy(&s->idle);
		free(s);
		return r;
	}
	*ret = s;
	return 0;
}

int syncer_fd(const struct syncer *s)
{
	return s->efd;
}

uint64_t syncer_submit(struct syncer *s, int fd)
{
	uint64_t gen;

	pthread_mutex_lock(&s->lock);
	if (s->fd >= 0)
		close(s->fd); /* superseded: the newer descriptor's sync covers the caller */
	s->fd = fd;
	gen = ++s->want;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
	return gen;
}

uint64_t syncer_done(struct syncer *s, int *err)
{
	uint64_t gen, n;

	(void)!read(s->efd, &n, sizeof(n));
	pthread_mutex_lock(&s->lock);
	gen = s->done;
	*err = s->err;
	s->err = 0;
	pthread_mutex_unlock(&s->lock);
	return gen;
}

uint64_t syncer_submitted(const struct syncer *s)
{
	return s->want; /* written by the submitting thread only */
}

void syncer_stop(struct syncer *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	while (s->fd >= 0 || s->active)
		pthread_cond_wait(&s->idle, &s->lock);
	s->stop = true;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	close(s->efd);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->wake);
	pthread_cond_destroy(&s->idle);
	free(s);
}
