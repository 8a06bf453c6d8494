// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * An empty sched_switch program, for tests/bench/metering_overhead.sh only: what any program on
 * sched_switch costs on the running kernel (the tracepoint's dispatch to BPF), measured beside
 * the metering programs so that their own share can be told apart. Never loaded by corrald.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_btf_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(floor_raw_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return 0;
}
