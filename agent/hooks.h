/* SPDX-License-Identifier: MIT */
/*
 * Optional services of the agent (agent/hooks.c): the accounting spool, its syncer and
 * uploader, the Prometheus /metrics endpoint. Each registers its descriptors with the loop.
 */
#pragma once

#include <stdint.h>

struct agent;

int agent_hooks_init(struct agent *a);
void agent_hooks_tick(struct agent *a, uint64_t now);
/* Tolerates a partial agent_hooks_init. */
void agent_hooks_fini(struct agent *a);
