/* SPDX-License-Identifier: MIT */
/*
 * Task cgroups made and removed off the launch path. Making a task's cgroup (a mkdir and
 * three opens in each of four or more hierarchies on a v1 host) and removing an ended task's
 * were about 40% of the agent's own work per launch. Both now run when the loop has nothing
 * else to do (agent_idle_work, called when epoll finds no event):
 *  - a pool of up to CG_POOL_MAX fresh, empty cgroups, made like the last launch's limits, of
 *    which a launch takes one (cg_task_apply writes its limits and makes any directory its
 *    limits need beyond the pool's). A cgroup is never reused: each one serves one task.
 *  - ended tasks' cgroups queue for removal; past CG_REAP_MAX waiting they are removed at
 *    once, so a loop that is never idle cannot pile them up.
 * Pool cgroups are named t-0-<agent start, hex>-<n, hex>: no task id starts with "t-0-", and
 * the start-up sweep of orphaned task cgroups removes them after a crash.
 */
#include "agent/agent.h"
#include "agent/log.h"
#include "common/util.h"
#include "isolation/cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int agent_cg_take(struct agent *a, const struct cg_limits *lim, char **cg_name,
		  struct cg_task **ret)
{
	int r;

	a->cg_pool_like = *lim;
	a->cg_pool_on = true;
	while (a->n_cg_pool > 0) {
		struct cg_task *cg = a->cg_pool[--a->n_cg_pool];
		char *name;

		if (!cg_task_fits(cg, lim)) { /* made for other limits: not for this task */
			agent_cg_release(a, cg);
			continue;
		}
		name = strdup(cg_task_name(cg));
		r = name ? cg_task_apply(cg, lim) : -ENOMEM;
		if (r < 0) {
			free(name);
			agent_cg_release(a, cg);
			return r;
		}
		free(*cg_name);
		*cg_name = name;
		*ret = cg;
		a->stats.cg_pool_hits++;
		return 0;
	}
	return cg_task_create(a->cg, *cg_name, lim, ret);
}

static void destroy(struct cg_task *cg)
{
	int r = cg_task_destroy(cg);

	if (r < 0)
		log_warning("removing cgroup %s failed: %s", cg_task_path(cg), strerror(-r));
	cg_task_free(cg);
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

bool agent_has_idle_work(const struct agent *a)
{
	return a->n_cg_reap > 0 || (a->cg_pool_on && a->n_cg_pool < CG_POOL_MAX);
}

void agent_idle_work(struct agent *a)
{
	char name[64];
	int r;

	if (a->n_cg_reap > 0) {
		destroy(a->cg_reap[--a->n_cg_reap]);
		return;
	}
	if (!a->cg_pool_on || a->n_cg_pool >= CG_POOL_MAX)
		return;
	if (!a->cg_pool_epoch)
		a->cg_pool_epoch = now_ns(CLOCK_REALTIME) / NSEC_PER_SEC;
	snprintf(name, sizeof(name), "t-0-%llx-%llx", (unsigned long long)a->cg_pool_epoch,
		 (unsigned long long)++a->cg_pool_seq);
	r = cg_task_precreate(a->cg, name, &a->cg_pool_like, &a->cg_pool[a->n_cg_pool]);
	if (r < 0) {
		/* launches make their own; try again after the next one */
		log_warning("preparing a task cgroup failed: %s", strerror(-r));
		a->cg_pool_on = false;
		return;
	}
	a->n_cg_pool++;
}

void agent_cg_pool_fini(struct agent *a)
{
	while (a->n_cg_reap > 0)
		destroy(a->cg_reap[--a->n_cg_reap]);
	while (a->n_cg_pool > 0)
		destroy(a->cg_pool[--a->n_cg_pool]);
	a->cg_pool_on = false;
}
