/* SPDX-License-Identifier: MIT */
/*
 * Optional services of the agent (agent/hooks.c): the accounting spool, its syncer and
 * uploader, the Prometheus /metrics endpoint. Each registers its descriptors with the loop.
 */
#pragma once

#include <stdint.h>

struct agent;
struct agent_config;

int agent_hooks_init(struct agent *a);
void agent_hooks_tick(struct agent *a, uint64_t now);
/*
 * SIGHUP with changed [collector] settings: an uploader of nc's settings (its token file read
 * and checked now: -errno after a message, the running uploader kept) takes the spool over
 * once the running one has no batch in flight (it starts no new one meanwhile), so no batch
 * the collector may have committed is cut short; what is not acked is sent again by the new
 * one under the same record ids. nc without a url: no uploader after that batch.
 */
int agent_upl_reload(struct agent *a, const struct agent_config *nc);
/* Tolerates a partial agent_hooks_init. */
void agent_hooks_fini(struct agent *a);
