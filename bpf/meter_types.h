/* SPDX-License-Identifier: MIT */
/*
 * Types shared by bpf/meter.bpf.c and its loader bpf/meter.c. Not a wire format: fixed-width
 * __u32/__u64 only, one layout for both sides of the same build.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "bpf/member_types.h"

/*
 * Per-task counters kept in the hash map "tasks" (key: __u64 task_key), updated with atomics in
 * BPF: memory, lifetime and the rarer events. The counters of the sched_switch path are in
 * struct meter_slot instead.
 */
struct meter_task {
	__s64 rss_bytes; /* current sum of RSS of all processes of the task */
	__u64 rss_peak_bytes;
	__u64 mem_ts;	  /* bpf_ktime_get_ns() of the last RSS change */
	__u64 mem_kib_us; /* integral of RSS, KiB * us, carried into mem_kib_s */
	__u64 mem_kib_s;
	__u64 io_read_bytes; /* sys_exit mode only (io_from_syscalls); else in struct meter_slot */
	__u64 io_write_bytes;
	__u64 rq_read_bytes; /* block_rq_issue from a tracked task's context */
	__u64 rq_write_bytes;
	__u64 forks;
	__s64 procs_alive;
	__u64 root_tgid;      /* first process (meter_track) */
	__s64 root_exit_code; /* its wait status once it exited, else -1 */
	__u64 root_exited;
	__s64 mms_alive; /* entries of "mms" owned by the task (meter_forget sweeps only then) */
	/* cpu_at_exit mode: threads with an entry whose final totals are not folded in yet
	 * (+1 when an entry is made, -1 by whoever folds its final totals first). */
	__s64 threads_live;
	/* Threads of the task whose CPU and IO are not all in its slot: no entry could be made
	 * for them (a full map), or their tail after the exit tracepoint was dropped ("dying"
	 * full). Non-zero: the task's eBPF CPU figure is short, the agent uses its cgroup's. */
	__u64 threads_lost;
	/* The task's slot (set by user space): the index of its mark in "dirty". */
	__u32 slot;
	__u32 _pad;
};

/*
 * Per-CPU counters of one task (map "slots", BPF_MAP_TYPE_PERCPU_ARRAY, index: the task's slot),
 * added with plain stores by the CPU that switches a thread out (or runs its exit). User space
 * sums the CPUs. gen is the slot's generation, written by user space on all CPUs when it gives
 * the slot to a task (0: free); a thread whose gen differs belongs to a forgotten task.
 */
struct meter_slot {
	__u64 gen;
	__u64 cpu_ns;	      /* on-CPU time: se.sum_exec_runtime deltas at sched_switch */
	__u64 utime_ticks_ns; /* sum of task->utime deltas seen at switch-out (for the ratio) */
	__u64 stime_ticks_ns;
	__u64 io_read_bytes; /* task->ioac.rchar / wchar deltas */
	__u64 io_write_bytes;
	__u64 blk_read_bytes; /* task->ioac.read_bytes / write_bytes - cancelled_write_bytes */
	__u64 blk_write_bytes;
	__u64 blk_cancelled_bytes;
	/*
	 * Accounting at every switch: threads of the task past their exit tracepoint whose last
	 * switch-out has not been folded yet (+1 by the CPU that runs the exit, -1 by the one
	 * that runs that switch-out: only the sum over the CPUs means something).
	 */
	__s64 exiting;
};

/* Per-process entry: struct member of the membership map "procs" (member_types.h). */

/* Per-thread entry: task storage "tstore" (tp_btf) or map "threads", key: __u32 tid (raw_tp). */
struct meter_thread {
	__u64 task_key;
	__u32 slot, gen; /* the task's struct meter_slot */
	__u64 sum_exec;	 /* task->se.sum_exec_runtime when last accounted */
	__u64 utime;	 /* task->utime / stime at the last switch-out */
	__u64 stime;
	__u64 rchar, wchar, read_bytes, write_bytes, cancelled; /* task->ioac, same */
	__u64 flags;						/* METER_TH_* */
	__u64 mm; /* tp_btf: the process's mm at this thread's last rss_stat (its fast path) */
	/*
	 * tp_btf: the values of that mm's counters (rss_stat members 0, 1, 3) this thread last
	 * read and wrote to the mm's entry; -1 until it has. An own change that leaves its member
	 * at this value stops here, without the "mms" lookup (see rss_fast).
	 */
	__s64 rss_seen[3];
};

/* Entry made by user space (meter_track): take the totals at the next switch-in. */
#define METER_TH_NEED_BASE 1ULL
/* cpu_at_exit mode: the thread's final totals are folded in (after its last switch-out). */
#define METER_TH_FINAL 2ULL
/* tp_btf: the exit of the thread's process released the entry of its mm (th->mm): the
 * teardown that follows is not looked up. */
#define METER_TH_MM_GONE 4ULL
/* Accounting at every switch: the thread's exit counted it in its slot's "exiting". */
#define METER_TH_EXITING 8ULL
/* Accounting at exit: the thread's process is MEMBER_BARE_THREADS (its new threads get no
 * entry), copied here so that a thread's creation needs no "procs" lookup. */
#define METER_TH_BARE_KIDS 16ULL
/*
 * Accounting at exit: an entry a live read made for a thread without one (a bare thread, or
 * a forked process's main thread, which gets none at its fork) and has not taken over yet:
 * every fold treats it as absent until the live read clears the flag (compare-and-swap, once
 * it has seen that the thread's exit has not begun) or the thread's final fold sets
 * METER_TH_FINAL over it (then the thread is folded whole, as a bare one). See walk_bare.
 */
#define METER_TH_NEW 32ULL

/*
 * cpu_at_exit mode: a thread that passed sched_process_exit but may not have switched out for
 * the last time yet (map "dying", key: the task_struct address). The reference keeps the
 * task_struct readable until meter_settle folds its final totals.
 */
#ifdef __VMLINUX_H__
struct meter_dying {
	__u64 task_key;
	struct task_struct __kptr *task;
	/* a bare thread (no entry of its own): its task's slot and generation; gen 0 otherwise */
	__u32 slot, gen;
};
#endif

/* Context of the meter_settle program (BPF_PROG_RUN). Its caller reads the outcome from the
 * task's threads_live. */
struct meter_settle_ctx {
	__u64 task_key;
	__u32 force; /* drop the task's references whether their threads are done or not */
	__u32
	    all; /* every task's threads that are done (the periodic drain), not only task_key's */
	__u32 live; /* with all: fold the others (exited, not off their CPU yet) up to now too */
	__u32 _pad;
};

/* Per-mm entry (map "mms", key: __u64 mm address). Pages per rss_stat member. */
struct meter_mm {
	__u64 task_key;
	__s64 pages[4];
};

/* Per-cgroup network counters (map "net", key: __u64 cgroup id). */
struct meter_net {
	__u64 rx_bytes;
	__u64 rx_packets;
	__u64 tx_bytes;
	__u64 tx_packets;
	__u32 slot; /* the task's slot (set by user space): its mark in "dirty" */
	__u32 _pad;
};

enum {
	METER_BPF_EV_EXIT = 1,
	METER_BPF_EV_SETTLED = 2, /* cpu_at_exit: the task's last thread got its final figures */
	METER_BPF_EV_DRAIN = 3,	  /* cpu_at_exit: "dying" is filling up, drain it now */
	/* the kernel's OOM killer chose a member process (pid: its TGID, exit_code: the
	 * thread the tracepoint named) */
	METER_BPF_EV_OOM_VICTIM = 4,
};

/* Ring buffer record. */
struct meter_bpf_event {
	__u32 type;
	__u32 pid;
	__u64 task_key;
	__s32 exit_code;
	__u32 _pad;
};
