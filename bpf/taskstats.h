/* SPDX-License-Identifier: MIT */
/*
 * Taskstats (genetlink "TASKSTATS", via libnl-genl-3): the fallback meter when the BPF programs
 * cannot be loaded. Two uses:
 *  - queries: the current totals of a live thread (pid) or process (tgid);
 *  - an exit listener: the kernel sends one record per exiting THREAD (and, for processes that
 *    had more than one thread, a per-tgid record that carries delay accounting only). A
 *    process's totals are the sum of its threads' exit records (group them by tgid).
 * What it gives: CPU user/system (tick-sampled, usec), exact on-CPU time (cpu_run_virtual_total),
 * read/write bytes passed to syscalls (rchar/wchar), block bytes (read_bytes/write_bytes),
 * RSS and VM high-water per process (KiB), context switches, delays, exit code, elapsed time.
 * What it cannot give: network bytes, a task-wide RSS sum over processes or memory integral,
 * and anything of a process that exited while no listener was registered. Records can be lost
 * when the socket overflows: counted in taskstats_listener_overruns().
 * Needs CAP_NET_ADMIN. Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct taskstats_usage {
	uint32_t pid;  /* thread id (pid records), or tgid (tgid records) */
	uint32_t tgid; /* thread group (kernel version >= 12 records), else 0 */
	uint32_t ppid;
	bool is_tgid;	    /* a per-process record (query_tgid, or tgid exit record) */
	uint32_t exit_code; /* ac_exitcode (exit records) */
	uint64_t cpu_user_ns, cpu_system_ns; /* ac_utime / ac_stime (usec resolution) */
	uint64_t cpu_exec_ns; /* cpu_run_virtual_total: se.sum_exec_runtime, exact on-CPU time */
	uint64_t cpu_run_real_ns;	  /* cpu_run_real_total: utime + stime (tick-sampled) */
	uint64_t read_chars, write_chars; /* rchar / wchar */
	uint64_t read_syscalls, write_syscalls;
	uint64_t blk_read_bytes, blk_write_bytes, cancelled_write_bytes;
	uint64_t hiwater_rss_bytes, hiwater_vm_bytes;
	uint64_t nvcsw, nivcsw;
	uint64_t elapsed_ns; /* ac_etime */
	uint64_t cpu_delay_ns, blkio_delay_ns;
};

struct taskstats_client;

int taskstats_open(struct taskstats_client **ret);
void taskstats_free(struct taskstats_client *c);
/* Totals of a live thread / a live process (the kernel sums its threads). */
int taskstats_query_pid(struct taskstats_client *c, pid_t pid, struct taskstats_usage *ret);
int taskstats_query_tgid(struct taskstats_client *c, pid_t tgid, struct taskstats_usage *ret);

struct taskstats_listener;
typedef void (*taskstats_exit_fn)(const struct taskstats_usage *u, void *userdata);

/* Registers for exit records on every possible CPU. */
int taskstats_listener_open(struct taskstats_listener **ret);
void taskstats_listener_free(struct taskstats_listener *l);
/* Non-blocking fd: call taskstats_listener_poll when readable. */
int taskstats_listener_fd(const struct taskstats_listener *l);
int taskstats_listener_poll(struct taskstats_listener *l, taskstats_exit_fn fn, void *userdata);
/* Times the kernel dropped records (ENOBUFS on the socket). */
uint64_t taskstats_listener_overruns(const struct taskstats_listener *l);
