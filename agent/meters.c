/* SPDX-License-Identifier: MIT */
/* The table of meters (agent/meters.h). */
#include "agent/meters.h"

#include <stddef.h>

/* The audit meter first: a task whose network policy cannot be attached is refused before
 * anything else tracks it, and at the end its denied calls are read before the BPF figures
 * are settled. Then eBPF, its taskstats fallback, the GPUs. */
const struct meter_ops *const agent_meters[] = {
    &meter_audit_ops, &meter_ebpf_ops, &meter_taskstats_ops, &meter_gpu_ops, NULL,
};
