/* SPDX-License-Identifier: MIT */
/*
 * Supervision of the launch spawner (corral-spawn): found beside corrald, started once,
 * restarted when gone; the shims it forks, or the agent forks them itself.
 */
#pragma once

struct agent;
struct launch_plan;
struct launch_handle;

/* Start the launch spawner, if corral-spawn is installed (restarts: see agent_spawn_shim). */
void agent_spawner_start(struct agent *a);
/*
 * Fork the shim of a launch: by the spawner when there is one. A spawner that is gone is
 * restarted (at most every 5 s: no loop of failing spawners); whatever fails then, the agent
 * forks this shim itself.
 */
int agent_spawn_shim(struct agent *a, const struct launch_plan *plan, struct launch_handle *h);
