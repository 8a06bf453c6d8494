/* SPDX-License-Identifier: MIT */
/* Optional services of the agent: accounting spool + uploader, Prometheus metrics. */
#include "agent/agent.h"
#include "agent/log.h"
#include "accounting/spool.h"
#include "common/macro.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int agent_hooks_init(struct agent *a);
void agent_hooks_tick(struct agent *a, uint64_t now);
void agent_hooks_event(struct agent *a, struct watch *w, uint32_t events);
void agent_hooks_fini(struct agent *a);

int agent_hooks_init(struct agent *a)
{
	char dir[512];
	struct spool_opts so = { 0 };
	int r;

	if (!a->cfg.collector_url)
		return 0;
	snprintf(dir, sizeof(dir), "%s/spool", a->cfg.state_dir);
	so.dir = dir;
	so.max_bytes = a->cfg.spool_max_bytes;
	r = spool_open(&so, &a->spool);
	if (r < 0) {
		log_error("spool %s: %s", dir, strerror(-r));
		return r;
	}
	return 0;
}

void agent_hooks_tick(struct agent *a, uint64_t now)
{
	(void)a;
	(void)now;
}

void agent_hooks_event(struct agent *a, struct watch *w, uint32_t events)
{
	(void)a;
	(void)w;
	(void)events;
}

void agent_hooks_fini(struct agent *a)
{
	if (a->spool)
		spool_close(a->spool);
	a->spool = NULL;
}
