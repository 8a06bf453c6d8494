/* SPDX-License-Identifier: MIT */
/* The agent's event loop (agent/loop.c): dispatch by fd, mod, del and stale events. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/loop.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

struct probe {
	struct loop *l;
	int fd;
	int calls;
	uint32_t events;
	/* on a call: stop watching (and close) these fds */
	int del_fd[2];
	/* on a call: after the deletion, put this pipe's read end on the number of del_fd[1] */
	int reuse_src;
	struct probe *reuse_with;
};

static void on_event(void *data, int fd, uint32_t events)
{
	struct probe *p = data;

	assert_int_equal(fd, p->fd);
	p->calls++;
	p->events |= events;
	for (int i = 0; i < 2; i++)
		if (p->del_fd[i] >= 0) {
			loop_del(p->l, p->del_fd[i]);
			if (p->reuse_src >= 0 && i == 1) {
				assert_int_equal(dup2(p->reuse_src, p->del_fd[i]), p->del_fd[i]);
				assert_int_equal(
				    loop_add(p->l, p->del_fd[i], EPOLLIN, on_event, p->reuse_with),
				    0);
			}
			p->del_fd[i] = -1;
		}
}

static void probe_init(struct probe *p, struct loop *l, int fd)
{
	memset(p, 0, sizeof(*p));
	p->l = l;
	p->fd = fd;
	p->del_fd[0] = p->del_fd[1] = -1;
	p->reuse_src = -1;
}

static void make_pipe(int p[2])
{
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
}

static void test_dispatch_by_fd(void **state)
{
	struct loop *l;
	struct probe a, b;
	int pa[2], pb[2];

	assert_int_equal(loop_new(&l), 0);
	make_pipe(pa);
	make_pipe(pb);
	probe_init(&a, l, pa[0]);
	probe_init(&b, l, pb[0]);
	assert_int_equal(loop_add(l, pa[0], EPOLLIN, on_event, &a), 0);
	assert_int_equal(loop_add(l, pb[0], EPOLLIN, on_event, &b), 0);
	/* nothing ready: a poll runs nothing */
	assert_int_equal(loop_run_once(l, 0), 0);
	assert_int_equal(write(pb[1], "x", 1), 1);
	assert_int_equal(loop_run_once(l, 1000), 1);
	assert_int_equal(a.calls, 0);
	assert_int_equal(b.calls, 1);
	assert_true(b.events & EPOLLIN);
	/* level-triggered: still readable, runs again */
	assert_int_equal(loop_run_once(l, 0), 1);
	assert_int_equal(b.calls, 2);
	/* errors */
	assert_int_equal(loop_add(l, pa[0], EPOLLIN, on_event, &a), -EEXIST);
	assert_int_equal(loop_add(l, -1, EPOLLIN, on_event, &a), -EBADF);
	assert_int_equal(loop_add(l, pa[0] + 1000, EPOLLIN, on_event, &a), -EBADF);
	assert_int_equal(loop_mod(l, pa[1], EPOLLIN), -ENOENT);
	loop_del(l, -1);
	loop_del(l, pa[1]); /* never watched: nothing */
	loop_del(NULL, pa[0]);
	loop_free(l);
	for (int i = 0; i < 2; i++) {
		close(pa[i]);
		close(pb[i]);
	}
}

static void test_mod_and_del(void **state)
{
	struct loop *l;
	struct probe w;
	int p[2];

	assert_int_equal(loop_new(&l), 0);
	make_pipe(p);
	/* the write end is writable at once */
	probe_init(&w, l, p[1]);
	assert_int_equal(loop_add(l, p[1], 0, on_event, &w), 0);
	assert_int_equal(loop_run_once(l, 0), 0);
	assert_int_equal(loop_mod(l, p[1], EPOLLOUT), 0);
	assert_int_equal(loop_run_once(l, 0), 1);
	assert_true(w.events & EPOLLOUT);
	assert_int_equal(loop_mod(l, p[1], 0), 0);
	assert_int_equal(loop_run_once(l, 0), 0);
	assert_int_equal(loop_mod(l, p[1], EPOLLOUT), 0);
	loop_del(l, p[1]);
	assert_int_equal(loop_run_once(l, 0), 0);
	assert_int_equal(w.calls, 1);
	assert_int_equal(loop_mod(l, p[1], EPOLLOUT), -ENOENT);
	/* watched again after the del */
	assert_int_equal(loop_add(l, p[1], EPOLLOUT, on_event, &w), 0);
	assert_int_equal(loop_run_once(l, 0), 1);
	assert_int_equal(w.calls, 2);
	loop_free(l);
	close(p[0]);
	close(p[1]);
}

/*
 * Two fds ready in one batch, the first handler deletes the second: its event is dropped.
 * Then the first handler deletes the second and gives its number to a new pipe: the old event
 * must not reach the new registration either.
 */
static void test_stale_events_dropped(void **state)
{
	struct loop *l;
	struct probe a, b, c;
	int pa[2], pb[2], pc[2];

	for (int round = 0; round < 2; round++) {
		assert_int_equal(loop_new(&l), 0);
		make_pipe(pa);
		make_pipe(pb);
		make_pipe(pc);
		probe_init(&a, l, pa[0]);
		probe_init(&b, l, pb[0]);
		probe_init(&c, l, pb[0]);
		assert_int_equal(loop_add(l, pa[0], EPOLLIN, on_event, &a), 0);
		assert_int_equal(loop_add(l, pb[0], EPOLLIN, on_event, &b), 0);
		assert_int_equal(write(pa[1], "x", 1), 1);
		assert_int_equal(write(pb[1], "x", 1), 1);
		/* whichever runs first deletes the other */
		a.del_fd[1] = pb[0];
		b.del_fd[1] = pa[0];
		if (round == 1) {
			/* c's pipe (empty) takes the deleted number: no event for it yet */
			a.reuse_src = pc[0];
			a.reuse_with = &c;
			b.reuse_src = -1;
		}
		assert_int_equal(loop_run_once(l, 1000), 1);
		assert_int_equal(a.calls + b.calls, 1);
		assert_int_equal(c.calls, 0);
		if (round == 1 && a.calls) {
			/* the new registration works: c's pipe readable, under b's old number */
			assert_int_equal(write(pc[1], "y", 1), 1);
			assert_int_equal(loop_run_once(l, 1000), 2); /* a still readable too */
			assert_int_equal(c.calls, 1);
		}
		loop_free(l);
		for (int i = 0; i < 2; i++) {
			close(pa[i]);
			close(pb[i]);
			close(pc[i]);
		}
	}
}

/* An fd closed without loop_del: its number can be watched again. */
static void test_closed_without_del(void **state)
{
	struct loop *l;
	struct probe a, b;
	int p[2], q[2], n;

	assert_int_equal(loop_new(&l), 0);
	make_pipe(p);
	probe_init(&a, l, p[0]);
	assert_int_equal(loop_add(l, p[0], EPOLLIN, on_event, &a), 0);
	n = p[0];
	close(p[0]);
	make_pipe(q);
	assert_int_equal(q[0], n);
	probe_init(&b, l, q[0]);
	assert_int_equal(loop_add(l, q[0], EPOLLIN, on_event, &b), 0);
	assert_int_equal(write(q[1], "x", 1), 1);
	assert_int_equal(loop_run_once(l, 1000), 1);
	assert_int_equal(a.calls, 0);
	assert_int_equal(b.calls, 1);
	loop_free(l);
	close(p[1]);
	close(q[0]);
	close(q[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_dispatch_by_fd),
	    cmocka_unit_test(test_mod_and_del),
	    cmocka_unit_test(test_stale_events_dropped),
	    cmocka_unit_test(test_closed_without_del),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
