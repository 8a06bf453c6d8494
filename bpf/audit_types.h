/* SPDX-License-Identifier: MIT */
/*
 * Types shared by bpf/audit.bpf.c and its loader bpf/audit.c. Not a wire format: fixed-width
 * __u8/__u16/__u32/__u64 only, one layout for both sides of the same build.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Compile-time capacities of the kernel side (the loader bounds the options by them). */
#define AUDIT_ARGV_CAP	     8192 /* bytes of argv an exec event can carry (power of two) */
#define AUDIT_PATH_CAP	     256  /* bytes of the executed file name */
#define AUDIT_CWD_DEPTH	     12	  /* path components of the working directory */
#define AUDIT_CWD_NAME_CAP   64	  /* bytes per component */
#define AUDIT_MAX_RULES	     32	  /* network rules per task */
#define AUDIT_MAX_NODE_ADDRS 64	  /* local addresses of the node the policy knows */

enum {
	AUDIT_BPF_EV_EXEC = 1,
	AUDIT_BPF_EV_NET = 2,
};

/* audit_bpf_head.flags */
enum {
	/* past the task's record budget, delivered as one of the period's sample (the agent
	 * counts it into the task's audit.summary, not as a record of its own) */
	AUDIT_BPF_F_OVER = 1,
};

enum {
	AUDIT_BPF_ALLOW = 1,
	AUDIT_BPF_DENY = 2,
};

enum {
	AUDIT_BPF_OP_CONNECT = 1,
	AUDIT_BPF_OP_SENDMSG = 2,
};

/* Per-task entry (map "tasks", key: __u64 task_key). Written by BPF (atomics) once created. */
struct audit_task {
	__u64 lost; /* events not delivered: ring buffer full (atomic adds) */
	__u64 events;
	/* "procs" entries pointing to the task: set to 1 by user space with the first one, then
	 * kept by BPF (whoever creates or deletes an entry); audit_forget sweeps only if not 0 */
	__s64 procs_alive;
	/* Record budget (GCRA): the theoretical arrival time of the next event, ktime ns. An
	 * event is within the budget when tat - now <= budget.tau_ns; it moves tat on by
	 * budget.interval_ns. Set by user space at creation (a full bucket: 0; restored: later). */
	__u64 tat;
	/* events past the budget counted here instead of being sent (sampled ones not included) */
	__u64 over_exec, over_net_allow, over_net_deny;
	/* over-budget events delivered in the current sample period (AUDIT_BPF_F_OVER) */
	__u64 sample_period, sample_used;
};

/*
 * Per-task record budget (map "budgets", key: __u64 task_key). Written by user space only, as
 * a whole; read by BPF. No entry: no budget in the kernel (every event is sent).
 */
struct audit_bpf_budget {
	__u64 interval_ns;	/* 1e9 / rate: ns per token; 0 = no rate bound */
	__u64 tau_ns;		/* (burst - 1) * interval_ns */
	__u64 sample_period_ns; /* 0 = no sample */
	__u32 sample_max;	/* over-budget events delivered per sample period */
	__u32 closed;		/* 1: every event is past the budget (its bytes are spent) */
};

/* One network rule. Address and mask in network byte order; port in host order, 0 = any. */
struct audit_bpf_rule {
	__u32 addr[4];
	__u32 mask[4];
	__u8 family; /* 4 or 6 */
	__u8 action; /* AUDIT_BPF_ALLOW | AUDIT_BPF_DENY */
	__u16 port;
};

/* A local address of the node (.bss node_addrs[], written by user space). */
struct audit_bpf_addr {
	__u32 addr[4]; /* network byte order; IPv4 in addr[0] */
	__u32 family;  /* 4 or 6 */
};

/* Per-task network policy (map "policies", key: __u64 task_key). */
struct audit_bpf_policy {
	__u32 n_rules;
	__u32 default_action;
	struct audit_bpf_rule rules[AUDIT_MAX_RULES];
};

/* Common head of every ring buffer record. */
struct audit_bpf_head {
	__u16 type;
	__u16 flags; /* AUDIT_BPF_F_* */
	__u32 pid;
	__u64 task_key;
	__u64 ktime_ns; /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
};

/*
 * Exec record: fixed part, then argv_len bytes of argv (NUL-separated, as in
 * /proc/PID/cmdline). The record is emitted with only the argv bytes used.
 */
struct audit_bpf_exec {
	struct audit_bpf_head h;
	__u32 ppid;
	__u32 uid;
	__u32 gid;
	__u32 argv_len;	  /* bytes of argv that follow */
	__u32 argv_total; /* arg_end - arg_start: > argv_len means truncated */
	__u32 cwd_depth;  /* components filled, innermost first */
	__u32 cwd_truncated;
	__u32 _pad;
	char path[AUDIT_PATH_CAP];
	char cwd[AUDIT_CWD_DEPTH][AUDIT_CWD_NAME_CAP];
	char argv[AUDIT_ARGV_CAP];
};

/* Network decision record. */
struct audit_bpf_net {
	struct audit_bpf_head h;
	__u32 addr[4]; /* network byte order; IPv4 in addr[0] */
	__u16 port;    /* host order */
	__u8 family;   /* 4 or 6 */
	__u8 protocol; /* IPPROTO_TCP / IPPROTO_UDP / other */
	__u8 verdict;  /* AUDIT_BPF_ALLOW | AUDIT_BPF_DENY */
	__u8 op;       /* AUDIT_BPF_OP_CONNECT | AUDIT_BPF_OP_SENDMSG */
	__u8 rule;     /* index of the matching rule + 1, 0 = no rule matched */
	__u8 _pad[5];
};
