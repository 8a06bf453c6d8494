/* SPDX-License-Identifier: MIT */
/* The launch spawner's supervision (see spawner.h). */
#include "agent/spawner.h"
#include "agent/agent.h"
#include "agent/log.h"
#include "common/clock.h"
#include "common/macro.h"
#include "isolation/launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* corral-spawn beside corrald (build tree) or in ../lib/corral (installed), or NULL. */
static char *find_spawner(void)
{
	static const char *const rel[] = {"corral-spawn", "../lib/corral/corral-spawn"};
	char exe[4096], *slash, path[4200];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		return NULL;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = 0;
	for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
		snprintf(path, sizeof(path), "%s/%s", exe, rel[i]);
		if (access(path, X_OK) == 0)
			return strdup(path);
	}
	return NULL;
}

void agent_spawner_start(struct agent *a)
{
	int r;

	if (!a->spawner_path) {
		a->spawner_path = find_spawner();
		if (!a->spawner_path) {
			log_notice("corral-spawn not found beside corrald: the agent forks the "
				   "task supervisors itself (slower launches)");
			return;
		}
	}
	r = launch_spawner_start(a->spawner_path, &a->spawner);
	if (r < 0) {
		a->spawner = NULL;
		log_warning("starting the launch spawner %s failed: %s", a->spawner_path,
			    strerror(-r));
		return;
	}
	log_info("launch spawner %s started (pid %d)", a->spawner_path,
		 (int)launch_spawner_pid(a->spawner));
}

/*
 * The shim is forked by the spawner when there is one. A spawner that is gone is restarted
 * (at most every 5 s: no loop of failing spawners); whatever fails then, the agent forks
 * this shim itself.
 */
int agent_spawn_shim(struct agent *a, const struct launch_plan *plan, struct launch_handle *h)
{
	uint64_t now;
	int r;

	for (int attempt = 0; a->spawner && attempt < 2; attempt++) {
		r = launch_spawn_via(a->spawner, plan, h);
		if (r >= 0)
			return r;
		if (r != -EPIPE && r != -ECONNRESET && r != -ENOTCONN && r != -ECONNREFUSED) {
			/* not the spawner's fault (a plan too large, fds, memory) */
			log_info("launch spawner not used for this task: %s; the agent forks its "
				 "supervisor",
				 strerror(-r));
			break;
		}
		log_warning("launch spawner (pid %d) is gone: %s; restarting it",
			    (int)launch_spawner_pid(a->spawner), strerror(-r));
		launch_spawner_free(a->spawner);
		a->spawner = NULL;
		now = now_ns(CLOCK_MONOTONIC);
		if (!a->spawner_restarted_mono ||
		    now - a->spawner_restarted_mono >= 5 * NSEC_PER_SEC) {
			a->spawner_restarted_mono = now;
			agent_spawner_start(a);
		}
	}
	return launch_spawn(plan, h);
}
