/* SPDX-License-Identifier: MIT */
/*
 * The task membership map "procs" (key: __u32 TGID), one for the metering and audit programs:
 * bpf/meter.bpf.c's fork and exit programs keep it (a child inherits its parent's entry, the
 * entry goes when the process's last thread exits) and the audit object uses the same map
 * (bpf_map__reuse_fd) instead of fork and exit programs of its own. Not a wire format.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

struct member {
	__u64 task_key;
	__u64 mm; /* metering: last mm seen for this process (rss_stat curr) */
	/* metering: the task's struct meter_slot; gen 0 = a member the meter does not account
	 * (a process the audit trail added on its own: audit_track without meter_track) */
	__u32 slot, gen;
};
