/* SPDX-License-Identifier: MIT */
/*
 * Task cgroups made and removed off the launch path. Making a task's cgroup (a mkdir and
 * three opens in each of four or more hierarchies on a v1 host) and removing an ended task's
 * were about 40% of the agent's own work per launch. Both now run when the loop has nothing
 * else to do (agent_idle_work, called when epoll finds no event):
 *  - a pool of up to CG_POOL_MAX fresh, empty cgroups, made like the last launch's limits.
 *    Each is made for a task id reserved with it (t-<time>-<seq>, the cgroup named after it,
 *    as every task's is), and a launch takes the oldest one together with its id;
 *    cg_task_apply then writes the task's limits. A cgroup is never reused: each serves one
 *    task. One older than CG_POOL_MAX_AGE_S is replaced, so an id's time stays close to its
 *    task's start.
 *  - ended tasks' cgroups queue for removal; past CG_REAP_MAX waiting they are removed at
 *    once, so a loop that is never idle cannot pile them up.
 * Each idle step makes or removes one directory (one hierarchy), and no step starts while a
 * launch waits for its child's pid: a whole cgroup's worth (several hierarchies on v1) held
 * the loop long enough to delay the pid line and so the child's go.
 * After a crash the start-up sweep of orphaned task cgroups removes the pool's.
 */
#include "agent/agent.h"
#include "agent/log.h"
#include "agent/state.h"
#include "agent/cgpool.h"
#include "common/clock.h"
#include "isolation/cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CG_POOL_MAX_AGE_S 60

static void destroy(struct cg_task *cg)
{
	int r = cg_task_destroy(cg);

	if (r < 0)
		log_warning("removing cgroup %s failed: %s", cg_task_path(cg), strerror(-r));
	cg_task_free(cg);
}

/* Takes the oldest ready cgroup out of the pool. */
static struct cg_pool_entry pool_shift(struct agent *a)
{
	struct cg_pool_entry e = a->cg_pool[0];

	memmove(&a->cg_pool[0], &a->cg_pool[1], (a->n_cg_pool - 1) * sizeof(a->cg_pool[0]));
	a->n_cg_pool--;
	return e;
}

bool agent_cg_pool_take(struct agent *a, const struct cg_limits *lim, uint64_t *key, char *id,
			size_t idlen, struct cg_task **ret)
{
	a->cg_pool_like = *lim;
	a->cg_pool_on = true;
	while (a->n_cg_pool > 0) {
		struct cg_pool_entry e = pool_shift(a);

		if (!cg_task_fits(e.cg, lim)) { /* made for other limits */
			agent_cg_release(a, e.cg);
			continue;
		}
		*ret = e.cg;
		*key = e.key;
		snprintf(id, idlen, "%s", cg_task_name(e.cg));
		a->stats.cg_pool_hits++;
		return true;
	}
	return false;
}

void agent_cg_release(struct agent *a, struct cg_task *cg)
{
	if (!cg)
		return;
	if (a->n_cg_reap == CG_REAP_MAX) {
		destroy(cg);
		return;
	}
	a->cg_reap[a->n_cg_reap++] = cg;
}

static bool pool_stale(const struct agent *a, uint64_t now)
{
	return a->n_cg_pool > 0 && now - a->cg_pool[0].made_mono > CG_POOL_MAX_AGE_S * NSEC_PER_SEC;
}

bool agent_has_idle_work(const struct agent *a)
{
	if (a->n_pid_wait > 0)
		return false;
	return a->n_cg_reap > 0 || a->cg_next.cg || (a->cg_pool_on && a->n_cg_pool < CG_POOL_MAX) ||
	       pool_stale(a, now_ns(CLOCK_MONOTONIC));
}

/* One directory of the last queued ended cgroup. */
static void reap_step(struct agent *a)
{
	struct cg_task *cg = a->cg_reap[a->n_cg_reap - 1];
	int r = cg_task_destroy_step(cg);

	if (r > 0)
		return;
	a->n_cg_reap--;
	if (r < 0)
		destroy(cg); /* retries what is left, and says what failed */
	else
		cg_task_free(cg);
}

/* One directory of the next pool cgroup, begun if there is none. */
static void build_step(struct agent *a, uint64_t now)
{
	struct cg_pool_entry *e = &a->cg_next;
	char name[64];
	int r;

	if (!e->cg) {
		e->key = state_next_task_id(a, name, sizeof(name));
		r = cg_task_precreate_begin(a->cg, name, &a->cg_pool_like, &e->cg);
		if (r < 0)
			goto fail;
		e->made_mono = now;
	}
	r = cg_task_precreate_step(e->cg);
	if (r > 0)
		return;
	if (r < 0) {
		destroy(e->cg);
		e->cg = NULL;
		goto fail;
	}
	a->cg_pool[a->n_cg_pool++] = *e;
	e->cg = NULL;
	return;
fail:
	/* launches make their own; try again after the next one */
	log_warning("preparing a task cgroup failed: %s", strerror(-r));
	a->cg_pool_on = false;
}

void agent_idle_work(struct agent *a)
{
	uint64_t now = now_ns(CLOCK_MONOTONIC);

	if (pool_stale(a, now))
		agent_cg_release(a, pool_shift(a).cg); /* its id would say an old time */
	if (a->n_cg_reap > 0)
		reap_step(a);
	else if (a->cg_next.cg || (a->cg_pool_on && a->n_cg_pool < CG_POOL_MAX))
		build_step(a, now);
}

void agent_cg_pool_fini(struct agent *a)
{
	while (a->n_cg_reap > 0)
		destroy(a->cg_reap[--a->n_cg_reap]);
	while (a->n_cg_pool > 0)
		destroy(a->cg_pool[--a->n_cg_pool].cg);
	if (a->cg_next.cg)
		destroy(a->cg_next.cg);
	a->cg_next.cg = NULL;
	a->cg_pool_on = false;
}
