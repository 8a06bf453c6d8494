/* SPDX-License-Identifier: MIT */
/* The table of meters (agent/meters.h). */
#include "agent/meters.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The audit meter first: a task whose network policy cannot be attached is refused before
 * anything else tracks it, and at the end its denied calls are read before the BPF figures
 * are settled. Then eBPF, its taskstats fallback, the GPUs. */
const struct meter_ops *const agent_meters[] = {
    &meter_audit_ops, &meter_ebpf_ops, &meter_taskstats_ops, &meter_gpu_ops, NULL,
};

int meters_prepare(struct agent *a, struct task *t, struct meter_launch *ml, char *err,
		   size_t errlen)
{
	size_t i;
	int r = 0;

	for (i = 0; agent_meters[i]; i++) {
		if (!agent_meters[i]->prepare)
			continue;
		if (errlen)
			err[0] = 0;
		r = agent_meters[i]->prepare(a, t, ml, err, errlen);
		if (r < 0)
			break;
	}
	if (r >= 0)
		return 0;
	if (errlen && !err[0])
		snprintf(err, errlen, "%s: %s", agent_meters[i]->name, strerror(-r));
	while (i-- > 0)
		if (agent_meters[i]->unprepare)
			agent_meters[i]->unprepare(a, t);
	return r;
}

void meters_unprepare(struct agent *a, struct task *t)
{
	size_t n = 0;

	while (agent_meters[n])
		n++;
	while (n-- > 0)
		if (agent_meters[n]->unprepare)
			agent_meters[n]->unprepare(a, t);
}
