/* SPDX-License-Identifier: MIT */
/* The taskstats fallback meter when BPF is not loaded (agent/taskstats_glue.c); its meter ops
 * are meter_taskstats_ops (agent/meters.h). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct agent;

int tsglue_init(struct agent *a);
void tsglue_fini(struct agent *a);
bool tsglue_active(const struct agent *a);
void tsglue_stats(const struct agent *a, uint64_t *ret_overruns, uint64_t *ret_unmatched);
