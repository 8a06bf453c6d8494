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
	/* metering: MEMBER_* */
	__u32 flags;
	__u32 _pad;
};

/*
 * Accounting at exit: the process's threads were all created inside its task (its first
 * process, or a child forked there), so a new thread needs no entry of its own: it starts at
 * zero and its exit folds its whole totals (bpf/meter.bpf.c, "bare threads"). Not set for a
 * re-adopted process, whose threads may have run before.
 */
#define MEMBER_BARE_THREADS 1U
